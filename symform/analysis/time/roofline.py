"""Roofline: from FLOPs and HBM bytes to a bound (compute or memory) and to time.

For work of F FLOPs that moves B bytes through HBM, on a device with peak
P FLOP/s and HBM bandwidth W bytes/s:

- arithmetic intensity I = F / B (FLOP/byte); ridge point R = P / W;
- T_math = F / P, T_mem = B / W;
- with perfect overlap of compute and memory traffic the time is at least
  max(T_math, T_mem); with none it is at most T_math + T_mem (≤ 2·max);
- the work is compute-bound when I > R, memory-bound otherwise.

Every function here accepts sympy expressions or numbers, so the same code
gives closed forms (``matmul().intensity`` is bdf/(bd + df + bf)) and
seconds. Whole models are placed on the roofline per phase (training step,
prefill, decode of one token) and per declared component; see
docs/roofline.md for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from fractions import Fraction

import sympy

from . import flash_attention, routing
from ..memory.finetune import FineTune, step_leaf_flops
from ..memory.settings import GENERATING
from ...engine.store.derivation import derivation
from ...engine.budget import check_expansion
from ...engine.algebra.multiplied import expand
from ...engine.errors import BudgetError, ConfigError, EvaluationError
from ...engine.algebra.evaluate import exact_value
from ...engine.algebra.formula import to_latex
from ..devices.hardware import Device, System, load_device
from ...engine.graph.graph import ComponentGraph
from ...engine.graph.model import Model
from ...engine.algebra.multiplied import multiplied_out

PHASES = ("train", "prefill", "decode")
BOUNDS = ("compute", "memory")

#: Bytes of HBM traffic in a training step's backward pass per byte of its
#: forward pass: each matrix product's backward is two products of the same
#: shapes (dX = dY·Wᵀ and dW = Xᵀ·dY), each reading and writing tensors of the
#: forward's sizes. Optimizer traffic is not counted.
BACKWARD_BYTES_PER_FORWARD_BYTE = 2

Quantity = int | float | Fraction | sympy.Expr


# --- the roofline itself: symbolic or numeric --------------------------------------


def _symbolic(*values: object) -> bool:
    return any(isinstance(v, sympy.Basic) and not v.is_Number for v in values)


def _ratio(numerator: Quantity, denominator: Quantity) -> Quantity:
    if _symbolic(numerator, denominator):
        return sympy.cancel(sympy.sympify(numerator) / denominator)
    if isinstance(numerator, (int, Fraction)) and isinstance(
        denominator, (int, Fraction)
    ):
        return Fraction(numerator) / Fraction(
            denominator
        )  # exact while both counts are exact
    return float(numerator) / float(denominator)


def arithmetic_intensity(flops: Quantity, bytes_moved: Quantity) -> Quantity:
    """FLOPs per byte moved through HBM."""
    return _ratio(flops, bytes_moved)


def ridge_point(peak_flops_per_s: Quantity, bytes_per_s: Quantity) -> Quantity:
    """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return _ratio(peak_flops_per_s, bytes_per_s)


def math_time(flops: Quantity, peak_flops_per_s: Quantity) -> Quantity:
    """T_math = FLOPs / peak FLOP/s, in seconds."""
    return _ratio(flops, peak_flops_per_s)


def memory_time(bytes_moved: Quantity, bytes_per_s: Quantity) -> Quantity:
    """T_mem = bytes / bandwidth, in seconds."""
    return _ratio(bytes_moved, bytes_per_s)


def time_lower_bound(t_math: Quantity, t_mem: Quantity) -> Quantity:
    """max(T_math, T_mem): compute and memory traffic fully overlapped."""
    return sympy.Max(t_math, t_mem) if _symbolic(t_math, t_mem) else max(t_math, t_mem)


def time_upper_bound(t_math: Quantity, t_mem: Quantity) -> Quantity:
    """T_math + T_mem: no overlap at all."""
    return t_math + t_mem


@dataclass(frozen=True)
class Roofline:
    """Work of ``flops`` FLOPs moving ``bytes`` bytes on a device of ``peak_flops_per_s`` and ``bytes_per_s``.

    Fields may be numbers or sympy expressions; the properties follow.
    """

    flops: Quantity
    bytes: Quantity
    peak_flops_per_s: Quantity
    bytes_per_s: Quantity

    @property
    def intensity(self) -> Quantity | None:
        """FLOP/byte; None for work that moves no bytes."""
        return None if self.bytes == 0 else arithmetic_intensity(self.flops, self.bytes)

    @property
    def ridge(self) -> Quantity:
        return ridge_point(self.peak_flops_per_s, self.bytes_per_s)

    @property
    def t_math(self) -> Quantity:
        return math_time(self.flops, self.peak_flops_per_s)

    @property
    def t_mem(self) -> Quantity:
        return memory_time(self.bytes, self.bytes_per_s)

    @property
    def time_lower(self) -> Quantity:
        return time_lower_bound(self.t_math, self.t_mem)

    @property
    def time_upper(self) -> Quantity:
        return time_upper_bound(self.t_math, self.t_mem)

    @property
    def bound(self) -> str:
        """'compute' when the intensity exceeds the ridge point, else 'memory' (numbers only)."""
        if _symbolic(self.flops, self.bytes, self.peak_flops_per_s, self.bytes_per_s):
            raise EvaluationError(
                "the bound of a symbolic roofline is undecided; give numbers for every symbol first"
            )
        return "compute" if self.t_math > self.t_mem else "memory"

    @property
    def attainable_flops_per_s(self) -> float:
        """FLOP/s at the lower time bound: min(peak, bandwidth × intensity)."""
        return float(self.flops) / float(self.time_lower) if self.flops else 0.0

    def _repr_latex_(self) -> str:
        """In a notebook: FLOPs, bytes, intensity against the ridge, and the time bounds."""
        parts = [("F", self.flops), ("Q", self.bytes), ("I", self.intensity), ("I^{*}", self.ridge), (r"T_{\min}", self.time_lower), (r"T_{\max}", self.time_upper)]
        return "$" + r",\quad ".join(f"{name} = {_latex_value(value)}" for name, value in parts if value is not None) + "$"

    def as_dict(self) -> dict[str, object]:
        """Plain JSON numbers (intensity null for work that moves no bytes)."""
        intensity = self.intensity
        return {
            "flops": _json_number(self.flops),
            "bytes": _json_number(self.bytes),
            "intensity": None if intensity is None else float(intensity),
            "ridge": float(self.ridge),
            "bound": self.bound,
            "t_math_s": float(self.t_math),
            "t_mem_s": float(self.t_mem),
            "time_lower_s": float(self.time_lower),
            "time_upper_s": float(self.time_upper),
        }


def _latex_value(value: Quantity) -> str:
    """A formula as LaTeX; a number to four significant digits (1.502 \\times 10^{10})."""
    expr = sympy.sympify(value)
    if expr.free_symbols:
        return to_latex(expr)
    mantissa, _, exponent = f"{float(expr):.4g}".partition("e")
    return mantissa if not exponent else rf"{mantissa} \times 10^{{{int(exponent)}}}"


def _json_number(value: Quantity) -> int | float:
    if isinstance(value, int) or (
        isinstance(value, Fraction) and value.denominator == 1
    ):
        return int(value)
    return float(value)


# --- single operations, in closed form ----------------------------------------------


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of one piece of work, as sympy expressions (or exact numbers)."""

    flops: sympy.Expr
    bytes: sympy.Expr

    @property
    def intensity(self) -> sympy.Expr:
        return sympy.cancel(sympy.sympify(self.flops) / self.bytes)

    def on(self, device: Device, dtype: str = "bf16") -> Roofline:
        return Roofline(
            self.flops, self.bytes, device.flops_per_s(dtype), device.hbm_bytes_per_s
        )

    def _repr_latex_(self) -> str:
        """In a notebook: FLOPs, bytes and their ratio, the arithmetic intensity."""
        parts = (("F", self.flops), ("Q", self.bytes), ("I = F/Q", self.intensity))
        return "$" + r",\quad ".join(f"{name} = {to_latex(sympy.sympify(value))}" for name, value in parts) + "$"

    def subs(self, values: Mapping[sympy.Symbol, object]) -> Work:
        return Work(
            sympy.sympify(self.flops).xreplace(values),
            sympy.sympify(self.bytes).xreplace(values),
        )


def _size(name: str) -> sympy.Symbol:
    # the operand sizes of single operations, local to these examples
    return sympy.Symbol(name, positive=True, integer=True)


n, b, d, f = (_size(name) for name in "nbdf")


def dot_product(length: Quantity = n, *, element_bytes: int = 2) -> Work:
    """x·y for two vectors of ``length``: n multiplies and n − 1 adds; read both vectors, write one scalar."""
    return Work(2 * length - 1, element_bytes * (2 * length + 1))


def matmul(
    rows: Quantity = b,
    inner: Quantity = d,
    cols: Quantity = f,
    *,
    element_bytes: int = 2,
) -> Work:
    """(b×d)·(d×f): 2bdf FLOPs (one multiply-add is 2); read both operands, write the product once."""
    return Work(
        2 * rows * inner * cols,
        element_bytes * (rows * inner + inner * cols + rows * cols),
    )


def split_contraction_matmul(
    rows: Quantity = b,
    inner: Quantity = d,
    cols: Quantity = f,
    *,
    devices: int = 2,
    element_bytes: int = 2,
) -> Work:
    """(b×d)·(d×f) with the contraction split over ``devices``: each computes its share, then sends its b×f partial sums once.

    ``bytes`` here are the bytes each device sends, so the intensity is FLOPs
    per byte of communication: d/2 for two devices in bf16.
    """
    return Work(2 * rows * inner * cols / devices, element_bytes * rows * cols)


def limit_intensity(
    work: Work, symbol: sympy.Symbol, point: object = sympy.oo
) -> sympy.Expr:
    """The intensity's limit as ``symbol`` tends to ``point`` (e.g. the dot product's 1/2 as n → ∞)."""
    return sympy.limit(work.intensity, symbol, point)


def small_batch_intensity(
    work: Work | None = None,
    *,
    rows: sympy.Symbol = b,
    others: tuple[sympy.Symbol, ...] = (d, f),
) -> sympy.Expr:
    """Leading order of a matmul's intensity when ``rows`` ≪ ``others``: scale them by λ and let λ → ∞ (gives b)."""
    work = work or matmul()
    scale = sympy.Symbol("lambda", positive=True)
    scaled = work.intensity.xreplace({s: scale * s for s in others})
    return sympy.limit(scaled, scale, sympy.oo)


# --- whole models, per phase ----------------------------------------------------------


@dataclass(frozen=True)
class PhaseWork:
    """A phase's FLOPs and bytes per component (slash paths), over the workload symbols left free."""

    phase: str
    components: dict[str, Work]
    notes: tuple[str, ...] = ()
    # the work this one copies (phase_work's, once per graph and options), whose total is summed once
    source: PhaseWork | None = field(default=None, repr=False, compare=False)

    @cached_property
    def total(self) -> Work:
        if self.source is not None:
            return self.source.total
        parts = self.components.values()
        return Work(  # one Add of every part: summing one by one would flatten the growing sum again each time
            multiplied_out(sympy.Add(*(w.flops for w in parts))),
            multiplied_out(sympy.Add(*(w.bytes for w in parts))),
        )


def phase_work(
    model: Model,
    phase: str,
    *,
    depth: int | None = 1,
    flash: bool = False,
    sram_bytes: int = flash_attention.DEFAULT_SRAM_BYTES,
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
    expert_skew: float = 0,
    finetune: FineTune | None = None,
    grouped: bool = True,
    values: Mapping[sympy.Symbol, sympy.Expr] | None = None,
    recomputed_forward: bool = False,
) -> PhaseWork:
    """FLOPs and HBM bytes of one phase, per component, as expressions in batch, seq (and past when decoding).

    - ``train``: forward + backward FLOPs at (batch, seq); bytes are the
      forward's × (1 + BACKWARD_BYTES_PER_FORWARD_BYTE).
    - ``prefill``: the forward pass at (batch, seq), an empty cache.
    - ``decode``: one new token per sequence (seq = 1) after ``past`` cached ones.
    - ``flash``: each attention core's eager traffic is replaced by
      FlashAttention's (symform.analysis.time.flash_attention), with ``sram_bytes`` on chip (the paper's M);
      ``grouped``: the kernel reads a key/value head once for all the query heads that
      share it (FlashAttention-2, FlashDecoding), else once per query head (fused
      kernels without grouped-query packing, such as TensorRT-LLM's masked MHA before XQA).
    - ``weight_bytes``: bytes per parameter by leaf path, as a checkpoint stores
      them (symform.analysis.memory.quantization.weight_bytes_by_leaf); else the convention's.
    - mixture of experts, decode and prefill: the step reads the weights of every expert any of
      its tokens (``batch``, or a prefill's ``batch·seq``) is routed to, the expected number under uniform routing
      (``expert_skew``: a Zipf exponent for skewed routing; symform.analysis.time.routing).
    - ``finetune`` (train): the FLOPs of a fine-tuning step (symform.analysis.memory.finetune): frozen weights take
      no weight gradient, each adapter's FLOPs sit on the projection it adapts; the bytes stay full
      training's.
    - ``recomputed_forward`` (prefill): the forward a training step's recomputation runs again, its routed
      experts' weights read as the training step's own forward reads them (top_k a token), not as a
      served prompt's (the experts its tokens touch).
    - ``values`` (train, and prefill as ``recomputed_forward``): put into every leaf before it is multiplied out
      (sizes, a workload size, a parallel degree's share): the same work as substituting them afterwards, in far
      fewer terms.
    """
    _check_phase(phase)
    if finetune is not None and phase != "train":
        raise EvaluationError(f"fine-tuning is a training step; give phase train, not {phase}")
    if values and _served(phase, recomputed_forward):
        # a served step's expert routing reads top_k and n_experts in the leaves: they must still be there
        raise EvaluationError(f"sizes put into the leaves first are for train and a training step's recomputed forward; for {phase}, substitute them in the result")
    # once per model and options: a plan asks again for every layout it reworks
    work = _phase_work(model, phase, depth, flash, sram_bytes, weight_bytes, expert_skew, finetune, grouped, dict(values or {}), recomputed_forward)
    return PhaseWork(work.phase, dict(work.components), work.notes, work)


@derivation
def _phase_work(
    model: Model, phase: str, depth: int | None, flash: bool, sram_bytes: int, weight_bytes: Mapping[str, sympy.Expr] | None, expert_skew: float,
    finetune: FineTune | None = None, grouped: bool = True, values: Mapping[sympy.Symbol, sympy.Expr] | None = None, recomputed_forward: bool = False,
) -> PhaseWork:
    values = dict(values or {})
    if phase != "train":
        model = model.with_conventions(**GENERATING)
    if phase == "decode":
        model = model.with_conventions(decoding=1)  # recurrent mixers take their one-step update from the cached state
    keep = ("past",) if phase == "decode" else ()
    for name in keep:
        _symbol(model, name)
    flops = _leaves(model, "forward_flops", keep, values=values)
    traffic = _leaves(model, "bytes_moved", keep, weight_bytes, values)
    notes = [
        f"bytes moved as an unfused eager framework moves them ({'FlashAttention in the attention cores' if flash else 'attention scores materialised'})"
    ]
    if phase == "train" and finetune is not None:
        replace = _conventions(model, keep) | values
        flops = {p: sympy.expand(e.xreplace(replace)) for p, e in step_leaf_flops(model, finetune).items()}
        notes.append("fine-tuning: " + finetune.summary() + "; frozen weights take no weight gradient, adapters' FLOPs on the projections they adapt, bytes as full training's")
    if phase == "train":
        if finetune is None:
            backward = _leaves(model, "backward_flops", keep, values=values)
            flops = {p: flops.get(p, 0) + backward.get(p, 0) for p in {**flops, **backward}}
        traffic = {
            p: (1 + BACKWARD_BYTES_PER_FORWARD_BYTE) * e for p, e in traffic.items()
        }
        notes.append(
            f"training bytes = forward bytes × {1 + BACKWARD_BYTES_PER_FORWARD_BYTE} (backward moves twice the forward's bytes); optimizer traffic not counted"
        )
    if flash:
        _use_flash_attention(model, phase, flops, traffic, keep, sram_bytes, grouped, values)
        notes.append(
            f"FlashAttention: keys and values re-read from {sram_bytes} bytes on chip (M = {flash_attention.sram_elements(sram_bytes, 2)} bf16 elements)"
        )
    if phase == "decode":
        notes.append(
            "decode: one new token per sequence after `past` cached tokens (seq = 1, past = context)"
        )
    if _served(phase, recomputed_forward):
        touched = _touched_experts(model, traffic, expert_skew, phase)
        if touched:
            notes.append(touched)
    seq_one = {_symbol(model, "seq"): sympy.Integer(1)} if phase == "decode" else {}
    zero = sympy.Integer(0)
    leaves = {
        p: Work(flops.get(p, zero), traffic.get(p, zero)) for p in {**flops, **traffic}
    }
    components = _group(leaves, depth, seq_one)
    return PhaseWork(phase, components, tuple(notes))


def _served(phase: str, recomputed_forward: bool) -> bool:
    """Whether a phase is a served step's, whose routed experts' weights are read once per expert its tokens touch
    (a decode step, a prefill that is not training's recomputed forward)."""
    return phase == "decode" or (phase == "prefill" and not recomputed_forward)


def _touched_experts(model: Model, traffic: dict, skew: float, phase: str) -> str | None:
    """Count the routed experts' weights for the experts a step's tokens touch, not top_k (in place): a decode
    step's one new token per sequence, a prefill's whole prompts."""
    if "top_k" not in model.values or "n_experts" not in model.values:
        return None
    v = model.vocabulary
    tokens = v["batch"] if phase == "decode" else v["batch"] * v["seq"]
    if skew:
        distinct = routing.expected_experts(model.values["n_experts"], model.values["top_k"], tokens, skew)
    else:
        distinct = routing.expected_experts(v["n_experts"], v["top_k"], tokens)
    for path, expr in traffic.items():
        traffic[path] = routing.touched_weight_bytes(expr, v["top_k"], v["batch"], distinct)
    how = f"Zipf-skewed routing, exponent {skew}" if skew else "uniform routing (assumed)"
    count = "batch" if phase == "decode" else "batch·seq"
    return f"mixture of experts: a {phase} step reads the weights of the expected distinct experts its tokens touch, {how}: n_experts·(1 − (1 − top_k/n_experts)^({count})) when uniform"


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise EvaluationError(
            f"unknown phase {phase!r}; choose one of {', '.join(PHASES)}"
        )


def _symbol(model: Model, name: str) -> sympy.Symbol:
    if name not in model.vocabulary:
        raise EvaluationError(
            f"this version of symform's vocabulary has no {name!r} symbol, which decoding needs"
        )
    return model.vocabulary[name]


def _conventions(model: Model, keep: tuple[str, ...]) -> dict[sympy.Symbol, sympy.Expr]:
    """The model's conventions and settings, except the workload settings that the phase keeps free."""
    return {s: v for s, v in model.conventions.items() if s.name not in keep}


def _leaves(
    model: Model, quantity: str, keep: tuple[str, ...], weight_bytes: Mapping[str, sympy.Expr] | None = None,
    values: Mapping[sympy.Symbol, sympy.Expr] | None = None,
) -> dict[str, sympy.Expr]:
    replace = _conventions(model, keep) | dict(values or {})
    if weight_bytes is None:  # the same conventions give the same leaves: once per graph (shared across sizes)
        return dict(_leaves_under(model.graph(), quantity, replace))
    parts = model.breakdown(quantity, depth=None, conventions=False)
    symbol = model.vocabulary["weight_bytes"]  # each leaf's weights read at their stored width
    return {path: sympy.expand(f.expr.xreplace({symbol: weight_bytes.get(path, replace[symbol])}).xreplace(replace)) for path, f in parts.items()}


@derivation
def _leaves_under(graph: ComponentGraph, quantity: str, replace: Mapping[sympy.Symbol, sympy.Expr]) -> dict[str, sympy.Expr]:
    # each leaf's term (multiplicity × expression) with the conventions in, multiplied out once: the numbers
    # they put in leave fewer terms than multiplying out over the convention symbols first
    # Each leaf reads a few conventions at most: one multiplied out under the same values of those is
    # the same expression whatever the others are (training's and inference's leaves share most terms).
    parts = graph.leaf_terms(quantity)
    leaves = {}
    for path, expr in parts.items():
        used = {s: replace[s] for s in sorted(expr.free_symbols, key=lambda s: s.name) if s in replace}
        leaves[path] = _leaf_under(expr, used, f"{path}'s {quantity}")
    return leaves


@derivation
def _leaf_under(expr: sympy.Expr, values: dict[sympy.Symbol, sympy.Expr], what: str) -> sympy.Expr:
    """expand(expr.xreplace(values)): where every value is a number or one symbol to the power ±1 times one, the
    leaf within the budget is within it with them in (none adds a term or a degree), and the values go in as
    it is multiplied out, without rebuilding its tree first; otherwise the budget is checked with them in."""
    if all(_one_factor(v) for v in values.values()):
        try:
            check_expansion(expr, what)
        except BudgetError:
            pass
        else:
            return multiplied_out(expr, values)
    return expand(expr.xreplace(values), what)


def _one_factor(value: sympy.Expr) -> bool:
    factors = [f for f in sympy.Mul.make_args(value) if not f.is_Rational]
    return not factors or (len(factors) == 1 and (factors[0].is_Symbol or (factors[0].is_Pow and factors[0].base.is_Symbol and factors[0].exp in (1, -1))))


def _group(
    leaves: dict[str, Work],
    depth: int | None,
    values: Mapping[sympy.Symbol, sympy.Expr],
) -> dict[str, Work]:
    groups: dict[str, list[Work]] = {}
    for path, work in leaves.items():
        key = path if depth is None else "/".join(path.split("/")[:depth])
        groups.setdefault(key, []).append(work)
    return {
        key: Work(
            multiplied_out(sympy.Add(*(w.flops for w in ws)), values),
            multiplied_out(sympy.Add(*(w.bytes for w in ws)), values),
        )
        for key, ws in groups.items()
    }


# --- FlashAttention in place of the eager attention core -----------------------------


ATTENTION_KERNEL = "attention_kernel"  # the kind of every core that extends fused_attention_kernel (formulas/components/dense.toml)


def attention_cores(model: Model) -> tuple[str, ...]:
    """The attention cores a fused kernel runs: every instance of a component of kind attention_kernel, the language
    model's and each vision tower's alike."""
    graph = model.graph().graph
    return tuple(path for path, node in graph.nodes.items() if node["component"].kind == ATTENTION_KERNEL)


def within(path: str, nodes: tuple[str, ...]) -> bool:
    """Whether a leaf's path is one of ``nodes`` or lies under one (an attention core folded under flash, or one of
    its eager parts; a recomputed unit's leaves)."""
    return any(path == node or path.startswith(node + "/") for node in nodes)


def _use_flash_attention(
    model: Model,
    phase: str,
    flops: dict,
    traffic: dict,
    keep: tuple[str, ...],
    sram_bytes: int,
    grouped: bool = True,
    values: Mapping[sympy.Symbol, sympy.Expr] | None = None,
) -> None:
    """Fold each attention core into one fused kernel: its leaves' FLOPs, FlashAttention's bytes.

    A training step's FlashAttention backward also recomputes Q·Kᵀ, whose FLOPs are added.
    """
    graph = model.graph()
    replace = _conventions(model, keep) | dict(values or {})
    weights = graph.multiplicities("bytes_moved")
    for core in attention_cores(model):
        inside = [p for p in {**flops, **traffic} if p.startswith(core + "/")]
        fused = sympy.Add(*(flops.pop(p, sympy.Integer(0)) for p in inside))
        for path in inside:
            traffic.pop(path, None)
        if phase == "train":
            fused += (
                graph.leaf_terms("forward_flops")
                .get(f"{core}/scores", sympy.Integer(0))
                .xreplace(replace)
            )
        flops[core] = multiplied_out(fused)
        node = graph.graph.nodes[core]
        traffic[core] = multiplied_out(weights[core] * _flash_bytes(model, node["args"], phase, sram_bytes, grouped, replace, node["workload"]), replace)


def _flash_bytes(
    model: Model, args: Mapping[str, object], phase: str, sram_bytes: int, grouped: bool = True,
    values: Mapping[sympy.Symbol, sympy.Expr] | None = None, workload: Mapping[sympy.Symbol, sympy.Expr] | None = None,
) -> sympy.Expr:
    """FlashAttention's HBM bytes for batch × n_heads heads of one core: seq queries against span keys (a core
    without a span, such as a vision tower's, attends to all the keys it is handed). ``workload`` is what the core
    reads for batch and seq (a vision tower's: its images and each image's patches); ``values`` are put in after it,
    so that the block counts, maxima and floors come out as numbers where they can."""
    values, workload = dict(values or {}), dict(workload or {})
    v = {name: model.vocabulary[name].xreplace(workload).xreplace(values) for name in ("act_bytes", "seq", "kv_bytes", "batch")}
    args = {name: sympy.sympify(args[name]).xreplace(values) for name in ("d_qk", "d_v", "span", "keys", "n_heads", "n_kv_heads", "cached_width") if name in args}
    args.setdefault("span", args["keys"])
    width = sympy.Max(
        args["d_qk"], args["d_v"]
    )  # the blocks must hold the wider of the two
    element_bytes = v["act_bytes"]
    sram = sympy.floor(sympy.Integer(sram_bytes) / element_bytes)
    queries, keys = v["seq"], args["span"]
    per_head = flash_attention.flash_forward(queries, keys, width, sram)
    loads = 1  # passes that load every K_j, V_j
    if phase == "train":
        per_head += flash_attention.flash_backward(queries, keys, width, sram)
        loads = 2
    # grouped-query kernels (FlashAttention-2's GQA packing, FlashDecoding) load a key/value head
    # once for all the query heads that share it
    declared = args.get("n_kv_heads", args["n_heads"])
    kv_heads = declared if grouped else args["n_heads"]
    shared = (args["n_heads"] - kv_heads) * loads * 2 * keys * width
    moved = element_bytes * (args["n_heads"] * per_head - shared)
    if phase == "decode":
        # the keys and values come from the KV cache as it stores them, at kv_bytes (an FP8 cache: 1): a fused decode
        # kernel reads each cached token's entry once for the query heads that share it (MLA's latent once for every
        # head, as FlashMLA does), or once per query head without grouped-query packing
        cached = args.get("cached_width", declared * (args["d_qk"] + args["d_v"])) * keys * kv_heads / declared
        moved += v["kv_bytes"] * cached - element_bytes * kv_heads * 2 * keys * width
    return v["batch"] * moved


# --- numbers on a device -----------------------------------------------------------------


def accelerator(name_or_device: str | Device | System) -> Device:
    """A device for the roofline: an accelerator by name or object (a system's figures are per accelerator)."""
    device = (
        load_device(name_or_device)
        if isinstance(name_or_device, str)
        else name_or_device
    )
    if isinstance(device, System):
        raise ConfigError(
            f"{device.name} is a system of {device.accelerator_count} × {device.accelerator}; the roofline is per accelerator: use {device.accelerator}"
        )
    return device


@dataclass(frozen=True)
class PhaseRoofline:
    """A phase of a model on one accelerator: the whole and each component."""

    model: str
    device: str
    dtype: str
    phase: str
    workload: dict[str, int]
    total: Roofline
    components: dict[str, Roofline]
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """The JSON object of ``symform roofline --json``."""
        return {
            **self.total.as_dict(),
            "components": {path: r.as_dict() for path, r in self.components.items()},
            "model": self.model,
            "gpu": self.device,
            "dtype": self.dtype,
            "phase": self.phase,
            "workload": self.workload,
            "peak_flops_per_s": float(self.total.peak_flops_per_s),
            "hbm_bytes_per_s": float(self.total.bytes_per_s),
            "notes": list(self.notes),
        }


def workload_values(
    phase: str, *, batch: int, seq: int | None = None, context: int | None = None
) -> dict[str, int]:
    """The symbol values of a phase: (batch, seq) for train and prefill; (batch, past = context) for decode."""
    _check_phase(phase)
    if phase == "decode":
        if context is None:
            raise EvaluationError("decode needs context= (tokens already in the cache)")
        if seq is not None:
            raise EvaluationError(
                "decode runs one new token per sequence; give context=, not seq="
            )
        return {"batch": batch, "past": context}
    if seq is None:
        raise EvaluationError(f"{phase} needs seq= (tokens per sequence)")
    if context is not None:
        raise EvaluationError(
            f"{phase} starts from an empty cache; context= is for decode"
        )
    return {"batch": batch, "seq": seq}


def roofline(
    model: Model,
    device: str | Device,
    *,
    phase: str,
    batch: int,
    seq: int | None = None,
    context: int | None = None,
    dtype: str = "bf16",
    depth: int | None = 1,
    flash: bool = False,
    sram_bytes: int = flash_attention.DEFAULT_SRAM_BYTES,
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
    finetune: FineTune | None = None,
) -> PhaseRoofline:
    """A phase of ``model`` on ``device``: FLOPs, bytes, intensity, bound and time bounds, whole and per component
    (``finetune``: a fine-tuning step's FLOPs, phase train)."""
    gpu = accelerator(device)
    workload = workload_values(phase, batch=batch, seq=seq, context=context)
    if "seq" in workload:  # a decode step's images are already in the cache
        model.check_workload(seq=workload["seq"])
    work = phase_work(model, phase, depth=depth, flash=flash, sram_bytes=sram_bytes, weight_bytes=weight_bytes, finetune=finetune)
    values = _values(model, workload)
    peak, bandwidth = gpu.flops_per_s(dtype), gpu.hbm_bytes_per_s

    def place(w: Work) -> Roofline:
        return Roofline(_value(w.flops, values), _value(w.bytes, values), peak, bandwidth)

    components = {path: place(w) for path, w in work.components.items()}
    components = {path: r for path, r in components.items() if r.flops or r.bytes}
    return PhaseRoofline(
        model.name,
        gpu.name or gpu.title,
        dtype,
        phase,
        workload,
        place(work.total),
        components,
        work.notes,
    )


def _value(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> float | int | Fraction:
    """Exact, but for the expected count of experts a decode batch touches (in floats: symform.analysis.time.routing)."""
    return routing.expected_value(expr, values) if routing.is_expected_count(expr) else exact_value(expr, values)


def _values(
    model: Model, workload: Mapping[str, int]
) -> dict[sympy.Symbol, sympy.Integer]:
    named = {**model.values, **workload}
    return {model.vocabulary[k]: sympy.Integer(v) for k, v in named.items()}
