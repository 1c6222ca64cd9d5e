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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from fractions import Fraction

import sympy

from ..memory import finetune, partial_recompute
from ..parallel import parallel_comm, pipeline_layout, scaling
from ..memory.finetune import FineTune
from ..parallel.collectives import link_latency
from ...engine.errors import ConfigError, EvaluationError
from ..devices.hardware import Hardware
from ..memory.memory import Training, check_pipeline, expert_params_per_device, params_on_rank, tensor_split, training_memory
from ..memory.settings import PER_OP, PER_OP_SAVED_COLLECTIVES, Layout, recipes
from ...engine.graph.model import Model
from .roofline import phase_work
from .step_model import Comm, Number, Placement, TENSOR, _act_bytes, _bandwidth, _bind, _comm, _json, _layers, _per_device, _sizes, _whole, at_dtype, dtype_assumption, placement, rank_sizes, rank_work, reductions_said, step_bounds, tensor_reductions, transfer_seconds, utilisation


# --- the hardware: one accelerator, its node and its links --------------------------------


# --- symbols and numbers --------------------------------------------------------------------


# --- recomputation ---------------------------------------------------------------------------


# --- communication ---------------------------------------------------------------------------


#: The kinds of communication that run once per step, after the micro-batches' work: the data-parallel gradient
#: exchange and, under hybrid sharding, its all-reduce across the replicas.
ONCE_PER_STEP = ("data", "replicate")


# --- results ----------------------------------------------------------------------------------


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
    stage_pace: float = 1.0  # the slowest pipeline device's work over the mean device's (a named stage layout; 1 balanced)
    assumptions: dict[str, object] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq

    @property
    def t_comm(self) -> float:
        return sum(c.seconds for c in self.comm.values())

    def _utilisation(self, flops: Number, seconds: float) -> float:
        return utilisation(flops, seconds, self.devices, self.peak_flops_per_s)

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
            "recompute": recompute_setting(self.recompute),  # the option's word; the policy timed, where a framework's:
            **({"recompute_policy": self.recompute} if self.recompute in PER_OP else {}),
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
            **({"stage_pace": self.stage_pace} if self.stage_pace != 1 else {}),
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
    layout.check_sequence(seq)
    layout.check_experts()
    if layout.etp > layout.tensor:  # its ranks hold other tokens than the attention's: Megatron gathers them
        raise ConfigError(f"an expert tensor degree of {layout.etp} above the tensor degree {layout.tensor} gathers each expert's tokens across its expert tensor ranks, which symform does not time; give an expert tensor degree of at most {layout.tensor}")
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
    offload_layers: int = 0,
    offload_framework: str | None = None,
    recompute_layers: int | None = None,
) -> TrainingTime:
    """Bounds on one training step of ``global_batch`` sequences of ``seq`` tokens under ``layout``.

    ``recompute_layers``: with ``recompute="full"``, only these layers of each pipeline chunk recomputed
    (Megatron-Core's block method; symform.analysis.memory.partial_recompute): that share of the recomputed forward
    and of its collectives.

    ``offload_layers``: layers whose saved activations go to host memory and back each micro-batch
    (``offload_comm``): a part that overlaps the compute, like the communication; their bytes as
    ``offload_framework`` (formulas/frameworks) counts them, the declared tensors where it is None.

    ``finetune``: adapters or frozen weights (symform.analysis.memory.finetune): the step's FLOPs are the fine-tuning
    step's (no weight gradients for frozen weights, the adapters' own), and the data-parallel ranks exchange
    the trainable weights' gradients only; the bytes moved stay full training's.

    Devices = data × tensor × pipeline × context (context ranks split every sequence,
    with ring attention's key/value passes); experts are spread over the data and context
    ranks (expert divides data × context), or folded over the tensor ranks too with an expert tensor degree of
    their own (Layout.expert_tensor). Each data-parallel rank runs global_batch /
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
    if recompute_layers is not None and layout.pipeline_layout is not None:
        raise ConfigError("--recompute-layers counts the layers of balanced pipeline chunks, and a pipeline layout's stages hold their own; give --recompute full or selective, or drop the layout")
    if recompute_layers is not None and finetune is not None:
        raise ConfigError("--recompute-layers times a full training step; a fine-tuning step recomputes every layer or none (drop it)")
    share = recompute_share(model, recompute_layers, recompute, layout)
    train, (extra_flops, extra_bytes) = rank_work(model, recompute, flash=flash, finetune=finetune)
    extra_flops, extra_bytes = extra_flops * sympy.Rational(share), extra_bytes * sympy.Rational(share)
    per_device = _per_device(model, {TENSOR: layout.tensor}, layout.pipeline, layout.context)
    m = scaling.MICROBATCHES
    flops_expr = m * per_device(train.flops + extra_flops)
    bytes_expr = m * per_device(train.bytes + extra_bytes)
    workload = {"batch": micro_batch, "seq": seq}
    workload[m.name] = microbatches  # bound with the sizes: no sum rebuilt with it in first
    flops = _bind(model, flops_expr, **workload)
    moved = _bind(model, bytes_expr, **workload)
    exchanged = None if trainable is None else _bind(model, trainable)
    comm = _training_comm(model, place, layout, microbatches, micro_batch, seq // layout.context, recompute, precision, exchanged, share)
    if offload_layers:
        comm["offload"] = offload_comm(model, place, Training(precision=_saved_precision(dtype, precision), recompute=recompute_setting(recompute), flash=flash, layout=layout, framework=offload_framework, offload_layers=offload_layers, recompute_layers=recompute_layers), microbatches, micro_batch, seq)
    ratio = float(scaling.bubble_ratio(layout.schedule, layout.pipeline, microbatches, layout.chunks)) if layout.pipeline > 1 else 0.0
    pace = float(stage_pace(model, layout, micro_batch, seq))
    t_math, t_mem = pace * float(flops) / peak, pace * float(moved) / bandwidth
    lower, upper = _step_bounds(t_math, t_mem, comm, ratio)
    model_flops = _model_flops(model, finetune, global_batch, seq)
    whole = {TENSOR: 1}  # the step on one device, unsplit
    hardware_flops = _bind(model, train.flops + extra_flops, batch=global_batch, seq=seq, **{TENSOR.name: 1})  # whole
    return TrainingTime(
        model=model.name,
        gpu=place.name,
        dtype=dtype,
        devices=layout.data * layout.tensor * layout.pipeline * layout.context,
        layout=layout.described() | {"microbatches": microbatches},
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
        stage_pace=pace,
        expressions={
            "flops_per_device": _sizes(model, flops_expr),
            "bytes_per_device": _sizes(model, bytes_expr),
            "recompute_flops": _sizes(model, extra_flops.xreplace(whole)),
            "bubble_ratio": sympy.sympify(scaling.bubble_ratio(layout.schedule)) if layout.pipeline > 1 else sympy.Integer(0),
        },
        assumptions=_training_assumptions(place, dtype, layout, recompute, flash, precision, comm) | (_finetune_assumptions(finetune) if finetune else {}) | ({"activation_offload": OFFLOAD} if offload_layers else {}) | ({"tensor_parallel": _tensor_assumption(model, layout)} if layout.tensor > 1 else {})
        | ({"recompute_layers": f"{recompute_layers} layers of each pipeline chunk recomputed in full, the rest kept: {float(share):.4g} of full recomputation's forward and collectives"} if recompute_layers else {})
        | ({"stage_layout": f"the stages as the layout {layout.pipeline_layout!r} places them: the slowest device holds {pace:.4g}× the mean device's forward FLOPs, and paces the pipeline (its work, and the bubble with it, scaled by that; each t weighs the stack's mean layer); per-device FLOPs and bytes are the mean's, and the memory check keeps balanced stages"} if layout.pipeline_layout else {}),
    )


def stage_pace(model: Model, layout: Layout, micro_batch: int, seq: int) -> Fraction:
    """How much longer the slowest pipeline device's share takes than the mean's, for a layout that names its stages
    (symform.analysis.parallel.pipeline_layout; 1 without one: stages balanced). Each letter's work is its parts'
    forward FLOPs at one micro-batch (pipeline_layout.PARTS; every other part goes with E): ``t`` the layer
    stack's mean layer, ``m`` one multi-token-prediction module."""
    if layout.pipeline_layout is None:
        return Fraction(1)
    stages = pipeline_layout.parse(layout.pipeline_layout, layout.pipeline * layout.chunks)
    parts = model.evaluate_breakdown("forward_flops", batch=micro_batch, seq=seq)
    placed = {letter: [name for name in names if name in parts] for letter, names in pipeline_layout.PARTS.items()}
    if not placed["t"]:
        raise ConfigError(f"a pipeline layout places transformer layers (t), and {model.name} has no layer stack; drop the layout")
    named, layers = pipeline_layout.counts(stages), model.values.get("n_layers")
    if named["t"] != layers:
        raise ConfigError(f"the pipeline layout places {named['t']} transformer layers (t) where {model.name} has {layers}; give one t for each layer")
    modules = model.values.get("n_mtp_layers", 1) if placed["m"] else 0
    if named["m"] != modules:
        raise ConfigError(f"the pipeline layout places {named['m']} multi-token-prediction modules (m) where {model.name} has {modules}; give one m for each" + ("" if modules else ", or give the model its modules (--set include_mtp=1 where it has them)"))
    known = {name for names in placed.values() for name in names}
    work = {letter: sum((Fraction(parts[name]) for name in names), Fraction(0)) for letter, names in placed.items()}
    work["E"] = sum((Fraction(v) for name, v in parts.items() if name not in known), Fraction(0))
    work["t"] /= layers
    work["m"] /= max(modules, 1)
    return pipeline_layout.pace(stages, layout.pipeline, work)


def recompute_setting(recompute: str) -> str:
    """The --recompute setting a recomputation mode stands for: a framework's per-op policy is its selective
    (frameworks.timed_recompute), the memory accounting's word for it under that framework."""
    return "selective" if recompute in PER_OP else recompute


def recompute_share(model: Model, layers: int | None, recompute: str, layout: Layout) -> Fraction:
    """Of full recomputation's forward, the share a step runs again: all of it, or with ``layers`` of each pipeline
    chunk recomputed (symform.analysis.memory.partial_recompute) theirs."""
    share = partial_recompute.recomputed_share(model, layers, recompute_setting(recompute), layout)
    return Fraction(1) if share is None else share


OFFLOAD = (
    "the offloaded layers' saved activations (symform memory --train --offload-layers, under the framework named for them, else the declared tensors) cross the host link "
    "(the device's interconnect.pcie: PCIe, or NVLink-C2C on a superchip) twice per micro-batch, to the host in forward and back in backward, at its one-way bandwidth; "
    "copied on their own streams beside the compute (Transformer Engine's offload handler), so they overlap it as communication does"
)


def _saved_precision(dtype: str, precision: str) -> str:
    """The memory recipe whose activations a step saves: fp8 where its products run in FP8 (a framework's FP8 linears
    keep their inputs in FP8, formulas/frameworks), else the step's own."""
    return "fp8" if dtype == "fp8" and precision == "mixed" else precision


def offload_comm(model: Model, place: Placement, setup: Training, microbatches: int, micro_batch: int, seq: int) -> Comm:
    """Activation offload's transfers in one step: each micro-batch's offloaded bytes to the host and back."""
    if "pcie" not in place.device.interconnect:
        raise ConfigError(f"{place.device.name} has no host link (interconnect.pcie) in its hardware file, so activation offload cannot be timed; add its figure or drop --offload-layers")
    host = training_memory(model, batch=micro_batch, seq=seq, setup=setup).assumptions["activation_offload_host_bytes"]
    moved = 2 * host * microbatches
    return Comm(moved / _bandwidth(place, "pcie"), float(moved), "pcie", 1)


def _check_chunks(model: Model, layout: Layout) -> None:
    """A virtual pipeline (interleaved 1F1B): chunks > 1 only with that schedule and a pipeline, each chunk at least one
    layer. Chunks that do not split the layers evenly (61 layers in 4 stages × 4 chunks, as Megatron-Core's
    pipeline layouts run DeepSeek-V3) are balanced like stages: each holds an equal share of the work."""
    if layout.chunks == 1:
        return
    if layout.schedule != "interleaved" or layout.pipeline == 1:
        raise ConfigError(f"{layout.chunks} model chunks per device is the interleaved schedule's virtual pipeline; give the interleaved schedule and a pipeline degree above 1, or drop the chunks")
    check_pipeline(model, layout.pipeline, layout.chunks)


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


def _step_bounds(t_math: float, t_mem: float, comm: Mapping[str, Comm], ratio: float) -> tuple[float, float]:
    """Lower and upper bounds of the step, bubble included.

    The pipeline's bubble stretches the micro-batch work (compute, memory traffic, and
    the tensor, expert and pipeline communication inside it) by 1 + bubble ratio. The
    data-parallel gradient exchange (with hybrid sharding, its all-reduce across the
    replicas too) runs once per step: at best hidden under that work, at worst after it.
    """
    inside = tuple(c.seconds for k, c in comm.items() if k not in ONCE_PER_STEP)
    step = comm["data"].seconds if "data" in comm else 0.0
    if "replicate" in comm:  # after the shard group's reduce-scatter it feeds on
        step += comm["replicate"].seconds
    lower, upper = step_bounds(t_math, t_mem, inside, step, ratio)
    return float(lower), float(upper)


def _training_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str, precision: str, trainable: Number | None = None, share: Fraction = Fraction(1)) -> dict[str, Comm]:
    """``trainable``: with frozen weights, the parameters per device whose gradients are exchanged; ``share``: of
    the layers, those full recomputation runs again (recompute_share)."""
    comm: dict[str, Comm] = {}
    if layout.tensor > 1:
        comm["tensor"] = tensor_comm(model, place, layout, microbatches, micro_batch, seq, recompute, share)
    expert = expert_comm(model, place, layout, microbatches, micro_batch, seq, recompute, share)
    if expert is not None:
        comm["expert"] = expert
    if layout.context > 1:
        comm["context"] = context_comm(model, place, layout, microbatches, micro_batch, seq * layout.context, recompute, share)
    if layout.pipeline > 1:
        comm["pipeline"] = pipeline_comm(model, place, layout, microbatches, micro_batch, seq)
    if layout.data * layout.context > 1:
        # gradients reduce over the data and context ranks together (Megatron-LM's data-parallel group with context parallelism)
        data = replace(layout, data=layout.data * layout.context, context=1)
        params = None if trainable is None else (trainable, trainable)
        comm["data"] = data_comm(model, place, data, precision, params=params)
        if layout.replicate > 1:
            comm["replicate"] = replica_comm(model, place, data, precision, params=params)
    return comm


def _again(layer: list[parallel_comm.Transfer], again: Number, saved: tuple[str, ...] = ()) -> list[parallel_comm.Transfer]:
    """A layer's transfers with its forward's run ``again`` times more: full recomputation's forward (a share of it
    where only some layers are recomputed), or a per-op policy's replay, whose ``saved`` collectives' results it
    keeps rather than run again."""
    if not again:
        return list(layer)
    return list(layer) + [x if again == 1 else replace(x, count=x.count * Fraction(again)) for x in layer if x.phase == "forward" and x.collective not in saved]


def _rerun(recompute: str, share: Fraction) -> tuple[Number, tuple[str, ...]]:
    """How often a layer's forward collectives run again in backward, and those whose results are kept instead: once
    (``share`` of the layers) under full recomputation, once under a per-op policy that replays the layer (those it
    saves kept), never under attention-core selective or none."""
    if recompute == "full":
        return share, ()
    if recompute in PER_OP_SAVED_COLLECTIVES:
        return 1, PER_OP_SAVED_COLLECTIVES[recompute]
    return 0, ()


def context_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str, share: Fraction = Fraction(1)) -> Comm:
    """Ring attention's key/value passes in every layer (context ranks sit next to the tensor ranks)."""
    v = model.values
    kv_width = v.get("n_kv_heads", v.get("n_heads", 1)) * v.get("d_head", v.get("d_model", 1) // max(v.get("n_heads", 1), 1))
    layer = parallel_comm.context_parallel_layer(batch=micro_batch, seq=seq, kv_width=kv_width, bytes_per_element=_act_bytes(model), context=layout.context)
    layer = _again(layer, *_rerun(recompute, share))
    layers, _ = _layers(model)
    return _comm(layer, microbatches * layers / layout.pipeline, place, layout.tensor * layout.context, layout.context)


def _activation_sizes(model: Model, micro_batch: int, seq: int) -> dict[str, int]:
    return {"batch": micro_batch, "seq": seq, "d_model": model.values.get("d_model", 1), "bytes_per_element": _act_bytes(model)}


def tensor_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str, share: Fraction = Fraction(1)) -> Comm:
    # recomputation runs each layer's forward again, with its forward communication (_rerun)
    layers, _ = _layers(model)
    return _tensor_comm(model, place, layout, microbatches, _activation_sizes(model, micro_batch, seq), layers, *_rerun(recompute, share))


def expert_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int, recompute: str, share: Fraction = Fraction(1)) -> Comm | None:
    """All-to-all of the routed tokens in every mixture-of-experts layer (None without expert parallelism). Each rank
    dispatches the tokens it holds: with sequence parallelism, its 1/tensor share of the sequence (Megatron-Core runs
    experts beside tensor parallelism only so: megatron/core/transformer/moe/README.md)."""
    _, moe_layers = _layers(model)
    if layout.expert == 1 or not moe_layers:
        return None
    sizes = _activation_sizes(model, micro_batch, seq)
    tokens = micro_batch * held_tokens(layout, seq)
    layer = list(_expert_layer(tokens, model.values["top_k"], sizes["d_model"], sizes["bytes_per_element"], layout.expert))
    per_layer = _again(layer, *_rerun(recompute, share))
    # expert ranks follow the expert tensor ranks, innermost (Megatron-Core's expert rank order: etp-ep-dp-pp)
    return _comm(per_layer, microbatches * moe_layers / layout.pipeline, place, layout.etp * layout.expert, layout.expert)


@lru_cache(maxsize=1024)
def _expert_layer(tokens: int, top_k: int, d_model: int, bytes_per_element: Number, expert: int) -> tuple[parallel_comm.Transfer, ...]:
    """One mixture-of-experts layer's all-to-alls, once per size: the planner's groups repeat a few."""
    return tuple(parallel_comm.expert_parallel_layer(tokens=tokens, top_k=top_k, d_model=d_model, bytes_per_element=bytes_per_element, expert=expert))


def held_tokens(layout: Layout, seq: int) -> int:
    """The tokens of each sequence a rank holds between layers: ``seq`` (its context-parallel share), and with
    sequence parallelism its 1/tensor of them (whole: _check_layout)."""
    return seq // layout.tensor if layout.sequence else seq


def pipeline_comm(model: Model, place: Placement, layout: Layout, microbatches: int, micro_batch: int, seq: int) -> Comm:
    """Each rank sends the stage's output as it holds it (held_tokens: Megatron-Core's schedules.get_tensor_shapes;
    torchtitan's stages hand on the sequence-sharded residual of its tensor-parallel plan)."""
    boundary = parallel_comm.pipeline_boundary(**_activation_sizes(model, micro_batch, held_tokens(layout, seq)))
    return _comm(boundary, microbatches * layout.chunks, place, layout.tensor * layout.context * layout.data * layout.pipeline, layout.pipeline)


def _tensor_comm(model: Model, place: Placement, layout: Layout, microbatches: int, sizes: dict, layers: int, again: Number, saved: tuple[str, ...] = ()) -> Comm:
    """Megatron's per-layer all-reduces (or sequence parallelism's gathers and scatters), the vocabulary-parallel embedding and head."""
    t, p = layout.tensor, layout.pipeline
    layer, ends = (list(x) for x in _tensor_transfers(layout.sequence, tuple(sizes.items()), model.values.get("vocab", 1), t, tensor_reductions(model)))
    layer = _again(layer, again, saved)
    link, per_node = place.link(t), place.per_node(t, t)
    seconds = transfer_seconds(layer, place, link, per_node=per_node) * layers + transfer_seconds(ends, place, link, per_node=per_node)
    sent = float(parallel_comm.bytes_per_rank(layer)) * layers + float(parallel_comm.bytes_per_rank(ends))
    # stages balanced: each holds 1/p of the layers and, spread the same way, of the ends
    return Comm(seconds * microbatches / p, sent * microbatches / p, link, t, per_node)


@lru_cache(maxsize=1024)
def _tensor_transfers(sequence: bool, sizes: tuple[tuple[str, Number], ...], vocab: int, tensor: int, reductions: int | Fraction) -> tuple[tuple[parallel_comm.Transfer, ...], tuple[parallel_comm.Transfer, ...]]:
    """One layer's tensor-parallel collectives (``reductions``: the reductions of its blocks' outputs its layers
    declare), and the vocabulary-parallel embedding's and head's, once per size."""
    given = dict(sizes)
    kind = parallel_comm.sequence_parallel_layer if sequence else parallel_comm.tensor_parallel_layer
    layer = kind(**given, tensor=tensor, reductions=reductions)
    ends = parallel_comm.vocab_parallel_embedding(**given, tensor=tensor) + parallel_comm.vocab_parallel_output_head(**given, vocab=vocab, tensor=tensor)
    return tuple(layer), tuple(ends)


def data_comm(model: Model, place: Placement, layout: Layout, precision: str, *, params: tuple[int, int] | None = None) -> Comm:
    """The gradient exchange of one step: dense gradients over all data-parallel ranks, expert gradients over data/expert ranks.

    ZeRO-3 adds the parameter gathers; ZeRO-1/2 and the distributed optimizer send the
    same bytes as an all-reduce (a reduce-scatter and an all-gather). Under hybrid sharding
    each group's collectives run inside one replica, over its ranks / replicate (consecutive).
    """
    shards = layout.data // layout.replicate
    span = layout.tensor * shards
    link = place.link(span)
    grads = _grad_bytes(precision)
    seconds = sent = 0.0
    for params, ranks in _gradient_groups(model, layout, params):
        if ranks // layout.replicate > 1 and params:
            transfers = _gradient_transfers(layout.zero >= 3, params, grads, ranks // layout.replicate)
            seconds += transfer_seconds(transfers, place, link, per_node=place.per_node(span, ranks // layout.replicate))
            sent += float(parallel_comm.bytes_per_rank(transfers))
    return Comm(seconds, sent, link, shards, place.per_node(span, shards))


def replica_comm(model: Model, place: Placement, layout: Layout, precision: str, *, params: tuple[int, int] | None = None) -> Comm:
    """Hybrid sharding's exchange across the replicas: each rank's gradient shard (its group's gradients / the
    group's ranks in one replica) all-reduced over the replicate ranks that hold the same shard (PyTorch FSDP2's
    HSDP, MaxText's DCN data parallelism). They sit one replica apart: the group spans all the data ranks."""
    replicas = layout.replicate
    transfers: list[parallel_comm.Transfer] = []
    for params, ranks in _gradient_groups(model, layout, params):
        if params:
            transfers += _gradient_transfers(False, Fraction(params) / (ranks // replicas), _grad_bytes(precision), replicas)
    span = layout.tensor * layout.data
    link, per_node = place.link(span), place.per_node(span, replicas)
    return Comm(transfer_seconds(transfers, place, link, per_node=per_node), float(parallel_comm.bytes_per_rank(transfers)), link, replicas, per_node)


def _grad_bytes(precision: str) -> int:
    if precision not in recipes().precision:
        raise EvaluationError(f"unknown precision {precision!r}; choose one of {', '.join(recipes().precision)}")
    return recipes().precision[precision].grads


def _gradient_groups(model: Model, layout: Layout, params: tuple[int, int] | None) -> list[tuple[Number, int]]:
    """The parameters on one rank whose gradients go over one group, and that group's ranks: the dense ones over the
    data ranks, the routed experts' over the expert-data-parallel group (tensor × data × context / (expert × expert
    tensor)). ``params``: this rank's parameters and what it would hold without expert parallelism, when known."""
    t, p, e, et = layout.tensor, layout.pipeline, layout.expert, layout.expert_tensor
    local, replicated = params or (params_on_rank(model, Layout(tensor=t, pipeline=p, expert=e, expert_tensor=et)), params_on_rank(model, Layout(tensor=t, pipeline=p, expert_tensor=et)))
    expert = Fraction(replicated - local, e - 1) if e > 1 else 0  # routed-expert parameters on this rank
    if layout.folded and e == 1:
        expert = _bind(model, expert_params_per_device(model, layout))
    return [(local - expert, layout.data)] + ([(expert, layout.expert_data)] if expert and layout.expert_data > 1 else [])


@lru_cache(maxsize=4096)
def _gradient_transfers(zero3: bool, params: Number, grads: Number, data: int) -> tuple[parallel_comm.Transfer, ...]:
    """One step's gradient exchange (ZeRO-3's gathers too) of ``params`` over ``data`` ranks, once per size: a plan's
    groups that differ in degrees the exchange does not read send the same."""
    step = parallel_comm.zero3_step if zero3 else parallel_comm.data_parallel_step
    return tuple(step(params=params, bytes_per_element=grads, data=data))


def _expert_assumption(layout: Layout) -> str:
    spread = (
        f"experts split over {layout.etp} expert tensor ranks and spread over {layout.expert} expert ranks folded over the tensor × data × context ranks (Megatron-Core's MoE parallel folding), their gradients exchanged over {layout.expert_data} expert-data-parallel ranks"
        if layout.folded else "experts spread over the data and context ranks (expert divides data × context)"
    )  # fmt: skip
    return f"{spread}; FLOPs and bytes per device unchanged under uniform routing; all-to-all of tokens × top_k per MoE layer"


RECOMPUTED_PARTS = {"selective": "attention cores", "full": "whole decoder layers", "none": "none"}
# a framework's per-op checkpointing policy (its selective: settings.PER_OP, formulas/frameworks)
PER_OP_PARTS = "the ops of each decoder layer whose results the framework's per-op policy does not save, as its memory counts them: step_model.kept_ops"


def _training_assumptions(place: Placement, dtype: str, layout: Layout, recompute: str, flash: bool, precision: str, comm: Mapping[str, Comm]) -> dict[str, object]:
    return {
        "peak": f"{place.device.name} dense {dtype} peak, no efficiency factor",
        "dtype": dtype_assumption(dtype),
        "hbm": f"{place.device.name} HBM bandwidth, no efficiency factor",
        "overlap": "floor (lower bound): compute, memory traffic and each kind of communication fully overlapped at peak (the longest); peak, no overlap: their sum (not a ceiling: kernels below peak take longer; the estimate's ceiling is)",
        "bytes": "HBM bytes as an unfused eager framework moves them; backward moves twice the forward's bytes; optimizer traffic not counted"
        + ("; FlashAttention in the attention cores" if flash else ""),
        "balance": "work, bytes and communication divide evenly: tensor-parallel sizes split exactly, pipeline stages hold equal shares (embedding and head included) unless a pipeline layout places them (stage_layout), routing is uniform over experts",
        "expert_parallel": _expert_assumption(layout),
        "recompute": f"{recompute}: one extra forward of the recomputed parts ({RECOMPUTED_PARTS.get(recompute, PER_OP_PARTS)})"
        + ("; with FlashAttention selective adds nothing beyond FlashAttention's own recomputation" if flash and recompute == "selective" else ""),
        "pipeline": f"{layout.schedule} schedule, bubble = bubble_ratio × the micro-batch work" if layout.pipeline > 1 else "no pipeline",
        "gradients": f"{precision} precision: {recipes().precision[precision].grads} bytes per gradient, exchanged once per step",
        "rank_order": "tensor ranks innermost, then context, expert and data, then pipeline (Megatron-LM's order); a group uses scale_up while its span of consecutive ranks fits in one node, scale_out otherwise; over scale_out a group's ranks in one node pool their NICs for rings and trees and send only other nodes' shares of an all-to-all over the network (step_model.group_bandwidth)",
        "devices": place.spread(layout.data * layout.tensor * layout.pipeline * layout.context),
        "node_size": place.node_size,
        "node_size_source": place.node_source,
        "links": {k: {"link": c.link, "bytes_per_s": _bandwidth(place, c.link), "latency_s": link_latency(c.link)} | ({"ranks_per_node": c.per_node} if c.link == "scale_out" and c.per_node > 1 else {}) for k, c in comm.items()},
        "collective_algorithm": "the faster of ring and tree for each collective where both are modelled (as NCCL picks by size)",
        "latency": "symform.analysis.parallel.collectives.DEFAULT_LATENCY_S per message, by link",
        "mfu": "model FLOPs = forward + backward of the step (no recomputation); HFU adds the recomputed FLOPs",
    } | ({"hybrid_sharding": _hybrid_assumption(layout)} if layout.replicate > 1 else {})


def _tensor_assumption(model: Model, layout: Layout) -> str:
    """What each layer's tensor-parallel collectives are, with the reductions its layers declare."""
    r = tensor_reductions(model)
    if layout.sequence:
        scatters = reductions_said(r, "reduce-scatter of the blocks' outputs forward")
        return f"per layer: 2 all-gathers of the sequence-sharded inputs and {scatters}, the reverse backward (Korthikanti et al. 2022)"
    reduces = reductions_said(r, "all-reduce of the blocks' outputs forward")
    return f"per layer: {reduces}, 2 of the inputs' gradients backward, one for each block's column-parallel input (Megatron's f and g)"


def _hybrid_assumption(layout: Layout) -> str:
    shard = layout.shard_data * layout.context
    ranks = "data and context" if layout.context > 1 else "data"
    return (
        f"ZeRO-{layout.zero} within each of {layout.replicate} replicas: its collectives over {shard} consecutive {ranks} ranks, "
        f"then each rank's 1/{shard} gradient shard all-reduced over the {layout.replicate} replicas, a group spanning all the {ranks} ranks, once per step"
    )


# --- inference ----------------------------------------------------------------------------------
