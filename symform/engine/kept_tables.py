"""Expressions and the values built of them as plain JSON, for what is kept between runs (graphs, derivations).

Every distinct sub-expression is written once, in a table whose entries name earlier entries only: a
model's layers share most of their expressions, and the table is read front to back without recursion.
A value around the expressions (text, numbers, tuples, mappings, sets, instances of the classes that
declare themselves ``keepable``) is written by its type, so that what is read back is of the same types
as what was written. Reading goes through the allow-list of sympy constructors that kept parsed
expressions use (safe_expr), held to the budgets of a kept tree; anything amiss raises, and the caller
works the value out again: the cache only saves time.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields, is_dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import sympy
from sympy.core.assumptions import _assume_defined

from .budget import GRAPH_NODES, NESTING_DEPTH
from .declarations import Component, Library, default_library
from .safe_expr import MAX_TREE_NODES, kept_leaf, kept_leaf_value, kept_node, kept_node_name, same_tree, symbol_description

MAX_ENTRIES = 64 * GRAPH_NODES  # distinct sub-expressions of one kept document: a bundled preset's graph has 300-900
MAX_ITEMS = 64 * GRAPH_NODES  # values around them (texts, tuples, mapping entries, ...) in one document
_VALUE_DEPTH = 12  # values within values: a phase's work is an object of a mapping of objects of expressions

KEPT_CLASSES: dict[str, type] = {}  # "module.Class" -> class: the only instances a document may make


def keepable(cls: type) -> type:
    """Class decorator: instances of this dataclass may be kept, written field by field (and any
    ``cached_property`` already worked out), and read back without calling its ``__init__``."""
    if not is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    KEPT_CLASSES[_class_name(cls)] = cls
    return cls


class NotKept(Exception):
    """A value with something a kept document cannot hold (a Dummy symbol, a Float, an instance of a class
    not declared keepable)."""


class Writer:
    """Sub-expressions into one table, each distinct one once, after its arguments; values around them by type."""

    def __init__(self, library: Library):
        self.vocabulary = library.vocabulary
        self.table: list[list[Any]] = []
        self._index: dict[tuple[type, sympy.Basic], int] = {}

    def put(self, expr: object) -> int:
        if not isinstance(expr, sympy.Basic):
            raise NotKept(type(expr).__name__)
        key = (type(expr), expr)
        found = self._index.get(key)
        if found is None:
            entry = self._entry(expr)
            found = self._index[key] = len(self.table)
            self.table.append(entry)
        return found

    def _entry(self, expr: sympy.Basic) -> list[Any]:
        if isinstance(expr, sympy.Symbol):
            entry = self.vocabulary.entries.get(expr.name)
            if entry is not None and entry.symbol == expr:
                return ["n", expr.name]
            if type(expr) is not sympy.Symbol:  # a Dummy or Wild is equal to no symbol made again
                raise NotKept(expr.name)
            return ["s", expr.name, dict(sorted(expr.assumptions0.items()))]  # an analysis's own (the planner's degrees)
        leaf = kept_leaf(expr)
        if leaf is not None:
            return leaf
        name = kept_node_name(expr)
        if name is None:
            raise NotKept(type(expr).__name__)
        return ["f", name, [self.put(a) for a in expr.args]]

    def value(self, v: Any) -> Any:
        """``v`` as JSON: an expression by its table entry, anything else as a [kind, content] pair."""
        if isinstance(v, sympy.Basic):
            return self.put(v)
        if v is None or isinstance(v, bool):
            return ["plain", v]
        if type(v) is str:
            return ["text", v]
        if type(v) is int:
            return ["int", str(v)]
        if type(v) is float:
            return ["float", repr(v)]
        if type(v) is Fraction:
            return ["fraction", str(v.numerator), str(v.denominator)]
        if type(v) in (tuple, list):
            return [type(v).__name__, [self.value(x) for x in v]]
        if type(v) is frozenset:
            return ["frozenset", [self.value(x) for x in v]]
        if type(v) is dict:
            if all(type(k) is str for k in v):  # a mapping by name (a node's arguments, a phase's components)
                return ["map", {k: self.value(x) for k, x in v.items()}]
            return ["dict", [[self.value(k), self.value(x)] for k, x in v.items()]]
        if isinstance(v, Component):  # a declared component, by its name in the library the reader is given
            return ["component", v.name]
        cls = KEPT_CLASSES.get(_class_name(type(v)))
        if cls is type(v):
            return ["object", _class_name(cls), {name: self.value(x) for name, x in _attributes(v).items()}]
        raise NotKept(type(v).__name__)


def key_text(v: Any) -> str:
    """A hashable key as text that is the same in every run for an equal key (sets sorted, expressions node
    by node in the order of their arguments, which is sympy's canonical one, not the order of hashes);
    NotKept for a key holding anything else than ``Writer.value`` writes."""
    if isinstance(v, sympy.Basic):
        return "e" + _tree_text(v)
    if v is None or type(v) in (bool, str, int, float, Fraction):
        return f"{type(v).__name__}:{v!r}"
    if type(v) in (tuple, list):
        return json.dumps([type(v).__name__, [key_text(x) for x in v]])
    if type(v) is frozenset:
        return json.dumps(["frozenset", sorted(key_text(x) for x in v)])
    if KEPT_CLASSES.get(_class_name(type(v))) is type(v):
        return json.dumps(["object", _class_name(type(v)), {k: key_text(x) for k, x in _attributes(v).items()}])
    raise NotKept(type(v).__name__)


def _tree_text(expr: sympy.Basic) -> str:
    """An expression as text, faithful to its tree: a symbol with its assumptions, a number by its digits
    (sympy's srepr says the same, through its printer, several times slower)."""
    if isinstance(expr, sympy.Symbol):
        if type(expr) is not sympy.Symbol:  # a Dummy is told apart by a counter of this run's: no other run has it
            raise NotKept(type(expr).__name__)
        return f"Symbol:{expr.name}{symbol_description(expr)}"
    if isinstance(expr, sympy.Rational):
        return f"{type(expr).__name__}:{expr.p}/{expr.q}"
    if not expr.args:
        return type(expr).__name__ + ":" + str(expr)
    return type(expr).__name__ + "(" + ",".join(_tree_text(a) for a in expr.args) + ")"


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _attributes(obj: Any) -> dict[str, Any]:
    """A kept instance's fields, and the cached properties it has worked out (its total, say)."""
    found = {f.name: getattr(obj, f.name) for f in fields(obj)}
    found.update({name: obj.__dict__[name] for name in _cached_names(type(obj)) if name in obj.__dict__})
    return found


def _cached_names(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name, attr in vars(klass).items() if isinstance(attr, cached_property)}


def rebuilt_table(table: Any) -> list[sympy.Basic]:
    """Every entry's expression, front to back: an entry names only entries before it. Each is held to the
    bounds a parsed expression's kept tree is (its size as a tree, shared entries counted each time they
    occur, and its depth), so that no entry makes a tree that walking would take exponential time over."""
    if not isinstance(table, list) or len(table) > MAX_ENTRIES:
        raise ValueError("table")
    vocabulary = default_library().vocabulary
    done: list[sympy.Basic] = []
    sizes: list[tuple[int, int]] = []  # (nodes as a tree, depth) of each entry
    for entry in table:
        kind = entry[0]
        if kind == "f":
            indices = entry[2]
            if not all(type(i) is int and 0 <= i < len(done) for i in indices):
                raise ValueError("an entry names one not yet read")
            size = (1 + sum(sizes[i][0] for i in indices), 1 + max((sizes[i][1] for i in indices), default=0))
            if size[0] > MAX_TREE_NODES or size[1] > NESTING_DEPTH:
                raise ValueError("an entry past the budget")
            done.append(kept_node(entry[1], [done[i] for i in indices]))
        else:
            size = (1, 1)
            done.append(vocabulary[entry[1]] if kind == "n" else _symbol(entry) if kind == "s" else kept_leaf_value(entry))
        sizes.append(size)
    return done


def _symbol(entry: list[Any]) -> sympy.Symbol:
    """A symbol of an analysis's own: a name and the assumptions sympy knows, each true or false."""
    _, name, assumptions = entry
    if not (isinstance(name, str) and name.isidentifier() and len(name) <= 64 and isinstance(assumptions, dict)):
        raise ValueError("a kept symbol")
    if not all(k in _assume_defined and type(v) is bool for k, v in assumptions.items()):
        raise ValueError("a kept symbol's assumptions")
    return sympy.Symbol(name, **assumptions)


class Reader:
    """Values as ``Writer.value`` wrote them, over a table already rebuilt, components named in ``library``;
    at most MAX_ITEMS of them, nested at most _VALUE_DEPTH deep."""

    def __init__(self, table: list[sympy.Basic], library: Library):
        self.table = table
        self.library = library
        self._left = MAX_ITEMS

    def value(self, v: Any, depth: int = 0) -> Any:
        self._left -= 1
        if self._left < 0 or depth > _VALUE_DEPTH:
            raise ValueError("a kept value past the budget")
        if type(v) is int:
            if not 0 <= v < len(self.table):
                raise ValueError("no such entry")
            return self.table[v]
        kind, content, *rest = v
        if kind == "plain" and (content is None or type(content) is bool):
            return content
        if kind == "text":
            return text(content)
        if kind == "int":
            return int(text(content))  # past Python's digit limit for text, a ValueError
        if kind == "float":
            number = float(text(content))
            if not math.isfinite(number):  # never written: a NaN is not equal to itself, so it does not read back equal
                raise ValueError("a kept float that is not finite")
            return number
        if kind == "fraction":
            return Fraction(int(text(content)), int(text(rest[0])))
        if kind in ("tuple", "list", "frozenset"):
            items = [self.value(x, depth + 1) for x in _listed(content)]
            return {"tuple": tuple, "list": list, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            return {self.value(k, depth + 1): self.value(x, depth + 1) for k, x in _listed(content)}
        if kind == "map":
            if not isinstance(content, dict):
                raise TypeError("a kept mapping by name is a JSON object")
            return {text(k): self.value(x, depth + 1) for k, x in content.items()}
        if kind == "component":
            return self.library[text(content)]
        if kind == "object":
            return self._object(text(content), rest[0], depth)
        raise ValueError("not a kept value")

    def _object(self, name: str, kept: Any, depth: int) -> Any:
        cls = KEPT_CLASSES[name]
        if not isinstance(kept, dict):
            raise ValueError("an object's fields")
        required = {f.name for f in fields(cls)}
        if not required <= kept.keys() <= required | _cached_names(cls):
            raise ValueError(f"{name}'s fields")
        obj = object.__new__(cls)
        for attribute, x in kept.items():
            object.__setattr__(obj, attribute, self.value(x, depth + 1))  # a frozen dataclass too: as its __init__ does
        return obj


def _listed(content: Any) -> list:
    if not isinstance(content, list):
        raise TypeError("a kept sequence is a list")
    return content


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a kept name is text")
    return value


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down: expressions node for node (sympy's == calls 2 and 2.0
    equal), mappings in the same order, instances attribute by attribute."""
    if type(a) is not type(b):
        return False
    if isinstance(a, sympy.Basic):
        return same_tree(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(x, y) for x, y in zip(a, b)) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if _class_name(type(a)) in KEPT_CLASSES:
        x, y = _attributes(a), _attributes(b)
        return x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x)
    return a is b or a == b
