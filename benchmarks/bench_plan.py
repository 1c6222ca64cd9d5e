"""The planner, cold: a fresh interpreter per repetition, on real problem sizes (thousands of layouts).

Two figures per problem: the plan itself (load the preset and plan, timed inside the child
after its imports: every expression built and compiled from nothing) against the goal of
0.5 s; and the whole command against `import sympy` (the interpreter and imports included).

    python benchmarks/bench_plan.py [REPEATS]
"""

from __future__ import annotations

import sys

try:
    from _cold import child_report, empty_cache, paired, print_rows, row
except ImportError:  # imported as benchmarks.bench_plan
    from ._cold import child_report, empty_cache, paired, print_rows, row

GOAL_S = 0.5
COMMAND_GOAL = 2.5  # × import sympy, each repetition
PROBLEMS = (  # (preset, gpu, devices, global batch, seq): docs/planner.md's example and the largest preset
    ("llama-3.1-70b", "h100-sxm", 64, 512, 4096),
    ("deepseek-v3", "h100-sxm", 2048, 4096, 4096),
)

_PLAN = """
import json, time
import symform
from symform.analysis.plans.planner import plan
start = time.perf_counter()
model = symform.load(%r)
result = plan(model, %r, devices=%d, global_batch=%d, seq=%d, flash=True)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "screen_seconds": result.screen_seconds, "candidates": result.candidates}))
"""


def _argv(preset: str, gpu: str, devices: int, batch: int, seq: int) -> list[str]:
    return ["-m", "symform", "plan", preset, "--gpu", gpu, "--gpus", str(devices), "--global-batch", str(batch), "--seq", str(seq), "--flash"]


def rows(repeats: int) -> list[dict]:
    found = []
    for problem in PROBLEMS:
        preset, gpu, devices, batch, seq = problem
        name = f"symform plan {preset} on {devices:,} × {gpu}"
        child_report(_PLAN % problem)  # untimed, as paired() does: .pyc files and symform's cache made
        reports = [child_report(_PLAN % problem) for _ in range(repeats)]
        seconds = [r["seconds"] for r in reports]
        found.append(
            row(
                f"{name}: load + plan, cold (imports excluded)", f"≤ {GOAL_S} s", seconds, max(seconds) <= GOAL_S,
                screen_seconds=[r["screen_seconds"] for r in reports], candidates=reports[0]["candidates"],
            )  # fmt: skip
        )
        measured, baseline = paired(lambda _: (_argv(*problem), empty_cache()), ["-c", "import sympy"], repeats)
        ratios = [m / b for m, b in zip(measured, baseline)]
        found.append(row(f"{name}: whole command, cold (an empty cache directory, imports included)", f"≤ {COMMAND_GOAL}× import sympy", measured, max(ratios) <= COMMAND_GOAL, "import sympy", baseline, ratios=ratios))
    return found


if __name__ == "__main__":
    print_rows(rows(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
