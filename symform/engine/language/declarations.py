"""Component declarations: loading, validating and parsing them once.

A *primitive* declares one expression per quantity over its arguments and the
non-architecture vocabulary (batch, seq, conventions, storage sizes). A
*composite* names its parts, binds their arguments with expressions over its
own, and repeats each part by an expression. Arguments whose default starts
with ``@`` are slots: they hold a component name, so a family or a user can
swap one component for another without touching the declarations around it.
"""

from __future__ import annotations

import difflib
import re

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Mapping

import sympy

from ..store.data import formulas_dir, read_text, read_toml
from ..store.derivation import Identity
from ..digraph import DiGraph
from ..errors import DeclarationError, SymformError, describe_validation
from .names import is_identifier
from .conditions import predicates
from .safe_expr import parse
from .vocabulary import Vocabulary, default_vocabulary, make_symbol
from .schema import Plain, SchemaError, alias, build, dump_given, given

PARTS = sympy.Symbol("parts", nonnegative=True)  # in a saved_activations_when expression: what the parts keep otherwise

QUANTITIES = ("params", "active_params", "forward_flops", "backward_flops", "bytes_moved", "saved_activations", "kv_cache", "recurrent_state")
# What a primitive's quantity is when it does not declare it, in terms of the others.
QUANTITY_DEFAULTS = {"active_params": "params", "backward_flops": "bwd_mult*forward_flops", "kv_cache": "0", "recurrent_state": "0"}
# What a primitive with weights may declare for when those weights are frozen (no weight gradient) while its
# input still needs one; a quantity it does not declare stays as when trained.
FROZEN_QUANTITIES = ("backward_flops", "saved_activations")
SLOT = "@"



def _text_or_whole(value: Any, needed: str) -> str | int:
    """A string or a whole number; true is no count, so booleans are refused rather than read as 1."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{needed} is needed, not {str(value)[:40]!r}")
    return value


def _scalar(value: Any) -> str | int:
    """An expression string or a whole number."""
    return _text_or_whole(value, "an expression (a string such as 'd_model*d_ff') or a whole number")


Scalar = Annotated[str | int, Plain(_scalar, "function-plain[_scalar()]")]


def _count(value: Any) -> str | int:
    """A whole number, written bare or as a string of ASCII digits (checked where it is read)."""
    return _text_or_whole(value, 'a whole number (such as "1")')


Count = Annotated[str | int, Plain(_count, "function-plain[_count()]")]


@dataclass(frozen=True, kw_only=True)
class PartDecl:
    POPULATE_BY_NAME = True

    name: str
    use: str
    with_: dict[str, Scalar] = field(default_factory=dict, metadata=alias("with"))
    pass_: bool = field(default=False, metadata=alias("pass"))  # the callee's unbound arguments take the caller's same-named ones
    replaces: list[str] = field(default_factory=list)  # inherited parts this one stands in for, at the first one's place
    repeat: Scalar | dict[str, Scalar] = "1"
    shard: str | None = None  # a parallel dimension whose ranks split this part's parameters among them ("expert")
    shares_input: str | None = None  # the part (a path below the same component) whose input tensor is this part's too
    # workload settings this part's whole subtree reads as other values: an encoder-decoder's encoder runs on
    # { seq = "source_seq", past = "0" } while its decoder reads seq and past as they are
    workload: dict[str, Scalar] = field(default_factory=dict)
    doc: str = ""


@dataclass(frozen=True, kw_only=True)
class RequireDecl:
    check: str
    why: str


@dataclass(frozen=True, kw_only=True)
class ComponentDecl:
    doc: str
    extends: str | None = None  # a composite this one varies: its args, parts, requirements and assumptions, then these
    kind: str | None = None  # what it is (attention, mlp, norm, ...): a slot takes only components of its default's kind
    switches: list[str] = field(default_factory=list)  # arguments that are 0 or 1 (a bias, a norm present or not)
    remove: list[str] = field(default_factory=list)  # parts of the extended composite to leave out
    args: list[str] = field(default_factory=list)
    source: str = ""
    require: list[RequireDecl] = field(default_factory=list)
    assume: dict[str, dict[str, Scalar]] = field(default_factory=dict)
    # what a leading-order form writes in place of an expression of the arguments, a comment saying why it may:
    # { "ceil(seq/chunk)" = "seq/chunk" } (padding to whole chunks is less than one chunk per sequence)
    leading: dict[str, Scalar] = field(default_factory=dict)
    parts: list[PartDecl] = field(default_factory=list)
    params: Scalar | None = None
    active_params: Scalar | None = None
    forward_flops: Scalar | None = None
    backward_flops: Scalar | None = None
    bytes_moved: Scalar | None = None
    saved_activations: Scalar | None = None
    kv_cache: Scalar | None = None
    recurrent_state: Scalar | None = None  # what a recurrent mixer carries from one forward to the next, whatever the context
    # a primitive: the bytes its backward holds at once besides what it keeps, freed before the next op's backward
    # (the loss's logits gradients); the training memory counts the largest
    backward_peak: Scalar | None = None
    # what the component keeps for backward instead of its parts' sum, in a named mode of running it:
    # recomputed from its inputs ("selective", "full") or as one fused kernel ("flash"); the expression may name
    # `parts`, what its parts keep in the other modes (a mode that recomputes some of their tensors subtracts them)
    saved_activations_when: dict[str, Scalar] = field(default_factory=dict)
    # a primitive with weights: its quantities when those weights are frozen (fine-tuning), and the
    # components that are its adapters, by method ({ lora = "lora_adapter" })
    frozen: dict[str, Scalar] = field(default_factory=dict)
    adapters: dict[str, str] = field(default_factory=dict)
    # a primitive that is a matrix product: its shape as expressions of the arguments, output rows m,
    # output width n, reduction k (and independent products, batches), for the tile-and-wave estimate
    gemm: dict[str, Scalar] = field(default_factory=dict)
    # a primitive's options, which a use site sets by name (rms_norm(form=offset)): option -> value -> the fields
    # that value declares in place of the primitive's own (doc, source, args, quantities, frozen, ...)
    options: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # a layer (kind "layer"): the all-reduces of its blocks' partial sums that tensor parallelism runs in one
    # forward, a whole number (Megatron's split reduces each row-parallel block's output before it enters the
    # residual: two, the count for a layer that declares none; an engine that sums a parallel layer's blocks
    # first reduces once); a variant keeps its base's
    tensor_reductions: Count | None = None


@dataclass(frozen=True)
class Arg:
    name: str
    symbol: sympy.Symbol | None  # None for a slot
    default: sympy.Expr | str | None  # expression, component name (slot) or required

    @property
    def is_slot(self) -> bool:
        return self.symbol is None


@dataclass(frozen=True)
class Requirement:
    relation: sympy.Basic
    text: str
    why: str


@dataclass(frozen=True)
class Part:
    name: str
    use: str  # a component name, or "@slot"
    bindings: Mapping[str, sympy.Expr | str]
    repeat: Mapping[str, sympy.Expr]  # one multiplicity per quantity
    doc: str
    passes: bool = False  # arguments not bound in `with` take the caller's same-named arguments
    shard: str | None = None
    shares_input: str | None = None
    workload: Mapping[sympy.Symbol, sympy.Expr] = field(default_factory=dict)  # a workload symbol -> what the subtree reads


@dataclass(frozen=True)
class Component:
    name: str
    doc: str
    source: str
    args: tuple[Arg, ...]
    requirements: tuple[Requirement, ...]
    assumptions: Mapping[str, Mapping[str, sympy.Expr]]
    parts: tuple[Part, ...]
    quantities: Mapping[str, sympy.Expr]  # primitives only
    saved_when: Mapping[str, sympy.Expr] = field(default_factory=dict)  # saved activations by mode of running
    kind: str | None = None
    switches: frozenset[str] = frozenset()
    frozen: Mapping[str, sympy.Expr] = field(default_factory=dict)  # primitives with weights: quantities when frozen
    adapters: Mapping[str, str] = field(default_factory=dict)  # method -> the adapter component
    leading: Mapping[sympy.Expr, sympy.Expr] = field(default_factory=dict)  # leading-order forms: expression -> its stand-in
    gemm: Mapping[str, sympy.Expr] = field(default_factory=dict)  # a matrix product's m, n, k (and batches)
    backward_peak: sympy.Expr = sympy.Integer(0)  # primitives: what their backward holds at once besides what they keep
    declaration: ComponentDecl | None = field(default=None, compare=False, repr=False)  # kept where it has options
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # option -> its values
    tensor_reductions: sympy.Integer | None = None  # a layer: tensor parallelism's all-reduces in one forward

    @property
    def is_primitive(self) -> bool:
        # a composite declares no quantities, even one of no parts (parts = []: an empty slot's filler)
        return bool(self.quantities)

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)


@dataclass(frozen=True)
class Library:
    """Every declared component by name, checked as a whole."""

    def derivation_key(self) -> Identity:  # built once per set of files: by identity (engine/derivation)
        return Identity(self)

    components: Mapping[str, Component]
    vocabulary: Vocabulary
    _variants: dict[str, Component] = field(default_factory=dict, compare=False, repr=False)  # by their canonical names

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and "(" in name:
            try:
                self[name]
            except DeclarationError:
                return False
            return True
        return name in self.components

    def __getitem__(self, name: str) -> Component:
        if isinstance(name, str) and "(" in name:
            return self._variant(name)
        try:
            return self.components[name]
        except KeyError:
            raise DeclarationError(f"unknown component {name!r}; {_closest(name, self.components)}") from None

    def _variant(self, name: str) -> Component:
        """A primitive with options set (``rms_norm(form=offset)``): its declaration with the chosen values' fields."""
        base_name, chosen = parse_options(name)
        base = self[base_name]
        canonical = option_name(base, chosen)
        if canonical not in self._variants:
            self._variants[canonical] = parse_component(canonical, with_options(base, chosen), self.vocabulary)
        return self._variants[canonical]

    def merged(self, other: Mapping[str, Component]) -> "Library":
        clash = sorted(set(other) & set(self.components))
        if clash:
            raise DeclarationError(f"component {clash[0]!r} is already declared by symform; give yours another name")
        library = Library(_Merged(self.components, other), self.vocabulary)
        check_library(library, only=other)
        return library


def _split_arg(text: str) -> tuple[str, str | None]:
    name, eq, default = text.partition("=")
    return name.strip(), (default.strip() if eq else None)


def validate_declaration(name: str, raw: Any) -> ComponentDecl:
    where = f"component {name!r}"
    if not is_identifier(name):
        raise DeclarationError(f"{where}: names must be identifiers (letters, digits, _)")
    if not isinstance(raw, Mapping):
        raise DeclarationError(f"{where} must be a table of a component's fields")
    try:
        return build(ComponentDecl, raw)
    except SchemaError as e:
        raise DeclarationError(f"{where}: {describe_validation(e)}") from None


def parse_component(name: str, decl: ComponentDecl, vocabulary: Vocabulary, base: Component | None = None) -> Component:
    try:
        return _build_component(name, decl, vocabulary, base)
    except SymformError as e:
        raise DeclarationError(f"component {name!r}: {e}") from None


def _build_args(decl: ComponentDecl, context: Mapping[str, sympy.Basic], vocabulary: Vocabulary, base: Component | None) -> list[Arg]:
    """Arguments in order; a default may use the context symbols and the other numeric arguments."""
    args: list[Arg] = list(base.args) if base else []
    inherited = {a.name for a in args}
    declared: list[tuple[str, str | None]] = []
    for text in decl.args:
        arg_name, default = _split_arg(text)
        if not is_identifier(arg_name):
            raise DeclarationError(f"argument {text!r} is not 'name' or 'name = default'")
        if arg_name in context:
            raise DeclarationError(f"argument {arg_name!r} shadows the vocabulary's {arg_name!r}; rename it")
        if arg_name in (n for n, _ in declared):
            raise DeclarationError(f"argument {arg_name!r} is declared twice")
        declared.append((arg_name, default))
    numeric = {a.name: a.symbol for a in args if not a.is_slot}
    for arg_name, default in declared:
        if default is None or not default.startswith(SLOT):
            numeric[arg_name] = vocabulary[arg_name] if arg_name in vocabulary else make_symbol(arg_name, "nonnegative_integer")
    for arg_name, default in declared:
        if default is not None and default.startswith(SLOT):
            arg = Arg(arg_name, None, default[1:])
        else:
            others = {k: v for k, v in numeric.items() if k != arg_name}
            arg = Arg(arg_name, numeric[arg_name], None if default is None else parse(default, {**context, **others}))
        if arg_name in inherited:  # a variant may change an inherited argument's default
            args = [arg if a.name == arg_name else a for a in args]
        else:
            args.append(arg)
    return args


def _build_component(name: str, decl: ComponentDecl, vocabulary: Vocabulary, base: Component | None) -> Component:
    if base is not None and base.is_primitive:
        raise DeclarationError(f"extends {base.name!r}, a primitive; only composites can be extended")
    if decl.remove and base is None:
        raise DeclarationError("'remove' needs 'extends'")
    # the named predicates (formulas/predicates.toml) are read where a condition uses them, over these names
    context = {**predicates(), **{n: vocabulary[n] for n in vocabulary.names("workload", "convention", "dtype")}}
    args = _build_args(decl, context, vocabulary, base)
    names = {**context, **{a.name: a.symbol for a in args if not a.is_slot}}
    slots = {a.name for a in args if a.is_slot}

    requirements = (base.requirements if base else ()) + tuple(Requirement(parse(r.check, names, relation=True), r.check, r.why) for r in decl.require)
    assumptions = {k: dict(v) for k, v in base.assumptions.items()} if base else {}
    # an assumption may introduce a ratio (granularity G in d_ff_expert = d_ff/G): a symbol no model binds
    ratios = {n: vocabulary[n] for n in vocabulary.names("ratio")}
    for set_name, subs in decl.assume.items():
        unknown = sorted(set(subs) - set(names) - set(context))
        if unknown or any(k in context for k in subs):
            bad = unknown[0] if unknown else next(k for k in subs if k in context)
            raise DeclarationError(f"assumption set {set_name!r} assigns {bad!r}, which is not a numeric argument")
        assumptions[set_name] = {**assumptions.get(set_name, {}), **{k: parse(v, {**ratios, **names}) for k, v in subs.items()}}
    assumptions = {k: MappingProxyType(v) for k, v in assumptions.items()}

    inherited = [p for p in base.parts if p.name not in decl.remove] if base else []
    unknown = sorted(set(decl.remove) - {p.name for p in base.parts}) if base else []
    if unknown:
        raise DeclarationError(f"removes part {unknown[0]!r}, which {base.name} does not have")
    declared: dict[str, Part] = {}
    for part in decl.parts:
        if part.name in declared:
            raise DeclarationError(f"part {part.name!r} is declared twice")
        if "/" in part.name or not is_identifier(part.name):
            raise DeclarationError(f"part name {part.name!r} must be an identifier")
        if part.use.startswith(SLOT) and part.use[1:] not in slots:
            raise DeclarationError(f"part {part.name!r} uses {part.use!r}, but there is no slot argument {part.use[1:]!r}")
        bindings = {k: _binding(v, names, slots) for k, v in part.with_.items()}
        declared[part.name] = Part(part.name, part.use, MappingProxyType(bindings), _repeat(part.repeat, names), part.doc, part.pass_, part.shard, part.shares_input, _rebinding(part, vocabulary, names))
    parts = _merge_parts(inherited, declared, {p.name: p.replaces for p in decl.parts})

    quantities = {q: getattr(decl, q) for q in QUANTITIES}
    # parts = [] written out: a composite of nothing, which costs nothing and adds no part (a slot left empty)
    if parts or "parts" in given(decl):
        declared = [q for q, v in quantities.items() if v is not None]
        if declared:
            raise DeclarationError(f"a composite's {declared[0]} is the sum of its parts; remove it or make the component a primitive")
        exprs: dict[str, sympy.Expr] = {}
    else:
        missing = [q for q, v in quantities.items() if v is None and q not in QUANTITY_DEFAULTS]
        if missing:
            raise DeclarationError(f"a primitive must declare {', '.join(missing)} (write \"0\" for none)")
        exprs = {}
        for q in QUANTITIES:
            text = quantities[q] if quantities[q] is not None else QUANTITY_DEFAULTS[q]
            exprs[q] = parse(text, {**names, **exprs})
    return Component(
        name=name,
        doc=decl.doc,
        source=decl.source,
        args=tuple(args),
        requirements=requirements,
        assumptions=MappingProxyType(assumptions),
        parts=tuple(parts),
        quantities=MappingProxyType(exprs),
        saved_when=MappingProxyType({**(base.saved_when if base else {}), **{m: parse(v, {**names, "parts": PARTS}) for m, v in decl.saved_activations_when.items()}}),
        kind=decl.kind if decl.kind is not None else base.kind if base else None,
        switches=_switches(decl, args, base),
        frozen=_frozen(decl, names, exprs),
        adapters=MappingProxyType(dict(decl.adapters)),
        leading=_leading(decl, names, base),
        gemm=_gemm(decl, names),
        backward_peak=_backward_peak(decl, names, exprs),
        declaration=decl if decl.options else None,
        options=_options(decl, base),
        tensor_reductions=_tensor_reductions(decl, base),
    )


# what an option's value may not change: what the primitive is (a slot takes it by its kind) and how it is built
FIXED_BY_OPTIONS = ("kind", "extends", "remove", "parts", "options")


def _options(decl: ComponentDecl, base: Component | None) -> Mapping[str, tuple[str, ...]]:
    if not decl.options:
        return MappingProxyType({})
    if decl.parts or base is not None:
        raise DeclarationError("'options' belong to a primitive (no parts, no extends); compose variants of a composite with extends")
    for option, values in decl.options.items():
        if not is_identifier(option) or not values or not all(is_identifier(v) for v in values):
            raise DeclarationError(f"option {option!r} needs identifier names for itself and its values (options.form.offset)")
        for value, fields in values.items():
            fixed = sorted(set(fields) & set(FIXED_BY_OPTIONS))
            if fixed:
                raise DeclarationError(f"option {option} = {value} changes {fixed[0]!r}; an option's value may change what the primitive costs, not what it is")
    return MappingProxyType({option: tuple(values) for option, values in decl.options.items()})


def parse_options(name: str) -> tuple[str, dict[str, str]]:
    """``rms_norm(form = offset)`` -> ("rms_norm", {"form": "offset"})."""
    head, paren, rest = name.partition("(")
    inner = rest[:-1] if rest.endswith(")") else None
    pairs = [p.partition("=") for p in inner.split(",")] if inner and inner.strip() else []
    chosen = {k.strip(): v.strip() for k, eq, v in pairs if eq}
    if not paren or inner is None or len(chosen) != len(pairs) or not is_identifier(head.strip()) or not all(map(is_identifier, [*chosen, *chosen.values()])):
        raise DeclarationError(f"component {name[:80]!r}: write a primitive's options as name(option=value, ...), such as rms_norm(form=offset)")
    return head.strip(), chosen


def option_name(base: Component, chosen: Mapping[str, str]) -> str:
    """The canonical name of ``base`` with ``chosen`` options, each checked against those it declares."""
    if not base.options:
        raise DeclarationError(f"component {base.name!r} has no options; name it without parentheses")
    for option, value in chosen.items():
        if option not in base.options:
            raise DeclarationError(f"component {base.name!r} has no option {option!r}; it has {', '.join(base.options)}")
        if value not in base.options[option]:
            raise DeclarationError(f"{base.name}'s option {option} is one of {', '.join(base.options[option])}, not {value!r}")
    return f"{base.name}({', '.join(f'{o}={chosen[o]}' for o in base.options if o in chosen)})"


def with_options(base: Component, chosen: Mapping[str, str]) -> ComponentDecl:
    """The primitive's declaration with each chosen value's fields in place of its own, in the order declared."""
    assert base.declaration is not None
    raw = dump_given(base.declaration, exclude=frozenset({"options"}))
    for option, values in base.declaration.options.items():
        if option in chosen:
            raw.update(values[chosen[option]])
    return validate_declaration(base.name, raw)


GEMM_SIZES = ("m", "n", "k", "batches")


#: the most all-reduces a layer may declare for one forward (a layer of a few blocks reduces a few times)
MOST_TENSOR_REDUCTIONS = 16


def _tensor_reductions(decl: ComponentDecl, base: Component | None) -> sympy.Integer | None:
    """A layer's tensor-parallel all-reduces in one forward: a whole number the layer itself declares (the comm
    charges it once per layer, so on any other component it would be counted as many times as that repeats)."""
    kind = decl.kind if decl.kind is not None else base.kind if base else None
    if decl.tensor_reductions is None:
        inherited = base.tensor_reductions if base else None
        if inherited is not None and kind != "layer":
            raise DeclarationError(f"tensor_reductions counts a layer's tensor-parallel all-reduces, and this component of kind {kind!r} inherits one; keep kind \"layer\" or extend a component that declares none")
        return inherited
    if kind != "layer":
        raise DeclarationError("tensor_reductions counts a layer's tensor-parallel all-reduces; declare it on a component of kind \"layer\" (one that extends decoder_layer), not here")
    text = str(decl.tensor_reductions).strip()
    if not (text.isascii() and text.isdigit()) or int(text) > MOST_TENSOR_REDUCTIONS:
        raise DeclarationError(f"tensor_reductions is {decl.tensor_reductions!r}; give a whole number from 0 to {MOST_TENSOR_REDUCTIONS} (the all-reduces tensor parallelism runs in one forward of the layer)")
    return sympy.Integer(int(text))


def _gemm(decl: ComponentDecl, names: Mapping[str, sympy.Basic]) -> Mapping[str, sympy.Expr]:
    """A matrix product's shape: output rows m, output width n, reduction k, and batches (1 unless given)."""
    if not decl.gemm:
        return MappingProxyType({})
    if decl.parts:
        raise DeclarationError("'gemm' gives a primitive's matrix shape; a composite's parts declare their own")
    unknown = sorted(set(decl.gemm) - set(GEMM_SIZES))
    missing = [s for s in GEMM_SIZES[:3] if s not in decl.gemm]
    if unknown or missing:
        raise DeclarationError(f"gemm needs m, n, k (and may give batches), not {unknown[0]!r}" if unknown else f"gemm needs m, n, k (and may give batches); {missing[0]!r} is missing")
    shape = {s: parse(str(decl.gemm[s]), names) for s in GEMM_SIZES if s in decl.gemm}
    return MappingProxyType({"batches": sympy.Integer(1), **shape})


def _backward_peak(decl: ComponentDecl, names: Mapping[str, sympy.Basic], exprs: Mapping[str, sympy.Expr]) -> sympy.Expr:
    if decl.backward_peak is None:
        return sympy.Integer(0)
    if decl.parts:
        raise DeclarationError("'backward_peak' belongs to the primitive whose backward allocates it; declare it there")
    return parse(decl.backward_peak, {**names, **exprs})


def _leading(decl: ComponentDecl, names: Mapping[str, sympy.Basic], base: Component | None) -> Mapping[sympy.Expr, sympy.Expr]:
    """What leading-order forms write in place of an expression of the component's arguments (ceil(seq/chunk)
    chunks as seq/chunk); a variant keeps its base's."""
    out = dict(base.leading) if base else {}
    for text, stand_in in decl.leading.items():
        expr = parse(text, names)
        if not expr.free_symbols or expr.is_Symbol:
            raise DeclarationError(f"leading replaces {text!r}; name an expression of the arguments (such as 'ceil(seq/chunk)'), not a symbol or a number")
        out[expr] = parse(stand_in, names)
    return MappingProxyType(out)


def _frozen(decl: ComponentDecl, names: Mapping[str, sympy.Basic], exprs: Mapping[str, sympy.Expr]) -> Mapping[str, sympy.Expr]:
    """A primitive's quantities with its weights frozen; what it does not declare stays as when trained."""
    if (decl.frozen or decl.adapters) and decl.parts:
        raise DeclarationError("'frozen' and 'adapters' belong to a primitive with weights; declare them on the primitive its parts use")
    unknown = sorted(set(decl.frozen) - set(FROZEN_QUANTITIES))
    if unknown:
        raise DeclarationError(f"frozen names {unknown[0]!r}; a frozen weight changes only {', '.join(FROZEN_QUANTITIES)}")
    return MappingProxyType({q: parse(decl.frozen[q], {**names, **exprs}) if q in decl.frozen else exprs[q] for q in FROZEN_QUANTITIES} if exprs else {})


def _switches(decl: ComponentDecl, args: list[Arg], base: Component | None) -> frozenset[str]:
    numeric = {a.name for a in args if not a.is_slot}
    unknown = sorted(set(decl.switches) - numeric)
    if unknown:
        raise DeclarationError(f"switch {unknown[0]!r} is not one of its numeric arguments")
    return frozenset(decl.switches) | (base.switches if base else frozenset())


def _merge_parts(inherited: list[Part], declared: dict[str, Part], replaces: Mapping[str, list[str]]) -> list[Part]:
    """A variant's part takes the place of the inherited part of the same name, or of the first of
    those it `replaces` (which go); any other new part comes last."""
    parts = list(inherited)
    for name, part in declared.items():
        names = [p.name for p in parts]
        if name in names:
            parts[names.index(name)] = part
        elif replaces[name]:
            missing = [r for r in replaces[name] if r not in names]
            if missing:
                raise DeclarationError(f"part {name!r} replaces {missing[0]!r}, which is not an inherited part")
            first = min(names.index(r) for r in replaces[name])
            parts[first] = part
            parts = [p for p in parts if p.name not in replaces[name]]
        else:
            parts.append(part)
    return parts


def _rebinding(part: PartDecl, vocabulary: Vocabulary, names: Mapping[str, sympy.Basic]) -> Mapping[sympy.Symbol, sympy.Expr]:
    """A part's `workload` table: each key a workload setting, each value an expression in the caller's names."""
    settings = set(vocabulary.names("workload"))
    result = {}
    for key, text in part.workload.items():
        if key not in settings:
            raise DeclarationError(f"part {part.name!r} rebinds {key!r}, which is not a workload setting; use one of {', '.join(sorted(settings))}")
        result[vocabulary[key]] = parse(text, names)
    return MappingProxyType(result)


def _binding(value: Scalar, names: Mapping[str, sympy.Basic], slots: set[str]) -> sympy.Expr | str:
    if isinstance(value, str) and value.strip().startswith(SLOT):
        return value.strip()  # a component name or a slot of the caller, resolved when instantiated
    return parse(value, names)


def _repeat(value: Scalar | Mapping[str, Scalar], names: Mapping[str, sympy.Basic]) -> Mapping[str, sympy.Expr]:
    if not isinstance(value, Mapping):
        value = {"default": value}
    unknown = sorted(set(value) - set(QUANTITIES) - {"default"})
    if unknown:
        raise DeclarationError(f"repeat names {unknown[0]!r}; use 'default' or one of {', '.join(QUANTITIES)}")
    default = _count(value.get("default", "1"), names)
    return MappingProxyType({q: _count(value[q], names) if q in value else default for q in QUANTITIES})


def _count(text: Scalar, names: Mapping[str, sympy.Basic]) -> sympy.Expr:
    """A repeat: an expression whose value, where it is a number already, is a whole number of 0 or more."""
    count = parse(text, names)
    if count.is_Number and (not count.is_Integer or count < 0):
        raise DeclarationError(f"repeat = {text!r}: a part repeats a whole number of times, 0 or more")
    return count


def check_library(library: Library, only: Mapping[str, Component] | None = None) -> None:
    """Check every part (of ``only``'s components, if given) against the component it uses, and refuse cycles."""
    uses = DiGraph()
    for comp in (only if only is not None else library.components).values():
        uses.add_node(comp.name)
        for arg in comp.args:
            if arg.is_slot and arg.default is not None:
                library[arg.default]
        for adapter in comp.adapters.values():
            library[adapter]
        for part in comp.parts:
            for target in _possible_targets(comp, part):
                callee = library[target] if target in library else None
                if callee is None:
                    raise DeclarationError(f"component {comp.name!r}, part {part.name!r}: uses unknown component {target!r}; {_closest(target, library.components)}")
                check_bindings(comp, part, callee)
                uses.add_edge(comp.name, callee.name)
    cycle = uses.first_cycle()
    if cycle is None:
        return
    chain = " -> ".join(cycle + cycle[:1])
    raise DeclarationError(f"components use each other in a cycle ({chain}); a component cannot contain itself")


def _possible_targets(comp: Component, part: Part) -> list[str]:
    if part.use.startswith(SLOT):
        default = comp.arg(part.use[1:]).default
        return [default] if isinstance(default, str) else []
    return [part.use]


def check_bindings(owner: Component, part: Part, callee: Component) -> None:
    where = f"component {owner.name!r}, part {part.name!r} ({callee.name})"
    extra = sorted(set(part.bindings) - set(callee.arg_names))
    if extra:
        raise DeclarationError(f"{where}: unknown argument {extra[0]!r}; {callee.name} takes {', '.join(callee.arg_names) or 'no arguments'}")
    passed = set(owner.arg_names) if part.passes else set()
    missing = [a.name for a in callee.args if a.default is None and a.name not in part.bindings and a.name not in passed]
    # a slot handed the caller's arguments: at a model's root, its component's sizes are the model's own (graph.root_component)
    if missing and not (part.passes and part.use.startswith(SLOT)):
        hint = "add it under 'with'" + ("" if part.passes else " or set pass = true to hand down the caller's")
        raise DeclarationError(f"{where}: missing argument {missing[0]!r}; {hint}")
    for key, value in part.bindings.items():
        if callee.arg(key).is_slot != isinstance(value, str):
            kind = "a component (@name)" if callee.arg(key).is_slot else "an expression"
            raise DeclarationError(f"{where}: argument {key!r} must be {kind}")


def parse_components(
    table: Mapping[str, Any], vocabulary: Vocabulary, origin: str, existing: Mapping[str, Component] | None = None
) -> dict[str, Component]:
    """Parse a table of declarations; a variant is parsed after the composite it extends."""
    existing = existing or {}
    pending = {name: validate_declaration(name, raw) for name, raw in table.items()}
    components: dict[str, Component] = {}
    while pending:
        ready = [n for n, d in pending.items() if d.extends is None or d.extends in components or d.extends in existing]
        if not ready:
            name, decl = next(iter(pending.items()))
            known = decl.extends in pending
            why = "the components extend each other in a cycle" if known else f"there is no component {decl.extends!r}"
            raise DeclarationError(f"{origin}: component {name!r} extends {decl.extends!r}, but {why}")
        for name in ready:
            decl = pending.pop(name)
            base = components.get(decl.extends) or existing.get(decl.extends) if decl.extends else None
            components[name] = parse_component(name, decl, vocabulary, base)
    return components


class _Merged(Mapping[str, Component]):
    """symform's components and a user's, without parsing symform's."""

    def __init__(self, base: Mapping[str, Component], added: Mapping[str, Component]):
        self._base, self._added = base, dict(added)

    def __getitem__(self, name: str) -> Component:
        return self._added[name] if name in self._added else self._base[name]

    def __contains__(self, name: object) -> bool:
        return name in self._added or name in self._base

    def __iter__(self):
        yield from self._base
        yield from (n for n in self._added if n not in self._base)

    def __len__(self) -> int:
        return len(set(self._base) | set(self._added))


class LazyComponents(Mapping[str, Component]):
    """Validated declarations, each parsed into a Component the first time it is asked for.

    A command uses a few of the bundled components; parsing every expression of
    every declaration up front would dominate its start-up time.
    """

    def __init__(self, declarations: Mapping[str, ComponentDecl | Mapping[str, Any]], vocabulary: Vocabulary, origin: str):
        self._declarations = dict(declarations)  # a raw table is validated when first asked for
        self._vocabulary = vocabulary
        self._origin = origin
        self._parsed: dict[str, Component] = {}
        self._parsing: set[str] = set()

    def __getitem__(self, name: str) -> Component:
        if name not in self._parsed:
            decl = self._declaration(name)
            if name in self._parsing:
                raise DeclarationError(f"{self._origin}: component {name!r} extends itself through {decl.extends!r}: the components extend each other in a cycle")
            self._parsing.add(name)
            try:
                if decl.extends is not None and decl.extends not in self._declarations:
                    raise DeclarationError(f"{self._origin}: component {name!r} extends {decl.extends!r}, but there is no component {decl.extends!r}")
                base = self[decl.extends] if decl.extends else None
                self._parsed[name] = parse_component(name, decl, self._vocabulary, base)
            finally:
                self._parsing.discard(name)
        return self._parsed[name]

    def _declaration(self, name: str) -> ComponentDecl:
        decl = self._declarations[name]
        if isinstance(decl, _Unread):  # the first component asked for of a file not read yet: read the file
            table = read_toml(decl.path)
            if list(table) != list(decl.names):  # a header scan misled (a table header inside a value): read every file
                self._declarations = component_tables(scan=False)
            else:
                self._declarations.update(table)
            decl = self._declarations[name]
        if not isinstance(decl, ComponentDecl):
            decl = self._declarations[name] = validate_declaration(name, decl)
        return decl

    def __contains__(self, name: object) -> bool:
        return name in self._declarations

    def __iter__(self):
        return iter(self._declarations)

    def __len__(self) -> int:
        return len(self._declarations)


def component_files() -> list[Path]:
    return sorted((formulas_dir() / "components").glob("*.toml"))


@dataclass(frozen=True)
class _Unread:
    """A component of a file not read yet: the file, and the names its table headers declare in order."""

    path: Path
    names: tuple[str, ...]


# a table header: [name], [name.parts], [[name.require]] (bare keys only), and nothing else on its line but a comment
_BARE = r"[A-Za-z0-9_-]+"
_HEADER = re.compile(rf"[ \t]*\[\[?[ \t]*({_BARE})(?:[ \t]*\.[ \t]*{_BARE})*[ \t]*\]\]?[ \t]*(?:#.*)?")
_KEY_OR_VALUE = re.compile(r"^[ \t]*[^#\s]", re.M)
_BRACKETED = re.compile(r"^[ \t]*\[[^\n]*", re.M)  # a line opening with '[': a header, or something a scan misreads


def declared_names(text: str) -> tuple[str, ...] | None:
    """The top-level keys (the components) of a components file, in order, from its table headers without
    parsing it; None where a scan could misread the file: a multi-line string, anything but comments before
    the first header, or a line opening with '[' that is not a plain header."""
    if '"""' in text or "'''" in text:
        return None
    names: dict[str, None] = {}
    lines = list(_BRACKETED.finditer(text))
    for line in lines:
        header = _HEADER.fullmatch(line.group())
        if header is None:
            return None
        names.setdefault(header.group(1))
    before = text[: lines[0].start()] if lines else ""
    return None if _KEY_OR_VALUE.search(before) else tuple(names)


def component_tables(*, scan: bool = True) -> dict[str, Any]:
    """Every bundled component's raw table by name; with ``scan``, a file whose headers name its components is
    read only when one of them is first asked for (a command uses a few of the 30-odd files)."""
    table: dict[str, Any] = {}
    for path in component_files():
        names = declared_names(read_text(path, "a TOML file")) if scan else None
        found = {name: _Unread(path, names) for name in names} if names is not None else read_toml(path)
        for name, raw in found.items():
            if name in table:
                raise DeclarationError(f"{path.name}: component {name!r} is declared twice")
            table[name] = raw
    return table


@cache
def default_library() -> Library:
    vocabulary = default_vocabulary()
    # checked as a whole by the test suite (check_library); each command validates and parses what it uses
    return Library(LazyComponents(component_tables(), vocabulary, "formulas/components"), vocabulary)


def _closest(name: object, components) -> str:
    """The declared names nearest a wrong one: a short message however many components a library declares."""
    close = difflib.get_close_matches(str(name), list(components), n=5)
    return f"did you mean {', '.join(close)}?" if close else f"docs/reference/components lists the {len(components)} declared ones"
