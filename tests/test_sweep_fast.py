"""The factored in-place kernel, the int64 path and the lazy (dask) sweep give what the
plain routes give: sympy's own lambdified expression, Model.evaluate's exact integers,
numpy's sweep bit for bit; and a lazy sweep ships a description, not its inputs."""

from __future__ import annotations

import math
import pickle
import re

import numpy as np
import pytest
import sympy
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.sweeps.sweeps import sweep
from symform.analysis.sweeps.sweep_quantities import IntegerOverflowError, compile_quantities
from symform.engine.errors import SymformError

PRESETS = ("qwen3-0.6b", "deepseek-v2-lite", "gemma-2-2b", "gpt2")
QUANTITIES = ("params", "forward_flops", "train_flops", "active_params")
WORKLOAD = {"batch": 2, "tokens": 10**6}


def _sympy_route(compiled, arrays):
    """The route sweeps took before the kernel: sympy's lambdify of the expanded expressions."""
    symbols = {s.name: s for e in compiled.expressions for s in e.free_symbols}
    f = sympy.lambdify([symbols.get(n, sympy.Symbol(n)) for n in compiled.names], compiled.expressions, modules="numpy")
    return [np.broadcast_to(np.asarray(v, dtype=np.float64), arrays[0].shape) for v in f(*arrays)]


def _points(model, draw_rows):
    """Layers from the model's own count up: presets whose layers come in kinds (local, dense) keep their requirements."""
    points = {k: np.array([r[k] for r in draw_rows]) for k in draw_rows[0]}
    points["n_layers"] = points["n_layers"] + model.values["n_layers"]
    points["d_model"] = points["d_model"] * model.values.get("n_heads", 1)  # some families split d_model among the heads
    return points


rows = st.lists(
    st.fixed_dictionaries({"d_model": st.integers(1, 512), "n_layers": st.integers(0, 64), "seq": st.integers(1, 1 << 15)}),
    min_size=1,
    max_size=20,
)


@settings(max_examples=15, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(preset=st.sampled_from(PRESETS), points=rows)
def test_float_kernel_equals_sympys_lambdified_expression(preset, points):
    model = symform.load(preset)
    zipped = _points(model, points)
    r = sweep(model, QUANTITIES, zip=zipped, fixed=WORKLOAD, inexact="allow")
    compiled = compile_quantities(model, QUANTITIES, tuple(zipped), fixed=WORKLOAD)
    for q, old in zip(QUANTITIES, _sympy_route(compiled, [zipped[k].astype(float) for k in zipped])):
        small = np.abs(old) < 2**53 / 4  # both exact there (whole multiples of 1/m with m <= 4); past it, rounding order may differ
        np.testing.assert_array_equal(r[q][small], old[small])
        np.testing.assert_allclose(r[q], old, rtol=1e-14)


@settings(max_examples=15, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(preset=st.sampled_from(PRESETS), points=rows)
def test_int64_path_equals_model_evaluate(preset, points):
    model = symform.load(preset)
    zipped = _points(model, points)
    if compile_quantities(model, QUANTITIES, tuple(zipped), fixed=WORKLOAD).kernel is None:  # a sliding window's min(): no polynomial
        with pytest.raises(IntegerOverflowError, match="no polynomial"):
            sweep(model, QUANTITIES, zip=zipped, fixed=WORKLOAD, exact="int64")
        return
    r = sweep(model, QUANTITIES, zip=zipped, fixed=WORKLOAD, exact="int64")
    old = sweep(model, QUANTITIES, zip={k: v.astype(object) for k, v in zipped.items()}, fixed=WORKLOAD, exact=True)  # Python ints, point by point
    for q in QUANTITIES:
        assert r[q].dtype == np.int64
        assert r[q].tolist() == list(old[q])
    i = len(points) - 1
    point = {k: int(v[i]) for k, v in zipped.items()}
    sizes = {k: v for k, v in point.items() if k in model.values}
    assert r["train_flops"][i] == model.with_arguments(**sizes).evaluate("train_flops", seq=point["seq"], **WORKLOAD)


def test_int64_refuses_what_it_cannot_prove_and_exact_true_falls_back():
    model = symform.load("qwen3-0.6b")
    big = {"d_model": [2**20], "n_layers": [2**12], "seq": [2**20]}
    with pytest.raises(IntegerOverflowError, match="exact=True"):
        sweep(model, "train_flops", zip=big, fixed={"batch": 2**20, "tokens": 10**6}, exact="int64")
    exact = sweep(model, "train_flops", zip=big, fixed={"batch": 2**20, "tokens": 10**6}, exact=True)
    assert exact["train_flops"][0] == model.with_arguments(d_model=2**20, n_layers=2**12).evaluate("train_flops", seq=2**20, batch=2**20, tokens=10**6)
    assert exact["train_flops"][0] >= 2**63


def test_compiled_function_on_int64_arrays_is_exact_or_refuses():
    model = symform.load("qwen3-0.6b")
    f = compile_quantities(model, "train_flops", ("d_model", "tokens"), fixed={"seq": 4096, "batch": 1})
    (small,) = f(np.array([1024, 2048]), np.array([10**6, 10**7]))
    assert small.dtype == np.int64
    assert small[1] == model.with_arguments(d_model=2048).evaluate("train_flops", seq=4096, batch=1, tokens=10**7)
    with pytest.raises(SymformError, match="int64"):
        f(np.array([1024]), np.array([10**18]))


def test_a_quantity_independent_of_an_axis_fills_its_grid_block_by_block():
    model = symform.load("qwen3-0.6b")
    r = sweep(model, ["params", "train_flops"], grid={"seq": [128, 256, 512], "n_layers": [1, 2], "d_model": [64, 128]}, fixed=WORKLOAD, chunk=3)
    for i in range(r.points):
        sizes = {"n_layers": int(r["n_layers"][i]), "d_model": int(r["d_model"][i])}
        assert r["params"][i] == model.with_arguments(**sizes).evaluate("params")
        assert r["train_flops"][i] == model.with_arguments(**sizes).evaluate("train_flops", seq=int(r["seq"][i]), **WORKLOAD)


# --- lazy sweeps on a dask.distributed LocalCluster ---------------------------------------------


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
        yield c


def _lazy(n, chunk):
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    return lazy_sweep(
        symform.load("qwen3-0.6b"), ["params", "train_flops"],
        grid={"n_layers": [4, 28]}, sample={"d_model": (64, 8192), "seq": [512, 4096, 32768]}, n=n, seed=5,
        fixed=WORKLOAD, chunk=chunk,
    )


def _graph_bytes(lazy) -> int:
    import cloudpickle

    return len(cloudpickle.dumps(dict(lazy["train_flops"].__dask_graph__())))


def test_lazy_sweep_on_a_local_cluster_equals_numpy_bit_for_bit(client):
    from symform.analysis.sweeps.lazy_sweeps import block_points

    lazy = _lazy(5 * 10**5, 10**5)  # 10**6 points, 10 blocks
    got = lazy.compute()
    # numpy: the same described points, made in this process, through the eager sweep
    d = lazy.description
    blocks = [(g, g + 1, r, min(r + d.chunk, d.n)) for g in range(2) for r in range(0, d.n, d.chunk)]
    parts = [block_points(d, b) for b in blocks]
    points = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    want = sweep(symform.load("qwen3-0.6b"), ["params", "train_flops"], zip=points, fixed=WORKLOAD, inexact="allow")
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    top = lazy.top_k("train_flops", 5)
    np.testing.assert_array_equal(top["train_flops"], np.sort(want["train_flops"])[::-1][:5])
    np.testing.assert_array_equal(top["d_model"], want["d_model"][top["index"]])
    low = lazy.argmin("params")
    assert low["index"] == int(np.argmin(want["params"])) and low["params"] == want["params"].min()
    counts, edges = lazy.histogram("params", 8, range=(0.0, 2e9))
    np.testing.assert_array_equal(counts, np.histogram(want["params"], 8, range=(0.0, 2e9))[0])


def test_lazy_sweep_graph_holds_no_inputs():
    small, large = _lazy(10**3, 250), _lazy(10**6, 250_000)  # 8 blocks each; 10**3 times the points
    assert large.points == 1000 * small.points
    assert _graph_bytes(large) < 64_000
    assert abs(_graph_bytes(large) - _graph_bytes(small)) < 1_000  # the points do not travel: only their description
    pickle.loads(pickle.dumps(large.description))  # and it pickles with the standard library (the kernel as text)


def test_sweep_of_dask_zip_arrays_stays_lazy(client):
    da = pytest.importorskip("dask.array")
    model = symform.load("qwen3-0.6b")
    d = np.arange(64, 64 * 1001, 64).astype(float)
    n = (np.arange(1000) % 60 + 1).astype(np.int64)
    lazy = sweep(model, ["params", "train_flops"], zip={"d_model": da.from_array(d, chunks=300), "n_layers": da.from_array(n, chunks=500)}, fixed={"seq": 512, **WORKLOAD})
    assert all(hasattr(lazy[q], "__dask_graph__") for q in ("params", "train_flops"))
    want = sweep(model, ["params", "train_flops"], zip={"d_model": d, "n_layers": n}, fixed={"seq": 512, **WORKLOAD}, inexact="allow")
    got = lazy.compute()
    for q in ("params", "train_flops"):
        np.testing.assert_array_equal(got[q], want[q])


def test_lazy_sweep_refuses_bad_points_on_the_worker(client):
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    lazy = lazy_sweep(symform.load("qwen3-0.6b"), "params", sample={"n_heads": (1, 16), "n_kv_heads": [3]}, n=100, seed=0, chunk=50)
    with pytest.raises(SymformError, match="n_kv_heads|n_heads"):
        lazy.compute()


def test_model_compile_keeps_dask_arrays_lazy():
    da = pytest.importorskip("dask.array")
    model = symform.load("qwen3-0.6b")
    forward = model.compile("forward_flops", "batch", "seq")
    batch = np.array([1, 8, 64, 3])
    lazy = forward(da.from_array(batch, chunks=2), 4096)
    assert hasattr(lazy, "__dask_graph__")
    np.testing.assert_array_equal(lazy.compute(), forward(batch, 4096))


def test_lazy_sweep_refuses_more_blocks_than_its_budget_at_once():
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    with pytest.raises(SymformError, match="MAX_BLOCKS"):
        lazy_sweep(symform.load("qwen3-0.6b"), "params", sample={"d_model": (64, 128)}, n=10**15, chunk=10)


# --- the block screen: few passes, never more lenient than the full checks ------------------------

SCREENED = ("n_heads", "n_kv_heads", "d_model", "n_local_layers", "causal")  # two divide; positive, nonnegative, rational domains
TRICKY = st.one_of(
    st.integers(-3, 40).map(float),
    st.integers(2**53 - 3, 2**53 + 3).map(float),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, -0.0, 0.0, 5e-324, 1e-300, 7.5, 2.0**52 + 0.5, 2.0**53, -1.0, float("nan"), float("inf")]),
)


def _screen_and_full_checks():
    from symform.analysis.sweeps.sweep_points import Axis, _Screen, check_relations, requirement_relations, validate_columns

    model = symform.load("llama-3-8b")
    domains = {n: model.vocabulary.entry(n).spec.domain for n in SCREENED}
    relations = requirement_relations(model, list(SCREENED), {})

    def screen(columns):
        axis = Axis(SCREENED, tuple(columns))
        return _Screen.of(axis, domains, relations, False, len(columns[0]))

    def full(columns):
        axis = Axis(SCREENED, tuple(columns))
        validate_columns(domains, [axis], False, model.vocabulary)
        check_relations(relations, [axis])

    return screen, full, relations


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 6))
def test_block_screen_never_passes_what_the_full_checks_refuse(data, n):
    screen, full, relations = _screen_and_full_checks()
    kv = data.draw(st.lists(st.integers(1, 8), min_size=n, max_size=n))
    heads = [k * data.draw(st.integers(1, 4)) for k in kv]
    columns = [np.array(heads, dtype=np.float64), np.array(kv, dtype=np.float64), np.full(n, 64.0), np.zeros(n), np.full(n, 0.5)]
    for _ in range(data.draw(st.integers(0, 3))):  # a few cells made tricky, anywhere
        columns[data.draw(st.integers(0, len(SCREENED) - 1))][data.draw(st.integers(0, n - 1))] = data.draw(TRICKY)
    s = screen(columns)
    assert s is not None and len(s.relations) == len(relations) == 1  # n_heads % n_kv_heads == 0, screened
    if s.passes(columns):
        full(columns)  # never raises where the screen vouched


def test_block_screen_passes_plain_valid_blocks():
    screen, full, _ = _screen_and_full_checks()
    columns = [np.array([8.0, 24.0, 7.0]), np.array([8.0, 4.0, 1.0]), np.array([64.0, 1.0, 2.0**53 - 1]), np.array([0.0, -0.0, 3.0]), np.array([0.5, 2.0, 5e-324])]
    full(columns)
    assert screen(columns).passes(columns)


@pytest.mark.parametrize("column, value, message", [
    ("d_model", 2.5, "d_model must be a whole number"),
    ("d_model", 0.0, "d_model must be positive, got 0.0"),
    ("d_model", float("nan"), "d_model: values must be finite"),
    ("d_model", float("inf"), "d_model: values must be finite"),
    ("d_model", 2.0**53, "d_model reaches 9.01e\\+15 >= 2\\*\\*53"),
    ("n_heads", 12.5, "n_heads must be a whole number"),
    ("n_heads", 12.0, r"n_heads % n_kv_heads == 0 does not hold \(n_heads=12, n_kv_heads=8\)"),
    ("n_kv_heads", 0.5, "n_kv_heads must be a whole number"),
])
def test_a_bad_value_in_a_late_block_is_refused_as_the_full_checks_word_it(column, value, message):
    model = symform.load("llama-3-8b")
    points = {"d_model": np.full(40, 4096.0), "n_heads": np.full(40, 32.0), "n_kv_heads": np.full(40, 8.0)}
    points[column][29] = value
    with pytest.raises(symform.SymformError, match=message):
        sweep(model, "params", zip=points, chunk=8)
    points[column][29] = points[column][0]
    fine = sweep(model, "params", zip=points, chunk=8)
    assert np.all(fine["params"] == model.evaluate("params"))


def test_block_screen_keeps_a_whole_number_test_on_every_divisor():
    """a/b whole proves a whole only where b is: two requirements dividing each other prove nothing."""
    from symform.analysis.sweeps.sweep_points import Axis, Relation, _Screen

    a, b = sympy.symbols("n_heads n_kv_heads", positive=True, integer=True)
    relations = [Relation(sympy.Eq(sympy.Mod(a, b), 0), "a", "a"), Relation(sympy.Eq(sympy.Mod(b, a), 0), "b", "b")]
    columns = (np.array([2.5, 4.0]), np.array([2.5, 4.0]))
    screen = _Screen.of(Axis(("n_heads", "n_kv_heads"), columns), {"n_heads": "positive_integer", "n_kv_heads": "positive_integer"}, relations, False, 2)
    assert len(screen.relations) == 2 and not screen.passes(columns)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.one_of(st.integers(1, 300).map(float), TRICKY), min_size=1, max_size=6))
def test_block_screen_tests_a_whole_divisor_as_the_full_checks_do(values):
    """``d_head % 2 == 0`` (a rotary head turns pairs of dimensions): the screen divides by the number itself,
    in place of d_head's whole-number test, and never passes what the full checks refuse; it passes every
    block of even whole numbers."""
    from symform.analysis.sweeps.sweep_points import Axis, Relation, _Screen, check_relations, validate_columns

    model = symform.load("llama-3-8b")
    d_head = model.vocabulary["d_head"]
    relations = [Relation(sympy.Eq(sympy.Mod(d_head, 2), 0), "rotary_dim % 2 == 0", "pairs")]
    domains = {"d_head": "positive_integer"}
    columns = (np.array(values),)
    screen = _Screen.of(Axis(("d_head",), columns), domains, relations, False, len(values))
    assert screen.divides == [(relations[0], 0, 2.0)] and screen.columns == [(0, 1.0, False)]

    def full(columns):
        validate_columns(domains, [Axis(("d_head",), columns)], False, model.vocabulary)
        check_relations(relations, [Axis(("d_head",), columns)])

    if screen.passes(columns):
        full(columns)
    even = (np.array([2.0 * round(abs(v)) + 2 if math.isfinite(v) and abs(v) < 2**50 else 64.0 for v in values]),)
    full(even)
    assert screen.passes(even)


def test_a_late_block_past_2_53_is_warned_of_after_blocks_proven_below_it():
    """Blocks whose inputs' greatest values prove every result below 2**53 are not scanned; a later
    block with larger inputs is, and the warning names the greatest value, as Python's integers give it."""
    from symform.analysis.sweeps.sweep_quantities import InexactFloatError, InexactFloatWarning

    model = symform.load("qwen3-0.6b")
    width = np.array([1024.0] * 20 + [2.0**24])
    points = {"d_model": width, "d_ff": width}
    huge = int(model.evaluate("params", d_model=2**24, d_ff=2**24))
    assert huge >= 2**53 > int(model.evaluate("params", d_model=1024, d_ff=1024))
    with pytest.warns(InexactFloatWarning, match=re.escape(f"params reaches {float(huge):.3g}")):
        sweep(model, "params", zip=points, chunk=4)
    with pytest.raises(InexactFloatError, match=re.escape(f"params reaches {float(huge):.3g}")):
        sweep(model, "params", zip=points, chunk=4, inexact="raise")
    sweep(model, "params", zip={k: v[:20] for k, v in points.items()}, chunk=4, inexact="raise")  # every block proven: silent
