"""Point estimates with a band: a training step, a served request's TTFT and TPOT.

The bounds of ``symform.analysis.time.timing`` take every kernel at the datasheet's peak. An estimate
instead runs each leaf of the model (each kernel an eager framework would launch) at the
rate the device sustains for work of its kind and size, one after another:

- a GEMM at ``peak × sustained × tile(M) × F / (F + half_flops)``: the fraction of the
  peak large GEMMs reach, the tile quantisation of its M rows (tokens), and a roll-off
  for GEMMs too small to fill the SMs (wave quantisation, launch overhead); or, as an option
  (``gemm.model = "waves"``), each product's output tiles spread over the SMs in waves, from the
  shape (batches, M, N, K) its primitive declares (``gemm`` in formulas/components/);
- an attention core (FlashAttention/SDPA) at FlashAttention's achieved fraction by head size;
- memory-bound work at a fraction of the HBM bandwidth, its bytes scaled by a fusion
  convention (a serving engine fuses norms, rotary and activations into their neighbours);

each kernel taking the longer of its compute and its memory time. Communication comes from
``symform.analysis.time.timing`` (the same transfers) at each link's bus efficiency and latency per hop,
hidden under compute only where the overlap rules say so; the pipeline bubble, the
recomputation and the optimizer step are added. Every factor is data: one file per device
in ``hardware/efficiency/`` and the rules in ``hardware/efficiency/rules.toml``, each with
its source (``fitted`` ones are fitted on published runs: docs/validation.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any, Sequence

import sympy

from ...engine.store.derivation import derivation
from ...engine.budget import quoted
from ...engine.store.data import data_root, read_toml
from ...engine.errors import ConfigError, EvaluationError
from ...engine.graph.model import Model
from . import timing
from ..devices.hardware import Hardware
from ..memory.finetune import FineTune, kernel_passes, trained_per_device
from ..memory.memory import Layout, params_per_device, tensor_split
from .roofline import phase_work

#: Attention implementations: SDPA / FlashAttention kernels (what transformers and the
#: serving engines run by default), eager PyTorch (scores materialised), or fused kernels
#: that read each key/value head once per query head rather than once per group
#: (TensorRT-LLM's masked MHA for generation before its XQA kernel, v0.8).
ATTENTION = ("sdpa", "eager", "fused_per_head")


# --- the data -------------------------------------------------------------------------------


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
        **_gemm_shape_data(gemm, path),
    )


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
    """The efficiency file of a bundled device (by the device's or a system's name) or a .toml path."""
    text = os.fspath(device)
    if text.lower().endswith(".toml"):
        path = Path(text)
    else:
        bundled = _bundled_efficiency()
        if text not in bundled:
            raise ConfigError(f"no efficiency data for {text!r}, so no estimate (the bounds still hold); bundled: {', '.join(sorted(bundled))}; add hardware/efficiency/{text}.toml")
        path = bundled[text]
    return _parse_efficiency(read_toml(path), path)


@dataclass(frozen=True)
class Rules:
    overlap: Mapping[str, Mapping[str, Any]]
    optimizer_bytes_per_param: float
    fusion: Mapping[str, tuple[float, frozenset[str]]]
    band: Mapping[str, tuple[float, float]]
    sources: Mapping[str, str]
    engine_algorithms: tuple[str, ...] = timing.ALGORITHMS
    engine_links: frozenset[str] = frozenset()
    widen: Mapping[str, float] = field(default_factory=dict)  # [band_widen]: the band's growth per way of extrapolating

    def engine_all_reduce(self, link: str) -> tuple[str, ...]:
        """The all-reduce algorithms a serving engine chooses from on ``link``."""
        return self.engine_algorithms if link in self.engine_links else timing.ALGORITHMS


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
    algorithms = tuple(str(a) for a in engine.get("algorithms", timing.ALGORITHMS))
    widen = {k: _positive(v.get("widen"), f"{where}: band_widen.{k}.widen") for k, v in data.get("band_widen", {}).items()}
    sources |= {f"band_widen.{k}": str(v.get("source", "")) for k, v in data.get("band_widen", {}).items()}
    return Rules(dict(_section(data, "overlap", where)), _positive(optimizer.get("bytes_per_param"), f"{where}: optimizer.bytes_per_param"), fusion, band, sources, algorithms, frozenset(engine.get("links", [])), widen)


# --- kernels -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One leaf's work on one device: FLOPs, HBM bytes, how many launches it stands for, and its GEMM rows."""

    path: str
    kind: str  # "gemm", "attention" or "elementwise"
    flops: float
    bytes: float
    calls: float
    rows: float
    # a matrix product's shape on this device, from its declaration: (batches, m, n, k) of the forward
    # product (output rows, output width, reduction); None where the leaf declares none
    shape: tuple[float, float, float, float] | None = None
    # how often each product runs per forward call: (forward, input gradient, weight gradient); training
    # runs all three, a fine-tuning step none of a frozen weight's gradient and only the forward of a leaf
    # autograd never records
    passes: tuple[float, float, float] = (1.0, 0.0, 0.0)

    @property
    def products(self) -> tuple[tuple[float, float, float], ...]:
        """The output grids (batches, rows, width) of the products the calls run: the forward's, and in
        training the input gradient's (m × k) and the weight gradient's (k × n), where they run at all."""
        return tuple(grid for grid, _ in self._weighted_products())

    @property
    def product_weights(self) -> tuple[float, ...]:
        """How often each of :attr:`products` runs, per forward call."""
        return tuple(weight for _, weight in self._weighted_products())

    def _weighted_products(self) -> list[tuple[tuple[float, float, float], float]]:
        if self.shape is None:
            return []
        b, m, n, k = self.shape
        return [(grid, w) for grid, w in zip(((b, m, n), (b, m, k), (b, k, n)), self.passes) if w > 0]

    @property
    def leaf(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def kernels(
    model: Model,
    phase: str,
    *,
    workload: Mapping[str, int | Fraction],
    tensor: int = 1,
    pipeline: int = 1,
    attention: str = "sdpa",
    recompute: str = "none",
    expert_skew: float = 0,
    context: int = 1,
    finetune: FineTune | None = None,
) -> list[Kernel]:
    """The leaves of one micro-batch (train, prefill) or one step (decode) on one device, as kernels
    (``finetune``: a fine-tuning step's FLOPs, each adapter's in the kernel of the projection it adapts)."""
    if attention not in ATTENTION:
        raise EvaluationError(f"unknown attention implementation {attention!r}; choose one of {', '.join(ATTENTION)}")
    flash = attention != "eager"
    leaves = phase_work(
        model, phase, depth=None, flash=flash, expert_skew=expert_skew, finetune=finetune, grouped=attention != "fused_per_head"
    ).components
    extra = _recomputed(model, recompute, flash) if phase == "train" else {}
    split = tensor_split(model, tensor)
    layers_here = Fraction(model.values.get("n_layers", 1), pipeline)
    rows = workload["batch"] * workload.get("seq", 1) / context
    batch = model.vocabulary["batch"]
    passes = (1, 1, 1) if phase == "train" else (1, 0, 0)  # forward, gradient of the input, gradient of the weights
    tuned = kernel_passes(model, finetune) if finetune is not None else {}
    found = []
    for path, work in leaves.items():
        both = [(work.flops, work.bytes)] + ([(extra[path].flops, extra[path].bytes)] if path in extra else [])
        flops = sum(_per_device(model, timing.context_share(sympy.sympify(f), batch, context), split, pipeline, workload) for f, _ in both)
        moved = sum(_per_device(model, timing.context_share(sympy.sympify(b), batch, context), split, pipeline, workload) for _, b in both)
        if not flops and not moved:
            continue
        kind = "attention" if flash and (path.endswith("/core") or "/core/" in path) else "gemm" if flops else "elementwise"
        runs = tuple(float(p) for p in tuned.get(path, passes))
        calls = sum(runs) * (float(layers_here) if path.startswith("layers/") else 1.0)
        shape = _gemm_shape(model, path, split, workload, context) if kind == "gemm" else None
        found.append(Kernel(path, kind, float(flops), float(moved), calls, float(rows), shape, runs))
    return found


def _gemm_shape(model: Model, path: str, split, workload, context: int) -> tuple[float, float, float, float] | None:
    """The declared (batches, m, n, k) of the leaf at ``path`` on one device: the tensor split and the
    model's conventions in, the workload bound (one new token per sequence when decoding), a context
    rank's share of the tokens taken from the size that grows with the batch."""
    node = model.graph().graph.nodes.get(path)
    declared = node.get("gemm") if node is not None else None
    if not declared:
        return None
    fixed = {s: v for s, v in model.conventions.items() if s.name not in workload}
    bound = {"seq": 1, **workload}
    return _bound_shape(model, declared, split, fixed, bound, context)


@derivation
def _bound_shape(model: Model, declared, split, fixed, bound, context: int) -> tuple[float, float, float, float]:
    batch = model.vocabulary["batch"]
    sizes = {}
    shared = False
    for name in ("batches", "m", "n", "k"):
        expr = sympy.sympify(declared[name]).xreplace(split).xreplace(fixed)
        if context > 1 and not shared and name in ("batches", "m") and batch in expr.free_symbols:
            expr, shared = expr / context, True
        sizes[name] = float(timing._bind(model, expr, **bound))
    return sizes["batches"], sizes["m"], sizes["n"], sizes["k"]


def _per_device(model: Model, expr: sympy.Expr, split, pipeline: int, workload) -> Number:
    expr = sympy.sympify(expr)
    if not expr.free_symbols and expr == 0:
        return 0
    return timing._bind(model, _device_share(expr, split, pipeline), **{k: v for k, v in workload.items()})


@derivation  # a plan's shortlisted layouts share their tensor splits and pipeline depths
def _device_share(expr: sympy.Expr, split, pipeline: int) -> sympy.Expr:
    return sympy.expand(expr.xreplace(split) / pipeline)


Number = int | float | Fraction


def _recomputed(model: Model, recompute: str, flash: bool) -> dict[str, Any]:
    """One more forward of the leaves ``recompute`` runs again in backward, by path (as symform.analysis.time.timing counts them)."""
    units = timing.recomputed_units(model, recompute)
    if not units or (flash and recompute == "selective"):
        return {}
    forward = phase_work(model, "prefill", depth=None, flash=flash).components
    return {p: w for p, w in forward.items() if any(p == u or p.startswith(f"{u}/") for u in units)}


def kernel_parts(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> tuple[float, float, float]:
    """One kernel at the device's sustained rates: its compute time, its memory time and its fixed cost per
    launch (none for a kernel fused away)."""
    fraction, fused = fusion
    moved = kernel.bytes * (fraction if kernel.leaf in fused else 1.0)
    t_mem = moved / (hbm * eff.memory)
    if kernel.kind == "elementwise":
        t_compute = 0.0
    else:
        rate = eff.attention_fraction(head_size) if kernel.kind == "attention" else eff.gemm_fraction(kernel.rows, kernel.flops / kernel.calls, kernel.products, kernel.product_weights)
        t_compute = kernel.flops / (peak * rate)
    if not t_compute and not t_mem:
        return 0.0, 0.0, 0.0
    return t_compute, t_mem, eff.launch_s * kernel.calls


def kernel_seconds(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> float:
    """One kernel at the device's sustained rates: the longer of its compute and its memory time, plus a fixed
    cost per launch; a kernel fused away costs nothing."""
    t_compute, t_mem, launch = kernel_parts(kernel, peak, hbm, eff, fusion, head_size)
    return max(t_compute, t_mem) + launch


def kernel_ceiling(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> float:
    """The kernel with its compute and its memory traffic not overlapped at all: the estimate's ceiling."""
    return sum(kernel_parts(kernel, peak, hbm, eff, fusion, head_size))


def _head_size(model: Model) -> int:
    values = model.values
    if "d_head" in values:
        return int(values["d_head"])
    return int(values.get("d_model", 128) // max(values.get("n_heads", 1), 1))


def _device_rates(place: timing.Placement, dtype: str) -> tuple[float, float]:
    return float(place.device.flops_per_s(dtype)), float(place.device.hbm_bytes_per_s)


def _efficiency_for(place: timing.Placement, given: Efficiency | str | os.PathLike[str] | None, gemm_model: str | None = None) -> Efficiency:
    found = _device_efficiency(place, given)
    return found.with_gemm_model(gemm_model) if gemm_model else found


def _device_efficiency(place: timing.Placement, given: Efficiency | str | os.PathLike[str] | None) -> Efficiency:
    if isinstance(given, Efficiency):
        return given
    if given is not None:
        return efficiency(given)
    for name in (place.hardware.name, place.device.name):
        if name and name in _bundled_efficiency():
            return efficiency(name)
    return efficiency(place.device.name or place.name)


def serving_kernels(model: Model, *, batch: int, prompt: int, output: int, tensor: int = 1, attention: str = "sdpa", expert_skew: float = 0) -> tuple[list[Kernel], list[Kernel]]:
    """The prefill's kernels, and one decode step's at the mean cache length of the output − 1 steps."""
    prefill = kernels(model, "prefill", workload={"batch": batch, "seq": prompt}, tensor=tensor, attention=attention)
    past = Fraction(2 * prompt + max(output - 2, 0), 2)
    return prefill, kernels(model, "decode", workload={"batch": batch, "past": past}, tensor=tensor, attention=attention, expert_skew=expert_skew)


#: The leaves that read and write an eager attention's score matrices: no engine fuses them away while the
#: scores are materialised (that is what eager attention means), whatever the fusion convention says.
SCORE_LEAVES = frozenset({"softmax", "scale_mask", "attn_dropout"})


def _fusion(convention: str | tuple[float, frozenset[str]], attention: str = "sdpa") -> tuple[float, frozenset[str]]:
    if isinstance(convention, tuple):
        fraction, fused = convention
    else:
        conventions = rules().fusion
        if convention not in conventions:
            raise EvaluationError(f"unknown fusion convention {convention!r}; choose one of {', '.join(conventions)}")
        fraction, fused = conventions[convention]
    return fraction, fused - SCORE_LEAVES if attention == "eager" else fused


@dataclass(frozen=True)
class Band:
    """A point estimate with its band, and the bounds that bracket it: ``floor``, the datasheet peaks with
    everything overlapped (symform.analysis.time.timing's lower bound, where given), and ``ceiling``, every kernel at the
    device's sustained rates with nothing overlapped (its compute and memory time added, every transfer
    exposed). The band never goes below the floor; it may reach above the ceiling, which bounds the estimate,
    not a real run."""

    estimate: float
    low: float
    high: float
    ceiling: float | None = None
    floor: float | None = None

    @classmethod
    def around(cls, value: float, kind: str, *, ceiling: float | None = None, floor: float | None = None, widen: float = 0.0) -> "Band":
        """The fitted band of ``kind``, its edges moved out by a factor 1 + ``widen`` where the case extrapolates
        (a ratio, so the lower edge never reaches zero), never below the floor."""
        below, above = rules().band[kind]
        low, high = value * (1 - below) / (1 + widen), value * (1 + above) * (1 + widen)
        # no real run beats the floor; the ceiling bounds the estimate, not a real run (kernels slower than fitted)
        return cls(value, max(low, floor or 0.0), high, ceiling, floor)

    def as_dict(self) -> dict[str, float]:
        bounds = {k: v for k, v in (("ceiling", self.ceiling), ("floor", self.floor)) if v is not None}
        return {"estimate": self.estimate, "low": self.low, "high": self.high} | bounds


# --- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingEstimate:
    """One training step's estimate: its parts, the band, MFU and HFU at the estimate, and the factors used."""

    step: Band
    compute_s: float
    comm_s: dict[str, float]
    exposed_comm_s: dict[str, float]
    bubble_s: float
    optimizer_s: float
    model_flops: Number
    hardware_flops: Number
    devices: int
    peak_flops_per_s: float
    tokens: int
    attention: str
    factors: dict[str, object] = field(default_factory=dict)
    extrapolating: tuple[str, ...] = ()  # how the case lies outside the published runs (the band widened for each)

    def mfu(self, seconds: float | None = None) -> float:
        return float(self.model_flops) / ((seconds or self.step.estimate) * self.devices * self.peak_flops_per_s)

    def hfu(self, seconds: float | None = None) -> float:
        return float(self.hardware_flops) / ((seconds or self.step.estimate) * self.devices * self.peak_flops_per_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step.estimate

    def as_dict(self) -> dict[str, object]:
        return {
            "estimate_s": self.step.as_dict(),
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s,
            "optimizer_s": self.optimizer_s,
            "mfu": self.mfu(),
            "hfu": self.hfu(),
            "tokens_per_s": self.tokens_per_s,
            "attention": self.attention,
            "factors": self.factors,
            "extrapolating": list(self.extrapolating),
        }


def _extrapolating(kind: str, eff: Efficiency, dtype: str, devices: int, model: Model, features: Sequence[str] = ()) -> tuple[tuple[str, ...], float]:
    """What the case lies outside the published runs by (symform.analysis.time.calibration.extrapolating), and the band's
    widening for it (rules.toml [band_widen])."""
    from . import calibration  # it estimates the runs with this module

    found = calibration.extrapolating(kind, device=eff.device, dtype=dtype, devices=devices, moe="n_experts" in model.values, features=features)
    widen = rules().widen
    return tuple(text for _, text in found), sum(widen.get(name, 0.0) for name, _ in found)


def _layout_features(layout: Layout, tp_comm_overlap: bool) -> list[str]:
    """The layout features no published run has (the runs give data, tensor and pipeline degrees and ZeRO)."""
    named = [("sequence parallelism", layout.sequence), (f"a virtual pipeline of {layout.chunks} chunks", layout.chunks > 1), ("tensor-parallel communication overlap", tp_comm_overlap),
             (f"context parallelism {layout.context}", layout.context > 1), (f"expert parallelism {layout.expert}", layout.expert > 1), (f"the {layout.schedule} schedule", layout.schedule not in ("1f1b",))]
    return [text for text, used in named if used]


def training_estimate(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    global_batch: int,
    micro_batch: int,
    seq: int,
    layout: Layout | None = None,
    recompute: str = "none",
    dtype: str = "bf16",
    precision: str = "mixed",
    attention: str = "sdpa",
    node_size: int | None = None,
    efficiency_data: Efficiency | str | None = None,
    convention: str = "training",
    bounds: timing.TrainingTime | None = None,
    work: list[Kernel] | None = None,
    finetune: FineTune | None = None,
    gemm_model: str | None = None,
    tp_comm_overlap: bool = False,
) -> TrainingEstimate:
    """The estimated step time of ``symform.analysis.time.timing.training_time``'s step, with its parts and band.

    ``finetune``: a fine-tuning step (its FLOPs, its trainable weights' gradient exchange and optimizer
    update), at the efficiency factors fitted to full training. ``gemm_model``: one of GEMM_MODELS at its own
    fit, in place of the device's default. ``tp_comm_overlap``: sequence parallelism's all-gathers and
    reduce-scatters pipelined with the GEMMs (Transformer Engine's Userbuffers; rules.toml overlap.tensor_overlapped)."""
    if tp_comm_overlap and not (layout and layout.sequence):
        raise ConfigError("tensor-parallel communication overlap pipelines sequence parallelism's all-gathers and reduce-scatters with the GEMMs; add sequence parallelism (--sp) or drop it")
    layout = layout or Layout()
    bounds = bounds or timing.training_time(
        model, gpu, global_batch=global_batch, micro_batch=micro_batch, seq=seq, layout=layout,
        recompute=recompute, dtype=dtype, flash=attention != "eager", precision=precision, node_size=node_size, finetune=finetune,
    )
    place = timing.placement(gpu, node_size)
    model = timing.at_dtype(model, dtype)
    eff = _efficiency_for(place, efficiency_data, gemm_model)
    peak, hbm = _device_rates(place, dtype)
    if work is None:
        work = kernels(model, "train", workload={"batch": micro_batch, "seq": seq}, tensor=layout.tensor, pipeline=layout.pipeline, attention=attention, recompute=recompute, context=layout.context, finetune=finetune)
    fusion, head = _fusion(convention, attention), _head_size(model)
    seconds = [kernel_seconds(k, peak, hbm, eff, fusion, head) for k in work]
    compute = sum(seconds) * bounds.microbatches
    serial = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in work) * bounds.microbatches
    attention_s = sum(t for t, k in zip(seconds, work) if k.kind == "attention") * bounds.microbatches
    gemm_s = sum(t for t, k in zip(seconds, work) if k.kind == "gemm") * bounds.microbatches
    comm = {kind: c.seconds / eff.link(c.link).bus_efficiency for kind, c in bounds.comm.items()}
    exposed = _exposed(comm, compute, layout, attention_s, gemm_s if tp_comm_overlap else None)
    inside = sum(v for k, v in exposed.items() if k != "data")
    bubble = bounds.bubble_ratio * (compute + inside)
    params = float(timing._bind(model, params_per_device(model, layout) if finetune is None else trained_per_device(model, finetune, layout)))
    shards = layout.data if (layout.zero >= 1 or layout.distributed_optimizer) else 1
    optimizer = params / shards * rules().optimizer_bytes_per_param / (hbm * eff.memory)
    step = compute + inside + bubble + exposed.get("data", 0.0) + optimizer
    within = sum(v for k, v in comm.items() if k != "data")
    ceiling = (serial + within) * (1 + bounds.bubble_ratio) + comm.get("data", 0.0) + optimizer
    reasons, widen = _extrapolating("training", eff, dtype, bounds.devices, model, _layout_features(layout, tp_comm_overlap) + (["fine-tuning"] if finetune is not None else []))
    return TrainingEstimate(
        step=Band.around(step, "training", ceiling=ceiling, floor=bounds.time_lower, widen=widen),
        compute_s=compute,
        comm_s=comm,
        exposed_comm_s=exposed,
        bubble_s=bubble,
        optimizer_s=optimizer,
        model_flops=bounds.model_flops,
        hardware_flops=bounds.hardware_flops,
        devices=bounds.devices,
        peak_flops_per_s=peak,
        tokens=bounds.tokens,
        attention=attention,
        factors=_factors(eff, convention, "training"),
        extrapolating=reasons,
    )


def _exposed(comm: Mapping[str, float], compute: float, layout: Layout, attention_s: float = 0.0, gemm_s: float | None = None) -> dict[str, float]:
    """Each kind of communication's part on the critical path, by the overlap rules (``gemm_s``: the GEMMs' time,
    where the tensor-parallel communication is overlapped with them)."""
    overlap = rules().overlap
    windows = {"none": 0.0, "backward": compute * 2 / 3, "step": compute, "attention": attention_s, "gemm": gemm_s or 0.0}
    exposed = {}
    for kind, seconds in comm.items():
        name = "sharded" if kind == "data" and layout.zero >= 3 else "tensor_overlapped" if kind == "tensor" and gemm_s is not None else kind
        rule = overlap[name]
        exposed[kind] = max(0.0, seconds - windows[rule.get("window", "none")]) * float(rule.get("exposed", 1.0))
    return exposed


def _factors(eff: Efficiency, convention: str | tuple, band: str) -> dict[str, object]:
    r = rules()
    if isinstance(convention, tuple):
        return {"efficiency_file": eff.device, "fusion": {"convention": "given", "fraction": convention[0]}}
    return {
        "efficiency_file": eff.device,
        "gemm": {"sustained": eff.gemm_sustained, "tile_m": eff.tile_m, "half_flops": eff.half_flops, "source": eff.sources["gemm"]}
        | ({"model": "waves", "tiles": [list(t) for t in eff.tiles], "sms": eff.sms} if eff.gemm_model == "waves" else {}),
        "attention": {"fraction": {str(k): v for k, v in eff.attention.items()}, "source": eff.sources["attention"]},
        "memory": {"fraction": eff.memory, "source": eff.sources["memory"]},
        "kernel": {"launch_s": eff.launch_s, "source": eff.sources.get("kernel", NO_KERNEL_DATA)},
        "links": {n: {"bus_efficiency": l.bus_efficiency, "latency_s": l.latency_s, "source": eff.sources.get(f"links.{n}", "")} for n, l in eff.links.items()},
        "fusion": {"convention": convention, "fraction": r.fusion[convention][0], "source": r.sources[f"fusion.{convention}"]},
        "overlap": {k: dict(v) for k, v in r.overlap.items()},
        "optimizer_bytes_per_param": r.optimizer_bytes_per_param,
        "band": {"below": r.band[band][0], "above": r.band[band][1], "source": r.sources[f"band.{band}"]},
    }


# --- serving --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingEstimate:
    ttft: Band
    tpot: Band
    total: Band
    batch: int
    output: int
    prefill_comm_s: float
    decode_comm_s: float
    attention: str
    factors: dict[str, object] = field(default_factory=dict)
    extrapolating: tuple[str, ...] = ()  # how the case lies outside the published runs (the band widened for each)

    @property
    def tokens_per_s(self) -> Band:
        """Output tokens per second of the whole batch, prefill included (high time, low rate)."""
        n = self.batch * self.output
        return Band(n / self.total.estimate, n / self.total.high, n / self.total.low)

    def as_dict(self) -> dict[str, object]:
        return {
            "ttft_s": self.ttft.as_dict(),
            "tpot_s": self.tpot.as_dict(),
            "total_s": self.total.as_dict(),
            "tokens_per_s": self.tokens_per_s.as_dict(),
            "prefill_comm_s": self.prefill_comm_s,
            "decode_comm_s": self.decode_comm_s,
            "attention": self.attention,
            "factors": self.factors,
            "extrapolating": list(self.extrapolating),
        }


def serving_estimate(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    batch: int,
    prompt: int,
    output: int,
    tensor: int = 1,
    dtype: str = "bf16",
    attention: str = "sdpa",
    node_size: int | None = None,
    efficiency_data: Efficiency | str | None = None,
    convention: str = "fused",
    work: tuple[list[Kernel], list[Kernel]] | None = None,
    expert_skew: float = 0,
    gemm_model: str | None = None,
) -> ServingEstimate:
    """TTFT, TPOT and tokens/s of ``batch`` requests (static batching), each kernel at its sustained rate.

    TPOT is one decode step at the mean cache length of the output − 1 steps (the
    per-step work is linear in the cache length, so this is their mean).
    """
    for name, value in (("batch", batch), ("prompt", prompt), ("output", output), ("tensor", tensor)):
        timing._whole(name, value)
    place = timing.placement(gpu, node_size)
    model = timing.at_dtype(model, dtype)
    eff = _efficiency_for(place, efficiency_data, gemm_model)
    peak, hbm = _device_rates(place, dtype)
    fusion, head = _fusion(convention, attention), _head_size(model)
    prefill, decode = work or serving_kernels(model, batch=batch, prompt=prompt, output=output, tensor=tensor, attention=attention, expert_skew=expert_skew)
    comm_prefill = comm_decode = 0.0
    if tensor > 1:
        link = place.link(tensor)
        rates = eff.link(link)
        bandwidth = timing._bandwidth(place, link) * rates.bus_efficiency
        algorithms = rules().engine_all_reduce(link)
        comm_prefill, _ = timing._inference_comm(model, place, tensor, batch, prompt, alpha=rates.latency_s, bandwidth=bandwidth, algorithms=algorithms)
        comm_decode, _ = timing._inference_comm(model, place, tensor, batch, 1, alpha=rates.latency_s, bandwidth=bandwidth, algorithms=algorithms)
    ttft = sum(kernel_seconds(k, peak, hbm, eff, fusion, head) for k in prefill) + comm_prefill
    tpot = sum(kernel_seconds(k, peak, hbm, eff, fusion, head) for k in decode) + comm_decode
    total = ttft + (output - 1) * tpot
    ttft_ceiling = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in prefill) + comm_prefill
    tpot_ceiling = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in decode) + comm_decode
    reasons, widen = _extrapolating("serving", eff, dtype, tensor, model, [f"routing skew {expert_skew}"] if expert_skew else [])
    return ServingEstimate(
        ttft=Band.around(ttft, "serving", ceiling=ttft_ceiling, widen=widen),
        tpot=Band.around(tpot, "serving", ceiling=tpot_ceiling, widen=widen),
        total=Band.around(total, "serving", ceiling=ttft_ceiling + (output - 1) * tpot_ceiling, widen=widen),
        batch=batch,
        output=output,
        prefill_comm_s=comm_prefill,
        decode_comm_s=comm_decode,
        attention=attention,
        factors=_factors(eff, convention, "serving"),
        extrapolating=reasons,
    )
