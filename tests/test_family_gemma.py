"""Gemma, Gemma 2 and Gemma 3 (text) against transformers, and the sliding-window convention.

Oracles, as in test_oracle_flops.py and test_oracle_params.py: tiny models
(random init, float32, eager attention, CPU) counted by
``torch.utils.flop_counter.FlopCounterMode``, and parameter counts of the
same configs built on the meta device. Eager attention multiplies the full
seq x seq score matrix of a sliding-window layer and masks it, so the
counter is matched with the convention ``windowed = 0``. What ``windowed = 1``
(the default) changes is checked as properties: nothing when the window covers
the sequence, and exactly the attention products' key length, seq -> window,
when it does not.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import (  # noqa: E402
    ABSENT,
    TINY,
    build,
    changed,
    count_forward,
    count_forward_backward,
    global_counts,
    input_ids,
    meta_model,
    meta_params,
    preset_dict,
    top_level_counts,
)

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = TINY

FULL, SLIDING = "full_attention", "sliding_attention"

# (id, config changes on BASE). Each type appears tied and untied, with GQA,
# MHA or MQA, with a head_dim other than hidden / heads (16) and with the
# class default (256, when the field is absent), with and without biases;
# the local/global types with windows below and above the test sequences and
# with several layouts of local and global layers.
CONFIGS = [
    ("gemma-gqa-tied-hd24", {"model_type": "gemma", "head_dim": 24}),
    ("gemma-mha-untied-hd16", {"model_type": "gemma", "num_key_value_heads": 4, "head_dim": 16, "tie_word_embeddings": False}),
    ("gemma-mqa-bias-hd-default", {"model_type": "gemma", "num_key_value_heads": 1, "attention_bias": True}),
    ("gemma-kv-absent-3-layers", {"model_type": "gemma", "num_key_value_heads": None, "num_attention_heads": 16, "head_dim": 8, "num_hidden_layers": 3}),
    ("gemma2-gqa-tied-hd24-w3", {"model_type": "gemma2", "head_dim": 24, "num_hidden_layers": 3, "sliding_window": 3}),
    ("gemma2-mha-untied-w16-4-layers", {"model_type": "gemma2", "num_key_value_heads": 4, "head_dim": 16, "num_hidden_layers": 4, "sliding_window": 16, "tie_word_embeddings": False}),
    ("gemma2-mqa-bias-hd-default-w4", {"model_type": "gemma2", "num_key_value_heads": 1, "attention_bias": True, "sliding_window": 4}),
    ("gemma2-layer-types-alternating", {"model_type": "gemma2", "head_dim": 16, "num_hidden_layers": 3, "sliding_window": 2, "layer_types": [SLIDING, FULL, SLIDING]}),
    ("gemma2-layer-types-own-layout", {"model_type": "gemma2", "head_dim": 16, "num_hidden_layers": 3, "sliding_window": 2, "layer_types": [FULL, FULL, SLIDING], "tie_word_embeddings": False}),
    ("gemma3-gqa-tied-hd24-w3-7-layers", {"model_type": "gemma3_text", "head_dim": 24, "num_hidden_layers": 7, "sliding_window": 3}),
    ("gemma3-pattern2-mqa-untied-w5", {"model_type": "gemma3_text", "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 4, "sliding_window": 5, "sliding_window_pattern": 2, "tie_word_embeddings": False}),
    ("gemma3-pattern1-all-global", {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 3, "sliding_window": 3, "sliding_window_pattern": 1}),
    ("gemma3-bias-hd-default-w16", {"model_type": "gemma3_text", "num_key_value_heads": 4, "attention_bias": True, "sliding_window": 16}),
    ("gemma3-layer-types-pattern6", {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 6, "sliding_window": 2, "layer_types": [SLIDING] * 5 + [FULL]}),
    ("gemma3-layer-types-own-layout", {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 4, "sliding_window": 2, "layer_types": [FULL, SLIDING, FULL, FULL]}),
    ("gemma3-bidirectional-w6", {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 3, "sliding_window": 6, "use_bidirectional_attention": True}),
]

# batch, seq: seq above every window (7, 20), below some (5), and 1
SHAPES = [(2, 7), (3, 5), (1, 1), (1, 20)]


def config_for(changes: dict) -> dict:
    config = {**BASE, **changes}
    return {k: v for k, v in config.items() if v is not None}  # None: the field is absent


def eager(config: dict) -> Model:
    """symform's count of what eager attention computes: full seq x seq score maps in local layers too."""
    return Model.from_config(config, name="tiny").with_conventions(windowed=0)


CASES = [pytest.param(changes, id=name) for name, changes in CONFIGS]
LOCAL_GLOBAL_CASES = [
    pytest.param(changes, id=name)
    for name, changes in CONFIGS
    if changes["model_type"] != "gemma"
]


# -- forward and backward FLOPs against the counter ----------------------------


@pytest.mark.parametrize("changes", CASES)
def test_forward_flops_match_counter(changes):
    config = config_for(changes)
    model = build(config)
    sym = eager(config)
    for batch, seq in SHAPES:
        counter = count_forward(model, input_ids(config, batch, seq))
        assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq, global_counts(counter))


@pytest.mark.parametrize("changes", CASES)
def test_forward_backward_flops_match_counter(changes):
    """Forward + backward under the counter is exactly 3x the forward, and symform says so too."""
    config = config_for(changes)
    model = build(config)
    sym = eager(config)
    for batch, seq in SHAPES[:2]:
        ids = input_ids(config, batch, seq)
        forward = count_forward(model, ids).get_total_flops()
        both = count_forward_backward(model, ids).get_total_flops()
        assert both == 3 * forward
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == forward
        assert sym.evaluate("backward_flops", batch=batch, seq=seq) == both - forward
        assert sym.evaluate("train_step_flops", batch=batch, seq=seq) == both


@pytest.mark.parametrize("changes", CASES)
def test_forward_breakdown_matches_counter_modules(changes):
    """symform's depth-1 split (embed, layers, final_norm, lm_head, and the final
    logit soft-capping, element-wise) against the counter's per-module counts."""
    config = config_for(changes)
    model = build(config)
    batch, seq = 2, 7
    counter = count_forward(model, input_ids(config, batch, seq))
    expected = top_level_counts(counter)
    assert sum(expected.values()) == counter.get_total_flops()
    got = eager(config).evaluate_breakdown("forward_flops", depth=1, batch=batch, seq=seq)
    if config["model_type"] == "gemma2":
        assert got.pop("logit_softcap") == 0
    assert got == expected


@pytest.mark.parametrize("changes", LOCAL_GLOBAL_CASES)
def test_local_and_global_layers_match_transformers_layer_types(changes):
    """The split of the layers into local and global ones is transformers' own:
    symform's layers/local and layers/global against the counter's per-layer
    counts grouped by the built model's config.layer_types."""
    config = config_for(changes)
    model = build(config)
    kinds = model.config.layer_types
    sym = eager(config)
    assert sym.values["n_local_layers"] == kinds.count(SLIDING)
    batch, seq = 2, 7
    counts = count_forward(model, input_ids(config, batch, seq)).get_flop_counts()
    (top,) = [name for name in counts if name != "Global" and "." not in name]
    per_layer = [sum(counts.get(f"{top}.model.layers.{i}", {}).values()) for i in range(config["num_hidden_layers"])]
    expected = {kind: sum(n for n, k in zip(per_layer, kinds) if k == name) for kind, name in (("local", SLIDING), ("global", FULL))}
    got = sym.evaluate_breakdown("forward_flops", depth=2, batch=batch, seq=seq)
    assert {kind: got.get(f"layers/{kind}", 0) for kind in ("local", "global")} == expected


def test_examples_from_the_spec():
    """The verified tiny examples (batch 2, seq 7) from the transformers 5.24 survey."""
    examples = [
        ({"model_type": "gemma", "num_hidden_layers": 2, "num_key_value_heads": 1, "head_dim": 16, "hidden_size": 32, "intermediate_size": 48}, 22848, 685440),
        ({"model_type": "gemma2", "num_hidden_layers": 3, "head_dim": 16, "hidden_size": 32, "intermediate_size": 48, "query_pre_attn_scalar": 16, "sliding_window": 3}, 35904, 1068928),
        ({"model_type": "gemma3_text", "num_hidden_layers": 7, "head_dim": 16, "hidden_size": 32, "intermediate_size": 48, "query_pre_attn_scalar": 16, "sliding_window": 3}, 79648, 2373504),
    ]
    for changes, params, flops in examples:
        sym = eager(config_for(changes))
        assert sym.evaluate("params") == params
        assert sym.evaluate("forward_flops", batch=2, seq=7) == flops


# -- parameters against transformers on the meta device -------------------------


@pytest.mark.parametrize("changes", CASES)
def test_tiny_params_match_transformers(changes):
    config = config_for(changes)
    expected = meta_params(config)
    assert Model.from_config(config).evaluate("params") == expected
    # parameters never depend on the window or on which layers are local
    for windowed in (0, 1):
        assert Model.from_config(config).with_conventions(windowed=windowed).evaluate("params") == expected


# (id, preset, changes, (config attribute, value transformers resolves it to))
MODIFIED = [
    ("gemma-head-dim-absent", "gemma-2b", {"head_dim": ABSENT}, ("head_dim", 256)),
    ("gemma-kv-absent", "gemma-2b", {"num_key_value_heads": ABSENT, "num_attention_heads": 16}, ("num_key_value_heads", 16)),  # GemmaConfig default 16, not heads (preset: 1)
    ("gemma-tie-absent", "gemma-7b", {"tie_word_embeddings": ABSENT}, ("tie_word_embeddings", True)),
    ("gemma-untied-bias", "gemma-7b", {"tie_word_embeddings": False, "attention_bias": True}, ("attention_bias", True)),
    ("gemma2-kv-absent", "gemma-2-9b", {"num_key_value_heads": ABSENT}, ("num_key_value_heads", 4)),  # Gemma2Config default 4, not heads 16 (preset: 8)
    ("gemma2-head-dim-absent", "gemma-2-27b", {"head_dim": ABSENT}, ("head_dim", 256)),  # preset: 128
    ("gemma2-untied", "gemma-2-2b", {"tie_word_embeddings": False}, ("tie_word_embeddings", False)),
    ("gemma2-bias-window-absent", "gemma-2-2b", {"attention_bias": True, "sliding_window": ABSENT}, ("sliding_window", 4096)),
    ("gemma3-kv-absent", "gemma-3-1b", {"num_key_value_heads": ABSENT}, ("num_key_value_heads", 4)),  # preset: 1
    ("gemma3-untied-bias", "gemma-3-1b", {"tie_word_embeddings": False, "attention_bias": True}, ("attention_bias", True)),
    ("gemma3-layer-types", "gemma-3-1b", {"layer_types": [FULL, SLIDING]}, ("layer_types", [FULL, SLIDING])),
]


@pytest.mark.parametrize("preset,changes,premise", [pytest.param(*case[1:], id=case[0]) for case in MODIFIED])
def test_modified_preset_params_match_transformers(preset, changes, premise):
    config = changed({**preset_dict(preset), "num_hidden_layers": 2}, changes)
    model = meta_model(config)
    expected = sum(p.numel() for p in model.parameters())
    attribute, resolved = premise
    assert getattr(model.config, attribute) == resolved, "the test's premise about transformers' default no longer holds"
    assert Model.from_config(config, name=preset).evaluate("params") == expected


def test_local_layers_of_the_presets():
    """Gemma 2 alternates (even layers local), Gemma 3 1B has one global layer in six."""
    assert Model.load("gemma-2-2b").values["n_local_layers"] == 13
    assert Model.load("gemma-2-27b").values["n_local_layers"] == 23
    assert Model.load("gemma-3-1b").values["n_local_layers"] == 26 - 4  # global: layers 5, 11, 17, 23
    assert Model.load("gemma-3-1b").values["window"] == 512
    assert "n_local_layers" not in Model.load("gemma-7b").values


def test_gemma_element_wise_work_is_declared():
    """With count_elementwise = 1: the embedding scale (one FLOP per element),
    Gemma 2's soft-capping of scores and logits (3 FLOPs per element), Gemma 3's
    query/key norms and no soft-capping."""
    b, s = 2, 5
    gemma2 = Model.load("gemma-2-2b").with_conventions(count_elementwise=1, windowed=0)
    v = gemma2.values
    parts = gemma2.evaluate_breakdown("forward_flops", depth=None, batch=b, seq=s)
    assert parts["embed/scale"] == b * s * v["d_model"]
    assert parts["logit_softcap"] == 3 * b * s * v["vocab"]
    assert parts["layers/local/attn/core/softcap"] == v["n_local_layers"] * 3 * b * v["n_heads"] * s * s
    assert parts["layers/global/attn/core/softcap"] == (v["n_layers"] - v["n_local_layers"]) * 3 * b * v["n_heads"] * s * s
    assert parts["layers/global/attn_post_norm"] == parts["layers/global/mlp_post_norm"] == (v["n_layers"] - v["n_local_layers"]) * 4 * b * s * v["d_model"]
    gemma3 = Model.load("gemma-3-1b").with_conventions(count_elementwise=1)
    parts = gemma3.evaluate_breakdown("forward_flops", depth=None, batch=b, seq=s)
    assert not any("softcap" in p for p in parts)
    v = gemma3.values
    assert parts["layers/local/attn/q_norm"] == v["n_local_layers"] * 4 * b * s * v["n_heads"] * v["d_head"]
    gemma = Model.load("gemma-7b").with_conventions(count_elementwise=1)
    parts = gemma.evaluate_breakdown("forward_flops", depth=None, batch=b, seq=s)
    assert parts["embed/scale"] == b * s * gemma.values["d_model"]
    assert not any("softcap" in p or "post_norm" in p for p in parts)


# -- the sliding-window convention -----------------------------------------------


@st.composite
def local_global_configs(draw):
    n_kv_heads = draw(st.integers(1, 8))
    n_heads = n_kv_heads * draw(st.integers(1, 4))
    model_type = draw(st.sampled_from(["gemma2", "gemma3_text"]))
    config = {
        "model_type": model_type,
        "hidden_size": n_heads * draw(st.integers(1, 256)),
        "num_hidden_layers": draw(st.integers(1, 64)),
        "vocab_size": draw(st.integers(1, 300_000)),
        "intermediate_size": draw(st.integers(1, 40_000)),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads,
        "head_dim": 2 * draw(st.integers(1, 128)),  # rotary positions turn pairs of dimensions: an odd head is refused
        "tie_word_embeddings": draw(st.booleans()),
        "attention_bias": draw(st.booleans()),
        "sliding_window": draw(st.integers(1, 8192)),
    }
    if model_type == "gemma3_text":
        config["sliding_window_pattern"] = draw(st.integers(1, 8))
    return config


ELEMENTWISE = st.sampled_from([0, 1])
QUANTITIES = ("forward_flops", "backward_flops", "bytes_moved", "saved_activations")


@settings(max_examples=60, deadline=None)
@given(config=local_global_configs(), batch=st.integers(1, 16), extra=st.integers(0, 4096), elementwise=ELEMENTWISE)
def test_a_window_covering_the_sequence_changes_nothing(config, batch, extra, elementwise):
    """window >= seq: windowed = 1 counts what windowed = 0 counts, and what the
    same model counts with every layer global."""
    seq = max(1, config["sliding_window"] - extra)
    windowed = Model.from_config(config).with_conventions(windowed=1, count_elementwise=elementwise)
    full = Model.from_config(config).with_conventions(windowed=0, count_elementwise=elementwise)
    assert windowed.values["n_local_layers"] > 0 or config.get("sliding_window_pattern") == 1
    for quantity in QUANTITIES:
        assert windowed.evaluate(quantity, batch=batch, seq=seq) == full.evaluate(quantity, batch=batch, seq=seq)
    all_global = [windowed.with_arguments(n_local_layers=0)]
    if config["model_type"] == "gemma3_text":
        all_global.append(Model.from_config({**config, "sliding_window_pattern": 1}).with_conventions(count_elementwise=elementwise))
    # Gemma 3 computes cos and sin once per kind of layer present: with local and global layers it keeps
    # (and writes) a second pair, which an all-global model does not
    mixed = config["model_type"] == "gemma3_text" and 0 < windowed.values["n_local_layers"] < windowed.values["n_layers"]
    for other in all_global:
        assert other.values["n_local_layers"] == 0
        for quantity in QUANTITIES:
            if mixed and quantity in ("bytes_moved", "saved_activations"):
                continue
            assert windowed.evaluate(quantity, batch=batch, seq=seq) == other.evaluate(quantity, batch=batch, seq=seq)


# the parts of a local layer whose size follows the key length
WINDOWED_PARTS = {"scores", "context", "scale_mask", "softmax", "softcap"}


@settings(max_examples=60, deadline=None)
@given(config=local_global_configs(), batch=st.integers(1, 16), extra=st.integers(1, 8192), elementwise=ELEMENTWISE)
def test_a_window_shorter_than_the_sequence_scales_the_local_attention_products(config, batch, extra, elementwise):
    """seq > window, windowed = 1: each local layer's score and context products
    (and its score-map element-wise work) are exactly window/seq of what they
    are with windowed = 0; nothing else changes."""
    seq = config["sliding_window"] + extra
    window = config["sliding_window"]
    on = Model.from_config(config).with_conventions(windowed=1, count_elementwise=elementwise)
    off = Model.from_config(config).with_conventions(windowed=0, count_elementwise=elementwise)
    for quantity in ("forward_flops", "backward_flops"):
        a = on.evaluate_breakdown(quantity, depth=None, batch=batch, seq=seq)
        b = off.evaluate_breakdown(quantity, depth=None, batch=batch, seq=seq)
        assert set(a) == set(b)
        for path in a:
            scaled = path.startswith("layers/local/attn/") and path.rsplit("/", 1)[1] in WINDOWED_PARTS
            assert a[path] == (Fraction(window, seq) * b[path] if scaled else b[path]), path
        products = [p for p in a if p.startswith("layers/local/attn/") and p.rsplit("/", 1)[1] in ("scores", "context")]
        # a model without local layers has no local parts at all
        assert len(products) == (2 if on.values["n_local_layers"] > 0 else 0)
        assert all(b[p] > 0 for p in products)
        saved = sum(b[p] - a[p] for p in a)
        assert off.evaluate(quantity, batch=batch, seq=seq) - on.evaluate(quantity, batch=batch, seq=seq) == saved


def test_window_shrinks_only_local_layers_of_the_presets():
    """Gemma 2 2B at seq 8192, window 4096: its 13 local layers' attention products are halved."""
    model = Model.load("gemma-2-2b")
    v = model.values
    on = model.evaluate("forward_flops", batch=1, seq=8192)
    off = model.with_conventions(windowed=0).evaluate("forward_flops", batch=1, seq=8192)
    per_layer_products = 2 * 2 * v["n_heads"] * 8192 * 8192 * v["d_head"]  # scores and context, 2 FLOPs per MAC
    assert off - on == v["n_local_layers"] * per_layer_products // 2


def test_compiled_matches_exact_across_the_window():
    for name in ("gemma-2-9b", "gemma-3-1b"):
        model = Model.load(name)
        f = model.compile("forward_flops", "batch", "seq")
        seqs = np.array([1, 256, 512, 513, 4096, 4097, 8192])
        got = f(np.ones_like(seqs), seqs)
        for s, value in zip(seqs, got):
            exact = model.evaluate("forward_flops", batch=1, seq=int(s))
            assert value == pytest.approx(exact, rel=1e-12)


def test_generic_local_global_lm():
    """The reusable local/global stack: no local layers is causal_lm; all local
    layers with a window covering the sequence is causal_lm too."""
    sizes = dict(d_model=32, n_layers=4, vocab=50, d_ff=64, n_heads=4, n_kv_heads=2, d_head=8)
    plain = Model.from_component("causal_lm", **sizes)
    for n_local, window, seq in ((0, 3, 9), (4, 9, 9), (2, 16, 5)):
        mixed = Model.from_component("local_global_lm", n_local_layers=n_local, window=window, **sizes)
        for quantity in ("params", *QUANTITIES):
            assert mixed.evaluate(quantity, batch=2, seq=seq) == plain.evaluate(quantity, batch=2, seq=seq)
    short = Model.from_component("local_global_lm", n_local_layers=4, window=3, **sizes)
    assert short.evaluate("forward_flops", batch=2, seq=9) == plain.evaluate("forward_flops", batch=2, seq=9) - 4 * 2 * 2 * (2 * 4 * 9 * (9 - 3) * 8)
