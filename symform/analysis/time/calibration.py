"""Published measured runs, symform's estimates of them, the errors, and the fit of the few fitted factors.

The runs live in ``hardware/measured/*.toml``, one file per source, each run with its
full setup (model, devices, layout, batch, sequence, precision), the figure the source
measured and how that source counts FLOPs. Each run is in the ``fit`` or the ``check``
split: the factors marked ``fitted`` in ``hardware/efficiency/`` are fitted on the first
(``fit_factors``) and the errors are reported on both (``docs/validation.md``, generated
by ``symform validate --markdown``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from . import estimate, timing
from ..memory.memory import Layout

SPLITS = ("fit", "check")


@dataclass(frozen=True, eq=False)  # one object per run: cached by identity
class Run:
    source: str  # the file's stem
    name: str
    split: str
    kind: str  # "training" or "serving"
    setup: Mapping[str, Any]
    measured: tuple[str, float]  # what the source reports, and its value


@dataclass(frozen=True)
class Case:
    run: Run
    predicted: float
    # the band of the time behind the figure, relative to its estimate: (low / estimate, high / estimate)
    band: tuple[float, float] | None = None

    @property
    def error(self) -> float:
        """Relative error of the estimate on the figure the source reports."""
        return self.predicted / self.run.measured[1] - 1

    @property
    def inside(self) -> bool | None:
        """Whether the measured value lies inside the estimate's band (None without a band)."""
        if self.band is None:
            return None
        rate = self.run.measured[0] not in TIME_FIGURES  # a rate's time is its inverse
        measured_time = (1 + self.error) if rate else 1 / (1 + self.error)  # measured time / estimated time
        return self.band[0] <= measured_time <= self.band[1]


#: Figures the sources report as times (the others are rates: tokens or FLOPs per second).
TIME_FIGURES = ("ttft_ms",)


@cache
def sources() -> dict[str, dict[str, Any]]:
    """Each source file's [source] table, by file stem."""
    found = ((path.stem, read_toml(path)) for path in sorted((data_root() / "hardware" / "measured").glob("*.toml")))
    return {stem: data["source"] for stem, data in found if data.get("kind") != "measured_memory"}  # peaks: memory_validation


@cache
def runs() -> tuple[Run, ...]:
    found = []
    for path in sorted((data_root() / "hardware" / "measured").glob("*.toml")):
        data = read_toml(path)
        if data.get("kind") == "measured_memory":  # measured peaks: symform.analysis.memory.memory_validation
            continue
        kind = {"measured_training": "training", "measured_serving": "serving"}.get(data.get("kind"))
        if kind is None:
            raise ConfigError(f"{path}: kind must be measured_training or measured_serving")
        for entry in data.get("runs", []):
            entry = dict(entry)
            name, split, measured = entry.pop("name"), entry.pop("split"), entry.pop("measured")
            if split not in SPLITS or len(measured) != 1:
                raise ConfigError(f"{path}: run {name!r} needs split = fit or check and one measured figure")
            found.append(Run(path.stem, name, split, kind, entry, next(iter(measured.items()))))
    return tuple(found)


def run_model(run: Run) -> Model:
    """The run's model: a config given inline, or a bundled preset with overrides; with the run's conventions
    (an FP8 KV cache's ``kv_bytes = 1``, say)."""
    setup = run.setup
    if "config" in setup:
        model = Model.from_config(dict(setup["config"]), name=run.name)
    elif "overrides" not in setup:
        model = Model.load(setup["preset"])
    else:
        with open(data_root() / "formulas" / "presets" / f"{setup['preset']}.json", encoding="utf-8") as f:
            config = json.load(f)
        model = Model.from_config(config | dict(setup["overrides"]), name=run.name)
    return model.with_conventions(**setup["conventions"]) if "conventions" in setup else model


# --- predictions --------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """What does not depend on the fitted factors: the model, the bounds, the kernels."""

    run: Run
    model: Model
    bounds: Any = None
    work: Any = None


def _layout(setup: Mapping[str, Any]) -> Layout:
    t, p, chunks = setup.get("tensor", 1), setup.get("pipeline", 1), setup.get("chunks", 1)
    schedule = "interleaved" if chunks > 1 else "1f1b"
    return Layout(data=setup["gpus"] // (t * p), tensor=t, pipeline=p, expert=setup.get("expert", 1), zero=setup.get("zero", 0), schedule=schedule, chunks=chunks)


def _prepare(run: Run) -> _Prepared:
    model, s = run_model(run), run.setup
    if run.kind == "training":
        layout = _layout(s)
        bounds = timing.training_time(model, s["gpu"], global_batch=s["global_batch"], micro_batch=s["micro_batch"], seq=s["seq"], layout=layout, recompute=s.get("recompute", "none"), dtype=s.get("dtype", "bf16"), flash=s.get("attention", "sdpa") != "eager")
        work = estimate.kernels(timing.at_dtype(model, s.get("dtype", "bf16")), "train", workload={"batch": s["micro_batch"], "seq": s["seq"]}, tensor=layout.tensor, pipeline=layout.pipeline, recompute=s.get("recompute", "none"), attention=s.get("attention", "sdpa"))
        return _Prepared(run, model, bounds, work)
    # the kernels at the run's dtype: FP8 weights are read at one byte, as serving_estimate reads them
    work = estimate.serving_kernels(timing.at_dtype(model, s.get("dtype", "bf16")), batch=s["batch"], prompt=s["prompt"], output=s["output"], tensor=s.get("tensor", 1), attention=s.get("attention", "sdpa"))
    return _Prepared(run, model, None, work)


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
        convention = _training_fusion(factors or {})
        result = estimate.training_estimate(
            prepared.model, s["gpu"], global_batch=s["global_batch"], micro_batch=s["micro_batch"], seq=s["seq"], layout=_layout(s),
            recompute=s.get("recompute", "none"), dtype=s.get("dtype", "bf16"), attention=s.get("attention", "sdpa"), efficiency_data=eff, bounds=prepared.bounds, work=prepared.work, convention=convention,
        )
        return _training_figure(run, prepared, result.step.estimate), _relative(result.step)
    result = estimate.serving_estimate(
        prepared.model, s["gpu"], batch=s["batch"], prompt=s["prompt"], output=s["output"], tensor=s.get("tensor", 1),
        dtype=s.get("dtype", "bf16"), attention=s.get("attention", "sdpa"), efficiency_data=eff, work=prepared.work,
    )
    band = {"ttft_ms": result.ttft, "tokens_per_s_per_sequence": result.tpot}.get(run.measured[0], result.total)
    return _serving_figure(run, result), _relative(band)


def _relative(band: estimate.Band) -> tuple[float, float]:
    return band.low / band.estimate, band.high / band.estimate


def _efficiency(gpu: str, factors: Mapping[str, Any]) -> estimate.Efficiency:
    eff = estimate.efficiency(gpu)
    mine = {k.split(":", 1)[1]: v for k, v in factors.items() if k.startswith(f"{eff.device}:")}
    if "gemm.model" in mine:  # first: the model's own fit, then any factor given beside it
        eff = eff.with_gemm_model(mine["gemm.model"])
    if "gemm.sustained" in mine:
        eff = replace(eff, gemm_sustained=mine["gemm.sustained"])
    if "gemm.half_flops" in mine:
        eff = replace(eff, half_flops=mine["gemm.half_flops"])
    if "kernel.launch_s" in mine:
        eff = replace(eff, launch_s=mine["kernel.launch_s"])
    if "links.scale_up.latency_s" in mine:
        links = dict(eff.links)
        links["scale_up"] = replace(links["scale_up"], latency_s=mine["links.scale_up.latency_s"])
        eff = replace(eff, links=links)
    return eff


def _training_fusion(factors: Mapping[str, Any]) -> str | tuple[float, frozenset[str]]:
    if "rules:fusion.training.fraction" not in factors:
        return "training"
    return (factors["rules:fusion.training.fraction"], estimate.rules().fusion["training"][1])


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
    what = run.measured[0]
    if what == "ttft_ms":
        return result.ttft.estimate * 1e3
    if what == "tokens_per_s_per_sequence":
        return 1 / result.tpot.estimate
    if what == "tokens_per_s":
        return result.tokens_per_s.estimate
    if what == "tokens_per_s_per_gpu":
        return result.tokens_per_s.estimate / run.setup.get("tensor", 1)
    raise ConfigError(f"run {run.name}: unknown measured figure {what!r}; use ttft_ms, tokens_per_s_per_sequence, tokens_per_s or tokens_per_s_per_gpu")


def validate(factors: Mapping[str, Any] | None = None, only: Iterable[Run] | None = None) -> list[Case]:
    return [Case(run, *predict_with_band(run, factors)) for run in (runs() if only is None else only)]


# --- the calibration's reach: what the runs cover, and how far a case lies outside it ---------------


@cache
def _reach(kind: str) -> dict[str, Any]:
    """What the fitted runs of ``kind`` cover (the held-out ones test the band, they do not widen its reach): the
    efficiency files they were measured on (by the file's device), the most devices on each, and the dtypes
    each device's fitted runs of either kind ran their GEMMs at."""
    devices: dict[str, dict[str, Any]] = {}
    fitted = [r for r in runs() if r.split == "fit"]
    for run in fitted:
        s = run.setup
        device = estimate.efficiency(s["gpu"]).device
        if run.kind == kind:
            seen = devices.setdefault(device, {"dtypes": set(), "most": 0})
            seen["most"] = max(seen["most"], s.get("gpus", s.get("tensor", 1)))
    for run in fitted:
        device = estimate.efficiency(run.setup["gpu"]).device
        if device in devices:
            devices[device]["dtypes"].add(run.setup.get("dtype", "bf16"))
    return devices


@cache
def _moe_measured(kind: str) -> bool:
    return any("n_experts" in run_model(r).values for r in runs() if r.kind == kind and r.split == "fit")


def extrapolating(kind: str, *, device: str, dtype: str, devices: int, moe: bool, features: Iterable[str] = ()) -> list[tuple[str, str]]:
    """How a case lies outside the published runs of its ``kind``: (the widening's name in rules.toml
    [band.widen], what to say), one per way. ``device``: its efficiency file's device; ``features``: layout
    features no run has (sequence parallelism, a virtual pipeline, ...)."""
    reach, found = _reach(kind), []
    if device not in reach:
        found.append(("device", f"{device}: no fitted {kind} run measured on it, its efficiency factors borrowed"))
    elif dtype not in reach[device]["dtypes"]:
        found.append(("dtype", f"{dtype} on {device} (its fitted runs: {', '.join(sorted(reach[device]['dtypes']))})"))
    if device in reach and devices > reach[device]["most"]:
        found.append(("scale", f"{devices:,} GPUs ({device}'s fitted {kind} runs reach {reach[device]['most']:,})"))
    if moe and not _moe_measured(kind):
        found.append(("moe", f"MoE (no fitted {kind} run of a mixture of experts)"))
    found += [("layout", f"{f} (no fitted run uses it)") for f in features]
    return found


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

#: The fitted factors: name, the runs that inform it, and the range searched.
FITTED: tuple[tuple[str, Callable[[Run], bool], tuple[float, float]], ...] = (
    ("a100-sxm-80gb:gemm.sustained", lambda r: r.setup["gpu"] == "a100-sxm-80gb", (0.4, 1.0)),
    # the H100's bf16 rate from its training runs; its FP8 serving runs inform the roll-off, launch and latency
    ("h100-sxm:gemm.sustained", lambda r: r.kind == "training" and r.setup["gpu"] == "h100-sxm", (0.3, 1.0)),
    # a GEMM of half_flops runs at half the sustained rate: up to 10 GFLOP (a few µs of work)
    ("a100-sxm-80gb:gemm.half_flops", lambda r: r.setup["gpu"] == "a100-sxm-80gb", (0.0, 1e10)),
    ("rules:fusion.training.fraction", lambda r: r.kind == "training", (0.0, 1.0)),
    # a kernel's fixed cost: the many small kernels of single-device serving show it (a few µs each),
    # apart from the all-reduces' latency, which the multi-device runs then show
    ("a100-sxm-80gb:kernel.launch_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "a100-sxm-80gb" and r.setup.get("tensor", 1) == 1, (0.0, 20e-6)),
    ("a100-sxm-80gb:links.scale_up.latency_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "a100-sxm-80gb" and r.setup.get("tensor", 1) > 1, (0.5e-6, 40e-6)),
    ("h100-sxm:gemm.half_flops", lambda r: r.setup["gpu"] == "h100-sxm", (0.0, 4e10)),
    ("h100-sxm:kernel.launch_s", lambda r: r.kind == "serving" and r.setup["gpu"] == "h100-sxm" and r.setup.get("tensor", 1) == 1, (0.0, 20e-6)),
)


def gemm_model_factors(model: str | None) -> dict[str, str]:
    """The factors that put every fitted device under GEMM ``model`` (at that model's own fit); none for
    the bundled model (or ``None``)."""
    devices = sorted({name.split(":", 1)[0] for name, _, _ in FITTED if not name.startswith("rules:")})
    if model is None:
        return {}
    return {f"{d}:gemm.model": model for d in devices if estimate.efficiency(d).gemm_model != model}


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
    """The 90th percentile of |error| over the fit split of ``kind``: the band's half-width."""
    errors = sorted(abs(c.error) for c in cases if c.run.kind == kind and c.run.split == "fit")
    return errors[min(len(errors) - 1, math.ceil(0.9 * len(errors)) - 1)]
