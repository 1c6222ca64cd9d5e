"""Published measured runs, symform's estimates of them, the errors, and the fit of the few fitted factors.

The runs live in ``hardware/measured/*.toml``, one file per source, each run with its
full setup (model, devices, layout, batch, sequence, precision), the figure the source
measured and how that source counts FLOPs. Each run is in the ``fit`` or the ``check``
split: the factors marked ``fitted`` in ``hardware/efficiency/`` are fitted on the first
(``fit_factors``) and the errors are reported on both (``docs/validation.md``, generated
by ``symform validate --markdown``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from ..memory.frameworks import timed_recompute
from . import estimate, grouped_gemm, phase_time, timing
from . import step_model
from . import efficiencies
from .measured_runs import SPLITS, TIME_FIGURES, Case, Run, is_moe, served_figure, run_framework, run_model, run_profile, run_release, runs, training_layout


# --- predictions --------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """What does not depend on the fitted factors: the model, the bounds, the kernels."""

    run: Run
    model: Model
    bounds: Any = None
    work: Any = None


def _prepare(run: Run) -> _Prepared:
    model, s = run_model(run), run.setup
    if run.kind == "training":
        layout, recompute, partial = training_layout(run), _recompute(run), s.get("recompute_layers")
        bounds = timing.training_time(
            model, s["gpu"], global_batch=s["global_batch"], micro_batch=s["micro_batch"], seq=s["seq"], layout=layout, recompute=recompute, dtype=s.get("dtype", "bf16"),
            flash=s.get("attention", "sdpa") != "eager", offload_layers=s.get("offload_layers", 0), offload_framework=run_framework(run)[0], recompute_layers=partial,
        )  # fmt: skip
        again = timing.recompute_share(model, partial, recompute, layout)
        work = estimate.kernels(step_model.at_dtype(model, s.get("dtype", "bf16")), "train", workload={"batch": s["micro_batch"], "seq": s["seq"]}, tensor=layout.tensor, pipeline=layout.pipeline, recompute=recompute, attention=s.get("attention", "sdpa"), context=layout.context, recompute_share=again)
        return _Prepared(run, model, bounds, work)
    # the kernels at the run's dtype: FP8 weights are read at one byte, as serving_estimate reads them
    at_dtype, attention = step_model.at_dtype(model, s.get("dtype", "bf16")), s.get("attention", "sdpa")
    work = estimate.serving_kernels(at_dtype, batch=s["batch"], prompt=s["prompt"], output=s["output"], tensor=s.get("tensor", 1), attention=attention)
    bounds = phase_time.inference_time(  # the floors of the run's bands, as the time command's
        model, s["gpu"], batch=s["batch"], prompt=s["prompt"], output=s["output"], tensor=s.get("tensor", 1), dtype=s.get("dtype", "bf16"), flash=attention != "eager", grouped=attention != "fused_per_head",
    )  # fmt: skip
    return _Prepared(run, model, bounds, work)


def _recompute(run: Run) -> str:
    """The run's recomputation as its framework runs it (its selective policy: frameworks.timed_recompute)."""
    return timed_recompute(run_framework(run)[0], run.setup.get("recompute", "none"))


@cache
def _prepared(run: Run) -> _Prepared:
    return _prepare(run)


def predict(run: Run, factors: Mapping[str, Any] | None = None) -> float:
    """symform's estimate of the figure ``run`` reports, with the bundled factors or ``factors`` replacing some."""
    return predict_with_band(run, factors)[0]


def predict_with_band(run: Run, factors: Mapping[str, Any] | None = None) -> tuple[float, tuple[float, float]]:
    """The estimate of the figure ``run`` reports, and the band of the time behind it relative to its estimate."""
    prepared, s = _prepared(run), run.setup
    eff = _efficiency(s["gpu"], factors or {})
    if run.kind == "training":
        convention = _training_fusion(factors or {}, eff)
        result = estimate.training_estimate(
            prepared.model, s["gpu"], global_batch=s["global_batch"], micro_batch=s["micro_batch"], seq=s["seq"], layout=training_layout(run),
            recompute=_recompute(run), dtype=s.get("dtype", "bf16"), attention=s.get("attention", "sdpa"), efficiency_data=eff, bounds=prepared.bounds, work=prepared.work, convention=convention,
            profile=run_profile(run, factors), ep_comm_overlap=s.get("ep_comm_overlap", False), recompute_layers=s.get("recompute_layers"),
        )
        return _training_figure(run, prepared, result.step.estimate), _relative(result.step)
    result = estimate.serving_estimate(
        prepared.model, s["gpu"], batch=s["batch"], prompt=s["prompt"], output=s["output"], tensor=s.get("tensor", 1),
        dtype=s.get("dtype", "bf16"), attention=s.get("attention", "sdpa"), efficiency_data=eff, work=prepared.work, release=run_release(run), bounds=prepared.bounds,
    )
    band = {"ttft_ms": result.ttft, "tokens_per_s_per_sequence": result.tpot}.get(run.measured[0], result.total)
    return _serving_figure(run, result), _relative(band)


def _relative(band: estimate.Band) -> tuple[float, float]:
    return band.low / band.estimate, band.high / band.estimate


def _efficiency(gpu: str, factors: Mapping[str, Any]) -> efficiencies.Efficiency:
    eff = efficiencies.efficiency(gpu)
    mine = {k.split(":", 1)[1]: v for k, v in factors.items() if k.startswith(f"{eff.device}:")}
    if "gemm.model" in mine:  # first: the model's own fit, then any factor given beside it
        eff = eff.with_gemm_model(mine["gemm.model"])
    if "gemm.sustained" in mine:
        eff = replace(eff, gemm_sustained=mine["gemm.sustained"])
    if "gemm.half_flops" in mine:
        eff = replace(eff, half_flops=mine["gemm.half_flops"])
    if "kernel.launch_s" in mine:
        eff = replace(eff, launch_s=mine["kernel.launch_s"])
    if "moe.expert_s" in mine:
        eff = replace(eff, expert_s=mine["moe.expert_s"])
    if "memory.fraction" in mine:
        eff = replace(eff, memory=mine["memory.fraction"])
    links = dict(eff.links)
    for key, value in mine.items():
        if key.startswith("links."):  # links.<link>.<bus_efficiency or latency_s>
            _, name, field = key.split(".")
            links[name] = replace(links[name], **{field: value})
    if links != eff.links:
        eff = replace(eff, links=links)
    return eff


def _training_fusion(factors: Mapping[str, Any], eff: efficiencies.Efficiency) -> str | tuple[float, frozenset[str]]:
    # a device whose compiler fuses for itself (XLA) keeps its own convention: the fitted fraction is the eager frameworks'
    if "rules:fusion.training.fraction" not in factors or eff.training_fusion:
        return "training"
    return (factors["rules:fusion.training.fraction"], efficiencies.rules().fusion["training"][1])


def narayanan_flops(model: Model, batch: int, seq: int) -> float:
    """Narayanan et al. 2021, Eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), full recomputation included."""
    v = model.values
    h, layers, vocab = v["d_model"], v["n_layers"], v["vocab"]
    return 96 * batch * seq * layers * h**2 * (1 + seq / (6 * h) + vocab / (16 * layers * h))


def _training_figure(run: Run, prepared: _Prepared, seconds: float) -> float:
    what, s = run.measured[0], run.setup
    if what == "tflops_per_gpu":
        return narayanan_flops(prepared.model, s["global_batch"], s["seq"]) / (seconds * s["gpus"]) / 1e12
    if what == "tokens_per_s":
        return s["global_batch"] * s["seq"] / seconds
    if what == "tokens_per_s_per_gpu":
        return s["global_batch"] * s["seq"] / seconds / s["gpus"]
    raise ConfigError(f"run {run.name}: unknown measured figure {what!r}; use tflops_per_gpu, tokens_per_s or tokens_per_s_per_gpu")


def _serving_figure(run: Run, result: estimate.ServingEstimate) -> float:
    return served_figure(run, result.ttft.estimate, result.tpot.estimate, result.total.estimate)


def floor_figure(run: Run) -> float:
    """The figure ``run`` would report at symform's floor for its setup as recorded: the least time any implementation
    takes (the datasheet peaks, everything overlapped), so a measured figure beyond it says the setup is not what ran."""
    prepared = _prepared(run)
    if run.kind == "training":
        return _training_figure(run, prepared, prepared.bounds.time_lower)
    bounds = prepared.bounds
    return served_figure(run, bounds.ttft_lower, bounds.tpot_lower, bounds.total_lower)


def beyond_floor(run: Run) -> bool:
    """Whether the measured figure is better than the floor allows: a shorter time, or a higher rate."""
    what, measured = run.measured
    floor = floor_figure(run)
    return measured < floor if what in TIME_FIGURES else measured > floor


def validate(factors: Mapping[str, Any] | None = None, only: Iterable[Run] | None = None) -> list[Case]:
    return [Case(run, *predict_with_band(run, factors)) for run in (runs() if only is None else only)]


# --- the calibration's reach: what the runs cover, and how far a case lies outside it ---------------


@dataclass(frozen=True)
class Summary:
    kind: str
    split: str
    count: int
    median: float  # of |error|
    worst: float
    worst_case: str
    inside: int = 0  # measured values inside their estimate's band


def summarise(cases: list[Case]) -> list[Summary]:
    found = []
    for kind in ("training", "serving"):
        for split in (*SPLITS, "all"):
            chosen = [c for c in cases if c.run.kind == kind and split in (c.run.split, "all")]
            if chosen:
                worst = max(chosen, key=lambda c: abs(c.error))
                inside = sum(bool(c.inside) for c in chosen)
                found.append(Summary(kind, split, len(chosen), statistics.median(abs(c.error) for c in chosen), abs(worst.error), worst.run.name, inside))
    return found


# --- the fit ------------------------------------------------------------------------------------------

def _quantised_moe(run: Run) -> bool:
    """A mixture-of-experts run of a recipe that quantises each expert apart (the runs the time per expert is fitted on)."""
    return run.setup.get("dtype") in grouped_gemm.QUANTISED and is_moe(run)


def _on(device: str) -> Callable[[Run], bool]:
    """Whether a run ran on ``device``, by the efficiency file its gpu names (an accelerator or a system built of it)."""
    return lambda r: efficiencies.efficiency(r.setup["gpu"]).device == device


#: The fitted factors: name, the runs that inform it, and the range searched.
FITTED: tuple[tuple[str, Callable[[Run], bool], tuple[float, float]], ...] = (
    ("a100-sxm-80gb:gemm.sustained", lambda r: r.setup["gpu"] == "a100-sxm-80gb", (0.4, 1.0)),
    # the H100's bf16 rate from its dense training runs; its FP8 serving runs inform the roll-off, launch and latency
    ("h100-sxm:gemm.sustained", lambda r: r.kind == "training" and r.setup["gpu"] == "h100-sxm" and not is_moe(r), (0.3, 1.0)),
    # the B200's and GB200's fp8 rates from their dense training runs (GB200's on a rack of them: gb200-nvl72)
    ("b200:gemm.sustained", lambda r: r.kind == "training" and _on("b200")(r) and not is_moe(r), (0.3, 1.0)),
    ("gb200:gemm.sustained", lambda r: r.kind == "training" and _on("gb200")(r) and not is_moe(r), (0.3, 1.0)),
    # the MI325X's fp8 rate from its dense training runs (Primus on one node of 8)
    ("mi325x:gemm.sustained", lambda r: r.kind == "training" and _on("mi325x")(r) and not is_moe(r), (0.3, 1.0)),
    # TPU v5p's, v5e's and v6e's bf16 rates from their dense training runs (on slices of them: tpu-v5p-128, ...)
    ("tpu-v5p:gemm.sustained", lambda r: r.kind == "training" and _on("tpu-v5p")(r) and not is_moe(r), (0.3, 1.0)),
    ("tpu-v5e:gemm.sustained", lambda r: r.kind == "training" and _on("tpu-v5e")(r) and not is_moe(r), (0.3, 1.0)),
    ("tpu-v6e:gemm.sustained", lambda r: r.kind == "training" and _on("tpu-v6e")(r) and not is_moe(r), (0.3, 1.0)),
    # a GEMM of half_flops runs at half the sustained rate: up to 10 GFLOP (a few µs of work)
    ("a100-sxm-80gb:gemm.half_flops", lambda r: r.setup["gpu"] == "a100-sxm-80gb", (0.0, 1e10)),
    # the eager frameworks' fusion, on the runs it acts on (not those of a device whose compiler fuses for itself: XLA's TPUs)
    ("rules:fusion.training.fraction", lambda r: r.kind == "training" and not is_moe(r) and not efficiencies.efficiency(r.setup["gpu"]).training_fusion, (0.0, 1.0)),
    # a kernel's fixed cost: the many small kernels of single-device serving show it (a few µs each),
    # apart from the all-reduces' latency, which the multi-device runs then show
    ("a100-sxm-80gb:kernel.launch_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "a100-sxm-80gb" and r.setup.get("tensor", 1) == 1, (0.0, 20e-6)),
    ("a100-sxm-80gb:links.scale_up.latency_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "a100-sxm-80gb" and r.setup.get("tensor", 1) > 1, (0.5e-6, 40e-6)),
    ("h100-sxm:gemm.half_flops", lambda r: r.setup["gpu"] == "h100-sxm" and not is_moe(r), (0.0, 4e10)),
    ("h100-sxm:kernel.launch_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "h100-sxm" and r.setup.get("tensor", 1) == 1, (0.0, 20e-6)),
    # the time each local expert adds to an FP8 grouped GEMM call (symform.analysis.time.grouped_gemm), on each
    # device's FP8 mixture-of-experts runs with its dense factors as fitted above
    ("h100-sxm:moe.expert_s", lambda r: r.setup["gpu"] == "h100-sxm" and _quantised_moe(r), (0.0, 80e-6)),
    ("b200:moe.expert_s", lambda r: r.setup["gpu"] == "b200" and _quantised_moe(r), (0.0, 40e-6)),
    ("gb200:moe.expert_s", lambda r: _on("gb200")(r) and _quantised_moe(r), (0.0, 40e-6)),
    # the L40S from its own single-card serving runs of the fit split (a decode-heavy one and two first tokens, one
    # bound by the weights' read, one by the GEMMs), its GDDR6 fraction, its FP8 rate and its roll-off fitted together
    ("l40s:memory.fraction", lambda r: r.kind == "serving" and r.setup["gpu"] == "l40s" and r.setup.get("tensor", 1) == 1, (0.4, 1.0)),
    ("l40s:gemm.sustained", lambda r: r.kind == "serving" and r.setup["gpu"] == "l40s" and r.setup.get("tensor", 1) == 1, (0.3, 1.0)),
    ("l40s:gemm.half_flops", lambda r: r.kind == "serving" and r.setup["gpu"] == "l40s" and r.setup.get("tensor", 1) == 1, (0.0, 4e10)),
    # its PCIe all-reduces (no NVLink) from its one multi-card serving run of the fit split
    ("l40s:links.pcie.bus_efficiency", lambda r: r.kind == "serving" and r.setup["gpu"] == "l40s" and r.setup.get("tensor", 1) > 1, (0.1, 1.0)),
)


def gemm_model_factors(model: str | None) -> dict[str, str]:
    """The factors that put every fitted device under GEMM ``model`` (at that model's own fit); none for
    the bundled model (or ``None``)."""
    devices = sorted({name.split(":", 1)[0] for name, _, _ in FITTED if not name.startswith("rules:") and ":time." not in name})
    if model is None:
        return {}
    # a device whose file holds no fit of that model keeps its own
    return {f"{d}:gemm.model": model for d in devices if efficiencies.efficiency(d).gemm_model != model and model in efficiencies.efficiency(d).gemm_fits}


def _loss(factors: Mapping[str, Any], chosen: list[Run]) -> float:
    return statistics.fmean(abs(math.log(predict(r, factors) / r.measured[1])) for r in chosen)


def fit_factors(rounds: int = 2, steps: int = 24, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fitted factors, by coordinate search of the mean |log error| over the ``fit`` split, with the
    ``given`` factors (a GEMM model, say) held as they are."""
    fit_runs = [r for r in runs() if r.split == "fit"]
    factors: dict[str, Any] = dict(given or {})
    for _ in range(rounds):
        for name, informs, (floor, ceiling) in FITTED:
            chosen = [r for r in fit_runs if informs(r)]
            low, high = floor, ceiling
            for _ in range(3):  # narrow the grid around the best point, never leaving the range
                grid = [low + (high - low) * i / steps for i in range(steps + 1)]
                best = min(grid, key=lambda x: _loss(factors | {name: x}, chosen))
                width = (high - low) / steps
                low, high = max(best - width, floor), min(best + width, ceiling)
            factors[name] = best
    return factors


def band(cases: list[Case], kind: str) -> float:
    """The 90th percentile of |error| over the fit split of ``kind`` (mixtures of experts aside): the band's half-width."""
    # mixture-of-experts runs are not cases like the rest: their band widens by rules.toml [band_widen] moe
    errors = sorted(abs(c.error) for c in cases if c.run.kind == kind and c.run.split == "fit" and not is_moe(c.run))
    return errors[min(len(errors) - 1, math.ceil(0.9 * len(errors)) - 1)]
