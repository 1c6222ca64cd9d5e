"""Start-up as users meet it: a first command on a fresh machine and a new command on a warm cache, against
`import sympy`, and the commands that should load no sympy at all.

    python benchmarks/bench_startup.py [REPEATS]
"""

from __future__ import annotations

import sys

try:
    from _cold import child_report, config_with_new_sizes, empty_cache, paired, print_rows, row, wall_seconds
except ImportError:  # imported as benchmarks.bench_startup
    from ._cold import child_report, config_with_new_sizes, empty_cache, paired, print_rows, row, wall_seconds

FIRST_GOAL = 1.8  # × import sympy, each repetition: a first command on a fresh machine
WARM_GOAL = 1.4  # × import sympy: a command not run before, on a warm cache
HEAVY = ("sympy", "networkx", "pydantic")
IMPORT_SYMPY = ["-c", "import sympy"]
PARAMS = ["-m", "symform", "params", "qwen3-32b"]


def first_run(repetition: int) -> tuple[list[str], dict[str, str]]:
    """A fresh machine: an empty cache directory, a config file never read."""
    return ["-m", "symform", "params", config_with_new_sizes(repetition)], empty_cache()


def warm_cache(repetition: int) -> tuple[list[str], dict[str, str]]:
    """A command not run before (a config with new sizes) on the cache earlier commands filled."""
    return ["-m", "symform", "params", config_with_new_sizes(repetition)], {}


# what building any model needs before symform's own work: sympy (networkx and pydantic no longer: the component
# graph and the declarations' checks are symform's own), and sympy's first symbolic sum (Add.flatten imports sympy.tensor and
# sympy.combinatorics, which `import sympy` defers)
STACK_FLOOR = ["-c", "import sympy; sympy.Symbol('x') + sympy.Symbol('y')"]

_LOADED = """
import contextlib, io, json, sys
from symform.interface.cli.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(%r)
print(json.dumps([m for m in %r if m in sys.modules]))
"""


def loaded_by(argv: list[str]) -> list[str]:
    """Which heavy libraries a command imports, in a fresh interpreter."""
    return child_report(_LOADED % (argv, HEAVY))


def cache_buys(repeats: int) -> dict:
    """What the disk cache buys: the warm-cache command against the same command with SYMFORM_CACHE=off."""
    warm, off = [], []
    for i in range(1, repeats + 1):
        argv, extra = warm_cache(100 + i)
        warm.append(wall_seconds(argv, extra))
        off.append(wall_seconds(argv, {"SYMFORM_CACHE": "off"}))
    ratios = [w / o for w, o in zip(warm, off)]
    return {**row("what the disk cache buys: symform params on a config never read, warm cache", "none: reported", warm, False, "the same, SYMFORM_CACHE=off", off, ratios=ratios), "goal_met": None}


def rows(repeats: int) -> list[dict]:
    found = []
    wall_seconds(PARAMS)  # the shared cache filled by another command first, as a user's earlier work fills it
    runs = (
        (first_run, FIRST_GOAL, "a first command on a fresh machine (an empty cache directory, a config.json never read, imports included)"),
        (warm_cache, WARM_GOAL, "a command not run before, on a warm cache (a config.json with new sizes)"),
    )
    for made, goal, what in runs:
        cpu: dict[str, list[float]] = {}
        measured, baseline = paired(made, IMPORT_SYMPY, repeats, cpu=cpu)
        ratios = [m / b for m, b in zip(measured, baseline)]
        cpu_ratios = [m / b for m, b in zip(cpu["measured"], cpu["baseline"]) if b > 0]  # reported beside the goal, which is wall time
        found.append(
            row(
                f"symform params, {what}", f"≤ {goal}× import sympy", measured, max(ratios) <= goal, "import sympy", baseline,
                ratios=ratios, cpu_measured=cpu["measured"], cpu_baseline=cpu["baseline"], cpu_ratios=cpu_ratios,
            )  # fmt: skip
        )
    found.append(cache_buys(repeats))
    measured, baseline = paired(STACK_FLOOR, IMPORT_SYMPY, repeats)
    floor = row(
        "the floor under any model's build: import sympy and add two symbols (sympy's first sum imports sympy.tensor and sympy.combinatorics)", "none: what the goals above stand on, reported",
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
