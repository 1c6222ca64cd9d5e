"""Exact single-configuration paths: one number for one configuration, as users ask for it.

    python benchmarks/bench_exact.py [repeats]     # prints the rows as JSON

``rows(repeats)`` gives one dict per path: seconds per operation for each
repetition (``measured``), the goal, and a baseline measured with the same
repetitions where one is natural: the per-configuration arithmetic a calculator
such as llm-analysis does, written by hand in plain Python in its fastest
natural form (factored, ints), run alternately with symform. A goal counts as met
only when the worst repetition meets it; a row with no goal has ``goal_met`` None.
Warm rows also give each repetition's CPU time (``measured_cpu``, ``baseline_cpu``),
which tells a slow repetition's own cost from time spent waiting for a core. Warm
rows reuse what the process has built; cold rows clear sympy's cache and forget
symform's shared graphs, expressions and generated functions first (in-process, so
``import`` is not counted).
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

import sympy  # noqa: E402

import symform  # noqa: E402

try:
    from _configs import paired_times  # noqa: E402
except ImportError:  # imported as benchmarks.bench_exact
    from ._configs import paired_times  # noqa: E402
from symform.engine.graph.model import forget_structures  # noqa: E402

PRESET = "qwen3-32b"
LARGEST = "deepseek-v3"
CALLS = 2_000  # operations timed per repetition (warm rows)
EXACT_GOAL_S = 5e-6
RESIZE_GOAL = 100  # × the hand-written formula, sizes never seen before
BUILD_GOAL_S = 0.3


# --- hand-written baselines: a per-configuration calculator's arithmetic for qwen3 ------------


def qwen3_params(d_model, n_layers, vocab, d_ff, n_heads, n_kv_heads, d_head):
    attention = d_model * d_head * 2 * (n_heads + n_kv_heads) + 2 * d_head  # q, k, v, o; q/k norms
    return n_layers * (attention + 3 * d_model * d_ff + 2 * d_model) + 2 * vocab * d_model + d_model


def qwen3_forward_flops(d_model, n_layers, vocab, d_ff, n_heads, n_kv_heads, d_head, batch, seq):
    tokens = batch * seq
    per_layer = 6 * d_model * d_ff + 4 * d_head * (d_model * (n_heads + n_kv_heads) + n_heads * seq)
    return tokens * (n_layers * per_layer + 2 * d_model * vocab)


SIZES = ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head")


# --- timing -------------------------------------------------------------------------------------


def per_op(runs: dict[str, Callable[[], object]], calls: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per operation of each run (each repetition runs ``calls`` operations), wall and CPU, one
    figure per repetition, the runs alternating (``paired_times``). A repetition whose wall time is far
    above its CPU time was slowed by other work."""
    for run in runs.values():
        run()  # warm: the first call builds what later calls reuse
    return {k: {kind: [t / calls for t in v] for kind, v in t.items()} for k, t in paired_times(runs, repeats).items()}


def cold(run, repeats: int) -> list[float]:
    """Seconds per operation with sympy's cache cleared and symform's shared structures forgotten first; garbage
    collected between repetitions and never inside one, as :func:`_configs.paired_times` times the warm rows."""
    out = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            sympy.core.cache.clear_cache()
            forget_structures()
            gc.collect()
            t0 = time.perf_counter()
            run()
            out.append(time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
    return out


def row(path: str, goal: str, limit: float | None, measured: dict | list[float], baseline_name: str | None = None, baseline: dict | None = None) -> dict:
    """A row; ``goal_met`` is None where there is no goal (a one-off cost, reported)."""
    wall = measured["wall"] if isinstance(measured, dict) else measured
    out = {
        "path": path,
        "goal": goal,
        "unit": "s",
        "measured": wall,
        "baseline_name": baseline_name,
        "baseline": baseline["wall"] if baseline else None,
        "goal_met": None if limit is None else max(wall) <= limit,
    }
    if isinstance(measured, dict):
        out["measured_cpu"] = measured["cpu"]
    if baseline:
        out["baseline_cpu"] = baseline["cpu"]
    return out


# --- the paths ----------------------------------------------------------------------------------


def workloads(n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(1, 512), rng.randint(1, 131_072)) for _ in range(n)]


def resizes(model, n: int, seed: int = 1) -> list[dict[str, int]]:
    """Widths, heads and depth drawn as a scaling study would, keeping every requirement (heads divide)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kv = rng.choice([1, 2, 4, 8, 16])
        out.append({
            "n_layers": rng.randint(1, 128), "d_ff": 128 * rng.randint(4, 512), "d_model": 128 * rng.randint(8, 160),
            "n_heads": kv * rng.randint(1, 8), "n_kv_heads": kv, "d_head": rng.choice([64, 80, 96, 128, 256]),
        })  # fmt: skip
    return out


def _agree(model, configs) -> None:
    """The baseline computes what symform computes, or the comparison means nothing."""
    sizes = [model.values[k] for k in SIZES]
    assert model.evaluate("params") == qwen3_params(*sizes)
    for b, s in configs[:50]:
        assert model.evaluate("forward_flops", batch=b, seq=s) == qwen3_forward_flops(*sizes, b, s)


def rows(repeats: int) -> list[dict]:
    model = symform.Model.load(PRESET)
    configs = workloads(CALLS)
    _agree(model, configs)
    sizes = [model.values[k] for k in SIZES]
    values = model.values
    hand = "hand-written Python per configuration (llm-analysis-like, factored ints)"

    def symform_forward():
        for b, s in configs:
            model.evaluate("forward_flops", batch=b, seq=s)

    def baseline_forward():
        for b, s in configs:
            qwen3_forward_flops(*sizes, b, s)

    def symform_params():
        for _ in configs:
            model.evaluate("params")

    def baseline_params():
        for _ in configs:
            qwen3_params(*sizes)

    formula = model.expression("forward_flops")

    def formula_forward():
        for b, s in configs:
            formula.evaluate(**values, batch=b, seq=s)

    largest = symform.Model.load(LARGEST)

    def largest_forward():
        for b, s in configs:
            largest.evaluate("forward_flops", batch=b, seq=s)

    # new sizes every repetition (the untimed warm-up included): no size a model was checked at before
    mine = iter([resizes(model, CALLS, seed=100 + i) for i in range(repeats + 1)])
    theirs = iter([resizes(model, CALLS, seed=100 + i) for i in range(repeats + 1)])

    def symform_resized():
        for change, (b, s) in zip(next(mine), configs):
            model.with_arguments(**change).evaluate("forward_flops", batch=b, seq=s)

    def baseline_resized():
        for change, (b, s) in zip(next(theirs), configs):
            resized = {**values, **change}
            qwen3_forward_flops(*[resized[k] for k in SIZES], b, s)

    def first_number():
        symform.Model.load(PRESET).evaluate("forward_flops", batch=8, seq=4096)

    def build_and_derive():
        built = symform.Model.load(LARGEST)
        for q in ("params", "train_flops"):
            symform.derive(built, q, assume="standard", leading=True)

    exact = f"≤ {EXACT_GOAL_S * 1e6:g} µs per call, warm, exact ints"
    forward_times = per_op({"symform": symform_forward, "hand": baseline_forward}, CALLS, repeats)
    params_times = per_op({"symform": symform_params, "hand": baseline_params}, CALLS, repeats)
    formula_times = per_op({"symform": formula_forward, "hand": baseline_forward}, CALLS, repeats)
    resized_times = per_op({"symform": symform_resized, "hand": baseline_resized}, CALLS, repeats)
    results = [
        row(f"Model.evaluate forward_flops, {PRESET}, one config (warm)", exact, EXACT_GOAL_S, forward_times["symform"], hand, forward_times["hand"]),
        row(f"Model.evaluate params, {PRESET} (warm)", exact, EXACT_GOAL_S, params_times["symform"], hand, params_times["hand"]),
        row(f"Formula.evaluate forward_flops, {PRESET}, every size given (warm)", exact, EXACT_GOAL_S, formula_times["symform"], hand, formula_times["hand"]),
        row(f"Model.evaluate forward_flops, {LARGEST}, one config (warm)", exact, EXACT_GOAL_S, per_op({"symform": largest_forward}, CALLS, repeats)["symform"]),
        {**row(f"with_arguments(widths, heads, depth).evaluate forward_flops, {PRESET}, sizes never seen before", f"≤ {RESIZE_GOAL}× the hand-written formula", None, resized_times["symform"], hand, resized_times["hand"]),
         "goal_met": max(m / b for m, b in zip(resized_times["symform"]["wall"], resized_times["hand"]["wall"])) <= RESIZE_GOAL},
        row(f"load + first evaluate, {PRESET} (cold: sympy cache cleared, symform's structures forgotten, in-process)", "none: the one-off cost, reported", None, cold(first_number, repeats)),
        row(f"build + derive params and train_flops (leading, standard), {LARGEST} (cold: sympy cache cleared, symform's structures forgotten, in-process)", f"≤ {BUILD_GOAL_S:g} s", BUILD_GOAL_S, cold(build_and_derive, repeats)),
    ]
    return results


if __name__ == "__main__":
    print(json.dumps(rows(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2, ensure_ascii=False))
