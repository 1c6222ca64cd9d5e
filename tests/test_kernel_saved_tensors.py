"""What the fused kernels people train with keep for backward, where transformers' eager modules keep something else:
each expected value is worked out by hand from the kernel's saved tensors and the model's sizes."""

from __future__ import annotations

from symform.analysis.memory.memory import saved_activations
from symform.engine.graph.model import Model


def kept(model: Model, *, flash: bool = True, recompute: str = "none", **workload: int) -> dict[str, int]:
    """Bytes kept for backward by top-level component, at the model's sizes and ``workload``."""
    by_component = saved_activations(model, flash=flash, recompute=recompute)[2]
    sizes = dict(model.values) | workload
    return {name: int(e.subs({s: sizes[s.name] for s in e.free_symbols})) for name, e in by_component.items()}


def node_kept(model: Model, node: str, mode: str | None, **workload: int) -> int:
    """What one node of the model's graph keeps: its declared mode's bytes, or (mode None) a primitive's own."""
    data = model.graph().graph.nodes[node]
    expression = data["saved_when"][mode] if mode else data["quantities"]["saved_activations"]
    sizes = {str(k): v for k, v in model.conventions.items()} | dict(model.values) | workload
    return int(expression.subs({s: sizes[s.name] for s in expression.free_symbols}))


def test_a_windowed_kernel_keeps_the_whole_keys_and_values():
    """Mistral 7B v0.1 (32 layers, every one over a window of 4,096; d 4096, 32 query and 8 key/value heads of 128,
    d_ff 14,336) at batch 1, seq 8,192: flash_attn's window_size limits which keys each query reads, not the key and
    value tensors it is handed and saves, all 8,192 tokens of them. Per token and layer, in bf16 with transformers'
    norms: two RMSNorms 2·(4·4096 + 4 + 2·4096), the projections' shared input 2·4096, the kernel's queries
    2·32·128, keys and values 2·8·(128 + 128) and fp32 log-sum-exp 4·32, the output projection's input 2·32·128, the
    MLP's input 2·4096 and its four d_ff-wide tensors 4·2·14,336."""
    per_token = 2 * (4 * 4096 + 4 + 2 * 4096) + 2 * 4096 + 2 * 32 * 128 + 2 * 8 * 256 + 4 * 32 + 2 * 32 * 128 + 2 * 4096 + 8 * 14336
    model = Model.load("mistral-7b-v0.1")
    assert kept(model, batch=1, seq=8192)["layers"] == 32 * 8192 * per_token
    # the window changes the products' span (their FLOPs), never what the kernel or a recomputed core keeps
    whole = model.with_conventions(windowed=0)
    for recompute in ("none", "selective"):
        assert kept(model, recompute=recompute, batch=1, seq=8192) == kept(whole, recompute=recompute, batch=1, seq=8192)
    assert model.evaluate("forward_flops", batch=1, seq=8192) < whole.evaluate("forward_flops", batch=1, seq=8192)


def test_a_recomputed_core_keeps_the_whole_keys_and_values():
    """Selective recomputation keeps the attention core's inputs: Q, and K and V at n_kv_heads over every token, the
    kernel's tensors less its fp32 log-sum-exp (4·32 bytes a token and layer), whatever the window."""
    model = Model.load("mistral-7b-v0.1")
    flash, selective = (kept(model, recompute=r, batch=1, seq=8192)["layers"] for r in ("none", "selective"))
    assert flash - selective == 32 * 8192 * 4 * 32


SLIDING, FULL = "sliding_attention", "full_attention"
GEMMA4 = dict(
    model_type="gemma4_text", vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, global_head_dim=16, sliding_window=4, max_position_embeddings=64,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=101, num_hidden_layers=6,
    layer_types=[SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL], num_kv_shared_layers=3,
)  # fmt: skip


def test_a_layer_that_shares_keys_and_values_keeps_only_its_queries_in_the_kernel():
    """A tiny Gemma 4 whose last 3 of 6 layers read an earlier layer's keys and values, at batch 2, seq 9 in bf16:
    the kernel saves the very key and value tensors the earlier layer's kernel saved, so a shared layer's kernel
    adds its queries and fp32 log-sum-exp alone: sliding (4 heads of 8) 2·2·9·4·8 + 4·2·9·4 = 1,440 bytes, full
    (4 heads of 16) 2·2·9·4·16 + 4·2·9·4 = 2,592. A sliding layer that computes them keeps its keys and values
    (2 heads of 8) over all 9 tokens, beyond the window of 4: 1,440 + 2·2·9·2·(8 + 8) = 2,592 bytes."""
    model = Model.from_config(GEMMA4, name="tiny")
    core = {kind: node_kept(model, f"layers/{kind}/attn/core", "flash", batch=2, seq=9, past=0) for kind in ("local_shared", "global_shared", "local")}
    assert core == {"local_shared": 1440, "global_shared": 2592, "local": 2592}
    assert node_kept(model, "layers/local_shared/attn/core", "selective", batch=2, seq=9, past=0) == 2 * 2 * 9 * 4 * 8


def test_sink_logits_add_nothing_to_a_kernels_saved_tensors():
    """gpt-oss (one learned sink logit per head): eager attention keeps each score row's sink column (2 bytes in bf16,
    its softmax runs in the logits' dtype) and the int64 index of the row max (8 bytes), 64 heads × (2 + 8) bytes a
    token and layer; a kernel that takes the sinks as an input keeps neither, nor does a recomputed core, so under
    flash gpt-oss-20b keeps what the same model with plain grouped-query attention keeps."""
    model = Model.load("gpt-oss-20b")
    plain = model.with_arguments(attention="gqa_attention")
    for recompute in ("none", "selective"):
        assert kept(model, recompute=recompute, batch=2, seq=64) == kept(plain, recompute=recompute, batch=2, seq=64)
    parts = ("sink_column", "row_max_index")
    eager = sum(node_kept(model, f"layers/local/attn/sink_softmax/{p}", None, batch=2, seq=64) for p in parts)
    assert eager == 2 * 64 * 64 * (2 + 8)


def test_a_fused_norm_keeps_its_input_and_one_fp32_statistic_per_row_in_every_form():
    """fused_norms = 1 (torchtitan's torch.nn.RMSNorm, Transformer Engine's RMSNorm): whatever the model's norm
    computes in fp32, the kernel keeps its bf16 input and one fp32 1/rms per row. Gemma 3 27B (62 layers, d 5376, 32
    query and 16 key/value heads of 128) at batch 1, seq 4096 has four norms of d a layer and q/k norms over its
    heads; transformers' (1 + g) norm keeps an fp32 copy of the input, the fp32 normalised values and the fp32 1 + g
    besides 1/rms. Per layer the fused kernels keep (4·5376 + 32·128 + 16·128)·4096·(8 − 2) + 4·(4·5376 + 2·128) bytes
    fewer: the fp32 copy and normalised values (8 bytes an element) against the bf16 input (2), and each norm's fp32
    1 + g. A tiny Gemma 4 (width 32) at batch 2, seq 9: its first norm keeps 2·18·32 + 4·18 bytes."""
    model = Model.load("gemma-3-27b")
    eager, fused = (kept(m, batch=1, seq=4096)["layers"] for m in (model, model.with_conventions(fused_norms=1)))
    rows_times_width = (4 * 5376 + 32 * 128 + 16 * 128) * 4096
    assert eager - fused == 62 * (rows_times_width * (8 - 2) + 4 * (4 * 5376 + 2 * 128))
    # Gemma 4's pow norm: its input and one statistic, not two, nor the normalised values or an fp32 g
    tiny = Model.from_config(GEMMA4, name="tiny").with_conventions(fused_norms=1)
    assert node_kept(tiny, "layers/local/attn_norm", None, batch=2, seq=9) == 2 * 2 * 9 * 32 + 4 * 2 * 9


def test_a_mamba2_mixer_keeps_what_the_fused_training_kernel_keeps():
    """mamba_ssm's mamba_split_conv1d_scan_combined (transformers' CUDA path in a training forward without a cache,
    Megatron-Core's MambaMixer in training) keeps in_proj's output z, X, B, C, dt, the scan's output before the gate and
    the gated RMSNorm's fp32 1/rms per row and group, and recomputes the rest; in_proj keeps its input. Bamba 9B (d 4096,
    128 heads of 64, one group of state 128) at batch 1, seq 4096, per token and Mamba layer: 2·4096 + 2·(2·8192 + 2·128
    + 128) + 2·8192 + 4·1 = 58,116 bytes, where transformers' torch scan keeps about twenty times as much."""
    model = Model.load("bamba-9b")
    per_token = 2 * 4096 + 2 * (2 * 8192 + 2 * 128 + 128) + 2 * 8192 + 4
    assert per_token == 58_116
    mixer = "layers/mamba/mixer"
    assert node_kept(model, mixer, "flash", batch=1, seq=4096) == 4096 * per_token
    # Falcon-H1 7B without the gated norm (mamba_rms_norm false): 24 heads of 128, one group of state 256, no 1/rms
    falcon = Model.load("falcon-h1-7b")
    assert falcon.spec.arguments["gated_norm"] == 0
    want = 2 * 3072 + 2 * (3 * 24 * 128 + 2 * 256 + 24)
    assert node_kept(falcon, "layers/mixer", "flash", batch=1, seq=4096) == 4096 * want
