"""Derivations: pure functions of their arguments, each worked out once per distinct arguments.

A plan, a memory budget or a step time derives the same expressions from a model again and again (each
phase's work per component, the activations a recomputation keeps, the parameters on one rank). A function
decorated with ``@derivation`` is worked out once per distinct call and its value kept in one bounded,
in-process memo. Its key is computed by one mechanism from the function and every argument it was given,
never assembled at a call site, so two calls that could give different answers never share an entry:

- an object that names its own inputs (``derivation_key()``: a model names its declarations, every size and
  argument, its conventions, accounting and checkpoint) is keyed by them;
- plain data (numbers with their type, text, sympy expressions, tuples, lists, mappings, sets and dataclass
  instances, recursively) by value;
- anything else (a function, a library, a graph) by identity, held by the memo so that it cannot be reused.

A derivation must read nothing but its arguments and symform's bundled files (which do not change while
it runs). Nothing here is kept between runs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from fractions import Fraction
from typing import Any, Callable, Mapping, TypeVar

import sympy

KEPT = 16_384  # derivations remembered at once; the least recently used is forgotten past this

_MEMO: "OrderedDict[tuple, Any]" = OrderedDict()
_MISSING = object()

F = TypeVar("F", bound=Callable[..., Any])


class Identity:
    """An object keyed by its identity (held, so that its id is not reused while the key lives)."""

    __slots__ = ("held",)

    def __init__(self, held: object):
        self.held = held

    def __hash__(self) -> int:
        return id(self.held)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.held is self.held


def derivation(function: F) -> F:
    """``function`` worked out once per distinct arguments (see the module's docstring for the key)."""

    @functools.wraps(function)
    def derived(*args: Any, **kwargs: Any) -> Any:
        key = (function, inputs_key(args), inputs_key(kwargs))
        found = _MEMO.get(key, _MISSING)
        if found is _MISSING:
            found = function(*args, **kwargs)
            _MEMO[key] = found
            if len(_MEMO) > KEPT:
                _MEMO.popitem(last=False)
        else:
            _MEMO.move_to_end(key)
        return found

    derived.uncached = function  # type: ignore[attr-defined]
    return derived  # type: ignore[return-value]


def inputs_key(value: Any) -> Any:
    """A hashable key equal for two values only where a pure function cannot tell them apart."""
    kind = type(value)
    if value is None or kind in (str, bytes, bool):
        return value
    if kind in (int, float, Fraction, complex):  # 1, 1.0 and True compare equal: their type is part of the key
        return (kind, value)
    if isinstance(value, sympy.Basic):  # immutable trees that compare by structure, assumptions included
        return value
    own = getattr(value, "derivation_key", None)
    if own is not None and callable(own):
        return (kind, own())
    if kind in (tuple, list):
        return (kind, tuple(inputs_key(v) for v in value))
    if isinstance(value, Mapping):  # in order: a function may give its items back in the order it was given them
        return (dict, tuple((inputs_key(k), inputs_key(v)) for k, v in value.items()))
    if kind in (set, frozenset):
        return (frozenset, frozenset(inputs_key(v) for v in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (kind, tuple(inputs_key(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return Identity(value)


def forget_derivations() -> None:
    """Forget every derivation (benchmarks measure the cold path; nothing else needs it)."""
    _MEMO.clear()
