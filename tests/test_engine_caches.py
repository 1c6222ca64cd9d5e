"""What serving engines keep between steps, by default, against what transformers' caches hold (the eager
accounting): each expected number is worked out by hand from the published config and the engines' own shapes.

- A causal convolution's state: vLLM (MambaStateShapeCalculator: conv_kernel - 1 + num_spec), SGLang
  (Mamba2StateShape: conv_kernel - 1) and TensorRT-LLM (MambaCacheManager: [conv_dim, d_conv - 1]) keep the last
  conv_kernel - 1 inputs, all the next step needs beside its new one; transformers' caches keep conv_kernel.
- DeepSeek-V3.2's indexer keys: vLLM's DeepseekV32IndexerCache holds head_dim + head_dim // 128 · 4 bytes a token
  (FP8 values and an fp32 scale per 128), as SGLang and DeepSeek's reference inference code do, whatever the KV
  cache's type; transformers holds them in the model's dtype.
- Multi-head latent attention's decode: FlashMLA (vLLM, SGLang) reads each cached latent once for every head, so
  the bytes a decode step reads from the cache are the cache's own.
"""

from __future__ import annotations

import sympy

import symform
from symform.analysis.time.roofline import phase_work


def test_nemotron_h_keeps_three_conv_inputs_and_fp32_states():
    """nemotron-h-8b: 24 Mamba-2 layers (the M's of its pattern), conv over 128·64 + 2·8·128 = 10,240 channels,
    128 heads of [64, 128] states in fp32 (vLLM's NemotronH default)."""
    model = symform.load("nemotron-h-8b")
    per_layer_engine = 3 * 10240 * 2 + 128 * 64 * 128 * 4
    per_layer_transformers = 4 * 10240 * 2 + 128 * 64 * 128 * 4
    assert model.evaluate("recurrent_state", batch=1, seq=1) == 24 * per_layer_engine == 102_137_856
    assert model.with_accounting("eager").evaluate("recurrent_state", batch=1, seq=1) == 24 * per_layer_transformers


def test_jamba_and_lfm2_keep_kernel_less_one_inputs():
    """jamba-1.5-mini: 28 Mamba layers (one attention layer in 8), d_inner = 2·4096, kernel 4, 16 fp32 state
    values per channel. lfm2-1.2b: 10 short-convolution layers of 2,048 channels, L_cache 3: two inputs each."""
    jamba = symform.load("jamba-1.5-mini")
    assert jamba.evaluate("recurrent_state", batch=1, seq=1) == 28 * (3 * 8192 * 2 + 8192 * 16 * 4)
    assert jamba.with_accounting("eager").evaluate("recurrent_state", batch=1, seq=1) == 28 * (4 * 8192 * 2 + 8192 * 16 * 4)
    lfm2 = symform.load("lfm2-1.2b")
    assert lfm2.evaluate("recurrent_state", batch=3, seq=1) == 3 * 10 * 2 * 2048 * 2
    assert lfm2.with_accounting("eager").evaluate("recurrent_state", batch=3, seq=1) == 3 * 10 * 3 * 2048 * 2


def test_deepseek_v3_2_indexer_keys_are_fp8_with_scales():
    """61 layers, each caching MLA's 512 + 64 latent and the indexer's 128-wide key: 128 FP8 bytes and one 4-byte
    scale, in a bf16 cache and in an FP8 one alike; at 2 bytes a value under the eager accounting."""
    model = symform.load("deepseek-v3.2")
    tokens = 4096
    assert model.evaluate("kv_cache", batch=1, seq=tokens) == 61 * tokens * ((512 + 64) * 2 + 128 + 4)
    assert model.with_conventions(kv_bytes=1).evaluate("kv_cache", batch=1, seq=tokens) == 61 * tokens * ((512 + 64) + 128 + 4)
    assert model.with_accounting("eager").evaluate("kv_cache", batch=1, seq=tokens) == 61 * tokens * (512 + 64 + 128) * 2


def kv_scaled_decode_bytes(model, past: int) -> sympy.Expr:
    """What a decode step moves at kv_bytes: the bytes at 2 a value less those at 1 (each element once)."""

    def total(kv_bytes: int) -> sympy.Expr:
        work = phase_work(model.with_conventions(kv_bytes=kv_bytes), "decode", depth=None, flash=True).total.bytes
        values = {**model.values, "batch": 1, "past": past}
        return work.xreplace({s: sympy.Integer(values[s.name]) for s in work.free_symbols if s.name in values})

    return total(2) - total(1)


def test_a_latent_attention_decode_reads_the_latent_once_for_every_head():
    """deepseek-v3 after 1,024 tokens: 61 layers read 1,025 latents of 576 values (keys and values both come from
    it) and write the new token's: never 128 heads' keys and values."""
    model = symform.load("deepseek-v3")
    assert kv_scaled_decode_bytes(model, 1024) == 61 * 576 * (1025 + 1)
    absorbed = model.with_arguments(attention="mla_attention_absorbed")
    assert kv_scaled_decode_bytes(absorbed, 1024) == 61 * 576 * (1025 + 1)


def test_a_grouped_query_decode_reads_each_key_value_head_once():
    """llama-3.1-8b after 1,024 tokens: 32 layers read 1,025 tokens' keys and values of 8 heads of 128 and write the
    new token's."""
    model = symform.load("llama-3.1-8b")
    assert kv_scaled_decode_bytes(model, 1024) == 32 * 2 * 8 * 128 * (1025 + 1)
