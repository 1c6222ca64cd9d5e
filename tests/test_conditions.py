"""Conditions in the declaration language: ``a if c else b``, comparisons, and/or/not, 0/1 switches and named
predicates, read safely and evaluated alike on every path (exact, compiled numpy, sweeps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from symform.analysis.sweeps.lazy_sweeps import lazy_sweep
from symform.analysis.sweeps.sweeps import sweep
from symform.engine.language.conditions import NamedCondition, PredicateDef, predicates, unnamed
from symform.engine.errors import ExpressionError
from symform.engine.algebra.exact import exact_function
from symform.engine.algebra.evaluate import compile_expression
from symform.engine.graph.model import Model
from symform.engine.language.safe_expr import parse
from symform.interface.papers.latex import latex

BATCH = sympy.Symbol("batch", integer=True, positive=True)
HEADS = sympy.Symbol("n_kv_heads", integer=True, positive=True)
UPCAST = sympy.Symbol("upcast", integer=True, nonnegative=True)
BYTES = sympy.Symbol("act_bytes", integer=True, positive=True)
NAMES = {
    "batch": BATCH,
    "n_kv_heads": HEADS,
    "upcast": UPCAST,
    "act_bytes": BYTES,
    "fp32_copy": PredicateDef("fp32_copy", "upcast and act_bytes < 4", "a kept fp32 copy"),
    "one_sequence_mqa": PredicateDef("one_sequence_mqa", "batch == 1 and n_kv_heads == 1", "one sequence, one head"),
    "ring": PredicateDef("ring", "not round", "a cycle"),
    "round": PredicateDef("round", "ring and batch > 1", "a cycle"),
    **{f"p{i}": PredicateDef(f"p{i}", f"p{i + 1} and not p{i + 1}", "doubles") for i in range(30)},
    "p30": PredicateDef("p30", "batch > 1", "the last"),
}


def test_a_conditional_is_a_piecewise_of_its_branches():
    got = parse("batch*(2 if batch > 1 and not upcast else 3)", NAMES)
    want = BATCH * sympy.Piecewise((2, sympy.And(BATCH > 1, sympy.Eq(UPCAST, 0))), (3, True))
    assert got == want


def test_a_named_predicate_prints_by_name_and_evaluates_to_its_condition():
    expr = parse("7 if fp32_copy else 5", NAMES)
    assert expr.has(NamedCondition)
    assert r"\mathrm{fp32\_copy}" in latex(expr) and r"\begin{cases}" in latex(expr)
    assert unnamed(expr) == sympy.Piecewise((7, sympy.And(sympy.Ne(UPCAST, 0), BYTES < 4)), (5, True))
    # by hand: upcast = 1 and bf16 (2 bytes) keeps the fp32 copy; fp32 activations or no upcast do not
    assert expr.xreplace({UPCAST: 1, BYTES: 2}) == 7
    assert expr.xreplace({UPCAST: 1, BYTES: 4}) == 5
    assert expr.xreplace({UPCAST: 0, BYTES: 2}) == 5


def test_a_predicate_reads_the_names_in_force_where_it_is_used():
    own = sympy.Symbol("n_kv_heads", integer=True, nonnegative=True)  # a component's argument, not the vocabulary's
    expr = parse("1 if one_sequence_mqa else 0", {**NAMES, "n_kv_heads": own})
    assert own in expr.free_symbols and HEADS not in expr.free_symbols


def test_every_bundled_predicate_reads_over_the_vocabulary():
    from symform.engine.language.vocabulary import default_vocabulary

    vocabulary = default_vocabulary()
    chunk = sympy.Symbol("chunk", integer=True, positive=True)  # a chunked scan's argument (whole_chunks reads it)
    names = {n: vocabulary[n] for n in vocabulary.names()} | dict(predicates()) | {"chunk": chunk}
    for name, definition in predicates().items():
        assert definition.doc and definition.name == name
        parse(f"1 if {name} else 0", names)  # an unknown name or a malformed condition raises


@pytest.mark.parametrize(
    "text, words",
    [
        ("1 if batch else 2", "no condition"),  # a size is never 0: not a flag
        ("1 if batch*2 else 2", "not a condition"),
        ("1 if act_bytes - 4 else 2", "not a condition"),
        ("fp32_copy + 1", "cannot be a number"),
        ("(batch > 1) + 1", "cannot be a number"),
        ("2*(batch > 1 if upcast else batch < 1)", "cannot be a number"),  # a conditional picks numbers, not truths
        ("1 if ring else 0", "in terms of itself"),
        ("1 if p0 else 0", "over 400 parts"),  # each predicate reads the next twice: 2**30 reads without a budget
        ("1 if x else 2", "unknown name 'x'"),
        ("1 if 0 < batch < 4 else 2", "chained comparisons"),
        (" ".join(f"{i} if batch > {i} else" for i in range(40)) + " 0", "CONDITION_DEPTH"),
        ("(" * 30 + "1 if batch > 1 else 0" + ")" * 30 + " if upcast else 1", None),
        ("1 if __import__('os').system('true') else 0", "not allowed"),
        ("1 if (lambda: 1)() else 0", "not allowed"),
        ("1 if upcast.real else 0", "not allowed"),
        ("[1 for x in 'ab'] if upcast else 0", "not allowed"),
    ],
)
def test_hostile_conditions_are_one_line_refusals(text, words):
    if words is None:
        parse(text, NAMES)  # deeply parenthesised but shallow in conditionals: fine
        return
    with pytest.raises(ExpressionError) as raised:
        parse(text, NAMES)
    message = str(raised.value)
    assert words in message and "\n" not in message and len(message) < 600


def test_a_predicate_with_an_unknown_name_says_which_predicate():
    with pytest.raises(ExpressionError, match="predicate 'one_sequence_mqa'.*unknown name 'n_kv_heads'"):
        parse("1 if one_sequence_mqa else 0", {k: v for k, v in NAMES.items() if k != "n_kv_heads"})


def test_a_conditional_is_kept_between_runs_as_it_parsed():
    from symform.engine.store import disk_cache
    from symform.engine.language import safe_expr

    if not disk_cache.enabled():
        pytest.skip("the cache is off in this run")
    text = "batch*(7 if fp32_copy and not one_sequence_mqa else 5) + (1 if upcast else 0)"
    first = parse(text, NAMES)
    key = safe_expr._cache_key(text, NAMES, False)
    assert key is not None and safe_expr._store().get(key) is not None  # a predicate's text is part of the key
    again = parse(text, NAMES)
    assert safe_expr.same_tree(again, first)
    other = {**NAMES, "fp32_copy": PredicateDef("fp32_copy", "act_bytes < 2", "another meaning")}
    assert safe_expr._cache_key(text, other, False) != key


def test_requirements_may_join_switches_and_comparisons():
    relation = parse("not upcast or act_bytes < 4", NAMES, relation=True)
    assert relation.xreplace({UPCAST: 1, BYTES: 4}) == sympy.false
    assert relation.xreplace({UPCAST: 0, BYTES: 4}) == sympy.true
    named = parse("fp32_copy", NAMES, relation=True)  # a predicate alone is a requirement too
    assert isinstance(named, NamedCondition) and named.xreplace({UPCAST: 1, BYTES: 2}) == sympy.true


# --- one truth on every path ----------------------------------------------------------------

FLOPS = "(3*batch*seq if batch == 1 and seq > 4 else batch*seq + 7) + (2*seq if seq % 3 == 0 or not decoding else 0)"


def _by_hand(batch: int, seq: int, decoding: int) -> int:
    first = 3 * batch * seq if batch == 1 and seq > 4 else batch * seq + 7
    second = 2 * seq if seq % 3 == 0 or decoding == 0 else 0
    return first + second


@pytest.fixture(scope="module")
def conditional_model(tmp_path_factory) -> Model:
    path: Path = tmp_path_factory.mktemp("conditions") / "leaf.toml"
    path.write_text(
        '[model]\nroot = "leaf"\narguments = { d_model = 8 }\n\n'
        '[components.leaf]\ndoc = "a primitive whose FLOPs branch"\nargs = ["d_model"]\nparams = "d_model"\n'
        f'forward_flops = "{FLOPS}"\nbytes_moved = "0"\nsaved_activations = "0"\n',
        encoding="utf-8",
    )
    return Model.load(path)


points = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 40), st.integers(0, 1)), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(points)
def test_a_conditional_evaluates_alike_exact_compiled_and_swept(conditional_model, rows):
    model = conditional_model
    batch, seq, decoding = (list(c) for c in zip(*rows))
    want = [_by_hand(*row) for row in rows]
    assert [model.evaluate("forward_flops", batch=b, seq=s, decoding=d) for b, s, d in rows] == want
    for d in (0, 1):  # decoding is a setting of the model's (Model.compile binds it), the sizes are arrays
        compiled = model.with_conventions(decoding=d).compile("forward_flops", "batch", "seq")
        got = compiled(np.array(batch), np.array(seq))
        assert all(g == w for g, w, row in zip(got, want, rows) if row[2] == d)
    for exact in (False, True):  # float64 arrays through numpy's select, and exact integers row by row
        swept = sweep(model, "forward_flops", zip={"batch": batch, "seq": seq, "decoding": decoding}, exact=exact)
        assert [int(v) for v in swept["forward_flops"]] == want, exact
    lazy = lazy_sweep(model, ["forward_flops"], zip={"batch": batch, "seq": seq, "decoding": decoding}, chunk=5)
    assert [int(v) for v in lazy.compute()["forward_flops"]] == want


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 1), st.integers(1, 8))
def test_exact_code_and_numpy_code_pick_the_same_branch(batch, heads, upcast, act_bytes):
    expr = parse("batch*(7 if fp32_copy else 5) + (11 if one_sequence_mqa else 13*n_kv_heads)", NAMES)
    values = {"batch": batch, "n_kv_heads": heads, "upcast": upcast, "act_bytes": act_bytes}
    want = batch * (7 if upcast and act_bytes < 4 else 5) + (11 if batch == 1 and heads == 1 else 13 * heads)
    assert exact_function(expr)(values) == want
    numpy_fn = compile_expression(expr, tuple(values))
    assert numpy_fn(*(np.array([v]) for v in values.values()))[0] == want


def test_leading_order_of_conditionals():
    from symform.engine.graph.derive import leading_order

    d, s = sympy.Symbol("d_model", integer=True, positive=True), sympy.Symbol("seq", integer=True, positive=True)
    picks = sympy.Piecewise((2, sympy.Eq(BATCH, 1)), (3, True))
    past_four = sympy.Piecewise((1, s > 4), (0, True))
    # a conditional between numbers is a factor of degree 0, whatever it tests (here the large seq)
    assert leading_order(d**2 * picks + d * s * past_four + 7 * d, [d, s]) == d**2 * picks + d * s * past_four
    # branches of different degrees: each its own leading order, under its condition (by hand: d·s² + d·s + d)
    grows = d * sympy.Piecewise((s**2 + s, BATCH > 1), (s + 1, True)) + d
    assert leading_order(grows, [d, s]) == sympy.Piecewise((d * s**2, BATCH > 1), (d * s, True))
