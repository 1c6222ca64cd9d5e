"""Exact evaluators: an expression turned once into plain Python over ints and Fractions.

sympy's substitution (:func:`symform.engine.algebra.evaluate.exact_value`) takes about a
millisecond per point; the same arithmetic written as Python source over ints
(Fractions where a division is not whole) takes a microsecond or two and gives
the same numbers to the last digit. The generated function answers only where
its arithmetic is plainly defined: any node it does not know (a square root, a
logarithm, a float) means no function at all, and any error while it runs (a
division by zero) sends the caller back to sympy, whose answer or message is
then the one the user sees.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Callable, NamedTuple, Sequence

import sympy

from ._numeric import CeilLog2
from ..language.conditions import NamedCondition
from .horner import factor

Number = int | Fraction


class _Unsupported(Exception):
    """A node the generator has no exact Python form for."""


def exact_number(value: object) -> Number:
    """An int where the value is whole, else the Fraction (the kinds exact evaluation hands back)."""
    if type(value) is int:
        return value
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else value
    if isinstance(value, bool) or not isinstance(value, int):  # a comparison or a stray kind: never a count
        raise TypeError(f"not an exact number: {value!r}")
    return int(value)


def _quotient(a: Number, b: Number) -> Number:
    """a / b exactly: an int where b divides a, else a Fraction (ZeroDivisionError where b is 0)."""
    if type(a) is int and type(b) is int:
        return a // b if a % b == 0 else Fraction(a, b)
    return exact_number(Fraction(a) / Fraction(b))


def _ceil_log2(x: Number) -> int:
    if type(x) is not int or x < 1:  # sympy leaves it unevaluated there: no exact number
        raise ValueError("ceil(log2(x)) of a non-whole or non-positive x")
    return (x - 1).bit_length()


def _undefined() -> Number:
    raise ValueError("no branch of a conditional holds")


def _whole(x: Number) -> bool:
    """A whole number of 0 or more (a repeat count)."""
    return x >= 0 and (type(x) is int or x.denominator == 1)


_NAMESPACE = {"_whole": _whole, "_q": _quotient, "_ceil": math.ceil, "_floor": math.floor, "_ceillog2": _ceil_log2, "_min": min, "_max": max, "_abs": abs, "_undefined": _undefined}
_RELATIONS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
_FUNCTIONS = {sympy.ceiling: "_ceil", sympy.floor: "_floor", CeilLog2: "_ceillog2", sympy.Abs: "_abs"}


_LITERAL_BITS = 4096  # larger integers are bound by name, as rationals are, not written out


class _Writer:
    """Python source for one expression; rational constants bound by name, arguments by position."""

    def __init__(self):
        self.arguments: dict[str, str] = {}  # name -> local variable, read once from the mapping
        self.constants: dict[str, Fraction | int] = {}

    def write(self, e: sympy.Basic) -> str:
        if e.is_Integer:
            value = int(e)
            if value.bit_length() < _LITERAL_BITS:
                return f"({value})"
            name = f"c{len(self.constants)}"  # Python refuses to write an int past 4,300 digits as text
            self.constants[name] = value
            return name
        if e.is_Rational:
            name = f"c{len(self.constants)}"
            self.constants[name] = Fraction(int(e.p), int(e.q))
            return name
        if e.is_Symbol:
            return self.arguments.setdefault(e.name, f"a{len(self.arguments)}")
        if e is sympy.true or e is sympy.false:
            return str(bool(e))
        if e.is_Add:
            return self._sum(e.args)
        if e.is_Mul:
            return self._product(e.args)
        if e.is_Pow:
            return self._product((e,))
        if type(e) in _FUNCTIONS:
            return f"{_FUNCTIONS[type(e)]}({self.write(e.args[0])})"
        if isinstance(e, (sympy.Min, sympy.Max)):
            return f"_{type(e).__name__.lower()}(" + ", ".join(self.write(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mod):
            return f"({self.write(e.args[0])} % {self.write(e.args[1])})"
        if type(e) in _RELATIONS:
            return f"({self.write(e.lhs)} {_RELATIONS[type(e)]} {self.write(e.rhs)})"
        if isinstance(e, (sympy.And, sympy.Or)):
            joiner = " and " if isinstance(e, sympy.And) else " or "
            return "(" + joiner.join(self.write(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(not {self.write(e.args[0])})"
        if isinstance(e, sympy.Piecewise):
            return self._conditional(e.args)
        if isinstance(e, NamedCondition):
            return self.write(e.condition)
        raise _Unsupported(type(e).__name__)  # floats, roots, logarithms: sympy's business

    def _conditional(self, pairs) -> str:
        """The first branch whose condition holds, as Python's conditional expression; none holding is no
        number (sympy's undefined Piecewise), so the caller hands it to sympy."""
        expr, condition = pairs[0]
        rest = self._conditional(pairs[1:]) if len(pairs) > 1 else "_undefined()"
        if condition is sympy.true:
            return self.write(expr)
        return f"({self.write(expr)} if {self.write(condition)} else {rest})"

    def _sum(self, terms) -> str:
        """The whole multiples of products of symbols factored (:mod:`.horner`: fewer big-int
        multiplications, the same exact value), every other term as it is."""
        symbols: dict[sympy.Symbol, int] = {}
        monomials, others = [], []
        for term in terms:
            powers = _powers(term)
            if powers is None:
                others.append(self.write(term))
            else:
                monomials.append(({symbols.setdefault(s, len(symbols)): e for s, e in powers[0].items()}, powers[1]))
        if len(monomials) > 1:
            tree = factor([(tuple(p.get(i, 0) for i in range(len(symbols))), c) for p, c in monomials], len(symbols))
            if _depth(tree) <= _MAX_DEPTH:
                names = [self.write(s) for s in symbols]
                return "(" + " + ".join([self._node(tree, names), *others]) + ")"
        return "(" + " + ".join([*(self.write(t) for t in terms if _powers(t) is not None), *others]) + ")"

    def _node(self, node, names: list[str]) -> str:
        kind = node[0]
        if kind == "c":
            return f"({node[1]})"
        if kind == "x":
            return names[node[1]]
        return f"({self._node(node[1], names)} {kind} {self._node(node[2], names)})"

    def _product(self, factors) -> str:
        """Whole factors multiplied, then one exact division by the rest (Python's / would give a float)."""
        top: list[str] = []
        bottom: list[str] = []
        for f in factors:
            if f.is_Rational and not f.is_Integer:
                top.append(f"({int(f.p)})")
                bottom.append(f"({int(f.q)})")
            elif f.is_Pow and f.exp.is_Integer:
                base = self.write(f.base)
                power = int(f.exp)
                (top if power > 0 else bottom).append(f"{base}**{abs(power)}" if abs(power) != 1 else base)
            elif f.is_Pow:
                raise _Unsupported("a power that is not whole")
            else:
                top.append(self.write(f))
        numerator = "*".join(top) or "1"
        return f"_q({numerator}, {'*'.join(bottom)})" if bottom else f"({numerator})"


def _powers(term: sympy.Expr) -> tuple[dict[sympy.Symbol, int], int] | None:
    """A whole multiple of a product of symbols as (symbol -> exponent, coefficient); None for any other term."""
    coefficient, rest = term.as_coeff_Mul()
    if not coefficient.is_Integer:
        return None
    powers = {}
    for f in sympy.Mul.make_args(rest):
        base, exponent = f.as_base_exp()
        if not (base.is_Symbol and exponent.is_Integer and exponent > 0):
            return None
        powers[base] = int(exponent)
    return powers, int(coefficient)


_MAX_DEPTH = 60  # nested parentheses a factored sum may reach: well inside Python's parser limit (200)


def _depth(node) -> int:
    return 1 + max(_depth(node[1]), _depth(node[2])) if node[0] in "*+" else 1


@lru_cache(maxsize=4096)
def exact_function(expr: sympy.Basic) -> Callable | None:
    """A plain-Python function computing ``expr`` exactly from a mapping of symbol names to ints
    or Fractions (KeyError where one is missing); None where the expression holds something with
    no exact Python form (then use sympy)."""
    writer = _Writer()
    try:
        body = writer.write(expr)
    except _Unsupported:
        return None
    return _define(writer, body)


class Screen(NamedTuple):
    """What a screened evaluation answers for by itself: values that are plain ints (never bools,
    floats or Fractions) from 1, or from 0 for the names in ``from_zero``, up to ``ceiling``, and an
    int result of at most ``result_bits`` bits."""

    from_zero: frozenset[str]
    ceiling: int
    result_bits: int


@lru_cache(maxsize=4096)
def screened_maker(expr: sympy.Basic, screen: Screen) -> Callable | None:
    """A maker of one formula's whole exact evaluation at a mapping of names to values, in generated code;
    None where ``expr`` has no exact Python form.

    ``make(others_plain, fallback)`` gives a function of the mapping that reads the values ``expr`` needs,
    screens them in one condition, computes, and returns the int. Anything else goes to ``fallback(values)``,
    whose full checks (or sympy) give the answer or word the refusal: a value missing or outside the
    screen, a name ``expr`` does not read whose value ``others_plain(values)`` does not pass (it is called
    only once every value read is found), an error while computing (a division by zero), a Fraction or a
    result past ``result_bits``. Generated once per expression; made once per formula (its own fallback).
    """
    writer = _Writer()
    try:
        body = writer.write(expr)
    except _Unsupported:
        return None
    reads = "".join(f"            {local} = values[{name!r}]\n" for name, local in writer.arguments.items())
    screened = " and ".join(
        [f"type({local}) is int" for local in writer.arguments.values()]  # every type before any comparison (a str would raise)
        + [f"{0 if name in screen.from_zero else 1} <= {local} <= _ceiling" for name, local in writer.arguments.items()]
    ) or "True"
    source = (
        "def make(_others_plain, _fallback):\n"
        "    def evaluate(values):\n"
        "        try:\n"
        f"{reads}"
        f"            if ({screened}) and (len(values) == {len(writer.arguments)} or _others_plain(values)):\n"
        f"                value = {body}\n"
        "                if type(value) is int and value.bit_length() <= _result_bits:\n"
        "                    return value\n"
        "        except Exception:  # a value missing, a division by zero: the full path words it\n"
        "            pass\n"
        "        return _fallback(values)\n"
        "    return evaluate\n"
    )
    namespace = {**_NAMESPACE, **writer.constants, "_ceiling": screen.ceiling, "_result_bits": screen.result_bits}
    exec(compile(source, "<symform screened exact>", "exec"), namespace)  # source built above from the expression tree alone
    return namespace["make"]


def exact_predicate(conditions: Sequence[tuple[str, tuple[sympy.Basic, ...]]]) -> Callable:
    """One generated function of a mapping of names to numbers: True where every condition holds.

    A condition is a template over the exact code of its expressions (``"{0} >= 0"``,
    ``"_whole({0})"``); one whose expressions have no exact Python form counts as failing.
    The function raises wherever an expression cannot be computed (a value missing, a division by zero).
    """
    writer = _Writer()
    written = {}
    for template, exprs in conditions:
        kept = dict(writer.arguments), dict(writer.constants)
        try:
            code = template.format(*(writer.write(e) for e in exprs))
        except _Unsupported:  # read nothing it named: its values may be missing
            writer.arguments, writer.constants = kept
            code = "False"
        written[f"({code})"] = None  # the same condition once, however many parts state it
    return _define(writer, " and ".join(written) or "True")


def _define(writer: _Writer, body: str) -> Callable:
    reads = "".join(f"    {local} = values[{name!r}]\n" for name, local in writer.arguments.items())
    source = f"def exact(values):\n{reads}    return {body}\n"
    namespace = {**_NAMESPACE, **writer.constants}
    exec(compile(source, "<symform exact>", "exec"), namespace)  # source built above from the expression tree alone
    return namespace["exact"]
