"""Published measured runs (hardware/measured/): each run's setup and measured figure, its model, and the calibration's reach: how far a case lies outside the runs the estimate was fitted on."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError, EvaluationError
from ...engine.graph.model import Model
from ...engine.language.families import find_preset, preset_config, spec_from_config
from ..memory.frameworks import sequence_parallel
from ..memory.settings import Layout, check_degree
from . import efficiencies


SPLITS = ("fit", "check")


@dataclass(frozen=True, eq=False)  # one object per run: cached by identity
class Run:
    source: str  # the file's stem
    name: str
    split: str
    kind: str  # "training" or "serving"
    setup: Mapping[str, Any]
    measured: tuple[str, float]  # what the source reports, and its value
    # why the measured figure is better than symform's floor for the setup as recorded (calibration.beyond_floor)
    beyond_floor: str | None = None


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


def served_figure(run: Run, ttft: float, tpot: float, total: float) -> float:
    """The figure a serving ``run`` reports, from its request's first token, mean decode step and whole time (seconds)."""
    what, s = run.measured[0], run.setup
    if what == "ttft_ms":
        return ttft * 1e3
    if what == "tokens_per_s_per_sequence":
        return 1 / tpot
    if what == "tokens_per_s":
        return s["batch"] * s["output"] / total
    if what == "tokens_per_s_per_gpu":
        return s["batch"] * s["output"] / total / s.get("tensor", 1)
    raise ConfigError(f"run {run.name}: unknown measured figure {what!r}; use ttft_ms, tokens_per_s_per_sequence, tokens_per_s or tokens_per_s_per_gpu")


@cache
def _timed_files() -> tuple[tuple[Path, dict[str, Any]], ...]:
    """hardware/measured's files of timed runs, each read once a process (measured peaks: memory_validation)."""
    found = ((path, read_toml(path)) for path in sorted((data_root() / "hardware" / "measured").glob("*.toml")))
    return tuple((path, data) for path, data in found if data.get("kind") != "measured_memory")


@cache
def sources() -> dict[str, dict[str, Any]]:
    """Each source file's [source] table, by file stem."""
    return {path.stem: data["source"] for path, data in _timed_files()}


@cache
def runs() -> tuple[Run, ...]:
    """Every timed run of hardware/measured, as its file states it."""
    return runs_in(_timed_files())


def runs_in(files: Iterable[tuple[Path, Mapping[str, Any]]]) -> tuple[Run, ...]:
    """The runs of measured-run files (path, table), each checked: its kind, split, one figure, its degrees."""
    found = []
    for path, data in files:
        kind = {"measured_training": "training", "measured_serving": "serving"}.get(data.get("kind"))
        if kind is None:
            raise ConfigError(f"{path}: kind must be measured_training or measured_serving")
        for entry in data.get("runs", []):
            entry = dict(entry)
            name, split, measured, beyond = entry.pop("name"), entry.pop("split"), entry.pop("measured"), entry.pop("beyond_floor", None)
            if split not in SPLITS or len(measured) != 1:
                raise ConfigError(f"{path}: run {name!r} needs split = fit or check and one measured figure")
            if kind == "training":
                try:
                    data_degree(entry)
                except (ConfigError, EvaluationError) as error:
                    raise ConfigError(f"{path}: run {name!r}: {error}") from None
            if beyond is not None and not (isinstance(beyond, str) and beyond.strip()):
                raise ConfigError(f"{path}: run {name!r}: beyond_floor must say why the figure beats the floor, in words")
            found.append(Run(path.stem, name, split, kind, entry, next(iter(measured.items())), beyond))
    return tuple(found)


#: The model-parallel degrees a training run may name; its data-parallel degree is what its GPUs leave over them.
MODEL_DEGREES = ("tensor", "pipeline", "context")


def data_degree(setup: Mapping[str, Any]) -> int:
    """A training run's data-parallel degree: its GPUs over its tensor, pipeline and context degrees (Megatron-Core's
    data-parallel size, world / (TP × PP × CP)), each a whole number of 1 or more whose product divides the GPUs."""
    degrees = [setup.get(name, 1) for name in MODEL_DEGREES]
    for name, value in zip(MODEL_DEGREES, degrees):
        check_degree(name, value)
    if setup["gpus"] % math.prod(degrees):
        named = " × ".join(f"{name} {value}" for name, value in zip(MODEL_DEGREES, degrees))
        raise ConfigError(f"{setup['gpus']} GPUs do not split into {named}; give degrees whose product divides the GPUs")
    return setup["gpus"] // math.prod(degrees)


def run_model(run: Run) -> Model:
    """The run's model: a config given inline, or a bundled preset with overrides; with the run's conventions
    (an FP8 KV cache's ``kv_bytes = 1``, say) and arguments (what ``--set`` gives: ``include_mtp = 1`` for a run
    that trained DeepSeek-V3's multi-token-prediction module)."""
    setup = run.setup
    if "config" in setup or "overrides" in setup:
        model = Model.from_config(_run_config(run), name=run.name)
    else:
        model = Model.load(setup["preset"])
    model = model.with_arguments(**setup["arguments"]) if "arguments" in setup else model
    return model.with_conventions(**setup["conventions"]) if "conventions" in setup else model


def _run_config(run: Run) -> dict[str, Any]:
    """The config a run's model is read from: given inline, or a bundled preset's (with the run's overrides)."""
    setup = run.setup
    if "config" in setup:
        return dict(setup["config"])
    if "overrides" not in setup:
        return preset_config(find_preset(setup["preset"]))[0]
    with open(data_root() / "formulas" / "presets" / f"{setup['preset']}.json", encoding="utf-8") as f:
        config = json.load(f)
    return config | dict(setup["overrides"])


@cache
def _reach(kind: str, device: str) -> dict[str, Any] | None:
    """What the fitted runs of ``kind`` on ``device``'s efficiency file cover (the held-out ones test the band, they do
    not widen its reach): the most devices they ran on and the dtypes the device's fitted runs of either kind ran
    their GEMMs at; None where none of ``kind`` was fitted there. Mixture-of-experts runs fit only the MoE factors,
    so they do not count here (``_moe_measured``)."""
    fitted = [r for r, moe in _fitted_on(device) if not moe]
    mine = [r.setup for r in fitted if r.kind == kind]
    if not mine:
        return None
    return {"most": max(s.get("gpus", s.get("tensor", 1)) for s in mine), "dtypes": {r.setup.get("dtype", "bf16") for r in fitted}}


def is_moe(run: Run) -> bool:
    """Whether the run's model has routed experts: its config binds n_experts (a size run_model(run).values
    holds), read without building and checking the model (an estimate asks of every fitted run on its device)."""
    if set(run.setup).isdisjoint(("config", "overrides")):
        return _preset_binds_experts(run.setup["preset"])  # runs of one preset share its answer
    return "n_experts" in spec_from_config(_run_config(run), name=run.name, origin=run.name).arguments


@cache
def _preset_binds_experts(preset: str) -> bool:
    return "n_experts" in spec_from_config(preset_config(find_preset(preset))[0], name=preset, origin=f"preset {preset}").arguments


def _moe_measured(kind: str, device: str) -> int:
    """How many fitted mixture-of-experts runs of ``kind`` were measured on ``device``'s efficiency file."""
    return sum(1 for r, moe in _fitted_on(device) if r.kind == kind and moe)


@cache
def _fitted_on(device: str) -> tuple[tuple[Run, bool], ...]:
    """The fitted runs measured on ``device``'s efficiency file, each with whether its model has routed experts
    (each config read once a process, and only the device's: a plan or an estimate asks of one device)."""
    return tuple((r, is_moe(r)) for r in runs() if r.split == "fit" and efficiencies.efficiency(r.setup["gpu"]).device == device)


@cache
def fitted_releases(kind: str) -> frozenset[tuple[str, str | None]]:
    """The (framework or engine, release) pairs the fitted runs of ``kind`` ran under, as their sources name them."""
    found = (run_release(r) for r in runs() if r.kind == kind and r.split == "fit")
    return frozenset(release for release in found if release is not None)


def extrapolating(kind: str, *, device: str, dtype: str, devices: int, moe: bool, features: Iterable[str] = (), release: tuple[str, str | None] | None = None) -> list[tuple[str, str]]:
    """How a case lies outside the published runs of its ``kind``: (the widening's name in rules.toml
    [band.widen], what to say), one per way. ``device``: its efficiency file's device; ``features``: layout
    features no run has (sequence parallelism, a virtual pipeline, ...)."""
    reach, found = _reach(kind, device), []
    if reach is None:
        found.append(("device", f"{device}: no fitted {kind} run measured on it, its efficiency factors borrowed"))
    elif dtype not in reach["dtypes"]:
        found.append(("dtype", f"{dtype} on {device} (its fitted runs: {', '.join(sorted(reach['dtypes']))})"))
    if reach is not None and devices > reach["most"]:
        found.append(("scale", f"{devices:,} GPUs ({device}'s fitted {kind} runs reach {reach['most']:,})"))
    if moe:  # a few MoE runs inform only the grouped GEMMs' cost; the frameworks' MoE recipes differ far more
        fitted = _moe_measured(kind, device)
        found.append(("moe", f"MoE ({fitted or 'no'} fitted {kind} run{'s' * (fitted != 1)} of a mixture of experts on {device})"))
    found += [("layout", f"{f} (no fitted run uses it)") for f in features]
    if release is not None and release not in fitted_releases(kind):
        name, version = release
        found.append(("framework", f"{name}{' ' + version if version else ''}: no fitted {kind} run ran under it"))
    return found


# --- a run's layout and framework, as its estimate times them -----------------------------------------


def run_layout(setup: Mapping[str, Any]) -> Layout:
    """The layout a measured training run names (its degrees, ZeRO stage and its replicas, pipeline schedule)."""
    chunks = setup.get("chunks", 1)
    schedule = "interleaved" if chunks > 1 else "1f1b"
    return Layout(
        data=data_degree(setup), tensor=setup.get("tensor", 1), pipeline=setup.get("pipeline", 1), context=setup.get("context", 1),
        expert=setup.get("expert", 1), zero=setup.get("zero", 0), schedule=schedule, chunks=chunks, expert_tensor=setup.get("expert_tensor"),
        replicate=setup.get("replicate", 1), pipeline_layout=setup.get("pipeline_layout"),
    )  # fmt: skip


def run_framework(run: Run) -> tuple[str | None, str | None]:
    """The framework or engine a run's source names, and its release: the run's own ``version`` where a page
    gathers several releases' tables, else the source's, if it names them."""
    source = sources().get(run.source, {})
    return source.get("framework"), run.setup.get("version", source.get("version"))


def run_release(run: Run) -> tuple[str, str | None] | None:
    """The framework or engine a run ran and its release, where its source names one (None otherwise)."""
    name, version = run_framework(run)
    return None if name is None else (name, version)


def run_profile(run: Run, factors: Mapping[str, Any] | None = None) -> efficiencies.TimeProfile | None:
    """The time-side facts of the framework and release the run's source names, for the run's model; a fitted
    ``framework:time.NAME`` factor in ``factors`` replaces the file's value."""
    name, version = run_framework(run)
    if run.kind != "training" or name is None:
        return None
    scales = {k.split(":time.", 1)[1]: v for k, v in (factors or {}).items() if k.startswith(f"{name}:time.")}
    return efficiencies.profile(name, version, run.setup.get("preset"), device=efficiencies.accelerator_name(run.setup["gpu"]), dtype=run.setup.get("dtype", "bf16"), scales=scales)


def training_layout(run: Run) -> Layout:
    """The run's layout, with sequence parallelism where its framework runs it beside tensor parallelism (its
    default, unless the run says otherwise: Megatron-LM of 2021 predates it)."""
    layout, (name, _) = run_layout(run.setup), run_framework(run)
    return replace(layout, sequence=sequence_parallel(name, run.setup.get("sequence_parallel"), layout.tensor))


@cache
def fitted_features() -> frozenset[str]:
    """The kinds of layout feature (layout_features) the fitted training runs have, as they are timed: a
    case with only these is no extrapolation in its layout."""
    found = set()
    for run in runs():
        if run.kind == "training" and run.split == "fit":
            layout, profile = training_layout(run), run_profile(run)
            found.update(kind for kind, _ in layout_features(layout, bool(profile and profile.overlaps_tensor(layout))))
    return frozenset(found)


def layout_features(layout: Layout, tp_comm_overlap: bool) -> list[tuple[str, str]]:
    """The layout's features beyond data, tensor and pipeline degrees and ZeRO: (kind, what to say) for each."""
    named = [("sequence", "sequence parallelism", layout.sequence), ("chunks", f"a virtual pipeline of {layout.chunks} chunks", layout.chunks > 1),
             ("tp_overlap", "tensor-parallel communication overlap", tp_comm_overlap), ("context", f"context parallelism {layout.context}", layout.context > 1),
             ("expert", f"expert parallelism {layout.expert}", layout.expert > 1), (layout.schedule, f"the {layout.schedule} schedule", layout.schedule not in ("1f1b",)),
             ("replicate", f"hybrid sharding over {layout.replicate} replicas", layout.replicate > 1),
             ("expert_tensor", f"experts folded at expert tensor degree {layout.etp}", layout.folded)]  # fmt: skip
    return [(kind, text) for kind, text, used in named if used]
