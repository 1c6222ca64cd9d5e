"""What the fused kernels people train with keep for backward, where transformers' eager modules keep something else:
each expected value is worked out by hand from the kernel's saved tensors and the model's sizes."""

from __future__ import annotations

from checks import run_json
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


def test_a_gated_deltanet_mixer_keeps_what_the_fused_training_kernels_keep(capsys):
    """transformers' CUDA path in training (Qwen3NextGatedDeltaNet.forward: causal_conv1d_fn, flash-linear-attention's
    chunk_gated_delta_rule with use_qk_l2norm_in_kernel=True, FusedRMSNormGated from the hub kernels of
    integrations/hub_kernels.py). causal_conv1d's CausalConv1dFn.forward saves its input x alone (causal_conv1d_interface.py, save_for_backward(x,
    weight, bias, seq_idx, initial_states)). fla's ChunkGatedDeltaRuleFunction.forward (fla/ops/gated_delta_rule/
    chunk.py) saves q, q_rstd, k, k_rstd, v, g, beta, A: l2norm_fwd's outputs in the inputs' dtype at the key heads
    and fp32 1/‖x‖ per row (fla/modules/l2norm.py), the fp32 within-chunk cumsum of g (chunk_local_cumsum's
    output_dtype=torch.float), the sigmoid's β, and A = (I + A)⁻¹ as [B, T, HV, 64] in k's dtype (chunk_fwd.py);
    backward recomputes w, u and the chunk states h (chunk_gated_delta_rule_fwd_h). LayerNormGatedFunction saves x,
    the gate z and an fp32 rstd per row (fla/modules/fused_norm_gate.py). Around them: in_proj's input and
    out_proj's, and g's fp32 softplus input and output (the product keeps the latter) and exp(A_log) twice.

    Qwen3-Next-80B-A3B (d 2048, 16 key heads of 128, 32 value heads of 128) in bf16, per token and linear layer: the
    projections' inputs 2·(2048 + 4096), the convolution's input 2·(2·2048 + 4096), the normalised q and k 2·2·2048,
    v 2·4096, A 2·32·64, β 2·32, the norm's x and z 2·2·4096; in fp32 the two 1/‖x‖ 4·2·16, softplus's input and
    output and the cumulative decay 4·3·32, the norm's 1/rms 4·32: 66,240 bytes, and 4·2·32 bytes a layer. Of what
    transformers' torch_chunk_gated_delta_rule keeps, its fp32 tensors alone come to 204,800 bytes a token and layer:
    β⊙K, K and the scaled Q repeated to the value heads 4·3·128·32, four [64, 64] decays a chunk 4·4·64·32, each
    chunk's start state 4·128·128·32/64, V_new 4·128·32, the solve's matrix and solution 4·(64 + 256)·32 and the
    L2-normalised Q and K 4·2·128·32, so over the 36 linear layers --flash keeps at least 36·4096·(204,800 - 66,240)
    bytes fewer than --attention eager."""
    per_token = 2 * (2048 + 4096) + 2 * (2 * 2048 + 4096) + 2 * 2 * 2048 + 2 * 4096 + 2 * 32 * 64 + 2 * 32
    per_token += 2 * 2 * 4096 + 4 * 2 * 16 + 4 * 3 * 32 + 4 * 32
    assert per_token == 66_240
    model = Model.load("qwen3-next-80b-a3b")
    mixer = "layers/linear/mixer"
    assert node_kept(model, mixer, "flash", batch=1, seq=4096) == 4096 * per_token + 4 * 2 * 32
    # Qwen3.5 0.8B (d 1024, 16 key and 16 value heads of 128): nothing to repeat, the same tensors
    small = 2 * (1024 + 2048) + 2 * (2 * 2048 + 2048) + 2 * 2 * 2048 + 2 * 2048 + 2 * 16 * 64 + 2 * 16
    small += 2 * 2 * 2048 + 4 * 2 * 16 + 4 * 3 * 16 + 4 * 16
    assert node_kept(Model.load("qwen3.5-0.8b"), mixer, "flash", batch=2, seq=100) == 200 * small + 4 * 2 * 16
    sizes = ("--train", "--batch", "1", "--seq", "4096")
    flash = run_json(capsys, "memory", "qwen3-next-80b-a3b", *sizes, "--flash")["components"]["activations"]
    eager = run_json(capsys, "memory", "qwen3-next-80b-a3b", *sizes, "--attention", "eager")["components"]["activations"]
    torch_scan_fp32 = 4 * 3 * 128 * 32 + 4 * 4 * 64 * 32 + 4 * 128 * 128 * 32 // 64 + 4 * 128 * 32 + 4 * (64 + 256) * 32 + 4 * 2 * 128 * 32
    assert torch_scan_fp32 == 204_800
    assert eager - flash >= 36 * 4096 * (torch_scan_fp32 - per_token)
