"""Oracle: symform's FLOP counts against PyTorch's FLOP counter on real models.

Tiny transformers models (random init, float32, eager attention, CPU) are run
on ``input_ids`` of shape (batch, seq) under
``torch.utils.flop_counter.FlopCounterMode``, which counts 2 FLOPs per
multiply-add of the matrix products (mm, addmm, bmm, ...) and nothing for
element-wise ops, the embedding gather, norms, softmax or RoPE: the same
conventions as symform's defaults (with the causal factor 1, since the eager
path multiplies the full seq x seq score matrix and masks it afterwards).
Every expected value comes from the counter, never from symform's formulas.
"""

from __future__ import annotations

import pytest
import sympy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import (  # noqa: E402
    TINY,
    build,
    count_forward,
    count_forward_backward,
    global_counts,
    input_ids,
    top_level_counts,
)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = TINY

# (id, config changes on BASE). Each family appears tied and untied, with GQA
# and with MHA, and with a head_dim (24) other than hidden / heads (16).
CONFIGS = [
    ("llama-gqa-untied-hd24", {"model_type": "llama", "head_dim": 24, "tie_word_embeddings": False}),
    ("llama-mha-tied", {"model_type": "llama", "num_key_value_heads": 4, "tie_word_embeddings": True}),
    ("llama-mqa-biases-hd24", {"model_type": "llama", "num_key_value_heads": 1, "head_dim": 24, "attention_bias": True, "mlp_bias": True}),
    ("mistral-gqa-untied-hd24", {"model_type": "mistral", "head_dim": 24, "tie_word_embeddings": False}),
    ("mistral-mha-tied", {"model_type": "mistral", "num_key_value_heads": 4, "tie_word_embeddings": True}),
    ("qwen2-gqa-tied-hd24", {"model_type": "qwen2", "head_dim": 24, "tie_word_embeddings": True}),
    ("qwen2-mha-untied", {"model_type": "qwen2", "num_key_value_heads": 4, "tie_word_embeddings": False}),
    ("qwen3-gqa-tied-hd24", {"model_type": "qwen3", "head_dim": 24, "tie_word_embeddings": True}),
    ("qwen3-mha-untied-hd16", {"model_type": "qwen3", "num_key_value_heads": 4, "head_dim": 16, "tie_word_embeddings": False}),
    ("qwen3-gqa-untied-bias-hd-default", {"model_type": "qwen3", "attention_bias": True}),  # head_dim absent: Qwen3Config's 128
]

SHAPES = [(2, 7), (3, 5), (1, 1)]


def config_for(changes: dict) -> dict:
    return {**BASE, **changes}


def module_counts(counter: FlopCounterMode, suffix: str) -> dict[str, dict[str, int]]:
    """Per-module counts for every module whose dotted name ends with ``suffix``."""
    return {name: {str(op): n for op, n in ops.items()} for name, ops in counter.get_flop_counts().items() if name.endswith(suffix)}


def attention_bmm_flops(counter: FlopCounterMode, config: dict) -> int:
    """The counter's aten.bmm FLOPs inside the self-attention modules (the
    Q.K^T score and attention.V context products) of a forward-only count."""
    per_layer = module_counts(counter, ".self_attn")
    assert len(per_layer) == config["num_hidden_layers"]
    bmm = sum(ops.get("aten.bmm", 0) for ops in per_layer.values())
    # no other batched matmul anywhere (RoPE's frequencies are a broadcast multiply)
    assert bmm == global_counts(counter).get("aten.bmm", 0)
    return bmm


CASES = [pytest.param(changes, id=name) for name, changes in CONFIGS]


@pytest.mark.parametrize("changes", CASES)
def test_forward_flops_match_counter(changes):
    config = config_for(changes)
    model = build(config)
    sym = Model.from_config(config, name="tiny")
    for batch, seq in SHAPES:
        counter = count_forward(model, input_ids(config, batch, seq))
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq, global_counts(counter))


@pytest.mark.parametrize("changes", CASES)
def test_forward_breakdown_matches_counter_modules(changes):
    """symform's depth-1 split (embed, layers, final_norm, lm_head) against the
    counter's per-module forward counts."""
    config = config_for(changes)
    model = build(config)
    batch, seq = 2, 7
    counter = count_forward(model, input_ids(config, batch, seq))
    expected = top_level_counts(counter)
    assert sum(expected.values()) == counter.get_total_flops()
    assert Model.from_config(config, name="tiny").evaluate_breakdown("forward_flops", depth=1, batch=batch, seq=seq) == expected


@pytest.mark.parametrize("changes", CASES)
def test_forward_backward_flops_match_counter(changes):
    """Forward + backward under the counter is exactly 3x the forward.

    Why exactly 2x for the backward: every FLOP-counted op is a matrix
    product, and in the backward each one yields two products of the same
    size, one for each operand's gradient. All linears need the gradient of
    their weight (every parameter requires grad) *and* of their input: even
    layer 0's q/k/v and gate/up projections, whose input is the RMS-normed
    embedding output, which requires grad through embed_tokens.weight and the
    norm's weight. The two attention bmms (Q.K^T and probs.V) need both
    operands' gradients because Q, K, V come from trainable projections. The
    lm_head (tied or not) gets a weight gradient and an input gradient. The
    embedding's own backward is a scatter-add (index_put / embedding_dense_
    backward), which the counter does not count, as the embedding's forward
    gather is not counted. Biases' gradients are sums, not counted. An
    addmm's backward is counted as two mm, so the per-op check below
    combines mm and addmm.
    """
    config = config_for(changes)
    model = build(config)
    sym = Model.from_config(config, name="tiny")
    for batch, seq in SHAPES[:2]:
        ids = input_ids(config, batch, seq)
        forward = count_forward(model, ids)
        both = count_forward_backward(model, ids)
        assert both.get_total_flops() == 3 * forward.get_total_flops()
        f, fb = global_counts(forward), global_counts(both)
        assert fb.get("aten.bmm", 0) == 3 * f.get("aten.bmm", 0)
        assert fb.get("aten.mm", 0) + fb.get("aten.addmm", 0) == 3 * (f.get("aten.mm", 0) + f.get("aten.addmm", 0))
        assert set(fb) <= {"aten.mm", "aten.addmm", "aten.bmm"}, fb
        expected = both.get_total_flops()
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) + sym.evaluate("backward_flops", batch=batch, seq=seq) == expected
        assert sym.evaluate("backward_flops", batch=batch, seq=seq) == expected - forward.get_total_flops()


@pytest.mark.parametrize("changes", [CASES[0], CASES[5], CASES[8]])
def test_causal_half_removes_half_of_attention_bmm(changes):
    """causal=1/2 halves the score and context products, and only those: the
    counter's total minus half of its attention bmm FLOPs (taken from the
    counter's per-module aten.bmm counts)."""
    config = config_for(changes)
    model = build(config)
    sym = Model.from_config(config, name="tiny").with_conventions(causal=sympy.Rational(1, 2))
    for batch, seq in SHAPES:
        counter = count_forward(model, input_ids(config, batch, seq))
        bmm = attention_bmm_flops(counter, config)
        assert bmm > 0 and bmm % 2 == 0
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops() - bmm // 2


def test_counter_sees_head_dim_not_hidden_over_heads():
    """Premise check: with head_dim 24 the attention products really use 24
    (so the head_dim cases above test something hidden / heads would miss)."""
    config = config_for(CONFIGS[0][1])
    model = build(config)
    assert model.model.layers[0].self_attn.q_proj.out_features == config["num_attention_heads"] * 24
    assert model.model.layers[0].self_attn.k_proj.out_features == config["num_key_value_heads"] * 24
    narrow = config_for({**CONFIGS[0][1], "head_dim": 16})
    ids = input_ids(config, 2, 7)
    assert count_forward(model, ids).get_total_flops() != count_forward(build(narrow), ids).get_total_flops()
