"""Oracle: Gemma 4 layers that reuse an earlier layer's keys and values (num_kv_shared_layers > 0), against
transformers' Gemma4ForCausalLM and Gemma4ForConditionalGeneration.

transformers builds the last num_kv_shared_layers layers without k_proj, v_proj, k_norm and v_norm; they read
the keys and values of the last earlier layer of their kind, keep no cache of their own, and with
use_double_wide_mlp their MLP is twice intermediate_size wide. Parameters: numel() of tiny instances (and of the
image-text class on the meta device). FLOPs: FlopCounterMode on tiny float32 instances with eager attention;
the counter computes every sliding layer's whole score matrix and masks it, so symform runs with windowed = 0.
Cache: the bytes of every tensor transformers' cache holds after a forward, shorter and longer than the window.
Saved activations (accounting "eager"): the distinct storages autograd keeps in a training forward; a shared
layer's attention keeps the earlier layer's keys and values, new storage only where repeat_kv copies them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from oracle import (  # noqa: E402
    build, build_for_training, check_cache_bytes, check_forward_flops, check_saved_config_reads_the_same, check_train_step_flops,
    hf_config, input_ids, saved_for_backward,
)  # fmt: skip

from symform.engine.errors import SymformError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

SLIDING, FULL = "sliding_attention", "full_attention"
TEXT = dict(
    model_type="gemma4_text", vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, global_head_dim=16, sliding_window=4, max_position_embeddings=64,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=101,
)
TINY = {
    "3 of 6 layers shared (2 sliding, 1 full), double-wide MLP": dict(
        TEXT, num_hidden_layers=6, layer_types=[SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL], num_kv_shared_layers=3,
        use_double_wide_mlp=True,
    ),
    "3 of 6 layers shared, MLP as wide as the others": dict(
        TEXT, num_hidden_layers=6, layer_types=[SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL], num_kv_shared_layers=3,
    ),
    "default pattern of 7 layers, the last full one shared, keys as values": dict(
        TEXT, num_hidden_layers=7, num_kv_shared_layers=1, use_double_wide_mlp=True, attention_k_eq_v=True,
        num_global_key_value_heads=1,
    ),
    "2 of 4 layers shared, experts beside the MLP, untied head": dict(
        TEXT, num_hidden_layers=4, layer_types=[SLIDING, FULL, SLIDING, FULL], num_kv_shared_layers=2,
        use_double_wide_mlp=True, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=12,
        tie_word_embeddings=False,
    ),
}  # fmt: skip
SHAPES = [(2, 7), (1, 3), (1, 1)]  # seq above and below the tiny window, and one token


def eager(config: dict) -> Model:
    return Model.from_config(config, name="tiny").with_conventions(windowed=0)


def shared_layers(model) -> list[int]:
    return [i for i, layer in enumerate(model.model.layers) if layer.self_attn.is_kv_shared_layer]


@pytest.mark.parametrize("case", list(TINY))
def test_parameters_equal_numel(case):
    config = TINY[case]
    real = build(config, eager_experts=True)
    assert len(shared_layers(real)) == config["num_kv_shared_layers"]
    assert not any(hasattr(real.model.layers[i].self_attn, "k_proj") for i in shared_layers(real))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in real.parameters())


@pytest.mark.parametrize("double_wide", [False, True])
def test_image_text_class_parameters_equal_numel(double_wide):
    text = {k: v for k, v in TINY["3 of 6 layers shared, MLP as wide as the others"].items() if k != "model_type"}
    config = dict(
        model_type="gemma4", text_config=dict(text, use_double_wide_mlp=double_wide),
        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=8, patch_size=4, pooling_kernel_size=2, position_embedding_size=16),
    )  # fmt: skip
    with torch.device("meta"):
        real = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert type(real).__name__ == "Gemma4ForConditionalGeneration"
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in real.parameters())


def test_double_wide_adds_exactly_the_shared_layers_extra_mlp_width():
    """Hand arithmetic: each of the 3 shared layers' gate, up and down projections gains 32·48 weights."""
    wide, narrow = (TINY[case] for case in list(TINY)[:2])
    assert Model.from_config(wide).evaluate("params") - Model.from_config(narrow).evaluate("params") == 3 * 3 * 32 * 48


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case]
    check_forward_flops(eager(config), build(config, eager_experts=True), config, SHAPES)


def test_forward_and_backward_flops_equal_the_counter():
    config = TINY["3 of 6 layers shared (2 sliding, 1 full), double-wide MLP"]
    check_train_step_flops(eager(config), build(config, eager_experts=True), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", (3, 9))
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, build(config, eager_experts=True), seq)


def test_shared_layers_keep_no_cache():
    """Hand arithmetic: sharing the last 3 of 6 layers drops 2 sliding caches of min(seq, window - 1) = 3 tokens
    and one full cache of seq = 9 tokens, each 2 (keys, values) x heads x head size wide, in fp32, batch 2."""
    shared = TINY["3 of 6 layers shared, MLP as wide as the others"]
    unshared = dict(shared, num_kv_shared_layers=0)
    cache = {name: Model.from_config(c).with_conventions(kv_bytes=4).evaluate("kv_cache", batch=2, seq=9) for name, c in (("shared", shared), ("unshared", unshared))}
    assert cache["unshared"] - cache["shared"] == 4 * 2 * (2 * 3 * 2 * 2 * 8 + 9 * 2 * 2 * 16)


def test_the_config_transformers_saves_reads_the_same(tmp_path):
    config = TINY["3 of 6 layers shared (2 sliding, 1 full), double-wide MLP"]
    check_saved_config_reads_the_same(config, tmp_path, ("params", "forward_flops", "saved_activations", "kv_cache"))


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"num_kv_shared_layers": 6}, ("sliding", "share fewer layers")),
        ({"num_kv_shared_layers": 5}, ("full-attention", "share fewer layers")),
    ],
)
def test_shared_layers_without_an_earlier_layer_of_their_kind_are_refused(changes, words):
    """transformers raises for these configs: a kind of layer whose every layer is shared has no keys to read."""
    config = dict(TINY["3 of 6 layers shared, MLP as wide as the others"], **changes)
    one_line_error(SymformError, lambda: Model.from_config(config).evaluate("params"), *words)


SAVED = {
    **TINY,
    "3 of 6 layers shared, as many key/value heads as query heads (repeat_kv copies nothing)": dict(
        TINY["3 of 6 layers shared (2 sliding, 1 full), double-wide MLP"], num_key_value_heads=4,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SAVED))
@pytest.mark.parametrize("dtype, act_bytes", [(torch.bfloat16, 2), (torch.float32, 4)], ids=["bf16", "fp32"])
@pytest.mark.parametrize("batch, seq", [(1, 3), (2, 8)])  # one sequence, where one key/value head is a view; a window of 4 shorter
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, act_bytes, batch, seq):
    config = SAVED[case]
    kept = saved_for_backward(build_for_training(config, dtype, experts_implementation="eager"), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@settings(max_examples=25, deadline=None)
@given(
    kinds=st.lists(st.sampled_from([SLIDING, FULL]), min_size=2, max_size=12),
    listed=st.booleans(),
    data=st.data(),
)
def test_shared_layer_counts_match_transformers_sharing_modes(kinds, listed, data):
    """The sliding and full layers symform reads as shared are those transformers builds with kv_sharing_mode
    "reuse", with layer_types given or left to transformers' default pattern; configs transformers refuses are
    refused."""
    kinds = [*kinds[:-1], FULL]  # transformers makes the last layer full
    shared = data.draw(st.integers(0, len(kinds) - 1))
    config = dict(TEXT, num_hidden_layers=len(kinds), num_kv_shared_layers=shared, **({"layer_types": kinds} if listed else {}))
    hf = hf_config(config)
    try:
        modes = hf.kv_sharing_modes
    except ValueError:  # a kind of layer with no earlier layer of its kind to read
        one_line_error(SymformError, lambda: Model.from_config(config).evaluate("params"), "share fewer layers")
        return
    reused = [kind for kind, mode in zip(hf.layer_types, modes) if mode == "reuse"]
    arguments = Model.from_config(config).spec.arguments
    assert (arguments["n_shared_local"], arguments["n_shared_global"]) == (reused.count(SLIDING), reused.count(FULL))
