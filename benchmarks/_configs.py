"""What several benchmarks share: random valid configurations, hand-written numpy baselines, paired timing."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

PRESET = "qwen3-32b"
MODEL_NAMES = ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head")
WORKLOAD_NAMES = ("batch", "seq", "tokens")


def random_configs(n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` random, valid model and workload sizes as exact-integer float64 arrays.

    n_kv_heads divides n_heads (grouped-query attention); every value is an
    integer well below 2**53, so float64 holds it exactly.
    """
    rng = np.random.default_rng(seed)
    n_kv_heads = 2 ** rng.integers(0, 5, n)  # 1 .. 16
    group = rng.integers(1, 9, n)  # query heads per kv head, 1 .. 8
    sizes = {
        "d_model": 128 * rng.integers(2, 129, n),  # 256 .. 16384
        "n_layers": rng.integers(1, 129, n),
        "vocab": rng.integers(1_000, 262_145, n),
        "d_ff": 128 * rng.integers(4, 513, n),  # 512 .. 65536
        "n_heads": n_kv_heads * group,
        "n_kv_heads": n_kv_heads,
        "d_head": rng.choice(np.array([64, 80, 96, 128, 192, 256]), n),
        "batch": rng.integers(1, 1025, n),
        "seq": 2 ** rng.integers(7, 18, n),  # 128 .. 131072
        "tokens": rng.integers(10**6, 10**13, n, dtype=np.int64),
    }
    return {k: v.astype(np.float64) for k, v in sizes.items()}


# Hand-written numpy versions of the bundled formulas for the preset's family (qwen3: gated MLP,
# grouped-query attention, q/k norms, untied head). ``*_inplace`` is the fastest natural form:
# factored by hand, every temporary reused in place.


def hand_params(a: dict[str, np.ndarray]) -> np.ndarray:
    """Term by term, as typed from the paper formula (expanded)."""
    d, n, v, ff = a["d_model"], a["n_layers"], a["vocab"], a["d_ff"]
    h, kv, dh = a["n_heads"], a["n_kv_heads"], a["d_head"]
    return 3 * ff * d * n + 2 * dh * d * h * n + 2 * dh * d * kv * n + 2 * dh * n + 2 * d * n + 2 * d * v + d


def hand_train_flops(a: dict[str, np.ndarray]) -> np.ndarray:
    d, n, v, ff = a["d_model"], a["n_layers"], a["vocab"], a["d_ff"]
    h, kv, dh = a["n_heads"], a["n_kv_heads"], a["d_head"]
    s, t = a["seq"], a["tokens"]
    return 18 * ff * d * n * t + 12 * dh * d * h * n * t + 12 * dh * d * kv * n * t + 12 * dh * h * n * s * t + 6 * d * t * v


def hand_inplace(a: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """params = n(3·ff·d + 2·dh(d(h+kv) + 1) + 2d) + d(2v + 1);
    train_flops = 6t(n(3·ff·d + 2·dh(d(h+kv) + h·s)) + d·v): shared parts computed once, in place."""
    d, n, v, ff = a["d_model"], a["n_layers"], a["vocab"], a["d_ff"]
    h, kv, dh, s, t = a["n_heads"], a["n_kv_heads"], a["d_head"], a["seq"], a["tokens"]
    x = h + kv
    x *= d  # d(h+kv)
    y = h * s
    y += x
    y *= dh
    y *= 2
    z = ff * d
    z *= 3  # 3·ff·d
    y += z
    y *= n
    w = d * v
    y += w
    y *= t
    y *= 6  # train_flops
    x += 1
    x *= dh
    x *= 2
    x += z
    z = np.multiply(d, 2, out=z)
    x += z
    x *= n
    w *= 2
    w += d
    x += w  # params
    return x, y


def paired(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds per repetition for each function, run alternately so that noise from other work hits all alike."""
    return {k: t["wall"] for k, t in paired_times(fns, repeats).items()}


def paired_times(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per repetition for each function, run alternately, with garbage collected between
    repetitions and never inside one. CPU time leaves out the time the process waited for a core."""
    times = {k: {"wall": [], "cpu": []} for k in fns}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for k, fn in fns.items():
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                times[k]["cpu"].append(time.process_time() - c0)
                times[k]["wall"].append(time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
    return times


def row(path: str, goal: str, measured: list[float], goal_met: bool, baseline_name: str | None = None, baseline: list[float] | None = None, **extra) -> dict:
    """One benchmark row, as every benchmarks/bench_*.py module returns it."""
    return {"path": path, "goal": goal, "unit": "s", "measured": list(measured), "baseline_name": baseline_name, "baseline": None if baseline is None else list(baseline), "goal_met": bool(goal_met), **extra}


def speed_ratios(measured: list[float], baseline: list[float]) -> list[float]:
    """baseline ÷ measured per repetition: above 1, symform is the faster."""
    return [b / m for m, b in zip(measured, baseline)]
