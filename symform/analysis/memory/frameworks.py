"""Training frameworks as data (formulas/frameworks/*.toml): what a step under torchtitan, Megatron-Core,
DeepSpeed or plain eager PyTorch holds beyond the declared weights, gradients, optimizer states and activations.

Each file names, with a source per field, the layout choices the framework makes unless told otherwise
(``defaults``), what its selective recomputation keeps (``selective.policy``: the attention core's inputs as
Megatron-Core and Korthikanti et al. recompute it, or torchtitan's per-op policy), and its buffers and overheads
(``overheads``: an expression in bytes over the names below, or a fraction of everything else). Nothing here
knows an architecture by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from functools import cache
from typing import Any, Literal, Mapping

import sympy

from ...engine.algebra.multiplied import fraction_at
from ...engine.store.data import formulas_dir, read_toml
from ...engine.store.derivation import derivation
from ...engine.errors import ConfigError, DeclarationError, EvaluationError, describe_validation
from ...engine.graph.model import Model
from ...engine.language.safe_expr import parse
from ...engine.language.schema import SchemaError, build
from .settings import PER_OP, REBUILDING, Layout

DEFAULT = "torchtitan"  # PyTorch-native FSDP: the framework of most published open runs symform validates against
EAGER = "eager"
POLICY_MODES = {"attention-core": "selective", "saved-ops": "saved_ops", "saved-dots": "saved_dots"}  # the declared saved_activations_when mode each policy reads
# the names an overhead's bytes may use: the largest FSDP/ZeRO-3 unit's and the rank's parameters (tensor, pipeline and
# expert shares, before ZeRO), the recipe's bytes per weight and per gradient, and the data-parallel degree
OVERHEAD_NAMES = ("unit_params", "params", "weight_bytes", "grad_bytes", "data")


@dataclass(frozen=True, kw_only=True)
class Sourced:
    value: int | bool | str
    source: str


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """Layout choices the framework makes unless the command says otherwise (they change memory, not FLOPs)."""

    sequence_parallel: Sourced | None = None  # with tensor parallelism
    distributed_optimizer: Sourced | None = None
    grad_reduce_fp32: Sourced | None = None  # the gradients' main_grad buffers in fp32 (Megatron-Core's grad_reduce_in_fp32)


@dataclass(frozen=True, kw_only=True)
class Selective:
    policy: Literal["attention-core", "saved-ops", "saved-dots"]
    doc: str
    source: str


@dataclass(frozen=True, kw_only=True)
class Loss:
    """How the framework's loss keeps the logits (the loss primitive's conventions count it; this says which applies)."""

    doc: str
    source: str


@dataclass(frozen=True, kw_only=True)
class Convention:
    """A convention of the model's declarations the framework sets (its fused loss keeps the logits as they are, say)."""

    value: int
    source: str
    precisions: list[str] | None = None  # the precision recipes (formulas/memory.toml) it holds under; None: every one


@dataclass(frozen=True, kw_only=True)
class Liveness:
    """Buffers freed at their last use, as a compiler assigns them (no caching allocator keeps them): the kept tensors of
    the parts whose backward has run (the loss, the output head, the final norm) are free before the first
    checkpointed unit is rebuilt."""

    doc: str
    source: str


@dataclass(frozen=True, kw_only=True)
class ModuleRecompute:
    """One of the framework's recomputable modules: the saved_activations_when mode that counts what it frees."""

    mode: str
    doc: str
    source: str


@dataclass(frozen=True, kw_only=True)
class Overhead:
    name: str
    doc: str
    bytes: str | None = None
    fraction: str | None = None  # of every other category: the allocator's reserve
    zero: list[int] = field(default_factory=lambda: [0, 1, 2, 3])  # the ZeRO stages it applies at
    outside_allocator: bool = False  # held outside PyTorch's caching allocator (the CUDA context): no reserve on it
    setting: str | None = None  # a default of the framework (Defaults) it is held under only where that is on
    source: str


@dataclass(frozen=True, kw_only=True)
class RunsOn:
    """The vendors whose accelerators a framework's kernels run on (its time facts are theirs)."""

    vendors: list[str]
    source: str


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    doc: str
    source: str
    runs_on: RunsOn | None = None  # None: any accelerator PyTorch runs on
    defaults: Defaults = Defaults()
    selective: Selective | None = None  # None: the framework has no selective mode
    loss: Loss | None = None
    liveness: Liveness | None = None  # None: what forward kept stays held through backward (a caching allocator's peak)
    conventions: dict[str, Convention] = field(default_factory=dict)
    recompute_modules: dict[str, ModuleRecompute] = field(default_factory=dict)  # by the framework's own module names
    overheads: list[Overhead] = field(default_factory=list)
    not_modelled: list[str] = field(default_factory=list)
    time: dict[str, Any] | None = None  # time-side facts, read (and checked) by symform.analysis.time.efficiencies

    def check_runs_on(self, device: str, vendor: str) -> None:
        """Refuse a device none of whose vendor's accelerators the framework runs on (Megatron's Transformer Engine
        kernels on a TPU): its facts would be another platform's."""
        if self.runs_on is not None and vendor not in self.runs_on.vendors:
            raise ConfigError(
                f"framework {self.name!r} runs on {' and '.join(self.runs_on.vendors)} accelerators ({self.runs_on.source}); "
                f"{device} is {vendor}'s: name one of theirs, or drop --framework"
            )

    def recompute_mode(self, recompute: str) -> str:
        """The saved_activations_when mode its ``recompute`` setting reads: selective as its policy defines it."""
        if recompute != "selective":
            return recompute
        if self.selective is None:
            raise EvaluationError(f"framework {self.name!r} has no selective recomputation; choose --recompute none or full")
        return POLICY_MODES[self.selective.policy]

    def default(self, name: str, given: bool | None, tensor: int = 1) -> bool:
        """``given`` where the user gave it (not None), else the framework's default for ``name`` (sequence
        parallelism only alongside tensor parallelism), else False."""
        if given is not None:
            return given
        found = getattr(self.defaults, name)
        if found is None or (name == "sequence_parallel" and tensor == 1):
            return False
        return bool(found.value)

    def settings(self, grad_bytes: int | None = None, **given: bool | None) -> dict[str, bool]:
        """Each setting an overhead is held under: ``given`` where the user gave it (not None), else the framework's
        default; one the framework has no default for is refused, not ignored, and so is 16-bit gradient buffers
        under a precision whose gradients (``grad_bytes``) are fp32."""
        for name, value in given.items():
            if value is not None and getattr(self.defaults, name) is None:
                having = [f.name for f in frameworks().values() if getattr(f.defaults, name) is not None]
                raise EvaluationError(f"framework {self.name!r} has no {name.replace('_', ' ')} setting; give a framework that has it ({', '.join(having)}) or drop it")
        if given.get("grad_reduce_fp32") is False and grad_bytes == 4:
            raise ConfigError("grad_reduce_fp32 off keeps the gradient buffers at the parameters' 16 bits, and the precision keeps fp32 gradients; choose one (a 16-bit precision's gradients, or grad_reduce_fp32 on)")
        return {o.setting: self.default(o.setting, given.get(o.setting)) for o in self.overheads if o.setting is not None}

    def convention_values(self, precision: str | None = None) -> dict[str, int]:
        """The conventions it sets for a step at ``precision`` (one that names its recipes holds under those alone)."""
        return {name: c.value for name, c in self.conventions.items() if c.precisions is None or precision in c.precisions}

    def outside_allocator(self) -> set[str]:
        return {o.name for o in self.overheads if o.outside_allocator}

    def describe(self, settings: Mapping[str, bool] | None = None) -> dict[str, object]:
        """What a report says about the framework it assumed, with the settings its overheads were held under."""
        return {
            "name": self.name,
            "doc": self.doc,
            "selective": f"{self.selective.policy}: {self.selective.doc}" if self.selective else "none: the framework recomputes whole blocks or nothing",
            **({"loss": f"{self.loss.doc} ({self.loss.source})"} if self.loss else {}),
            **({"liveness": f"{self.liveness.doc} ({self.liveness.source})"} if self.liveness else {}),
            **({"conventions": {k: f"{c.value}{_only_under(c)} ({c.source})" for k, c in self.conventions.items()}} if self.conventions else {}),
            "defaults": {f.name: v.value for f in fields(self.defaults) if (v := getattr(self.defaults, f.name)) is not None},
            **({"settings": dict(settings)} if settings else {}),
            "overheads": {o.name: f"{o.doc} ({o.source})" for o in self.overheads},
            **({"recompute_modules": {k: f"{m.doc} ({m.source})" for k, m in self.recompute_modules.items()}} if self.recompute_modules else {}),
            **({"not_modelled": list(self.not_modelled)} if self.not_modelled else {}),
        }


def _only_under(c: Convention) -> str:
    return f" with --precision {' or '.join(c.precisions)}" if c.precisions is not None else ""


@cache
def frameworks() -> dict[str, Framework]:
    found = {}
    for path in sorted((formulas_dir() / "frameworks").glob("*.toml")):
        try:
            found[path.stem] = build(Framework, {"name": path.stem, **read_toml(path)})
        except SchemaError as e:
            raise DeclarationError(f"frameworks/{path.name}: {describe_validation(e)}") from None
        for overhead in found[path.stem].overheads:
            if (overhead.bytes is None) == (overhead.fraction is None):
                raise DeclarationError(f"frameworks/{path.name}: overhead {overhead.name!r} gives bytes or a fraction; give exactly one")
            if overhead.setting is not None and getattr(found[path.stem].defaults, overhead.setting, None) is None:
                raise DeclarationError(f"frameworks/{path.name}: overhead {overhead.name!r} is held under {overhead.setting!r}, which its [defaults] do not give")
    return found


def sequence_parallel(name: str | None, given: bool | None, tensor: int) -> bool:
    """Whether a layout of ``tensor`` tensor-parallel ranks runs sequence parallelism under framework ``name``:
    ``given`` where the user or the run says, else the framework's default (none without a framework)."""
    fw = framework(name)
    return fw.default("sequence_parallel", given, tensor) if fw else bool(given)


def with_defaults(name: str | None, layout: Layout, *, sequence: bool | None = None, distributed_optimizer: bool | None = None) -> Layout:
    """``layout`` as framework ``name`` runs it: sequence parallelism beside its tensor ranks (sequence_parallel) and
    its distributed optimizer, each where the caller does not say (None); neither without a framework."""
    fw = framework(name)
    return replace(
        layout, sequence=sequence_parallel(name, sequence, layout.tensor),
        distributed_optimizer=fw.default("distributed_optimizer", distributed_optimizer) if fw else bool(distributed_optimizer),
    )  # fmt: skip


def framework(name: str | None) -> Framework | None:
    """The named framework (None for none: the declared tensors alone)."""
    if name is None:
        return None
    table = frameworks()
    if name not in table:
        raise EvaluationError(f"unknown framework {name!r}; choose one of {', '.join(table)}")
    return table[name]


# per-op policies whose backward replays the checkpointed layer, running again every op whose result it did not save
# (PyTorch's selective activation checkpointing, torch.utils.checkpoint with a policy_fn); JAX's remat policies
# recompute only the values backward reads, which symform's time does not trace: timed as attention-core selective
REPLAYING = ("saved-ops",)


def timed_recompute(name: str | None, recompute: str) -> str:
    """The recomputation a step's time charges for ``recompute`` under framework ``name``: selective as the framework's
    policy runs it where that policy replays the layer (REPLAYING: Framework.recompute_mode, a per-op mode whose
    unsaved ops backward runs again, as its memory counts them), the setting itself otherwise."""
    fw = framework(name)
    if recompute != "selective" or fw is None or fw.selective is None or fw.selective.policy not in REPLAYING:
        return recompute
    return fw.recompute_mode(recompute)


def under(model: Model, fw: Framework | None, act_bytes: int, precision: str | None = None) -> Model:
    """The model as a training step under ``fw`` counts it: activations in ``act_bytes``, the framework's conventions
    at ``precision`` (the recipe's name: FP8 steps keep their linears' inputs in FP8 under Transformer Engine) where the
    caller set none of its own (``--convention`` wins over the framework)."""
    return model.with_conventions(act_bytes=act_bytes).with_defaults(**(fw.convention_values(precision) if fw else {}))


def module_modes(fw: Framework | None, modules: tuple[str, ...], recompute: str) -> tuple[str, tuple[str, ...]]:
    """The recomputation mode and the further declared modes a per-module recomputation list reads: the list replaces
    the framework's selective default (Megatron-Core's recompute_modules, default ["core_attn"]), so a module whose
    mode is that selective mode keeps it and the others add theirs."""
    if not modules:
        return recompute, ()
    if fw is None or not fw.recompute_modules:
        raise EvaluationError(f"{fw.name if fw else 'no framework'} has no per-module recomputation; give --framework megatron or no recompute modules")
    unknown = [m for m in modules if m not in fw.recompute_modules]
    if unknown:
        raise EvaluationError(f"recompute module {unknown[0]!r} is not counted under {fw.name}; choose among {', '.join(fw.recompute_modules)}")
    if recompute not in ("none", POLICY_MODES.get(fw.selective.policy if fw.selective else "", "")):
        raise EvaluationError(f"recompute modules go with --recompute none or selective, not {recompute!r}")
    modes = tuple(dict.fromkeys(fw.recompute_modules[m].mode for m in modules))
    selective = tuple(m for m in modes if m in POLICY_MODES.values())
    return (selective[0] if selective else "none"), tuple(m for m in modes if m not in POLICY_MODES.values())


def unit_params(model: Model, tensor: int = 1, expert: int = 1, expert_tensor: int | None = None) -> int:
    """Parameters of the largest unit FSDP or ZeRO-3 gathers at once, on one tensor- and expert-parallel rank: one
    repetition of a repeated layer, or a part of the model outside the layer stack (the embedding, the output head).
    ``expert_tensor``: the tensor degree that splits the routed experts (None: ``tensor``)."""
    own = expert_tensor not in (None, tensor)
    units = _units(model, own)
    degrees = {_TENSOR.name: tensor, _EXPERT.name: expert, _EXPERT_TENSOR.name: expert_tensor if own else tensor}
    point = {**model.values, **degrees}
    found = [fraction_at(u, point) for u in units]
    if None in found:  # a size the model does not give, or no polynomial: sympy's route words it
        sizes = {model.vocabulary[k]: sympy.sympify(v) for k, v in model.values.items() if k in model.vocabulary}
        at = {_TENSOR: sympy.Integer(tensor), _EXPERT: sympy.Integer(expert), _EXPERT_TENSOR: sympy.Integer(degrees[_EXPERT_TENSOR.name])}
        values = [sympy.sympify(u).xreplace(at).xreplace(sizes) for u in units]
        unknown = sorted({s.name for v in values for s in v.free_symbols})
        if unknown:
            raise EvaluationError(f"a framework's buffers need the model's sizes; give {', '.join(unknown)} (or no framework)")
        return int(max(sympy.ceiling(v) for v in values)) if values else 0
    return max(math.ceil(v) for v in found) if found else 0


#: The degrees a unit's parameters are derived over once per model, each layout's put in as numbers: named so that
#: no declaration can give a size their name (not identifiers), as a point of values by name holds both.
_TENSOR, _EXPERT, _EXPERT_TENSOR = (sympy.Symbol(f"{n}'", positive=True) for n in ("tensor", "expert", "expert_tensor"))


@derivation  # a plan asks every tensor and expert degree it screens
def _units(model: Model, own_expert_tensor: bool) -> tuple[sympy.Expr, ...]:
    """Each unit's parameters on one rank, in the sizes and the symbolic degrees (the routed experts split by their own
    tensor degree where ``own_expert_tensor``)."""
    graph = model.graph()
    weight = graph.multiplicities("params")
    split = _tensor_split(model, _TENSOR)
    routed_split = _tensor_split(model, _EXPERT_TENSOR) if own_expert_tensor else split
    shards = graph.multiplicities("params", shards={"expert": _EXPERT})
    units: dict[str, sympy.Expr] = {}
    for leaf in graph.leaves():
        if weight[leaf] == 0:
            continue
        unit, repeat = _unit_of(graph.graph, leaf)
        term = shards[leaf] / repeat * graph.graph.nodes[leaf]["quantities"]["params"]
        # a leaf under an expert-sharded edge: its multiplicity over the expert degree names that degree
        routed = own_expert_tensor and _EXPERT in sympy.sympify(shards[leaf]).free_symbols
        units[unit] = units.get(unit, 0) + term.xreplace(routed_split if routed else split)
    return tuple(sympy.sympify(u) for u in units.values())


def _tensor_split(model: Model, tensor: int | sympy.Expr) -> dict[sympy.Symbol, sympy.Expr]:
    return {s: s / tensor for s in model.vocabulary.tensor_parallel} if tensor != 1 else {}


def _unit_of(graph, leaf: str) -> tuple[str, sympy.Expr]:
    """The unit a leaf belongs to (its first ancestor reached by a repeated edge, or its top-level part) and that
    edge's repeat count."""
    parts = leaf.split("/")
    for depth in range(1, len(parts) + 1):
        node, parent = "/".join(parts[:depth]), "/".join(parts[: depth - 1])
        repeat = graph.edges[parent, node]["repeat"]["params"]
        if repeat != 1:
            return node, repeat
    return parts[0], sympy.Integer(1)


def finished_parts(model: Model, fw: Framework | None, layout: Layout, modes: tuple[str, ...]) -> tuple[str, ...]:
    """The top-level parts whose kept tensors are free before a checkpointed unit is rebuilt, under a framework that frees
    buffers at their last use (its ``liveness``): those after the last part holding a unit ``modes`` rebuild, in forward
    order (the final norm, the output head, the loss: their backward runs first). None with pipeline stages, where
    they live on the last stage and the first holds the most."""
    if fw is None or fw.liveness is None or layout.pipeline > 1:
        return ()
    graph = model.graph().graph
    rebuilding = {m for m in modes if m in REBUILDING} | ({"full"} if set(modes) & set(PER_OP) else set())
    parts = list(graph.successors(""))
    holds = [i for i, part in enumerate(parts) if any(rebuilding & data["saved_when"].keys() for path, data in graph.nodes.items() if path == part or path.startswith(f"{part}/"))]
    return tuple(parts[holds[-1] + 1 :]) if holds else ()


def overhead_bytes(fw: Framework, *, zero: int, unit: object, params: object, weight_bytes: int, grad_bytes: int, data: object = 1, settings: Mapping[str, bool] | None = None) -> dict[str, object]:
    """Each byte-valued overhead at this ZeRO stage and under these settings (Framework.settings; None: the
    framework's defaults), for numbers, sympy expressions or numpy arrays of unit, params and data."""
    settings = fw.settings() if settings is None else settings
    found = {}
    for overhead in fw.overheads:
        if overhead.bytes is None or zero not in overhead.zero or (overhead.setting is not None and not settings[overhead.setting]):
            continue
        expr = _overhead_expression(overhead.bytes)
        found[overhead.name] = _evaluate(expr, {"unit_params": unit, "params": params, "weight_bytes": weight_bytes, "grad_bytes": grad_bytes, "data": data})
    return found


def reserve_fraction(fw: Framework | None) -> Fraction:
    """The share of every other category the allocator reserves on top (0 without a framework or a reserve)."""
    if fw is None:
        return Fraction(0)
    return sum((Fraction(str(parse(o.fraction, {}))) for o in fw.overheads if o.fraction is not None), Fraction(0))


@cache
def _overhead_expression(text: str) -> sympy.Expr:
    return parse(text, {n: sympy.Symbol(n, positive=True) for n in OVERHEAD_NAMES})


def _evaluate(expr: sympy.Expr, values: Mapping[str, object]):
    """The expression at numbers or sympy expressions (exactly), or at numpy arrays (elementwise)."""
    if any(hasattr(v, "dtype") for v in values.values()):
        import numpy as np

        from ...engine.algebra.evaluate import numpy_modules

        names = sorted(s.name for s in expr.free_symbols)
        function = sympy.lambdify([sympy.Symbol(n, positive=True) for n in names], expr, modules=numpy_modules({"Min": np.minimum, "Max": np.maximum}))
        return function(*(values[n] for n in names)) + np.zeros(len(next(v for v in values.values() if hasattr(v, "dtype"))))
    return expr.xreplace({sympy.Symbol(n, positive=True): sympy.sympify(v) for n, v in values.items()})
