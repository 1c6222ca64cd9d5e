"""Bounds on serving: a prefill's and a decode step's time (PhaseTime), TTFT, TPOT and a whole request (InferenceTime), from the same step model as training's (step) with the traffic a fused engine still moves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy
import sympy

from ..parallel import parallel_comm
from ..parallel.collectives import link_latency
from ...engine.budget import ARRAY_ELEMENTS, check_count
from ...engine.errors import ConfigError
from ...engine.algebra.evaluate import compile_expression
from ..devices.hardware import Hardware
from ..memory.memory import tensor_split
from ...engine.graph.model import Model
from .efficiencies import SCORE_LEAVES, rules
from .roofline import phase_work
from .step_model import ALGORITHMS, Number, Placement, _act_bytes, _bandwidth, _bind, _json, _layers, _sizes, _whole, at_dtype, dtype_assumption, placement, reductions_said, tensor_reductions, transfer_seconds


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
    fused = rules().fusion["fused"][1]
    return fused if flash else fused - SCORE_LEAVES


def _inference_comm(model: Model, place: Placement, tensor: int, batch: int, seq: int, *, alpha: float | None = None, bandwidth: float | None = None, algorithms: tuple[str, ...] = ALGORITHMS) -> tuple[float, str | None]:
    """Forward tensor-parallel communication: the layers' all-reduces (two a layer, or as the layer declares), the
    embedding's, and a gather of the last position's logits."""
    if tensor == 1:
        return 0.0, None
    layers, _ = _layers(model)
    sizes = {"batch": batch, "d_model": model.values.get("d_model", 1), "bytes_per_element": _act_bytes(model), "tensor": tensor}
    layer = parallel_comm.tensor_parallel_layer(seq=seq, reductions=tensor_reductions(model), **sizes)
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
        raise ConfigError(f"tensor degree {tensor} exceeds the {place.node_size} accelerators of one node ({place.node_source}); inference tensor parallelism stays within a node: give a tensor degree of at most {place.node_size}, or node_size where the scale-up domain is larger")
    prefill_work = _inference_work(model, "prefill", tensor, flash, weight_bytes, expert_skew, grouped)
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
        assumptions=_inference_assumptions(place, dtype, tensor, flash, first.link, tensor_reductions(model) if tensor > 1 else None),
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


def _inference_assumptions(place: Placement, dtype: str, tensor: int, flash: bool, link: str | None, reductions: int | Fraction | None) -> dict[str, object]:
    return {
        "devices": place.spread(tensor),
        "peak": f"{place.device.name} dense {dtype} peak, no efficiency factor",
        "dtype": dtype_assumption(dtype),
        "hbm": f"{place.device.name} HBM bandwidth, no efficiency factor",
        "overlap": "floor: compute, memory traffic (what a fused engine still moves) and communication (bandwidth alone, no latency) overlapped at peak (max); peak, no overlap: their sum with latency (not a ceiling; the estimate's ceiling is)",
        "bytes": "HBM bytes as an unfused eager framework moves them, weights read once per forward pass"
        + ("; FlashAttention in the attention cores (decode: each key/value head read once for the query heads sharing it)" if flash else "; eager attention (scores materialised, the cache read per query head)"),
        "ttft": "the prefill's forward pass over the prompts (the first output token comes from it)",
        "tpot": "mean over the output − 1 decode steps, step i after prompt + i cached tokens",
        "tokens_per_s": "batch × output tokens / (TTFT + all decode steps)",
        "tensor_parallel": f"{tensor} devices: Megatron split of heads, inner widths and vocabulary; {reductions_said(reductions, 'all-reduce per layer')}, the embedding's all-reduce and an all-gather of the last position's logits" if tensor > 1 else "none (one device)",
        "link": None if link is None else {"link": link, "bytes_per_s": _bandwidth(place, link), "latency_s": link_latency(link)},
        "collective_algorithm": "the faster of ring and tree for each collective",
        "batching": "every sequence of the batch at the same step (static batching)",
        "experts": "mixture of experts: a step reads the weights of every expert its tokens touch (a decode step's batch, a prefill's batch·seq), the expected number of distinct experts under uniform routing, n·(1 − (1 − k/n)^tokens) (a Zipf skew with expert_skew); training reads top_k experts' weights a token",
    }
