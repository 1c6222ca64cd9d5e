"""sympy.expand's result for the sums of products symform's expressions are, worked out as plain dicts.

A declared quantity times its multiplicity is a polynomial in the sizes (some to negative powers:
n_heads/n_kv_heads), sometimes with a function of them as one more variable (``Min(seq, window)``,
``ceiling(seq/chunk)``). sympy.expand multiplies such a product out in several passes over the tree,
splitting every product into numerator and denominator on the way; multiplying dicts of monomials
and building each term once gives the same sum (sympy orders a sum's and a product's arguments
itself, whoever builds them) in a fraction of the time. Anything else (a float, a fractional power, a
sum raised to a negative power) goes to sympy.expand, as does a term whose expansion would pass the
budget sympy's route checks for.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from functools import lru_cache
from typing import Iterable, Mapping

import sympy

from ..budget import check_expansion
from ..errors import EvaluationError

Monomial = frozenset  # of (variable, exponent) pairs, exponents non-zero
Polynomial = dict  # Monomial -> int or Fraction (where not whole), coefficients non-zero


class _NotPolynomial(Exception):
    pass


_ONE: Monomial = frozenset()
_FUNCTIONS = (sympy.Function, sympy.Min, sympy.Max)


def multiplied_out(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> sympy.Expr:
    """``sympy.expand(expr.xreplace(values))``; EvaluationError where ``values`` put a zero in a divisor."""
    try:
        poly = polynomial(expr, values)
        if poly is None:
            return sympy.expand(expr.xreplace(values) if values else expr)
    except ZeroDivisionError:  # sympy folds Mod(x, 0) as it substitutes
        if not values:
            raise
        zero = sorted(s.name for s, v in values.items() if v == 0 and s in expr.free_symbols)
        raise EvaluationError(
            f"an expression divides by {' or '.join(zero) or 'a value'}, which is 0 here; give it a positive value, "
            "or declare the division where its divisor stays positive"
        ) from None
    return from_polynomial(poly)


def polynomial(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> Polynomial | None:
    """``expr`` with ``values`` in, as monomial -> coefficient; None where it is no such polynomial."""
    try:
        return _poly(expr, {}, values or {})
    except _NotPolynomial:
        return None


def value_at(expr: sympy.Expr, point: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr.xreplace(point)``, the numbers ``point`` holds put in: summed monomial by monomial in Python fractions
    where ``expr`` multiplies out to a polynomial whose variables come out rational there (sympy would rebuild
    every term of a large sum). ZeroDivisionError where a variable to a negative power is zero there."""
    poly = _terms(expr)
    if poly is None:
        return expr.xreplace(point)
    total = Fraction(0)
    for monomial, coefficient in poly.items():
        term = Fraction(coefficient)
        for variable, exponent in monomial:
            value = _variable_at(variable, point)
            if not value.is_Rational:
                return expr.xreplace(point)
            term *= Fraction(int(value.p), int(value.q)) ** exponent
        total += term
    return sympy.Rational(total.numerator, total.denominator)


@lru_cache(maxsize=4096)  # a model's leaves' FLOPs and bytes, each valued at every layout a plan ranks
def _terms(expr: sympy.Expr) -> dict | None:
    """polynomial(expr), once for every point it is valued at (max_of's probe points, a layout's sizes)."""
    return polynomial(expr)


def fraction_at(expr: sympy.Expr, values: Mapping[str, int | Fraction], scaled: tuple[str, Fraction] | None = None) -> Fraction | None:
    """``expr`` at ``values`` (by symbol name) in Python fractions alone, the polynomial's terms computed once per
    expression: what value_at gives, without building sympy numbers at each point (a plan values every leaf at
    every layout it ranks). ``scaled`` (a name and a factor): each term in which that symbol appears, inside a
    function too, times the factor. None where ``expr`` is no such polynomial, a variable is not rational there
    or a divisor is zero: the caller's sympy route decides (and words what is wrong)."""
    terms = _fraction_terms(expr)
    if terms is None:
        return None
    name, factor = scaled if scaled is not None else (None, 1)
    factor = factor if isinstance(factor, _EXACT) else _exactly(factor)  # numpy's ints would wrap round in the products
    if factor is None:
        return None
    # numerators and denominators as Python ints, one Fraction at the end: Fraction's own products reduce by a
    # gcd at every step, most of the work of a plan's estimates
    scale_top, scale_bottom = _ratio(factor)
    top, bottom = 0, 1
    try:
        for (coefficient_top, coefficient_bottom), factors, names in terms:
            term_top, term_bottom = coefficient_top, coefficient_bottom
            if name in names:
                term_top, term_bottom = term_top * scale_top, term_bottom * scale_bottom
            for variable, exponent in factors:
                value = values.get(variable) if type(variable) is str else _function_at(variable[0], tuple(values.get(n) for n in variable[1]), variable[1])
                if type(value) is int:
                    value_top, value_bottom = value, 1
                else:
                    value = value if type(value) is Fraction else _exactly(value)
                    if value is None:
                        return None
                    value_top, value_bottom = _ratio(value)
                if exponent < 0:
                    if value_top == 0:
                        return None  # a divisor is zero: the caller's sympy route words it
                    value_top, value_bottom, exponent = value_bottom, value_top, -exponent
                term_top *= value_top**exponent
                term_bottom *= value_bottom**exponent
            top = top * term_bottom + term_top * bottom if term_bottom != bottom else top + term_top
            if term_bottom != bottom:
                bottom *= term_bottom
    except ZeroDivisionError:  # a function of the sizes divides by zero there
        return None
    return Fraction(top, bottom)


def _ratio(value: int | Fraction) -> tuple[int, int]:
    return (value, 1) if type(value) is int else (value.numerator, value.denominator)


_EXACT = (int, Fraction)


def _exactly(value: object) -> int | Fraction | None:
    """An integer of another type (numpy's), a float or a sympy number as the exact fraction sympy.Rational makes of it (a float's binary value); None
    for anything else (no value, a symbol)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy's integers among them
        return int(value)
    if type(value) is float:
        return Fraction(value) if math.isfinite(value) else None
    if isinstance(value, sympy.Rational):
        return Fraction(int(value.p), int(value.q))
    return None


@lru_cache(maxsize=4096)
def _fraction_terms(expr: sympy.Expr) -> tuple | None:
    """_terms(expr) as (coefficient, (variable, exponent) pairs, the names the term holds): a variable is a symbol's
    name, or a function with the names of its symbols."""
    poly = _terms(expr)
    if poly is None:
        return None
    return tuple(
        (_ratio(c), tuple((v.name if v.is_Symbol else (v, tuple(sorted(s.name for s in v.free_symbols))), e) for v, e in m), frozenset(s.name for v, _ in m for s in v.free_symbols))
        for m, c in poly.items()
    )


@lru_cache(maxsize=4096)  # a function of the sizes (a window, a chunk count) takes few values in a plan
def _function_at(variable: sympy.Expr, at: tuple, names: tuple[str, ...]) -> Fraction | None:
    """A function variable at its symbols' values ``at`` (``names`` in order), as _variable_at takes it."""
    if None in at:
        return None
    values = dict(zip(names, at))
    if isinstance(variable, (sympy.Min, sympy.Max)):  # its arguments in fractions too
        found = [fraction_at(a, values) for a in variable.args]
        if None not in found:
            return (min if isinstance(variable, sympy.Min) else max)(found)
    point = {s: sympy.Rational(values[s.name]) for s in variable.free_symbols}
    value = _variable_at(variable, point)
    return Fraction(int(value.p), int(value.q)) if value.is_Rational else None


def _variable_at(variable: sympy.Expr, point: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """A monomial's variable at ``point``: a symbol's value; a Min or Max of rational values the least or the
    greatest, as sympy evaluates it (a memory line's Max holds whole lines); any other function by sympy."""
    if variable in point:
        return point[variable]
    if isinstance(variable, (sympy.Min, sympy.Max)):
        values = [value_at(a, point) for a in variable.args]
        if all(v.is_Rational for v in values):
            return (min if isinstance(variable, sympy.Min) else max)(values)
    return variable.xreplace(point)


def summed(polys: Iterable[Polynomial]) -> Polynomial:
    out: Polynomial = {}
    for poly in polys:
        _add_into(out, poly)
    return out


def degree_in(monomial: tuple, large: frozenset[sympy.Symbol]) -> int | None:
    """A monomial's degree in the ``large`` symbols; None where a function of one of them is a factor (its degree
    is no whole power)."""
    degree = 0
    for v, e in monomial:
        if v.is_Symbol:
            degree += e if v in large else 0
        elif not large.isdisjoint(v.free_symbols):
            return None
    return degree


def from_polynomial(poly: Polynomial) -> sympy.Expr:
    terms = []
    for monomial, c in poly.items():
        factors = [v if e == 1 else sympy.Pow(v, e) for v, e in monomial]
        terms.append(sympy.Mul(sympy.Integer(c) if type(c) is int else sympy.Rational(c.numerator, c.denominator), *factors))
    return sympy.Add(*terms)


def _poly(expr: sympy.Basic, seen: dict, values: Mapping[sympy.Symbol, sympy.Expr]) -> Polynomial:
    found = seen.get(expr)
    if found is not None:
        return found
    if expr.is_Symbol:
        value = values.get(expr)
        poly = {frozenset({(expr, 1)}): 1} if value is None else _poly(value, {}, {})
    elif expr.is_Rational:
        poly = {_ONE: _number(Fraction(int(expr.p), int(expr.q)))} if expr != 0 else {}
    elif expr.is_Add:
        poly = {}
        for arg in expr.args:
            _add_into(poly, _poly(arg, seen, values))
    elif expr.is_Mul:
        poly = {_ONE: 1}
        for arg in expr.args:
            poly = _times(poly, _poly(arg, seen, values))
    elif expr.is_Pow:
        poly = _power(expr, seen, values)
    elif isinstance(expr, _FUNCTIONS) and values and not values.keys().isdisjoint(expr.free_symbols):
        poly = _poly(expr.xreplace(values), {}, {})  # sympy evaluates it anew with the values in
    elif isinstance(expr, _FUNCTIONS):
        # one more variable, its arguments multiplied out as sympy.expand's deep pass does
        inner = sympy.expand(expr)
        if inner == expr:
            poly = {frozenset({(expr, 1)}): 1}
        elif inner.has(expr) or isinstance(inner, _FUNCTIONS):
            raise _NotPolynomial
        else:
            poly = _poly(inner, {}, {})
    else:
        raise _NotPolynomial
    seen[expr] = poly
    return poly


def _power(expr: sympy.Pow, seen: dict, values: Mapping[sympy.Symbol, sympy.Expr]) -> Polynomial:
    base, exponent = expr.args
    if not exponent.is_Integer:
        raise _NotPolynomial
    n = int(exponent)
    if n >= 0:
        if n > _MAX_POWER:
            raise _NotPolynomial
        poly = {_ONE: 1}
        inner = _poly(base, seen, values)
        for _ in range(n):
            poly = _times(poly, inner)
        return poly
    inner = _poly(base, seen, values)
    if len(inner) != 1:  # a sum to a negative power: sympy keeps it whole
        raise _NotPolynomial
    ((monomial, coefficient),) = inner.items()
    return {frozenset((v, e * n) for v, e in monomial): _number(Fraction(coefficient) ** n)}


_MAX_POWER = 8  # past this, sympy's route (and its budget) decides


def _add_into(out: Polynomial, poly: Polynomial) -> None:
    for monomial, c in poly.items():
        total = _number(out.get(monomial, 0) + c)
        if total:
            out[monomial] = total
        else:
            out.pop(monomial, None)


def _times(a: Polynomial, b: Polynomial) -> Polynomial:
    out: Polynomial = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            monomial = _product(ma, mb)
            total = _number(out.get(monomial, 0) + ca * cb)
            if total:
                out[monomial] = total
            else:
                out.pop(monomial, None)
    return out


def _product(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    powers = dict(a)
    for v, e in b:
        powers[v] = powers.get(v, 0) + e
    return frozenset((v, e) for v, e in powers.items() if e)


def _number(x: int | Fraction) -> int | Fraction:
    return x.numerator if type(x) is Fraction and x.denominator == 1 else x


def expand(expr: sympy.Basic, what: str = "an expression") -> sympy.Expr:
    """sympy.expand within the expression budget (its result, worked out faster where it can be: multiplied)."""
    check_expansion(expr, what)
    return multiplied_out(expr)
