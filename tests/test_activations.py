"""Saved activations against PyTorch: the bytes autograd keeps for backward in a training forward.

The default conventions describe transformers' eager modules; for the llama-like
families symform's count equals the distinct storages PyTorch saves, to the byte,
in bf16 and in fp32. Idealised accountings (Korthikanti et al., the notes) are
convention sets over the same declarations: see test_memory.py.
"""

from __future__ import annotations

import pytest
import torch
from oracle import TINY, build_for_training, input_ids, saved_for_backward

from symform import Model

FAMILIES = {
    "llama": {"model_type": "llama", "head_dim": 16},
    "llama-mha-tied": {"model_type": "llama", "num_key_value_heads": 4, "tie_word_embeddings": True},
    "qwen2-bias": {"model_type": "qwen2"},
    "qwen3-qk-norm": {"model_type": "qwen3", "head_dim": 24},
    "mistral-window": {"model_type": "mistral", "sliding_window": 5},
    "phi3-fused": {"model_type": "phi3", "pad_token_id": 0},
}
DTYPES = {torch.bfloat16: 2, torch.float32: 4}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("batch", "seq"), [(2, 8), (1, 11)])
def test_saved_activations_equal_what_eager_pytorch_keeps(family, dtype, batch, seq):
    config = {**TINY, **FAMILIES[family]}
    torch_model = build_for_training(config, dtype)
    kept = saved_for_backward(torch_model, input_ids(config, batch, seq))
    # eager attention masks a full seq × seq score matrix, even in a sliding-window layer
    model = Model.from_config(config, conventions={"act_bytes": DTYPES[dtype], "windowed": 0})
    # With one sequence, transformers' loss keeps a view of its labels padded to seq + 1 rather than a
    # copy of seq of them: one int64 more than the targets the loss reads, which symform counts.
    padding = 8 if batch == 1 else 0
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept - padding


def test_gpt2_differs_by_what_its_eager_modules_do_differently():
    """transformers' GPT-2 keeps three more d_ff-wide tensors per layer than one activation input
    (gelu_new is written out as pow, tanh and products, each keeping its inputs), computes its
    softmax in bf16 (no fp32 copy, and the weighted sum shares the softmax's output), and, on the
    CPU, keeps LayerNorm's mean and 1/std in bf16. symform declares a GELU as one op that keeps its
    input and counts transformers' fp32 softmax and statistics (the llama-family defaults); the
    difference is exactly those three effects."""
    batch, seq, width, heads, layers = 2, 8, 64, 4, 2
    config = {"model_type": "gpt2", "n_embd": width, "n_layer": layers, "n_head": heads, "vocab_size": 101, "n_positions": 64}
    config |= {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "bos_token_id": 0, "eos_token_id": 0}
    kept = saved_for_backward(build_for_training(config), input_ids(config, batch, seq))
    symform = Model.from_config(config).evaluate("saved_activations", batch=batch, seq=seq)
    gelu = 3 * 2 * batch * seq * 4 * width * layers
    softmax = (4 + 2 - 2) * batch * heads * seq * seq * layers  # fp32 probabilities and a bf16 copy, against one bf16 tensor
    statistics = 2 * (4 - 2) * batch * seq * (2 * layers + 1)  # mean and 1/std of every LayerNorm
    assert kept - symform == gelu - softmax - statistics
