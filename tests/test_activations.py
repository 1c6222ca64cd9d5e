"""Saved activations against PyTorch: the bytes autograd keeps for backward in a training forward.

Under the `eager` accounting (formulas/accountings.toml) symform's count equals the
distinct storages PyTorch keeps for backward, to the byte, for every bundled family,
in fp32 and bf16, for one sequence and for several, with windows shorter and longer
than the sequence. Each effect is a declaration of what an op keeps, not a correction.
What PyTorch does that surprises (each one declared where it happens):

- RMSNorm (llama family) keeps an fp32 copy of its input, the fp32 1/rms and the
  normalised values cast back; Gemma's (1 + g) norms scale in fp32 first, so they keep
  the fp32 normalised values and the fp32 1 + g instead (`rms_norm(form=offset)`).
- the attention softmax keeps an fp32 output, and the weighted sum a copy cast back;
  GPT-2's eager softmax runs in the activations' dtype and the two share one tensor.
- repeat_kv copies keys and values to the query heads, except for one key/value head of
  one sequence, where the reshape is a view of the single head (`views`).
- GPT-2's queries, for one sequence, are a view of c_attn's whole fused output; MLA's
  values a view of kv_b_proj's keys-and-values output; in fp32 MLA's normed latent is a
  slice of kv_a_proj's output including the rotary key.
- gelu_new is written out in products and tanh that keep four d_ff-wide tensors.
- the loss pads the labels to seq + 1; for one sequence labels[:, 1:] is already
  contiguous and is kept as a view of all seq + 1 of them.
- Nemotron-H's RMSNorm scales by g in fp32, keeping the fp32 normalised values and, in bf16,
  an fp32 copy of g; its experts sum into an fp32 accumulator, so index_add keeps the
  weighted outputs in fp32.
- eager experts keep, per routed token, the gather indices (two int64 in one storage),
  the gathered weight, the expert's output and the weighted output, and routers keep
  fp32 probabilities, int64 top-k indices and, in DeepSeek, an fp32 copy of the input
  and bool group masks.
- gpt-oss's attention sinks: max(dim=-1) over the scores and the sink keeps its int64
  index, the softmax over span + 1 columns runs and is kept in the logits' dtype, and the
  weights are a view of it; its router's softmax is over the top_k chosen logits, in
  their dtype; its clamped SwiGLU's product keeps the clamped gate and the sigmoid; its
  RMSNorm scales by g in fp32 (keeping fp32 normalised values); its cos and sin are
  d_head/2 wide.
- Gemma 4's RMSNorm raises mean(x²) + ε to the power -0.5, and pow keeps its input as well
  as the product its output; it scales by an fp32 copy of g (`rms_norm(form=pow)`). Its values'
  norm has no g; with keys as values (attention_k_eq_v) it normalises the key projection's
  output, in fp32 the very storage k_norm keeps. Its sliding and full layers get cos and sin
  of their own widths, each layer keeps its one-element layer_scalar (a buffer), the
  per-layer embeddings look up the token ids the token embedding keeps, and their
  projection's input is, in fp32, the storage the first layer's norm keeps. Its experts'
  router norms the residual without a scale, keeps the scaled normalised values, and
  multiplies the fp32 renormalised weights by the chosen experts' scales, keeping both;
  the router's and the experts' norms read the residual the pre-MLP norm keeps.
- PyTorch's CPU LayerNorm keeps its mean and 1/std in bf16 for bf16 inputs (CUDA keeps
  fp32): the oracle runs on the CPU, so it sets cpu_kernels = 1.
- Gated DeltaNet's chunked scan (transformers' torch path) runs in fp32 on the sequence
  padded to whole 64-token chunks and keeps five [chunk, chunk] tensors per head and chunk;
  without a cache to carry it, the last chunk's state update is dropped with what only it
  reads. For a sequence of whole chunks in fp32, F.pad copies the scan's strided views with
  their strides, and matmul keeps contiguous copies of them. With one value head per key
  head in fp32, the normalised queries and keys are views of the whole SiLU output, and
  Qwen3-Next's z a view of its whole fused projection. The gated attention's q_norm keeps,
  in fp32, a view of q_proj's output, gate included; Qwen3.5's cos and sin are a quarter of
  a head wide and computed per sequence.
- Mamba-2's forward fills a cache, training's too: over fewer tokens than the convolution's
  kernel it pads the convolution's input to the kernel, a copy the convolution keeps. Over
  one chunk einsum folds the scan's batch dimensions without copying: C·S keeps a view of
  all chunks + 1 states, C·Bᵀ views of C and B for one sequence, and both products with X
  one view of X·dt, except for one token of several sequences.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch oracles need torch (pip install '.[test,oracle]')")
from hypothesis import example, given, settings
from hypothesis import strategies as st
from oracle import TINY, build_for_training, input_ids, saved_for_backward

from symform import Model

MOE = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
MLA = {"moe_intermediate_size": 8, "num_key_value_heads": 4, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}
NO_DROPOUT = {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
# one linear layer, one gated full-attention layer
GATED_DELTANET = {
    "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 12,
    "linear_conv_kernel_dim": 4, "layer_types": ["linear_attention", "full_attention"],
}  # fmt: skip
# a sliding and a full layer, the full one with heads of its own width and one key/value head
GEMMA4 = {
    "model_type": "gemma4_text", "head_dim": 16, "global_head_dim": 32, "layer_types": ["sliding_attention", "full_attention"],
    "num_global_key_value_heads": 1, "attention_k_eq_v": True, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 101,
}  # fmt: skip
# sequences of 8 and 11 tokens: window 5 is shorter, window 16 longer
FAMILIES = {
    "llama, GQA": {"model_type": "llama", "head_dim": 16},
    "llama, MHA, tied": {"model_type": "llama", "num_key_value_heads": 4, "tie_word_embeddings": True},
    "llama, MQA": {"model_type": "llama", "num_key_value_heads": 1},
    "qwen2, biases": {"model_type": "qwen2"},
    "qwen2, window 5 on layer 1": {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1},
    "qwen3, q/k norms": {"model_type": "qwen3", "head_dim": 24},
    "qwen3, window 16": {"model_type": "qwen3", "head_dim": 16, "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0},
    "mistral, window 5": {"model_type": "mistral", "sliding_window": 5},
    "mistral, window 16": {"model_type": "mistral", "sliding_window": 16},
    "phi3, fused": {"model_type": "phi3", "pad_token_id": 0, "eos_token_id": 0},
    "phi3, partial rotary, window 5": {"model_type": "phi3", "pad_token_id": 0, "eos_token_id": 0, "partial_rotary_factor": 0.5, "sliding_window": 5},
    "gemma": {"model_type": "gemma", "head_dim": 16},
    "gemma2, window 5": {"model_type": "gemma2", "head_dim": 16, "sliding_window": 5},
    "gemma2, window 16": {"model_type": "gemma2", "head_dim": 16, "sliding_window": 16},
    "gemma3_text, window 5": {"model_type": "gemma3_text", "head_dim": 16, "sliding_window": 5, "sliding_window_pattern": 2},
    "gemma4_text, window 5, per-layer embeddings, keys as values": GEMMA4 | {"sliding_window": 5},
    "gemma4_text, window 16, without per-layer embeddings": GEMMA4 | {"sliding_window": 16, "hidden_size_per_layer_input": 0, "attention_k_eq_v": False},
    "gemma4_text, window 5, experts beside the MLP": GEMMA4 | {"sliding_window": 5, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32},
    "gpt2, gelu_new": GPT2 | NO_DROPOUT,
    "gpt2, relu, layer-scaled attention": GPT2 | NO_DROPOUT | {"activation_function": "relu", "scale_attn_by_inverse_layer_idx": True},
    "qwen2_moe": {"model_type": "qwen2_moe", "num_experts": 4, "shared_expert_intermediate_size": 48, **MOE},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_experts": 4, "head_dim": 16, **MOE},
    "qwen3_moe, normalised top-k": {"model_type": "qwen3_moe", "num_experts": 4, "head_dim": 16, "norm_topk_prob": True, **MOE},
    "mixtral": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "deepseek_v2, greedy": {"model_type": "deepseek_v2", **MLA, "q_lora_rank": None, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2, "first_k_dense_replace": 1, "topk_method": "greedy"},
    "deepseek_v2, group-limited": {"model_type": "deepseek_v2", **MLA, "q_lora_rank": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2},
    "gpt_oss, window 5 on layer 0": {"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16, "sliding_window": 5},
    "gpt_oss, window 16 on layer 0": {"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16, "sliding_window": 16},
    "nemotron_h, attention, MLP and MoE": {"model_type": "nemotron_h", "hybrid_override_pattern": "*-E", "num_hidden_layers": 3, "head_dim": 16, "n_routed_experts": 4, "moe_shared_expert_intermediate_size": 48, **MOE},
    # chunks of 4 tokens: seq 8 fills two, seq 11 pads the scan to three
    "nemotron_h, Mamba-2, attention and MoE": {"model_type": "nemotron_h", "hybrid_override_pattern": "M*E", "num_hidden_layers": 3, "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "chunk_size": 4, "n_routed_experts": 4, "moe_shared_expert_intermediate_size": 48, **MOE},
    "qwen3_next, 2 value heads per key head, experts": {"model_type": "qwen3_next", **GATED_DELTANET, "num_experts": 4, "shared_expert_intermediate_size": 16, **MOE},
    "qwen3_next, as many value heads as key heads": {"model_type": "qwen3_next", **GATED_DELTANET, "linear_num_value_heads": 2, "num_experts": 0},
    "deepseek_v3": {"model_type": "deepseek_v3", **MLA, "q_lora_rank": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "n_shared_experts": 1, "first_k_dense_replace": 1},
}  # fmt: skip
DTYPES = {torch.bfloat16: 2, torch.float32: 4}


def build_eager(config: dict, dtype):
    """transformers' model with eager attention and, for mixtures of experts, eager experts (the loop over experts)."""
    if config["model_type"] in ("qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "gpt_oss", "nemotron_h", "qwen3_next", "gemma4_text"):
        return build_for_training(config, dtype, experts_implementation="eager")
    return build_for_training(config, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("batch", "seq"), [(2, 8), (1, 11)])
def test_saved_activations_equal_what_eager_pytorch_keeps(family, dtype, batch, seq):
    config = {**TINY, **FAMILIES[family]}
    kept = saved_for_backward(build_eager(config, dtype), input_ids(config, batch, seq))
    # the oracle runs PyTorch's CPU kernels (LayerNorm statistics in the input's dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("family", FAMILIES)
def test_the_default_accounting_is_eager_without_windows_or_views(family):
    """The defaults differ from eager only where a window is shorter than the sequence (windowed = 1 spans the
    window) and where a kept tensor is a view (views = 0): several sequences of 5 tokens, no longer than any
    window and longer than a Mamba-2 chunk of 4 (over one chunk its scan keeps views), leave neither, so there
    the two accountings agree."""
    config = {**TINY, **FAMILIES[family]}
    default = Model.from_config(config).evaluate("saved_activations", batch=2, seq=5)
    assert default == Model.from_config(config, accounting="eager").evaluate("saved_activations", batch=2, seq=5)


# transformers' Gated DeltaNet scan runs chunks of 64 tokens: one whole chunk, two whole chunks, two with padding
SCANS = {
    "qwen3_next, 2 value heads per key head": {**TINY, "model_type": "qwen3_next", **GATED_DELTANET, "num_experts": 0},
    "qwen3_next, as many value heads as key heads": {**TINY, "model_type": "qwen3_next", **GATED_DELTANET, "linear_num_value_heads": 2, "num_experts": 0},
    "qwen3_5, as many value heads as key heads": {"model_type": "qwen3_5", "text_config": {**TINY, **GATED_DELTANET, "linear_num_value_heads": 2}},
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", SCANS)
@pytest.mark.parametrize(("batch", "seq"), [(2, 64), (2, 128), (1, 70)])
def test_the_gated_deltanet_scan_keeps_whole_chunks(family, dtype, batch, seq):
    config = SCANS[family]
    kept = saved_for_backward(build_for_training(config, dtype), input_ids(config.get("text_config", config), batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


# Mamba-2 over at most one chunk, and over fewer tokens than its convolution's kernel: transformers' forward fills
# a cache and pads the convolution's input to the kernel; over one chunk einsum folds the scan's batch dimensions
# into views (of C and B for one sequence, of X·dt unless one token of several sequences, of the start states)
MAMBA2 = {**TINY, "model_type": "nemotron_h", "hybrid_override_pattern": "M*", "num_hidden_layers": 2, "head_dim": 16,
          "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2}  # fmt: skip


@functools.cache
def mamba2_model(chunk: int, kernel: int, dtype):
    return build_for_training({**MAMBA2, "chunk_size": chunk, "conv_kernel": kernel}, dtype)


def assert_mamba2_saved_activations_exact(chunk: int, kernel: int, dtype, batch: int, seq: int) -> None:
    config = {**MAMBA2, "chunk_size": chunk, "conv_kernel": kernel}
    kept = saved_for_backward(mamba2_model(chunk, kernel, dtype), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept, (chunk, kernel, dtype, batch, seq)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch", [1, 2, 3])
@pytest.mark.parametrize("seq", range(1, 10))
def test_mamba2_keeps_what_eager_pytorch_keeps_within_and_past_one_chunk(dtype, batch, seq):
    """Chunks of 4 and a kernel of 4: seq 1 to 3 pad both the convolution and the one chunk, seq 4 fills the
    chunk, seq 5 to 9 run two or three chunks."""
    assert_mamba2_saved_activations_exact(4, 4, dtype, batch, seq)


@settings(max_examples=12, deadline=None)
@given(chunk=st.integers(2, 5), kernel=st.integers(2, 4), dtype=st.sampled_from(list(DTYPES)), batch=st.integers(1, 3), seq=st.integers(1, 9))
@example(chunk=2, kernel=4, dtype=torch.float32, batch=2, seq=2)  # one chunk, the convolution padded
@example(chunk=4, kernel=2, dtype=torch.bfloat16, batch=2, seq=3)  # one chunk, the convolution not padded
def test_mamba2_keeps_what_eager_pytorch_keeps_whatever_the_chunk_and_kernel(chunk, kernel, dtype, batch, seq):
    """The one-chunk views and the convolution's padding apart: chunks shorter or longer than the kernel."""
    assert_mamba2_saved_activations_exact(chunk, kernel, dtype, batch, seq)
