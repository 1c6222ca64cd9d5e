"""max_of is sympy.Max, the same expression, whichever way sympy's pairwise search would go."""

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.memory import memory
from symform.analysis.memory.maxima import max_of

a, b, c = sympy.symbols("a b c", positive=True, integer=True)
n = sympy.Symbol("n", nonnegative=True, integer=True)
r = sympy.Symbol("r", positive=True)

least = sympy.Min(1, n)
monomials = st.sampled_from([sympy.Integer(1), a, b, c, n, r, a * b, b * c, a * n, least, a * least])
polynomials = st.lists(st.tuples(st.integers(-3, 5), monomials), min_size=1, max_size=4).map(lambda terms: sympy.Add(*(k * m for k, m in terms)))


def same(x: sympy.Expr, y: sympy.Expr) -> bool:
    return x == y and x.args == y.args and str(x) == str(y)


@settings(max_examples=60, deadline=None)
@given(st.lists(polynomials, min_size=1, max_size=4))
def test_max_of_is_sympys_max(args):
    assert same(max_of(*args), sympy.Max(*args))


def test_ordered_arguments_are_left_to_sympy():
    assert same(max_of(a + 1, a, 0), sympy.Max(a + 1, a, 0))
    assert max_of(a + 1, a) == a + 1
    assert same(max_of(0, a - b), sympy.Max(0, a - b))
    assert max_of(0, -a) == 0


def test_a_models_backward_lines_as_sympy_builds_them():
    model = symform.load("gpt2").with_conventions(act_bytes=2)
    _, transient, _ = memory.saved_activations(model, recompute="full", flash=True)
    peak = memory.backward_peak(model)
    assert same(max_of(0, peak - transient), sympy.Max(0, peak - transient))


inner = st.sampled_from([sympy.Max(a, b), sympy.Max(a * b, c + 1), sympy.Min(a, n + 1), sympy.Max(2 * a, b * n)])


@settings(max_examples=40, deadline=None)
@given(polynomials, st.integers(-2, 3), inner)
def test_max_of_arguments_holding_a_max_or_min_is_sympys_max(p, k, m):
    args = [sympy.Integer(0), p - k * m, p * m]
    assert same(max_of(*args), sympy.Max(*args))
