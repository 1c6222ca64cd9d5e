"""Start-up: `symform params` against `import sympy`, and the commands that should load no sympy at all.

    python benchmarks/bench_startup.py [REPEATS]
"""

from __future__ import annotations

import sys

try:
    from _cold import NO_CACHE, child_report, paired, print_rows, row
except ImportError:  # imported as benchmarks.bench_startup
    from ._cold import NO_CACHE, child_report, paired, print_rows, row

PARAMS_GOAL = 1.3  # × import sympy, each repetition
HEAVY = ("sympy", "networkx", "pydantic")
IMPORT_SYMPY = ["-c", "import sympy"]
PARAMS = ["-m", "symform", "params", "qwen3-32b"]
# the same command through main(argv), which keeps no results: what any command not run before costs
PARAMS_UNKEPT = ["-c", "import sys; from symform.interface.cli import main; sys.exit(main(['params', 'qwen3-32b']))"]

# what building any model needs before symform's own work: the three libraries it is written on, and sympy's
# first symbolic sum (Add.flatten imports sympy.tensor and sympy.combinatorics, which `import sympy` defers)
STACK_FLOOR = ["-c", "import networkx, pydantic.main, sympy; sympy.Symbol('x') + sympy.Symbol('y')"]

_LOADED = """
import contextlib, io, json, sys
from symform.interface.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(%r)
print(json.dumps([m for m in %r if m in sys.modules]))
"""


def loaded_by(argv: list[str]) -> list[str]:
    """Which heavy libraries a command imports, in a fresh interpreter."""
    return child_report(_LOADED % (argv, HEAVY))


def rows(repeats: int) -> list[dict]:
    found = []
    runs = (
        (PARAMS, None, "cold (a fresh interpreter; symform's cache from an earlier run: the numbers it printed are kept)"),
        (PARAMS_UNKEPT, None, "cold, a command whose numbers are not kept (declarations, graph and its derivations kept, the model loaded)"),
        (PARAMS, NO_CACHE, "cold, nothing cached (SYMFORM_CACHE=off: a first run)"),
    )
    for argv, extra, what in runs:
        cpu: dict[str, list[float]] = {}
        measured, baseline = paired(argv, IMPORT_SYMPY, repeats, extra, cpu)
        ratios = [m / b for m, b in zip(measured, baseline)]
        cpu_ratios = [m / b for m, b in zip(cpu["measured"], cpu["baseline"]) if b > 0]  # reported beside the goal, which is wall time
        found.append(
            row(
                f"symform params qwen3-32b, {what}", f"≤ {PARAMS_GOAL}× import sympy", measured, max(ratios) <= PARAMS_GOAL, "import sympy", baseline,
                ratios=ratios, cpu_measured=cpu["measured"], cpu_baseline=cpu["baseline"], cpu_ratios=cpu_ratios,
            )  # fmt: skip
        )
    measured, baseline = paired(STACK_FLOOR, IMPORT_SYMPY, repeats)
    floor = row(
        "the floor under any model's build: import networkx, pydantic and sympy, and add two symbols", "none: what the goals above stand on, reported",
        measured, False, "import sympy", baseline, ratios=[m / b for m, b in zip(measured, baseline)],
    )  # fmt: skip
    found.append({**floor, "goal_met": None})
    for argv, forbidden in ((["--help"], HEAVY), (["models"], ("sympy", "networkx"))):
        measured, baseline = paired(["-m", "symform", *argv], IMPORT_SYMPY, repeats)
        loaded = loaded_by(argv)
        bad = [m for m in forbidden if m in loaded]
        found.append(
            row(
                f"symform {' '.join(argv)}, cold", f"imports none of {', '.join(forbidden)} (faster than import sympy)",
                measured, not bad and max(m / b for m, b in zip(measured, baseline)) < 1, "import sympy", baseline, loaded=loaded,
            )  # fmt: skip
        )
    return found


if __name__ == "__main__":
    print_rows(rows(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
