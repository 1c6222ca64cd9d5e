"""Hugging Face configurations: from a ``config.json`` to a model's bindings.

A family file (``formulas/families/*.toml``) says which ``model_type`` values
it reads, which config fields it needs (with the defaults transformers applies
when a field is absent or null), how the root component's arguments follow
from those fields, and which component fills each slot. Nothing here knows a
family by name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping

import sympy
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .data import formulas_dir, read_toml
from .errors import ConfigError, DeclarationError, describe_validation
from .safe_expr import parse


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["int", "bool", "number", "str", "int_list", "str_list"]
    default: str | bool | list | None = None  # used when the field is absent; None: required
    # other names the field is written under: transformers' attribute_map aliases, which save_pretrained
    # writes (qwen3_moe's num_local_experts for num_experts), or a path into a nested object ("rope_parameters.x")
    aliases: list[str] = Field(default_factory=list)
    if_null: str | bool | list | None = None  # used when the field is null; None: null is refused
    minimum: int = 1  # smallest integer allowed (0 for counts such as first_k_dense_replace)
    nullable: bool = False  # null is meaningful (DeepSeek's q_lora_rank, a sliding window): kept as None


class CountSpec(BaseModel):
    """A number of layers of one kind, counted over layer indices i (0-based)."""

    model_config = ConfigDict(extra="forbid")

    over: str = "num_hidden_layers"
    when: str | None = None  # a condition over the fields and i
    list: str | None = None  # a str_list field naming each layer's kind; used when the config has it
    equals: str | None = None  # the kind counted in that list


class RefusalSpec(BaseModel):
    """A setting symform does not model: a config that turns it on is refused rather than costed wrongly."""

    model_config = ConfigDict(extra="forbid")

    when: str  # a condition over the fields
    why: str  # the one line the user reads: what is not modelled and what to do


class ChoiceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: str
    cases: dict[str, str]


class FamilySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_types: list[str]
    root: str
    source: str
    transformers_class: str
    fields: dict[str, FieldSpec]
    counts: dict[str, CountSpec] = Field(default_factory=dict)
    bind: dict[str, str]
    choose: dict[str, ChoiceSpec] = Field(default_factory=dict)
    refuse: list[RefusalSpec] = Field(default_factory=list)


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


@cache
def _family_file(path: Path) -> Family:
    try:
        return Family(path.stem, FamilySpec.model_validate(read_toml(path)))
    except ValidationError as e:
        raise DeclarationError(f"{path.name}: {describe_validation(e)}") from None


@cache
def families() -> Mapping[str, Family]:
    found: dict[str, Family] = {}
    for path in sorted((formulas_dir() / "families").glob("*.toml")):
        family = _family_file(path)
        spec = family.spec
        for model_type in spec.model_types:
            if model_type in found:
                raise DeclarationError(f"{path.name}: model_type {model_type!r} is already read by {found[model_type].name}")
            found[model_type] = family
    return MappingProxyType(found)


def supported_model_types() -> list[str]:
    return sorted(families())


def family_for(config: Mapping[str, Any], origin: str) -> Family:
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{origin}: no 'model_type' field; a Hugging Face config.json names its family there")
    if isinstance(model_type, str) and model_type.isidentifier():
        # the family file named after the model type, when it reads that type: one file instead of all of them
        path = formulas_dir() / "families" / f"{model_type}.toml"
        if path.is_file() and model_type in _family_file(path).spec.model_types:
            return _family_file(path)
    if not isinstance(model_type, str) or model_type not in families():
        raise ConfigError(
            f"{origin}: model_type {model_type!r} is not supported; supported: {', '.join(supported_model_types())}"
            " (or declare the architecture yourself: see docs/declaring-architectures.md)"
        )
    return families()[model_type]


def spec_from_config(config: Any, *, name: str, origin: str) -> ModelSpec:
    if not isinstance(config, Mapping):
        raise ConfigError(f"{origin}: a config must be a JSON object, got {type(config).__name__}")
    family = family_for(config, origin)
    fields = read_fields(family.spec.fields, config, origin)
    _refuse_unmodelled(family.spec.refuse, fields, origin)
    for count_name, count in family.spec.counts.items():
        fields[count_name] = count_layers(count_name, count, fields, origin)
    numbers = {k: v for k, v in fields.items() if v is not None and not _is_text_list(v)}
    null = {k for k, v in fields.items() if v is None}
    arguments: dict[str, int | str] = {}
    for arg, text in family.spec.bind.items():
        if null & set(re.findall(r"[A-Za-z_]\w*", text)):
            continue  # an argument read from a null field stays unbound: the chosen component does not use it
        value = parse(text, numbers)
        if not value.is_Integer:
            raise ConfigError(f"{origin}: {arg} = {text} is {value}, not an integer; check the config's sizes")
        arguments[arg] = int(value)
    for slot, choice in family.spec.choose.items():
        arguments[slot] = _choose(choice, fields[choice.field], family.spec.fields[choice.field].type == "bool", origin)
    return ModelSpec(name=name, root=family.spec.root, arguments=MappingProxyType(arguments), family=family.name, source=origin)


def _refuse_unmodelled(refusals: list[RefusalSpec], fields: Mapping[str, Any], origin: str) -> None:
    names = {k: v for k, v in fields.items() if v is not None and not _is_text_list(v)}
    null = {k for k, v in fields.items() if v is None}
    for refusal in refusals:
        if null & set(re.findall(r"[A-Za-z_]\w*", refusal.when)):
            continue  # a condition on a null field does not hold
        if parse(refusal.when, names, relation=True).doit() == sympy.true:
            raise ConfigError(f"{origin}: {refusal.why}")


def _choose(choice: ChoiceSpec, value: Any, is_bool: bool, origin: str) -> str:
    """The component for a field's value: cases keyed "true"/"false", "null", a number, or "default"."""
    key = "null" if value is None else str(bool(value)).lower() if is_bool else str(value)
    if key in choice.cases:
        return choice.cases[key]
    if value is not None and "default" in choice.cases:
        return choice.cases["default"]
    raise ConfigError(f"{origin}: field {choice.field!r} is {value!r}; expected one of {', '.join(choice.cases)}")


def read_fields(specs: Mapping[str, FieldSpec], config: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """Read and type-check each field, applying transformers' defaults in declaration order."""
    values: dict[str, Any] = {}
    for field, spec in specs.items():
        config = _with_alias(config, field, spec.aliases)
        if field in config and config[field] is not None:
            raw = config[field]
        elif spec.nullable and (field in config or spec.default is None):
            values[field] = None  # null, or absent with no default: the config class's None
            continue
        else:
            fallback = spec.if_null if field in config else spec.default
            if fallback is None:
                state = "is null" if field in config else "is missing"
                raise ConfigError(f"{origin}: field {field!r} {state}; it must be a {_kind(spec)}")
            raw = fallback if isinstance(fallback, (bool, list)) or spec.type == "str" else parse(fallback, {k: v for k, v in values.items() if not _is_text_list(v)})
        values[field] = _check_type(field, raw, spec, origin)
    return values


def _with_alias(config: Mapping[str, Any], field: str, aliases: list[str]) -> Mapping[str, Any]:
    """The config with ``field`` taken from the first alias that holds it, when the field itself is absent."""
    if field in config:
        return config
    for alias in aliases:
        value: Any = config
        for key in alias.split("."):
            value = value.get(key, _ABSENT) if isinstance(value, Mapping) else _ABSENT
        if value is not _ABSENT:
            return {**config, field: value}
    return config


_ABSENT = object()


def count_layers(name: str, spec: CountSpec, fields: Mapping[str, Any], origin: str) -> sympy.Integer:
    total = int(fields[spec.over])
    if spec.list is not None and fields.get(spec.list):  # an absent, null or empty list falls back to `when`
        kinds = fields[spec.list]
        if len(kinds) != total:
            raise ConfigError(f"{origin}: field {spec.list!r} lists {len(kinds)} layers but {spec.over} is {total}; make them agree")
        return sympy.Integer(sum(1 for kind in kinds if kind == spec.equals))
    if spec.when is None:
        raise DeclarationError(f"count {name!r} needs a 'when' condition for configs without {spec.list!r}")
    names = {k: v for k, v in fields.items() if v is not None and not _is_text_list(v)}
    if {k for k, v in fields.items() if v is None} & set(re.findall(r"[A-Za-z_]\w*", spec.when)):
        return sympy.Integer(0)  # a condition on a null field holds for no layer
    return sympy.Integer(sum(1 for i in range(total) if parse(spec.when, {**names, "i": sympy.Integer(i)}, relation=True).doit() == sympy.true))


def _is_text_list(value: Any) -> bool:
    """Text (a str field, a list of strings): read by choices and counts, never by arithmetic."""
    return isinstance(value, str) or (isinstance(value, tuple) and any(isinstance(v, str) for v in value))


def _kind(spec: FieldSpec) -> str:
    return {
        "int": "positive integer" if spec.minimum > 0 else f"integer of at least {spec.minimum}",
        "bool": "boolean (true or false)",
        "number": "number",
        "str": "string",
        "int_list": "list of integers",
        "str_list": "list of strings",
    }[spec.type]


def _check_type(field: str, raw: Any, spec: FieldSpec, origin: str) -> Any:
    problem = ConfigError(f"{origin}: field {field!r} is {raw!r}; it must be a {_kind(spec)}")
    if spec.type == "bool":
        if not isinstance(raw, bool):
            raise problem
        return sympy.Integer(int(raw))
    if spec.type == "int_list":
        if not isinstance(raw, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
            raise problem
        return tuple(sympy.Integer(v) for v in raw)
    if spec.type == "str_list":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise problem
        return tuple(raw)
    if spec.type == "str":
        if not isinstance(raw, str):
            raise problem
        return raw
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


def load_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; give a preset name (symform models) or a path to a config.json") from None
    except IsADirectoryError:
        candidate = path / "config.json"
        if candidate.is_file():
            return load_config_file(candidate)
        raise ConfigError(f"{path}: is a directory without a config.json; give the config file itself") from None
    except (UnicodeDecodeError, PermissionError, OSError) as e:
        raise ConfigError(f"{path}: cannot read ({e.__class__.__name__}); give a readable UTF-8 JSON file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); fix the file") from None


class PresetEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str
    hub: str
    source: str


@cache
def presets() -> Mapping[str, PresetEntry]:
    index = read_toml(formulas_dir() / "presets" / "index.toml")
    try:
        return MappingProxyType({name: PresetEntry.model_validate(raw) for name, raw in index.items()})
    except ValidationError as e:
        raise DeclarationError(f"presets/index.toml: {describe_validation(e)}") from None


def preset_config(name: str) -> tuple[dict[str, Any], PresetEntry]:
    entry = presets()[name]
    return load_config_file(formulas_dir() / "presets" / entry.file), entry
