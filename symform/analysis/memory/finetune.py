"""Fine-tuning with adapters and frozen weights: LoRA, QLoRA, DoRA, frozen embeddings and layers.

Everything comes from the declarations: each primitive with weights says what
it costs frozen (``frozen`` in formulas/components: no weight gradient, so a
projection's backward is one product instead of two and it keeps its input only
for an adapter or a trained weight), and names its adapters by method
(``adapters``: ``lora_adapter``, ``dora_adapter`` in adapters.toml), bound to
the projection's own sizes. Which projections get one is a name: a part name
such as ``q_proj``, as peft's ``target_modules`` matches module names.

The model of autograd: nothing before the first trained weight is recorded
(frozen embeddings and the frozen first layers keep nothing and run no
backward); from the first layer with a trained weight on, every activation
needs a gradient. That is exact where the input needs gradients anyway
(gradient checkpointing, ``enable_input_require_grads``, peft's
``prepare_model_for_kbit_training``), and for the FLOPs where that layer's
first op has a trained weight (a trained norm). Otherwise PyTorch also skips,
in that one layer, the input gradients of the frozen projections before its
first adapter, and a trained first norm there keeps only what its weight's
gradient reads; symform counts both as if the input needed a gradient.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import sympy

from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import Number
from ...engine.graph.graph import ComponentGraph, build_graph
from ...engine.graph.model import Model, derived_quantities, quantity_names
from ...engine.language.safe_expr import parse
from .memory import MemoryReport, Training, _activations_per_device, _evaluator, _json, _report, attention_accounting, backward_categories, backward_peak_assumptions, optimizer_state_bytes, saved_activations, static_bytes, tensor_split, weight_format
from .settings import Layout, _pick, recipes
from .quantization import aliases, stored_bytes

METHODS = ("lora", "dora")
EMBEDDINGS = "embeddings"
ALL_LINEAR = "all-linear"  # peft's target_modules="all-linear": every linear projection but the output head
QLORA_FORMAT = "nf4-double"  # QLoRA's NormalFloat4 with double-quantised scales (Dettmers et al. 2023, §3)
QLORA_KEEP = ("lm_head",)  # transformers' bitsandbytes integration leaves the output head unquantised
_LAYERS = re.compile(r"layers:(\d+)(?:-(\d+))?")
ZERO, ONE = sympy.Integer(0), sympy.Integer(1)


@dataclass(frozen=True)
class FineTune:
    """What trains. ``targets``: the projections (part names, ``q_proj``) that get an adapter of ``rank``
    by ``method`` (lora or dora); with targets every base weight is frozen, as peft freezes them.
    ``freeze``: ``"embeddings"`` and layer ranges ``"layers:0-11"`` (the first twelve) that stay frozen and
    carry no adapter. ``base_format``: the frozen weights' stored format (QLoRA: ``nf4-double``); None
    stores them like trained ones. ``alpha`` scales the adapter's output and costs nothing."""

    rank: int = 0
    targets: tuple[str, ...] = ()
    method: str = "lora"
    alpha: int | None = None
    freeze: tuple[str, ...] = ()
    base_format: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise EvaluationError(f"adapter rank {self.rank!r}: give a whole number, 0 or more")
        if self.method not in METHODS:
            raise EvaluationError(f"unknown adapter method {self.method!r}; choose one of {', '.join(METHODS)}")
        for entry in self.freeze:
            if entry != EMBEDDINGS and not _layer_range(entry):
                raise EvaluationError(f"cannot freeze {entry!r}; give {EMBEDDINGS} or a layer range such as layers:0-11")
        if self.base_format is not None:
            weight_format(self.base_format)

    @property
    def adapters(self) -> bool:
        return bool(self.targets)

    @property
    def frozen_embeddings(self) -> bool:
        return self.adapters or EMBEDDINGS in self.freeze

    def frozen_layers(self) -> list[tuple[int, int]]:
        """Half-open ranges of frozen layer indices."""
        return [_layer_range(entry) for entry in self.freeze if entry != EMBEDDINGS]

    def summary(self) -> str:
        """One line: method, rank and targets, what is frozen, the base format."""
        return describe_text(self.describe())

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"freeze": list(self.freeze)} if self.freeze else {}
        if self.adapters:
            out.update(method=self.method, rank=self.rank, targets=list(self.targets), base_weights_frozen=True)
            if self.alpha is not None:
                out["alpha"] = self.alpha
        if self.base_format:
            out["base_format"] = self.base_format
        return out


def describe_text(described: dict[str, object]) -> str:
    """``FineTune.describe()`` as one line."""

    def item(key: str, value: object) -> str:
        key = key.replace("_", " ")
        return key if value is True else f"{key} {','.join(value) if isinstance(value, list) else value}"

    return "; ".join(item(k, v) for k, v in described.items())


def _layer_range(entry: str) -> tuple[int, int] | None:
    match = _LAYERS.fullmatch(entry.strip())
    if not match:
        return None
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise EvaluationError(f"{entry!r}: the range runs backwards; write layers:FIRST-LAST with FIRST ≤ LAST")
    return first, last + 1


@dataclass(frozen=True)
class Share:
    """Of one leaf's instances: the fraction whose weights train, the fraction carrying an adapter, and the
    fraction autograd never records (frozen, before the first trained weight)."""

    trained: sympy.Expr = ONE
    adapted: sympy.Expr = ZERO
    silent: sympy.Expr = ZERO


class Plan:
    """Each leaf's share of trained, adapted and silent instances, and the adapters' expressions."""

    def __init__(self, model: Model, setup: FineTune):
        self.model, self.setup = model, setup
        self.graph = model.graph()
        self.nodes = self.graph.graph.nodes
        self._adapter_graphs: dict[tuple[str, ...], ComponentGraph] = {}  # one per adapter and projection shape
        self._layers = self._layer_shares()
        self.shares = {leaf: self._share(leaf) for leaf in self.graph.leaves()}
        self._check_targets()
        if all(s.trained == 0 and s.adapted == 0 for s in self.shares.values()):
            # nothing trains (every adapter in a frozen layer): autograd records nothing, the step is a forward
            self.shares = {leaf: Share(trained=ZERO, silent=ONE) for leaf in self.shares}
            self._layers = {node: (frozen, ONE) for node, (frozen, _) in self._layers.items()}

    # -- which instances train ---------------------------------------------------------------------

    def _layer_nodes(self) -> list[str]:
        """The outermost nodes of kind 'layer', in declaration order (a dense stack before its experts)."""
        layers = [n for n in self.graph.graph if self.nodes[n]["component"].kind == "layer"]
        return [n for n in layers if not any(n.startswith(other + "/") for other in layers)]

    def _layer_shares(self) -> dict[str, tuple[sympy.Expr, sympy.Expr]]:
        """Per layer node: the fraction of its layers frozen and the fraction before the first trained one."""
        ranges = self.setup.frozen_layers()
        nodes = self._layer_nodes()
        if ranges and not nodes:
            raise EvaluationError(f"{self.model.name} declares no layers (no component of kind 'layer'); freeze {EMBEDDINGS} or give adapter targets instead")
        counts = self._multiplicities["params"]
        shares, start = {}, 0
        frontier = _frontier(ranges) if self.setup.frozen_embeddings else 0
        for node in nodes:
            count = counts[node].xreplace(self.model._values)
            if not count.is_Integer:
                raise EvaluationError(f"{self.model.name}: the number of layers in {node} is {count}; give the model's sizes to freeze layers")
            count = int(count)
            frozen = sum(_overlap(start, start + count, a, b) for a, b in ranges)
            silent = _overlap(start, start + count, 0, frontier)
            shares[node] = (sympy.Rational(frozen, count or 1), sympy.Rational(silent, count or 1))
            start += count
        if any(b > start for _, b in ranges):
            raise EvaluationError(f"{self.model.name} has {start} layers (0 to {start - 1}); freeze a range within them")
        return shares

    def _layer_of(self, path: str) -> str | None:
        return next((n for n in self._layers if path == n or path.startswith(n + "/")), None)

    def _share(self, leaf: str) -> Share:
        node = self.nodes[leaf]
        component = node["component"]
        has_weights = node["quantities"]["params"] != 0
        layer = self._layer_of(leaf)
        frozen, silent = self._layers[layer] if layer else (ZERO, ZERO)
        if layer is None and component.name == "embedding" or self._tied(leaf):
            frozen = ONE if self.setup.frozen_embeddings else ZERO
            silent = frozen if layer is None and not self._tied(leaf) else ZERO
        if not has_weights:
            return Share(trained=ZERO, silent=silent)
        adapted = ZERO
        if self.setup.adapters and component.adapters and self._targeted(leaf) and not self._tied(leaf):
            adapted = ONE - frozen
        trained = ZERO if self.setup.adapters else ONE - frozen
        return Share(trained=trained, adapted=adapted, silent=silent)

    def _tied(self, leaf: str) -> bool:
        """A leaf that uses weights owned elsewhere (a tied output head): its params count zero times."""
        return self._multiplicities["params"][leaf] == 0 and self.nodes[leaf]["quantities"]["params"] != 0

    def _targeted(self, leaf: str) -> bool:
        """Whether the setup's targets name ``leaf``: by its part name, or every projection but the output head
        (peft's all-linear, which leaves out the model's output embeddings)."""
        if ALL_LINEAR in self.setup.targets:
            heads = set(aliases().roles.get("lm_head", ()))
            return not heads & set(leaf.split("/"))
        # peft adapts Linear modules by name; transformers holds routed experts as fused 3-D weights, none of them
        return leaf.rsplit("/", 1)[-1] in self._target_names and not self._under_experts(leaf)

    @cached_property
    def _target_names(self) -> set[str]:
        """The targets as symform's part names: transformers' module names (peft's target_modules) where they differ
        (checkpoints.toml's module_aliases: Gemma 4's per_layer_input_gate is ple_gate)."""
        renamed = aliases().module_aliases
        return {renamed.get(t, t) for t in self.setup.targets}

    def _under_experts(self, leaf: str) -> bool:
        """Whether ``leaf`` lies inside a part sharded over experts (a mixture of experts' routed experts)."""
        steps = leaf.split("/")
        edges = (self.graph.graph.get_edge_data("/".join(steps[:i]), "/".join(steps[: i + 1])) for i in range(1, len(steps)))
        return any(edge is not None and edge.get("shard") == "expert" for edge in edges)

    def _peft_fuses_experts(self) -> bool:
        from ...engine.language.families import all_families

        family = all_families().get(self.model.spec.family) if self.model.spec.family else None
        return family is not None and family.spec.peft_fused_experts

    def _check_targets(self) -> None:
        adaptable = [leaf for leaf in self.shares if self.nodes[leaf]["component"].adapters and not self._tied(leaf)]
        if ALL_LINEAR in self.setup.targets:
            if len(self.setup.targets) > 1:
                raise EvaluationError(f"{ALL_LINEAR} already names every projection; give it alone or name the projections")
            if any(self._under_experts(leaf) for leaf in adaptable):
                raise EvaluationError(
                    f"{self.model.name} has routed experts: peft's {ALL_LINEAR} also adapts transformers' fused 3-D expert weights "
                    "and the router, which symform does not model; name the projections instead (--lora-targets q_proj,k_proj,v_proj,o_proj)"
                )
            return
        experts = {leaf.rsplit("/", 1)[-1] for leaf in adaptable if self._under_experts(leaf)} & self._target_names
        if experts and self._peft_fuses_experts():
            raise EvaluationError(
                f"{self.model.name}: peft adapts the fused routed-expert weights for {', '.join(sorted(experts))} on this model type, which "
                "symform does not model; name projections outside the routed experts (attention, shared experts)"
            )
        names = {leaf.rsplit("/", 1)[-1] for leaf in adaptable}
        renamed = aliases().module_aliases
        unknown = [t for t in self.setup.targets if renamed.get(t, t) not in names]
        if unknown:
            raise EvaluationError(f"{self.model.name} has no projection named {unknown[0]!r} to adapt; its projections: {', '.join(sorted(names))}")

    # -- the adapters ------------------------------------------------------------------------------

    @cached_property
    def _multiplicities(self) -> dict[str, dict[str, sympy.Expr]]:
        return {q: self.graph.multiplicities(q) for q in ("params", "forward_flops", "backward_flops")}

    def adapter(self, leaf: str, quantity: str) -> sympy.Expr:
        """One instance of the adapter on ``leaf``: its ``quantity``, over the leaf's sizes and lora_rank."""
        node = self.nodes[leaf]
        name = node["component"].adapters[self.setup.method]
        args = node["args"]
        bindings = {"d_in": args["d_in"], "d_out": args["d_out"], "rows": args["rows"], "lora_rank": self.model.vocabulary["lora_rank"]}
        key = (name, *(sympy.srepr(bindings[k]) for k in ("d_in", "d_out", "rows")))
        if key not in self._adapter_graphs:
            self._adapter_graphs[key] = build_graph(self.model.library, name, bindings)
        return self._adapter_graphs[key].total(quantity)

    def _adapted_leaves(self) -> list[str]:
        return [leaf for leaf, share in self.shares.items() if share.adapted != 0]

    # -- totals ------------------------------------------------------------------------------------

    def trainable_params(self) -> sympy.Expr:
        weight = self._multiplicities["params"]
        base = sympy.Add(*(weight[leaf] * share.trained * self.nodes[leaf]["quantities"]["params"] for leaf, share in self.shares.items()))
        return sympy.expand(base + self._adapters_total("params"))

    def frozen_params(self) -> sympy.Expr:
        weight = self._multiplicities["params"]
        return sympy.expand(sympy.Add(*(weight[leaf] * (1 - share.trained) * self.nodes[leaf]["quantities"]["params"] for leaf, share in self.shares.items())))

    def _adapters_total(self, quantity: str) -> sympy.Expr:
        weight = self._multiplicities["params" if quantity == "params" else quantity]
        return sympy.Add(*(weight[leaf] * self.shares[leaf].adapted * self.adapter(leaf, quantity) for leaf in self._adapted_leaves()))

    def forward_flops(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(*self.leaf_flops("forward_flops").values()))

    def backward_flops(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(*self.leaf_flops("backward_flops").values()))

    def leaf_flops(self, quantity: str) -> dict[str, sympy.Expr]:
        """Each leaf's forward or backward FLOPs in the step, its adapter's on it (path → expression)."""
        weight = self._multiplicities[quantity]
        out = {}
        for leaf, share in self.shares.items():
            node = self.nodes[leaf]
            own = node["quantities"][quantity]
            if quantity == "forward_flops":
                term = weight[leaf] * own
            elif node["quantities"]["params"] == 0:
                term = weight[leaf] * (1 - share.silent) * own
            else:
                term = weight[leaf] * (share.trained * own + (1 - share.trained - share.silent) * node["frozen"]["backward_flops"])
            if share.adapted != 0:
                term += weight[leaf] * share.adapted * self.adapter(leaf, quantity)
            out[leaf] = term
        return out

    def kept(self, node: str, declared: sympy.Expr) -> sympy.Expr:
        """What ``node`` keeps for backward under fine-tuning (the hook of memory.saved_activations)."""
        if node not in self.shares:  # a recomputed or fused unit: nothing in the silent layers
            layer = self._layer_of(node)
            return declared * (1 - self._layers[layer][1]) if layer else declared
        share, data = self.shares[node], self.nodes[node]
        if data["quantities"]["params"] == 0:
            return (1 - share.silent) * declared
        if not data["component"].adapters:
            return share.trained * declared + (1 - share.trained - share.silent) * data["frozen"]["saved_activations"]
        # a projection keeps its input once for every adapter and trained weight that reads it (its sharers'
        # edges keep nothing of their own), and the adapters' own tensors ride on the same count
        group = [node, *self._sharers(node)]
        needed = sympy.Max(*(self.shares[m].trained + self.shares[m].adapted for m in group))
        adapters = sympy.Add(*(self.shares[m].adapted * self.adapter(m, "saved_activations") for m in group if self.shares[m].adapted != 0))
        return needed * declared + adapters

    @cached_property
    def _sharing(self) -> dict[str, list[str]]:
        """Keeper → the projections that read its input (``shares_input`` in the declarations)."""
        out: dict[str, list[str]] = {}
        for parent, child, edge in self.graph.graph.edges(data=True):
            if edge.get("shares_input"):
                keeper = f"{parent}/{edge['shares_input']}" if parent else edge["shares_input"]
                if keeper not in self.shares:
                    raise EvaluationError(f"{child} reads the input of {keeper}, which this model does not have; its declaration's shares_input names a missing part")
                out.setdefault(keeper, []).append(child)
        return out

    def _sharers(self, keeper: str) -> list[str]:
        return self._sharing.get(keeper, [])


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def _frontier(ranges: list[tuple[int, int]]) -> int:
    """The number of layers, counted from the first, that are all frozen."""
    end = 0
    for a, b in sorted(ranges):
        if a > end:
            break
        end = max(end, b)
    return end


# --- what users call ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FineTuneCounts:
    """Parameters and one training step's FLOPs of a fine-tuning setup, as numbers."""

    model: str
    params: int
    trainable_params: int
    frozen_params: int
    forward_flops: Number
    backward_flops: Number

    @property
    def step_flops(self) -> Number:
        return self.forward_flops + self.backward_flops

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "params": self.params,
            "trainable_params": self.trainable_params,
            "frozen_params": self.frozen_params,
            "forward_flops": _json(self.forward_flops),
            "backward_flops": _json(self.backward_flops),
            "step_flops": _json(self.step_flops),
        }


def finetune_expressions(model: Model, setup: FineTune) -> dict[str, sympy.Expr]:
    """Trainable, frozen and total parameters and a training step's forward and backward FLOPs, as
    expressions over the sizes, lora_rank, batch and seq (conventions applied)."""
    return {k: sympy.expand(v.xreplace(model.conventions)) for k, v in _step_expressions(model, setup).items()}


def _step_expressions(model: Model, setup: FineTune) -> dict[str, sympy.Expr]:
    """finetune_expressions' quantities with the conventions left as symbols."""
    plan = Plan(model, setup)
    trainable, frozen = plan.trainable_params(), plan.frozen_params()
    return {
        "params": trainable + frozen,
        "trainable_params": trainable,
        "frozen_params": frozen,
        "forward_flops": plan.forward_flops(),
        "backward_flops": plan.backward_flops(),
    }


def finetune_counts(model: Model, setup: FineTune, *, batch: int = 1, seq: int = 1) -> FineTuneCounts:
    values = {**model.values, "lora_rank": setup.rank, "batch": batch, "seq": seq}
    exprs = finetune_expressions(model, setup)
    evaluate = _evaluator(values)
    numbers = {k: evaluate(v) for k, v in exprs.items()}
    return FineTuneCounts(model.name, **{k: (int(v) if "params" in k else v) for k, v in numbers.items()})


def finetune_saved_activations(model: Model, setup: FineTune, *, recompute: str = "none", flash: bool = False):
    """What one training forward keeps for backward (kept, recompute transient, by component)."""
    plan = Plan(model, setup)
    return saved_activations(model, recompute=recompute, flash=flash, kept_by=plan.kept)


def finetune_memory_expressions(
    model: Model, setup: FineTune, training: Training = Training(), *, bind_rank: bool = True
) -> tuple[dict[str, sympy.Expr], dict[str, sympy.Expr], dict[str, object]]:
    """Per-device bytes by category (over the sizes, batch and seq), the activations by component, and the
    assumptions: the frozen weights in their format, the trained ones with their master copy, gradients and
    optimizer states, and what the forward keeps for backward. ``bind_rank=False``: the categories alone,
    over lora_rank too (a sweep's)."""
    layout = training.layout
    if training.offload_layers:
        raise EvaluationError("activation offload is counted for full training; drop --offload-layers for a fine-tuning step")
    if training.recompute_layers is not None:
        raise EvaluationError("recomputing some layers only is counted for full training; drop --recompute-layers for a fine-tuning step")
    check_layout(setup, layout)
    precision = _pick(recipes().precision, training.precision, "precision")
    optimizer = _pick(recipes().optimizer, training.optimizer, "optimizer")
    model = model.with_conventions(act_bytes=precision.act)
    plan = Plan(model, setup)
    shards = {"optimizer_shards": layout.optimizer_shards, "gradient_shards": layout.shard_data if layout.zero >= 2 else 1, "weight_shards": layout.shard_data if layout.zero >= 3 else 1}
    share = rank_share(model, layout.tensor, layout.pipeline)
    trained = static_bytes(share(plan.trainable_params()), precision, optimizer, **shards)
    kept, transient, by_component = saved_activations(model, recompute=training.recompute, flash=training.flash, kept_by=plan.kept)
    categories = {
        "frozen_weights": share(_frozen_weight_bytes(plan, precision.weights)) / shards["weight_shards"],
        "trained_weights": trained["weights"],
        "master_weights": trained["master_weights"],
        "gradients": trained["gradients"],
        "optimizer": trained["optimizer"],
        "activations": _activations_per_device(kept, model, layout),
        **backward_categories(model, transient, layout),
    }
    rank = {model.vocabulary["lora_rank"]: sympy.Integer(setup.rank)} if bind_rank else {}
    categories = {k: sympy.expand(sympy.sympify(v).xreplace(rank)) for k, v in categories.items()}
    if not bind_rank:
        return categories, {}, {}
    components = {k: sympy.expand(_activations_per_device(v, model, layout).xreplace(rank)) for k, v in by_component.items()}
    counts = finetune_counts(model, setup)
    assumptions = {
        "fine_tuning": setup.describe(),
        "trainable_params": counts.trainable_params,
        "params": counts.params,
        "precision": training.precision,
        "optimizer": training.optimizer,
        "optimizer_state_bytes": _json(optimizer_state_bytes(precision, optimizer)),
        "act_bytes": precision.act,
        "recompute": training.recompute,
        "flash_attention": training.flash,
        "attention": attention_accounting(training.flash),
        **backward_peak_assumptions(layout),
        "data_parallel": layout.data,
        "zero": layout.zero,
        **_layout_assumptions(layout),
        "accounting": model.accounting or "default",
        "conventions": {s.name: _json(v) for s, v in model.conventions.items()},
    }
    return categories, components, assumptions


def finetune_memory(model: Model, setup: FineTune, *, batch: int, seq: int, training: Training = Training()) -> MemoryReport:
    """Bytes on one device for one fine-tuning step of ``batch`` sequences of ``seq`` tokens."""
    training.layout.check_sequence(seq)
    categories, components, assumptions = finetune_memory_expressions(model, setup, training)
    return _report(model.with_conventions(act_bytes=_pick(recipes().precision, training.precision, "precision").act), "train", categories, components, assumptions, batch=batch, seq=seq)


def _frozen_weight_bytes(plan: Plan, default_bytes: int) -> sympy.Expr:
    """Frozen weights at the base format's stored bytes (scales included; QLoRA keeps the head unquantised)
    or at the precision's bytes per weight."""
    setup = plan.setup
    weight = plan._multiplicities["params"]
    total = sympy.Integer(0)
    fmt = weight_format(setup.base_format) if setup.base_format else None
    keep = QLORA_KEEP if setup.base_format else ()
    for leaf, share in plan.shares.items():
        node = plan.nodes[leaf]
        if weight[leaf] == 0 or node["quantities"]["params"] == 0 or share.trained == 1:
            continue
        one = stored_bytes(fmt, node, leaf, keep) if fmt else default_bytes * node["quantities"]["params"]
        total += weight[leaf] * (1 - share.trained) * one
    return sympy.expand(total)


# --- layouts --------------------------------------------------------------------------------------

# peft's LoraParallelLinear (src/peft/tuners/lora/tp_layer.py), for Megatron's tensor-parallel layers: on a
# column-parallel projection lora_B is split by columns as the weight is and lora_A stays whole; on a
# row-parallel one lora_A is split by rows and lora_B stays whole. Symform's tensor split divides the
# projection's sharded width (heads, inner width, vocabulary), which the adapter is bound to, so this
# layout is what substituting the split into the adapter's own expressions gives.
TENSOR_PARALLEL_ADAPTERS = "peft LoraParallelLinear (tuners/lora/tp_layer.py): column-parallel projection: lora_A whole, lora_B split by columns; row-parallel: lora_A split by rows, lora_B whole"


def check_layout(setup: FineTune, layout: Layout) -> None:
    """Refuse, in one line each, the layouts whose fine-tuning symform does not model."""
    if layout.expert > 1:
        raise EvaluationError("fine-tuning with expert parallelism: which ranks hold the experts' adapters is not modelled; drop --ep")
    if layout.folded:
        raise EvaluationError("fine-tuning with an expert tensor degree of its own: which ranks hold the experts' adapters is not modelled; drop --etp")
    if layout.context > 1:
        raise EvaluationError("fine-tuning with context parallelism is not modelled; drop --cp")
    if layout.sequence and setup.adapters:
        raise EvaluationError("sequence parallelism with adapters: where the adapters gather the sequence is not modelled; drop --sp")
    if layout.pipeline > 1 and setup.frozen_layers():
        raise EvaluationError("frozen layer ranges make pipeline stages unequal and symform's stages are equal shares; drop --pp or the layers:... in --freeze")


def rank_share(model: Model, tensor, pipeline):
    """One rank's share of a weight total: the tensor split of the sharded widths, 1/pipeline of the model
    (degrees as numbers, or symbols for a planner's vectorised layouts)."""
    split = tensor_split(model, tensor)
    return lambda expr: sympy.expand(sympy.sympify(expr).xreplace(split) / pipeline)


def frozen_weight_bytes(model: Model, setup: FineTune, default_bytes: int) -> sympy.Expr:
    """The frozen weights' bytes, all of them (before any sharding), at the base format or ``default_bytes`` each."""
    return _frozen_weight_bytes(Plan(model, setup), default_bytes)


def kept_by(model: Model, setup: FineTune):
    """What each node keeps for backward under ``setup``: the hook of symform.analysis.memory.memory.saved_activations."""
    return Plan(model, setup).kept


def _layout_assumptions(layout: Layout) -> dict[str, object]:
    out: dict[str, object] = {}
    if layout.tensor > 1:
        out["tensor_parallel"] = layout.tensor
        out["adapters_under_tensor_parallelism"] = TENSOR_PARALLEL_ADAPTERS
    if layout.pipeline > 1:
        out.update(pipeline_parallel=layout.pipeline, schedule=layout.schedule, stages_balanced=True)
    if layout.replicate > 1:
        out["replicate"] = layout.replicate
    return out


def step_leaf_flops(model: Model, setup: FineTune) -> dict[str, sympy.Expr]:
    """Each leaf's FLOPs in one fine-tuning step, forward and backward with its adapter's (lora_rank bound,
    conventions not applied): what symform.analysis.time.roofline.phase_work counts for a training step."""
    plan = Plan(model, setup)
    forward, backward = plan.leaf_flops("forward_flops"), plan.leaf_flops("backward_flops")
    rank = {model.vocabulary["lora_rank"]: sympy.Integer(setup.rank)}
    return {leaf: sympy.expand((forward[leaf] + backward[leaf]).xreplace(rank)) for leaf in forward}


def kernel_passes(model: Model, setup: FineTune) -> dict[str, tuple[sympy.Expr, sympy.Expr, sympy.Expr]]:
    """Per leaf, how often a training step runs each of the three products symform.analysis.time.estimate counts for full
    training (forward, input gradient, weight gradient): a frozen projection skips the weight gradient, a leaf
    autograd never records runs its forward only. Averaged over a leaf's instances (a share of its layers frozen)."""
    plan = Plan(model, setup)
    out = {}
    for leaf, share in plan.shares.items():
        weighted = plan.nodes[leaf]["quantities"]["params"] != 0
        frozen = (1 - share.trained - share.silent) if weighted else 0
        out[leaf] = (ONE, 1 - share.silent, 1 - share.silent - frozen)
    return out


def trained_per_device(model: Model, setup: FineTune, layout: Layout) -> sympy.Expr:
    """The trainable weights on one rank of ``layout`` (tensor split, 1/pipeline), over the sizes."""
    return rank_share(model, layout.tensor, layout.pipeline)(trainable_params(model, setup))


def trainable_params(model: Model, setup: FineTune) -> sympy.Expr:
    """The weights that train (the data-parallel ranks exchange their gradients), over the sizes (lora_rank bound)."""
    return sympy.expand(Plan(model, setup).trainable_params().xreplace({model.vocabulary["lora_rank"]: sympy.Integer(setup.rank)}))


# --- sweeps ---------------------------------------------------------------------------------------

STEP_QUANTITIES = ("params", "trainable_params", "frozen_params", "forward_flops", "backward_flops")
MEMORY_PREFIX = "memory."
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def step_quantity_names() -> list[str]:
    """What a fine-tuning step counts: its parameters and FLOPs, and the declared quantities made of them
    alone (train_step_flops, train_flops); memory categories come as ``memory.NAME``."""
    derived = derived_quantities()
    built = [q for q, d in derived.items() if set(_IDENTIFIER.findall(d.expression)) & set(quantity_names()) <= set(STEP_QUANTITIES)]
    return [*STEP_QUANTITIES, *built]


@dataclass(frozen=True)
class FineTuneStep:
    """A fine-tuning step, for ``symform.sweep(..., training=FineTuneStep(setup, Training(...)))``: the sweep's
    quantities and ``memory.NAME`` categories are this step's (frozen weights in their format, adapters,
    gradients and optimizer states of the trainable weights only). ``lora_rank`` is bound to ``setup.rank``;
    leave ``rank`` 0 to sweep it (or give it in ``fixed=``)."""

    setup: FineTune
    training: Training = Training()

    def quantity_name(self, name: str) -> str:
        if not isinstance(name, str):
            raise EvaluationError(f"a quantity is named by a string such as 'trainable_params', not {type(name).__name__}")
        if name.startswith(MEMORY_PREFIX):
            return name
        key = name.replace("-", "_")
        allowed = step_quantity_names()
        if key in allowed:
            return key
        choices = ", ".join([*allowed, "memory.NAME"])
        if key in quantity_names():
            raise EvaluationError(f"{name} is not counted for a fine-tuning step; sweep it without the fine-tuning options, or choose one of {choices}")
        raise EvaluationError(f"unknown quantity {name!r} of a fine-tuning step; choose one of {choices}")

    def quantity_expression(self, model: Model, name: str, swept) -> sympy.Expr:
        """The step's ``name`` over the swept names; conventions stay symbols where swept."""
        rank = self._rank(model, set(swept))
        if name.startswith(MEMORY_PREFIX):
            return self._memory(model, name[len(MEMORY_PREFIX):]).xreplace(rank)
        raw = _step_expressions(model, self.setup)
        if name in raw:
            expr = raw[name]
        else:
            names = {**{n: model.vocabulary[n] for n in model.vocabulary.names()}, **raw}
            expr = parse(derived_quantities()[name].expression, names)
        kept = {s: v for s, v in model.conventions.items() if s.name not in swept}
        return sympy.expand(expr.xreplace(kept).xreplace(rank))

    def _rank(self, model: Model, swept: set[str]) -> dict[sympy.Symbol, sympy.Integer]:
        if "lora_rank" not in swept:
            return {model.vocabulary["lora_rank"]: sympy.Integer(self.setup.rank)} if self.setup.rank else {}
        if not self.setup.adapters:
            raise EvaluationError("lora_rank is swept but no projection carries an adapter; name the targets (--lora-targets q_proj,v_proj)")
        if self.setup.rank:
            raise EvaluationError(f"lora_rank is swept and also given as the adapters' rank ({self.setup.rank}); give it in one place")
        return {}

    def _memory(self, model: Model, category: str) -> sympy.Expr:
        categories, _, _ = finetune_memory_expressions(model, self.setup, self.training, bind_rank=False)
        if category == "total":
            return sympy.expand(sympy.Add(*categories.values()))
        if category not in categories:
            raise EvaluationError(f"unknown memory category {category!r} of a fine-tuning step; choose one of {', '.join(['total', *categories])} (as memory.NAME)")
        return categories[category]
