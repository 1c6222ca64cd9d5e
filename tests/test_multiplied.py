"""multiplied_out gives sympy.expand's result, object for object, on the kinds of expressions declarations make."""

from __future__ import annotations

import sympy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fractions import Fraction

import numpy

from symform.engine.algebra.multiplied import fraction_at, multiplied_out, polynomial, value_at

a, b, c = sympy.symbols("a b c", positive=True, integer=True)
seq, window = sympy.symbols("seq window", positive=True, integer=True)
ATOMS = [a, b, c, seq, sympy.Integer(2), sympy.Rational(1, 3), sympy.Min(seq, window), sympy.ceiling(seq / window), sympy.Max(0, 2 - a)]


def _expressions():
    leaf = st.sampled_from(ATOMS)

    def grow(children):
        pair = st.tuples(children, children)
        return st.one_of(
            pair.map(lambda p: p[0] + p[1]),
            pair.map(lambda p: p[0] - p[1]),
            pair.map(lambda p: p[0] * p[1]),
            st.tuples(children, st.integers(0, 3)).map(lambda p: p[0] ** p[1]),
            st.tuples(st.sampled_from([a, b, seq]), st.integers(-2, -1)).map(lambda p: p[0] ** p[1]),
        )

    return st.recursive(leaf, grow, max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(_expressions())
def test_same_as_sympy_expand(expr):
    assert multiplied_out(expr) == sympy.expand(expr)


@settings(max_examples=40, deadline=None)
@given(_expressions(), st.sampled_from([{a: sympy.Integer(3)}, {seq: sympy.Integer(8), window: sympy.Integer(3)}, {b: sympy.Rational(1, 2)}]))
def test_with_values_same_as_substituting_then_expanding(expr, values):
    assert multiplied_out(expr, values) == sympy.expand(expr.xreplace(values))


def test_product_of_sums():
    assert multiplied_out((a + b) * (a - b) * c) == a**2 * c - b**2 * c


def test_a_sum_to_a_negative_power_is_left_to_sympy():
    expr = a / (b + c)
    assert polynomial(expr) is None
    assert multiplied_out(expr) == sympy.expand(expr)


def test_a_float_is_left_to_sympy():
    expr = sympy.Float(0.5) * (a + b)
    assert polynomial(expr) is None
    assert multiplied_out(expr) == sympy.expand(expr)


@settings(max_examples=60, deadline=None)
@given(_expressions(), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_value_at_a_point_is_substituting_there(expr, x, y, z, s):
    point = {a: sympy.Integer(x), b: sympy.Integer(y), c: sympy.Integer(z), seq: sympy.Integer(s), window: sympy.Integer(3)}
    found = value_at(expr, point)
    assert found == expr.xreplace(point) and found.is_Rational


def _exact(value: sympy.Expr) -> Fraction:
    return Fraction(int(value.p), int(value.q))


@settings(max_examples=60, deadline=None)
@given(_expressions(), st.integers(1, 9), st.integers(1, 9), st.fractions(1, 9, max_denominator=4), st.integers(1, 9))
@example(a**9, 1, 1, Fraction(1), 1)  # a power past _MAX_POWER (the random profile found it): declined, not wrong
def test_fraction_at_is_substituting_there(expr, x, y, z, s):
    """The fractions-only route gives sympy's exact number, a float never: an int to a negative power is kept exact.
    It declines (None) only an expression that is no polynomial it multiplies out (a power past _MAX_POWER: a**9),
    leaving it to the caller's sympy route, as its docstring says."""
    point = {a: sympy.Integer(x), b: sympy.Integer(y), c: sympy.Rational(z.numerator, z.denominator), seq: sympy.Integer(s), window: sympy.Integer(3)}
    found = fraction_at(expr, {"a": x, "b": y, "c": z, "seq": s, "window": 3})
    if found is None:
        assert polynomial(expr) is None, expr
        return
    assert type(found) is Fraction and found == _exact(expr.xreplace(point))


@settings(max_examples=40, deadline=None)
@given(_expressions(), st.integers(1, 9), st.integers(2, 4))
def test_fraction_at_scales_the_terms_holding_a_symbol(expr, x, parts):
    """Each term of the expanded sum in which seq appears (inside a window's Min too) divided by ``parts``: what a context
    rank's share of the terms that grow with the sequence is, worked out term by term with sympy."""
    point = {a: sympy.Integer(x), b: sympy.Integer(2), c: sympy.Integer(5), seq: sympy.Integer(6), window: sympy.Integer(4)}
    terms = sympy.Add.make_args(sympy.expand(expr))
    expected = sum((t.xreplace(point) / (parts if seq in t.free_symbols else 1) for t in terms), sympy.Integer(0))
    found = fraction_at(expr, {"a": x, "b": 2, "c": 5, "seq": 6, "window": 4}, ("seq", Fraction(1, parts)))
    if found is None:  # no polynomial it multiplies out: left to the caller's sympy route
        assert polynomial(expr) is None, expr
        return
    assert found == _exact(sympy.nsimplify(expected))


def test_fraction_at_takes_other_integers_and_floats_exactly():
    assert fraction_at(a * b / 3, {"a": numpy.int64(4), "b": 0.5}) == Fraction(2, 3)


def test_fraction_at_leaves_what_it_cannot_value_to_sympy():
    assert fraction_at(a / b, {"a": 1, "b": 0}) is None  # a zero divisor: the caller's sympy route words it
    assert fraction_at(a * b, {"a": 1}) is None  # no value for b
    assert fraction_at(a / (b + c), {"a": 1, "b": 1, "c": 1}) is None  # no polynomial
    assert fraction_at(sympy.Float(0.5) * a, {"a": 2}) is None


@settings(max_examples=60, deadline=None)
@given(st.fractions(-9, 9, max_denominator=6).filter(bool), st.fractions(-9, 9, max_denominator=6).filter(bool), st.integers(-3, 3), st.integers(-3, 3))
def test_fraction_at_keeps_signs_and_fractions_under_negative_powers(x, y, i, j):
    """Numerator and denominator change places under a negative power, a negative value's sign with them."""
    expr = a**i * b**j + a / 7 - b**-2 * Fraction(3, 5)
    point = {a: sympy.Rational(x.numerator, x.denominator), b: sympy.Rational(y.numerator, y.denominator)}
    assert fraction_at(expr, {"a": x, "b": y}) == _exact(expr.xreplace(point))


def test_fraction_at_takes_a_scale_of_any_exact_number_as_python_ints():
    """A numpy integer or a float as the scale is the exact number it holds: its own arithmetic would wrap round
    (3 · 10¹⁸ · 7 passes int64) or refuse, where Python's ints do not."""
    expr, values = a**3 * b + b, {"a": 10**6, "b": 7}
    assert fraction_at(expr, values, ("a", numpy.int64(3))) == 3 * 10**18 * 7 + 7
    assert type(fraction_at(expr, values, ("a", numpy.int64(3))).numerator) is int
    assert fraction_at(expr, values, ("a", numpy.int32(2))) == 2 * 10**18 * 7 + 7
    assert fraction_at(expr, values, ("a", 0.5)) == Fraction(10**18 * 7, 2) + 7
    assert fraction_at(expr, values, ("a", float("nan"))) is None
