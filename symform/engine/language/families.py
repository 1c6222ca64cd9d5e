"""Hugging Face configurations: from a ``config.json`` to a model's bindings.

A family file (``formulas/families/*.toml``) says which ``model_type`` values
it reads, which config fields it needs (with the defaults transformers applies
when a field is absent or null), how the root component's arguments follow
from those fields, and which component fills each slot. Nothing here knows a
family by name.
"""

from __future__ import annotations

import json
import math
import re
import dataclasses
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping

from ..budget import LAYERS, check_count, check_number, quoted
from ..store.data import formulas_dir, read_json, read_toml
from ..errors import ConfigError, DeclarationError, describe_validation
from .family_files import family_table, reading_order
from .layer_counts import CountSpec, count_layers, is_text_list
from .names import is_identifier
from .schema import OTHER_KEYS, SchemaError, alias, build


@dataclass(frozen=True, kw_only=True)
class FieldSpec:
    POPULATE_BY_NAME = True

    # pattern: a string, one character per layer; present: 1 where the config has the key (not null), else 0 (a
    # sub-config whose presence adds a part to the class, such as an audio tower)
    type: Literal["int", "bool", "number", "str", "int_list", "str_list", "pattern", "present"]
    default: str | bool | list | None = None  # used when the field is absent; None: required
    # other names the field is written under: transformers' attribute_map aliases, which save_pretrained
    # writes (qwen3_moe's num_local_experts for num_experts), or a path into a nested object ("rope_parameters.x")
    # whose steps may also be a list's positions ("subsampling_conv_channels.0": its first entry)
    aliases: list[str] = dataclasses.field(default_factory=list)
    if_null: str | bool | list | None = None  # used when the field is null; None: null is refused
    minimum: int = 1  # smallest integer allowed (0 for counts such as first_k_dense_replace)
    nullable: bool = False  # null is meaningful (DeepSeek's q_lora_rank, a sliding window): kept as None
    # where the value lives: a sub-config ("text_config", "vision_config"; dotted for deeper ones, "" for the
    # top level) instead of the family's `fields_in`, and under which key (another field may already use the name)
    in_: str | None = field(default=None, metadata=alias("in"))
    key: str | None = None
    # a bool that a config may also write as a whole number, read by its truth as the modelling code tests it
    # (Meta's Llama 4 configs write attn_temperature_tuning: 4)
    truthy: bool = False
    # the values transformers' modelling code tells apart: a str field's value, or each entry of a str_list or a
    # pattern's characters (a layer kind). Anything else is refused: counted as no kind, it would be a silent guess
    one_of: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class RefusalSpec:
    """A setting symform does not model: a config that turns it on is refused rather than costed wrongly."""

    when: str = ""  # a condition over the number fields
    field: str = ""  # or a string field (a mode a config names) ...
    equals: list[str] = dataclasses.field(default_factory=list)  # ... whose value is one of these
    why: str  # the one line the user reads: what is not modelled and what to do


@dataclass(frozen=True, kw_only=True)
class ChoiceSpec:
    """A slot's component by a field's value; ``choose.mlp = "gelu_mlp"``, a component alone, whatever the config."""

    field: str | None = None  # none: a fixed choice, its one case "default"
    cases: dict[str, str]

    @classmethod
    def _before(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"cases": {"default": value}}
        if not isinstance(value, (dict, ChoiceSpec)):
            raise ValueError('a choice is a component\'s name (choose.mlp = "gelu_mlp") or a table of field and cases')
        return value

    def __post_init__(self) -> None:
        if self.field is None and set(self.cases) != {"default"}:
            raise ValueError("a choice with cases other than default needs the field that picks among them (field = ...)")


@dataclass(frozen=True, kw_only=True)
class ContextSpec:
    """Where a config states the longest sequence the model reads (past + new tokens)."""

    field: str  # a declared int field: max_position_embeddings, n_positions
    rope_scaling: str | None = None  # the config key of its RoPE scaling (a JSON object), reported with the limit
    # positions the table holds that no token takes, an expression over the fields: RoBERTa numbers its tokens
    # from pad_token_id + 1, so 514 positions cover 512 tokens
    reserved: str = "0"


@dataclass(frozen=True, kw_only=True)
class PerLayerSpec:
    """How to read transformers' per_layer_config (layer index -> that layer's sizes), where save_pretrained
    writes sizes the Hub's files name as fields of their own (Gemma 4's global_head_dim)."""

    kinds: str  # the per-layer list of layer kinds (layer_types)
    fields: dict[str, dict[str, str]]  # a kind -> {a key of its layers' overrides -> the field it stands for}


@dataclass(frozen=True, kw_only=True)
class FamilySpec:
    model_types: list[str]
    root: str
    source: str
    transformers_class: str
    # the sub-config the fields live in by default ("text_config" for a vision-language class); "" is the top level.
    # A sub-config that is absent or null reads as empty: transformers builds it from its class defaults.
    fields_in: str = ""
    # a config key whose presence (not null) selects this family over the one that reads the same model type
    # without it: a vision-language checkpoint's vision_config, for the class that holds the tower too
    when_present: str = ""
    # the model types of the `fields_in` sub-config itself: a config of one of them is that sub-config alone (what
    # the text class's save_pretrained writes: Qwen3.5's qwen3_5_text), read with its fields at the top level
    section_model_types: list[str] = dataclasses.field(default_factory=list)
    fields: dict[str, FieldSpec]
    counts: dict[str, CountSpec] = dataclasses.field(default_factory=dict)
    bind: dict[str, str]
    choose: dict[str, ChoiceSpec] = dataclasses.field(default_factory=dict)
    # the assumption sets (declared by the components, first declared wins) under which derive's leading order
    # is within 20 % of every preset (tests/test_structure.py checks it); "" where no simple form is: the
    # leading order stays in the family's own sizes
    assume: str = ""
    context: ContextSpec | None = None
    refuse: list[RefusalSpec] = dataclasses.field(default_factory=list)
    # conventions the config decides (dropout from its dropout probabilities): expressions over the fields, each
    # a whole number; they are the model's defaults, under any accounting and any convention the user sets
    conventions: dict[str, str] = dataclasses.field(default_factory=dict)
    per_layer: PerLayerSpec | None = None
    # peft (0.21) turns adapter targets that name the routed experts' projections into adapters on transformers'
    # fused 3-D expert weights for this model type (transformers' conversion table), which symform does not model;
    # elsewhere such names reach no routed expert (peft adapts Linear modules, and the experts are none)
    peft_fused_experts: bool = False


@dataclass(frozen=True)
class ContextLimit:
    """The model's own context: the most tokens (cached and new) its positions cover, as its config states."""

    tokens: int
    field: str
    rope_scaling: Mapping[str, object] | None = None  # type, factor, original_max_position_embeddings where stated

    def describe(self) -> str:
        text = f"{self.tokens:,} tokens ({self.field}"
        if self.rope_scaling:
            rope = self.rope_scaling
            text += f"; RoPE scaling {rope.get('type', 'unnamed')}"
            if "factor" in rope:
                text += f", factor {rope['factor']:g}"
            if "original_max_position_embeddings" in rope:
                text += f" over {rope['original_max_position_embeddings']:,}"
        return text + ")"

    def as_dict(self) -> dict[str, object]:
        return {"tokens": self.tokens, "field": self.field, "rope_scaling": None if self.rope_scaling is None else dict(self.rope_scaling)}


@dataclass(frozen=True)
class Family:
    name: str
    spec: FamilySpec


@dataclass(frozen=True)
class ModelSpec:
    """What a config resolves to: a root component and its arguments."""

    name: str
    root: str
    arguments: Mapping[str, int | str]  # numbers, or component names for slots
    family: str | None = None
    source: str | None = None
    context: ContextLimit | None = None  # from the config; None for architecture files and bare components
    assume: str = ""  # the family's default assumption sets for derivations ("" for none)
    checkpoint: "Checkpoint | None" = None
    config: Mapping[str, Any] | None = None  # the Hugging Face config it was read from (or a declaration's [model.transformers])
    conventions: Mapping[str, int] = field(default_factory=dict)  # the defaults the config sets (its family's [conventions])
    not_exact: Mapping[str, str] = field(default_factory=dict)  # quantity -> why a declaration says it is not exact (symform import writes it)
    preset: str | None = None  # the bundled preset it was loaded as (by name or Hub id); None for any other config


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint says about how its weights are stored, beside the shapes in its config."""

    quantization: Mapping[str, Any] | None = None  # config.json's quantization_config
    quant_file: Mapping[str, Any] | None = None  # hf_quant_config.json (NVIDIA ModelOpt)
    total_size: int | None = None  # model.safetensors.index.json's metadata.total_size, in bytes
    shards: int | None = None  # files the index maps tensors to
    dtypes: Mapping[str, Mapping[str, int]] | None = None  # tensors, elements and bytes per dtype, where the safetensors headers were read

    @property
    def quantised(self) -> bool:
        return bool(self.quantization or self.quant_file)


def checkpoint_facts(config: Mapping[str, Any], *, quant_file: Mapping[str, Any] | None = None, index: Mapping[str, Any] | None = None, total_size: int | None = None, dtypes: Mapping[str, Mapping[str, int]] | None = None) -> Checkpoint:
    """The checkpoint facts of a config and, where present, its hf_quant_config.json and safetensors index."""
    quantization = config.get("quantization_config")
    if quantization is not None and not isinstance(quantization, Mapping):
        raise ConfigError(f"quantization_config is {quoted(quantization)}; it must be a JSON object (how the weights are stored) or absent")
    shards = None
    if isinstance(index, Mapping):
        size = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), Mapping) else None
        total_size = _index_total_size(size) if isinstance(size, (int, float)) and not isinstance(size, bool) else total_size
        weight_map = index.get("weight_map")
        if isinstance(weight_map, Mapping) and not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError("model.safetensors.index.json: weight_map maps a tensor to something other than a file name; fix or remove the index")
        shards = len(set(weight_map.values())) if isinstance(weight_map, Mapping) else None
    return Checkpoint(
        quantization=quantization if isinstance(quantization, Mapping) else None,
        quant_file=quant_file if isinstance(quant_file, Mapping) else None,
        total_size=total_size if total_size is not None or not dtypes else sum(d["bytes"] for d in dtypes.values()),
        shards=shards,
        dtypes=dtypes,
    )


def _index_total_size(size: int | float) -> int:
    """metadata.total_size: the checkpoint's bytes, a whole number of at least 0 within the number budget."""
    if isinstance(size, float) and not size.is_integer() or size < 0:  # NaN and the infinities are not whole either
        raise ConfigError(f"model.safetensors.index.json: metadata.total_size is {quoted(size)}; it must be a whole number of bytes, 0 or more: fix or remove the index")
    check_number(int(size), "model.safetensors.index.json: metadata.total_size")
    return int(size)


def load_family(path: Path) -> Family:
    """A family file, symform's or a user's, with the families it extends applied: what a config is read with."""
    try:
        return Family(path.stem, build(FamilySpec, family_table(path)))
    except SchemaError as e:
        raise DeclarationError(f"{path.name}: {describe_validation(e)}") from None


_family_file = cache(load_family)


@cache
def all_families() -> Mapping[str, Family]:
    """Every family file, by name."""
    return MappingProxyType({path.stem: _family_file(path) for path in sorted((formulas_dir() / "families").glob("*.toml"))})


@cache
def _readers() -> Mapping[tuple[str, str], Family]:
    """The family reading each model type, with the config key whose presence selects it ("" for none)."""
    found: dict[tuple[str, str], Family] = {}
    for family in all_families().values():
        for model_type in family.spec.model_types:
            key = (model_type, family.spec.when_present)
            if key in found:
                raise DeclarationError(f"{family.name}.toml: model_type {model_type!r} is already read by {found[key].name}")
            found[key] = family
    for model_type, present in found:
        if present and (model_type, "") not in found:
            raise DeclarationError(f"{found[model_type, present].name}.toml: reads model_type {model_type!r} only with {present!r}, but no family reads it without")
    return MappingProxyType(found)


@cache
def _keyed_readers(model_type: str) -> tuple[tuple[str, str, Family], ...]:
    """(model type, key, family) for each family read only where a config has a key (`when_present`), in
    _readers' order, among those that may read ``model_type``. A file's `model_types` and `when_present` are
    its own, never inherited (family_files.OWN_KEYS), so only the files that write both (the model type as a
    quoted string, or any escape) are read: reading one config reads its own family, not all of them."""
    quoted_type = re.compile(rb"[\"']%s[\"']" % re.escape(model_type.encode())) if is_identifier(model_type) else None
    found = []
    for path in sorted((formulas_dir() / "families").glob("*.toml")):
        text = path.read_bytes()
        if b"when_present" not in text or quoted_type is not None and b"\\" not in text and not quoted_type.search(text):
            continue
        spec = _family_file(path).spec
        if spec.when_present:
            found += [(known, spec.when_present, _family_file(path)) for known in spec.model_types]
    return tuple(found)


@cache
def families() -> Mapping[str, Family]:
    """The family reading each model type in a config without any family's `when_present` key."""
    return MappingProxyType({model_type: family for (model_type, present), family in _readers().items() if not present})


def _variant(family: Family, model_type: str, config: Mapping[str, Any]) -> Family:
    """The family that reads this config of `model_type`: `family` where `architectures` names its class (a
    text-only checkpoint keeps the vision_config transformers writes for its model type), else one selected by
    a key the config has, else `family`."""
    names = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    for known, present, other in _keyed_readers(model_type):
        if known == model_type and config.get(present) is not None:
            # the key's reader, unless `architectures` names a class of the plain family's that the reader is not
            # (Qwen3.5's text-only class beside a vision_config); where both build one class (Gemma 4's), the key decides
            plain_named = family.spec.transformers_class in names and other.spec.transformers_class != family.spec.transformers_class
            return family if plain_named else other
    return family


def supported_model_types() -> list[str]:
    return sorted(families())


_NAME_MAX = 200  # a model type longer than a file name is no family's: not looked up as a file


def family_for(config: Mapping[str, Any], origin: str) -> Family:
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{origin}: no 'model_type' field; a Hugging Face config.json names its family there")
    if isinstance(model_type, str) and is_identifier(model_type) and len(model_type) <= _NAME_MAX:
        # the family file named after the model type, when it reads that type: one file instead of all of them
        path = formulas_dir() / "families" / f"{model_type}.toml"
        if path.is_file() and model_type in _family_file(path).spec.model_types and not _family_file(path).spec.when_present:
            return _variant(_family_file(path), model_type, config)
    if isinstance(model_type, str) and model_type in _section_readers():
        return _section_reader(_section_readers()[model_type].name)
    if not isinstance(model_type, str) or model_type not in families():
        by_class = family_for_architectures(config.get("architectures"))
        if by_class is not None:
            _check_fallback(by_class, model_type, config, origin)
            return by_class
        raise ConfigError(
            f"{origin}: model_type {quoted(model_type)} is not supported ({len(supported_model_types())} are: symform models lists them); "
            "symform import writes a declaration for a transformers model, or declare the architecture yourself (docs/declaring-architectures.md)"
        )
    return _variant(families()[model_type], model_type, config)


@cache
def _section_readers() -> Mapping[str, Family]:
    """The family reading each model type that names its `fields_in` sub-config (qwen3_5_text: qwen3_5)."""
    found: dict[str, Family] = {}
    for family in all_families().values():
        for model_type in family.spec.section_model_types:
            if model_type in found or model_type in families():
                raise DeclarationError(f"{family.name}.toml: section model_type {model_type!r} is already read by another family")
            found[model_type] = family
    return MappingProxyType(found)


@cache
def _section_reader(name: str) -> Family:
    """Family ``name`` reading a config that is its `fields_in` sub-config alone: every field at the top level."""
    return Family(name, dataclasses.replace(all_families()[name].spec, fields_in=""))


def reading_spec(family: str, config: Mapping[str, Any]) -> FamilySpec:
    """The spec family ``family`` reads ``config`` with: its own, or with its sizes at the top level where the
    config's model type is that of its `fields_in` sub-config."""
    reader = _section_readers().get(config.get("model_type")) if isinstance(config.get("model_type"), str) else None
    return _section_reader(reader.name).spec if reader is not None and reader.name == family else all_families()[family].spec


def _check_fallback(family: Family, model_type: Any, config: Mapping[str, Any], origin: str) -> None:
    """A config of an unknown model type that names a family's class is read by that family only where it holds
    the family's own fields: the sub-config the family reads its sizes from, and each size whose default is a
    number of the family's config class (another class's config lacking it would be read with those defaults)."""
    spec, cls = family.spec, family.spec.transformers_class
    named = f"{origin}: model_type {quoted(model_type)} is not supported; its architectures name {cls}, but"
    if spec.fields_in and not isinstance(config.get(spec.fields_in.split(".")[0]), Mapping):
        raise ConfigError(f"{named} the config has no {spec.fields_in!r}, where {family.name} reads its sizes: give the config of a supported model_type")
    section = sub_config(config, spec.fields_in, origin)
    missing = [
        name for name, field in spec.fields.items()
        if field.in_ is None and field.type == "int" and isinstance(field.default, str) and field.default.isdigit()
        and (field.key or name) not in _with_alias(section, field.key or name, field.aliases)
    ]  # fmt: skip
    if missing:
        raise ConfigError(f"{named} the config lacks {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}, which {family.name} would read with its own defaults: give the config of a supported model_type")


def family_for_architectures(architectures: Any) -> Family | None:
    """The family whose transformers class the config's `architectures` names, for a model type symform does
    not know that reuses a known class (Kimi K2: model_type kimi_k2, DeepseekV3ForCausalLM)."""
    if not isinstance(architectures, list):
        return None
    by_class = {family.spec.transformers_class: family for family in all_families().values()}
    for name in architectures:
        if isinstance(name, str) and name in by_class:
            return by_class[name]
    return None


def spec_from_config(config: Any, *, name: str, origin: str, family: Family | None = None) -> ModelSpec:
    """The model a config describes, read by ``family`` (load_family) or else the family of its model type."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{origin}: a config must be a JSON object, got {type(config).__name__}")
    family = family or family_for(config, origin)
    config = per_layer_read(family.spec, config, origin)
    fields = read_fields(family.spec.fields, config, origin, fields_in=family.spec.fields_in)
    _refuse_unmodelled(family.spec.refuse, fields, origin)
    for count_name, count in family.spec.counts.items():
        fields[count_name] = count_layers(count_name, count, fields, origin)
    numbers = {k: v for k, v in fields.items() if v is not None and not is_text_list(v)}
    null = {k for k, v in fields.items() if v is None}
    arguments: dict[str, int | str] = {}
    for arg, text in family.spec.bind.items():
        if null & set(re.findall(r"[A-Za-z_]\w*", text)):
            continue  # an argument read from a null field stays unbound: the chosen component does not use it
        arguments[arg] = _whole(arg, text, numbers, origin)
    for slot, choice in family.spec.choose.items():
        arguments[slot] = _choose(choice, fields[choice.field] if choice.field else None, bool(choice.field) and family.spec.fields[choice.field].type == "bool", origin)
    context = _context_limit(family.spec.context, fields, config, origin, numbers)
    conventions = MappingProxyType({name: _whole(name, text, numbers, origin) for name, text in family.spec.conventions.items()})
    return ModelSpec(name=name, root=family.spec.root, arguments=MappingProxyType(arguments), family=family.name, source=origin, context=context, assume=family.spec.assume, checkpoint=checkpoint_facts(config), config=MappingProxyType(dict(config)), conventions=conventions)


def _whole(name: str, text: str, numbers: Mapping[str, Any], origin: str) -> int:
    import sympy

    from .safe_expr import parse

    named = numbers.get(text)  # a field's own value, as half the bindings are: no expression to read
    value = named if isinstance(named, sympy.Integer) else parse(text, numbers)
    if not value.is_Integer:
        raise ConfigError(f"{origin}: {name} = {text} is {value}, not an integer; check the config's values")
    return int(value)


def _context_limit(spec: ContextSpec | None, fields: Mapping[str, Any], config: Mapping[str, Any], origin: str, numbers: Mapping[str, Any]) -> ContextLimit | None:
    if spec is None:
        return None
    if spec.field not in fields:
        raise DeclarationError(f"context field {spec.field!r} is not among the family's fields; declare it under [fields]")
    rope = config.get(spec.rope_scaling) if spec.rope_scaling else None
    if rope is not None and not isinstance(rope, Mapping):
        raise ConfigError(f"{origin}: field {spec.rope_scaling!r} is {quoted(rope)}; it must be a JSON object or null")
    summary = None
    if rope:
        kind = rope.get("rope_type", rope.get("type"))
        factor = rope.get("factor")
        original = rope.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))
        summary = {"type": kind if isinstance(kind, str) else None}
        _refuse_non_finite(f"{spec.rope_scaling}.factor", factor, None, origin)
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            summary["factor"] = factor
        if isinstance(original, int) and not isinstance(original, bool) and original > 0:
            summary["original_max_position_embeddings"] = original
        summary = MappingProxyType({k: v for k, v in summary.items() if v is not None})
    tokens = int(fields[spec.field]) - _whole("reserved positions", spec.reserved, numbers, origin)
    if tokens < 1:
        raise ConfigError(f"{origin}: {spec.field} = {fields[spec.field]} leaves no position for a token once the {spec.reserved} reserved ones are taken; raise {spec.field}")
    return ContextLimit(tokens=tokens, field=spec.field, rope_scaling=summary)


def _refuse_unmodelled(refusals: list[RefusalSpec], fields: Mapping[str, Any], origin: str) -> None:
    import sympy

    from .safe_expr import parse

    names = {k: v for k, v in fields.items() if v is not None and not is_text_list(v)}
    null = {k for k, v in fields.items() if v is None}
    for refusal in refusals:
        if refusal.field:
            if fields.get(refusal.field) in refusal.equals:
                raise ConfigError(f"{origin}: {refusal.why}")
            continue
        if null & set(re.findall(r"[A-Za-z_]\w*", refusal.when)):
            continue  # a condition on a null field does not hold
        if parse(refusal.when, names, relation=True).doit() == sympy.true:
            raise ConfigError(f"{origin}: {refusal.why}")


def _choose(choice: ChoiceSpec, value: Any, is_bool: bool, origin: str) -> str:
    """The component for a field's value: cases keyed "true"/"false", "null", a number, or "default"; a fixed
    choice's (no field) whatever the value."""
    if choice.field is None:
        return choice.cases["default"]
    if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
        value = value[0]  # a list of names chooses by its first: `architectures` names the checkpoint's class first
    key = "null" if value is None else str(bool(value)).lower() if is_bool else str(value)
    if key in choice.cases:
        return choice.cases[key]
    if value is not None and "default" in choice.cases:
        return choice.cases["default"]
    raise ConfigError(f"{origin}: field {choice.field!r} is {quoted(value)}; expected one of {', '.join(choice.cases)}")


def read_fields(specs: Mapping[str, FieldSpec], config: Mapping[str, Any], origin: str, *, fields_in: str = "") -> dict[str, Any]:
    """Read and type-check each field, applying transformers' defaults (a field a default names is read first)."""
    import sympy

    from .safe_expr import parse

    values: dict[str, Any] = {}
    for field, spec in reading_order(specs):
        where = fields_in if spec.in_ is None else spec.in_
        key = spec.key or field
        section = _with_alias(sub_config(config, where, origin), key, spec.aliases)
        name = f"{where}.{key}" if where else key
        if spec.type == "present":
            values[field] = sympy.Integer(int(section.get(key) is not None))
            continue
        if key in section and section[key] is not None:
            raw = section[key]
            _check_layer_indices(name, raw, spec, origin)
        elif spec.nullable and (key in section or spec.default is None):
            values[field] = None  # null, or absent with no default: the config class's None
            continue
        else:
            fallback = spec.if_null if key in section else spec.default
            if fallback is None:
                state = "is null" if key in section else "is missing"
                raise ConfigError(f"{origin}: field {name!r} {state}; it must be a {_kind(spec)}")
            raw = fallback if isinstance(fallback, (bool, list)) or spec.type in ("str", "pattern") else parse(fallback, {k: v for k, v in values.items() if not is_text_list(v)})
        values[field] = _check_type(name, raw, spec, origin)
    return values


def per_layer_read(spec: FamilySpec, config: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """The config with transformers' per_layer_config read into the fields its overrides stand for, where the
    family declares them: one value per kind of layer, the same for every layer of that kind, or a one-line
    refusal (symform's sizes are per kind, not per layer)."""
    declared, section = spec.per_layer, sub_config(config, spec.fields_in, origin)
    table = section.get("per_layer_config")
    if declared is None or table is None:
        return config
    kinds = section.get(declared.kinds)
    if not isinstance(table, Mapping) or not isinstance(kinds, list):
        raise ConfigError(f"{origin}: per_layer_config must be a JSON object (layer index -> sizes) beside a {declared.kinds} list")
    by_kind: dict[Any, list[dict]] = {}
    for index, overrides in table.items():
        layer = int(index) if isinstance(index, str) and index.isdigit() and len(index) < 7 else len(kinds)
        if layer >= len(kinds) or not isinstance(overrides, Mapping):
            raise ConfigError(f"{origin}: per_layer_config key {str(index)[:40]!r} must be a layer index of {declared.kinds} (0 to {len(kinds) - 1}) with an object of sizes")
        by_kind.setdefault(kinds[layer], []).append(dict(overrides))
    updates: dict[str, Any] = {}
    for kind, entries in by_kind.items():
        reads = declared.fields.get(kind, {}) if isinstance(kind, str) else {}
        if len(entries) != kinds.count(kind) or any(e != entries[0] for e in entries) or set(entries[0]) - set(reads):
            raise ConfigError(
                f"{origin}: per_layer_config gives {str(kind)[:40]} layers sizes that differ between them, miss some of them, or "
                f"are not read ({', '.join(sorted(map(str, entries[0])))[:120]}); symform reads {', '.join(sorted(reads)) or 'none'} "
                f"for every {str(kind)[:40]} layer alike"
            )
        for key, value in entries[0].items():
            field = reads[key]
            if section.get(field) is not None and section.get(field) != value:
                raise ConfigError(f"{origin}: per_layer_config's {key} {quoted(value)} for {kind} layers contradicts {field} {quoted(section[field])}; keep one of them")
            updates[field] = value
    return _with_section(config, spec.fields_in, {k: v for k, v in section.items() if k != "per_layer_config"} | updates)


def _with_section(config: Mapping[str, Any], path: str, section: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the sub-config at the dotted ``path`` ("" for the top level) replaced by ``section``."""
    if not path:
        return section
    head, _, rest = path.partition(".")
    inner = config.get(head) if isinstance(config.get(head), Mapping) else {}
    return {**config, head: _with_section(inner, rest, section)}


def sub_config(config: Mapping[str, Any], path: str, origin: str) -> Mapping[str, Any]:
    """The nested config at a dotted path; an absent or null one reads as empty (the sub-config class's defaults)."""
    section = config
    for step in path.split(".") if path else ():
        inner = section.get(step)
        if inner is None:
            return {}
        if not isinstance(inner, Mapping):
            raise ConfigError(f"{origin}: field {step!r} is {quoted(inner)}; it must be a JSON object (a nested config)")
        section = inner
    return section


def _with_alias(config: Mapping[str, Any], field: str, aliases: list[str]) -> Mapping[str, Any]:
    """The config with ``field`` taken from the first alias that holds it, when the field itself is absent."""
    if field in config:
        return config
    for alias in aliases:
        value: Any = config
        for key in alias.split("."):
            value = _entry(value, key)
        if value is not _ABSENT:
            return {**config, field: value}
    return config


_ABSENT = object()


def _entry(value: Any, key: str) -> Any:
    """One step of an alias path: an object's key, or a list's entry by its position ("channels.0")."""
    if isinstance(value, Mapping):
        return value.get(key, _ABSENT)
    if isinstance(value, list) and key.isdigit() and int(key) < len(value):
        return value[int(key)]
    return _ABSENT


def _kind(spec: FieldSpec) -> str:
    return {
        "int": "positive integer" if spec.minimum > 0 else f"integer of at least {spec.minimum}",
        "bool": "boolean (true or false)" + (" or a whole number of at least 0" if spec.truthy else ""),
        "number": "number",
        "str": "string",
        "int_list": "list of integers",
        "str_list": "list of strings",
        "pattern": "string with one character per layer",
        "present": "JSON object or null",
    }[spec.type]


def _check_layer_indices(field: str, raw: Any, spec: FieldSpec, origin: str) -> None:
    """A config's list of layer indices counts from 0, as transformers reads it (``i in moe_layers``): -1 names no
    layer there, where a family may use it internally to mean the list is absent. A field whose minimum is negative
    lists indices transformers reads from the end too (ViP-LLaVA's vision_feature_layer, hidden_states[-2])."""
    if spec.type == "int_list" and spec.minimum >= 0 and isinstance(raw, list):
        negative = next((i for i, v in enumerate(raw) if isinstance(v, int) and not isinstance(v, bool) and v < 0), None)
        if negative is not None:
            raise ConfigError(
                f"{origin}: field {field!r} gives {raw[negative]} (entry {negative}); layer indices count from 0 "
                "(transformers would match no layer with it): list the layers, or [] for none"
            )


def _check_type(field: str, raw: Any, spec: FieldSpec, origin: str) -> Any:
    import sympy

    _refuse_non_finite(field, raw, spec, origin)
    problem = ConfigError(f"{origin}: field {field!r} is {quoted(raw)}; it must be a {_kind(spec)}")
    if spec.type in ("int_list", "str_list", "pattern") and isinstance(raw, (list, str)):
        # one entry per layer: a longer list is refused before its entries are read
        check_count(len(raw), LAYERS, f"{origin}: field {field!r} (entries, one per layer)", "LAYERS", f"give a config of at most {LAYERS:,} layers")
    if spec.type == "bool":
        if spec.truthy and isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
            return sympy.Integer(int(raw != 0))
        if not isinstance(raw, bool):
            raise problem
        return sympy.Integer(int(raw))
    if spec.type == "int_list":
        if not isinstance(raw, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
            raise problem
        return tuple(sympy.Integer(v) for v in raw)
    if spec.type == "pattern":  # Nemotron-H's hybrid_override_pattern: the list of its characters
        if not isinstance(raw, str) or not raw:
            raise problem
        return _known_entries(field, tuple(raw), spec, origin)
    if spec.type == "str_list":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise problem
        return _known_entries(field, tuple(raw), spec, origin)
    if spec.type == "str":
        if not isinstance(raw, str):
            raise problem
        return _known_entries(field, (raw,), spec, origin)[0]
    check_number(raw, f"{origin}: field {field!r}")
    if spec.type == "number":
        if isinstance(raw, sympy.Basic) and raw.is_Rational:
            return raw
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != raw or raw in (float("inf"), float("-inf")):
            raise problem
        return sympy.Rational(str(raw))  # the decimal the file wrote, exactly: 0.4 is 2/5, not a binary fraction
    if isinstance(raw, sympy.Basic):
        ok = raw.is_Integer and raw >= spec.minimum
    else:
        ok = isinstance(raw, int) and not isinstance(raw, bool) and raw >= spec.minimum
    if not ok:
        raise problem
    return sympy.Integer(raw)


def _known_entries(field: str, entries: tuple[str, ...], spec: FieldSpec, origin: str) -> tuple[str, ...]:
    if spec.one_of is None:
        return entries
    for i, entry in enumerate(entries):
        if entry not in spec.one_of:
            at = f" (entry {i})" if spec.type != "str" else ""
            raise ConfigError(
                f"{origin}: field {field!r} gives {quoted(entry)}{at}; this model's code knows only {', '.join(map(repr, spec.one_of))}: "
                "correct the entry"
            )
    return entries


def load_config_file(path: Path) -> dict[str, Any]:
    try:
        if path.is_dir():
            candidate = path / "config.json"
            if candidate.is_file():
                return load_config_file(candidate)
            raise ConfigError(f"{path}: is a directory without a config.json; give the config file itself")
        if not path.exists():
            if path.is_symlink():
                raise ConfigError(f"{path}: a link that leads nowhere (a loop of links or a missing target); give the config file itself")
            raise ConfigError(f"{path}: no such file; give a preset name (symform models) or a path to a config.json")
    except OSError as e:  # a name too long, a loop of links: the path itself is unusable
        raise ConfigError(f"{path}: cannot read ({e.strerror or e.__class__.__name__}); give a readable UTF-8 JSON file") from None
    # NaN and Infinity are read as Python's json and transformers read them (Nemotron-H's published
    # "time_step_limit": [0.0, Infinity]); a field symform reads refuses them where it is read
    return read_json(path, non_finite=True)


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _refuse_non_finite(name: str, value: Any, spec: FieldSpec | None, origin: str) -> None:
    """A NaN or an infinity where symform reads a number (a size, a factor), named as the JSON file writes it."""
    if _non_finite(value) or isinstance(value, list) and any(map(_non_finite, value)):
        written = json.dumps(value, allow_nan=True)[:60]
        kind = f"; it must be a {_kind(spec)}" if spec is not None else "; it must be a finite number"
        raise ConfigError(f"{origin}: field {name!r} is {written}, not finite{kind}: give a finite value")


@dataclass(frozen=True, kw_only=True)
class PresetEntry:
    EXTRA = "allow"

    file: str
    hub: str
    source: str
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=OTHER_KEYS)  # what else the index records

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["extra"][name]
        except KeyError:
            raise AttributeError(name) from None


@cache
def presets() -> Mapping[str, PresetEntry]:
    index = read_toml(formulas_dir() / "presets" / "index.toml")
    try:
        return MappingProxyType({name: build(PresetEntry, raw) for name, raw in index.items()})
    except SchemaError as e:
        raise DeclarationError(f"presets/index.toml: {describe_validation(e)}") from None


def find_preset(text: str) -> str | None:
    """The preset a name or Hub id names: exactly, or ignoring case (``Qwen3-8B``, ``qwen/qwen3-8b``)."""
    if text in presets():
        return text
    lowered = text.lower()
    for name, entry in presets().items():
        if lowered in (name.lower(), entry.hub.lower()):
            return name
    return None


def preset_config(name: str) -> tuple[dict[str, Any], PresetEntry]:
    entry = presets()[name]
    return load_config_file(formulas_dir() / "presets" / entry.file), entry
