"""Fine-tuning memory against published measurements: ``hardware/finetune/*.toml``, one file per source.

Each run names a model, a fine-tuning setup and a GPU memory, and what its source measured there: the longest
sequence that trained (``longest_seq``; 0 where every length ran out of memory), the peak memory of a step
(``peak_gib``, at a given ``seq``) or that the run fits (``fits``, at a given ``seq``); ``conventions`` names
what its stack computes differently from transformers' eager modules (torchtune's chunked loss: ``loss_chunks``). symform's ``memory --train`` estimate is compared with it as it stands: no factor
is fitted. A measurement also holds what symform does not count (docs/fine-tuning.md lists it), so at the
longest sequence a source reports, symform's estimate is expected below the GPU's memory, by that much.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from .finetune import FineTune, finetune_memory, finetune_memory_expressions
from .memory import MemoryReport, Training
from .fitting import solve_fit

MEASURED_DIR = ("hardware", "finetune")
MEASURES = ("longest_seq", "peak_gib", "fits")
SETUP_KEYS = ("rank", "targets", "base_format", "precision", "optimizer", "recompute", "flash", "batch")


@dataclass(frozen=True)
class Run:
    """One published run: its model, setup, GPU memory and what was measured."""

    source: str
    name: str
    setup: Mapping[str, object]

    @property
    def budget(self) -> int:
        """The GPU memory in bytes."""
        s = self.setup
        return int(s["memory_gib"] * 2**30) if "memory_gib" in s else int(s["memory_gb"] * 10**9)

    @property
    def budget_text(self) -> str:
        s = self.setup
        return f"{s['memory_gib']} GiB" if "memory_gib" in s else f"{s['memory_gb']} GB"

    @property
    def measured(self) -> tuple[str, object]:
        return next(iter(self.setup["measured"].items()))

    def model(self) -> Model:
        """The run's model, under the conventions its stack declares (a chunked, compiled loss: loss_chunks)."""
        s = self.setup
        model = Model.load(s["preset"]) if "preset" in s else Model.from_config(dict(s["config"]), name=self.name)
        return model.with_conventions(**s["conventions"]) if s.get("conventions") else model

    def tune(self) -> FineTune:
        s = self.setup
        return FineTune(rank=s["rank"], targets=tuple(s["targets"]), base_format=s.get("base_format"))

    def training(self) -> Training:
        s = self.setup
        return Training(precision=s["precision"], optimizer=s["optimizer"], recompute=s["recompute"], flash=bool(s["flash"]))


@dataclass(frozen=True)
class Case:
    """A run and symform's estimate of it."""

    run: Run

    @cached_property
    def _model(self) -> Model:
        return self.run.model()

    @cached_property
    def seq(self) -> int:
        """The sequence length compared: the source's longest, its stated one, or 1 where nothing fit."""
        what, value = self.run.measured
        return int(value) if what == "longest_seq" and value else int(self.run.setup.get("seq", 1))

    @cached_property
    def report(self) -> MemoryReport:
        """symform's memory at the compared sequence length."""
        return finetune_memory(self._model, self.run.tune(), batch=self.run.setup["batch"], seq=self.seq, training=self.run.training())

    @property
    def estimate(self) -> float:
        return float(self.report.total)

    @property
    def error(self) -> float | None:
        """Estimate / measured peak − 1, or estimate / GPU memory − 1 at the longest sequence the source trained;
        None where it gives neither."""
        what, value = self.run.measured
        if what == "peak_gib":
            return self.estimate / (value * 2**30) - 1
        return self.estimate / self.run.budget - 1 if what == "longest_seq" and value else None

    @cached_property
    def longest_seq(self) -> int:
        """The longest sequence symform's estimate fits in the GPU memory (0: not even one token)."""
        categories, _, _ = finetune_memory_expressions(self._model, self.run.tune(), self.run.training())
        values = {**self._model.values, "batch": self.run.setup["batch"]}
        return solve_fit(sum(categories.values()), "seq", self.run.budget, values, self._model.vocabulary).largest

    @property
    def agrees(self) -> bool:
        """Whether symform says what the source found: it fits, or (OOM) it does not."""
        what, value = self.run.measured
        if what in ("fits", "peak_gib"):
            return self.estimate <= self.run.budget
        return (self.longest_seq >= value) if value else self.longest_seq == 0


def sources() -> dict[str, dict]:
    """Each source file's ``[source]`` table, by file stem."""
    return {path.stem: read_toml(path)["source"] for path in _paths()}


def _paths():
    return sorted(data_root().joinpath(*MEASURED_DIR).glob("*.toml"))


def runs() -> list[Run]:
    found = []
    for path in _paths():
        data = read_toml(path)
        defaults = data.get("defaults", {})
        for entry in data.get("runs", []):
            setup = {**defaults, **entry}
            missing = [k for k in (*SETUP_KEYS, "measured") if k not in setup] + ([] if "memory_gib" in setup or "memory_gb" in setup else ["memory_gib"])
            if missing or len(setup["measured"]) != 1 or next(iter(setup["measured"])) not in MEASURES:
                raise ConfigError(f"{path}: run {entry.get('name')!r} needs {', '.join(missing) or 'one measured figure: ' + ', '.join(MEASURES)}")
            found.append(Run(path.stem, setup.pop("name"), setup))
    return found


def validate() -> list[Case]:
    return [Case(run) for run in runs()]
