"""Layers of each kind a config names: a count over layer indices, read from a list of kinds, a pattern or a
condition (``[counts]`` of a family file)."""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..budget import LAYERS, check_count
from ..errors import ConfigError, DeclarationError


@dataclass(frozen=True, kw_only=True)
class CountSpec:
    """A number of layers of one kind, counted over layer indices i (0-based)."""

    # the field giving the number of layers; "": the list's length is the number (transformers derives
    # num_hidden_layers from Nemotron-H's list of block types and ignores the field)
    over: str = "num_hidden_layers"
    when: str | None = None  # a condition over the fields and i
    # str_list or pattern fields naming each layer's kind, first given first (a config may give the kinds under
    # a newer name or an older spelling); used when the config has one
    list: str | builtins.list[str] | None = None  # (the field's name hides the built-in here)
    equals: str | builtins.list[str] | None = None  # the kinds counted in that list; None: every layer it lists
    # for a list of integers (Llama 4's no_rope_layers: 1 a RoPE layer, 0 a NoPE one), a condition over the fields,
    # i and `kind` (layer i's entry) that a listed layer must meet to be counted, in place of `equals`; for a list
    # of kinds, a condition over the fields and i that narrows the `equals` kinds to some layers
    each: str | None = None

    def lists(self) -> list[str]:
        return [self.list] if isinstance(self.list, str) else builtins.list(self.list or ())

    def kinds(self) -> set[str] | None:
        return {self.equals} if isinstance(self.equals, str) else None if self.equals is None else set(self.equals)


def count_layers(name: str, spec: CountSpec, fields: Mapping[str, Any], origin: str) -> sympy.Integer:
    import sympy

    listed = listed_kinds(spec, fields)
    if listed is not None:
        if spec.over and len(listed[1]) != int(fields[spec.over]):
            raise ConfigError(f"{origin}: field {listed[0]!r} lists {len(listed[1])} layers but {spec.over} is {fields[spec.over]}; make them agree")
        # a condition reading `kind` is about the entries of a list of integers; a list of kinds read in its place
        # (the layer_types transformers saves) is selected by `equals` alone
        if spec.each is not None and not (is_text_list(listed[1]) and re.search(r"\bkind\b", spec.each)):
            return _count_each(name, spec, listed[1], fields)
        kinds = spec.kinds()
        return sympy.Integer(sum(1 for kind in listed[1] if kinds is None or kind in kinds))
    if spec.when is None and not spec.over and any(fields.get(field) in ((), "") for field in spec.lists()):
        return sympy.Integer(0)  # the list's length is the number, and the list is empty (no DeepStack layers)
    if spec.when is None or not spec.over:
        raise DeclarationError(f"count {name!r} needs 'over' and a 'when' condition for configs without {' or '.join(spec.lists())}")
    total = int(fields[spec.over])
    names = {k: v for k, v in fields.items() if v is not None and not is_text_list(v)}
    if {k for k, v in fields.items() if v is None} & set(re.findall(r"[A-Za-z_]\w*", spec.when)):
        return sympy.Integer(0)  # a condition on a null field holds for no layer
    if "i" not in re.findall(r"[A-Za-z_]\w*", spec.when):  # the same for every layer: decided once
        return sympy.Integer(total if _holds(spec.when, names) else 0)
    check_count(total, LAYERS, f"{origin}: {spec.over} (layers counted one by one for {name})", "LAYERS", f"give a config of at most {LAYERS:,} layers")
    return sympy.Integer(sum(1 for i in range(total) if _holds(spec.when, {**names, "i": sympy.Integer(i)})))


def _count_each(name: str, spec: CountSpec, listed: tuple, fields: Mapping[str, Any]) -> sympy.Integer:
    """The listed layers for which ``spec.each`` holds, with ``kind`` the layer's entry in a list of integers; in a
    list of kinds (text), the layers of the `equals` kinds for which ``spec.each`` holds over the fields and i."""
    import sympy

    if is_text_list(listed):
        kinds = spec.kinds()
        names = {k: v for k, v in fields.items() if v is not None and not is_text_list(v)}
        check_count(len(listed), LAYERS, f"count {name} (layers listed one by one)", "LAYERS", f"give a config of at most {LAYERS:,} layers")
        return sympy.Integer(sum(1 for i, kind in enumerate(listed) if (kinds is None or kind in kinds) and _holds(spec.each, {**names, "i": sympy.Integer(i)})))

    if "kind" in fields:
        raise DeclarationError(f"count {name!r}: a field named 'kind' hides the listed entry in 'each'; rename the field")
    names = {k: v for k, v in fields.items() if v is not None and not is_text_list(v)}
    check_count(len(listed), LAYERS, f"count {name} (layers listed one by one)", "LAYERS", f"give a config of at most {LAYERS:,} layers")
    return sympy.Integer(sum(1 for i, kind in enumerate(listed) if _holds(spec.each, {**names, "i": sympy.Integer(i), "kind": kind})))


def listed_kinds(spec: CountSpec, fields: Mapping[str, Any]) -> tuple[str, tuple] | None:
    """The first of the count's lists the config gives (an absent, null or empty one is skipped), with its name."""
    for field in spec.lists():
        if fields.get(field):
            # a str field names one kind for the whole model (Granite 4.0-H's position_embedding_type): a list of one
            return field, (fields[field],) if isinstance(fields[field], str) else fields[field]
    return None


def layers_in(spec: CountSpec, fields: Mapping[str, Any]) -> int:
    """How many layers the count is taken over: the `over` field, or the length of the list it reads."""
    listed = listed_kinds(spec, fields)
    if listed is None and not spec.over:
        return 0  # the list's length is the number, and the config gives no list (or an empty one)
    return int(fields[spec.over]) if spec.over else len(listed[1])


def _holds(condition: str, names: Mapping[str, Any]) -> bool:
    import sympy

    from .safe_expr import parse

    return parse(condition, names, relation=True).doit() == sympy.true


def is_text_list(value: Any) -> bool:
    """Text (a str field, a list of strings): read by choices and counts, never by arithmetic."""
    return isinstance(value, str) or (isinstance(value, tuple) and any(isinstance(v, str) for v in value))
