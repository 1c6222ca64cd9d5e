"""What each device sustains, as data: GEMM, attention, memory and link efficiencies (hardware/efficiency/<device>.toml), GEMM wave quantisation, and the rules every estimate follows (rules.toml: overlap, fusion, the optimizer step, the band)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

from ...engine.budget import quoted
from ...engine.language.schema import After, SchemaError, build
from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError, describe_validation
from . import step_model
from ..memory.frameworks import framework as memory_framework


#: Attention implementations: SDPA / FlashAttention kernels (what transformers and the
#: serving engines run by default), eager PyTorch (scores materialised), or fused kernels
#: that read each key/value head once per query head rather than once per group
#: (TensorRT-LLM's masked MHA for generation before its XQA kernel, v0.8).
ATTENTION = ("sdpa", "eager", "fused_per_head")


def efficiency_dir() -> Path:
    return data_root() / "hardware" / "efficiency"


@dataclass(frozen=True)
class LinkEfficiency:
    bus_efficiency: float
    latency_s: float


@dataclass(frozen=True)
class Efficiency:
    """What one device sustains, each figure from its file in hardware/efficiency/ with its source."""

    device: str
    gemm_sustained: float
    tile_m: int
    half_flops: float
    attention: Mapping[int, float]
    memory: float
    links: Mapping[str, LinkEfficiency]
    sources: Mapping[str, str]
    launch_s: float = 0.0  # fixed cost of each kernel that runs (launch, ramp-up, tail)
    gemm_model: str = "rows"  # one of GEMM_MODELS
    tiles: tuple[tuple[int, int], ...] = ()  # the (rows, width) output tiles the GEMM library has kernels for
    sms: int = 0  # streaming multiprocessors (compute units) a GEMM's tiles spread over
    # another GEMM model's fitted (sustained, half_flops), by model: [gemm.<model>] in the file
    gemm_fits: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    expert_s: float = 0.0  # [moe]: what each local expert adds to a grouped GEMM call, in seconds (symform.analysis.time.grouped_gemm)
    # [fusion] training: the rules.toml fusion convention the device's compiler applies to a training step, in place
    # of the eager frameworks' "training" (XLA on TPUs); None: the rules' own
    training_fusion: str | None = None

    def with_gemm_model(self, model: str) -> "Efficiency":
        """This device under another GEMM model, with that model's fitted sustained fraction and roll-off."""
        if model not in GEMM_MODELS:
            raise ConfigError(f"unknown GEMM model {model!r}; choose one of {', '.join(GEMM_MODELS)}")
        if model == self.gemm_model:
            return self
        if model not in self.gemm_fits:
            raise ConfigError(f"{self.device}'s efficiency file has no [gemm.{model}] fit; choose one of {', '.join([self.gemm_model, *self.gemm_fits])}")
        if model == "waves" and not self.sms:
            raise ConfigError(f"{self.device}'s efficiency file has no gemm.sms; the waves model needs the SM count and the tiles")
        sustained, half = self.gemm_fits[model]
        sources = {**self.sources, "gemm": f"{self.sources['gemm']}; model {model}: {self.sources.get(f'gemm.{model}', '')}"}
        return replace(self, gemm_model=model, gemm_sustained=sustained, half_flops=half, sources=sources)

    def attention_fraction(self, head_size: int) -> float:
        """The figure for the largest listed head size not above ``head_size`` (the smallest listed if all are)."""
        sizes = sorted(self.attention)
        below = [s for s in sizes if s <= head_size]
        return self.attention[below[-1] if below else sizes[0]]

    def gemm_fraction(self, rows: float, flops_per_call: float, products: tuple[tuple[float, float, float], ...] = (), weights: tuple[float, ...] = ()) -> float:
        """Fraction of the peak a GEMM of ``rows`` rows (tokens) and ``flops_per_call`` FLOPs sustains.

        ``waves`` (with the GEMM's ``products``, its output grids): each product runs at sustained ×
        :func:`best_tile_efficiency` over the device's tiles, the products of one call (equal FLOPs each,
        product i run ``weights[i]`` times, once each where not given) one after another; then the roll-off. Fewer rows than ``tile_m``, or no shape declared: as
        ``rows`` does.

        Rows pad up to whole tiles; fewer rows than one tile run as skinny (GEMV-like)
        kernels that split the weights over every SM and pad nothing, their roll-off
        shrinking with their rows (none for one row, the whole of it at a full tile: no
        jump at the tile's edge). The roll-off acts on the padded work, the work the SMs
        actually do.
        """
        tile = self.tile_m
        if self.gemm_model == "waves" and products and rows >= tile:
            weights = weights or (1.0,) * len(products)
            waves = sum(weights) / sum(w / best_tile_efficiency(b, m, n, self.tiles, self.sms) for w, (b, m, n) in zip(weights, products))
            return self.gemm_sustained * waves * flops_per_call / (flops_per_call + self.half_flops)
        if rows < tile:
            return self.gemm_sustained * flops_per_call / (flops_per_call + self.half_flops * max(rows - 1, 0) / (tile - 1))
        used = rows / (math.ceil(rows / tile) * tile)
        padded = flops_per_call / used
        return self.gemm_sustained * used * padded / (padded + self.half_flops)

    def link(self, name: str) -> LinkEfficiency:
        if name not in self.links:
            raise ConfigError(f"{self.device}'s efficiency file has no [links.{name}]; add its bus_efficiency and latency_s")
        return self.links[name]


#: How a GEMM's rate follows its shape: "rows" (tile quantisation of its rows, a roll-off for small GEMMs)
#: or "waves" (tile and wave quantisation of its output over the SMs, then the roll-off).
GEMM_MODELS = ("rows", "waves")


def wave_efficiency(batches: float, rows: float, width: float, tile_m: int, tile_n: int, sms: int) -> float:
    """The fraction of the SMs' tile slots that do useful work for a product with a ``batches`` × ``rows`` ×
    ``width`` output. The output is cut into ⌈rows/tile_m⌉·⌈width/tile_n⌉ tiles per batch, each SM working
    on one at a time; a grid of fewer tiles than SMs has its reduction split among ⌊sms/tiles⌋ of them
    (split-K), so ⌈tiles·split/sms⌉ waves of ``sms`` slots run, each slot 1/split of a tile's work."""
    tiles = math.ceil(batches) * math.ceil(rows / tile_m) * math.ceil(width / tile_n)
    split = max(1, sms // tiles)
    waves = math.ceil(tiles * split / sms)
    return batches * rows * width * split / (waves * sms * tile_m * tile_n)


def best_tile_efficiency(batches: float, rows: float, width: float, tiles: Sequence[tuple[int, int]], sms: int) -> float:
    """:func:`wave_efficiency` at the tile that keeps most of the SMs busy: the library's choice among the
    tile shapes it has kernels for (cuBLAS's heuristics and autotuners choose per problem size)."""
    return max(wave_efficiency(batches, rows, width, tile_m, tile_n, sms) for tile_m, tile_n in tiles)


def _fraction(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{where} is {quoted(value)}; give a fraction in (0, 1]")
    return float(value)


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where} is {quoted(value)}; give a number of 0 or more")
    return float(value)


def _section(data: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    section = data.get(name)
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: missing [{name}]; see hardware/efficiency/a100-sxm-80gb.toml for the fields")
    return section


def _parse_efficiency(data: Mapping[str, Any], path: Path) -> Efficiency:
    gemm, attention, memory = (_section(data, n, path) for n in ("gemm", "attention", "memory"))
    fractions = attention.get("fraction")
    if not isinstance(fractions, dict) or not fractions:
        raise ConfigError(f"{path}: [attention] needs fraction = {{ head_size = fraction, ... }}")
    try:
        by_head = {int(k): _fraction(v, f"{path}: attention.fraction.{k}") for k, v in fractions.items()}
    except ValueError:
        raise ConfigError(f"{path}: attention.fraction keys are head sizes (whole numbers)") from None
    links = {}
    for name, link in _section(data, "links", path).items():
        links[name] = LinkEfficiency(_fraction(link.get("bus_efficiency"), f"{path}: links.{name}.bus_efficiency"), _positive(link.get("latency_s"), f"{path}: links.{name}.latency_s"))
    sources = {name: str(_section(data, name, path).get("source", "")) for name in ("gemm", "attention", "memory")}
    sources |= {f"links.{n}": str(v.get("source", "")) for n, v in data["links"].items()}
    sources |= {f"gemm.{m}": str(gemm[m].get("source", "")) for m in GEMM_MODELS if isinstance(gemm.get(m), dict)}
    kernel = data.get("kernel", {})
    sources["kernel"] = str(kernel.get("source", NO_KERNEL_DATA)) if kernel else NO_KERNEL_DATA
    moe = data.get("moe", {})
    sources["moe"] = str(moe.get("source", NO_MOE_DATA))
    fusion = data.get("fusion", {})
    if fusion:
        sources["fusion"] = str(fusion.get("source", ""))
    return Efficiency(
        device=str(data.get("device", path.stem)),
        gemm_sustained=_fraction(gemm.get("sustained"), f"{path}: gemm.sustained"),
        tile_m=int(_positive(gemm.get("tile_m"), f"{path}: gemm.tile_m")) or 1,
        half_flops=_positive(gemm.get("half_flops"), f"{path}: gemm.half_flops"),
        attention=by_head,
        memory=_fraction(memory.get("fraction"), f"{path}: memory.fraction"),
        links=links,
        sources=sources,
        launch_s=_positive(kernel.get("launch_s", 0.0), f"{path}: kernel.launch_s"),
        expert_s=_positive(moe.get("expert_s", 0.0), f"{path}: moe.expert_s"),
        training_fusion=_training_fusion(fusion, path),
        **_gemm_shape_data(gemm, path),
    )


def _training_fusion(fusion: Mapping[str, Any], path: Path) -> str | None:
    """The fusion convention a device file's [fusion] names for training, one rules.toml [fusion.<name>] holds."""
    if "training" not in fusion:
        return None
    known = rules().fusion
    if fusion["training"] not in known:
        raise ConfigError(f"{path}: fusion.training is {quoted(fusion['training'])}; name one of rules.toml's fusion conventions: {', '.join(known)}")
    return str(fusion["training"])


def _gemm_shape_data(gemm: Mapping[str, Any], path: Path) -> dict[str, Any]:
    model = gemm.get("model", "rows")
    if model not in GEMM_MODELS:
        raise ConfigError(f"{path}: gemm.model is {quoted(model)}; choose one of {', '.join(GEMM_MODELS)}")
    fits = {}
    for other in GEMM_MODELS:
        if isinstance(gemm.get(other), dict):
            fit = gemm[other]
            fits[other] = (_fraction(fit.get("sustained"), f"{path}: gemm.{other}.sustained"), _positive(fit.get("half_flops"), f"{path}: gemm.{other}.half_flops"))
    if model == "rows" and "sms" not in gemm:
        return {"gemm_model": model, "gemm_fits": fits}
    sms = int(_positive(gemm.get("sms"), f"{path}: gemm.sms"))
    tiles = gemm.get("tiles")
    if not sms or not isinstance(tiles, list) or not tiles or not all(_is_tile(t) for t in tiles):
        raise ConfigError(f"{path}: the waves model needs gemm.sms (a whole number) and gemm.tiles = [[rows, width], ...] (whole numbers of 1 or more)")
    return {"gemm_model": model, "sms": sms, "tiles": tuple((int(a), int(b)) for a, b in tiles), "gemm_fits": fits}


def _is_tile(tile: Any) -> bool:
    return isinstance(tile, list) and len(tile) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in tile)


#: What a device file without a [kernel] section gets: the plain roofline, named as such.
NO_KERNEL_DATA = "no [kernel] data for this device: no fixed cost per kernel (launch_s = 0)"
NO_MOE_DATA = "no [moe] data for this device: a grouped GEMM's experts cost nothing beyond their tiles (expert_s = 0)"


@cache
def _bundled_efficiency() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(efficiency_dir().glob("*.toml")):
        data = read_toml(path)
        if data.get("kind") != "efficiency":
            continue
        for name in [data.get("device", path.stem), *data.get("also", [])]:
            found[str(name)] = path
    return found


def efficiency(device: str | os.PathLike[str]) -> Efficiency:
    """The efficiency file of a bundled accelerator (its own, or the one whose ``also`` names it: the same silicon),
    of a bundled system (its accelerator's), or a .toml path. Every estimate, fit and fact finds a device's data here."""
    if not isinstance(device, (str, os.PathLike)):
        raise ConfigError(f"a device is named by a string or a path to its efficiency file, not {type(device).__name__}; give one such as 'h100-sxm'")
    text = os.fspath(device)
    if text.lower().endswith(".toml"):
        path = Path(text)
    else:
        bundled = _bundled_efficiency()
        name = text if text in bundled else _system_accelerator(text)
        if name not in bundled:
            raise ConfigError(f"no efficiency data for {text!r}, so no estimate (the bounds still hold); bundled: {', '.join(sorted(bundled))}; add hardware/efficiency/{name or text}.toml")
        path = bundled[name]
    return _parse_efficiency(read_toml(path), path)


def has_efficiency(device: str) -> bool:
    return device in _bundled_efficiency() or _system_accelerator(device) in _bundled_efficiency()


def _system_accelerator(name: str) -> str | None:
    from ..devices.hardware import device_names

    return accelerator_name(name) if name in device_names(kind="system") else None


@dataclass(frozen=True)
class Rules:
    overlap: Mapping[str, Mapping[str, Any]]
    optimizer_bytes_per_param: float
    fusion: Mapping[str, tuple[float, frozenset[str]]]
    band: Mapping[str, tuple[float, float]]
    sources: Mapping[str, str]
    engine_algorithms: tuple[str, ...] = step_model.ALGORITHMS
    engine_links: frozenset[str] = frozenset()
    widen: Mapping[str, float] = field(default_factory=dict)  # [band_widen]: the band's growth per way of extrapolating

    def engine_all_reduce(self, link: str) -> tuple[str, ...]:
        """The all-reduce algorithms a serving engine chooses from on ``link``."""
        return self.engine_algorithms if link in self.engine_links else step_model.ALGORITHMS


@cache
def rules(path: str | None = None) -> Rules:
    """The overlap rules, the optimizer step, the fusion conventions and the band (hardware/efficiency/rules.toml)."""
    where = Path(path) if path else efficiency_dir() / "rules.toml"
    data = read_toml(where)
    fusion = {}
    for name, conv in _section(data, "fusion", where).items():
        fusion[name] = (_positive(conv.get("fraction"), f"{where}: fusion.{name}.fraction"), frozenset(conv.get("leaves", [])))
    band = {k: (_positive(v.get("below"), f"{where}: band.{k}.below"), _positive(v.get("above"), f"{where}: band.{k}.above")) for k, v in _section(data, "band", where).items()}
    optimizer = _section(data, "optimizer", where)
    sources = {f"overlap.{k}": str(v.get("source", "")) for k, v in data["overlap"].items()}
    sources |= {f"fusion.{k}": str(v.get("source", "")) for k, v in data["fusion"].items()}
    sources |= {f"band.{k}": str(v.get("source", "")) for k, v in data["band"].items()}
    sources["optimizer"] = str(optimizer.get("source", ""))
    engine = _section(data, "engine_comm", where)
    sources["engine_comm"] = str(engine.get("source", ""))
    algorithms = tuple(str(a) for a in engine.get("algorithms", step_model.ALGORITHMS))
    widen = {k: _positive(v.get("widen"), f"{where}: band_widen.{k}.widen") for k, v in data.get("band_widen", {}).items()}
    sources |= {f"band_widen.{k}": str(v.get("source", "")) for k, v in data.get("band_widen", {}).items()}
    return Rules(dict(_section(data, "overlap", where)), _positive(optimizer.get("bytes_per_param"), f"{where}: optimizer.bytes_per_param"), fusion, band, sources, algorithms, frozenset(engine.get("links", [])), widen)


#: The leaves that read and write an eager attention's score matrices: no engine fuses them away while the
#: scores are materialised (that is what eager attention means), whatever the fusion convention says.
SCORE_LEAVES = frozenset({"softmax", "scale_mask", "attn_dropout"})


# --- frameworks' time-side facts (formulas/frameworks/*.toml, [[time.facts]]) ----------------------------------
# What a framework's recipes overlap and what one of its releases runs slower, each with its source. A fact may hold
# for some releases only (versions: a
# run or a user names the release), some models only (presets: the recipes a source measured it on) and some devices
# only (devices: the accelerators a source measured it on, by their hardware file's name).


def _bundled_accelerators(devices: list[str] | None) -> list[str] | None:
    from ..devices.hardware import device_names

    known = device_names(kind="accelerator")
    for name in devices or ():
        if name not in known:
            raise ValueError(f"{name!r} is not a bundled accelerator: name one that symform hardware lists (a system's, such as b200 for dgx-b200)")
    return devices


def _known_dtypes(dtypes: list[str] | None) -> list[str] | None:
    from ..devices.hardware import DTYPES

    for name in dtypes or ():
        if name not in DTYPES:
            raise ValueError(f"{name!r} is not a matmul dtype symform knows: name one of {', '.join(DTYPES)}")
    if dtypes == []:
        raise ValueError("dtypes = [] holds for no run: name the dtypes, or leave dtypes out for every dtype")
    return dtypes


MOST_STEP_FACTOR = 10  # a release this much slower than its model says is a mistake in the file, not a fact


@dataclass(frozen=True, kw_only=True)
class Fact:
    name: Literal["tp_comm_overlap", "p2p_overlap", "ep_comm_overlap", "step_factor"]
    value: float | bool = True
    versions: list[str] | None = None  # the releases it holds for; None: every release
    presets: list[str] | None = None  # the models it was measured on; None: every model
    devices: Annotated[list[str] | None, After(_bundled_accelerators)] = None  # the accelerators it was measured on; None: every device
    dtypes: Annotated[list[str] | None, After(_known_dtypes)] = None  # the matmul dtypes it was measured at; None: every dtype
    doc: str
    source: str

    def __post_init__(self) -> None:
        if self.name == "step_factor":  # a release's slowdown: a number the estimate multiplies the step by
            if isinstance(self.value, bool) or not 0 < self.value <= MOST_STEP_FACTOR:
                raise ValueError(f"value: a step_factor is a number above 0 and at most {MOST_STEP_FACTOR}, not {self.value!r}")
        elif not isinstance(self.value, bool):
            raise ValueError(f"value: {self.name} is true or false, not {self.value!r}")

    def holds(self, version: str | None, preset: str | None, device: str | None = None, dtype: str | None = None) -> bool:
        return all(named is None or given in named for named, given in ((self.versions, version), (self.presets, preset), (self.devices, device), (self.dtypes, dtype)))


@dataclass(frozen=True)
class TimeProfile:
    """The facts that hold for one framework, release and model, as the estimate reads them."""

    framework: str
    version: str | None = None
    tp_comm_overlap: bool = False  # sequence parallelism's collectives pipelined with the GEMMs (with tensor parallelism)
    p2p_overlap: bool = False  # a virtual pipeline's sends overlapped with the other chunks' compute
    # the expert-parallel all-to-alls overlapped with other micro-batches' compute; False: a release whose overlap
    # hides nothing where a recipe asks for it (None: the release says nothing)
    ep_comm_overlap: bool | None = None
    step_factor: float = 1.0  # a release's own slowdown of the whole step
    facts: tuple[tuple[str, str], ...] = ()  # (what, source) of each fact applied

    def describe(self) -> dict[str, str]:
        return dict(self.facts)

    def overlaps_tensor(self, layout) -> bool:
        """Whether the recipes pipeline ``layout``'s tensor-parallel collectives with the GEMMs: they need sequence
        parallelism's all-gathers and reduce-scatters, so tensor parallelism with it."""
        return self.tp_comm_overlap and layout.tensor > 1 and layout.sequence

    def applied(self) -> dict[str, object]:
        """The framework, its release and the facts applied, as reports print them."""
        return {"name": self.framework, "version": self.version, "facts": self.describe()}


def facts(name: str) -> list[Fact]:
    """The time-side facts of framework ``name`` (formulas/frameworks/NAME.toml's ``[[time.facts]]``)."""
    fw = memory_framework(name)
    raw = (fw.time or {}).get("facts", []) if fw is not None else []
    if not isinstance(raw, list):
        raise ConfigError(f"formulas/frameworks/{name}.toml: time.facts is {type(raw).__name__}, not a list of tables; write each fact as a [[time.facts]] table (docs/time.md)")
    try:
        return [build(Fact, entry) for entry in raw]
    except SchemaError as e:
        raise ConfigError(f"formulas/frameworks/{name}.toml [[time.facts]]: {describe_validation(e)}; see docs/time.md") from None


def profile(name: str | None, version: str | None = None, preset: str | None = None, *, device: str | None = None, dtype: str = "bf16", scales: dict[str, float] | None = None) -> TimeProfile | None:
    """The time profile of framework ``name`` at release ``version`` for model ``preset`` on accelerator ``device``
    (its hardware file's name, :func:`accelerator_name`) at matmul ``dtype`` (bf16 unless named, as a training
    step's; None without a framework);
    ``scales``: fitted values replacing the files' (symform validate --fit)."""
    if name is None:
        return None
    if device is not None:
        from ..devices.hardware import load_device

        memory_framework(name).check_runs_on(device, load_device(device).vendor)
    found = {"tp_comm_overlap": False, "p2p_overlap": False, "ep_comm_overlap": None, "step_factor": 1.0}
    applied = []
    for fact in facts(name):
        if fact.holds(version, preset, device, dtype):
            found[fact.name] = fact.value if isinstance(fact.value, bool) else float(fact.value)
            applied.append((f"{fact.name} = {fact.value}: {fact.doc}", fact.source))
    for key, value in (scales or {}).items():
        found[key] = value
    overlap = found["ep_comm_overlap"]
    return TimeProfile(name, version, bool(found["tp_comm_overlap"]), bool(found["p2p_overlap"]), None if overlap is None else bool(overlap), float(found["step_factor"]), tuple(applied))


def accelerator_name(gpu: str | os.PathLike[str]) -> str | None:
    """The accelerator a ``--gpu`` names (a system's own accelerator), as a fact's ``devices`` lists it."""
    from ..devices.hardware import System, load_device

    hardware = load_device(gpu)
    return (hardware.device if isinstance(hardware, System) else hardware).name
