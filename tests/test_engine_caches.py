"""What serving engines keep between steps, by default, against what transformers' caches hold (the eager
accounting): each expected number is worked out by hand from the published config and the engines' own shapes.

- A causal convolution's state: vLLM (MambaStateShapeCalculator: conv_kernel - 1 + num_spec), SGLang
  (Mamba2StateShape: conv_kernel - 1) and TensorRT-LLM (MambaCacheManager: [conv_dim, d_conv - 1]) keep the last
  conv_kernel - 1 inputs, all the next step needs beside its new one; transformers' caches keep conv_kernel.
- DeepSeek-V3.2's indexer keys: vLLM's DeepseekV32IndexerCache holds head_dim + head_dim // 128 · 4 bytes a token
  (FP8 values and an fp32 scale per 128), as SGLang and DeepSeek's reference inference code do, whatever the KV
  cache's type; transformers holds them in the model's dtype.
"""

from __future__ import annotations

import symform


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
