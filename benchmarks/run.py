"""Benchmarks for symform: every figure measured in one run, on one machine, with its spread.

    python benchmarks/run.py            # every row: this script's and every benchmarks/bench_*.py module's
    python benchmarks/run.py --quick    # fewer repetitions (a rough look)
    python benchmarks/run.py --json     # one JSON object on stdout instead of the table

Every side of a comparison runs the same number of repetitions, alternately; each row
keeps every repetition, and a goal is met only when the worst repetition meets it.
Modules ``benchmarks/bench_*.py`` each expose ``rows(repeats) -> list[dict]``; a module
that is absent is skipped. This is a measurement, not a test: it exits 0 whether or
not a goal is met. See benchmarks/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import sympy

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _configs import PRESET, hand_inplace, hand_params, hand_train_flops, paired, random_configs, row, speed_ratios  # noqa: E402

import symform  # noqa: E402
from symform.analysis.sweeps.sweep_quantities import compile_quantities  # noqa: E402

KERNEL_GOAL = 0.8  # the compiled function's speed ÷ hand-written factored, in-place numpy's
SUBS_GOAL = 1000.0  # per configuration, sympy subs ÷ the compiled function
LLM_GOAL = 100.0  # per configuration, llm-analysis ÷ the compiled function
MEMORY_GOAL = 1.25  # a sweep's peak traced memory ÷ the bytes it returns
NAMES = ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head", "seq", "tokens")


def log(msg: str, quiet: bool) -> None:
    print(msg, file=sys.stderr if quiet else sys.stdout, flush=True)


# --------------------------------------------------------------------------- the compiled function


def compiled_rows(configs, repeats: int, quiet: bool) -> list[dict]:
    """The compiled function for params and train_flops against hand-written numpy (factored, in place; and expanded)."""
    model = symform.load(PRESET)
    fn = compile_quantities(model, ("params", "train_flops"), NAMES, fixed={"batch": 1})
    arrays = [configs[k] for k in NAMES]
    ours = fn(*arrays)
    inplace = hand_inplace(configs)
    agree = all(np.array_equal(a, b) for a, b in zip(ours, inplace)) and np.allclose(ours[0], hand_params(configs), rtol=1e-12) and np.allclose(ours[1], hand_train_flops(configs), rtol=1e-12)
    del ours, inplace
    log(f"check: compiled params, train_flops equal hand-written numpy on {len(arrays[0]):,} configs: {agree}", quiet)
    times = paired({"compiled": lambda: fn(*arrays), "inplace": lambda: hand_inplace(configs), "expanded": lambda: (hand_params(configs), hand_train_flops(configs))}, repeats)
    vs = speed_ratios(times["compiled"], times["inplace"])
    return [
        row("compiled function (params + train_flops, 10^6 configs) vs hand-written numpy", f"≥ {KERNEL_GOAL}× hand-written factored in-place numpy",
            times["compiled"], agree and min(vs) >= KERNEL_GOAL, "hand-written numpy, factored, in place", times["inplace"],
            ratios=vs, expanded_hand_s=times["expanded"], ratios_vs_expanded=speed_ratios(times["compiled"], times["expanded"]), values_equal=agree),
    ]


def subs_row(configs, repeats: int, quiet: bool, k: int = 20) -> dict:
    """sympy's subs per configuration against the compiled function per configuration."""
    model = symform.load(PRESET)
    formula = model.expression("train_flops").subs(batch=1)
    symbols = {s.name: s for s in formula.expr.free_symbols}
    rows_ = [{symbols[n]: int(configs[n][i]) for n in NAMES if n in symbols} for i in range(k)]
    fn = compile_quantities(model, "train_flops", NAMES, fixed={"batch": 1})
    arrays = [configs[n] for n in NAMES]
    n = len(arrays[0])
    values = [formula.expr.subs(r) for r in rows_]
    agree = bool(np.allclose(np.array([float(v) for v in values]), fn(*[a[:k] for a in arrays])[0], rtol=1e-12, atol=0))  # past 2**53 float64 rounds
    times = paired({"subs": lambda: [formula.expr.subs(r) for r in rows_], "compiled": lambda: fn(*arrays)}, repeats)
    per_subs = [t / k for t in times["subs"]]
    per_compiled = [t / n for t in times["compiled"]]
    ratios = [s / c for s, c in zip(per_subs, per_compiled)]
    log(f"check: sympy subs equals the compiled function on {k} configs: {agree}", quiet)
    return row("sympy subs per config vs the compiled function per config (train_flops)", f"compiled ≥ {SUBS_GOAL:g}× faster per config", per_compiled,
               agree and min(ratios) >= SUBS_GOAL, f"expr.subs per config ({k} configs a repetition)", per_subs, ratios=ratios, values_equal=agree)


# --------------------------------------------------------------------------- llm-analysis

LLM_ANALYSIS_QUANTITIES = ("params", "forward_flops", "backward_flops")


def llm_analysis_configs(configs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The benchmark's configurations, projected onto what llm-analysis can describe.

    llm-analysis has no head width of its own (d_head = d_model / n_heads) and wants
    d_ff a multiple of d_model: d_model becomes n_heads·d_head and d_ff the nearest
    multiple of it; every other size is the same.
    """
    out = dict(configs)
    out["d_model"] = configs["n_heads"] * configs["d_head"]
    out["d_ff"] = out["d_model"] * np.maximum(1.0, np.round(configs["d_ff"] / out["d_model"]))
    return out


def llm_analysis_expected_gap(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """symform (qwen3 family) minus llm-analysis, term by term, as docs/llm-analysis.md derives.

    params: the untied output head (d·V), the gated MLP's third matrix (n·d·d_ff) and
    q/k-norm weights (2·n·d_head). forward FLOPs: llm-analysis counts the MLP as
    16·T·d² per layer whatever d_ff is; a gated MLP does 6·T·d·d_ff.
    """
    d, n, v, ff, dh = a["d_model"], a["n_layers"], a["vocab"], a["d_ff"], a["d_head"]
    tokens = a["batch"] * a["seq"]
    forward = n * tokens * (6 * d * ff - 16 * d * d)
    return {"params": d * v + n * d * ff + 2 * dh * n, "forward_flops": forward, "backward_flops": 2 * forward}


def llm_analysis_values(a: dict[str, np.ndarray], k: int, gpu) -> tuple[dict[str, np.ndarray], float]:
    """llm-analysis, one configuration at a time as it is used: a config, an analysis, three counts."""
    from llm_analysis.analysis import LLMAnalysis
    from llm_analysis.config import ModelConfig

    rows = [{name: int(a[name][i]) for name in ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "batch", "seq")} for i in range(k)]
    out = {q: np.empty(k) for q in LLM_ANALYSIS_QUANTITIES}
    gc.disable()
    try:
        t0 = time.perf_counter()
        for i, r in enumerate(rows):
            config = ModelConfig(name="bench", num_layers=r["n_layers"], n_head=r["n_heads"], hidden_dim=r["d_model"], vocab_size=r["vocab"], num_key_value_heads=r["n_kv_heads"], ffn_embed_dim=r["d_ff"])
            # flops_efficiency below 0.55: the default (1.0) logs a warning on every construction
            analysis = LLMAnalysis(config, gpu, flops_efficiency=0.5)
            out["params"][i] = analysis.get_num_params_total()
            out["forward_flops"][i] = analysis.get_num_flops_fwd_total(r["batch"], r["seq"])
            out["backward_flops"][i] = analysis.get_num_flops_bwd_total(r["batch"], r["seq"])
        total = time.perf_counter() - t0
    finally:
        gc.enable()
    return out, total / k


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def llm_analysis_row(configs, repeats: int, quiet: bool, k: int) -> dict:
    """One compiled symform function for params, forward and backward FLOPs against llm-analysis, per configuration."""
    try:
        from llm_analysis.config import get_gpu_config_by_name
    except ImportError as e:
        log(f"llm-analysis: not importable here ({e}); pip install llm-analysis (see benchmarks/README.md)", quiet)
        return row("llm-analysis per config vs the compiled function per config", f"compiled ≥ {LLM_GOAL:g}× faster per config", [], False, error=f"llm-analysis not importable: {e}")
    model = symform.load(PRESET)
    a = llm_analysis_configs(configs)
    names = ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head", "batch", "seq")
    fn = compile_quantities(model, LLM_ANALYSIS_QUANTITIES, names)
    arrays = [a[n] for n in names]
    n = len(arrays[0])
    gpu = get_gpu_config_by_name("a100-sxm-40gb")
    theirs, _ = llm_analysis_values(a, k, gpu)
    ours = dict(zip(LLM_ANALYSIS_QUANTITIES, fn(*[x[:k] for x in arrays])))
    gap = llm_analysis_expected_gap({name: x[:k] for name, x in a.items()})
    agree = all(float(np.max(np.abs(theirs[q] + gap[q] - ours[q]) / ours[q])) <= 1e-9 for q in LLM_ANALYSIS_QUANTITIES)  # llm-analysis divides d·kv/h in floating point
    log(f"check: llm-analysis + the differences docs/llm-analysis.md derives equals symform on {k} configs: {agree}", quiet)
    per_theirs, per_ours = [], []
    for _ in range(repeats):  # alternately, the same number of times each
        per_theirs.append(llm_analysis_values(a, k, gpu)[1])
        t = paired({"ours": lambda: fn(*arrays)}, 1)["ours"][0]
        per_ours.append(t / n)
    ratios = [t / o for t, o in zip(per_theirs, per_ours)]
    return row("llm-analysis per config vs the compiled function per config (params, forward, backward)", f"compiled ≥ {LLM_GOAL:g}× faster per config",
               per_ours, agree and min(ratios) >= LLM_GOAL, f"llm-analysis per config ({k} configs a repetition)", per_theirs,
               ratios=ratios, agree_after_listed_differences=agree, llm_analysis_version=_version("llm-analysis"))


# --------------------------------------------------------------------------- memory


def sweep_memory_row(repeats: int, quiet: bool) -> dict:
    """Peak traced memory of a sweep over 10**6 grid points (symform's in-memory limit) ÷ the bytes it returns."""
    import gc
    import tracemalloc

    grid = {"d_model": np.arange(1, 101) * 128, "n_layers": np.arange(1, 101), "vocab": 1000 + 1000 * np.arange(100)}
    model = symform.load(PRESET)
    fixed = {"batch": 1, "tokens": 10**12, "seq": 4096}
    symform.sweep(model, ["params", "train_flops"], grid={k: v[:2] for k, v in grid.items()}, fixed=fixed, inexact="allow")  # compile outside the trace
    ratios, seconds = [], []
    for _ in range(repeats):
        gc.collect()
        tracemalloc.start()
        t0 = time.perf_counter()
        result = symform.sweep(model, ["params", "train_flops"], grid=grid, fixed=fixed, inexact="allow")
        seconds.append(time.perf_counter() - t0)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        ratios.append(peak / sum(v.nbytes for v in result.values()))
        del result
    log(f"sweep memory: peak ÷ result {min(ratios):.3f}–{max(ratios):.3f}", quiet)
    r = row("sweep peak memory ÷ its result's bytes (10^6 grid points)", f"≤ {MEMORY_GOAL}", ratios, max(ratios) <= MEMORY_GOAL, seconds=seconds)
    r["unit"] = "ratio"
    return r


# --------------------------------------------------------------------------- the other modules


def module_rows(repeats: int, quiet: bool) -> list[dict]:
    """Rows of every benchmarks/bench_*.py module, in name order; a module that fails to import is named, not fatal."""
    found = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem
        try:
            module = importlib.import_module(name)
            got = module.rows(repeats)
        except Exception as e:  # a broken module is reported in its own row; the others still run
            log(f"{name}: {type(e).__name__}: {e}", quiet)
            got = [row(f"{name}", "module runs", [], False, error=f"{type(e).__name__}: {e}")]
        for r in got:
            r.setdefault("module", name)
        found.extend(got)
        log(f"{name}: {len(got)} rows", quiet)
    return found


# --------------------------------------------------------------------------- output


def summarise(r: dict) -> dict:
    """The row with its spreads: measured, baseline and measured ÷ baseline per repetition (min, median, max)."""
    def spread(xs):
        return None if not xs else {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}

    out = dict(r)
    out["measured_spread"] = spread(r.get("measured"))
    out["baseline_spread"] = spread(r.get("baseline"))
    if r.get("measured") and r.get("baseline"):
        out["measured_over_baseline"] = spread([m / b for m, b in zip(r["measured"], r["baseline"])])
    return out


def fmt(x: float, unit: str) -> str:
    if unit != "s":
        return f"{x:.3g}"
    for name, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {name}"
    return f"{x / 1e-9:.3g} ns"


def verdict(goal_met: bool | None) -> str:
    """A row with no goal (None: a one-off cost) is reported, neither met nor failed."""
    return "reported" if goal_met is None else "yes" if goal_met else "NO"


def print_table(rows: list[dict]) -> None:
    table = [("row", "measured (min–max)", "baseline (min–max)", "measured ÷ baseline", "goal", "met")]
    for r in rows:
        unit = r.get("unit", "s")
        m = r.get("measured_spread")
        b = r.get("baseline_spread")
        q = r.get("measured_over_baseline")
        table.append((
            r["path"],
            "-" if not m else f"{fmt(m['min'], unit)}–{fmt(m['max'], unit)}",
            "-" if not b else f"{fmt(b['min'], unit)}–{fmt(b['max'], unit)} ({r.get('baseline_name')})",
            "-" if not q else f"{q['min']:.3g}–{q['max']:.3g}",
            r["goal"],
            verdict(r["goal_met"]),
        ))
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    print()
    for j, t in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a rough look)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the configurations (default 0)")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions of every side (default 7; 3 with --quick)")
    args = parser.parse_args(argv)
    quiet = args.json
    repeats = args.repeats or (3 if args.quick else 7)

    started = time.perf_counter()
    log(f"symform benchmarks: preset {PRESET}, 10^6 configurations, seed {args.seed}, {repeats} repetitions per side", quiet)
    configs = random_configs(10**6, args.seed)
    rows = [
        *compiled_rows(configs, repeats, quiet),
        subs_row(configs, repeats, quiet),
        llm_analysis_row(configs, repeats, quiet, k=500 if args.quick else 2000),
        sweep_memory_row(repeats, quiet),
    ]
    del configs
    rows.extend(module_rows(repeats, quiet))
    rows = [summarise(r) for r in rows]
    elapsed = time.perf_counter() - started
    environment = {
        "python": platform.python_version(), "numpy": np.__version__, "sympy": sympy.__version__, "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "preset": PRESET, "repeats": repeats, "seed": args.seed, "elapsed_s": elapsed,
    }
    if args.json:
        print(json.dumps({"rows": rows, "environment": environment}, indent=2, default=float))
    else:
        print_table(rows)
        print(f"\npython {environment['python']}, numpy {np.__version__}, sympy {sympy.__version__}, {os.cpu_count()} cpus, load {environment['load_average']}; took {elapsed:.1f} s. "
              "A goal is met only when its worst repetition meets it (exit status is always 0).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
