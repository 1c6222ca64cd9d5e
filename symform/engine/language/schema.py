"""Frozen dataclasses built from parsed TOML and JSON tables, checked against their type hints.

The declaration and family files are read on every command; this small validator reads them without the
cost of importing a validation library. It understands the types those files use: str, int, float, bool, Any,
Literal[...], list[T], dict[str, T] (or a Literal's keys), unions (``T | None`` among them) and nested schema
dataclasses, with a field's alias in its metadata (``field(metadata=alias("in"))``). ``Annotated`` adds checks:
``Plain`` and ``After`` functions, ``MaxLen`` for a list, ``above``/``at_least`` for a number's bounds.
Unknown keys are refused unless the class sets ``EXTRA = "allow"``; a class may set ``POPULATE_BY_NAME`` to
take a field under its own name too. Errors read as 'field.path: message', in the wording users have always
met (``Field required``, ``Extra inputs are not permitted``, ``Input should be a valid string``), and only
the first problem is reported.

A class may declare ``_before(value)`` (a classmethod turning the raw value into a table) and checks in
``__post_init__``; a ValueError from either is the user's problem, reported where the table is.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any, Callable, Literal, Mapping


class SchemaError(ValueError):
    """The first problem found in a table: where (a path of keys and positions) and what."""

    def __init__(self, loc: tuple, msg: str):
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}" if loc else msg)
        self.loc = loc
        self.msg = msg

    def errors(self) -> list[dict[str, Any]]:  # the shape symform.engine.errors.describe_validation reads
        return [{"loc": self.loc, "msg": self.msg}]


class _Fail(Exception):
    def __init__(self, loc: tuple, msg: str):
        self.loc = loc
        self.msg = msg


OTHER_KEYS = {"extra": True}  # the metadata of the field that holds the keys an EXTRA = "allow" class does not declare


def alias(name: str) -> dict[str, str]:
    """A field's metadata: the key the files write it under (a Python keyword such as ``in``, ``with``)."""
    return {"alias": name}


class Plain:
    """A field type checked by a function of the raw value alone (it returns the value or raises ValueError);
    ``tag`` names it within a union, as errors give it."""

    def __init__(self, function: Callable[[Any], Any], tag: str):
        self.function = function
        self.tag = tag


class After:
    """A check run on a field's value once its type is right: it returns the value or raises ValueError."""

    def __init__(self, function: Callable[[Any], Any]):
        self.function = function


class MaxLen:
    """A list's most entries, checked on the input before its entries are (a long list is refused whole)."""

    def __init__(self, most: int):
        self.most = most


def above(bound: int | float) -> After:
    """A number's check: greater than ``bound``."""
    return After(lambda v: _bound(v, v > bound, f"greater than {bound}"))


def at_least(bound: int | float) -> After:
    """A number's check: ``bound`` or more."""
    return After(lambda v: _bound(v, v >= bound, f"greater than or equal to {bound}"))


def _bound(value: Any, holds: bool, wanted: str) -> Any:
    if not holds:
        raise ValueError(f"Input should be {wanted}")
    return value


Validator = Callable[[Any, bool], Any]  # (value, strict) -> the value, or _Fail


def build(cls: type, raw: Any) -> Any:
    """An instance of the schema dataclass ``cls`` from a raw table; SchemaError names the first problem."""
    try:
        return _model(cls)(raw, False)
    except _Fail as e:
        raise SchemaError(e.loc, e.msg) from None


def given(obj: Any) -> frozenset[str]:
    """The names of the fields the table gave (the others took their defaults)."""
    return obj.__dict__.get("_given", frozenset())


def dump_given(obj: Any, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The fields the table gave, under the keys it may write them with, nested dataclasses as tables."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.name in given(obj) and f.name not in exclude:
            out[f.metadata.get("alias", f.name)] = _plain(getattr(obj, f.name))
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dump_given(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


_MODELS: dict[type, Validator] = {}


def _model(cls: type) -> Validator:
    if cls not in _MODELS:
        _MODELS[cls] = _lazy_model(cls)
    return _MODELS[cls]


def _lazy_model(cls: type) -> Validator:
    plan: list = []

    def validate(value: Any, strict: bool) -> Any:
        if not plan:
            plan.append(_model_plan(cls))
        return _validate_model(cls, plan[0], value)

    return validate


def _model_plan(cls: type) -> tuple:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("extra"):
            continue
        key = f.metadata.get("alias", f.name)
        if f.default is not dataclasses.MISSING:
            default: Callable[[], Any] | None = (lambda d=f.default: d)
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        else:
            default = None
        fields.append((f.name, key, _validator(hints[f.name]), default))
    return tuple(fields), getattr(cls, "EXTRA", "forbid"), getattr(cls, "POPULATE_BY_NAME", False)


def _validate_model(cls: type, plan: tuple, value: Any) -> Any:
    fields, extra, by_name = plan
    before = getattr(cls, "_before", None)
    if before is not None:
        try:
            value = before(value)
        except ValueError as e:
            raise _Fail((), f"Value error, {e}") from None
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise _Fail((), f"Input should be a valid dictionary or instance of {cls.__name__}")
    kwargs, used, got = {}, set(), set()
    for name, key, check, default in fields:
        if key in value:
            found = key
        elif by_name and name in value:
            found = name
        else:
            if default is None:
                raise _Fail((key,), "Field required")
            kwargs[name] = default()
            continue
        used.add(found)
        got.add(name)
        kwargs[name] = _at(found, check, value[found], False)
    extras = {k: v for k, v in value.items() if k not in used}
    if extras and extra != "allow":
        raise _Fail((next(iter(extras)),), "Extra inputs are not permitted")
    if extra == "allow":
        kwargs["extra"] = extras
    try:
        obj = cls(**kwargs)
    except ValueError as e:
        raise _Fail((), f"Value error, {e}") from None
    object.__setattr__(obj, "_given", frozenset(got))
    return obj


def _validator(hint: Any) -> Validator:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        inner, marks = args[0], args[1:]
        plain = next((m for m in marks if isinstance(m, Plain)), None)
        if plain is not None:
            return _plain_validator(plain.function)
        most = next((m.most for m in marks if isinstance(m, MaxLen)), None)
        core = _validator(inner) if most is None else _at_most(most, _validator(inner))
        return _after(core, [m.function for m in marks if isinstance(m, After)])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        core = _validator(members[0]) if len(members) == 1 else _union([(_tag(m), _validator(m)) for m in members])
        return _nullable(core) if len(members) < len(args) else core
    if origin is Literal:
        return _literal(args)
    if origin is list or hint is list:
        return _list(_validator(args[0]) if args else _any)
    if origin is dict or hint is dict:
        keys = _validator(args[0]) if args and args[0] is not str else None
        return _dict(_validator(args[1]) if args else _any, keys)
    if hint is Any:
        return _any
    if hint is str:
        return _str
    if hint is bool:
        return _bool
    if hint is int:
        return _int
    if hint is float:
        return _float
    if dataclasses.is_dataclass(hint):
        return _model(hint)
    raise TypeError(f"schema: no validator for {hint!r}")


def _tag(hint: Any) -> str:
    """A union member's name in an error's path, as errors have always spelled it."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        plain = next((m for m in args[1:] if isinstance(m, Plain)), None)
        return plain.tag if plain is not None else _tag(args[0])
    if origin is list or hint is list:
        return f"list[{_tag(args[0]) if args else 'any'}]"
    if origin is dict or hint is dict:
        return f"dict[str,{_tag(args[1]) if args else 'any'}]"
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def _any(value: Any, strict: bool) -> Any:
    return value


def _str(value: Any, strict: bool) -> str:
    if type(value) is str:
        return value
    if not strict and isinstance(value, (bytes, bytearray)):
        return bytes(value).decode()
    raise _Fail((), "Input should be a valid string")


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _bool(value: Any, strict: bool) -> bool:
    if type(value) is bool:
        return value
    if strict:
        raise _Fail((), "Input should be a valid boolean")
    if type(value) is int:
        if value in (0, 1):
            return bool(value)
        if abs(value) >= 2**63:  # past a machine integer it was never read as one
            raise _Fail((), "Input should be a valid boolean")
        raise _Fail((), "Input should be a valid boolean, unable to interpret input")
    if type(value) is float and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise _Fail((), "Input should be a valid boolean, unable to interpret input")
    raise _Fail((), "Input should be a valid boolean")


_INT_TEXT = re.compile(r"[+-]?\d+(?:_\d+)*(?:\.0*)?")


def _int(value: Any, strict: bool) -> int:
    if type(value) is int:
        return value
    if strict:
        raise _Fail((), "Input should be a valid integer")
    if type(value) is bool:
        return int(value)
    if type(value) is float:
        if not math.isfinite(value):
            raise _Fail((), "Input should be a finite number")
        if not value.is_integer():
            raise _Fail((), "Input should be a valid integer, got a number with a fractional part")
        if abs(value) >= 2**63:
            raise _Fail((), "Unable to parse input string as an integer, exceeded maximum size")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and _INT_TEXT.fullmatch(text):
            return int(text.partition(".")[0].replace("_", ""))
        raise _Fail((), "Input should be a valid integer, unable to parse string as an integer")
    raise _Fail((), "Input should be a valid integer")


def _float(value: Any, strict: bool) -> float:
    if type(value) in (int, float) or (not strict and type(value) is bool):
        try:
            return float(value)
        except OverflowError:  # an integer past a float's range
            raise _Fail((), "Input should be a valid number") from None
    if strict:
        raise _Fail((), "Input should be a valid number")
    if isinstance(value, (str, bytes, bytearray)):
        text = (value if isinstance(value, str) else bytes(value).decode()).strip()
        try:
            if text.isascii():
                return float(text)
        except ValueError:
            pass
        raise _Fail((), "Input should be a valid number, unable to parse string as a number")
    raise _Fail((), "Input should be a valid number")


def _literal(allowed: tuple) -> Validator:
    quoted = [repr(a) for a in allowed]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def validate(value: Any, strict: bool) -> Any:
        if type(value) is str and value in allowed:
            return value
        raise _Fail((), f"Input should be {expected}")

    return validate


def _at(key: Any, check: Validator, value: Any, strict: bool) -> Any:
    """``check`` of the entry at ``key``; its problem placed under that key."""
    try:
        return check(value, strict)
    except _Fail as e:
        raise _Fail((key, *e.loc), e.msg) from None


def _list(item: Validator) -> Validator:
    def validate(value: Any, strict: bool) -> list:
        if not isinstance(value, (list, tuple)) or (strict and not isinstance(value, list)):
            raise _Fail((), "Input should be a valid list")
        return [_at(i, item, v, strict) for i, v in enumerate(value)]

    return validate


def _at_most(most: int, core: Validator) -> Validator:
    def validate(value: Any, strict: bool) -> Any:
        if isinstance(value, (list, tuple)) and len(value) > most:
            raise _Fail((), f"List should have at most {most} item{'s' if most != 1 else ''} after validation, not {len(value)}")
        return core(value, strict)

    return validate


def _dict(item: Validator, keys: Validator | None = None) -> Validator:
    """A table of ``item``; its keys strings, or what ``keys`` takes (a Literal's names)."""

    def validate(value: Any, strict: bool) -> dict:
        if not isinstance(value, Mapping) or (strict and not isinstance(value, dict)):
            raise _Fail((), "Input should be a valid dictionary")
        out = {}
        for k, v in value.items():
            if keys is not None:
                try:
                    k = keys(k, strict)
                except _Fail as e:
                    raise _Fail((k, "[key]", *e.loc), e.msg) from None
            elif type(k) is not str:
                raise _Fail((k, "[key]"), "Input should be a valid string")
            out[k] = _at(k, item, v, strict)
        return out

    return validate


def _nullable(core: Validator) -> Validator:
    def validate(value: Any, strict: bool) -> Any:
        return None if value is None else core(value, strict)

    return validate


def _union(members: list[tuple[str, Validator]]) -> Validator:
    """The first member that takes the value exactly, else the first that takes it with a conversion; failing
    every one, the first member's problem, under its name."""

    def validate(value: Any, strict: bool) -> Any:
        for _, member in members:
            try:
                return member(value, True)
            except _Fail:
                pass
        first = None
        for tag, member in members:
            try:
                return member(value, strict)
            except _Fail as e:
                first = first or _Fail((tag, *e.loc), e.msg)
        raise first

    return validate


def _plain_validator(function: Callable[[Any], Any]) -> Validator:
    def validate(value: Any, strict: bool) -> Any:
        try:
            return function(value)
        except ValueError as e:
            raise _Fail((), f"Value error, {e}") from None

    return validate


def _after(core: Validator, checks: list[Callable[[Any], Any]]) -> Validator:
    if not checks:
        return core

    def validate(value: Any, strict: bool) -> Any:
        value = core(value, strict)
        for check in checks:
            try:
                value = check(value)
            except ValueError as e:
                raise _Fail((), f"Value error, {e}") from None
        return value

    return validate
