"""Time on real devices: training step bounds with MFU and HFU, inference TTFT, TPOT and tokens/s.

Every result is built from pieces symform already has: FLOPs and HBM bytes from the
model's declarations (``roofline.phase_work``), peaks and link bandwidths from the
device files (``hardware``), collective costs from ``parallel_comm`` and
``collectives``, pipeline bubbles from ``scaling``. Each time comes as two figures at the datasheet peaks:

- lower (the floor): compute, memory traffic and communication fully overlapped, the step takes
  as long as the slowest of them (max); for serving, the memory traffic a fused engine still
  moves and the communication at the links' bandwidth alone (no per-message latency);
- upper: nothing overlapped, they add up (sum). Not a ceiling: kernels run below peak, so a
  real step (and symform.analysis.time.estimate's estimate) can take longer; the estimate's ceiling is
  every kernel at its sustained rates with nothing overlapped.

Peaks are the datasheets' dense figures with no efficiency factor, so the lower bound
is what a perfect implementation could reach. Every result carries an ``assumptions``
dict that names each choice made on the user's behalf. See docs/time.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cache, lru_cache
from fractions import Fraction

import numpy
import sympy

from ..memory import finetune
from ..parallel import parallel_comm, scaling
from . import routing
from ..memory.finetune import FineTune
from ..parallel.collectives import ALPHA, BETA, N, P, collective, cost_model, link_bandwidth, link_latency
from ...engine.store.derivation import derivation
from ...engine.budget import ARRAY_ELEMENTS, check_count, check_result
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.evaluate import compile_expression, exact_value
from ..devices.hardware import DTYPE_BYTES, Device, Hardware, System, load_device
from ..memory.memory import RECOMPUTE, Layout, check_pipeline, params_per_device, recipes, tensor_split
from ...engine.graph.model import Model
from ...engine.algebra.multiplied import multiplied_out, value_at
from .roofline import Work, phase_work

#: Accelerators sharing one scale-up fabric (NVLink domain) when an accelerator rather
#: than a system is named: the 8-GPU HGX/DGX server.
DEFAULT_NODE_SIZE = 8
#: For each collective the faster of these algorithms is taken, as NCCL picks by size.
ALGORITHMS = ("ring", "tree")
#: The tensor-parallel degree as a symbol, where work is derived once for every degree.
TENSOR = sympy.Symbol("tensor", positive=True)

Number = int | float | Fraction


# --- the hardware: one accelerator, its node and its links --------------------------------


@dataclass(frozen=True)
class Placement:
    """An accelerator, how many of them share a scale-up fabric, and where the link figures come from."""

    hardware: Hardware
    device: Device
    node_size: int
    node_source: str

    @property
    def name(self) -> str:
        return self.hardware.name or self.hardware.title

    def link(self, span: int) -> str:
        """The link a group of consecutive ranks spanning ``span`` ranks runs over.

        A group inside one node uses the scale-up fabric; one that leaves it runs the
        whole collective at the scale-out bandwidth, since a ring moves at the pace of
        its slowest hop. A device without a scale-up fabric (consumer and PCIe cards)
        talks to its node's peers over PCIe.
        """
        if span > self.node_size:
            return "scale_out"
        return "scale_up" if "scale_up" in self.device.interconnect else "pcie"


def placement(gpu: str | os.PathLike[str] | Hardware, node_size: int | None = None) -> Placement:
    """An accelerator or a system by name, path or object; a system brings its NVLink domain and NICs."""
    hardware = gpu if isinstance(gpu, (Device, System)) else load_device(gpu)
    if isinstance(hardware, System):
        domain = hardware.scale_up_domain.accelerators if hardware.scale_up_domain else hardware.accelerator_count
        size, source = (domain, f"{hardware.name}'s scale-up domain")
        device = hardware.device
    else:
        size, source = DEFAULT_NODE_SIZE, f"assumed: {DEFAULT_NODE_SIZE} accelerators per node (HGX/DGX server); name a system or give node_size"
        device = hardware
    if node_size is not None:
        size, source = _whole("node_size", node_size), "given"
    return Placement(hardware, device, size, source)


# --- symbols and numbers --------------------------------------------------------------------


def _whole(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EvaluationError(f"{name} is {value!r}; give a whole number of {minimum} or more")
    return value


@derivation  # a plan's shortlisted layouts bind the same leaves at the same micro-batches
def _bind(model: Model, expr: sympy.Expr, **workload: int) -> Number:
    """Exact value of an expression at the model's sizes and the workload: summed over its monomials where it is
    a polynomial there (value_at), else by exact_value, which also words what is wrong."""
    named = {**model.values, **workload}
    values = {s: sympy.Rational(named[s.name]) for s in expr.free_symbols if s.name in named}
    if routing.is_expected_count(expr):  # the experts a batch touches: an expectation, in floats
        return routing.expected_value(expr, values)
    try:
        found = value_at(expr, values)
    except ZeroDivisionError:  # exact_value words it
        return exact_value(expr, values)
    if not found.is_Rational:
        return exact_value(expr, values)
    value = int(found) if found.is_Integer else Fraction(int(found.p), int(found.q))
    check_result(value, "the result")
    return value


def _sizes(model: Model, expr: sympy.Expr) -> sympy.Expr:
    """The expression with the model's sizes put in, the workload symbols left free."""
    values = model.values
    return multiplied_out(expr, {s: sympy.Integer(values[s.name]) for s in expr.free_symbols if s.name in values})


def _value(model: Model, name: str, default: int) -> int:
    return model.values.get(name, default)


def at_dtype(model: Model, dtype: str) -> Model:
    """The model with its weights read at ``dtype``'s width where that is narrower than its own (fp8: 1 byte)."""
    width = DTYPE_BYTES.get(dtype)
    current = model.conventions.get(model.vocabulary["weight_bytes"]) if "weight_bytes" in model.vocabulary.names("convention", "dtype") else None
    if width is None or current is None or Fraction(int(current.p), int(current.q)) <= width:
        return model
    return model.with_conventions(weight_bytes=width)


def dtype_assumption(dtype: str) -> str:
    if dtype in DTYPE_BYTES:
        return f"{dtype} drives both the peak rate and the weights' bytes ({DTYPE_BYTES[dtype]} per weight, where narrower than the model's); activations and the KV cache keep their widths"
    return f"{dtype} sets the peak rate; weights at the model's weight_bytes"


def _act_bytes(model: Model) -> int:
    return int(model.conventions[model.vocabulary["act_bytes"]])


# --- recomputation ---------------------------------------------------------------------------


def recomputed_units(model: Model, recompute: str) -> list[str]:
    """The components that ``recompute`` runs forward a second time in backward, by path.

    They are the ones the declarations mark as recomputed under that mode (the
    attention cores for selective, the decoder layers for full): the same choice
    ``symform.analysis.memory.memory`` makes for the activations they no longer keep.
    """
    if recompute not in RECOMPUTE:
        raise EvaluationError(f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    graph = model.graph().graph
    marked = [node for node, data in graph.nodes.items() if recompute in data["saved_when"]]
    # only the outermost: a marked part inside a marked part is recomputed once, with it
    return [n for n in marked if not any(n.startswith(f"{m}/") for m in marked)]


def recompute_work(model: Model, recompute: str, *, flash: bool = False, values: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> tuple[sympy.Expr, sympy.Expr]:
    """Extra forward FLOPs and HBM bytes of one step's recomputation, over batch and seq.

    With FlashAttention, selective recomputation adds nothing: FlashAttention's backward
    already recomputes the attention scores (counted in its own FLOPs) and keeps no
    score matrix to drop. ``values``: put into every leaf first (roofline.phase_work's).
    """
    units = recomputed_units(model, recompute)
    if flash and recompute == "selective":
        return sympy.Integer(0), sympy.Integer(0)
    # once per model and options: a plan asks again for every layout it reworks
    return _recompute_work(model, units, flash, dict(values or {}))


def rank_sizes(model: Model, seq: int | None = None) -> dict[sympy.Symbol, sympy.Expr]:
    """The model's sizes as one rank of TENSOR tensor-parallel ranks holds them (memory.tensor_split's shares),
    and ``seq``'s value if given: put into each leaf before it is multiplied out (roofline.phase_work's
    ``values``), they leave polynomials in the workload and the degree alone."""
    vocabulary, split = model.vocabulary, tensor_split(model, TENSOR)
    sizes = {vocabulary[name]: sympy.Integer(value) for name, value in model.values.items() if name in vocabulary}
    given = {} if seq is None else {vocabulary["seq"]: sympy.Integer(seq)}
    return {s: split[s].xreplace(sizes) if s in split else value for s, value in sizes.items()} | given


def rank_work(model: Model, recompute: str, *, flash: bool, finetune: FineTune | None = None) -> tuple[Work, tuple[sympy.Expr, sympy.Expr]]:
    """A training step's FLOPs and bytes and its recomputation's (recompute_work), over batch, seq and
    TENSOR, the model's sizes in: what training_time and the planner's screen evaluate."""
    sized = rank_sizes(model)
    train = phase_work(model, "train", depth=None, flash=flash, finetune=finetune, values=sized).total
    return train, recompute_work(model, recompute, flash=flash, values=sized)


@derivation
def _recompute_work(model: Model, units: list[str], flash: bool, values: Mapping[sympy.Symbol, sympy.Expr]) -> tuple[sympy.Expr, sympy.Expr]:
    leaves = phase_work(model, "prefill", depth=None, flash=flash, values=values).components
    inside = [w for path, w in leaves.items() if any(path == u or path.startswith(f"{u}/") for u in units)]
    return multiplied_out(sympy.Add(*(w.flops for w in inside))), multiplied_out(sympy.Add(*(w.bytes for w in inside)))


# --- communication ---------------------------------------------------------------------------


def transfer_seconds(transfers: Iterable[parallel_comm.Transfer], place: Placement, link: str, *, alpha: float | None = None, bandwidth: float | None = None, algorithms: tuple[str, ...] = ALGORITHMS) -> float:
    """Seconds of the transfers one after another over ``link``, each by the fastest of ``algorithms`` (ring and tree
    unless given; the link's default latency and datasheet bandwidth unless given)."""
    alpha = link_latency(link) if alpha is None else alpha
    beta = 1 / (_bandwidth(place, link) if bandwidth is None else bandwidth)
    total = 0.0
    for transfer in transfers:
        total += transfer.count * _fastest_seconds(transfer.collective, transfer.ranks, transfer.nbytes, alpha, beta, tuple(algorithms))
    return total


@lru_cache(maxsize=4096)
def _fastest_seconds(name: str, ranks: sympy.Expr, nbytes: sympy.Expr, alpha: float, beta: float, algorithms: tuple[str, ...]) -> float:
    """One run's seconds by the fastest of ``algorithms``: the planner's thousands of groups send the same few
    buffers over the same few links, each worked out once."""
    names = [a for a in algorithms if a in collective(name).algorithms] or [collective(name).default]
    p, n = float(ranks), float(nbytes)
    return min(_seconds_function(name, a)(p, n, alpha, beta) for a in names)


@cache
def _seconds_function(name: str, algorithm: str):
    """A collective's alpha–beta formula compiled to plain floats: the planner evaluates it thousands of times."""
    model = cost_model(name, algorithm)
    return sympy.lambdify((P, N, ALPHA, BETA), model.time, modules=[{"CeilLog2": _ceil_log2}, "math"])


def _ceil_log2(ranks: float) -> int:
    return (int(ranks) - 1).bit_length()


def _bandwidth(place: Placement, link: str) -> float:
    return link_bandwidth(place.hardware, link)


@dataclass(frozen=True)
class Comm:
    """One kind of parallelism's communication on one device for one step."""

    seconds: float
    bytes_per_rank: float
    link: str
    ranks: int


def _comm(transfers: list[parallel_comm.Transfer], times: float, place: Placement, span: int, ranks: int) -> Comm:
    link = place.link(span)
    sent = float(parallel_comm.bytes_per_rank(transfers)) if transfers else 0.0
    return Comm(times * transfer_seconds(transfers, place, link), times * sent, link, ranks)


# --- results ----------------------------------------------------------------------------------


def _json(value: object) -> object:
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    if isinstance(value, sympy.Basic):
        return str(value)
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class TrainingTime:
    """One training step on ``devices`` accelerators: per-device work, the time bounds, MFU, HFU and tokens/s.

    Per-device figures are for one device over the whole step (all its micro-batches).
    ``*_high`` efficiencies and throughputs use the lower time bound, ``*_low`` the upper.
    """

    model: str
    gpu: str
    dtype: str
    devices: int
    layout: dict[str, object]
    global_batch: int
    micro_batch: int
    seq: int
    microbatches: int
    recompute: str
    model_flops: Number  # forward + backward of the whole step (what MFU counts)
    hardware_flops: Number  # model FLOPs + recomputation (+ FlashAttention's recomputed scores)
    flops_per_device: Number
    bytes_per_device: Number
    peak_flops_per_s: float
    hbm_bytes_per_s: float
    t_math: float
    t_mem: float
    comm: dict[str, Comm]
    bubble_ratio: float
    time_lower: float
    time_upper: float
    expressions: dict[str, sympy.Expr] = field(default_factory=dict)
    assumptions: dict[str, object] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq

    @property
    def t_comm(self) -> float:
        return sum(c.seconds for c in self.comm.values())

    def _utilisation(self, flops: Number, seconds: float) -> float:
        return float(flops) / (seconds * self.devices * self.peak_flops_per_s)

    @property
    def mfu_high(self) -> float:
        return self._utilisation(self.model_flops, self.time_lower)

    @property
    def mfu_low(self) -> float:
        return self._utilisation(self.model_flops, self.time_upper)

    @property
    def hfu_high(self) -> float:
        return self._utilisation(self.hardware_flops, self.time_lower)

    @property
    def hfu_low(self) -> float:
        return self._utilisation(self.hardware_flops, self.time_upper)

    @property
    def tokens_per_s_high(self) -> float:
        return self.tokens / self.time_lower

    @property
    def tokens_per_s_low(self) -> float:
        return self.tokens / self.time_upper

    def as_dict(self) -> dict[str, object]:
        """Plain JSON: numbers, expressions as sympy strings, assumptions."""
        return {
            "model": self.model,
            "gpu": self.gpu,
            "dtype": self.dtype,
            "devices": self.devices,
            "layout": self.layout,
            "global_batch": self.global_batch,
            "micro_batch": self.micro_batch,
            "seq": self.seq,
            "microbatches": self.microbatches,
            "recompute": self.recompute,
            "model_flops": _json(self.model_flops),
            "hardware_flops": _json(self.hardware_flops),
            "flops_per_device": _json(self.flops_per_device),
            "bytes_per_device": _json(self.bytes_per_device),
            "t_math_s": self.t_math,
            "t_mem_s": self.t_mem,
            "t_comm_s": self.t_comm,
            "comm": {k: asdict(c) for k, c in self.comm.items()},
            "bubble_ratio": self.bubble_ratio,
            "time_lower_s": self.time_lower,
            "time_upper_s": self.time_upper,
            "mfu": {"high": self.mfu_high, "low": self.mfu_low},
            "hfu": {"high": self.hfu_high, "low": self.hfu_low},
            "tokens_per_s": {"high": self.tokens_per_s_high, "low": self.tokens_per_s_low},
            "expressions": {k: str(v) for k, v in self.expressions.items()},
            "assumptions": _json(self.assumptions),
        }


# --- training ----------------------------------------------------------------------------------


def _check_layout(layout: Layout, global_batch: int, micro_batch: int, seq: int) -> int:
    """Micro-batches per step and pipeline: global batch / (micro-batch × data-parallel degree)."""
    for name, value in (("global_batch", global_batch), ("micro_batch", micro_batch), ("seq", seq)):
        _whole(name, value)
    if seq % layout.context:
        raise ConfigError(f"sequence {seq} does not split into {layout.context} context-parallel chunks; give a multiple of {layout.context}")
    if layout.data % layout.expert:
        raise ConfigError(f"expert degree {layout.expert} must divide the data-parallel degree {layout.data}: experts are spread over data-parallel ranks")
    per_step = micro_batch * layout.data
    if global_batch % per_step:
        raise EvaluationError(f"global batch {global_batch} is not a whole number of micro-batches of {micro_batch} on {layout.data} data-parallel ranks; give a multiple of {per_step}")
    microbatches = global_batch // per_step
    if layout.microbatches is not None and layout.microbatches != microbatches:
        raise EvaluationError(f"layout.microbatches is {layout.microbatches} but global batch / (micro-batch × data) is {microbatches}; drop one of them")
    return microbatches


def training_time(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    global_batch: int,
    micro_batch: int,
    seq: int,
    layout: Layout | None = None,
    recompute: str = "none",
    dtype: str = "bf16",
    flash: bool = False,
    precision: str = "mixed",
    node_size: int | None = None,
    finetune: FineTune | None = None,
) -> TrainingTime:
    """Bounds on one training step of ``global_batch`` sequences of ``seq`` tokens under ``layout``.

    ``finetune``: adapters or frozen weights (symform.analysis.memory.finetune): the step's FLOPs are the fine-tuning
    step's (no weight gradients for frozen weights, the adapters' own), and the data-parallel ranks exchange
    the trainable weights' gradients only; the bytes moved stay full training's.

    Devices = data × tensor × pipeline × context (context ranks split every sequence,
    with ring attention's key/value passes); experts are spread over the data-parallel
    ranks (expert divides data). Each data-parallel rank runs global_batch /
    (micro_batch × data) micro-batches per step.
    """
    layout = layout or Layout()
    microbatches = _check_layout(layout, global_batch, micro_batch, seq)
    model.check_workload(seq=seq)
    place = placement(gpu, node_size)
    model = at_dtype(model, dtype)
    peak, bandwidth = place.device.flops_per_s(dtype), place.device.hbm_bytes_per_s
    tensor_split(model, layout.tensor)  # the degree divides every size it splits
    check_pipeline(model, layout.pipeline)
    _check_chunks(model, layout)
    trainable = _finetune_trainable(model, finetune, layout)
    train, (extra_flops, extra_bytes) = rank_work(model, recompute, flash=flash, finetune=finetune)
    per_device = _per_device(model, {TENSOR: layout.tensor}, layout.pipeline, layout.context)
    m = scaling.MICROBATCHES
    flops_expr = m * per_device(train.flops + extra_flops)
    bytes_expr = m * per_device(train.bytes + extra_bytes)
    workload = {"batch": micro_batch, "seq": seq}
    workload[m.name] = microbatches  # bound with the sizes: no sum rebuilt with it in first
    flops = _bind(model, flops_expr, **workload)
    moved = _bind(model, bytes_expr, **workload)
    exchanged = None if trainable is None else _bind(model, trainable)
    comm = _training_comm(model, place, layout, microbatches, micro_batch, seq // layout.context, recompute, precision, exchanged)
    ratio = float(scaling.bubble_ratio(layout.schedule, layout.pipeline, microbatches, layout.chunks)) if layout.pipeline > 1 else 0.0
    t_math, t_mem = float(flops) / peak, float(moved) / bandwidth
    lower, upper = _step_bounds(t_math, t_mem, comm, ratio)
    model_flops = _model_flops(model, finetune, global_batch, seq)
    whole = {TENSOR: 1}  # the step on one device, unsplit
    hardware_flops = _bind(model, train.flops + extra_flops, batch=global_batch, seq=seq, **{TENSOR.name: 1})  # whole
    return TrainingTime(
        model=model.name,
        gpu=place.name,
        dtype=dtype,
        devices=layout.data * layout.tensor * layout.pipeline * layout.context,
        layout=asdict(layout) | {"microbatches": microbatches},
        global_batch=global_batch,
        micro_batch=micro_batch,
        seq=seq,
        microbatches=microbatches,
        recompute=recompute,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        flops_per_device=flops,
        bytes_per_device=moved,
        peak_flops_per_s=float(peak),
        hbm_bytes_per_s=float(bandwidth),
        t_math=t_math,
        t_mem=t_mem,
        comm=comm,
        bubble_ratio=ratio,
        time_lower=lower,
        time_upper=upper,
        expressions={
            "flops_per_device": _sizes(model, flops_expr),
            "bytes_per_device": _sizes(model, bytes_expr),
            "recompute_flops": _sizes(model, extra_flops.xreplace(whole)),
            "bubble_ratio": sympy.sympify(scaling.bubble_ratio(layout.schedule)) if layout.pipeline > 1 else sympy.Integer(0),
        },
        assumptions=_training_assumptions(place, dtype, layout, recompute, flash, precision, comm) | (_finetune_assumptions(finetune) if finetune else {}),
    )


def _check_chunks(model: Model, layout: Layout) -> None:
    """A virtual pipeline (interleaved 1F1B): chunks > 1 only with that schedule and a pipeline, each chunk whole layers."""
    if layout.chunks == 1:
        return
    if layout.schedule != "interleaved" or layout.pipeline == 1:
        raise ConfigError(f"{layout.chunks} model chunks per device is the interleaved schedule's virtual pipeline; give the interleaved schedule and a pipeline degree above 1, or drop the chunks")
    layers = model.values.get("n_layers", 1)
    if layers % (layout.pipeline * layout.chunks):
        raise ConfigError(f"{layers} layers do not split into {layout.pipeline} stages × {layout.chunks} chunks of whole layers; give chunks with pipeline × chunks dividing {layers}")


def _model_flops(model: Model, setup: FineTune | None, global_batch: int, seq: int) -> Number:
    """Forward + backward of the whole step, as MFU counts it: full training's, or the fine-tuning step's."""
    if setup is None:  # the declared forward and backward FLOPs (no FlashAttention), summed leaf by leaf with the sizes in
        train = phase_work(model, "train", depth=None, values=rank_sizes(model)).total
        return _bind(model, train.flops, batch=global_batch, seq=seq, **{TENSOR.name: 1})  # the step on one device, unsplit
    return finetune.finetune_counts(model, setup, batch=global_batch, seq=seq).step_flops


def _finetune_trainable(model: Model, setup: FineTune | None, layout: Layout) -> sympy.Expr | None:
    """With fine-tuning, the trainable weights on one rank (their gradients are what the data-parallel ranks exchange)."""
    if setup is None:
        return None
    if layout.zero >= 3:
        raise ConfigError("fine-tuning under ZeRO-3 times gathers of frozen and trained weights that symform does not model apart; use --zero 2 or lower (symform memory counts ZeRO-3's memory)")
    finetune.check_layout(setup, layout)
    return finetune.trained_per_device(model, setup, layout)


def _finetune_assumptions(setup: FineTune) -> dict[str, object]:
    return {
        "fine_tuning": setup.describe(),
        "fine_tuning_flops": "model and hardware FLOPs are the fine-tuning step's: frozen weights take no weight gradient, nothing before the first trained weight runs backward, the adapters' own forward and backward (symform flops --lora-...)",
        "fine_tuning_bytes": "HBM bytes as full training moves them (frozen weights' gradients not subtracted, adapters' not added)",
        "fine_tuning_gradients": "the data-parallel ranks exchange the trainable weights' gradients only",
        "adapters_under_tensor_parallelism": finetune.TENSOR_PARALLEL_ADAPTERS
        + "; the all-reduce of a row-parallel adapter's rank-r intermediate (batch × seq × r elements) is not timed",
    } | ({"quantised_base": f"the {setup.base_format} base is timed as matrix products at --dtype, its dequantisation not counted"} if setup.base_format else {})


def _per_device(model: Model, split: Mapping[sympy.Symbol, sympy.Expr], pipeline: int, context: int = 1):
    """One micro-batch's share of a device: the tensor-parallel split, 1/pipeline of the model (balanced stages),
    and 1/context of its tokens (context parallelism: the work that grows with the batch divides, the weights' reads do not)."""
    batch = model.vocabulary["batch"]

    def share(expr: sympy.Expr) -> sympy.Expr:
        expr = multiplied_out(sympy.sympify(expr) / pipeline, {k: sympy.sympify(v) for k, v in split.items()})
        return context_share(expr, batch, context)

    return share


def context_share(expr: sympy.Expr, batch: sympy.Symbol, context: int) -> sympy.Expr:
    """A context rank's share: the terms that grow with the batch (per token) over ``context``; the rest whole."""
    if context == 1:
        return expr
    return sympy.Add(*(t / context if batch in t.free_symbols else t for t in sympy.Add.make_args(sympy.expand(expr))))


def _step_bounds(t_math: float, t_mem: float, comm: Mapping[str, Comm], ratio: float) -> tuple[float, float]:
    """Lower and upper bounds of the step, bubble included.

    The pipeline's bubble stretches the micro-batch work (compute, memory traffic, and
    the tensor, expert and pipeline communication inside it) by 1 + bubble ratio. The
    data-parallel gradient exchange runs once per step: at best hidden under that
    work, at worst after it.
    """
    inside = sum(c.seconds for k, c in comm.items() if k != "data")
    step = comm["data"].seconds if "data" in comm else 0.0
    lower, upper = step_bounds(t_math, t_mem, inside, step, ratio)
    return float(lower), float(upper)


def step_bounds(t_math, t_mem, inside, step, ratio):
    """The step's lower (full overlap) and upper (none) bounds from its parts, for numbers or numpy arrays:
    ``inside`` the communication within the micro-batch work, ``step`` the once-per-step exchange."""
    lower = numpy.maximum(numpy.maximum(numpy.maximum(t_math, t_mem), inside) * (1 + ratio), step)
    upper = (t_math + t_mem + inside) * (1 + ratio) + step
    return lower, upper


def _layers(model: Model) -> tuple[int, int]:
    """Transformer layers, and of those the mixture-of-experts ones (0 without experts)."""
    layers = _value(model, "n_layers", 1)
    if "n_experts" not in model.values:
        return layers, 0
    return layers, layers - _value(model, "n_dense_layers", 0)


def _training_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str, precision: str, trainable: Number | None = None) -> dict[str, Comm]:
    """``trainable``: with frozen weights, the parameters per device whose gradients are exchanged."""
    comm: dict[str, Comm] = {}
    if layout.tensor > 1:
        comm["tensor"] = tensor_comm(model, place, layout, microbatches, micro_batch, seq, recompute)
    expert = expert_comm(model, place, layout, microbatches, micro_batch, seq, recompute)
    if expert is not None:
        comm["expert"] = expert
    if layout.context > 1:
        comm["context"] = context_comm(model, place, layout, microbatches, micro_batch, seq * layout.context, recompute)
    if layout.pipeline > 1:
        comm["pipeline"] = pipeline_comm(model, place, layout, microbatches, micro_batch, seq)
    if layout.data * layout.context > 1:
        # gradients reduce over the data and context ranks together (Megatron-LM's data-parallel group with context parallelism)
        comm["data"] = data_comm(model, place, replace(layout, data=layout.data * layout.context, context=1), precision, params=None if trainable is None else (trainable, trainable))
    return comm


def context_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str) -> Comm:
    """Ring attention's key/value passes in every layer (context ranks sit next to the tensor ranks)."""
    v = model.values
    kv_width = v.get("n_kv_heads", v.get("n_heads", 1)) * v.get("d_head", v.get("d_model", 1) // max(v.get("n_heads", 1), 1))
    layer = parallel_comm.context_parallel_layer(batch=micro_batch, seq=seq, kv_width=kv_width, bytes_per_element=_act_bytes(model), context=layout.context)
    again = 1 if recompute == "full" else 0
    layer = layer + again * [x for x in layer if x.phase == "forward"]
    layers, _ = _layers(model)
    return _comm(layer, microbatches * layers / layout.pipeline, place, layout.tensor * layout.context, layout.context)


def _activation_sizes(model: Model, micro_batch: int, seq: int) -> dict[str, int]:
    return {"batch": micro_batch, "seq": seq, "d_model": model.values.get("d_model", 1), "bytes_per_element": _act_bytes(model)}


def tensor_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str) -> Comm:
    # full recomputation runs each layer's forward again, with its forward communication
    again = 1 if recompute == "full" else 0
    layers, _ = _layers(model)
    return _tensor_comm(model, place, layout, microbatches, _activation_sizes(model, micro_batch, seq), layers, again)


def expert_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str) -> Comm | None:
    """All-to-all of the routed tokens in every mixture-of-experts layer (None without expert parallelism)."""
    _, moe_layers = _layers(model)
    if layout.expert == 1 or not moe_layers:
        return None
    again = 1 if recompute == "full" else 0
    sizes = _activation_sizes(model, micro_batch, seq)
    layer = list(_expert_layer(micro_batch * seq, model.values["top_k"], sizes["d_model"], sizes["bytes_per_element"], layout.expert))
    per_layer = layer + again * [x for x in layer if x.phase == "forward"]
    return _comm(per_layer, microbatches * moe_layers / layout.pipeline, place, layout.tensor * layout.expert, layout.expert)


@lru_cache(maxsize=1024)
def _expert_layer(tokens: int, top_k: int, d_model: int, bytes_per_element: Number, expert: int) -> tuple[parallel_comm.Transfer, ...]:
    """One mixture-of-experts layer's all-to-alls, once per size: the planner's groups repeat a few."""
    return tuple(parallel_comm.expert_parallel_layer(tokens=tokens, top_k=top_k, d_model=d_model, bytes_per_element=bytes_per_element, expert=expert))


def pipeline_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int) -> Comm:
    boundary = parallel_comm.pipeline_boundary(**_activation_sizes(model, micro_batch, seq))
    return _comm(boundary, microbatches * layout.chunks, place, layout.tensor * layout.context * layout.data * layout.pipeline, layout.pipeline)


def _tensor_comm(model: Model, place: Placement, layout: Layout, microbatches: int, sizes: dict, layers: int, again: int) -> Comm:
    """Megatron's per-layer all-reduces (or sequence parallelism's gathers and scatters), the vocabulary-parallel embedding and head."""
    t, p = layout.tensor, layout.pipeline
    layer, ends = (list(x) for x in _tensor_transfers(layout.sequence, tuple(sizes.items()), model.values.get("vocab", 1), t))
    layer = layer + again * [x for x in layer if x.phase == "forward"]
    link = place.link(t)
    seconds = transfer_seconds(layer, place, link) * layers + transfer_seconds(ends, place, link)
    sent = float(parallel_comm.bytes_per_rank(layer)) * layers + float(parallel_comm.bytes_per_rank(ends))
    # stages balanced: each holds 1/p of the layers and, spread the same way, of the ends
    return Comm(seconds * microbatches / p, sent * microbatches / p, link, t)


@lru_cache(maxsize=1024)
def _tensor_transfers(sequence: bool, sizes: tuple[tuple[str, Number], ...], vocab: int, tensor: int) -> tuple[tuple[parallel_comm.Transfer, ...], tuple[parallel_comm.Transfer, ...]]:
    """One layer's tensor-parallel collectives, and the vocabulary-parallel embedding's and head's, once per size."""
    given = dict(sizes)
    kind = parallel_comm.sequence_parallel_layer if sequence else parallel_comm.tensor_parallel_layer
    layer = kind(**given, tensor=tensor)
    ends = parallel_comm.vocab_parallel_embedding(**given, tensor=tensor) + parallel_comm.vocab_parallel_output_head(**given, vocab=vocab, tensor=tensor)
    return tuple(layer), tuple(ends)


def data_comm(model: Model, place: Placement, layout: Layout, precision: str, *, params: tuple[int, int] | None = None) -> Comm:
    """The gradient exchange of one step: dense gradients over all data-parallel ranks, expert gradients over data/expert ranks.

    ZeRO-3 adds the parameter gathers; ZeRO-1/2 and the distributed optimizer send the
    same bytes as an all-reduce (a reduce-scatter and an all-gather).
    """
    t, d, p, e = layout.tensor, layout.data, layout.pipeline, layout.expert
    grads = recipes().precision[precision].grads if precision in recipes().precision else None
    if grads is None:
        raise EvaluationError(f"unknown precision {precision!r}; choose one of {', '.join(recipes().precision)}")
    # parameters on this rank, and what it would hold without expert parallelism (given when already known)
    local, replicated = params or (_bind(model, params_per_device(model, Layout(tensor=t, pipeline=p, expert=e))), _bind(model, params_per_device(model, Layout(tensor=t, pipeline=p))))
    expert = Fraction(replicated - local, e - 1) if e > 1 else 0  # routed-expert parameters on this rank
    groups = [(local - expert, d)] + ([(expert, d // e)] if expert and d // e > 1 else [])
    link = place.link(t * d)
    seconds = sent = 0.0
    for params, ranks in groups:
        if ranks > 1 and params:
            transfers = _gradient_transfers(layout.zero >= 3, params, grads, ranks)
            seconds += transfer_seconds(transfers, place, link)
            sent += float(parallel_comm.bytes_per_rank(transfers))
    return Comm(seconds, sent, link, d)


@lru_cache(maxsize=4096)
def _gradient_transfers(zero3: bool, params: Number, grads: Number, data: int) -> tuple[parallel_comm.Transfer, ...]:
    """One step's gradient exchange (ZeRO-3's gathers too) of ``params`` over ``data`` ranks, once per size: a plan's
    groups that differ in degrees the exchange does not read send the same."""
    step = parallel_comm.zero3_step if zero3 else parallel_comm.data_parallel_step
    return tuple(step(params=params, bytes_per_element=grads, data=data))


def _training_assumptions(place: Placement, dtype: str, layout: Layout, recompute: str, flash: bool, precision: str, comm: Mapping[str, Comm]) -> dict[str, object]:
    return {
        "peak": f"{place.device.name} dense {dtype} peak, no efficiency factor",
        "dtype": dtype_assumption(dtype),
        "hbm": f"{place.device.name} HBM bandwidth, no efficiency factor",
        "overlap": "floor (lower bound): compute, memory traffic and communication fully overlapped at peak (max); peak, no overlap: their sum (not a ceiling: kernels below peak take longer; the estimate's ceiling is)",
        "bytes": "HBM bytes as an unfused eager framework moves them; backward moves twice the forward's bytes; optimizer traffic not counted"
        + ("; FlashAttention in the attention cores" if flash else ""),
        "balance": "work, bytes and communication divide evenly: tensor-parallel sizes split exactly, pipeline stages hold equal shares (embedding and head included), routing is uniform over experts",
        "expert_parallel": "experts spread over the data-parallel ranks (expert divides data); FLOPs and bytes per device unchanged under uniform routing; all-to-all of tokens × top_k per MoE layer",
        "recompute": f"{recompute}: one extra forward of the recomputed parts ({'attention cores' if recompute == 'selective' else 'whole decoder layers' if recompute == 'full' else 'none'})"
        + ("; with FlashAttention selective adds nothing beyond FlashAttention's own recomputation" if flash and recompute == "selective" else ""),
        "pipeline": f"{layout.schedule} schedule, bubble = bubble_ratio × the micro-batch work" if layout.pipeline > 1 else "no pipeline",
        "gradients": f"{precision} precision: {recipes().precision[precision].grads} bytes per gradient, exchanged once per step",
        "rank_order": "tensor ranks innermost, then context, expert and data, then pipeline (Megatron-LM's order); a group uses scale_up while its span of consecutive ranks fits in one node, scale_out otherwise",
        "node_size": place.node_size,
        "node_size_source": place.node_source,
        "links": {k: {"link": c.link, "bytes_per_s": _bandwidth(place, c.link), "latency_s": link_latency(c.link)} for k, c in comm.items()},
        "collective_algorithm": "the faster of ring and tree for each collective where both are modelled (as NCCL picks by size)",
        "latency": "symform.analysis.parallel.collectives.DEFAULT_LATENCY_S per message, by link",
        "mfu": "model FLOPs = forward + backward of the step (no recomputation); HFU adds the recomputed FLOPs",
    }


# --- inference ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseTime:
    """One inference phase on one tensor-parallel group: per-device work and time bounds."""

    phase: str
    workload: dict[str, int]
    flops: Number  # per device
    bytes: Number  # per device
    t_math: float
    t_mem: float
    t_comm: float
    link: str | None
    # the communication at the links' full bandwidth with no per-message latency: what the floor counts, since a
    # serving engine's one-shot all-reduce at its own measured latency beats the ring and tree at the default one
    t_comm_floor: float | None = None
    # the memory traffic a fused engine still moves (element-wise leaves kept out of HBM): the floor's
    t_mem_floor: float | None = None

    @property
    def comm_floor(self) -> float:
        return self.t_comm if self.t_comm_floor is None else self.t_comm_floor

    @property
    def mem_floor(self) -> float:
        return self.t_mem if self.t_mem_floor is None else self.t_mem_floor

    @property
    def time_lower(self) -> float:
        return max(self.t_math, self.mem_floor, self.comm_floor)

    @property
    def time_upper(self) -> float:
        return self.t_math + self.t_mem + self.t_comm

    @property
    def bound(self) -> str:
        """What sets the lower bound: compute, memory or communication."""
        return max(("compute", self.t_math), ("memory", self.mem_floor), ("communication", self.comm_floor), key=lambda kv: kv[1])[0]

    def as_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "workload": self.workload,
            "flops": _json(self.flops),
            "bytes": _json(self.bytes),
            "t_math_s": self.t_math,
            "t_mem_s": self.t_mem,
            "t_comm_s": self.t_comm,
            "t_comm_floor_s": self.comm_floor,
            "t_mem_floor_s": self.mem_floor,
            "link": self.link,
            "time_lower_s": self.time_lower,
            "time_upper_s": self.time_upper,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class InferenceTime:
    """Serving ``batch`` sequences: a prompt of ``prompt`` tokens, then ``output`` tokens generated.

    The first output token comes out of the prefill (TTFT); each later one is one
    decode step after ``prompt + i`` cached tokens. TPOT is the mean over those steps.
    """

    model: str
    gpu: str
    dtype: str
    tensor: int
    batch: int
    prompt: int
    output: int
    prefill: PhaseTime
    first_decode: PhaseTime
    last_decode: PhaseTime
    decode_lower: float  # all output - 1 decode steps together
    decode_upper: float
    expressions: dict[str, sympy.Expr] = field(default_factory=dict)
    assumptions: dict[str, object] = field(default_factory=dict)

    @property
    def ttft_lower(self) -> float:
        return self.prefill.time_lower

    @property
    def ttft_upper(self) -> float:
        return self.prefill.time_upper

    @property
    def tpot_lower(self) -> float:
        return self.decode_lower / (self.output - 1) if self.output > 1 else self.first_decode.time_lower

    @property
    def tpot_upper(self) -> float:
        return self.decode_upper / (self.output - 1) if self.output > 1 else self.first_decode.time_upper

    @property
    def total_lower(self) -> float:
        return self.ttft_lower + self.decode_lower

    @property
    def total_upper(self) -> float:
        return self.ttft_upper + self.decode_upper

    @property
    def tokens_per_s_high(self) -> float:
        """Output tokens of the whole batch per second of the request, prefill included (lower time bound)."""
        return self.batch * self.output / self.total_lower

    @property
    def tokens_per_s_low(self) -> float:
        return self.batch * self.output / self.total_upper

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "dtype": self.dtype,
            "tensor": self.tensor,
            "devices": self.tensor,
            "batch": self.batch,
            "prompt": self.prompt,
            "output": self.output,
            "ttft_s": {"lower": self.ttft_lower, "upper": self.ttft_upper},
            "tpot_s": {"lower": self.tpot_lower, "upper": self.tpot_upper},
            "total_s": {"lower": self.total_lower, "upper": self.total_upper},
            "tokens_per_s": {"high": self.tokens_per_s_high, "low": self.tokens_per_s_low},
            "prefill": self.prefill.as_dict(),
            "first_decode": self.first_decode.as_dict(),
            "last_decode": self.last_decode.as_dict(),
            "expressions": {k: str(v) for k, v in self.expressions.items()},
            "assumptions": _json(self.assumptions),
        }


def _inference_work(model: Model, phase: str, tensor: int, flash: bool, weight_bytes: Mapping[str, sympy.Expr] | None = None, expert_skew: float = 0, grouped: bool = True) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """Per-device FLOPs and bytes of a phase, over batch and seq (prefill) or batch and past (decode), and of
    those bytes the ones a fused serving engine still moves (the floor's); ``weight_bytes``: bytes per
    parameter by leaf, as a checkpoint stores them."""
    split = tensor_split(model, tensor)
    work = phase_work(model, phase, depth=None, flash=flash, weight_bytes=weight_bytes, expert_skew=expert_skew, grouped=grouped)
    fusable = fused_leaves(flash)
    kept = sympy.Add(*(w.bytes for path, w in work.components.items() if path.rsplit("/", 1)[-1] not in fusable))
    total = work.total
    return sympy.expand(total.flops.xreplace(split)), sympy.expand(total.bytes.xreplace(split)), sympy.expand(kept.xreplace(split))


def fused_leaves(flash: bool) -> frozenset[str]:
    """The element-wise leaves a fused serving engine keeps out of HBM (hardware/efficiency/rules.toml,
    fusion.fused): a floor cannot charge their traffic, since the estimate does not. Eager attention keeps
    its score matrices' softmax and mask kernels."""
    from .estimate import SCORE_LEAVES, rules  # the estimate builds on this module

    fused = rules().fusion["fused"][1]
    return fused if flash else fused - SCORE_LEAVES


def _inference_comm(model: Model, place: Placement, tensor: int, batch: int, seq: int, *, alpha: float | None = None, bandwidth: float | None = None, algorithms: tuple[str, ...] = ALGORITHMS) -> tuple[float, str | None]:
    """Forward tensor-parallel communication: two all-reduces per layer, the embedding's, and a gather of the last position's logits."""
    if tensor == 1:
        return 0.0, None
    layers, _ = _layers(model)
    sizes = {"batch": batch, "d_model": model.values.get("d_model", 1), "bytes_per_element": _act_bytes(model), "tensor": tensor}
    layer = parallel_comm.tensor_parallel_layer(seq=seq, **sizes)
    ends = parallel_comm.vocab_parallel_embedding(seq=seq, **sizes) + parallel_comm.vocab_parallel_output_head(seq=1, vocab=model.values.get("vocab", 1), fused_cross_entropy=False, **sizes)
    forward = [x for x in [*ends] if x.phase == "forward"]
    link = place.link(tensor)
    rates = {"alpha": alpha, "bandwidth": bandwidth, "algorithms": algorithms}
    return transfer_seconds([x for x in layer if x.phase == "forward"], place, link, **rates) * layers + transfer_seconds(forward, place, link, **rates), link


def _phase_time(model: Model, place: Placement, phase: str, work: tuple[sympy.Expr, sympy.Expr, sympy.Expr], tensor: int, dtype: str, **workload: int) -> PhaseTime:
    flops, moved, kept = (_bind(model, w, **workload) for w in work)
    seq = workload.get("seq", 1)
    t_comm, link = _inference_comm(model, place, tensor, workload["batch"], seq)
    floor, _ = _inference_comm(model, place, tensor, workload["batch"], seq, alpha=0.0)
    hbm = place.device.hbm_bytes_per_s
    return PhaseTime(phase, dict(workload), flops, moved, float(flops) / place.device.flops_per_s(dtype), float(moved) / hbm, t_comm, link, floor, float(kept) / hbm)


def prefill_time(model: Model, gpu: str | os.PathLike[str] | Hardware, *, batch: int, prompt: int, tensor: int = 1, dtype: str = "bf16", flash: bool = False, node_size: int | None = None) -> PhaseTime:
    """Time to first token: the forward pass over ``batch`` prompts of ``prompt`` tokens on ``tensor`` devices."""
    _whole("batch", batch), _whole("prompt", prompt), _whole("tensor", tensor)
    model.check_workload(seq=prompt)
    place = placement(gpu, node_size)
    model = at_dtype(model, dtype)
    return _phase_time(model, place, "prefill", _inference_work(model, "prefill", tensor, flash), tensor, dtype, batch=batch, seq=prompt)


def decode_time(model: Model, gpu: str | os.PathLike[str] | Hardware, *, batch: int, context: int, tensor: int = 1, dtype: str = "bf16", node_size: int | None = None, expert_skew: float = 0, flash: bool = False) -> PhaseTime:
    """Time per output token: one new token for each of ``batch`` sequences after ``context`` cached tokens.

    With ``flash`` the attention reads each key/value head once for the query heads
    that share it (FlashDecoding); without it, as eager kernels move it (the cache
    repeated per query head, b·h·context scores materialised).
    """
    _whole("batch", batch), _whole("context", context, 0), _whole("tensor", tensor)
    place = placement(gpu, node_size)
    model = at_dtype(model, dtype)
    return _phase_time(model, place, "decode", _inference_work(model, "decode", tensor, flash, expert_skew=expert_skew), tensor, dtype, batch=batch, past=context)


def inference_time(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    batch: int,
    prompt: int,
    output: int,
    tensor: int = 1,
    dtype: str = "bf16",
    flash: bool = False,
    node_size: int | None = None,
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
    expert_skew: float = 0,
    grouped: bool = True,
) -> InferenceTime:
    """TTFT, TPOT and tokens/s for ``batch`` requests of ``prompt`` tokens generating ``output`` tokens each
    (``grouped``: with ``flash``, the attention reads a key/value head once for the query heads sharing it;
    else once per query head, as kernels without grouped-query packing do)."""
    for name, value in (("batch", batch), ("prompt", prompt), ("output", output), ("tensor", tensor)):
        _whole(name, value)
    check_count(output, ARRAY_ELEMENTS, "output tokens (one decode step each)", "ARRAY_ELEMENTS", f"time at most {ARRAY_ELEMENTS:,} output tokens")
    model.check_workload(seq=prompt)
    place = placement(gpu, node_size)
    model = at_dtype(model, dtype)
    if tensor > place.node_size:
        raise ConfigError(f"tensor degree {tensor} exceeds the {place.node_size} accelerators of one node; inference tensor parallelism stays within a node (give node_size or a system)")
    prefill_work = _inference_work(model, "prefill", tensor, flash, weight_bytes, grouped=grouped)
    decode_work = _inference_work(model, "decode", tensor, flash, weight_bytes, expert_skew, grouped)
    prefill = _phase_time(model, place, "prefill", prefill_work, tensor, dtype, batch=batch, seq=prompt)
    first = _phase_time(model, place, "decode", decode_work, tensor, dtype, batch=batch, past=prompt)
    last = _phase_time(model, place, "decode", decode_work, tensor, dtype, batch=batch, past=prompt + output - 2) if output > 1 else first
    lower, upper = _decode_sum(model, place, decode_work, dtype, batch, prompt, output - 1, first.t_comm, first.comm_floor)
    v = model.vocabulary
    return InferenceTime(
        model=model.name,
        gpu=place.name,
        dtype=dtype,
        tensor=tensor,
        batch=batch,
        prompt=prompt,
        output=output,
        prefill=prefill,
        first_decode=first,
        last_decode=last,
        decode_lower=lower,
        decode_upper=upper,
        expressions={
            "prefill_flops_per_device": _sizes(model, prefill_work[0]),
            "prefill_bytes_per_device": _sizes(model, prefill_work[1]),
            "decode_flops_per_device": _sizes(model, decode_work[0]),
            "decode_bytes_per_device": _sizes(model, decode_work[1]),
            "batch": v["batch"],
        },
        assumptions=_inference_assumptions(place, dtype, tensor, flash, first.link),
    )


def _decode_sum(model: Model, place: Placement, work: tuple[sympy.Expr, sympy.Expr, sympy.Expr], dtype: str, batch: int, prompt: int, steps: int, t_comm: float, comm_floor: float) -> tuple[float, float]:
    """Both bounds summed over ``steps`` decode steps after prompt, prompt + 1, … cached tokens (float64, vectorised);
    the lower one with the floor's memory traffic and communication (bandwidth alone)."""
    if steps == 0:
        return 0.0, 0.0
    past = numpy.arange(prompt, prompt + steps, dtype=numpy.float64)
    flops, moved, kept = (_sizes(model, w).xreplace({model.vocabulary["batch"]: batch}) for w in work)
    t_math = numpy.broadcast_to(compile_expression(flops, ("past",))(past), past.shape) / place.device.flops_per_s(dtype)
    t_mem = numpy.broadcast_to(compile_expression(moved, ("past",))(past), past.shape) / place.device.hbm_bytes_per_s
    t_kept = numpy.broadcast_to(compile_expression(kept, ("past",))(past), past.shape) / place.device.hbm_bytes_per_s
    lower = numpy.maximum(numpy.maximum(t_math, t_kept), comm_floor).sum()
    upper = (t_math + t_mem + t_comm).sum()
    return float(lower), float(upper)


def _inference_assumptions(place: Placement, dtype: str, tensor: int, flash: bool, link: str | None) -> dict[str, object]:
    return {
        "peak": f"{place.device.name} dense {dtype} peak, no efficiency factor",
        "dtype": dtype_assumption(dtype),
        "hbm": f"{place.device.name} HBM bandwidth, no efficiency factor",
        "overlap": "floor: compute, memory traffic (what a fused engine still moves) and communication (bandwidth alone, no latency) overlapped at peak (max); peak, no overlap: their sum with latency (not a ceiling; the estimate's ceiling is)",
        "bytes": "HBM bytes as an unfused eager framework moves them, weights read once per forward pass"
        + ("; FlashAttention in the attention cores (decode: each key/value head read once for the query heads sharing it)" if flash else "; eager attention (scores materialised, the cache read per query head)"),
        "ttft": "the prefill's forward pass over the prompts (the first output token comes from it)",
        "tpot": "mean over the output − 1 decode steps, step i after prompt + i cached tokens",
        "tokens_per_s": "batch × output tokens / (TTFT + all decode steps)",
        "tensor_parallel": f"{tensor} devices: Megatron split of heads, inner widths and vocabulary; two all-reduces per layer, the embedding's all-reduce and an all-gather of the last position's logits" if tensor > 1 else "none (one device)",
        "link": None if link is None else {"link": link, "bytes_per_s": _bandwidth(place, link), "latency_s": link_latency(link)},
        "collective_algorithm": "the faster of ring and tree for each collective",
        "batching": "every sequence of the batch at the same step (static batching)",
        "experts": "mixture of experts: a decode step reads the weights of every expert its batch touches, the expected number of distinct experts under uniform routing, n·(1 − (1 − k/n)^batch) (a Zipf skew with expert_skew); prefill and training read top_k experts' weights",
    }
