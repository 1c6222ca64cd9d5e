"""The generated exact functions agree with sympy's substitution to the last digit, and the
bad inputs they pass on still get sympy's route's errors, word for word.

The reference is sympy itself: the model's symbolic expression with the values
substituted (``exact_value``), or a model built with no structure shared.
"""

from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType

import pytest
import sympy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from symform import Model
from symform.engine.graph import model as model_module
from symform.engine.algebra._numeric import CeilLog2
from symform.engine.errors import SymformError
from symform.engine.algebra.evaluate import check_value, exact_value, fast_exact
from symform.engine.language.families import presets
from symform.engine.graph.model import quantity_names
from symform.engine.language.vocabulary import default_vocabulary

PRESETS = sorted(presets())
QUANTITIES = quantity_names()
WORKLOAD = {"batch": st.integers(1, 512), "seq": st.integers(1, 1 << 17), "tokens": st.integers(1, 10**13)}
_models: dict[str, Model] = {}


def preset(name: str) -> Model:
    if name not in _models:
        _models[name] = Model.load(name)
    return _models[name]


def reference(model: Model, quantity: str, workload: dict) -> object:
    """sympy's exact substitution of the whole expression: the route every number took before."""
    vocabulary = model.vocabulary
    values = {**model.values, **workload}
    return exact_value(model.expression(quantity).expr, {vocabulary[k]: check_value(k, v, vocabulary) for k, v in values.items()})


def outcome(call):
    try:
        return call()
    except SymformError as e:
        return (type(e), str(e))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PRESETS), quantity=st.sampled_from(QUANTITIES), workload=st.fixed_dictionaries(WORKLOAD))
def test_every_preset_and_quantity_evaluates_as_sympy_substitutes(name, quantity, workload):
    model = preset(name)
    got = outcome(lambda: model.evaluate(quantity, **workload))
    want = outcome(lambda: reference(model, quantity, workload))
    assert got == want and type(got) is type(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PRESETS), quantity=st.sampled_from(QUANTITIES), scale=st.integers(1, 64), shift=st.integers(-3, 3), data=st.data())
def test_resized_models_agree_with_models_built_afresh(name, quantity, scale, shift, data):
    """with_arguments shares the graph and the generated checks; a model built from nothing shares
    nothing (the structures are forgotten first): same numbers, same refusals."""
    model = preset(name)
    sizes = [k for k, v in model.values.items() if v > 0]
    if not sizes:
        return
    chosen = data.draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=3, unique=True))
    changes = {k: max(1, model.values[k] * scale + shift) for k in chosen}
    workload = {"batch": 3, "seq": 1000}
    resized = outcome(lambda: model.with_arguments(**changes).evaluate(quantity, **workload))
    model_module._STRUCTURES.clear()  # nothing shared: the first model of its graph, checked by sympy throughout
    spec = replace(model.spec, arguments=MappingProxyType({**model.spec.arguments, **changes}))
    afresh = outcome(lambda: reference(Model(spec, library=model.library), quantity, workload))
    assert resized == afresh and type(resized) is type(afresh)


BAD = [("batch", 0), ("batch", -4), ("batch", 1.5), ("batch", "8"), ("batch", True), ("batch", 10**60), ("seq", Fraction(1, 2)), ("no_such_size", 3), ("seq", float("nan"))]


@pytest.mark.parametrize("quantity", ["params", "forward_flops", "kv_cache"])
@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_values_get_the_same_refusal(quantity, name, value):
    model = preset("qwen3-0.6b" if "qwen3-0.6b" in PRESETS else PRESETS[0])
    workload = {"batch": 2, "seq": 16, name: value}
    got = outcome(lambda: model.evaluate(quantity, **workload))
    want = outcome(lambda: reference(model, quantity, workload))
    assert isinstance(got, tuple) and got == want


# --- the generator on expressions no preset has ------------------------------------------------

VOCABULARY = default_vocabulary()
SYMBOLS = [VOCABULARY[n] for n in ("batch", "seq", "d_model", "n_heads")]
leaves = st.one_of(
    st.sampled_from(SYMBOLS),
    st.integers(-5, 9).map(sympy.Integer),
    st.tuples(st.integers(-7, 7), st.integers(1, 6)).map(lambda pq: sympy.Rational(*pq)),
)


def _grow(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda ab: ab[0] + ab[1]),
        pair.map(lambda ab: ab[0] * ab[1]),
        pair.map(lambda ab: ab[0] / ab[1] if ab[1] != 0 else ab[0]),
        st.tuples(children, st.integers(-2, 3)).map(lambda be: be[0] ** be[1] if be[0] != 0 else be[0]),
        children.map(sympy.ceiling),
        children.map(sympy.floor),
        pair.map(lambda ab: sympy.Mod(*ab) if ab[1] != 0 else ab[0]),
        pair.map(lambda ab: sympy.Min(*ab)),
        pair.map(lambda ab: sympy.Max(*ab)),
    )


# a quotient of two random expressions: whole and fractional results, and divisions by zero
expressions = st.tuples(st.recursive(leaves, _grow, max_leaves=10), st.recursive(leaves, _grow, max_leaves=6)).map(lambda ab: ab[0] / ab[1] if ab[1] != 0 else ab[0])
batch, seq, d_model, n_heads = SYMBOLS
POINT = {"batch": 6, "seq": 1, "d_model": 4096, "n_heads": 7}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions, values=st.fixed_dictionaries({s.name: st.integers(1, 10**6) for s in SYMBOLS}))
@example(expr=batch / 4 + sympy.Rational(1, 3), values=POINT)
@example(expr=sympy.Mod(d_model, n_heads) / 2 + sympy.ceiling(d_model / 5), values=POINT)
@example(expr=sympy.Min(batch, seq * n_heads) / n_heads - sympy.floor(-batch / 4), values=POINT)
@example(expr=(seq - 1) ** -2 + batch, values=POINT)
@example(expr=1 / (batch - 6), values=POINT)
@example(expr=CeilLog2(batch * n_heads) + CeilLog2(seq - 1), values=POINT)
@example(expr=sympy.sqrt(batch) + 1, values=POINT)
@example(expr=batch / sympy.Min(batch, 1 / sympy.Mod(batch, 9)), values={**POINT, "batch": 675})  # 1/0 inside min: both refuse
def test_generated_function_answers_only_what_sympy_answers_and_the_same(expr, values):
    fast = fast_exact(expr, values, VOCABULARY)
    want = outcome(lambda: exact_value(expr, {VOCABULARY[k]: sympy.Integer(v) for k, v in values.items()}))
    if fast is not None:  # it answered: sympy's answer, of the same kind
        assert fast == want and type(fast) is type(want)
    if isinstance(want, tuple):  # sympy refuses: the generated function must not have answered
        assert fast is None


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-32b", "gemma-2-9b", "nemotron-h-8b", "qwen3-next-80b-a3b"])
def test_a_model_evaluated_again_and_again_still_agrees(name):
    """After a few evaluations a model multiplies its own sizes into the generated function: same numbers."""
    model = Model.load(name)
    rng = __import__("random").Random(name)
    for quantity in QUANTITIES:
        for _ in range(12):
            workload = {"batch": rng.randint(1, 64), "seq": rng.randint(1, 9000), "tokens": rng.randint(1, 10**12)}
            got = outcome(lambda: model.evaluate(quantity, **workload))
            want = outcome(lambda: reference(model, quantity, workload))
            assert got == want and type(got) is type(want)
        assert quantity in model._evaluators or model._structure.evaluators.get(quantity) is None


@pytest.mark.parametrize("digits", [4299, 4301, 9000])
def test_integers_past_python_s_text_limit_are_computed_as_sympy_substitutes(digits):
    """Python will not write an int of more than 4,300 digits as text: the generated code binds such a constant
    (a hostile declaration's ((d_model + 1e300))**15 multiplied out has them) instead of failing."""
    from symform.engine.algebra.exact import exact_function

    x = sympy.Symbol("x")
    expr = sympy.Integer(7) ** int(digits / 0.845) * x + 3
    assert exact_function(expr)({"x": 5}) == expr.subs(x, 5)


# --- Formula.evaluate: generated screening in one pass, the full checks for anything else -------

ODD_VALUES = [0, -1, -4, True, False, 2.0, 1.5, float("inf"), "8", None, Fraction(1, 2), Fraction(6, 3), 10**60, 2**132, 2**133, sympy.Integer(5)]
SIZE_VALUE = st.one_of(st.sampled_from(ODD_VALUES), st.integers(0, 3), st.integers(1, 10**6))


def checked_reference(formula, values: dict) -> object:
    """Every value checked in the order given, then sympy's substitution: Formula.evaluate's full route."""
    return exact_value(formula.expr, {formula.vocabulary[k]: check_value(k, v, formula.vocabulary) for k, v in values.items()})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PRESETS), quantity=st.sampled_from(QUANTITIES), workload=st.fixed_dictionaries(WORKLOAD), data=st.data())
@example(name="qwen3-32b", quantity="forward_flops", workload={"batch": 8, "seq": 4096, "tokens": 1}, data=None)
def test_formula_evaluate_answers_and_refuses_as_the_full_checks_do(name, quantity, workload, data):
    """Sizes of the model (and ones the formula does not read), some replaced by odd values, some
    dropped, an unknown name added: the same number of the same kind, or the same refusal, word for word."""
    model = preset(name)
    formula = model.expression(quantity)
    values = {**model.values, **workload}
    if data is not None:
        names = sorted(values)
        for key in data.draw(st.lists(st.sampled_from(sorted(formula.free) or names), max_size=2, unique=True)):  # values it reads
            values[key] = data.draw(SIZE_VALUE)
        for key in data.draw(st.lists(st.sampled_from(names), max_size=2, unique=True)):
            values[key] = data.draw(SIZE_VALUE)
        for key in data.draw(st.lists(st.sampled_from(names), max_size=1)):
            values.pop(key, None)
        if data.draw(st.booleans()):
            values["no_such_size"] = 3
        values = dict(data.draw(st.permutations(list(values.items()))))  # the first bad value in the caller's order is the one named
    for _ in range(2):  # the second call may take the other names remembered from the first
        got = outcome(lambda: formula.evaluate(**values))
        want = outcome(lambda: checked_reference(formula, values))
        assert got == want and type(got) is type(want)


@pytest.mark.parametrize("quantity", ["params", "forward_flops", "kv_cache"])
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize("name", ["d_model", "batch", "n_local_layers"])
def test_formula_evaluate_refuses_odd_values_as_the_full_checks_do(quantity, value, name):
    model = preset("qwen3-32b")
    formula = model.expression(quantity)
    values = {**model.values, "batch": 2, "seq": 16, "tokens": 100, name: value}
    got = outcome(lambda: formula.evaluate(**values))
    want = outcome(lambda: checked_reference(formula, values))
    assert got == want and type(got) is type(want)


def test_formula_evaluate_checks_other_names_that_change_from_call_to_call():
    """The names a formula does not read are remembered from the last call; a later call with other
    ones, or the same ones with a bad value, is checked afresh."""
    model = preset("qwen3-32b")
    formula = model.expression("params")
    sizes = {k: model.values[k] for k in formula.free}
    want = formula.evaluate(**sizes)
    assert formula.evaluate(**sizes, batch=3) == want
    assert outcome(lambda: formula.evaluate(**sizes, batch=0)) == outcome(lambda: checked_reference(formula, {**sizes, "batch": 0}))
    assert outcome(lambda: formula.evaluate(**sizes, seq=True)) == outcome(lambda: checked_reference(formula, {**sizes, "seq": True}))
    assert formula.evaluate(**sizes, seq=5) == want
    assert isinstance(outcome(lambda: formula.evaluate(**sizes, seq=5, no_such_size=1)), tuple)
    missing = dict(sizes)
    missing.pop("d_model")
    assert outcome(lambda: formula.evaluate(**missing, batch=1)) == outcome(lambda: checked_reference(formula, {**missing, "batch": 1}))
