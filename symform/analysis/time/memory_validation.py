"""Predicted peak memory against published measured peaks (hardware/measured/*.toml of kind measured_memory).

Each run names its model, layout, micro-batch, recomputation and the framework it ran under; symform predicts the
peak as ``training_memory`` counts it under that framework, less what lies outside the caching allocator (the CUDA
context) when the source reports the allocator's peak, and checks the whole prediction against the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Mapping

from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from ..memory.frameworks import framework, sequence_parallel
from ..memory.memory import Training, training_memory
from ..memory.settings import Layout
from . import measured_runs
from .step_model import placement

FIGURES = {"peak_reserved_gib": 2**30}  # the figure each source reports, and its unit in bytes


@dataclass(frozen=True)
class MemoryRun:
    source: str  # the file's stem
    name: str
    setup: Mapping[str, Any]
    measured: tuple[str, float]


@dataclass(frozen=True)
class MemoryCase:
    run: MemoryRun
    predicted_bytes: float  # comparable with the figure: the allocator's peak where the source reports that
    total_bytes: float  # everything on the device, the CUDA context included
    capacity_bytes: float

    @property
    def measured_bytes(self) -> float:
        figure, value = self.run.measured
        return value * FIGURES[figure]

    @property
    def error(self) -> float:
        return self.predicted_bytes / self.measured_bytes - 1

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


@cache
def memory_sources() -> dict[str, dict[str, Any]]:
    return {path.stem: read_toml(path)["source"] for path in _files()}


@cache
def memory_runs() -> tuple[MemoryRun, ...]:
    found = []
    for path in _files():
        for entry in read_toml(path).get("runs", []):
            entry = dict(entry)
            name, measured = entry.pop("name"), entry.pop("measured")
            if len(measured) != 1 or next(iter(measured)) not in FIGURES:
                raise ConfigError(f"{path}: run {name!r} needs one measured figure, one of {', '.join(FIGURES)}")
            found.append(MemoryRun(path.stem, name, entry, next(iter(measured.items()))))
    return tuple(found)


def _files():
    return [p for p in sorted((data_root() / "hardware" / "measured").glob("*.toml")) if read_toml(p).get("kind") == "measured_memory"]


def predict(run: MemoryRun) -> MemoryCase:
    s = run.setup
    fw = framework(s.get("framework", "torchtitan"))
    tensor = s.get("tensor", 1)
    layout = Layout(
        data=s.get("data", 1), tensor=tensor, pipeline=s.get("pipeline", 1), context=s.get("context", 1), zero=s.get("zero", 3),
        sequence=sequence_parallel(fw.name, s.get("sequence_parallel"), tensor), replicate=s.get("replicate", 1),
    )  # fmt: skip
    setup = Training(precision=s.get("precision", "mixed"), recompute=s.get("recompute", "none"), flash=True, layout=layout, framework=fw.name)
    report = training_memory(Model.load(s["model"]), batch=s["micro_batch"], seq=s["seq"], setup=setup)
    total = float(report.total)
    outside = sum(float(report.values.get(name, 0)) for name in fw.outside_allocator())
    predicted = total - outside if run.measured[0].startswith("peak_reserved") else total
    return MemoryCase(run, predicted, total, s["gpu_memory_gb"] * 1e9)


def memory_cases() -> list[MemoryCase]:
    return [predict(run) for run in memory_runs()]


def median_abs_error(cases: list[MemoryCase]) -> float:
    errors = sorted(abs(c.error) for c in cases)
    middle = len(errors) // 2
    return errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2


def markdown_section(cases: list[MemoryCase]) -> list[str]:
    """docs/validation.md's section on peak memory: the summary, then each source's runs."""
    if not cases:
        return []
    worst = max(cases, key=lambda c: abs(c.error))
    lines = [
        "## Peak memory per device",
        "",
        "symform memory --train under each run's framework (formulas/frameworks) against the peak the source measured. "
        "A source that reports the caching allocator's peak (torch.cuda.max_memory_reserved) is compared without what lies "
        "outside it (the CUDA context); \"fits\" checks the whole prediction against the device.",
        "",
        "| cases | median abs error | worst abs error | worst case | predicted not to fit |",
        "|---:|---:|---:|---|---:|",
        f"| {len(cases)} | {median_abs_error(cases):.1%} | {abs(worst.error):.1%} | {worst.run.name} | {sum(not c.fits for c in cases)} |",
    ]
    for stem, source in memory_sources().items():
        mine = [c for c in cases if c.run.source == stem]
        lines += ["", f"### {source['title']}", "", f"Source: <{source['url']}>" + "".join(f", <{u}>" for u in source.get("also", [])), "", f"Figure: {source['figure']}.", "", f"Setup: {source['setup']}.", ""]
        lines += ["Assumed where the source is silent:", ""] + [f"- {a}" for a in source.get("assumed", [])] + [""]
        lines += ["| run | source's table | setup | measured GiB | predicted GiB | error | fits |", "|---|---|---|---:|---:|---:|---|"]
        for c in mine:
            lines.append(f"| {c.run.name} | {c.run.setup.get('table', '')} | {_setup(c.run.setup)} | {c.measured_bytes / 2**30:.2f} | {c.predicted_bytes / 2**30:.2f} | {c.error:+.1%} | {'yes' if c.fits else 'no'} ({c.total_bytes / 1e9:.1f} of {c.capacity_bytes / 1e9:.0f} GB) |")
    return lines


def _setup(s: Mapping[str, Any]) -> str:
    degrees = ", ".join(f"{k} {s[k]}" for k in ("data", "tensor", "pipeline", "context") if s.get(k, 1) != 1)
    extras = [x for x in ("compile", "float8") if s.get(x)]
    return f"{s['model']}; {degrees}; micro-batch {s['micro_batch']} × {s['seq']:,}; recompute {s.get('recompute', 'none')}; {s.get('framework', 'torchtitan')}" + (f" ({', '.join(extras)} not modelled)" if extras else "")


def within(cases: list[MemoryCase], limit: float) -> bool:
    return not math.isnan(median_abs_error(cases)) and median_abs_error(cases) <= limit


# --- the timed runs: do they fit where they ran? ------------------------------------------------------


@dataclass(frozen=True)
class TimedRunFit:
    """symform's training memory of a published timed run (the measured training runs) on the device it ran on."""

    run: measured_runs.Run
    framework: str
    total_bytes: float
    capacity_bytes: float
    not_modelled: tuple[str, ...]  # the run's settings symform's memory does not count

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


# settings of a timed run that change its memory but that symform's training memory does not take
_UNMODELLED = {
    "model_code": (None, "the framework's own modules (symform declares transformers')"),
}


def timed_layout(run: measured_runs.Run) -> Layout:
    """The layout a timed training run's memory is counted at: the degrees it names (measured_runs.run_layout), with
    its framework's sequence parallelism and distributed optimizer, and the micro-batches each data-parallel rank
    runs in a step (what the schedule keeps in flight reads them)."""
    s, fw = run.setup, _timed_framework(run)
    base = measured_runs.run_layout(s)
    return replace(
        base, sequence=sequence_parallel(fw.name, s.get("sequence_parallel"), base.tensor),
        distributed_optimizer=base.zero == 0 and fw.default("distributed_optimizer", None),
        microbatches=s["global_batch"] // (s["micro_batch"] * base.data),
    )  # fmt: skip


def _timed_framework(run: measured_runs.Run):
    """The framework the run's source names (torchtitan where it names none)."""
    return framework(measured_runs.sources()[run.source].get("framework", "torchtitan"))


def timed_run_fit(run: measured_runs.Run) -> TimedRunFit:
    s, fw, layout = run.setup, _timed_framework(run), timed_layout(run)
    setup = Training(
        precision=timed_precision(s), recompute=s.get("recompute", "none"), flash=s.get("attention", "sdpa") != "eager", layout=layout, framework=fw.name,
        recompute_modules=tuple(s.get("recompute_modules", ())), offload_layers=s.get("offload_layers", 0), recompute_layers=s.get("recompute_layers"),
        grad_reduce_fp32=s.get("grad_reduce_fp32"),  # None: the framework's default
    )  # fmt: skip
    report = training_memory(measured_runs.run_model(run), batch=s["micro_batch"], seq=s["seq"], setup=setup)
    unmodelled = tuple(why for key, (value, why) in _UNMODELLED.items() if key in s and (value is None or s[key] == value)) + tuple(fw.not_modelled)
    return TimedRunFit(run, fw.name, float(report.total), float(placement(s["gpu"]).device.memory_bytes), unmodelled)  # a system: one of its accelerators


def timed_precision(s: Mapping[str, Any]) -> str:
    """The memory recipe of a timed run: its own where it names one, fp8 where its products ran in FP8, else mixed."""
    return s.get("precision", "fp8" if s.get("dtype") == "fp8" else "mixed")


def timed_run_fits() -> list[TimedRunFit]:
    return [timed_run_fit(run) for run in measured_runs.runs() if run.kind == "training"]


def timed_fits_section(fits: list[TimedRunFit]) -> list[str]:
    """docs/validation.md's section on whether each timed training run fits the device it ran on."""
    missing = [f for f in fits if not f.fits]
    lines = [
        "## Do the timed runs fit?",
        "",
        "Each published training run above ran, so its memory fit its devices. symform memory --train under the "
        "framework the source ran (its `framework`, torchtitan where it names none), the run's layout, micro-batch, "
        "sequence and recomputation, against the device's memory. A run predicted not to fit is a miss of the memory model.",
        "",
        f"{len(fits) - len(missing)} of {len(fits)} fit; predicted not to fit: {', '.join(f.run.name for f in missing) or 'none'}.",
        "",
        "| run | framework | predicted GB | device GB | fits | not modelled |",
        "|---|---|---:|---:|---|---|",
    ]
    for f in fits:
        lines.append(f"| {f.run.name} | {f.framework} | {f.total_bytes / 1e9:.1f} | {f.capacity_bytes / 1e9:.1f} | {'yes' if f.fits else 'no'} | {', '.join(f.not_modelled)} |")
    return lines
