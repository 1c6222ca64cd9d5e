"""Serving as engines run it: continuous batching over a paged KV cache, chunked prefill,
prefill/decode disaggregation and speculative decoding.

Pieces, each from what symform already has:

- memory (``paged_pool``): the weights and the step's activations from
  ``symform.analysis.memory.memory.inference_expressions``; each sequence's KV cache from the declared
  ``kv_cache`` expression at the engine's block size (a sequence holds whole blocks, so
  the waste of its last block, the fragmentation, is the formula's own ``ceil``);
- time (``StepModel``): every leaf of the model as a kernel at the device's sustained
  rates (``symform.analysis.time.estimate.kernel_seconds`` with ``hardware/efficiency/<device>.toml``),
  composed into engine steps: the linear layers run once over all the step's rows
  (decode tokens, drafted tokens, prefill chunk), the attention cores over each
  sequence's own cache;
- the engine's defaults (memory share, block size, token budget) from
  ``hardware/efficiency/serving.toml``, each with its source.

A serving point is a closed loop at a fixed concurrency (as ``benchmark_serving
--max-concurrency`` runs it): a finished request is replaced at once. See docs/serving.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import sympy

from ...engine.errors import ConfigError, SymformError
from ...engine.algebra.evaluate import compile_expression
from ...engine.graph.model import Model
from ..time import estimate
from ..time import phase_time
from ..time import step_model
from ..time import efficiencies
from ..parallel.collectives import link_latency
from ..devices.hardware import Hardware
from ..memory.memory import matmul_rate, stored_weights, tensor_split
from ..time.roofline import attention_cores, phase_work, within
from .kv_pool import Engine, KVPool, Lengths, Number, _memory_forms, engine_defaults, paged_pool, within_context

MODES = ("continuous", "chunked", "disaggregated")
LINKS = ("scale_up", "scale_out", "pcie")
ADMIT = ("longest", "steady")


# --- the engine's defaults -----------------------------------------------------------------------


# --- request lengths ---------------------------------------------------------------------------------


# --- memory: the paged KV pool -------------------------------------------------------------------------


# --- time: engine steps from the model's kernels --------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    path: str
    kind: str
    calls: float
    flops: Callable
    bytes: Callable


@cache
def _components(model: Model, phase: str, expert_skew: float, weight_format: str | None, grouped: bool = True) -> dict[str, object]:
    """The phase's leaves, the weights read as they are stored (the checkpoint's format, or ``weight_format``)."""
    _, weight_bytes = stored_weights(model, weight_format)
    return phase_work(model, phase, depth=None, flash=True, expert_skew=expert_skew, weight_bytes=weight_bytes, grouped=grouped).components


@cache
def _leaves(model: Model, phase: str, tensor: int, names: tuple[str, ...], expert_skew: float, weight_format: str | None = None, grouped: bool = True) -> tuple[_Leaf, ...]:
    """Each leaf's FLOPs and HBM bytes on one device as float functions of ``names`` (engines run FlashAttention)."""
    split = tensor_split(model, tensor)
    values = model.values
    layers = float(values.get("n_layers", 1))

    def per_device(expr: sympy.Expr) -> sympy.Expr:  # sizes in, split ones divided by the degree, in one pass
        expr = sympy.sympify(expr)
        return sympy.expand(expr.xreplace({s: sympy.Integer(values[s.name]) / (tensor if s in split else 1) for s in expr.free_symbols if s.name in values}))

    found, cores = [], attention_cores(model)
    for path, work in _components(model, phase, expert_skew, weight_format, grouped).items():
        flops, moved = per_device(work.flops), per_device(work.bytes)
        if flops == 0 and moved == 0:
            continue
        kind = "attention" if within(path, cores) else "gemm" if flops != 0 else "elementwise"
        found.append(_Leaf(path, kind, layers if path.startswith("layers/") else 1.0, compile_expression(flops, names), compile_expression(moved, names)))
    return tuple(found)


def _per_sequence(leaf: _Leaf, long: int = 2**20) -> bool:
    """Whether a prefill leaf's work is the same for a prompt of one token and of ``long`` tokens (and not none)."""
    one, many = (float(leaf.flops(1, 1)), float(leaf.bytes(1, 1))), (float(leaf.flops(1, long)), float(leaf.bytes(1, long)))
    return one == many and any(one)


def _ideal(device: str) -> efficiencies.Efficiency:
    """No efficiency data: every kernel at the datasheet's peak (the time bounds' rates), named as such."""
    none = "no efficiency data for this device: datasheet peak (a lower bound on time); add hardware/efficiency/<device>.toml"
    links = {name: efficiencies.LinkEfficiency(1.0, link_latency(name)) for name in LINKS}
    return efficiencies.Efficiency(device, 1.0, 1, 0.0, {1: 1.0}, 1.0, links, {"gemm": none, "attention": none, "memory": none, **{f"links.{n}": none for n in LINKS}})


class StepModel:
    """Seconds of engine steps of one replica (``tensor`` devices) at the device's sustained rates."""

    def __init__(self, model: Model, gpu: str | os.PathLike[str] | Hardware, *, tensor: int = 1, dtype: str | None = None, weight_format: str | None = None, node_size: int | None = None, expert_skew: float = 0, efficiency_data: efficiencies.Efficiency | str | None = None, grouped_kv: bool = True):
        """``dtype``: the matmul rate (default: the stored weights' format where the device has its rate, else bf16), as ``symform time --infer``;
        ``grouped_kv``: the attention kernels read a key/value head once per group of query heads (False: once per query head, as
        TensorRT-LLM's generation kernel did before XQA)."""
        step_model._whole("tensor", tensor)
        self.place = step_model.placement(gpu, node_size)
        if tensor > self.place.node_size:
            raise ConfigError(f"tensor degree {tensor} exceeds the {self.place.node_size} accelerators of one node; serving tensor parallelism stays within a node")
        dtype = matmul_rate(stored_weights(model, weight_format)[0], self.place.device.dense_flops_per_s, dtype)
        self.model = step_model.at_dtype(model, dtype)
        self.tensor, self.dtype = tensor, dtype
        try:
            self.efficiency = estimate._efficiency_for(self.place, efficiency_data)
            self.evidence = f"hardware/efficiency/{self.efficiency.device}.toml"
        except ConfigError as e:
            if "no efficiency data" not in str(e):
                raise
            self.efficiency = _ideal(self.place.device.name)
            self.evidence = "datasheet peaks (no efficiency data: times are lower bounds)"
        self.peak, self.hbm = estimate._device_rates(self.place, dtype)
        self.fusion = estimate._fusion("fused")
        self.head = estimate._head_size(self.model)
        self.decode = _leaves(self.model, "decode", tensor, ("batch", "past"), expert_skew, weight_format, grouped_kv)
        prefill = _leaves(self.model, "prefill", tensor, ("batch", "seq"), 0, weight_format, grouped_kv)
        self.prefill_cores = [leaf for leaf in prefill if leaf.kind == "attention"]
        # work once per sequence, not per token (the head's logits, which a step computes for the tokens it samples;
        # a recurrent state): a prefill's work there does not grow with the prompt
        self.sampled = {leaf.path for leaf in prefill if leaf.kind != "attention" and _per_sequence(leaf)}
        self._comm: dict[tuple[int, bool], float] = {}

    def _seconds(self, leaf: _Leaf, flops: float, moved: float, rows: float) -> float:
        kernel = estimate.Kernel(leaf.path, leaf.kind, flops, moved, leaf.calls, rows)
        return estimate.kernel_seconds(kernel, self.peak, self.hbm, self.efficiency, self.fusion, self.head)

    def comm(self, rows: int, *, decoding: bool = True) -> float:
        """Tensor-parallel all-reduces of a step over ``rows`` tokens, at the link's bus efficiency and latency; the logits
        gathered for every row when decoding, for a prompt's last token alone when prefilling."""
        if self.tensor == 1 or rows <= 0:
            return 0.0
        key = (rows, decoding)
        if key not in self._comm:
            link = self.place.link(self.tensor)
            rates = self.efficiency.link(link)
            bandwidth = step_model._bandwidth(self.place, link) * rates.bus_efficiency
            batch, seq = (rows, 1) if decoding else (1, rows)
            algorithms = efficiencies.rules().engine_all_reduce(link)
            self._comm[key] = phase_time._inference_comm(self.model, self.place, self.tensor, batch, seq, alpha=rates.latency_s, bandwidth=bandwidth, algorithms=algorithms)[0]
        return self._comm[key]

    def step(self, *, decoding: int = 0, past: float = 0.0, queries: int = 1, chunk: int = 0, prompt: float | None = None) -> float:
        """One engine step: ``decoding`` sequences each scoring ``queries`` tokens after ``past`` cached ones
        (1 to decode, k + 1 to verify k drafted tokens), and ``chunk`` prefill tokens taken evenly from prompts of
        ``prompt`` tokens (their attention is that share of a whole prompt's). The linear layers read their
        weights once for all the step's rows."""
        rows = decoding * queries + chunk
        if rows == 0:
            return 0.0
        whole = prompt or chunk
        # a prompt samples its last token as its prefill ends: a step of prefill alone runs the per-sequence work
        # in chunk/whole of the steps (counted as that share), beside decoding rows as one more row
        sampled = decoding * queries + (1 if chunk else 0)
        share = 1.0 if decoding else min(1.0, chunk / whole)
        total = 0.0
        for leaf in self.decode:
            if leaf.kind == "attention":
                if decoding:  # each sequence reads its own cache once for all its queries
                    total += self._seconds(leaf, float(leaf.flops(decoding, past)) * queries, float(leaf.bytes(decoding, past)), decoding * queries)
            elif leaf.path in self.sampled:
                total += share * self._seconds(leaf, float(leaf.flops(sampled, 0)), float(leaf.bytes(sampled, 0)), sampled)
            else:
                total += self._seconds(leaf, float(leaf.flops(rows, 0)), float(leaf.bytes(rows, 0)), rows)
        if chunk:
            total += self.prefill_attention(whole) * chunk / whole
        return total + self.comm(rows, decoding=decoding > 0)

    def prefill_attention(self, prompt: float) -> float:
        """The attention cores of one whole prompt's prefill."""
        total = 0.0
        for leaf in self.prefill_cores:
            total += self._seconds(leaf, float(leaf.flops(1, prompt)), float(leaf.bytes(1, prompt)), prompt)
        return total

    def prefill(self, prompt: float) -> float:
        """One prompt's prefill on its own."""
        return self.step(chunk=int(math.ceil(prompt)), prompt=prompt)


# --- speculative decoding ---------------------------------------------------------------------------------


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one target pass yields when k drafted tokens are each accepted with probability alpha:
    (1 − α^(k+1)) / (1 − α) (Leviathan et al. 2023, Fast Inference from Transformers via Speculative Decoding, eq. 1)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ConfigError(f"acceptance rate is {alpha!r}; give a number from 0 to 1")
    step_model._whole("drafted tokens", k, 0)
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True)
class Speculation:
    """k drafted tokens per target pass, each accepted with probability ``alpha``; ``draft_step`` gives one draft step's seconds
    at (batch, past), None for a draft that costs nothing."""

    k: int
    alpha: float
    draft: str
    draft_step: Callable[[int, float], float] | None = None

    @property
    def tokens_per_pass(self) -> float:
        return expected_tokens(self.alpha, self.k)

    def as_dict(self) -> dict[str, object]:
        return {"k": self.k, "alpha": self.alpha, "draft": self.draft, "tokens_per_pass": self.tokens_per_pass,
                "formula": "(1 - alpha^(k+1)) / (1 - alpha) tokens per target pass (Leviathan et al. 2023)"}  # fmt: skip


def speculation(target: Model, gpu, *, k: int, alpha: float, draft: Model | str | None = None, tensor: int = 1, dtype: str | None = None, weight_format: str | None = None, node_size: int | None = None) -> Speculation:
    """A draft model (a Model), ``"mtp"`` (the target's multi-token-prediction module, e.g. DeepSeek-V3's: its extra
    cost over the target's own step), ``"eagle"`` (an EAGLE head: one decoder layer of the target's width with its
    embedding and output head) or None (a free draft)."""
    expected_tokens(alpha, k)
    if draft is None:
        return Speculation(k, alpha, "free (no draft cost)")
    if isinstance(draft, Model):
        check_same_vocabulary(target, draft)
        steps = StepModel(draft, gpu, tensor=tensor, dtype=dtype, node_size=node_size)
        return Speculation(k, alpha, f"draft model {draft.name}", lambda b, past: steps.step(decoding=b, past=past))
    if draft == "eagle":
        steps = StepModel(target.with_arguments(n_layers=1), gpu, tensor=tensor, dtype=dtype, weight_format=weight_format, node_size=node_size)
        return Speculation(k, alpha, "EAGLE head (one decoder layer, the target's embedding and head; Li et al. 2024)", lambda b, past: steps.step(decoding=b, past=past))
    if draft == "mtp":
        if not _has_mtp(target):
            raise ConfigError(f"{target.name} declares no multi-token-prediction module (include_mtp); use --draft eagle or a draft model")
        with_mtp = StepModel(target.with_arguments(include_mtp=1), gpu, tensor=tensor, dtype=dtype, weight_format=weight_format, node_size=node_size)
        without = StepModel(target.with_arguments(include_mtp=0), gpu, tensor=tensor, dtype=dtype, weight_format=weight_format, node_size=node_size)
        return Speculation(k, alpha, f"{target.name}'s MTP module (DeepSeek-AI 2024, DeepSeek-V3 report, sec. 2.2)", lambda b, past: with_mtp.step(decoding=b, past=past) - without.step(decoding=b, past=past))
    raise ConfigError(f"unknown draft {draft!r}; give a model, mtp or eagle")


# Drafters of one tokenizer may pad their embedding tables differently (Qwen2.5-0.5B has 151,936 rows,
# Qwen2.5-72B 152,064); another tokenizer's differ by far more than padding.
_VOCAB_PADDING = 0.01


def check_same_vocabulary(target: Model, draft: Model) -> None:
    """The target verifies the drafter's tokens, so both read one tokenizer: vocabularies equal up to padding."""
    ours, theirs = target.values.get("vocab"), draft.values.get("vocab")
    if ours and theirs and abs(ours - theirs) > _VOCAB_PADDING * max(ours, theirs):
        raise ConfigError(
            f"draft model {draft.name} has a vocabulary of {theirs:,} tokens and {target.name} one of {ours:,}: speculative decoding "
            "checks the drafter's tokens with the target's, so both need one tokenizer; give a drafter of the same family, eagle or mtp"
        )


def _has_mtp(model: Model) -> bool:
    """Whether the family declares a multi-token-prediction module that include_mtp switches on."""
    try:
        return model.with_arguments(include_mtp=1).evaluate("params") != model.with_arguments(include_mtp=0).evaluate("params")
    except SymformError:  # a family without the option refuses it
        return False


def decode_seconds(steps: StepModel, batch: int, past: float, spec: Speculation | None = None) -> tuple[float, float]:
    """One decode iteration of ``batch`` sequences: its seconds and the tokens each sequence gains (TPOT = seconds / tokens)."""
    if spec is None:
        return steps.step(decoding=batch, past=past), 1.0
    drafting = spec.k * spec.draft_step(batch, past) if spec.draft_step else 0.0
    return steps.step(decoding=batch, past=past, queries=spec.k + 1) + drafting, spec.tokens_per_pass


# --- serving points: one concurrency, one way of scheduling ------------------------------------------------


@dataclass(frozen=True)
class ServingPoint:
    """A closed loop of ``concurrency`` requests per decode replica: latency and output tokens/s.

    ``gpus`` counts the devices one decode replica needs (with disaggregation, its share of
    the prefill pool too), so ``tokens_per_s_per_gpu`` compares layouts and prices them.
    """

    mode: str
    concurrency: int
    running: float  # sequences decoding at once (below concurrency when the token budget binds)
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    gpus: float
    step_s: float
    queue_s: float = 0.0
    kv_transfer_s: float = 0.0
    prefill_replicas_per_decode: float = 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1 / self.tpot_s

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode, "concurrency": self.concurrency, "running": self.running, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
            "tokens_per_s": self.tokens_per_s, "gpus": self.gpus, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": self.tokens_per_s_per_user, "step_s": self.step_s, "queue_s": self.queue_s,
            "kv_transfer_s": self.kv_transfer_s, "prefill_replicas_per_decode": self.prefill_replicas_per_decode,
        }  # fmt: skip


@dataclass(frozen=True)
class Transfer:
    """Moving one prompt's KV cache from a prefill replica to a decode replica over a named link."""

    link: str
    bytes_per_device: float
    bytes_per_s: float
    latency_s: float
    source: str

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bytes_per_device / self.bytes_per_s

    def as_dict(self) -> dict[str, object]:
        return {"link": self.link, "bytes_per_device": self.bytes_per_device, "bytes_per_s": self.bytes_per_s, "latency_s": self.latency_s, "seconds": self.seconds, "source": self.source}


def kv_transfer(steps: StepModel, prompt: float, link: str = "scale_out", *, weight_format: str | None = None, kv_bytes: Number | None = None) -> Transfer:
    """Each prefill device sends its shard of the prompt's cache over ``link`` at the link's sustained bandwidth (no overlap with the prefill)."""
    if link not in LINKS:
        raise ConfigError(f"unknown link {link!r}; choose one of {', '.join(LINKS)}")
    forms = _memory_forms(steps.model, steps.tensor, weight_format, kv_bytes)
    rates = steps.efficiency.links.get(link)
    efficiency, latency, source = (rates.bus_efficiency, rates.latency_s, steps.efficiency.sources.get(f"links.{link}", "")) if rates else (1.0, link_latency(link), f"no [links.{link}] in the efficiency data: datasheet bandwidth, default latency")
    bandwidth = step_model._bandwidth(steps.place, link) * efficiency
    return Transfer(link, forms.kv(prompt, 1), bandwidth, latency, f"{steps.place.name} {link} bandwidth × {efficiency:g} ({source})")


def check_lengths(model: Model, lengths: Lengths) -> None:
    """Requests the model can serve: within its context, with at least one decode step."""
    within_context(model, lengths)
    _output_steps(lengths)


def _output_steps(lengths: Lengths) -> float:
    if lengths.output_mean < 2:
        raise ConfigError("serving with continuous batching needs an output of 2 tokens or more (the first comes from the prefill); give --output 2 or more")
    return lengths.output_mean - 1


def continuous_point(steps: StepModel, lengths: Lengths, concurrency: int, spec: Speculation | None = None) -> ServingPoint:
    """Prefills scheduled first, each whole, between decode steps (no chunking): every prefill stalls the running decodes."""
    later = _output_steps(lengths)
    decode, gained = decode_seconds(steps, concurrency, lengths.mean_past, spec)
    prefill = steps.prefill(lengths.prompt_mean)
    # per request: (o − 1)/E decode iterations; per iteration B·E/(o − 1) prefills join
    tpot = decode / gained + concurrency * prefill / later
    cycle = concurrency * prefill + later * decode / gained
    return ServingPoint("continuous", concurrency, concurrency, ttft_s=decode + prefill, tpot_s=tpot, tokens_per_s=concurrency * lengths.output_mean / cycle, gpus=steps.tensor, step_s=decode)


def chunked_point(steps: StepModel, lengths: Lengths, concurrency: int, budget: int, spec: Speculation | None = None) -> ServingPoint:
    """Sarathi-Serve / vLLM V1 scheduling: every step runs all decodes and fills the rest of its token budget with prefill chunks."""
    later = _output_steps(lengths)
    queries = 1 + (spec.k if spec else 0)
    gained = spec.tokens_per_pass if spec else 1.0
    per_sequence = queries + gained * lengths.prompt_mean / later  # budget tokens one running sequence needs per step
    fits = budget / per_sequence
    running = float(min(concurrency, math.floor(fits))) if fits >= 1 else fits  # below 1: prefill-bound, some steps decode nothing
    whole = max(int(running), 1)
    room = budget - whole * queries
    if room < 1:
        raise ConfigError(f"a token budget of {budget} leaves no room for prefill beside {whole} decoding sequences; raise --token-budget")
    chunk = min(room, max(1, round(running * gained * lengths.prompt_mean / later)))
    drafting = spec.k * spec.draft_step(whole, lengths.mean_past) if spec and spec.draft_step else 0.0
    step = steps.step(decoding=whole, past=lengths.mean_past, queries=queries, chunk=chunk, prompt=lengths.prompt_mean) + drafting
    full = steps.step(decoding=whole, past=lengths.mean_past, queries=queries, chunk=room, prompt=lengths.prompt_mean) + drafting
    requests_per_s = min(running * gained / later, chunk / lengths.prompt_mean) / step
    queue = max(concurrency - running, 0.0) / requests_per_s  # Little's law: the requests the budget keeps waiting
    ttft = math.ceil(lengths.prompt_mean / room) * full + queue
    return ServingPoint("chunked", concurrency, running, ttft_s=ttft, tpot_s=step / gained, tokens_per_s=requests_per_s * lengths.output_mean, gpus=steps.tensor, step_s=step, queue_s=queue)


def disaggregated_point(prefill_steps: StepModel, decode_steps: StepModel, lengths: Lengths, concurrency: int, transfer: Transfer, spec: Speculation | None = None) -> ServingPoint:
    """Separate pools (DistServe, Splitwise): prefill replicas hand each prompt's cache to decode replicas over a link; as many
    prefill replicas per decode replica as keep it fed."""
    later = _output_steps(lengths)
    decode, gained = decode_seconds(decode_steps, concurrency, lengths.mean_past, spec)
    prefill = prefill_steps.prefill(lengths.prompt_mean)
    requests_per_s = concurrency * gained / (later * decode)
    per_prefill = 1 / max(prefill, transfer.seconds)  # a prefill replica's requests/s, its link permitting
    share = requests_per_s / per_prefill
    return ServingPoint(
        "disaggregated", concurrency, concurrency, ttft_s=prefill + transfer.seconds, tpot_s=decode / gained, tokens_per_s=requests_per_s * lengths.output_mean,
        gpus=decode_steps.tensor + share * prefill_steps.tensor, step_s=decode, kv_transfer_s=transfer.seconds, prefill_replicas_per_decode=share,
    )  # fmt: skip


# --- the throughput-latency curve and its knee ------------------------------------------------------------------


def knee(latency: Sequence[float], throughput: Sequence[float]) -> int | None:
    """Index of the knee of a rising throughput-latency curve: the point farthest above the chord once both axes are scaled to [0, 1]
    (Kneedle: Satopää et al. 2011, Finding a "Kneedle" in a Haystack, ICDCS workshops). None for fewer than three points or a flat curve."""
    if len(latency) < 3:
        return None
    x0, x1, y0, y1 = min(latency), max(latency), min(throughput), max(throughput)
    if x1 == x0 or y1 == y0:
        return None
    gaps = [(y - y0) / (y1 - y0) - (x - x0) / (x1 - x0) for x, y in zip(latency, throughput)]
    best = max(range(len(gaps)), key=gaps.__getitem__)
    return best if gaps[best] > 0 else None


def concurrency_grid(largest: int) -> list[int]:
    """1, 2, 4, … below ``largest``, and ``largest`` itself."""
    grid = [1 << i for i in range(max(largest, 1).bit_length()) if 1 << i < largest]
    return grid + [largest] if largest >= 1 else []


@dataclass(frozen=True)
class Curve:
    model: str
    gpu: str
    lengths: Lengths
    mode: str
    tensor: int
    pool: KVPool
    points: list[ServingPoint]
    knee: int | None
    speculation: Speculation | None
    assumptions: dict[str, object]

    @property
    def knee_point(self) -> ServingPoint | None:
        return None if self.knee is None else self.points[self.knee]

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "gpu": self.gpu, "lengths": self.lengths.as_dict(), "mode": self.mode, "tensor": self.tensor,
            "memory": self.pool.as_dict(), "points": [p.as_dict() for p in self.points], "knee": None if self.knee_point is None else self.knee_point.as_dict(),
            "speculation": None if self.speculation is None else self.speculation.as_dict(), "assumptions": self.assumptions,
        }  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """What a serving curve or plan is asked under: the engine, weights and cache widths, the KV link, speculation."""

    settings: Engine = field(default_factory=engine_defaults)
    weight_format: str | None = None
    kv_bytes: Number | None = None
    dtype: str | None = None  # the matmul rate; None: the stored weights' format where the device has it, else bf16
    node_size: int | None = None
    kv_link: str = "scale_out"
    k: int = 0
    alpha: float = 0.0
    draft: Model | str | None = None
    expert_skew: float = 0.0
    admit: str = "longest"  # "longest": no preemption ever; "steady": as many as fit at mean occupancy


def drafting_model(model: Model, draft: Model | str | None) -> Model:
    """The model whose weights and cache a replica holds: with an MTP module or an EAGLE head, the target with that
    module or one more decoder layer (its weights and its own cache); a separate draft model is counted beside it."""
    if draft == "mtp" and _has_mtp(model):
        return model.with_arguments(include_mtp=1)
    if draft == "eagle" and "n_layers" in model.values:
        return model.with_arguments(n_layers=model.values["n_layers"] + 1)
    return model


def _steps(model: Model, gpu: str, tensor: int, setup: Setup) -> StepModel:
    return _cached_steps(model, gpu, tensor, setup.dtype, setup.weight_format, setup.node_size, setup.expert_skew)


@cache
def _cached_steps(model: Model, gpu: str, tensor: int, dtype: str | None, weight_format: str | None, node_size: int | None, expert_skew: float) -> StepModel:
    return StepModel(model, gpu, tensor=tensor, dtype=dtype, weight_format=weight_format, node_size=node_size, expert_skew=expert_skew)


class Replica:
    """One layout's pieces: step models, memory pools, speculation and KV link, built once and asked at any concurrency."""

    def __init__(self, model: Model, gpu: str, lengths: Lengths, mode: str, tensor: int, setup: Setup, prefill_tensor: int | None = None):
        if mode not in MODES:
            raise ConfigError(f"unknown serving mode {mode!r}; choose one of {', '.join(MODES)}")
        if setup.admit not in ADMIT:
            raise ConfigError(f"unknown admission {setup.admit!r}; choose one of {', '.join(ADMIT)}")
        self.model, self.gpu, self.lengths, self.mode, self.tensor, self.setup = model, gpu, lengths, mode, tensor, setup
        _output_steps(lengths)
        draft = setup.draft if isinstance(setup.draft, Model) else None
        # the largest step's activations: a whole longest prompt unless prefills are chunked or elsewhere
        rows = lengths.prompt_max if mode == "continuous" else setup.settings.token_budget
        self.pool = paged_pool(drafting_model(model, setup.draft), gpu, lengths, tensor=tensor, settings=setup.settings, step_tokens=rows, weight_format=setup.weight_format, kv_bytes=setup.kv_bytes, draft=draft, node_size=setup.node_size)
        self.steps = self.spec = self.prefill_steps = self.transfer = None
        if self.pool.max_concurrency < 1:
            return  # nothing to time: no_room says why
        self.steps = _steps(model, gpu, tensor, setup)
        self.spec = speculation(model, gpu, k=setup.k, alpha=setup.alpha, draft=setup.draft, tensor=tensor, dtype=setup.dtype, weight_format=setup.weight_format, node_size=setup.node_size) if setup.k or setup.draft else None
        if mode == "disaggregated":
            self.prefill_tensor = prefill_tensor or tensor
            self.prefill_steps = _steps(model, gpu, self.prefill_tensor, setup)
            prefill_pool = paged_pool(model, gpu, Lengths.fixed(lengths.prompt_max, 1), tensor=self.prefill_tensor, settings=setup.settings, step_tokens=lengths.prompt_max, weight_format=setup.weight_format, kv_bytes=setup.kv_bytes, node_size=setup.node_size)
            if prefill_pool.max_concurrency < 1:
                raise ConfigError(f"a prefill replica of {self.prefill_tensor} × {gpu} cannot hold one prompt of {lengths.prompt_max} tokens; raise its tensor degree")
            self.transfer = kv_transfer(self.prefill_steps, lengths.prompt_mean, setup.kv_link, weight_format=setup.weight_format, kv_bytes=setup.kv_bytes)

    @property
    def largest(self) -> int:
        """The largest concurrency the cache holds with every sequence at its longest (and, chunked, that leaves the budget room for prefill)."""
        top = self.pool.max_concurrency if self.setup.admit == "longest" else self.pool.steady_concurrency
        if self.mode == "chunked":
            top = min(top, (self.setup.settings.token_budget - 1) // (1 + self.setup.k))
        return top

    def point(self, concurrency: int) -> ServingPoint:
        if self.mode == "continuous":
            return continuous_point(self.steps, self.lengths, concurrency, self.spec)
        if self.mode == "chunked":
            return chunked_point(self.steps, self.lengths, concurrency, self.setup.settings.token_budget, self.spec)
        return disaggregated_point(self.prefill_steps, self.steps, self.lengths, concurrency, self.transfer, self.spec)

    def no_room(self) -> str:
        """Why not even one request fits."""
        if self.pool.max_concurrency >= 1:
            return f"a token budget of {self.setup.settings.token_budget} leaves no room for one sequence scoring {1 + self.setup.k} tokens per step; raise --token-budget or lower --speculate"
        return f"{self.model.name} on {self.tensor} × {self.gpu} leaves {max(self.pool.pool_bytes, 0) / 2**30:.1f} GiB for the KV cache, not one sequence of {self.lengths.longest:,} tokens in blocks of {self.pool.block_tokens}; raise the tensor degree, quantise or shorten the requests"

    def curve(self) -> Curve:
        if self.largest < 1:
            raise ConfigError(self.no_room())
        points = [self.point(b) for b in concurrency_grid(self.largest)]
        return Curve(self.model.name, self.steps.place.name, self.lengths, self.mode, self.tensor, self.pool, points, knee([p.tpot_s for p in points], [p.tokens_per_s_per_gpu for p in points]), self.spec, assumptions(self))


def serving_curve(model: Model, gpu: str, lengths: Lengths, *, mode: str = "chunked", tensor: int = 1, setup: Setup | None = None, prefill_tensor: int | None = None) -> Curve:
    """Latency and throughput at concurrencies 1, 2, 4, … up to the most the paged cache holds, with the knee."""
    return Replica(model, gpu, lengths, mode, tensor, setup or Setup(), prefill_tensor).curve()


def assumptions(replica: Replica) -> dict[str, object]:
    s = replica.setup.settings
    found = {
        "evidence": replica.steps.evidence + "; engine settings from hardware/efficiency/serving.toml",
        "kernels": "each leaf at the device's sustained rate (symform.analysis.time.estimate, fused serving kernels, FlashAttention); the linear layers read their weights once per step for all its rows",
        "memory_utilisation": {"value": s.utilisation, "source": s.sources["utilisation"]},
        "block_tokens": {"value": s.block_tokens, "source": s.sources["block_tokens"]},
        "closed_loop": "a fixed number of requests in flight, a finished one replaced at once (benchmark_serving --max-concurrency); no arrival bursts",
        "admission": "every sequence at its longest (prompt max + output max) in whole blocks: no preemption" if replica.setup.admit == "longest" else "as many as fit at mean occupancy (prompt mean + half the output mean, half a block of waste each) with on-demand blocks: the engine preempts when many are long at once",
        "decode_step": "at the mean cache length: prompt mean + (output mean − 2)/2",
    }
    if replica.mode == "continuous":
        found["schedule"] = "prefills first, each whole, between decode steps (no chunking): TPOT = decode step + concurrency × prefill / (output − 1); TTFT = one decode step + the prefill"
    if replica.mode == "chunked":
        found["schedule"] = "every step runs all decodes and fills the token budget with prefill chunks (Agrawal et al. 2024, Sarathi-Serve, OSDI); the budget caps the sequences running, the rest queue (Little's law)"
        found["token_budget"] = {"value": s.token_budget, "source": s.sources["token_budget"]}
    if replica.mode == "disaggregated":
        found["schedule"] = "separate prefill and decode pools (Zhong et al. 2024, DistServe, OSDI; Patel et al. 2024, Splitwise, ISCA); the first token is returned once its cache has reached the decode replica"
        found["kv_transfer"] = replica.transfer.as_dict()
        found["prefill_tensor"] = replica.prefill_tensor
    if replica.spec:
        found["speculation"] = replica.spec.as_dict() | {"cost": "k draft steps + one target pass scoring k + 1 tokens per sequence (weights read once, each cache read once)"}
    context = replica.pool.context_note()
    if context:
        found["context"] = context
    return found


# --- against measured runs ------------------------------------------------------------------------------------


def static_batch(steps: StepModel, batch: int, prompt: int, output: int) -> tuple[float, float, float]:
    """TTFT, TPOT and the whole request's time of one static batch (all prompts prefilled together, then decoded
    together), from the same steps."""
    ttft = steps.step(chunk=batch * prompt, prompt=prompt)
    tpot = steps.step(decoding=batch, past=prompt + max(output - 2, 0) / 2)
    return ttft, tpot, ttft + (output - 1) * tpot


def measured_errors() -> list[dict[str, object]]:
    """The engine-step model against every measured serving run of hardware/measured/: the figure each source reports, measured and predicted."""
    from ..time import measured_runs

    return [measured_error(run) for run in measured_runs.runs() if run.kind == "serving"]


def measured_error(run) -> dict[str, object]:
    """One measured serving run (a ``measured_runs.Run``): its figure as the source reports it, and as the engine steps predict it."""
    from ..time import measured_runs

    s = run.setup
    steps = StepModel(measured_runs.run_model(run), s["gpu"], tensor=s.get("tensor", 1), dtype=s.get("dtype", "bf16"), grouped_kv=s.get("attention", "sdpa") != "fused_per_head")
    predicted = measured_runs.served_figure(run, *static_batch(steps, s["batch"], s["prompt"], s["output"]))
    what, measured = run.measured
    return {"run": run.name, "source": run.source, "figure": what, "measured": measured, "predicted": predicted, "error": predicted / measured - 1}
