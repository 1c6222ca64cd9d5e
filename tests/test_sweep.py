"""Sweeps: values equal Model.evaluate point by point; one compiled function equals separate ones;
chunking, dask and the float64 range check change nothing they should not."""

from __future__ import annotations

import json
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.interface.cli.cli import main
from symform.analysis.sweeps.sweeps import sweep
from symform.analysis.sweeps.sweep_quantities import InexactFloatError, InexactFloatWarning, compile_quantities, scale_to_integer

MODEL = symform.load("qwen3-0.6b")
WORKLOAD = {"seq": 2048, "batch": 4, "tokens": 10**9}


def _at(model, point: dict) -> symform.Model:
    sizes = {k: v for k, v in point.items() if k in model.values}
    return model.with_arguments(**sizes) if sizes else model


def _expected(model, quantity, point):
    workload = {k: v for k, v in point.items() if k not in model.values}
    return _at(model, point).evaluate(quantity, **workload)


def test_grid_is_the_cartesian_product_in_order():
    r = sweep(MODEL, "params", grid={"d_model": [512, 1024, 2048], "n_layers": [2, 4]})
    assert r.shape == (3, 2)
    assert list(r["d_model"]) == [512, 512, 1024, 1024, 2048, 2048]
    assert list(r["n_layers"]) == [2, 4, 2, 4, 2, 4]
    assert r.grid("params")[2, 1] == _expected(MODEL, "params", {"d_model": 2048, "n_layers": 4})


@settings(max_examples=15, deadline=None)
@given(
    d_model=st.integers(1, 4096),
    n_layers=st.integers(1, 64),
    seq=st.integers(1, 8192),
    tokens=st.integers(1, 10**6),
)
def test_float_sweep_equals_exact_evaluate_where_float64_is_exact(d_model, n_layers, seq, tokens):
    point = {"d_model": d_model, "n_layers": n_layers, "seq": seq}
    r = sweep(MODEL, ["params", "train_flops"], zip={k: [v] for k, v in point.items()}, fixed={"batch": 1, "tokens": tokens}, inexact="allow")
    for q in ("params", "train_flops"):
        expected = _expected(MODEL, q, {**point, "batch": 1, "tokens": tokens})
        if abs(expected) < 2**53:
            assert r[q][0] == expected  # exactly: whole numbers below 2**53 are floats without rounding
        else:
            assert r[q][0] == pytest.approx(float(expected), rel=1e-15)


def test_exact_sweep_equals_model_evaluate_at_sampled_points():
    r = sweep(MODEL, ["params", "train_flops", "forward_flops"], sample={"d_model": (64, 8192), "n_layers": (1, 200), "seq": [512, 4096, 131072]}, n=12, seed=3, fixed={"batch": 8, "tokens": 10**13}, exact=True)
    assert r["train_flops"].dtype == object
    for i in range(r.points):
        point = {k: int(r[k][i]) for k in r.inputs}
        for q in r.quantities:
            assert r[q][i] == _expected(MODEL, q, {**point, "batch": 8, "tokens": 10**13})
            assert type(r[q][i]) is int


def test_exact_keeps_fractions_under_a_halving_convention():
    model = MODEL.with_conventions(causal=Fraction(1, 2))
    r = sweep(model, "forward_flops", grid={"seq": [1, 2, 3]}, fixed={"batch": 1}, exact=True)
    for seq, value in zip([1, 2, 3], r["forward_flops"]):
        assert value == model.evaluate("forward_flops", seq=seq, batch=1)


def test_conventions_can_be_swept():
    r = sweep(MODEL, "forward_flops", grid={"causal": np.array([Fraction(1, 2), 1], dtype=object)}, fixed={"seq": 1024, "batch": 1}, exact=True)
    assert list(r["forward_flops"]) == [MODEL.with_conventions(causal=c).evaluate("forward_flops", seq=1024, batch=1) for c in (Fraction(1, 2), 1)]


def test_several_quantities_in_one_function_equal_separate_compiles():
    names = ("d_model", "n_layers", "seq")
    rng = np.random.default_rng(0)
    arrays = [rng.integers(64, 4096, 1000).astype(float), rng.integers(1, 64, 1000).astype(float), rng.integers(1, 8192, 1000).astype(float)]
    quantities = ["params", "forward_flops", "backward_flops", "train_step_flops"]
    fixed = {"batch": 2}
    together = compile_quantities(MODEL, quantities, names, fixed=fixed)(*arrays)
    for q, values in zip(quantities, together):
        alone = compile_quantities(MODEL, q, names, fixed=fixed)(*arrays)[0]
        np.testing.assert_array_equal(values, alone)
        # and the model's own compile, with the other sizes bound
        bound = MODEL.expression(q).subs(batch=2)
        np.testing.assert_array_equal(values, bound.subs(**{k: v for k, v in MODEL.values.items() if k not in names}).compile(*names)(*arrays))


def test_chunked_equals_unchunked_and_progress_does_not_change_values(capsys):
    kwargs = dict(grid={"d_model": [256, 512, 768], "n_layers": [1, 2, 3, 4, 5]}, sample={"seq": (1, 4096)}, n=7, seed=1, fixed={"batch": 1, "tokens": 10**6})
    whole = sweep(MODEL, ["params", "train_flops"], chunk=10**6, **kwargs)
    pieces = sweep(MODEL, ["params", "train_flops"], chunk=4, progress=True, **kwargs)
    assert whole.keys() == pieces.keys()
    for k in whole:
        np.testing.assert_array_equal(whole[k], pieces[k])
    assert "sweep" in capsys.readouterr().err


def test_random_samples_are_seeded_and_in_range():
    a = sweep(MODEL, "params", sample={"d_model": (100, 200), "vocab": [1000, 2000]}, n=500, seed=7)
    b = sweep(MODEL, "params", sample={"d_model": (100, 200), "vocab": [1000, 2000]}, n=500, seed=7)
    np.testing.assert_array_equal(a["params"], b["params"])
    assert a["d_model"].min() >= 100 and a["d_model"].max() <= 200
    assert set(a["vocab"]) == {1000, 2000}


def test_dask_arrays_run_through_the_same_function_lazily():
    da = pytest.importorskip("dask.array")
    names = ("d_model", "n_layers")
    fn = compile_quantities(MODEL, ["params", "train_flops"], names, fixed=WORKLOAD)
    rng = np.random.default_rng(2)
    d = rng.integers(64, 4096, 10_000).astype(float)
    n = rng.integers(1, 64, 10_000).astype(float)
    lazy = fn(da.from_array(d, chunks=2500), da.from_array(n, chunks=2500))
    assert all(isinstance(x, da.Array) for x in lazy)
    for got, want in zip(lazy, fn(d, n)):
        np.testing.assert_array_equal(got.compute(), want)


def test_a_quantity_free_of_the_swept_names_still_fills_the_grid():
    fn = compile_quantities(MODEL, ["params", "train_flops"], ("seq",), fixed={"batch": 1, "tokens": 10})
    params, _ = fn(np.array([128.0, 256.0, 512.0]))
    assert params.shape == (3,) and set(params) == {MODEL.evaluate("params")}


def test_float64_range_check_warns_raises_or_stays_quiet():
    kwargs = dict(grid={"n_layers": [1, 64]}, fixed={"seq": 4096, "batch": 1, "tokens": 10**13})
    with pytest.warns(InexactFloatWarning, match="exact=True"):
        sweep(MODEL, ["params", "train_flops"], **kwargs)
    with pytest.raises(InexactFloatError, match="train_flops reaches"):
        sweep(MODEL, ["params", "train_flops"], inexact="raise", **kwargs)
    assert issubclass(InexactFloatError, symform.EvaluationError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sweep(MODEL, "train_flops", inexact="allow", **kwargs)
        sweep(MODEL, "params", inexact="raise", **kwargs)  # well below 2**53: nothing to say
    exact = sweep(MODEL, "train_flops", exact=True, **kwargs)
    assert exact["train_flops"][1] == _expected(MODEL, "train_flops", {"n_layers": 64, **kwargs["fixed"]})


def test_the_range_limit_accounts_for_fractional_coefficients():
    half = MODEL.with_conventions(causal=Fraction(1, 2)).expression("forward_flops").expr
    assert scale_to_integer(half) in (1, 2)
    assert scale_to_integer(MODEL.expression("params").expr) == 1


def test_inputs_past_2_53_need_exact():
    with pytest.raises(InexactFloatError, match="exact=True"):
        sweep(MODEL, "train_flops", grid={"tokens": [2**60]}, fixed={"seq": 8, "batch": 1})


def test_memory_categories_equal_the_memory_report():
    from symform.analysis.memory.memory import Training, training_memory

    r = sweep(MODEL, ["memory.total", "memory.activations"], grid={"batch": [1, 3]}, fixed={"seq": 512}, exact=True, training=Training(recompute="full"))
    for batch, total, act in zip(r["batch"], r["memory.total"], r["memory.activations"]):
        report = training_memory(MODEL, batch=int(batch), seq=512, setup=Training(recompute="full"))
        assert total == report.total and act == report.values["activations"]


def test_a_sweep_splits_its_sequences_as_training_memory_does():
    """Under sequence parallelism each sequence splits over the tensor ranks: a swept or fixed length they cannot split
    is refused, eager and lazy alike, as training_memory refuses it; the lengths they split count as it counts them."""
    from symform.analysis.memory.memory import Training, training_memory
    from symform.analysis.memory.settings import Layout
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    setup = Training(layout=Layout(tensor=2, sequence=True), framework="torchtitan")
    for run in (lambda **k: sweep(MODEL, "memory.total", training=setup, **k), lambda **k: lazy_sweep(MODEL, "memory.total", training=setup, **k)):
        with pytest.raises(symform.ConfigError, match="4095 tokens do not split evenly"):
            run(grid={"seq": [4094, 4095]}, fixed={"batch": 1})
        with pytest.raises(symform.ConfigError, match="4095 tokens do not split evenly"):
            run(grid={"batch": [1, 2]}, fixed={"seq": 4095})
    r = sweep(MODEL, "memory.total", grid={"seq": [4094, 4096]}, fixed={"batch": 1}, exact=True, training=setup)
    assert [int(t) for t in r["memory.total"]] == [int(training_memory(MODEL, batch=1, seq=s, setup=setup).total) for s in (4094, 4096)]


def test_bad_input_is_one_clear_error():
    with pytest.raises(symform.EvaluationError, match="no value for seq"):
        sweep(MODEL, "forward_flops", grid={"d_model": [64]}, fixed={"batch": 1})
    with pytest.raises(symform.EvaluationError, match="positive"):
        sweep(MODEL, "params", grid={"d_model": [0, 64]})
    with pytest.raises(symform.EvaluationError, match="one length"):
        sweep(MODEL, "params", zip={"d_model": [64, 128], "n_layers": [1]})
    with pytest.raises(symform.EvaluationError, match="both swept and fixed"):
        sweep(MODEL, "params", grid={"d_model": [64]}, fixed={"d_model": 64})
    with pytest.raises(symform.EvaluationError, match="not a symbol"):
        sweep(MODEL, "params", grid={"width": [64]})
    with pytest.raises(symform.EvaluationError, match="memory category"):
        sweep(MODEL, "memory.nope", grid={"batch": [1]}, fixed={"seq": 1})


def test_an_array_of_more_than_one_dimension_is_refused_not_flattened():
    # flattened, zip= would pair (2, 3) with (3, 2) by memory order: 6 points no one asked for
    with pytest.raises(symform.EvaluationError, match=r"zip d_model: give a 1-D list .* shape \(2, 3\)"):
        sweep(MODEL, "params", zip={"d_model": np.full((2, 3), 64), "n_layers": np.full((3, 2), 2)})
    with pytest.raises(symform.EvaluationError, match=r"grid n_layers: give a 1-D list"):
        sweep(MODEL, "params", grid={"n_layers": [[1, 2], [3, 4]]})
    with pytest.raises(symform.EvaluationError, match=r"sample n_layers: give a 1-D list"):
        sweep(MODEL, "params", sample={"n_layers": [[1, 2]]}, n=3)
    assert list(sweep(MODEL, "params", grid={"n_layers": 2})["n_layers"]) == [2]  # one number is one value


def test_to_pandas_matches_the_dict_or_says_what_is_missing():
    r = sweep(MODEL, "params", grid={"d_model": [64, 128]})
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(symform.EvaluationError, match="pandas"):
            r.to_pandas()
    else:
        frame = r.to_pandas()
        assert list(frame.columns) == ["d_model", "params"]
        np.testing.assert_array_equal(frame["params"].to_numpy(), r["params"])


def test_cli_sweep_json_and_csv(capsys):
    assert main(["sweep", "qwen3-0.6b", "params", "train-flops", "--grid", "n_layers=2,4", "--zip", "d_model=128,256", "--fix", "seq=64", "--fix", "batch=1", "--fix", "tokens=640", "--exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["shape"] == [2, 2]
    assert out["columns"]["params"][3] == _expected(MODEL, "params", {"n_layers": 4, "d_model": 256})
    assert main(["sweep", "qwen3-0.6b", "params", "--grid", "n_layers=2,4", "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "n_layers,params" and lines[2] == f"4,{_expected(MODEL, 'params', {'n_layers': 4})}"
    assert main(["sweep", "qwen3-0.6b", "params", "--grid", "n_layers=0"]) == 2


def test_points_that_break_a_requirement_are_refused():
    model = symform.load("llama-3-8b")
    # worded as the model's own checks word it (Model.evaluate, with_arguments, the CLI: one message)
    with pytest.raises(symform.ConfigError, match=r"llama-3-8b: n_heads % n_kv_heads == 0 does not hold \(n_heads=32, n_kv_heads=3\) in layers/attn"):
        sweep(model, "params", grid={"n_kv_heads": [1, 2, 3, 4]})
    with pytest.raises(symform.ConfigError) as swept:
        sweep(model, "params", zip={"n_heads": [32, 40], "n_kv_heads": [8, 6]})
    with pytest.raises(symform.ConfigError) as resized:
        model.with_arguments(n_heads=40, n_kv_heads=6)
    with pytest.raises(symform.ConfigError) as evaluated:
        model.evaluate("params", n_heads=40, n_kv_heads=6)
    with pytest.raises(symform.ConfigError) as compiled:
        model.compile("params", "n_heads", "n_kv_heads")(np.array([32.0, 40.0]), np.array([8.0, 6.0]))
    assert str(swept.value) == str(resized.value) == str(evaluated.value) == str(compiled.value)
    fine = model.compile("params", "n_heads", "n_kv_heads")(np.array([32.0, 40.0]), np.array([8.0, 10.0]))
    assert list(fine) == [model.evaluate("params"), model.with_arguments(n_heads=40, n_kv_heads=10).evaluate("params")]
    fine = sweep(model, "params", zip={"n_heads": [32, 40], "n_kv_heads": [8, 10]})
    assert len(fine["params"]) == 2


def test_cli_notes_float64_rounding_only_where_digits_are_printed(capsys):
    readme = ["sweep", "qwen3-8b", "params", "train-flops", "--grid", "n_layers=24,36", "--grid", "d_model=2048,4096", "--fix", "seq=4096", "--fix", "tokens=1e12", "--fix", "batch=1"]
    assert main(readme) == 0
    out, err = capsys.readouterr()
    assert err == "" and "5.26563e+22" in out  # the table shows 6 significant digits: float64 holds 16
    assert main([*readme, "--csv"]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "train_flops reaches 5.27e+22" in err and "params" not in err  # CSV prints all 17
    assert main(["sweep", "qwen3-8b", "params", "--grid", "n_layers=24,36", "--csv"]) == 0
    assert capsys.readouterr().err == ""  # nothing near 2**53


def test_the_note_names_the_real_limit_for_fractional_values():
    third = symform.load("qwen3-0.6b").with_conventions(causal=Fraction(1, 3))
    assert sweep(third, "forward_flops", zip={"batch": [1], "seq": [2]}, inexact="raise")  # far below: silent
    with pytest.raises(InexactFloatError, match=r"a multiple of 1/3: exact below 2\*\*53/3"):
        sweep(third, "forward_flops", zip={"batch": [2**10], "seq": [2**20]}, inexact="raise")
