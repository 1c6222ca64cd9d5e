"""One training or serving step's time, as the bounds (timing, phase_time) and the estimate (estimate) all compose it: the devices and links it runs on (placement), the numbers it binds, the transfers it times, the recomputation it adds, and StepParts: the micro-batches' work and communication, stretched by the pipeline's bubble, plus what runs once per step."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from fractions import Fraction

import numpy
import sympy

from ..parallel import parallel_comm
from . import routing
from ..memory.finetune import FineTune
from ..parallel.collectives import ALPHA, BETA, N, P, collective, cost_model, link_bandwidth, link_latency
from ...engine.store.derivation import derivation
from ...engine.budget import check_result
from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import exact_value
from ..devices.hardware import DTYPE_BYTES, Device, Hardware, System, load_device
from ..memory.memory import tensor_split
from ..memory import partial_recompute
from ..memory.settings import PER_OP, RECOMPUTE
from ...engine.graph.model import Model
from ...engine.algebra.multiplied import multiplied_out, value_at
from .roofline import Work, phase_work, within


#: Accelerators sharing one scale-up fabric (NVLink domain) when an accelerator rather
#: than a system is named: the 8-GPU HGX/DGX server.
DEFAULT_NODE_SIZE = 8


#: For each collective the faster of these algorithms is taken, as NCCL picks by size.
ALGORITHMS = ("ring", "tree")


#: The tensor-parallel degree as a symbol, where work is derived once for every degree.
TENSOR = sympy.Symbol("tensor", positive=True)


Number = int | float | Fraction


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

    def spread(self, devices: int) -> str:
        """``devices`` accelerators on this hardware, in words: a system's accelerators and how many systems
        they fill (a slice or server's name counts its own units: tpu-v5p-128 holds 64 chips), where more than
        one, joined by the scale-out network."""
        accelerator = self.device.name or self.device.title
        if not isinstance(self.hardware, System):
            return f"{devices:,} × {accelerator}"
        per = self.hardware.accelerator_count
        given = f", scale-up domains of {self.node_size:,} as given" if self.node_source == "given" else ""
        if devices <= per:
            return f"{devices:,} × {accelerator} of one {self.name}{given}"
        systems, left = -(-devices // per), devices % per
        partly = f" (the last holding {left:,})" if left else ""
        return f"{devices:,} × {accelerator} in {systems:,} × {self.name} of {per:,} each{partly}, the scale-out network between them{given}"

    def link(self, span: int) -> str:
        """The link a group of consecutive ranks spanning ``span`` ranks runs over.

        A group inside one node uses the scale-up fabric; one that leaves it runs the
        whole collective at the scale-out bandwidth, since a ring moves at the pace of
        its slowest hop. A device without a scale-up fabric (consumer and PCIe cards)
        talks to its node's peers over PCIe.
        """
        if span > self.node_size:
            return "scale_out"
        return self.inner_link

    @property
    def inner_link(self) -> str:
        """The link between the accelerators of one node: its scale-up fabric, or PCIe where it has none."""
        return "scale_up" if "scale_up" in self.device.interconnect else "pcie"

    def per_node(self, span: int, ranks: int) -> int:
        """How many of a group's ``ranks``, spread evenly over ``span`` consecutive ranks, share one node: in the
        node holding the fewest of them, which sets a ring's pace (ranks 0, 3, 6, 9 in nodes of 8: one)."""
        return ranks if span <= self.node_size else _fewest_per_node(span, ranks, self.node_size)


@lru_cache(maxsize=1024)
def _fewest_per_node(span: int, ranks: int, node_size: int) -> int:
    stride = max(1, span // ranks)
    return min(Counter(i * stride // node_size for i in range(ranks)).values())


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


@derivation  # a plan reports the expressions of every layout it times, many sharing them
def _sizes(model: Model, expr: sympy.Expr) -> sympy.Expr:
    """The expression with the model's sizes put in, the workload symbols left free."""
    values = model.values
    return multiplied_out(expr, {s: sympy.Integer(values[s.name]) for s in expr.free_symbols if s.name in values})


@derivation  # a plan times the tensor-parallel collectives of every layout it screens
def tensor_reductions(model: Model) -> int | Fraction:
    """Tensor parallelism's forward all-reduces per layer, over the model's layers: as each layer declares
    (``tensor_reductions``: an engine that sums a parallel layer's blocks reduces them once), Megatron's two for
    a layer that declares none."""
    graph = model.graph()
    counts = graph.multiplicities("forward_flops")
    paths = [path for path, data in graph.graph.nodes.items() if "tensor_reductions" in data]
    # a layer declared inside a declaring layer is that layer's part: the outer count holds for both
    outermost = [p for p in paths if not any(p.startswith(f"{q}/") for q in paths if q)]
    declared = [(Fraction(str(_bind(model, counts[p]))), int(graph.graph.nodes[p]["tensor_reductions"])) for p in outermost]
    layers, _ = _layers(model)
    counted = sum(times for times, _ in declared)
    # over the model's n_layers, as the comm charges each layer's transfers n_layers times (a model whose
    # declared layers outnumber n_layers, pairs of layers in one, charges them all)
    mean = (sum(times * each for times, each in declared) + parallel_comm.MEGATRON_REDUCTIONS * max(layers - counted, 0)) / Fraction(layers)
    return int(mean) if mean.denominator == 1 else mean


def reductions_said(reductions: int | Fraction, what: str) -> str:
    """``reductions`` of ``what`` (a collective, and what it carries), said once for every report: where the layers'
    count differs from Megatron's, why."""
    why = "" if reductions == parallel_comm.MEGATRON_REDUCTIONS else " (as its layers declare: a framework or engine that sums a parallel layer's blocks reduces them once)"
    collective, _, rest = what.partition(" ")
    return f"{reductions} {collective}{'' if reductions == 1 else 's'}{' ' + rest if rest else ''}{why}"


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


def recomputed_units(model: Model, recompute: str) -> list[str]:
    """The components that ``recompute`` runs forward a second time in backward, by path.

    They are the ones the declarations mark as recomputed under that mode (the
    attention cores for selective, the decoder layers for full, and for a framework's
    per-op policy the layers full recomputation rebuilds, of which it keeps some ops'
    results: kept_ops): the same choice ``symform.analysis.memory.memory`` makes for the
    activations they no longer keep.
    """
    if recompute not in RECOMPUTE and recompute not in PER_OP:
        raise EvaluationError(f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    mark = "full" if recompute in PER_OP else recompute
    graph = model.graph().graph
    marked = [node for node, data in graph.nodes.items() if mark in data["saved_when"]]
    # only the outermost: a marked part inside a marked part is recomputed once, with it
    return [n for n in marked if not any(n.startswith(f"{m}/") for m in marked)]


def kept_ops(model: Model, units: Iterable[str], recompute: str, flash: bool) -> tuple[str, ...]:
    """The ops inside ``units`` whose results a framework's per-op policy saves (settings.PER_OP), which backward does
    not run again (partial_recompute.saved_ops, the ops memory counts as kept); none under the other modes."""
    if recompute not in PER_OP:
        return ()
    graph = model.graph().graph
    return tuple(sorted({path for unit in units for path, _ in partial_recompute.saved_ops(graph, unit, flash, **PER_OP[recompute], conventions=model.conventions)}))


def recomputed_parts(model: Model, recompute: str, flash: bool) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The units ``recompute`` runs forward again in backward and the ops in them whose results it keeps (kept_ops);
    None where it runs nothing again: no unit, or selective under FlashAttention, whose backward recomputes the
    scores itself (counted in its own FLOPs) and keeps no score matrix to drop."""
    units = recomputed_units(model, recompute)
    if not units or (flash and recompute == "selective"):
        return None
    return tuple(units), kept_ops(model, units, recompute, flash)


def recompute_work(model: Model, recompute: str, *, flash: bool = False, values: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> tuple[sympy.Expr, sympy.Expr]:
    """Extra forward FLOPs and HBM bytes of one step's recomputation (recomputed_parts), over batch and seq.
    ``values``: put into every leaf first (roofline.phase_work's)."""
    parts = recomputed_parts(model, recompute, flash)
    if parts is None:
        return sympy.Integer(0), sympy.Integer(0)
    units, kept = parts
    # once per model and options: a plan asks again for every layout it reworks
    return _recompute_work(model, list(units), flash, dict(values or {}), kept)


def rank_sizes(model: Model, seq: int | None = None, *, tensor: int | sympy.Expr = TENSOR) -> dict[sympy.Symbol, sympy.Expr]:
    """The model's sizes as one rank of ``tensor`` tensor-parallel ranks holds them (memory.tensor_split's shares;
    1: whole), and ``seq``'s value if given: put into each leaf before it is multiplied out (roofline.phase_work's
    ``values``), they leave polynomials in the workload and the degree alone."""
    vocabulary, split = model.vocabulary, tensor_split(model, tensor)
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
def _recompute_work(model: Model, units: list[str], flash: bool, values: Mapping[sympy.Symbol, sympy.Expr], kept: tuple[str, ...] = ()) -> tuple[sympy.Expr, sympy.Expr]:
    inside = recomputed_leaves(model, units, flash, values, kept).values()
    return multiplied_out(sympy.Add(*(w.flops for w in inside))), multiplied_out(sympy.Add(*(w.bytes for w in inside)))


def recomputed_leaves(model: Model, units: Iterable[str], flash: bool, values: Mapping[sympy.Symbol, sympy.Expr] | None = None, kept: Iterable[str] = ()) -> dict[str, object]:
    """The leaves of ``units`` in the forward a training step's recomputation runs again, by path, but those of the
    ``kept`` ops, whose saved results backward reads instead (kept_ops)."""
    units, kept = tuple(units), tuple(kept)
    leaves = phase_work(model, "prefill", depth=None, flash=flash, values=values, recomputed_forward=True).components
    return {path: w for path, w in leaves.items() if within(path, units) and not within(path, kept)}


def transfer_seconds(transfers: Iterable[parallel_comm.Transfer], place: Placement, link: str, *, alpha: float | None = None, bandwidth: float | None = None, algorithms: tuple[str, ...] = ALGORITHMS, per_node: int = 1) -> float:
    """Seconds of the transfers one after another over ``link``, each by the fastest of ``algorithms`` (ring and tree
    unless given; the link's default latency and datasheet bandwidth unless given; ``per_node``: the group's ranks
    in one node, whose shares of the scale-out network a collective pools, group_bandwidth)."""
    alpha = link_latency(link) if alpha is None else alpha
    total = 0.0
    for transfer in transfers:
        rate = group_bandwidth(place, link, transfer.collective, int(transfer.ranks), per_node) if bandwidth is None else bandwidth
        total += transfer.count * _fastest_seconds(transfer.collective, transfer.ranks, transfer.nbytes, alpha, 1 / rate, tuple(algorithms))
    return total


#: Collectives NCCL runs as rings or trees: each channel crosses a node's boundary through one NIC and runs
#: inside the node over its fabric, so a group with several ranks in a node drives as many NICs at once.
POOLED = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})


def group_bandwidth(place: Placement, link: str, collective: str, ranks: int, per_node: int = 1) -> float:
    """Bytes/s per rank of one collective of ``ranks`` ranks, ``per_node`` of them in each node, over ``link``.

    Over the scale-out network a ring or tree's traffic stays on the node's own fabric but for one crossing per
    channel, and the node's ``per_node`` ranks cross through as many NICs: the bus bandwidth is the NICs' sum, up
    to the fabric's (NVIDIA/nccl#569: a 1.6 GB all-reduce over 8 DGX-2 ranks takes 363 ms at one rank per node,
    173 ms at two and 132 ms at four; nccl-tests all_reduce_perf reaches 400–450 GB/s bus bandwidth across nodes
    of 8 H100 with one 400 Gb/s NIC each). An all-to-all sends only the other nodes' shares over the network,
    the node's own over its fabric, both at once. A point-to-point send or a rooted collective has its rank's own NIC.
    """
    out = _bandwidth(place, link)
    if link != "scale_out" or per_node <= 1:
        return out
    inner = _bandwidth(place, place.inner_link)
    if collective == "all_to_all" and ranks > 1:
        off = (ranks - per_node) / (ranks - 1)
        return 1 / max(off / out, (1 - off) / inner)
    return min(inner, per_node * out) if collective in POOLED else out


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
    per_node: int = 1  # of the ranks, how many share one node (over the scale-out network)


def _comm(transfers: list[parallel_comm.Transfer], times: float, place: Placement, span: int, ranks: int) -> Comm:
    # only rings, trees and all-to-alls pool a node's NICs; a point-to-point send has its own
    pooled = any(t.collective in POOLED or t.collective == "all_to_all" for t in transfers)
    link, per_node = place.link(span), (place.per_node(span, ranks) if pooled else 1)
    sent = float(parallel_comm.bytes_per_rank(transfers)) if transfers else 0.0
    return Comm(times * transfer_seconds(transfers, place, link, per_node=per_node), times * sent, link, ranks, per_node)


def _json(value: object) -> object:
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    if isinstance(value, sympy.Basic):
        return str(value)
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _per_device(model: Model, split: Mapping[sympy.Symbol, sympy.Expr], pipeline: int, context: int = 1):
    """One micro-batch's share of a device: the tensor-parallel split, 1/pipeline of the model (balanced stages),
    and 1/context of its tokens (context parallelism: the work that grows with the batch divides, the weights' reads do not)."""
    split = {k: sympy.sympify(v) for k, v in split.items()}
    return lambda expr: _device_expression(model, sympy.sympify(expr), split, pipeline, context)


@derivation  # a plan's shortlisted layouts share their splits, pipeline depths and context degrees
def _device_expression(model: Model, expr: sympy.Expr, split: Mapping[sympy.Symbol, sympy.Expr], pipeline: int, context: int) -> sympy.Expr:
    return context_share(multiplied_out(expr / pipeline, split), model.vocabulary["batch"], context)


def context_share(expr: sympy.Expr, batch: sympy.Symbol, context: int) -> sympy.Expr:
    """A context rank's share: the terms that grow with the batch (per token) over ``context``; the rest whole."""
    if context == 1:
        return expr
    return sympy.Add(*(t / context if batch in t.free_symbols else t for t in sympy.Add.make_args(sympy.expand(expr))))


@dataclass(frozen=True)
class StepParts:
    """One training step's time from its parts: the one model the bounds and the estimate share.

    ``work``: the micro-batches' work in seconds, (compute, memory traffic) for the bounds, the kernels'
    summed time for the estimate; ``inside``: the communication within that work, one entry a kind (tensor,
    expert, context, pipeline); ``ratio``: the pipeline's bubble, which stretches both by 1 + ratio; ``once``: what runs
    once per step after them (the data-parallel exchange, the optimizer update). Numbers or numpy arrays.
    Each composition adds its terms in one fixed order, so a step's time is the same float wherever it is
    computed.
    """

    work: tuple
    inside: tuple
    ratio: object
    once: tuple = ()

    def serial(self):
        """Nothing overlapped: the work and the communication inside it stretched by the bubble, then the once-per-step parts."""
        total = self.work[0]
        for seconds in (*self.work[1:], self.communication()):
            total = total + seconds
        total = total * (1 + self.ratio)
        for seconds in self.once:
            total = total + seconds
        return total

    def overlapped(self):
        """Everything overlapped: the longest of the work's parts and each kind of communication inside it,
        stretched by the bubble, or the longest once-per-step part if that is longer. Kinds overlap one another
        too (the estimate hides each under its own window, rules.toml [overlap]), so none adds to another here."""
        longest = self.work[0]
        for seconds in (*self.work[1:], *self.inside):
            longest = numpy.maximum(longest, seconds)
        longest = longest * (1 + self.ratio)
        for seconds in self.once:
            longest = numpy.maximum(longest, seconds)
        return longest

    def communication(self):
        """The communication inside the work, its kinds one after another."""
        return sum(self.inside[1:], self.inside[0]) if self.inside else 0.0

    def bubble(self):
        """The bubble's own seconds: the ratio times the work and the communication inside it."""
        return self.ratio * (sum(self.work[1:], self.work[0]) + self.communication())

    def expected(self):
        """The estimate's step: the work, the (exposed) communication inside it, the bubble, then the once-per-step parts."""
        total = sum(self.work[1:], self.work[0]) + self.communication() + self.bubble()
        for seconds in self.once:
            total = total + seconds
        return total


def step_bounds(t_math, t_mem, inside, step, ratio):
    """The step's lower (full overlap) and upper (none) bounds from its parts, for numbers or numpy arrays:
    ``inside`` the communication within the micro-batch work, a kind each, ``step`` the once-per-step exchange."""
    parts = StepParts((t_math, t_mem), inside, ratio, (step,))
    return parts.overlapped(), parts.serial()


def utilisation(flops, seconds: float, devices: int, peak_flops_per_s: float) -> float:
    """The fraction of the devices' peak that ``flops`` in ``seconds`` make: MFU with the model's FLOPs,
    HFU with the hardware's (recomputation included). The one definition every report uses."""
    return float(flops) / (seconds * devices * peak_flops_per_s)


def _layers(model: Model) -> tuple[int, int]:
    """Transformer layers, and of those the mixture-of-experts ones (0 without experts)."""
    layers = _value(model, "n_layers", 1)
    if "n_experts" not in model.values:
        return layers, 0
    return layers, layers - _value(model, "n_dense_layers", 0)
