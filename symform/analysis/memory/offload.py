"""Offload: where every byte of a memory report lives (device, host memory, NVMe) and what moving it costs.

ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840) keeps the 16-bit weights on the
device and moves the gradients, the fp32 master weights and the optimizer states,
with the optimizer step, to the host: of the 16 bytes per parameter of mixed-precision
AdamW, 2 stay on the device and 14 go to the host, and each step sends the 16-bit
gradients down (2 bytes per parameter) and the updated 16-bit weights back up (2
bytes): 4 bytes per parameter over PCIe. ZeRO-Infinity (Rajbhandari et al. 2021,
arXiv:2104.07857) adds NVMe as a tier for the optimizer states and the weights and
fetches offloaded weights for each forward and each backward, as ZeRO-3 gathers
them (Rajbhandari et al. 2020, ZeRO §7.2.2). Serving engines keep a KV cache in host
memory and read it back for each decode step.

The rules, per device (the categories are those of ``symform.analysis.memory.memory``):

- ``optimizer``: the master weights and the optimizer states, on ``cpu`` or ``nvme``.
  The gradients go with the optimizer step to host memory (unless ``gradients`` says
  otherwise); the updated weights come back once per optimizer step.
- ``params``: the weights, on ``cpu`` or ``nvme``; fetched twice per training
  micro-batch (forward and backward), once per serving forward pass.
- ``kv``: the KV cache, on ``cpu``; read back whole for each decode step.

Link speeds are data: the device's ``interconnect.pcie`` (its hardware file) and an
NVMe drive's sequential rates (``hardware/storage/<name>.toml``). Each transfer's time
is its bytes over that bandwidth in one direction; transfers are listed separately, since
how much of them hides behind compute depends on the implementation's overlap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Literal

from ...engine.store.data import read_toml
from ...engine.language.schema import SchemaError, build
from ...engine.errors import ConfigError, EvaluationError, describe_validation
from ...engine.algebra.evaluate import Number
from ..devices.hardware import Device, Notes, Number as DataNumber, Source, Text, hardware_dir
from .memory import MemoryReport

TIERS = ("device", "cpu", "nvme")
PLACES = {"cpu": "host memory", "nvme": "NVMe"}
KEYS = ("optimizer", "gradients", "params", "kv")
CATEGORIES = {"optimizer": ("master_weights", "optimizer"), "gradients": ("gradients",), "params": ("weights",), "kv": ("kv_cache",)}
_DOCS = "docs/offload.md"


# --- what goes where --------------------------------------------------------------------


@dataclass(frozen=True)
class Offload:
    """Where each kind of byte lives: "device", "cpu" or "nvme". ``gradients`` None: with the optimizer step
    (host memory when the optimizer leaves the device, as ZeRO-Offload and ZeRO-Infinity keep them)."""

    optimizer: str = "device"
    gradients: str | None = None
    params: str = "device"
    kv: str = "device"

    def __post_init__(self) -> None:
        for key in KEYS:
            tier = getattr(self, key)
            if tier is not None and tier not in TIERS:
                raise EvaluationError(f"offload {key}={tier!r}: choose one of {', '.join(TIERS)}")
        if self.kv == "nvme":
            raise EvaluationError("offload kv=nvme: the KV cache offloads to cpu (host memory) only")
        if self.gradients not in (None, "device") and self.optimizer == "device":
            raise EvaluationError("gradients leave the device only with the optimizer step; give optimizer=cpu or optimizer=nvme too")
        if self.gradients == "nvme":
            raise EvaluationError("offload gradients=nvme: gradients offload to cpu (host memory), where the optimizer step reads them")

    @property
    def gradient_tier(self) -> str:
        if self.gradients is not None:
            return self.gradients
        return "device" if self.optimizer == "device" else "cpu"

    def tier(self, key: str) -> str:
        return self.gradient_tier if key == "gradients" else getattr(self, key)

    @property
    def any(self) -> bool:
        return any(self.tier(k) != "device" for k in KEYS)


def parse_offload(text: str) -> Offload:
    """``optimizer=cpu,params=nvme``: KEY=TIER pairs, KEY one of optimizer, gradients, params, kv."""
    given: dict[str, str] = {}
    for part in text.split(","):
        key, equals, tier = part.strip().partition("=")
        if not equals or key not in KEYS:
            raise EvaluationError(f"offload {part.strip()!r}: write KEY=TIER pairs such as optimizer=cpu,params=nvme (keys: {', '.join(KEYS)}; tiers: {', '.join(TIERS)})")
        if key in given:
            raise EvaluationError(f"offload names {key} twice; give it once")
        given[key] = tier.strip()
    return Offload(**given)


# --- NVMe drives (data) -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Drive:
    """One NVMe drive: its sequential read and write rates, as its maker states them."""

    name: Text | None = None
    title: Text
    vendor: Text
    interface: Text | None = None
    sequential_read_bytes_per_s: DataNumber
    sequential_write_bytes_per_s: DataNumber
    capacity_bytes: DataNumber | None = None
    source: Source
    notes: Notes = field(default_factory=list)


def storage_dir() -> Path:
    return hardware_dir() / "storage"


def drive_names() -> list[str]:
    return sorted(p.stem for p in storage_dir().glob("*.toml"))


@cache
def load_drive(name_or_path: str) -> Drive:
    """A bundled NVMe drive by name (``samsung-pm1743``) or a path to a .toml file of the same fields."""
    text = os.fspath(name_or_path)
    path = storage_dir() / f"{text}.toml" if text in drive_names() else Path(text)
    if path.suffix.lower() != ".toml" or not path.is_file():
        raise ConfigError(f"{text!r} is neither a bundled NVMe drive nor a .toml file; bundled: {', '.join(drive_names())} (fields: {_DOCS})")
    try:
        drive = build(Drive, read_toml(path))
    except SchemaError as e:
        raise ConfigError(f"{path}: {describe_validation(e)}; fix the file (fields and units: {_DOCS})") from None
    return drive if drive.name else replace(drive, name=path.stem)


# --- placing a report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transfer:
    """Bytes one device moves over one link, and how often."""

    what: str
    link: Literal["pcie host→device", "pcie device→host", "nvme read", "nvme write"]
    bytes: Number
    every: str  # "micro-batch", "optimizer step", "forward pass", "decode step"
    seconds: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"what": self.what, "link": self.link, "bytes": float(self.bytes), "every": self.every, "seconds": self.seconds}


@dataclass
class Placed:
    """A memory report split by where its bytes live: ``device`` is the report of what stays on the device."""

    device: MemoryReport
    offloaded: dict[str, dict[str, Number]]  # tier ("cpu", "nvme") -> category -> bytes
    transfers: list[Transfer]
    assumptions: list[str] = field(default_factory=list)

    def tier_total(self, tier: str) -> Number:
        return sum(self.offloaded.get(tier, {}).values())

    def as_dict(self) -> dict[str, object]:
        where = {"device": {k: float(v) for k, v in self.device.values.items()}}
        where |= {tier: {k: float(v) for k, v in found.items()} for tier, found in self.offloaded.items()}
        totals = {"device": float(self.device.total)} | {tier: float(self.tier_total(tier)) for tier in self.offloaded}
        return {"where": where, "totals": totals, "transfers": [t.as_dict() for t in self.transfers], "assumptions": self.assumptions}


def offloaded_categories(offload: Offload, phase: str) -> set[str]:
    """The memory categories ``offload`` takes off the device in ``phase`` ("train" or "infer")."""
    _check_phase(phase, offload)
    return {c for key in KEYS if offload.tier(key) != "device" for c in CATEGORIES[key]}


def place(report: MemoryReport, offload: Offload) -> Placed:
    """Split ``report`` (training or serving, one device) by ``offload``, and list the transfers that follow from it."""
    _check_phase(report.phase, offload)
    moved: dict[str, dict[str, Number]] = {}
    for key in KEYS:
        tier = offload.tier(key)
        if tier != "device":
            for category in CATEGORIES[key]:
                if category in report.values:
                    moved.setdefault(tier, {})[category] = report.values[category]
    gone = {c for found in moved.values() for c in found}
    kept = replace(
        report,
        values={k: v for k, v in report.values.items() if k not in gone},
        expressions={k: v for k, v in report.expressions.items() if k not in gone},
        assumptions={**report.assumptions, "offload": {k: offload.tier(k) for k in KEYS if offload.tier(k) != "device"}},
    )
    transfers = _training_transfers(report, offload) if report.phase == "train" else _serving_transfers(report, offload)
    return Placed(kept, moved, transfers, _assumptions(report, offload))


def _check_phase(phase: str, offload: Offload) -> None:
    if phase == "train" and offload.kv != "device":
        raise EvaluationError("kv offload applies to serving (--infer); training keeps no KV cache")
    if phase != "train" and (offload.optimizer != "device" or offload.gradients not in (None, "device")):
        raise EvaluationError("optimizer and gradient offload apply to training (--train); serving has neither")


def _training_transfers(report: MemoryReport, offload: Offload) -> list[Transfer]:
    v = report.values
    weights, found = v["weights"], []
    if offload.params != "device":
        found.append(Transfer("weights, fetched for the forward and again for the backward", "pcie host→device", 2 * weights, "micro-batch"))
        if offload.params == "nvme":
            found.append(Transfer("weights, read for the forward and the backward", "nvme read", 2 * weights, "micro-batch"))
    if offload.gradient_tier != "device":
        found.append(Transfer("gradients, sent as backward produces them", "pcie device→host", v["gradients"], "micro-batch"))
    elif offload.optimizer != "device":  # kept on the device to accumulate, they still go to the host's step once
        found.append(Transfer("accumulated gradients, sent to the optimizer step", "pcie device→host", v["gradients"], "optimizer step"))
    if offload.optimizer != "device" and offload.params == "device":
        found.append(Transfer("updated weights, back from the optimizer step", "pcie host→device", weights, "optimizer step"))
    if offload.optimizer == "device" and offload.params != "device":
        found.append(Transfer("updated weights, back to their tier", "pcie device→host", weights, "optimizer step"))
    if offload.params == "nvme":
        found.append(Transfer("updated weights, written back", "nvme write", weights, "optimizer step"))
    if offload.optimizer == "nvme":
        states = v["master_weights"] + v["optimizer"]
        found.append(Transfer("master weights and optimizer states, read for the step", "nvme read", states, "optimizer step"))
        found.append(Transfer("master weights and optimizer states, written after it", "nvme write", states, "optimizer step"))
    return found


def _serving_transfers(report: MemoryReport, offload: Offload) -> list[Transfer]:
    v, found = report.values, []
    if offload.params != "device":
        found.append(Transfer("weights, fetched for each forward pass", "pcie host→device", v["weights"], "forward pass"))
        if offload.params == "nvme":
            found.append(Transfer("weights, read for each forward pass", "nvme read", v["weights"], "forward pass"))
    if offload.kv != "device":
        found.append(Transfer("KV cache, read back whole", "pcie host→device", v["kv_cache"], "decode step"))
    return found


def _assumptions(report: MemoryReport, offload: Offload) -> list[str]:
    notes = []
    if report.phase == "train" and offload.optimizer != "device":
        notes.append("optimizer step on the host (ZeRO-Offload): gradients down, updated weights up; the device's gradient buckets are not counted")
    if offload.params != "device":
        notes.append("offloaded weights are fetched layer by layer; the device's prefetch buffer (a layer or two) is not counted")
    if offload.kv != "device":
        notes.append("offloaded KV cache read back whole each decode step; the new tokens' entries written to the host are not counted")
    notes.append("transfer times: bytes over the link's one-way bandwidth, each on its own (no overlap with compute or with one another assumed)")
    return notes


# --- times ---------------------------------------------------------------------------------------


def with_times(placed: Placed, device: Device | None, drive: Drive | None = None, drives: int = 1) -> Placed:
    """Each transfer's seconds: PCIe at the device's ``interconnect.pcie``, NVMe at ``drives`` × the drive's sequential rate."""
    if isinstance(drives, bool) or not isinstance(drives, int) or drives < 1:
        raise EvaluationError(f"drives is {drives!r}; give a whole number of 1 or more")
    pcie = device.interconnect.get("pcie") if device is not None else None
    timed, notes = [], list(placed.assumptions)
    for t in placed.transfers:
        rate = None
        if t.link.startswith("pcie") and pcie is not None:
            rate = pcie.unidirectional_bytes_per_s
        elif t.link == "nvme read" and drive is not None:
            rate = drives * drive.sequential_read_bytes_per_s
        elif t.link == "nvme write" and drive is not None:
            rate = drives * drive.sequential_write_bytes_per_s
        timed.append(replace(t, seconds=float(t.bytes) / rate if rate else None))
    if device is not None and pcie is None and any(t.link.startswith("pcie") for t in placed.transfers):
        notes.append(f"{device.name} has no PCIe figure in its hardware file: PCIe transfers untimed")
    if pcie is not None:
        notes.append(f"PCIe: {device.name}'s {pcie.name}, {pcie.unidirectional_bytes_per_s / 1e9:g} GB/s each way (its hardware file)")
    if drive is not None:
        notes.append(f"NVMe: {drives} × {drive.name} ({drive.sequential_read_bytes_per_s / 1e9:g} GB/s read, {drive.sequential_write_bytes_per_s / 1e9:g} GB/s write, sequential; hardware/storage/{drive.name}.toml)")
    return Placed(placed.device, placed.offloaded, timed, notes)
