"""Sweeps: ``symform.sweep`` against its own compiled kernel and against hand-written factored,
in-place numpy; int64 inputs; a lazy sweep on a dask.distributed LocalCluster against numpy.

    python benchmarks/bench_sweep.py [REPEATS]
"""

from __future__ import annotations

import sys
import time

import numpy as np

try:
    from _configs import PRESET, hand_inplace, paired, random_configs, row, speed_ratios
except ImportError:  # imported as benchmarks.bench_sweep
    from ._configs import PRESET, hand_inplace, paired, random_configs, row, speed_ratios

import symform
from symform.analysis.sweeps.sweeps import sweep
from symform.analysis.sweeps.sweep_quantities import compile_quantities

CONFIGS = 10**6
QUANTITIES = ("params", "train_flops")
NAMES = ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head", "seq", "tokens")
SWEEP_GOAL = 0.8  # × the kernel's speed, and × hand-written factored numpy's, every repetition
INT64_GOAL = 2.0  # int64 exact sweep at most this × the float64 sweep's time (the README's "about double")
DASK_POINTS = 10**7  # the test-sized form of 10**9: same code, fewer blocks
DASK_GRAPH_BYTES = 64_000
GRAPH_POINTS = 10**9  # a lazy sweep's graph is built for this many points within GRAPH_GOAL_S
GRAPH_GOAL_S = 1.0


def _sweep_rows(repeats: int) -> list[dict]:
    model = symform.load(PRESET)
    configs = random_configs(CONFIGS, seed=0)
    zipped = {k: configs[k] for k in NAMES}
    fixed = {"batch": 1}
    compiled = compile_quantities(model, QUANTITIES, NAMES, fixed=fixed)
    arrays = [configs[k] for k in NAMES]

    def run_sweep():
        return sweep(model, QUANTITIES, zip=zipped, fixed=fixed, inexact="allow")

    got = run_sweep()  # also compiles: every timed sweep finds its kernel cached, as any second sweep does
    hand = hand_inplace(configs)
    agree = all(np.array_equal(got[q], h) for q, h in zip(QUANTITIES, hand)) and all(np.array_equal(got[q], k) for q, k in zip(QUANTITIES, compiled(*arrays)))
    del got, hand
    times = paired({"sweep": run_sweep, "kernel": lambda: compiled(*arrays), "hand": lambda: hand_inplace(configs)}, repeats)
    vs_kernel = speed_ratios(times["sweep"], times["kernel"])
    vs_hand = speed_ratios(times["sweep"], times["hand"])
    detail = {"configs": CONFIGS, "quantities": list(QUANTITIES), "values_equal": agree}
    out = [
        row(f"sweep() over 10^6 configs vs its compiled kernel", f"≥ {SWEEP_GOAL}× the kernel's speed", times["sweep"], agree and min(vs_kernel) >= SWEEP_GOAL, "compiled kernel (compile_quantities) on the same arrays", times["kernel"], ratios=vs_kernel, **detail),
        row(f"sweep() over 10^6 configs vs hand-written numpy", f"≥ {SWEEP_GOAL}× hand-written factored in-place numpy", times["sweep"], agree and min(vs_hand) >= SWEEP_GOAL, "hand-written numpy, factored, in place", times["hand"], ratios=vs_hand, **detail),
    ]

    out.append(_grid_row(model, repeats))

    # int64: quantities whose values fit int64 at these sizes (train_flops at 10**13 tokens reaches 1e26)
    int_quantities = ("params", "forward_flops")
    int_names = tuple(k for k in NAMES if k != "tokens")
    floats = {k: configs[k] for k in int_names}
    ints = {k: v.astype(np.int64) for k, v in floats.items()}
    exact = sweep(model, int_quantities, zip=ints, fixed=fixed, exact="int64")
    as_float = sweep(model, int_quantities, zip=floats, fixed=fixed, inexact="allow")
    small = [as_float[q] < 2**53 for q in int_quantities]
    int_agree = all(exact[q].dtype == np.int64 and np.array_equal(exact[q][m], as_float[q][m]) for q, m in zip(int_quantities, small))
    del exact, as_float
    times = paired({"int64": lambda: sweep(model, int_quantities, zip=ints, fixed=fixed, exact="int64"), "float64": lambda: sweep(model, int_quantities, zip=floats, fixed=fixed, inexact="allow")}, repeats)
    slow = [m / b for m, b in zip(times["int64"], times["float64"])]
    out.append(row(
        "sweep(exact='int64') over 10^6 int64 configs (params, forward_flops)", f"exact int64, object-free, ≤ {INT64_GOAL}× the float64 sweep", times["int64"],
        int_agree and max(slow) <= INT64_GOAL, "float64 sweep of the same configs", times["float64"], slowdown=slow, values_equal_below_2_53=int_agree, configs=CONFIGS,
    ))
    return out


GRID = {  # 10^6 points, the last name fastest
    "d_model": [1024.0 * k for k in range(1, 11)], "n_layers": [8.0 * k for k in range(1, 11)], "d_ff": [2048.0 * k for k in range(1, 11)],
    "n_heads": [8.0 * k for k in range(1, 11)], "seq": [512.0 * k for k in range(1, 11)], "tokens": [1e11 * k for k in range(1, 11)],
}  # fmt: skip
GRID_FIXED = {"vocab": 151936, "n_kv_heads": 8, "d_head": 128, "batch": 1}
GRID_GOAL = 1.25  # × hand-written in-place numpy's time, every repetition


def _grid_row(model, repeats: int) -> dict:
    """A 10^6-point grid: sweep() against the grid laid out by hand (numpy.meshgrid) and the in-place formula."""

    def hand():
        columns = dict(zip(GRID, (c.ravel() for c in np.meshgrid(*map(np.asarray, GRID.values()), indexing="ij"))))
        return hand_inplace({**columns, **{k: np.float64(v) for k, v in GRID_FIXED.items()}})

    def run_sweep():
        return sweep(model, QUANTITIES, grid=GRID, fixed=GRID_FIXED, inexact="allow")

    got = run_sweep()
    agree = all(np.array_equal(got[q], h) for q, h in zip(QUANTITIES, hand()))
    del got
    times = paired({"sweep": run_sweep, "hand": hand}, repeats)
    slow = [m / b for m, b in zip(times["sweep"], times["hand"])]
    return row(
        "sweep() over a 10^6-point grid vs hand-written numpy", f"≤ {GRID_GOAL}× hand-written numpy (meshgrid, factored, in place)", times["sweep"],
        agree and max(slow) <= GRID_GOAL, "hand-written numpy: numpy.meshgrid, factored, in place", times["hand"], slowdown=slow, values_equal=agree, points=10**6,
    )  # fmt: skip


def _dask_row(repeats: int) -> dict:
    try:
        import cloudpickle
        import distributed
    except ImportError as e:
        return row("lazy sweep on a dask LocalCluster", "lazy end to end", [], False, error=f"dask.distributed not importable: {e}")
    from symform.analysis.sweeps.lazy_sweeps import block_points, lazy_sweep

    model = symform.load(PRESET)
    fixed = {"batch": 8, "tokens": 10**12, "vocab": 151936, "d_ff": 25600, "n_heads": 64, "n_kv_heads": 8, "d_head": 128}
    spec = dict(grid={"seq": [4096, 32768]}, sample={"d_model": (1024, 16384), "n_layers": (8, 128)}, n=DASK_POINTS // 2, seed=0, fixed=fixed, chunk=DASK_POINTS // 16)

    def lazy():
        return lazy_sweep(model, QUANTITIES, **spec)

    # worker processes, as a script on a real cluster has them: every task and its description pickled
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, distributed.Client(cluster):
        first = lazy()
        graph_bytes = len(cloudpickle.dumps(dict(first["train_flops"].__dask_graph__())))
        d = first.description
        blocks = [(g, g + 1, r, min(r + d.chunk, d.n)) for g in range(2) for r in range(0, d.n, d.chunk)]

        def numpy_side():
            parts = [block_points(d, b) for b in blocks]
            points = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            # past sweep()'s in-memory budget (10**6 points): the compiled function on the whole arrays
            _, train_flops = d.compiled(*(points[k].astype(np.float64) for k in d.names))
            return int(np.argmin(train_flops)), float(np.min(train_flops))

        def cluster_side():
            best = lazy().argmin("train_flops")
            return best["index"], float(best["train_flops"])

        agree = numpy_side() == cluster_side()
        times = paired({"dask": cluster_side, "numpy": numpy_side}, repeats)
    return row(
        f"lazy sweep, {DASK_POINTS:.0e} points on a LocalCluster (2 workers), argmin", f"lazy end to end: graph < {DASK_GRAPH_BYTES // 1000} KB whatever N, argmin equal to numpy",
        times["dask"], agree and graph_bytes < DASK_GRAPH_BYTES, "numpy: the same points materialised, compiled function, argmin", times["numpy"],
        graph_bytes=graph_bytes, blocks=len(blocks), points=DASK_POINTS, argmin_equal=agree,
    )


def _graph_row(repeats: int) -> dict:
    """Building the lazy sweep of 10**9 points (described, nothing computed) at the default chunk."""
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    model = symform.load(PRESET)
    spec = dict(grid={"seq": [4096, 32768]}, sample={"d_model": (1024, 16384), "n_layers": (8, 128)}, n=GRAPH_POINTS // 2, seed=0, fixed={"batch": 8, "tokens": 10**12})
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        built = lazy_sweep(model, QUANTITIES, **spec)
        seconds.append(time.perf_counter() - start)
    return row(f"lazy_sweep builds its graph for {GRAPH_POINTS:.0e} points", f"≤ {GRAPH_GOAL_S:g} s", seconds, max(seconds) <= GRAPH_GOAL_S, blocks=len(built.columns["params"].chunks[0]), points=built.points)


def rows(repeats: int) -> list[dict]:
    return [*_sweep_rows(repeats), _graph_row(repeats), _dask_row(max(1, min(repeats, 5)))]


if __name__ == "__main__":
    for r in rows(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        extra = f" vs {r['baseline_name']} {min(r['baseline']):.4f}–{max(r['baseline']):.4f} s" if r.get("baseline") else ""
        print(f"{r['path']}: {min(r['measured'], default=float('nan')):.4f}–{max(r['measured'], default=float('nan')):.4f} s{extra}; goal {r['goal']}: {'met' if r['goal_met'] else 'NOT met'}")
