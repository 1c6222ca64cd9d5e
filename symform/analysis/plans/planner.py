"""The parallel-layout planner: every (data, tensor, pipeline, expert) split of a device count,
micro-batch, ZeRO stage and recomputation, screened at numpy speed, ranked by step time.

Memory per device is the memory module's expression with the degrees as symbols, compiled
once and evaluated over all candidates at once. Step time is the timing module's lower
bound (full overlap): compute and HBM traffic compiled the same way, communication
computed once per distinct group (a handful of tensor, pipeline, expert and data-parallel
groups cover thousands of candidates) and gathered. The top layouts are then worked out
again exactly by ``training_memory`` and ``training_time``, which report their breakdowns.
"""

from __future__ import annotations

import math
import os
import time as clock
from dataclasses import dataclass, field

import numpy as np
import sympy

from ..parallel import scaling
from ...engine.budget import DEVICES, STEP_TOKENS, check_count, quoted
from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import compile_expression
from ...engine.algebra.multiplied import multiplied_out
from ..devices.hardware import Hardware
from ..memory.memory import MemoryReport, Training, backward_peak, params_at_sizes, routed_part, saved_activations, saved_activations_at_sizes, static_bytes, tensor_split, training_memory
from ..memory.settings import RECOMPUTE, Layout, recipes
from ...engine.graph.model import Model
from ..memory import frameworks
from ..memory.frameworks import Framework, overhead_bytes, reserve_fraction, unit_params
from ..memory.finetune import FineTune, finetune_memory, frozen_weight_bytes, kept_by, rank_share, trainable_params
from ..time.timing import TrainingTime, data_comm, expert_comm, pipeline_comm, tensor_comm, training_time
from ..time.step_model import TENSOR, placement, rank_sizes, rank_work, step_bounds
from ..time.efficiencies import TimeProfile

T, P, E, B = TENSOR, *sympy.symbols("pipeline expert micro_batch", positive=True)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
HEADROOM = 2 * 2**30  # bytes a plan leaves free per device by default: what no framework file counts (plan --headroom)


def _divisors(n: int) -> list[int]:
    """Divisors of n in increasing order, in O(sqrt n) steps (n is within the DEVICES budget)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


@dataclass
class Candidates:
    """One row per layout: numpy arrays of equal length."""

    tensor: np.ndarray
    pipeline: np.ndarray
    data: np.ndarray
    expert: np.ndarray
    micro_batch: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray  # index into RECOMPUTE
    sequence: bool = False  # sequence parallelism beside every tensor degree above 1 (the framework's default, or the user's)

    def __len__(self) -> int:
        return len(self.tensor)

    def sequence_at(self, tensor: int) -> bool:
        """Sequence parallelism in a layout of ``tensor`` ranks: only beside tensor parallelism."""
        return self.sequence and tensor > 1

    def take(self, mask: np.ndarray) -> "Candidates":
        return Candidates(*(getattr(self, f)[mask] for f in self.__dataclass_fields__ if f != "sequence"), sequence=self.sequence)

    def layout(self, i: int, global_batch: int) -> tuple[Layout, int, str]:
        """Row ``i`` as a Layout (with its micro-batches per step), its micro-batch size and recomputation."""
        micro_batch, data = int(self.micro_batch[i]), int(self.data[i])
        tensor = int(self.tensor[i])
        layout = Layout(
            data=data, tensor=tensor, pipeline=int(self.pipeline[i]), expert=int(self.expert[i]),
            zero=int(self.zero[i]), microbatches=global_batch // (micro_batch * data), sequence=self.sequence_at(tensor),
        )  # fmt: skip
        return layout, micro_batch, RECOMPUTE[int(self.recompute[i])]


def recompute_modes(framework: str | None) -> tuple[str, ...]:
    """The recomputation modes a plan searches: all of them, less selective where the framework has no selective mode."""
    fw = frameworks.framework(framework)
    return tuple(m for m in RECOMPUTE if m != "selective" or fw is None or fw.selective is not None)


def tensor_degrees(model: Model, devices: int) -> list[int]:
    """The tensor-parallel degrees of ``devices`` that divide every size tensor parallelism splits (heads, widths, vocabulary)."""
    sizes = model.values
    return [t for t in _divisors(devices) if all(sizes.get(s.name, t) % t == 0 for s in model.vocabulary.tensor_parallel)]


def enumerate_layouts(
    model: Model, devices: int, global_batch: int, *, micro_batches=MICRO_BATCHES, zero_stages=(0, 1, 2, 3), recompute=RECOMPUTE, finetune: FineTune | None = None, sequence_of: int | None = None,
) -> Candidates:
    """Every layout whose degrees multiply to ``devices``, split the model evenly and the batch into whole micro-batches;
    with ``finetune``, only those its memory and time model (no expert parallelism, ZeRO up to 2, no pipeline with frozen layers);
    with ``sequence_of`` (a sequence's tokens), sequence parallelism beside tensor parallelism, whose degrees then split the sequence too."""
    sizes = model.values
    if finetune is not None:
        zero_stages = tuple(z for z in zero_stages if z < 3)
    tensor_ok = [t for t in tensor_degrees(model, devices) if sequence_of is None or sequence_of % t == 0]
    rows = []
    for t in tensor_ok:
        for p in _divisors(devices // t):
            if sizes.get("n_layers", p) % p or (p > 1 and finetune is not None and finetune.frozen_layers()):
                continue  # stages hold whole, equal numbers of layers
            d = devices // (t * p)
            experts = [e for e in _divisors(d) if sizes.get("n_experts", 1) % e == 0] if "n_experts" in sizes and finetune is None else [1]
            for e in experts:
                for b in micro_batches:
                    if global_batch % (b * d) == 0:
                        rows.append((t, p, d, e, b))
    if not rows:
        raise EvaluationError(f"no layout of {devices} devices splits this model and a global batch of {global_batch} evenly; try another device count or batch")
    base = np.array(rows, dtype=np.int64)
    zeros = np.array(zero_stages, dtype=np.int64)
    modes = np.array([RECOMPUTE.index(r) for r in recompute], dtype=np.int64)
    grid = np.array(np.meshgrid(np.arange(len(base)), zeros, modes, indexing="ij")).reshape(3, -1)
    picked = base[grid[0]]
    return Candidates(picked[:, 0], picked[:, 1], picked[:, 2], picked[:, 3], picked[:, 4], grid[1], grid[2], sequence=sequence_of is not None)


# --- memory, vectorised --------------------------------------------------------------------------


def _compiled(model: Model, expr: sympy.Expr, names: tuple[str, ...], fixed: dict[str, int]):
    values = {**model.values, **fixed}
    bound = multiplied_out(expr, {s: sympy.Integer(values[s.name]) for s in expr.free_symbols if s.name in values})
    return compile_expression(bound, names)


def _zero_shards(c: Candidates, group: np.ndarray) -> dict[str, np.ndarray]:
    return {"optimizer_shards": np.where(c.zero >= 1, group, 1.0), "gradient_shards": np.where(c.zero >= 2, group, 1.0), "weight_shards": np.where(c.zero >= 3, group, 1.0)}


def static_per_device(model: Model, c: Candidates, *, precision: str, optimizer: str, finetune: FineTune | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weights, master weights, gradients and optimizer states per device of every candidate, and the parameters
    per rank they are of (tensor, pipeline and expert shares, before ZeRO)."""
    recipe = recipes().precision[precision]
    states = recipes().optimizer[optimizer]
    d = c.data.astype(np.float64)
    shards = _zero_shards(c, d)
    if finetune is None:
        per_rank = params_at_sizes(model, T, P, E)
        params, experts = (_compiled(model, f, ("tensor", "pipeline", "expert"), {})(c.tensor, c.pipeline, c.expert) for f in (per_rank, routed_part(per_rank)))
        # the routed experts' copies shard over the expert-data-parallel group (memory.Layout.static_shards)
        return sum(static_bytes(params - experts, recipe, states, **shards).values()) + sum(static_bytes(experts, recipe, states, **_zero_shards(c, d / c.expert)).values()), params
    share = rank_share(model, T, P)
    rank = {"lora_rank": finetune.rank}
    trained = _compiled(model, share(trainable_params(model, finetune)), ("tensor", "pipeline"), rank)(c.tensor, c.pipeline)
    frozen = _compiled(model, share(frozen_weight_bytes(model, finetune, recipe.weights)), ("tensor", "pipeline"), rank)(c.tensor, c.pipeline)
    return sum(static_bytes(trained, recipe, states, **shards).values()) + frozen / shards["weight_shards"], trained


def _framework_overheads(model: Model, fw: Framework, c: Candidates, params: np.ndarray, held: np.ndarray, precision: str) -> np.ndarray:
    """memory.framework_overheads of every candidate: its buffers at each one's ZeRO stage, then the allocator's reserve."""
    recipe = recipes().precision[precision]
    pairs = list(zip(c.tensor.tolist(), c.expert.tolist()))
    units = {pair: unit_params(model, *pair) for pair in set(pairs)}
    unit = np.array([units[pair] for pair in pairs], dtype=np.float64)
    inside, outside = np.zeros(len(c)), np.zeros(len(c))
    for zero in np.unique(c.zero):
        rows = c.zero == zero
        for name, value in overhead_bytes(fw, zero=int(zero), unit=unit[rows], params=params[rows], weight_bytes=recipe.weights, grad_bytes=recipe.grads, data=c.data[rows].astype(np.float64)).items():
            (outside if name in fw.outside_allocator() else inside)[rows] += value
    return inside + outside + float(reserve_fraction(fw)) * (held + inside)


def memory_per_device(model: Model, c: Candidates, *, seq: int, global_batch: int, precision: str, optimizer: str, flash: bool, finetune: FineTune | None = None, framework: str | None = None) -> np.ndarray:
    """Bytes per device of every candidate, as ``training_memory`` (or ``finetune_memory``) counts them (1F1B, stages balanced),
    with the ``framework``'s selective recomputation and overheads (formulas/frameworks; not for fine-tuning)."""
    recipe = recipes().precision[precision]
    fw = frameworks.framework(framework) if finetune is None else None
    model = frameworks.under(model, fw, recipe.act, precision)
    static, params = static_per_device(model, c, precision=precision, optimizer=optimizer, finetune=finetune)
    microbatches = global_batch / (c.micro_batch * c.data)
    in_flight = np.minimum(c.pipeline, microbatches)
    activations = np.zeros(len(c))
    # memory._activations_per_device: sequence parallelism splits every activation over the tensor ranks, tensor
    # parallelism alone its heads and inner widths
    split = {} if c.sequence else tensor_split(model, T)

    def per_rank(expr: sympy.Expr) -> sympy.Expr:
        return expr / T if c.sequence else expr
    for index, mode in enumerate(RECOMPUTE):
        rows = c.recompute == index
        if not rows.any():
            continue
        freed: tuple[str, ...] = ()
        if finetune is None:  # the sizes put in before multiplying out: the same polynomials in batch and tensor, sooner
            modes = (fw.recompute_mode(mode) if fw else mode,)
            kept, transient, parts = saved_activations_at_sizes(model, rank_sizes(model, seq, tensor=1 if c.sequence else T), recompute=modes[0], flash=flash)
            kept, transient, parts = per_rank(kept), per_rank(transient), {name: per_rank(part) for name, part in parts.items()}
            freed = frameworks.finished_parts(model, fw, Layout(), modes)  # with one stage: memory.backward_categories
        else:
            kept, transient, _ = saved_activations(model, recompute=mode, flash=flash, kept_by=kept_by(model, finetune))
            kept, transient = per_rank(kept.xreplace(split)), per_rank(transient.xreplace(split))
        names = ("batch", "tensor")
        fixed = {"seq": seq} | ({"lora_rank": finetune.rank} if finetune else {})
        keep = _compiled(model, kept, names, fixed)(c.micro_batch[rows], c.tensor[rows])
        rebuilt = _compiled(model, transient, names, fixed)(c.micro_batch[rows], c.tensor[rows])
        if freed:
            free = _compiled(model, sympy.Add(*(parts.get(p, 0) for p in freed)), names, fixed)(c.micro_batch[rows], c.tensor[rows])
            rebuilt = np.where((c.pipeline[rows] == 1) & (rebuilt != 0), np.maximum(rebuilt - free, 0), rebuilt)
        loss = _compiled(model, backward_peak(model).xreplace(tensor_split(model, T)), names, fixed)(c.micro_batch[rows], c.tensor[rows])
        activations[rows] = keep / c.pipeline[rows] * in_flight[rows] + np.maximum(rebuilt, loss)  # never together (memory.backward_categories)
    held = static + activations
    return held if fw is None else held + _framework_overheads(model, fw, c, params, held, precision)


# --- time, vectorised --------------------------------------------------------------------------


def _grouped(keys: np.ndarray, compute) -> np.ndarray:
    """compute(row of keys) once per distinct row, gathered back to every candidate."""
    code = np.zeros(len(keys), dtype=np.int64)
    for column in keys.T:  # one integer per row (mixed radix over each column's distinct values): a fast 1-D unique
        values, ranks = np.unique(column, return_inverse=True)
        code = code * len(values) + ranks.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    values = np.array([compute(*(int(k) for k in keys[i])) for i in first], dtype=np.float64)
    return values[inverse.reshape(-1)]


def step_time_bounds(model: Model, c: Candidates, gpu, *, seq: int, global_batch: int, precision: str, flash: bool, dtype: str, node_size: int | None, finetune: FineTune | None = None, framework: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper bounds of ``training_time`` for every candidate (full overlap, none; 1F1B bubble)."""
    place = placement(gpu, node_size)
    peak, bandwidth = float(place.device.flops_per_s(dtype)), float(place.device.hbm_bytes_per_s)
    microbatches = global_batch // (c.micro_batch * c.data)
    t_math = np.zeros(len(c))
    t_mem = np.zeros(len(c))
    for index, mode in enumerate(RECOMPUTE):
        rows = c.recompute == index
        if not rows.any():
            continue
        train, (extra_flops, extra_bytes) = rank_work(model, _timed_mode(framework, finetune, mode), flash=flash, finetune=finetune)
        for target, work, rate in ((t_math, train.flops + extra_flops, peak), (t_mem, train.bytes + extra_bytes, bandwidth)):
            per_batch = _compiled(model, sympy.sympify(work), ("batch", "tensor"), {"seq": seq})
            target[rows] = microbatches[rows] * per_batch(c.micro_batch[rows], c.tensor[rows]) / c.pipeline[rows] / rate

    def layout(t, p, d, e, zero=0):
        return Layout(data=d, tensor=t, pipeline=p, expert=e, zero=zero, sequence=c.sequence_at(t))

    tensor, expert, pipeline = np.zeros(len(c)), np.zeros(len(c)), np.zeros(len(c))  # each kind's seconds
    tp = c.tensor > 1
    if tp.any():
        keys = np.stack([c.tensor, c.pipeline, c.data, c.micro_batch, c.recompute], axis=1)[tp]
        tensor[tp] = _grouped(keys, lambda t, p, d, b, r: tensor_comm(model, place, layout(t, p, d, 1), global_batch // (b * d), b, seq, _timed_mode(framework, finetune, RECOMPUTE[r])).seconds)
    ep = c.expert > 1
    if ep.any():
        keys = np.stack([c.tensor, c.pipeline, c.data, c.expert, c.micro_batch, c.recompute], axis=1)[ep]
        expert[ep] = _grouped(keys, lambda t, p, d, e, b, r: _seconds(expert_comm(model, place, layout(t, p, d, e), global_batch // (b * d), b, seq, _timed_mode(framework, finetune, RECOMPUTE[r]))))
    pp = c.pipeline > 1
    if pp.any():
        keys = np.stack([c.tensor, c.pipeline, c.data, c.micro_batch], axis=1)[pp]
        pipeline[pp] = _grouped(keys, lambda t, p, d, b: pipeline_comm(model, place, layout(t, p, d, 1), global_batch // (b * d), b, seq).seconds)
    step = np.zeros(len(c))
    dp = c.data > 1
    if dp.any():
        if finetune is None:
            params = _compiled(model, params_at_sizes(model, T, P, E), ("tensor", "pipeline", "expert"), {})
        else:  # the trainable weights' gradients only, on ranks without expert parallelism
            trained = _compiled(model, rank_share(model, T, P)(trainable_params(model, finetune)), ("tensor", "pipeline"), {})
            params = lambda t, p, e: trained(t, p)  # noqa: E731
        rows = c.take(dp)
        # parameters on each rank, and without expert parallelism: evaluated for every row at once, looked up by group
        counts = np.rint(np.stack([params(rows.tensor, rows.pipeline, rows.expert), params(rows.tensor, rows.pipeline, np.ones(len(rows)))], axis=1))
        keys = np.stack([rows.tensor, rows.pipeline, rows.data, rows.expert, rows.zero], axis=1)
        held = {(int(t), int(p), int(e)): (int(local), int(replicated)) for (t, p, _, e, _), (local, replicated) in zip(keys, counts)}

        def data(t, p, d, e, z):
            return data_comm(model, place, layout(t, p, d, e, z), precision, params=held[t, p, e]).seconds

        step[dp] = _grouped(keys, data)
    ratio = compile_expression(sympy.sympify(scaling.bubble_ratio("1f1b")), (scaling.STAGES.name, scaling.MICROBATCHES.name))
    bubble = np.where(c.pipeline > 1, ratio(c.pipeline, microbatches), 0.0)
    return step_bounds(t_math, t_mem, (tensor, expert, pipeline), step, bubble)


def _seconds(comm) -> float:
    return 0.0 if comm is None else comm.seconds


# --- the plan ------------------------------------------------------------------------------------


@dataclass
class PlannedLayout:
    layout: Layout
    micro_batch: int
    recompute: str
    memory: MemoryReport
    time: TrainingTime
    estimate: object | None = None  # symform.analysis.time.estimate's TrainingEstimate; None without the device's efficiency data


@dataclass
class Plan:
    model: str
    gpu: str
    devices: int
    global_batch: int
    seq: int
    candidates: int
    fitting: int
    screen_seconds: float
    best: list[PlannedLayout] = field(default_factory=list)
    assumptions: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "devices": self.devices,
            "global_batch": self.global_batch,
            "seq": self.seq,
            "candidates": self.candidates,
            "fitting": self.fitting,
            "screen_seconds": self.screen_seconds,
            "layouts": [
                {
                    "layout": {"data": p.layout.data, "tensor": p.layout.tensor, "pipeline": p.layout.pipeline, "expert": p.layout.expert, "zero": p.layout.zero, "sequence": p.layout.sequence},
                    "micro_batch": p.micro_batch,
                    "recompute": p.recompute,
                    "memory": p.memory.as_dict(),
                    "time": p.time.as_dict(),
                }
                | ({"estimate": p.estimate.as_dict()} if p.estimate is not None else {})
                for p in self.best
            ],
            "assumptions": self.assumptions,
        }


#: Layouts the estimate ranks: the best this many by the floor and by the sum at peak (the screen's two figures),
#: since the estimate, kernel by kernel, is too slow for every candidate.
SHORTLIST = 24


def _timed_mode(framework: str | None, finetune: FineTune | None, mode: str) -> str:
    """The recomputation a candidate's time charges: its mode as the framework runs it (its selective policy), as
    the plan's memory counts it (no framework for fine-tuning)."""
    return frameworks.timed_recompute(framework if finetune is None else None, mode)


def _timed(model: Model, gpu, fitting: Candidates, i: int, flash: bool, timing_args: dict, framework: str | None = None) -> TrainingTime:
    layout, micro_batch, recompute = fitting.layout(i, timing_args["global_batch"])
    return training_time(model, gpu, micro_batch=micro_batch, layout=layout, recompute=_timed_mode(framework, timing_args.get("finetune"), recompute), flash=flash, **timing_args)


def _by_estimate(model: Model, gpu, fitting: Candidates, order: np.ndarray, lower: np.ndarray, upper: np.ndarray, memory: np.ndarray, top: int, flash: bool, timing_args: dict, time_facts: TimeProfile | None = None, framework: str | None = None):
    """The screen's order with its head re-ranked by the estimate (then its ceiling, then memory): the floor
    ties wherever compute sets it (every layout at the same FLOPs per device), where the estimate's kernels and
    exposed communication tell them apart. The shortlist's bounds and estimates, by candidate, for reuse."""
    from ..time import estimate
    from ...engine.errors import ConfigError

    count = max(SHORTLIST, 4 * top)
    # the layouts no faster one beats on memory too come first: the ones a plan can list (dominated ones are dropped)
    head = order[undominated(memory[order])]
    shortlist = list(dict.fromkeys([*head[:count].tolist(), *order[:count].tolist(), *np.lexsort((memory, lower, upper))[:count].tolist()]))
    timed = {}
    for i in shortlist:
        bounds = _timed(model, gpu, fitting, i, flash, timing_args, framework)
        layout, micro_batch, _ = fitting.layout(i, timing_args["global_batch"])
        try:
            found = estimate.training_estimate(model, gpu, micro_batch=micro_batch, layout=layout, recompute=bounds.recompute, attention="sdpa" if flash else "eager", bounds=bounds, profile=time_facts, **timing_args)
        except ConfigError as e:
            if "no efficiency data" not in str(e):
                raise
            return order, {}
        timed[i] = (bounds, found)
    # equal estimates go by the estimate's own upper bound (its ceiling), not the sum at peak, which bounds nothing
    ranked = sorted(shortlist, key=lambda i: (timed[i][1].step.estimate, timed[i][1].step.ceiling, memory[i]))
    rest = [i for i in order.tolist() if i not in timed]
    return np.array(ranked + rest, dtype=np.int64), timed


def _sequence_note(model: Model, devices: int, seq: int) -> str:
    """What sequence parallelism does to the search: the tensor degrees left out because they do not split the sequence."""
    left_out = [t for t in tensor_degrees(model, devices) if seq % t]
    note = "beside every tensor degree above 1"
    if left_out:
        note += f"; tensor degrees {', '.join(map(str, left_out))} left out: they do not split the {seq:,}-token sequence (--no-sp searches them without it)"
    return note


def undominated(memory_in_order: np.ndarray) -> np.ndarray:
    """Of candidates sorted fastest first, those that no faster (or equally fast) one beats on memory too:
    each must need less memory than every candidate before it."""
    if not len(memory_in_order):
        return np.zeros(0, dtype=bool)
    before = np.concatenate(([np.inf], np.minimum.accumulate(memory_in_order)[:-1]))
    return memory_in_order < before


def plan(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    devices: int,
    global_batch: int,
    seq: int,
    precision: str = "mixed",
    optimizer: str = "adamw",
    flash: bool = False,
    dtype: str = "bf16",
    top: int = 5,
    node_size: int | None = None,
    memory_bytes: int | None = None,
    finetune: FineTune | None = None,
    framework: str | None = None,
    headroom: int = HEADROOM,
    time_facts: TimeProfile | None = None,
    sequence: bool | None = None,
) -> Plan:
    """The fastest layouts that fit: screened over every candidate, the best ``top`` worked out exactly
    (``finetune``: of a fine-tuning step, symform.analysis.memory.finetune), each leaving ``headroom`` bytes of the device free; with
    ``framework`` (formulas/frameworks), its selective recomputation, buffers and overheads counted; with
    ``time_facts`` (symform.analysis.time.efficiencies.profile), a framework release's overlaps and speeds in the
    estimates that rank the layouts; ``sequence``: sequence parallelism beside tensor parallelism (None: the
    framework's default, as torchtitan and Megatron run it; none without a framework or for fine-tuning)."""
    if isinstance(headroom, bool) or not isinstance(headroom, int) or headroom < 0:
        raise EvaluationError(f"headroom is {quoted(headroom)}; give the bytes to keep free on each device, 0 or more")
    for name, value in (("devices", devices), ("global_batch", global_batch), ("seq", seq), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EvaluationError(f"{name} is {quoted(value)}; give a whole number of 1 or more")
    check_count(devices, DEVICES, "devices", "DEVICES", f"plan for at most {DEVICES:,} devices")
    check_count(global_batch * seq, STEP_TOKENS, "tokens per step (global batch × seq)", "STEP_TOKENS", "give a smaller global batch or sequence")
    model.check_workload(seq=seq)
    place = placement(gpu, node_size)
    capacity = memory_bytes if memory_bytes is not None else int(place.device.memory_bytes)
    started = clock.perf_counter()
    if sequence is not None and not isinstance(sequence, bool):
        raise EvaluationError(f"sequence is {quoted(sequence)}; give True, False or None (the framework's default)")
    # the tensor-parallel layouts' sequence parallelism, as symform memory and symform time count a layout
    sequence = frameworks.sequence_parallel(framework if finetune is None else None, sequence, tensor=2)
    c = enumerate_layouts(model, devices, global_batch, finetune=finetune, recompute=recompute_modes(framework if finetune is None else None), sequence_of=seq if sequence else None)
    memory = memory_per_device(model, c, seq=seq, global_batch=global_batch, precision=precision, optimizer=optimizer, flash=flash, finetune=finetune, framework=framework)
    static, _ = static_per_device(model, c, precision=precision, optimizer=optimizer, finetune=finetune)
    fits = (memory <= capacity - headroom) & (static <= capacity)  # never a layout whose weights and states alone overflow
    fitting = c.take(fits)
    lower, upper = step_time_bounds(model, fitting, gpu, seq=seq, global_batch=global_batch, precision=precision, flash=flash, dtype=dtype, node_size=node_size, finetune=finetune, framework=framework) if len(fitting) else (np.array([]), np.array([]))
    order = np.lexsort((memory[fits], upper, lower))  # fastest first; then the better worst case, then less memory
    timing_args = dict(global_batch=global_batch, seq=seq, dtype=dtype, precision=precision, node_size=node_size, finetune=finetune)
    order, timed = _by_estimate(model, gpu, fitting, order, lower, upper, memory[fits], top, flash, timing_args, time_facts, framework)
    order = order[undominated(memory[fits][order])]
    screen = clock.perf_counter() - started
    best = []
    for i in order[:top]:
        layout, micro_batch, recompute = fitting.layout(int(i), global_batch)
        setup = Training(precision=precision, optimizer=optimizer, recompute=recompute, flash=flash, layout=layout, framework=framework if finetune is None else None)
        report = training_memory(model, batch=micro_batch, seq=seq, setup=setup) if finetune is None else finetune_memory(model, finetune, batch=micro_batch, seq=seq, training=setup)
        bounds, found = timed.get(int(i)) or (_timed(model, gpu, fitting, int(i), flash, timing_args, framework), None)
        best.append(PlannedLayout(layout, micro_batch, recompute, report, bounds, found))
    return Plan(
        model=model.name,
        gpu=place.name,
        devices=devices,
        global_batch=global_batch,
        seq=seq,
        candidates=len(c),
        fitting=int(fits.sum()),
        screen_seconds=screen,
        best=best,
        assumptions={
            "devices": place.spread(devices),
            "memory_budget_bytes": capacity,
            "headroom_bytes": headroom,
            "headroom": "kept free on every device for what no framework file counts (NCCL communicators' buffers, cuBLAS and cuDNN workspaces, kernels loaded late)",
            "framework": frameworks.framework(framework).describe() if framework and finetune is None else "none: the declared tensors alone",
            "time_facts": time_facts.applied() if time_facts is not None else "none: no framework's time facts in the estimates",
            "ranking": f"symform.analysis.time.estimate's step time, then its ceiling (every kernel at its sustained rates, nothing overlapped), then less memory, over the {SHORTLIST} best layouts by either of training_time's figures (by the floor, then the sum at peak, where the device has no efficiency data); a layout that a faster (or as fast) one beats on memory too is not listed",
            "schedule": "1F1B, stages holding equal numbers of layers",
            "sequence_parallel": _sequence_note(model, devices, seq) if sequence else "none: tensor parallelism's all-reduces",
            "search": f"tensor degrees dividing every tensor-parallel size, pipeline degrees dividing n_layers, expert degrees dividing data and n_experts, micro-batches {MICRO_BATCHES} dividing the batch per rank, ZeRO 0-3, recomputation {', '.join(RECOMPUTE)}",
            "precision": precision,
            "optimizer": optimizer,
            "flash_attention": flash,
        }
        | ({"fine_tuning": finetune.describe(), "fine_tuning_search": "no expert parallelism, ZeRO 0-2, no pipeline with frozen layer ranges (symform.analysis.memory.finetune.check_layout and symform time)"} if finetune else {}),
    )
