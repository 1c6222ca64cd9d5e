"""Properties over random configurations: the paths to a number agree, and the
formulas published in the source notes (docs: seed formulas, §1 and §2) come out."""

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from symform import Model
from symform.engine.language.declarations import QUANTITIES
from symform.engine.language.families import presets as symform_presets
from symform.engine.graph.model import quantity_names

sizes = st.integers(min_value=1, max_value=4096)


ALL_FAMILIES = st.sampled_from(["llama", "mistral", "qwen2", "qwen3"])


@st.composite
def configs(draw, model_type=ALL_FAMILIES):
    n_kv_heads = draw(st.integers(1, 16))
    n_heads = n_kv_heads * draw(st.integers(1, 8))
    config = {
        "model_type": draw(model_type),
        "hidden_size": draw(sizes),
        "num_hidden_layers": draw(st.integers(1, 128)),
        "vocab_size": draw(st.integers(1, 300_000)),
        "intermediate_size": draw(sizes),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads,
        "head_dim": 2 * draw(st.integers(1, 128)),  # rotary positions turn pairs of dimensions: an odd head is refused
        "tie_word_embeddings": draw(st.booleans()),
    }
    if config["model_type"] in ("llama", "qwen3"):
        config["attention_bias"] = draw(st.booleans())
    return config


# tp, pp, dp: the parallel layout training_bytes is written in (symbols without defaults)
# source_seq: an encoder-decoder's encoder input (the other models take no such size and leave it unread)
workloads = st.fixed_dictionaries(
    {"batch": st.integers(1, 64), "seq": st.integers(1, 32768), "source_seq": st.integers(1, 4096), "tokens": st.integers(1, 10**13), "tp": st.integers(1, 8), "pp": st.integers(1, 8), "dp": st.integers(1, 64)}
)


def assert_every_path_agrees(model: Model, workload: dict) -> None:
    """Exact evaluation, compiled evaluation and the per-component sums give one number per quantity."""
    values = model.bindings(**workload)
    for quantity in quantity_names():
        formula = model.expression(quantity)
        exact = formula.evaluate(**{k: v for k, v in values.items() if k in formula.free})
        names = formula.free
        compiled = formula.compile(*names)(*(np.array([values[n]]) for n in names))
        assert math.isclose(float(np.ravel(compiled)[0]), float(exact), rel_tol=1e-9)  # a constant (a model without recurrent state) compiles to a 0-d array
        if quantity in QUANTITIES:
            for depth in (1, 2, 3, None):
                assert sum(model.evaluate_breakdown(quantity, depth=depth, **workload).values()) == exact


@settings(max_examples=40, deadline=None)
@given(config=configs(), workload=workloads)
def test_exact_compiled_and_graph_sum_agree_for_every_quantity(config, workload):
    assert_every_path_agrees(Model.from_config(config), workload)


def seed_params(d, n, V, d_ff, h, h_kv, d_h, *, tied, qk_norm, qkv_bias):
    """Whole dense model, seed formulas §1: n·(2d + 3·d·d_ff + 2·h·d_h·d + 2·h_kv·d_h·d [+ 2·d_h]) + d·(2V + 1)."""
    per_layer = 2 * d + 3 * d * d_ff + 2 * h * d_h * d + 2 * h_kv * d_h * d
    per_layer += 2 * d_h if qk_norm else 0
    per_layer += (h * d_h + 2 * h_kv * d_h) if qkv_bias else 0  # Qwen2: bias on Q, K, V
    return n * per_layer + d * (2 * V + 1) - (V * d if tied else 0)


@settings(max_examples=60, deadline=None)
@given(config=configs(st.sampled_from(["qwen2", "qwen3", "mistral"])))
def test_whole_model_parameters_match_the_seed_formula(config):
    c = {**config, "attention_bias": False} if "attention_bias" in config else config
    expected = seed_params(
        c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"],
        c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
        tied=c["tie_word_embeddings"], qk_norm=c["model_type"] == "qwen3", qkv_bias=c["model_type"] == "qwen2",
    )
    assert Model.from_config(c).evaluate("params") == expected


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 64), d_head=st.integers(1, 256), b=st.integers(1, 16), s=st.integers(1, 8192))
def test_gqa_with_as_many_kv_heads_as_heads_is_mha(heads, d_head, b, s):
    """MHA, seed formulas §2: 8·s·d² + 4·s²·d FLOPs per sequence, 4·d² parameters (d = h·d_h)."""
    d = heads * d_head
    mha = Model.from_component("gqa_attention", d_model=d, n_heads=heads, n_kv_heads=heads, d_head=d_head)
    assert mha.evaluate("forward_flops", batch=b, seq=s) == b * (8 * s * d**2 + 4 * s**2 * d)
    assert mha.evaluate("params") == 4 * d**2


@settings(max_examples=60, deadline=None)
@given(kv=st.integers(1, 16), group=st.integers(1, 8), d_head=st.integers(1, 256), b=st.integers(1, 16), s=st.integers(1, 8192))
def test_gqa_flops_match_the_seed_formula(kv, group, d_head, b, s):
    """GQA, seed formulas §2: 4·s·d² + 4·s²·d + 4·s·d·d_h·h_kv per sequence (d = h·d_h)."""
    heads = kv * group
    d = heads * d_head
    gqa = Model.from_component("gqa_attention", d_model=d, n_heads=heads, n_kv_heads=kv, d_head=d_head)
    assert gqa.evaluate("forward_flops", batch=b, seq=s) == b * (4 * s * d**2 + 4 * s**2 * d + 4 * s * d * d_head * kv)


@settings(max_examples=40, deadline=None)
@given(d=sizes, d_ff=sizes, b=st.integers(1, 16), s=st.integers(1, 8192))
def test_feed_forward_flops_match_the_seed_formulas(d, d_ff, b, s):
    """Seed formulas §2: SwiGLU 6·s·d·d_ff, ReLU/GeLU 4·s·d·d_ff per sequence."""
    assert Model.from_component("gated_mlp", d_model=d, d_ff=d_ff).evaluate("forward_flops", batch=b, seq=s) == 6 * b * s * d * d_ff
    assert Model.from_component("mlp", d_model=d, d_ff=d_ff).evaluate("forward_flops", batch=b, seq=s) == 4 * b * s * d * d_ff
    # seed formulas §1: a plain MLP with biases has 2·d·d_ff + d_ff + d parameters
    assert Model.from_component("mlp", d_model=d, d_ff=d_ff, mlp_bias=1).evaluate("params") == 2 * d * d_ff + d_ff + d


@settings(max_examples=30, deadline=None)
@given(config=configs(), workload=workloads, bwd=st.fractions(min_value=1, max_value=4, max_denominator=8))
def test_backward_is_the_convention_times_forward(config, workload, bwd):
    model = Model.from_config(config)
    assert model.evaluate("backward_flops", **workload) == 2 * model.evaluate("forward_flops", **workload)
    other = model.with_conventions(bwd_mult=bwd)
    assert other.evaluate("backward_flops", **workload) == bwd * other.evaluate("forward_flops", **workload)


@settings(max_examples=30, deadline=None)
@given(config=configs(), workload=workloads)
def test_tying_the_head_removes_one_vocabulary_table_and_no_flops(config, workload):
    untied = Model.from_config({**config, "tie_word_embeddings": False})
    tied = Model.from_config({**config, "tie_word_embeddings": True})
    assert untied.evaluate("params") - tied.evaluate("params") == config["vocab_size"] * config["hidden_size"]
    for quantity in ("forward_flops", "backward_flops", "bytes_moved", "saved_activations"):
        assert untied.evaluate(quantity, **workload) == tied.evaluate(quantity, **workload)
    head = untied.evaluate_breakdown("forward_flops", **workload)["lm_head"]
    assert head == 2 * workload["batch"] * workload["seq"] * config["hidden_size"] * config["vocab_size"]  # seed §2: 2·s·d·V


@settings(max_examples=30, deadline=None)
@given(config=configs(), workload=workloads)
def test_a_causal_factor_of_one_half_halves_exactly_the_attention_products(config, workload):
    model = Model.from_config(config).with_conventions(windowed=0)  # products over the whole sequence
    half = model.with_conventions(causal=Fraction(1, 2))
    b, s = workload["batch"], workload["seq"]
    products = 2 * 2 * b * config["num_attention_heads"] * s * s * config["head_dim"] * config["num_hidden_layers"]
    assert model.evaluate("forward_flops", **workload) - half.evaluate("forward_flops", **workload) == products // 2


@settings(max_examples=30, deadline=None)
@given(config=configs(), workload=workloads)
def test_counting_element_wise_work_only_adds(config, workload):
    model = Model.from_config(config)
    counted = model.with_conventions(count_elementwise=1)
    for quantity in ("forward_flops", "backward_flops"):
        assert counted.evaluate(quantity, **workload) > model.evaluate(quantity, **workload)
    assert counted.evaluate("params") == model.evaluate("params")


def test_exact_evaluation_never_overflows():
    """6·N·D for a 405B model on 15.6T tokens is beyond int64; exact ints keep every digit."""
    model = Model.load("llama-3.1-405b")
    value = model.evaluate("train_flops", batch=1, seq=8192, tokens=15_600_000_000_000)
    assert isinstance(value, int) and value > 2**63
    assert value % 2 == 0


def test_compiled_evaluation_vectorises_over_arrays():
    model = Model.load("qwen3-8b")
    batch = np.arange(1, 1001)
    result = model.compile("forward_flops", "batch", "seq")(batch, 2048)
    assert result.shape == (1000,) and result.dtype == np.float64
    assert result[9] == float(model.evaluate("forward_flops", batch=10, seq=2048))


def test_free_symbols_are_listed_when_a_value_is_missing():
    model = Model.load("qwen3-8b")
    with pytest.raises(Exception, match="no value for batch, seq"):
        model.evaluate("forward_flops")


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_bad_workload_values_are_refused(bad):
    model = Model.load("qwen3-0.6b")
    with pytest.raises(Exception) as info:
        model.evaluate("forward_flops", batch=bad, seq=128)
    assert "batch" in str(info.value)


def test_symbols_keep_their_domain():
    model = Model.load("qwen3-0.6b")
    for symbol in model.expression("forward_flops").expr.free_symbols:
        assert symbol.is_positive and symbol.is_integer
    assert sympy.Symbol("d_model") not in model.expression("params").expr.free_symbols


PRESETS = sorted(symform_presets())


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(PRESETS), workload=workloads, mtp=st.booleans())
@example(name="opus-mt-en-de", workload={"batch": 1, "seq": 1, "source_seq": 1, "tokens": 1, "tp": 1, "pp": 1, "dp": 1}, mtp=False)  # an encoder-decoder
def test_every_preset_agrees_with_itself_on_every_quantity(name, workload, mtp):
    """The same for every bundled architecture (mixtures of experts, latent attention, sliding windows, learned positions)."""
    model = Model.load(name)
    if mtp and "include_mtp" in model.library[model.spec.root].arg_names:
        model = model.with_arguments(include_mtp=1)
    assert_every_path_agrees(model, workload)
