"""What a memory question is asked about: the recipes of formulas/memory.toml (precisions, optimizers), the recomputation modes and pipeline schedules, and Layout, the parallel degrees and ZeRO stage a model is spread with."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cache
from typing import Annotated, Mapping

import sympy

from ...engine.store.data import formulas_dir, read_toml
from ...engine.errors import ConfigError, DeclarationError, EvaluationError, describe_validation
from ...engine.budget import DEVICES, check_count, quoted
from ...engine.language.schema import SchemaError, above, at_least, build
from .quantization import WeightFormat
from ..parallel.pipeline_layout import parse as parse_pipeline_layout
from ..parallel.scaling import in_flight_microbatches


# what every inference phase sets: no loss runs, and generating turns each sequence's last position alone into
# logits (generate's logits_to_keep = 1; serving engines compute logits for the tokens they sample)
GENERATING = {"training": 0, "all_logits": 0}


RECOMPUTE = ("none", "selective", "full")


# per-op checkpointing policies, a framework's reading of selective (symform.analysis.memory.frameworks): inside a
# checkpointed layer they keep its input and the outputs of some matrix products, and rebuild the rest in backward.
# every: which products' outputs they keep (1: each one; 2: the 1st, 3rd, ... in forward order); biased: whether a
# linear with a bias counts as a product; kernel_outputs: whether the fused attention kernel's results are kept;
# branch_ends: whether the last product of each part of the layer, whose output only enters the residual sum, is kept
# (JAX saves only values backward reads; PyTorch's selective checkpointing stores each chosen op's output)
PER_OP = {
    "saved_ops": {"every": 2, "biased": False, "kernel_outputs": True, "branch_ends": True},  # torchtitan's _apply_op_sac
    "saved_dots": {"every": 1, "biased": True, "kernel_outputs": False, "branch_ends": False},  # JAX's checkpoint_dots_with_no_batch_dims
}

# the collectives whose results a per-op policy saves, so that backward's replay of a layer runs its other forward
# collectives again (sequence parallelism's all-gathers, tensor parallelism's all-reduces, context parallelism's
# passes): torchtitan's save list holds reduce_scatter_tensor (9dec370) and all_to_all_single (b5bcd76c: the
# experts' dispatch and combine); JAX's policies save none
PER_OP_SAVED_COLLECTIVES = {"saved_ops": ("reduce_scatter", "all_to_all"), "saved_dots": ()}

# the modes that rebuild a unit in backward: the user's settings and the per-op policies
REBUILDING = ("selective", "full", *PER_OP)


Degree = int | sympy.Expr


SCHEDULES = ("1f1b", "interleaved", "gpipe", "naive")


Positive = Annotated[int, above(0)]
Nonnegative = Annotated[int, at_least(0)]


@dataclass(frozen=True, kw_only=True)
class Precision:
    doc: str
    source: str = ""
    weights: Positive
    master: Nonnegative
    grads: Positive
    state: Positive
    act: Positive


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    doc: str
    source: str = ""
    states: Nonnegative
    state_bytes: str | None = None


@dataclass(frozen=True, kw_only=True)
class Recipes:
    precision: dict[str, Precision]
    optimizer: dict[str, Optimizer]
    weight_format: dict[str, WeightFormat]


@cache
def recipes() -> Recipes:
    try:
        return build(Recipes, read_toml(formulas_dir() / "memory.toml"))
    except SchemaError as e:
        raise DeclarationError(f"memory.toml: {describe_validation(e)}") from None


def _pick(table: Mapping[str, object], name: str, what: str):
    if name not in table:
        raise EvaluationError(f"unknown {what} {name!r}; choose one of {', '.join(table)}")
    return table[name]


def check_degree(name: str, value: object) -> None:
    """A parallel degree: a whole number from 1 to the DEVICES budget (10**5000 ranks is refused, not computed with)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EvaluationError(f"{name} parallel degree is {quoted(value)}; give a whole number of 1 or more")
    check_count(value, DEVICES, f"{name} parallel degree", "DEVICES", f"give at most {DEVICES:,} ranks")


@dataclass(frozen=True)
class Layout:
    """How the work is split: degrees of each kind of parallelism, ZeRO stage, pipeline schedule."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    expert: int = 1
    context: int = 1
    sequence: bool = False  # sequence parallelism alongside tensor parallelism (Korthikanti et al.)
    zero: int = 0  # 1: optimizer states, 2: + gradients, 3: + weights sharded over the data-parallel ranks
    distributed_optimizer: bool = False  # Megatron's: optimizer states sharded over data-parallel ranks (as ZeRO-1)
    schedule: str = "1f1b"
    microbatches: int | None = None  # per step and pipeline; default: as many as stages
    chunks: int = 1  # model chunks per device in the interleaved schedule
    # the routed experts' own tensor-parallel degree (Megatron-Core's expert_tensor_parallel_size); None: the tensor
    # degree. Another degree folds the expert-parallel group over the tensor ranks too (Megatron-Core's MoE parallel
    # folding): the expert layers split a stage's tensor × context × data ranks as expert tensor × expert × expert data
    expert_tensor: int | None = None
    # hybrid sharding (PyTorch FSDP2's HSDP, torchtitan's dp_replicate, MaxText's dcn_data_parallelism): the data ranks
    # form this many replicas, each sharding the ZeRO stage's copies over its data / replicate ranks (consecutive)
    replicate: int = 1
    # the stages as the framework places them (Megatron-Core's pipeline_model_parallel_layout, e.g. "Etttt|(tttt|)*14tmL";
    # symform.analysis.parallel.pipeline_layout); None: balanced stages, each 1/pipeline of the model
    pipeline_layout: str | None = None

    def __post_init__(self) -> None:
        for name in ("data", "tensor", "pipeline", "expert", "context", "chunks"):
            check_degree(name, getattr(self, name))
        if self.expert_tensor is not None:
            check_degree("expert tensor", self.expert_tensor)
        if self.zero not in (0, 1, 2, 3):
            raise EvaluationError(f"ZeRO stage {self.zero!r} does not exist; choose 0, 1, 2 or 3")
        if self.schedule not in SCHEDULES:
            raise EvaluationError(f"unknown pipeline schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.microbatches is not None and (not isinstance(self.microbatches, int) or self.microbatches < 1):
            raise EvaluationError(f"microbatches is {self.microbatches!r}; give a whole number of 1 or more")
        if self.sequence and self.tensor == 1:
            raise EvaluationError("sequence parallelism splits along the tensor-parallel ranks; give a tensor degree above 1 or drop sequence parallelism")
        self._check_replicate()
        if self.pipeline_layout is not None:
            if self.pipeline == 1:
                raise ConfigError("a pipeline layout places the model's layers on pipeline stages; give a pipeline degree above 1 or drop the layout")
            parse_pipeline_layout(self.pipeline_layout, self.pipeline * self.chunks)

    def _check_replicate(self) -> None:
        """Replicas of a sharded copy: a whole number of them among the data ranks, and something sharded to replicate."""
        check_degree("replicate", self.replicate)
        if self.data % self.replicate:
            raise EvaluationError(f"replicate {self.replicate} does not divide the {self.data} data-parallel ranks into equal shard groups; give a divisor of data")
        if self.replicate > 1 and self.zero == 0 and not self.distributed_optimizer:
            raise EvaluationError(f"replicate {self.replicate} replicates what ZeRO or a distributed optimizer shards (hybrid sharding), and ZeRO stage 0 without one shards nothing; give zero 1, 2 or 3 or the distributed optimizer, or replicate 1")

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def etp(self) -> int:
        """The tensor-parallel degree that splits each routed expert."""
        return self.tensor if self.expert_tensor is None else self.expert_tensor

    @property
    def folded(self) -> bool:
        """Whether the experts split by their own tensor degree, not the attention's."""
        return self.etp != self.tensor

    @property
    def expert_data(self) -> int:
        """The expert-data-parallel group: the ranks of one stage that hold the same experts' shard."""
        self.check_experts()
        return self.tensor * self.data * self.context // (self.expert * self.etp)

    def check_experts(self) -> None:
        """The expert layers fill one pipeline stage's ranks: expert × expert tensor divides tensor × data × context;
        under hybrid sharding, those of one replica, which shards the experts' copies over its own ranks."""
        stage = self.tensor * self.data * self.context
        if stage % (self.expert * self.etp):
            raise ConfigError(f"expert degree {self.expert} × expert tensor degree {self.etp} must divide a pipeline stage's tensor × data × context ranks ({stage}): the expert layers spread over them; choose degrees whose product divides it")
        if self.replicate > 1 and (stage // self.replicate) % (self.expert * self.etp):
            raise ConfigError(f"expert degree {self.expert} × expert tensor degree {self.etp} must divide one replica's tensor × data / replicate × context ranks ({stage // self.replicate}): each replica holds every expert; choose degrees whose product divides it")

    def described(self) -> dict[str, object]:
        """The layout's fields, the expert tensor degree only where one is given, the replicas only where more than one."""
        return {k: v for k, v in asdict(self).items() if (k not in ("expert_tensor", "pipeline_layout") or v is not None) and (k != "replicate" or v > 1)}

    @property
    def shard_data(self) -> int:
        """The data-parallel ranks one sharded copy spreads over: all of them, or one replica's under hybrid sharding."""
        return self.data // self.replicate

    @property
    def optimizer_shards(self) -> int:
        """The ranks that split the optimizer's states (static_shards' first)."""
        return self.static_shards()["optimizer_shards"]

    def static_shards(self, experts: bool = False) -> dict[str, int]:
        """The ranks that split each static copy (ZeRO, the distributed optimizer): the data-parallel ranks and the
        context-parallel ones, which hold the same parameters too (torchtitan shards FSDP over its dp_shard_cp mesh,
        Megatron-Core its gradients and distributed optimizer over the data-parallel group with context parallelism).
        The routed experts' copies (``experts``) split over the expert-data-parallel group, the ranks of that group
        that hold the same experts (DeepSpeed-MoE's expert-data-parallel groups, Megatron-Core's expert data
        parallelism): each expert's states are divided once by the expert ranks and once by that group, never twice.
        Under hybrid sharding each group is one replica's share: the replicas hold the same shards."""
        sharded = (self.zero >= 1 or self.distributed_optimizer, self.zero >= 2, self.zero >= 3)
        group = self.shard_data * self.context
        if experts and (self.expert > 1 or self.folded) and any(sharded):
            group = self.expert_data // self.replicate
        return {name: group if on else 1 for name, on in zip(("optimizer_shards", "gradient_shards", "weight_shards"), sharded)}

    @property
    def in_flight(self) -> sympy.Expr:
        """Micro-batches whose activations the first pipeline stage holds at its peak."""
        if self.pipeline == 1:
            return sympy.Integer(1)
        microbatches = self.microbatches or self.pipeline
        return sympy.nsimplify(in_flight_microbatches(self.schedule, self.pipeline, microbatches, self.chunks))

    @property
    def context_chunks(self) -> int:
        """The equal chunks context parallelism cuts a sequence into: two per rank, dealt out zigzag so that each
        rank's causal attention does the same work (Megatron-Core's get_batch_on_this_cp_rank: 'The sequence length
        must be divisible by 2 * cp_size'); none without it."""
        return 2 * self.context if self.context > 1 else 1

    @property
    def sequence_step(self) -> int:
        """What a sequence's length must be a multiple of: the context chunks, and with sequence parallelism each
        context rank's share splitting evenly over the tensor ranks too."""
        return math.lcm(self.context_chunks, self.context * (self.tensor if self.sequence else 1))

    def check_sequence(self, seq: int) -> None:
        """ConfigError where ``seq`` tokens do not split evenly over the ranks that share each sequence (any other
        value is left to the workload's own checks)."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            return
        if seq % self.context_chunks:
            raise ConfigError(f"sequence {seq} does not split into {self.context_chunks} equal chunks, two per context-parallel rank; give a multiple of {self.context_chunks}")
        if seq % self.sequence_step:
            raise ConfigError(
                f"sequence parallelism splits each sequence over the {self.tensor} tensor-parallel ranks, and {seq // self.context} tokens do not split evenly; "
                f"give a sequence that divides by {self.sequence_step}, or run tensor parallelism alone (--no-sp)"
            )
