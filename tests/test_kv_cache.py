"""The KV cache: symform's bytes against the tensors a transformers model really caches,
and multi-head latent attention's cache against the DeepSeek-V2 paper."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, cached_bytes, input_ids  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=64)

CONFIGS = {
    "llama, GQA": dict(BASE, model_type="llama", num_key_value_heads=2),
    "llama, MQA, head_dim 24": dict(BASE, model_type="llama", num_key_value_heads=1, head_dim=24),
    "qwen3, MHA": dict(BASE, model_type="qwen3", num_key_value_heads=4, head_dim=16),
    "mistral, sliding window 5": dict(BASE, model_type="mistral", num_key_value_heads=2, sliding_window=5),
    "mistral, no window": dict(BASE, model_type="mistral", num_key_value_heads=2, sliding_window=None),
    "gemma2, local and global layers": dict(BASE, model_type="gemma2", num_key_value_heads=2, head_dim=16, sliding_window=4),
    "qwen2, window 5 on layers 2 and 3": dict(BASE, model_type="qwen2", num_key_value_heads=2, use_sliding_window=True, sliding_window=5, max_window_layers=2),
    "qwen2, window off": dict(BASE, model_type="qwen2", num_key_value_heads=2, use_sliding_window=False, sliding_window=5, max_window_layers=2),
    "qwen3, window 4 on every layer": dict(BASE, model_type="qwen3", num_key_value_heads=2, head_dim=16, use_sliding_window=True, sliding_window=4, max_window_layers=0),
    "phi3, window 6": dict(BASE, model_type="phi3", num_key_value_heads=2, sliding_window=6, pad_token_id=0, eos_token_id=0),
    "gemma2, no soft-caps": dict(BASE, model_type="gemma2", num_key_value_heads=2, head_dim=16, sliding_window=4, attn_logit_softcapping=None, final_logit_softcapping=None),
    "gemma3_text, five local to one global": dict(
        BASE, model_type="gemma3_text", num_hidden_layers=7, num_key_value_heads=2, head_dim=16, sliding_window=3
    ),
}


@pytest.mark.parametrize("case", list(CONFIGS))
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 3), (3, 12)])
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, batch, seq):
    config = CONFIGS[case]
    expected = cached_bytes(build(config), batch, seq)
    model = Model.from_config(config).with_conventions(kv_bytes=4)  # the tiny models run in float32
    assert model.evaluate("kv_cache", batch=batch, seq=seq) == expected


def decoded_cache_bytes(model, batch: int, prompt: int, steps: int) -> int:
    """The cache after a prefill of `prompt` tokens and `steps` decode steps of one token each."""
    ids = input_ids(model.config.to_dict() | {"vocab_size": 101}, batch, prompt + steps)
    with torch.no_grad():
        cache = model(input_ids=ids[:, :prompt], use_cache=True).past_key_values
        for step in range(steps):
            cache = model(input_ids=ids[:, prompt + step : prompt + step + 1], cache=cache, use_cache=True).past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("case", list(CONFIGS))
def test_cache_bytes_after_decode_steps_equal_transformers(case):
    """Decoding one token with past tokens cached: the cache holds past + 1 tokens (a window's layers at most window - 1)."""
    config, batch, prompt, steps = CONFIGS[case], 2, 6, 4
    expected = decoded_cache_bytes(build(config), batch, prompt, steps)
    model = Model.from_config(config).with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=batch, seq=1, past=prompt + steps - 1) == expected


def test_latent_attention_caches_the_latent_and_the_rotary_key():
    """DeepSeek-V2 (arXiv:2405.04434) Table 1: MLA caches (d_c + d_h^R)·l elements per token,
    with d_c = 4·d_h = 512 and d_h^R = d_h/2 = 64 here, against 2·n_h·d_h·l for MHA."""
    model = symform.load("deepseek-v2").with_conventions(kv_bytes=1)
    layers = model.values["n_layers"]
    assert model.evaluate("kv_cache", batch=1, seq=1) == (512 + 64) * layers
    # the paper's "(9/2)·d_h·l", equal to GQA with 2.25 groups; never 2·n_heads·d_head per token
    assert model.evaluate("kv_cache", batch=1, seq=1) == 9 * 128 * layers // 2



MLA = {
    "deepseek_v3": dict(
        BASE, model_type="deepseek_v3", moe_intermediate_size=8, num_hidden_layers=3, num_key_value_heads=4,
        q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
    ),
    "deepseek_v2": dict(
        BASE, model_type="deepseek_v2", moe_intermediate_size=8, num_hidden_layers=3, q_lora_rank=None, kv_lora_rank=12,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=2, first_k_dense_replace=1, topk_method="greedy",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", MLA)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 3)])
def test_latent_attention_cache_equals_what_transformers_holds(case, batch, seq):
    """transformers' DeepSeek cache, like inference engines', holds the latent and the rotary key per token."""
    expected = cached_bytes(build(MLA[case], eager_experts=True), batch, seq)
    model = Model.from_config(MLA[case]).with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=batch, seq=seq) == expected == 4 * batch * seq * 3 * (12 + 4)
