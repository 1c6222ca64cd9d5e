"""Oracle: more of transformers' dense decoder-only families (Cohere, Granite, Helium, Arcee, Ministral, ...)
against transformers' own models.

Parameters: tiny instances built on the CPU (numel() of the whole class) and, for the presets, the published
configs on the meta device. FLOPs: the tiny instances (float32, eager attention) counted by FlopCounterMode,
whose sliding-window layers multiply the full seq x seq score map and mask it, so symform runs with
windowed = 0. Cache: the bytes of every tensor transformers' cache holds after a forward, at a sequence shorter
and one longer than any window. Saved activations: the bytes autograd keeps for backward in a training forward,
in float32 and bfloat16, against symform's eager accounting on PyTorch's CPU kernels.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, cached_bytes, check_cache_bytes, check_forward_flops, check_train_step_flops, meta_params, preset_dict  # noqa: E402
from family_checks import check_saved_activations, check_tiny_params, eager  # noqa: E402

from symform.engine.errors import ConfigError, EvaluationError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

SLIDING, FULL = "sliding_attention", "full_attention"
BASE = dict(vocab_size=101, num_hidden_layers=2, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
NO_TOKENS = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)  # the config classes' ids lie outside 101 tokens

# (family, preset): the published configs whose parameters must match to the digit
PRESETS = [("phi", "phi-2")]

# tiny instances of each family, with the settings that change what is counted
TINY = {
    "granite, GQA, μP multipliers": dict(
        BASE, model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625, logits_scaling=8.0,
    ),
    "granite, MHA (kv heads absent), tied, biases": dict(
        BASE, model_type="granite", num_key_value_heads=None, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
    ),
    "helium, GQA, interleaved rotary per layer": dict(BASE, model_type="helium", head_dim=8, **NO_TOKENS),
    "helium, MHA, tied, Q/K/V biases": dict(BASE, model_type="helium", head_dim=8, num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True, **NO_TOKENS),
    "arcee, ReLU² MLP, GQA": dict(BASE, model_type="arcee", **NO_TOKENS),
    "arcee, head_dim given, tied, biases": dict(BASE, model_type="arcee", head_dim=12, tie_word_embeddings=True, attention_bias=True, mlp_bias=True, **NO_TOKENS),
    "ministral, sliding and full layers listed, window 4": dict(
        BASE, model_type="ministral", num_hidden_layers=3, head_dim=8, sliding_window=4, layer_types=[SLIDING, FULL, SLIDING],
    ),
    "ministral, full layers listed beside a window, tied": dict(
        BASE, model_type="ministral", head_dim=8, sliding_window=4, layer_types=[FULL, FULL], tie_word_embeddings=True,
    ),  # without a sliding_window MinistralModel cannot build its masks
    "ministral3, position-scaled queries, head_dim 12": dict(BASE, model_type="ministral3", head_dim=12, **NO_TOKENS),
    "ministral3, every layer over window 4, tied": dict(BASE, model_type="ministral3", head_dim=8, sliding_window=4, tie_word_embeddings=True, **NO_TOKENS),
    "cohere, parallel blocks, tied": dict(BASE, model_type="cohere", **NO_TOKENS),
    "cohere, per-head Q/K LayerNorms, untied, attention bias": dict(
        BASE, model_type="cohere", use_qk_norm=True, tie_word_embeddings=False, attention_bias=True, **NO_TOKENS,
    ),
    "cohere2, three sliding to one full (NoPE), window 4": dict(BASE, model_type="cohere2", num_hidden_layers=4, sliding_window=4, **NO_TOKENS),
    "cohere2, full layers only (no rotary tables kept), untied": dict(
        BASE, model_type="cohere2", sliding_window=4, layer_types=[FULL, FULL], tie_word_embeddings=False, **NO_TOKENS,
    ),
    "glm, GQA, Q/K/V biases, half the head rotated": dict(BASE, model_type="glm", head_dim=8, partial_rotary_factor=0.5, **NO_TOKENS),
    "glm, MHA, whole head rotated, no biases, tied": dict(
        BASE, model_type="glm", head_dim=12, num_key_value_heads=4, partial_rotary_factor=1.0, attention_bias=False, tie_word_embeddings=True, **NO_TOKENS,
    ),
    "glm4, sandwich norms, GQA": dict(BASE, model_type="glm4", head_dim=8, partial_rotary_factor=0.5, **NO_TOKENS),
    "olmo, parameter-free LayerNorms, MHA, clip_qkv": dict(BASE, model_type="olmo", num_key_value_heads=None, clip_qkv=8.0, **NO_TOKENS),
    "olmo, GQA, attention bias, tied": dict(BASE, model_type="olmo", attention_bias=True, tie_word_embeddings=True, **NO_TOKENS),
    "stablelm, sequential, quarter of each head rotated": dict(BASE, model_type="stablelm", num_key_value_heads=4, **NO_TOKENS),
    "stablelm, parallel residual, Q/K/V biases, GQA, tied": dict(
        BASE, model_type="stablelm", use_parallel_residual=True, use_qkv_bias=True, partial_rotary_factor=0.5, tie_word_embeddings=True, **NO_TOKENS,
    ),
    "phi, parallel, gelu_new, biased head": dict(BASE, model_type="phi", num_key_value_heads=None, **NO_TOKENS),
    "phi, Q/K LayerNorms, GQA, tied head with its bias, every dropout 0.1": dict(
        BASE, model_type="phi", qk_layernorm=True, tie_word_embeddings=True, resid_pdrop=0.1, embd_pdrop=0.1, attention_dropout=0.1,
        partial_rotary_factor=0.25, **NO_TOKENS,
    ),
    "gpt_neox, parallel residual with two norms, quarter rotary": dict(BASE, model_type="gpt_neox", **NO_TOKENS),
    "gpt_neox, sequential, no attention bias, tied, dropout 0.1": dict(
        BASE, model_type="gpt_neox", use_parallel_residual=False, attention_bias=False, tie_word_embeddings=True, hidden_dropout=0.1,
        attention_dropout=0.1, rotary_pct=0.5, **NO_TOKENS,
    ),
    "gptj, parallel, rotary on 4 of 8, gelu_new": dict(
        model_type="gptj", vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4, **NO_TOKENS,
    ),
    "gptj, n_inner given, tied, every dropout 0.1, relu": dict(
        model_type="gptj", vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=8, n_inner=40, tie_word_embeddings=True,
        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, activation_function="relu", **NO_TOKENS,
    ),
    "codegen, fused qkv_proj in four groups": dict(
        model_type="codegen", vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4, **NO_TOKENS,
    ),
    "persimmon, per-head Q/K LayerNorms on views of the fused projection": dict(BASE, model_type="persimmon", num_key_value_heads=4, **NO_TOKENS),
    "persimmon, no Q/K norms, whole head rotated, tied": dict(
        BASE, model_type="persimmon", num_key_value_heads=4, qk_layernorm=False, partial_rotary_factor=1.0, tie_word_embeddings=True, **NO_TOKENS,
    ),
    "falcon, multi-query attention parallel to the MLP behind one norm, tied": dict(BASE, model_type="falcon", ffn_hidden_size=48, **NO_TOKENS),
    "falcon, sequential multi-head blocks with biases": dict(
        BASE, model_type="falcon", ffn_hidden_size=48, multi_query=False, parallel_attn=False, num_kv_heads=4, bias=True, **NO_TOKENS,
    ),
    "falcon, new decoder architecture, two key/value heads broadcast, two norms": dict(
        BASE, model_type="falcon", ffn_hidden_size=48, new_decoder_architecture=True, num_kv_heads=2, **NO_TOKENS,
    ),
    "falcon, new decoder architecture behind one norm, untied": dict(
        BASE, model_type="falcon", ffn_hidden_size=48, new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1,
        tie_word_embeddings=False, **NO_TOKENS,
    ),
    "opt, learned positions, ReLU MLP, dropout 0.1, tied": dict(BASE, model_type="opt", ffn_dim=48, **NO_TOKENS),
    "opt, narrower token embedding projected in and out, untied, no biases, probability dropout": dict(
        BASE, model_type="opt", ffn_dim=48, word_embed_proj_dim=16, tie_word_embeddings=False, enable_bias=False, dropout=0.0,
        attention_dropout=0.1, **NO_TOKENS,
    ),
    "bloom, ALiBi, normed embeddings, tied": dict(model_type="bloom", vocab_size=101, hidden_size=32, n_layer=2, n_head=4, **NO_TOKENS),
    "bloom, dropout 0.1, untied, residual from the norms": dict(
        model_type="bloom", vocab_size=101, hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.1, attention_dropout=0.1,
        tie_word_embeddings=False, apply_residual_connection_post_layernorm=True, **NO_TOKENS,
    ),
    "gpt_bigcode, multi-query, dropout 0.1, tied": dict(model_type="gpt_bigcode", vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64, **NO_TOKENS),
    "gpt_bigcode, multi-head, gelu_new, n_inner given, untied": dict(
        model_type="gpt_bigcode", vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=False, tie_word_embeddings=False,
        n_inner=40, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", **NO_TOKENS,
    ),
    "vaultgemma, sliding and full layers, soft-capped scores and logits, window 4": dict(
        BASE, model_type="vaultgemma", num_hidden_layers=3, head_dim=8, sliding_window=4, query_pre_attn_scalar=8, **NO_TOKENS,
    ),
    "jais2, LayerNorms, ReLU² MLP, biases": dict(BASE, model_type="jais2", **NO_TOKENS),
    "jais2, no biases, tied": dict(BASE, model_type="jais2", attention_bias=False, mlp_bias=False, tie_word_embeddings=True, **NO_TOKENS),
    "nanochat, parameter-free norms, soft-capped logits": dict(BASE, model_type="nanochat", **NO_TOKENS),
    "nanochat, no soft-capping, attention bias, tied": dict(
        BASE, model_type="nanochat", final_logit_softcapping=None, attention_bias=True, tie_word_embeddings=True, **NO_TOKENS,
    ),
    "bitnet, sub-norms before o_proj and down_proj, ReLU² gate": dict(BASE, model_type="bitnet", **NO_TOKENS),
    "bitnet, attention bias, MHA, tied": dict(BASE, model_type="bitnet", attention_bias=True, num_key_value_heads=4, tie_word_embeddings=True, **NO_TOKENS),
    "gpt_neo, global and local layers (every token cached), fp32 scores, buffer masks": dict(
        model_type="gpt_neo", vocab_size=101, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64, intermediate_size=48,
        attention_types=[[["global", "local"], 1]], window_size=4, **NO_TOKENS,
    ),
    "gpt_neo, every dropout 0.1, relu, untied": dict(
        model_type="gpt_neo", vocab_size=101, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64, intermediate_size=48,
        attention_types=[[["local"], 2]], window_size=4, resid_dropout=0.1, embed_dropout=0.1, attention_dropout=0.1,
        activation_function="relu", tie_word_embeddings=False, **NO_TOKENS,
    ),
    "nemotron, LayerNorm1P, ReLU² MLP, half the head rotated": dict(BASE, model_type="nemotron", **NO_TOKENS),
    "nemotron, head_dim 12, biases, tied": dict(
        BASE, model_type="nemotron", head_dim=12, attention_bias=True, mlp_bias=True, tie_word_embeddings=True, **NO_TOKENS,
    ),
    "biogpt, learned positions broadcast over the batch, scaled embeddings, dropout 0.1, tied": dict(BASE, model_type="biogpt", **NO_TOKENS),
    "biogpt, no dropout, unscaled embeddings, untied": dict(
        BASE, model_type="biogpt", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, scale_embedding=False, tie_word_embeddings=False,
        **NO_TOKENS,
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
    check_forward_flops(eager(config), build(config), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter(case):
    """The counter's backward is two matrix products per forward one, as symform's bwd_mult = 2."""
    config = TINY[case]
    check_train_step_flops(eager(config), build(config), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", CACHE_SEQS)
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, build(config), seq)


def test_falcon_caches_each_key_value_head_once_by_default():
    """transformers' Falcon (new decoder architecture) caches each key/value head broadcast to its 4 query heads' group
    of 2; a serving engine caches it once. The default counts the engine's cache: transformers' bytes times
    n_kv_heads / n_heads; the eager accounting counts transformers'."""
    config = TINY["falcon, new decoder architecture, two key/value heads broadcast, two norms"]
    expected = cached_bytes(build(config), 2, 7)
    model = Model.from_config(config).with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=2, seq=7) * 2 == expected
    assert model.with_accounting("eager").with_conventions(kv_bytes=4).evaluate("kv_cache", batch=2, seq=7) == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(TINY))
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype):
    """Every tensor autograd keeps for backward in a training forward, for two sequences and for one (whose
    reshapes PyTorch may turn into views of larger tensors)."""
    check_saved_activations(TINY[case], dtype)
    check_saved_activations(TINY[case], dtype, batch=1)


def test_kv_broadcast_is_a_switch():
    """kv_broadcast 2 would count each key/value head 2·n_heads − n_kv_heads times, a cache no implementation keeps."""
    config = TINY["falcon, new decoder architecture, two key/value heads broadcast, two norms"]
    with pytest.raises(EvaluationError, match="kv_broadcast is a switch: give 0 or 1, got 2"):
        Model.from_config(config).with_conventions(kv_broadcast=2).evaluate("kv_cache", batch=2, seq=7)


def test_falcon_s_flash_kernel_keeps_each_key_value_head_once_by_default():
    """A FlashAttention kernel keeps its queries, keys and values: with kv_broadcast = 0 the keys and values of
    n_kv_heads heads, with the eager accounting's broadcast those of n_heads. Falcon-180B (80 layers, 232 query
    heads, 8 key/value heads of 64) at batch 2 (no one-sequence views), seq 2048 in bf16: 80·2·2·(232 − 8)·2048·(64 + 64)
    bytes fewer."""
    from symform.analysis.memory.memory import saved_activations

    def kept(model):
        expression = saved_activations(model, flash=True)[0]
        sizes = dict(model.values) | {"batch": 2, "seq": 2048}
        return expression.subs({s: sizes[s.name] for s in expression.free_symbols})

    model = Model.load("falcon-180b")
    assert kept(model.with_accounting("eager")) - kept(model) == 80 * 2 * 2 * (232 - 8) * 2048 * (64 + 64)
