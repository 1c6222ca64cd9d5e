"""Oracle: the families of 2025-26 (gpt-oss, Gemma 4 text) against transformers' own models.

Parameters: the published configs built on the meta device, numel() of the
whole class. FLOPs: tiny instances (float32, eager attention, eager experts,
the published pattern of layer types kept) counted by FlopCounterMode, whose
sliding-window layers multiply the full seq x seq score map and mask it, so
symform runs with windowed = 0. The counter counts only matrix products
(mm, addmm, bmm); symform's element-wise work is off by default
(count_elementwise = 0). Cache: the bytes of every tensor transformers' cache
holds after a forward, at a sequence shorter and one longer than any window.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, check_cache_bytes, check_forward_flops, check_train_step_flops, meta_params, preset_dict  # noqa: E402
from family_checks import check_tiny_params, eager  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

SLIDING, FULL = "sliding_attention", "full_attention"
BASE = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

# (family, preset): the published configs whose parameters must match to the digit
PRESETS = [("gpt_oss", "gpt-oss-20b"), ("gpt_oss", "gpt-oss-120b")]

# tiny instances, each keeping its family's pattern of layer types; windows below and above the test sequences
TINY = {
    "gpt_oss, alternating sliding/full, window 4": dict(
        BASE, model_type="gpt_oss", num_hidden_layers=4, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, layer_types=[SLIDING, FULL, SLIDING, FULL],
    ),
    "gpt_oss, layer_types absent, MQA, no attention bias": dict(
        BASE, model_type="gpt_oss", num_hidden_layers=3, head_dim=8, num_key_value_heads=1, num_local_experts=3,
        num_experts_per_tok=3, sliding_window=6, attention_bias=False,
    ),
    "gemma4_text, 2 sliding : 1 full (forced last), per-layer embeddings, full layers of head 16": dict(
        BASE, model_type="gemma4_text", num_hidden_layers=3, head_dim=8, global_head_dim=16, sliding_window=4,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=120,
    ),
    "gemma4_text, keys as values in full layers with 1 global head": dict(
        BASE, model_type="gemma4_text", num_hidden_layers=3, head_dim=8, global_head_dim=16, sliding_window=6,
        attention_k_eq_v=True, num_global_key_value_heads=1, hidden_size_per_layer_input=8, vocab_size_per_layer_input=120,
        layer_types=[SLIDING, FULL, FULL],
    ),
    "gemma4_text, experts beside every MLP, untied soft-capped head, no per-layer embeddings": dict(
        BASE, model_type="gemma4_text", num_hidden_layers=2, head_dim=8, global_head_dim=12, sliding_window=4,
        hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=12,
        tie_word_embeddings=False, final_logit_softcapping=30.0, layer_types=[SLIDING, FULL],
    ),
}  # fmt: skip

SHAPES = [(2, 7), (1, 3), (1, 1)]  # seq above and below every tiny window, and one token
CACHE_SEQS = (3, 9)  # shorter and longer than every tiny window


@pytest.mark.parametrize("family, preset", PRESETS)
def test_published_parameters_equal_numel(family, preset):
    config = preset_dict(preset)
    assert Model.from_config(config).spec.family == family
    assert Model.from_config(config).evaluate("params") == meta_params(config)


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    check_tiny_params(TINY[case])


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case]
    check_forward_flops(eager(config), build(config, eager_experts=True), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter(case):
    """The counter's backward is two matrix products per forward one, as symform's bwd_mult = 2."""
    config = TINY[case]
    check_train_step_flops(eager(config), build(config, eager_experts=True), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", CACHE_SEQS)
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, build(config, eager_experts=True), seq)
