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
