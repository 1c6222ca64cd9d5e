"""Oracle: families of the dense models people deploy (OLMo 2 and 3, SmolLM3, Seed-OSS, ...) against
transformers' own models.

Parameters: the published configs built on the meta device, numel() of the
whole class, and tiny instances built on the CPU. FLOPs: the tiny instances
(float32, eager attention, eager experts) counted by FlopCounterMode, whose
sliding-window layers multiply the full seq x seq score map and mask it, so
symform runs with windowed = 0. Cache: the bytes of every tensor transformers'
cache holds after a forward, at a sequence shorter and one longer than any
window. Saved activations: the bytes autograd keeps for backward in a training
forward, in float32 and bfloat16, against symform's eager accounting on PyTorch's
CPU kernels.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, check_cache_bytes, check_forward_flops, check_train_step_flops, meta_params, preset_dict  # noqa: E402
from family_checks import check_saved_activations, check_tiny_params, eager  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

SLIDING, FULL = "sliding_attention", "full_attention"
BASE = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

# (family, preset): the published configs whose parameters must match to the digit
PRESETS = [
    ("olmo2", "olmo-2-13b"), ("olmo3", "olmo-3-7b"), ("smollm3", "smollm3-3b"), ("seed_oss", "seed-oss-36b"), ("exaone4", "exaone-4.0-32b"),
    ("starcoder2", "starcoder2-15b"), ("ernie4_5", "ernie-4.5-0.3b"), ("apertus", "apertus-8b"),
]  # fmt: skip

# tiny instances, each keeping its family's pattern of layer types; windows below and above the test sequences
TINY = {
    "olmo2, GQA, untied": dict(BASE, model_type="olmo2"),
    "olmo2, MHA, tied, attention bias, head_dim given": dict(BASE, model_type="olmo2", num_key_value_heads=4, head_dim=12, tie_word_embeddings=True, attention_bias=True),
    "olmo3, three sliding to one full (filled in), window 4": dict(BASE, model_type="olmo3", num_hidden_layers=4, sliding_window=4),
    "olmo3, full/sliding/full listed, window 6, tied": dict(
        BASE, model_type="olmo3", num_hidden_layers=3, sliding_window=6, layer_types=[FULL, SLIDING, FULL], tie_word_embeddings=True,
    ),
    "smollm3, NoPE every 4th layer, tied": dict(BASE, model_type="smollm3", num_hidden_layers=4, pad_token_id=0),
    "smollm3, sliding NoPE layers, untied, head_dim given, biases": dict(
        BASE, model_type="smollm3", num_hidden_layers=4, pad_token_id=0, use_sliding_window=True, sliding_window=4,
        tie_word_embeddings=False, head_dim=12, attention_bias=True, mlp_bias=True,
    ),
    "smollm3, no_rope_layers listed (two NoPE layers slide), no layer_types": dict(
        BASE, model_type="smollm3", num_hidden_layers=4, pad_token_id=0, use_sliding_window=True, sliding_window=4, no_rope_layers=[1, 0, 0, 1],
    ),
    "seed_oss, Q/K/V biases, dropout 0.1": dict(BASE, model_type="seed_oss", head_dim=16, pad_token_id=0, bos_token_id=None, eos_token_id=None),
    "seed_oss, output bias, no dropout": dict(
        BASE, model_type="seed_oss", head_dim=12, attention_out_bias=True, attention_dropout=0.0, residual_dropout=0.0,
        pad_token_id=0, bos_token_id=None, eos_token_id=None,
    ),
    "exaone4, three sliding to one full (from sliding_window_pattern), NoPE full layers": dict(
        BASE, model_type="exaone4", num_hidden_layers=4, sliding_window=4, head_dim=12,
    ),
    "exaone4, full layers only with a window (no rotary tables kept), tied": dict(
        BASE, model_type="exaone4", num_hidden_layers=2, sliding_window=4, layer_types=[FULL, FULL], tie_word_embeddings=True,
    ),
    "exaone4, no window: every layer full with RoPE": dict(BASE, model_type="exaone4", num_hidden_layers=2, sliding_window=None, layer_types=[FULL, FULL]),
    "starcoder2, window 4, every dropout 0.1, tied": dict(
        BASE, model_type="starcoder2", sliding_window=4, attention_dropout=0.1, residual_dropout=0.1, embedding_dropout=0.1,
        bos_token_id=None, eos_token_id=None,
    ),
    "starcoder2, no biases, untied, embedding dropout only": dict(
        BASE, model_type="starcoder2", use_bias=False, tie_word_embeddings=False, embedding_dropout=0.1, bos_token_id=None, eos_token_id=None,
    ),
    "ernie4_5, tied, head_dim 16": dict(BASE, model_type="ernie4_5", head_dim=16),
    "ernie4_5, biases, untied, MHA, head_dim 12": dict(BASE, model_type="ernie4_5", head_dim=12, use_bias=True, tie_word_embeddings=False, num_key_value_heads=4),
    "apertus, xIELU MLP, per-head Q/K norms, GQA": dict(BASE, model_type="apertus", head_dim=16, pad_token_id=0, bos_token_id=None, eos_token_id=None),
    "apertus, tied, attention bias, MHA": dict(
        BASE, model_type="apertus", head_dim=12, num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
        pad_token_id=0, bos_token_id=None, eos_token_id=None,
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(TINY))
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype):
    """Every tensor autograd keeps for backward in a training forward (dropout masks where the config drops out)."""
    check_saved_activations(TINY[case], dtype)
