"""Accelerators and the systems built from them, one TOML data file each.

Every figure is in SI base units (docs/hardware.md): bytes, bytes/s, FLOP/s
(int8: operations/s) and W. A file names its unit in the key (``memory_bytes``,
``hbm_bytes_per_s``, ``dense_flops_per_s``, ``tdp_watts``), never a scaled one.

- ``dense_flops_per_s`` holds peak rates without sparsity, one per dtype;
  figures with 2:4 structured sparsity go under ``sparse_flops_per_s`` and
  nowhere else. A device whose vendor publishes no rate (Apple's M-series)
  leaves it empty: memory and fit use it, the commands that need a rate refuse.
- Link bandwidths are per direction (``unidirectional_bytes_per_s``); the
  datasheets' NVLink and PCIe figures count both directions and are twice that.
- Memory capacities quoted as "80GB" are binary (JEDEC): 80 GiB.

Per-accelerator files live in ``hardware/``; systems (HGX, DGX, NVL72) live in
``hardware/systems/`` and name their accelerator and its count instead of
repeating its figures. The totals a system's datasheet states are kept under
``stated_totals`` and checked against count × per-accelerator figure.

Files are data: parsed by ``tomllib`` and validated; nothing in them is executed.
"""

from __future__ import annotations

import datetime
import os
import re
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from ...engine.budget import DEVICES
from ...engine.language.schema import MaxLen, Plain, SchemaError, build
from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError, describe_validation

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
LINKS = ("scale_up", "pcie", "scale_out")
KINDS = ("accelerator", "system")

Dtype = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]
LinkKind = Literal["scale_up", "pcie", "scale_out"]

_DOCS = "docs/hardware.md"
_MAX_FILE_BYTES = 1 << 20
_MAX_TEXT = 300
_TOLERANCE = 0.02  # stated system totals may differ from count × per-accelerator figure by rounding only
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


# --- field types ---------------------------------------------------------------


def _what(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {_clip(repr(value))}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return {dict: "a table", list: "an array"}.get(type(value), type(value).__name__)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SMALLEST, _LARGEST = 1e-9, 1e30


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a number in SI base units is needed (e.g. 3.35e12), not {_what(value)}")  # noqa: TRY004 (the schema reports ValueError)
    # a bound either side, so that no ratio of two figures overflows or divides by (nearly) zero
    if isinstance(value, int) and value.bit_length() > 128 or not _SMALLEST <= value <= _LARGEST:
        raise ValueError(f"a positive finite number is needed, from {_SMALLEST:g} to {_LARGEST:g}, not {_clip(repr(value))}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a whole number is needed, not {_what(value)}")  # noqa: TRY004
    if not 0 < value <= DEVICES:
        raise ValueError(f"a whole number from 1 to {DEVICES} is needed, not {_clip(repr(value))}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a string is needed, not {_what(value)}")  # noqa: TRY004
    if not value.strip() or len(value) > _MAX_TEXT:
        raise ValueError(f"a non-empty string of at most {_MAX_TEXT} characters is needed")
    if not value.isprintable():
        raise ValueError("a single line of printable text is needed (no newlines or control characters)")
    return value


def _name(value: Any) -> str:
    value = _text(value)
    if not _NAME.match(value):
        raise ValueError(f"{_clip(repr(value))} is not a device name: use lower-case letters, digits, '.', '_' and '-', e.g. 'my-gpu'")
    return value


def _url(value: Any) -> str:
    value = _text(value)
    if not value.startswith(("https://", "http://")) or any(c.isspace() for c in value):
        raise ValueError(f"{_clip(repr(value))} is not an http(s) URL")
    return value


def _date(value: Any) -> str:
    if isinstance(value, datetime.datetime):
        value = value.date()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, str) and _DATE.match(value):
        return value
    raise ValueError(f"a date is needed: 2024, \"2024-11\" or 2024-11-18, not {_what(value)}")


Number = Annotated[int | float, Plain(_number, "function-plain[_number()]")]
Count = Annotated[int, Plain(_count, "function-plain[_count()]")]
Text = Annotated[str, Plain(_text, "function-plain[_text()]")]
Name = Annotated[str, Plain(_name, "function-plain[_name()]")]
Url = Annotated[str, Plain(_url, "function-plain[_url()]")]
Date = Annotated[str, Plain(_date, "function-plain[_date()]")]
Notes = Annotated[list[Text], MaxLen(20)]


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where the figures come from: the datasheet's title, address and date (year, or year-month)."""

    title: Text
    url: Url | None = None
    date: Date


Sources = Annotated[list[Source], MaxLen(20)]


@dataclass(frozen=True, kw_only=True)
class Link:
    """One kind of link of one accelerator, with its bandwidth in each direction."""

    name: Text
    unidirectional_bytes_per_s: Number


def _check_sparse(dense: dict[str, Any], sparse: dict[str, Any], where: str = "") -> None:
    for dtype, rate in sparse.items():
        if dtype not in dense:
            raise ValueError(f"{where}sparse_flops_per_s.{dtype}: has no dense figure; give dense_flops_per_s.{dtype} too")
        if not dense[dtype] < rate <= 2 * dense[dtype] * (1 + _TOLERANCE):
            raise ValueError(
                f"{where}sparse_flops_per_s.{dtype} ({rate:.4g}) must lie above the dense figure ({dense[dtype]:.4g}) and at most twice it: "
                "2:4 sparsity at most doubles the rate (is the dense figure halved twice, or a sparse one listed as dense?)"
            )


@dataclass(frozen=True, kw_only=True)
class Device:
    """One accelerator (GPU or TPU chip): its own figures, never a system's."""

    kind: Literal["accelerator"] = "accelerator"
    name: Name | None = None
    title: Text
    vendor: Text
    form_factor: Text | None = None
    memory_type: Text | None = None
    memory_bytes: Number
    hbm_bytes_per_s: Number
    dense_flops_per_s: dict[Dtype, Number] = field(default_factory=dict)  # empty where the vendor publishes no rate
    sparse_flops_per_s: dict[Dtype, Number] = field(default_factory=dict)
    interconnect: dict[LinkKind, Link] = field(default_factory=dict)
    tdp_watts: Number | None = None
    source: Source
    see_also: Sources = field(default_factory=list)
    notes: Notes = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_sparse(self.dense_flops_per_s, self.sparse_flops_per_s)

    def flops_per_s(self, dtype: str, *, sparse: bool = False) -> int | float:
        """The peak rate for one dtype, dense unless ``sparse=True`` (2:4 structured sparsity)."""
        table = self.sparse_flops_per_s if sparse else self.dense_flops_per_s
        if not self.dense_flops_per_s:
            raise ConfigError(f"{self.name or self.title} has no published FLOP rate, only memory figures: memory and fit use it; for times give a device file with dense_flops_per_s (docs/hardware.md)")
        if dtype not in table:
            kind = "2:4 sparse" if sparse else "dense"
            raise ConfigError(f"{self.name or self.title} has no {kind} {dtype!r} figure; it has {', '.join(table) or 'none'}")
        return table[dtype]

    def ridge(self, dtype: str) -> float:
        """Dense FLOP/s ÷ HBM bytes/s: the arithmetic intensity (FLOP/byte) above which work is compute-bound."""
        return self.flops_per_s(dtype) / self.hbm_bytes_per_s


@dataclass(frozen=True, kw_only=True)
class ScaleUpDomain:
    """The accelerators that reach one another over the scale-up fabric (NVLink switches, Infinity Fabric)."""

    name: Text
    accelerators: Count


@dataclass(frozen=True, kw_only=True)
class Nics:
    """The system's scale-out network cards: how many, and each one's bandwidth per direction."""

    name: Text
    count: Count
    unidirectional_bytes_per_s: Number


@dataclass(frozen=True, kw_only=True)
class StatedTotals:
    """Totals as the system's datasheet states them; checked against count × per-accelerator figure."""

    memory_bytes: Number | None = None
    hbm_bytes_per_s: Number | None = None
    scale_up_bidirectional_bytes_per_s: Number | None = None
    dense_flops_per_s: dict[Dtype, Number] = field(default_factory=dict)
    sparse_flops_per_s: dict[Dtype, Number] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class System:
    """A box or rack of identical accelerators: names its accelerator, adds only system-level figures."""

    kind: Literal["system"]
    name: Name | None = None
    title: Text
    vendor: Text
    accelerator: Text
    accelerator_count: Count
    cpu: Text | None = None
    scale_up_domain: ScaleUpDomain | None = None
    scale_out: Nics | None = None
    power_watts: Number | None = None
    stated_totals: StatedTotals = field(default_factory=StatedTotals)
    source: Source
    see_also: Sources = field(default_factory=list)
    notes: Notes = field(default_factory=list)
    _device: Device | None = field(default=None, init=False, repr=False, compare=False)  # load_device's, not the file's

    def __post_init__(self) -> None:
        if self.scale_up_domain and self.scale_up_domain.accelerators > self.accelerator_count:
            raise ValueError(f"scale_up_domain.accelerators ({self.scale_up_domain.accelerators}) exceeds accelerator_count ({self.accelerator_count})")

    def _attach(self, device: Device) -> None:
        object.__setattr__(self, "_device", device)  # frozen: the fields stay as the file gave them

    @property
    def device(self) -> Device:
        """The accelerator this system is built from."""
        if self._device is None:  # only for a System made by hand rather than by load_device
            found = load_device(self.accelerator)
            if not isinstance(found, Device):
                raise ConfigError(f"system {self.name or self.title!r}: accelerator {self.accelerator!r} is a system; name an accelerator")
            self._attach(found)
        return self._device


Hardware = Device | System


# --- finding and loading files ---------------------------------------------------


#: Storage width of one element per dtype, in bytes: `--dtype` sets the peak rate and,
#: through this table, the bytes (roofline: weights, activations and KV cache; time:
#: the weights its matmuls read).
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": Fraction(1, 2)}


def hardware_dir() -> Path:
    return data_root() / "hardware"


@cache
def _bundled() -> dict[str, Path]:
    root = hardware_dir()
    found: dict[str, Path] = {}
    for folder in (root, root / "systems"):
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found.setdefault(path.stem, path)
    return found


def device_names(*, kind: str | None = None) -> list[str]:
    """Bundled accelerators and systems, by name; ``kind="accelerator"`` or ``"system"`` for one sort."""
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown hardware kind {kind!r}; use one of {', '.join(KINDS)}")
    return [name for name, path in _bundled().items() if kind is None or _kind_of_path(path) == kind]


def _kind_of_path(path: Path) -> str:
    return "system" if path.parent.name == "systems" else "accelerator"


def load_device(name_or_path: str | os.PathLike[str]) -> Hardware:
    """A bundled accelerator or system by name (``"h100-sxm"``, ``"gb200-nvl72"``), or a path to a .toml file of your own."""
    text = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else name_or_path
    if not isinstance(text, str):
        raise ConfigError(f"a device name or path is needed, not {type(name_or_path).__name__}")
    bundled = _bundled()
    if text in bundled:
        return _load_bundled(text)
    if text.lower() in bundled:  # H100-SXM: names are lower case, as the presets' are matched
        return _load_bundled(text.lower())
    path = Path(text)
    try:
        exists = path.exists()
    except OSError as e:  # a name too long for the filesystem
        exists = False
        if path.suffix.lower() == ".toml":
            raise ConfigError(f"{_clip(repr(text))}: cannot read ({e.strerror or type(e).__name__}); give a shorter path") from None
    if path.suffix.lower() != ".toml" and not exists:
        near = near_devices(text)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        raise ConfigError(f"{_clip(repr(text))} is neither a bundled device nor a .toml file; {hint}bundled: {', '.join(bundled)} (or give the path of a device file, see {_DOCS})")
    try:
        return _load_path(path)
    except ConfigError as e:  # a path may hold any character: keep the message on one line
        raise ConfigError(_one_line(str(e), limit=2000)) from None


def near_devices(text: str) -> list[str]:
    """Bundled devices a name may have meant: those it begins (h100: h100-sxm, h100-pcie, …), else near misses."""
    from ...engine.store.hub import close_names

    names = list(_bundled())
    lowered = text.lower().strip()
    starting = [n for n in names if lowered and n.startswith(lowered)]
    return starting[:4] if starting else close_names(lowered, names)


@cache
def _load_bundled(name: str) -> Hardware:
    path = _bundled()[name]
    found = _load_path(path)
    expected = _kind_of_path(path)
    if found.kind != expected:
        raise ConfigError(f"{path}: kind is {found.kind!r} but files in this folder must be {expected!r} (systems go in hardware/systems/)")
    if found.name != name:
        raise ConfigError(f"{path}: name {found.name!r} differs from the file name; remove the name or rename the file")
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            raise ConfigError(f"{path}: not a regular file; give a .toml file")
        if path.is_file() and path.stat().st_size > _MAX_FILE_BYTES:
            raise ConfigError(f"{path}: larger than {_MAX_FILE_BYTES // 1024} KiB, too large for a device file; check the path")
        return read_toml(path)
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or type(e).__name__}); check the path and its permissions") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a device file; fix the file (see {_DOCS})") from None


def _load_path(path: Path, *, referenced_by: Path | None = None) -> Hardware:
    raw = _read(path)
    kind = raw.get("kind", "accelerator")
    if kind not in KINDS:
        raise ConfigError(_one_line(f"{path}: kind must be 'accelerator' or 'system', not {_what(kind)}; fix the file (see {_DOCS})"))
    if referenced_by is not None and kind != "accelerator":
        raise ConfigError(f"{referenced_by}: accelerator {path.name!r} is a system; name an accelerator (one GPU or chip)")
    model = System if kind == "system" else Device
    try:
        found = build(model, raw)
    except SchemaError as e:
        raise ConfigError(_one_line(f"{path}: {_describe(e, model)}; fix the file (fields and units: {_DOCS})")) from None
    if found.name is None:
        found = replace(found, name=path.stem)
    if isinstance(found, System):
        device = _accelerator_of(found, path)
        _check_totals(found, device, path)
        found._attach(device)
    return found


def _accelerator_of(system: System, path: Path) -> Device:
    reference = system.accelerator
    if reference in _bundled():
        found = _load_bundled(reference)
    elif reference.lower().endswith(".toml"):
        found = _load_path(path.parent / reference, referenced_by=path)
    else:
        raise ConfigError(f"{path}: accelerator {_clip(repr(reference))} is neither a bundled accelerator nor a .toml path; bundled: {', '.join(device_names(kind='accelerator'))}")
    if not isinstance(found, Device):
        raise ConfigError(f"{path}: accelerator {reference!r} is a system; name an accelerator (one GPU or chip)")
    return found


def _check_totals(system: System, device: Device, path: Path) -> None:
    n = system.accelerator_count
    stated = system.stated_totals
    pairs: list[tuple[str, float, float | None]] = [
        ("memory_bytes", stated.memory_bytes, n * device.memory_bytes),
        ("hbm_bytes_per_s", stated.hbm_bytes_per_s, n * device.hbm_bytes_per_s),
    ]
    if stated.scale_up_bidirectional_bytes_per_s is not None:
        link = device.interconnect.get("scale_up")
        pairs.append(("scale_up_bidirectional_bytes_per_s", stated.scale_up_bidirectional_bytes_per_s, n * 2 * link.unidirectional_bytes_per_s if link else None))
    for table in ("dense_flops_per_s", "sparse_flops_per_s"):
        per_device = getattr(device, table)
        for dtype, value in getattr(stated, table).items():
            pairs.append((f"{table}.{dtype}", value, n * per_device[dtype] if dtype in per_device else None))
    for key, value, derived in pairs:
        if value is None:
            continue
        if derived is None:
            raise ConfigError(f"{path}: stated_totals.{key} has no per-accelerator figure in {device.name!r} to check it against; add that figure or drop the total")
        if abs(value - derived) > _TOLERANCE * derived:
            raise ConfigError(
                f"{path}: stated_totals.{key} is {value:.4g} but {n} × {device.name} gives {derived:.4g}; "
                "fix the per-accelerator figure or the stated total (per-accelerator and system figures must agree)"
            )


def _describe(error: SchemaError, model: type) -> str:
    where = ".".join(str(p) for p in error.loc)
    if error.msg == "Extra inputs are not permitted":
        known = _known_fields(model, error.loc[:-1])
        return f"{where}: unknown field" + (f"; the fields here are {', '.join(known)}" if known else "")
    if error.loc and error.loc[-1] == "[key]":  # a table's key that is none of its names (a dtype, a link kind)
        return f"{'.'.join(str(p) for p in error.loc[:-1])}: {error.msg}"
    if error.msg == "Field required":
        return f"{where}: required field missing"
    return describe_validation(error)


def _known_fields(model: type, loc: tuple) -> list[str]:
    current: Any = model
    for part in loc:
        if not _is_table(current):
            return []
        hint = _field_hints(current).get(str(part))
        if hint is None:
            return []
        current = _model_in(hint)
    return list(_field_hints(current)) if _is_table(current) else []


def _is_table(hint: Any) -> bool:
    return isinstance(hint, type) and is_dataclass(hint)


def _field_hints(cls: type) -> dict[str, Any]:
    """The fields a file may give, by name, with their types (checks stripped)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if f.init}


def _model_in(annotation: Any) -> Any:
    if _is_table(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        if _is_table(arg):
            return arg
    return None


def _one_line(message: str, limit: int = 600) -> str:
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return _clip(flat, limit)


# --- JSON ------------------------------------------------------------------------
