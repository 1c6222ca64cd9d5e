"""Oracle: the glm4_moe family (GLM-4.5, GLM-4.5-Air, GLM-4.6) against transformers' Glm4MoeForCausalLM.

Parameters: numel() of the whole model. FLOPs: tiny instances (float32, eager
attention, eager experts) counted by FlopCounterMode, which counts only matrix
products (mm, addmm, bmm); symform's element-wise work is off by default
(count_elementwise = 0). Cache: the bytes of every tensor transformers' cache
holds after a forward.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, check_cache_bytes, check_forward_flops, check_saved_config_reads_the_same, check_train_step_flops  # noqa: E402
from family_checks import check_tiny_params, eager  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(
    model_type="glm4_moe", vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=2,
)

TINY = {
    "1 dense then 2 MoE layers, groups, q/k/v bias, qk-norm, head wider than d_model/heads": dict(
        BASE, num_hidden_layers=3, head_dim=16, n_group=4, topk_group=2, first_k_dense_replace=1, attention_bias=True, use_qk_norm=True,
    ),
    "no dense layer, 2 shared experts, MQA, full rotary, unnormalised top-k": dict(
        BASE, num_hidden_layers=2, num_key_value_heads=1, first_k_dense_replace=0, n_shared_experts=2, partial_rotary_factor=1.0,
        norm_topk_prob=False, routed_scaling_factor=2.5,
    ),
    "all layers dense, tied head": dict(BASE, num_hidden_layers=2, first_k_dense_replace=2, tie_word_embeddings=True),
}  # fmt: skip

SHAPES = [(2, 7), (1, 3), (1, 1)]


@pytest.mark.parametrize("case", list(TINY))
def test_family_is_glm4_moe(case):
    assert Model.from_config(TINY[case]).spec.family == "glm4_moe"


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    check_tiny_params(TINY[case])


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case]
    check_forward_flops(eager(config), build(config, eager_experts=True), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter(case):
    """The counter's backward is two matrix products per forward one, as symform's bwd_mult = 2."""
    config = TINY[case]
    check_train_step_flops(eager(config), build(config, eager_experts=True), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", (3, 9))
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, build(config, eager_experts=True), seq)


def test_multi_token_prediction_is_counted_only_when_asked():
    """Hand count of one MTP module (DeepSeek-V3 §2.2, GLM-4.5's layer 46 in Air): two d_model norms, eh_proj
    2·d_model → d_model, one MoE decoder layer like the model's last, a final norm; the head is the model's."""
    config = dict(TINY["1 dense then 2 MoE layers, groups, q/k/v bias, qk-norm, head wider than d_model/heads"], num_nextn_predict_layers=1)
    hidden, heads, kv_heads, head_dim, experts, expert_ff, shared_ff = 32, 4, 2, 16, 8, 12, 12
    attention = hidden * heads * head_dim + heads * head_dim + 2 * (hidden * kv_heads * head_dim + kv_heads * head_dim) + heads * head_dim * hidden + 2 * head_dim
    moe = experts * hidden + experts * 3 * hidden * expert_ff + 3 * hidden * shared_ff
    module = 2 * hidden + 2 * hidden * hidden + (attention + moe + 2 * hidden) + hidden
    without = Model.from_config(config).evaluate("params")
    with_mtp = Model.from_config(config).with_arguments(include_mtp=1).evaluate("params")
    assert without == sum(p.numel() for p in build(config, eager_experts=True).parameters())
    assert with_mtp - without == module


@pytest.mark.parametrize("case", list(TINY))
def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(case, tmp_path):
    """save_pretrained writes partial_rotary_factor inside rope_parameters and leaves out fields equal to the defaults."""
    config = TINY[case]
    check_saved_config_reads_the_same(config, tmp_path, ("params", "forward_flops", "saved_activations", "kv_cache"))


# the shapes GLM-4.5-Air and GLM-4.6 are described with (no published config.json is bundled); check shrinks the sizes
SHAPED = {
    "GLM-4.5-Air-shaped": dict(
        model_type="glm4_moe", vocab_size=151552, hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=46, num_attention_heads=96, num_key_value_heads=8, head_dim=128, n_routed_experts=128, n_shared_experts=1,
        num_experts_per_tok=8, first_k_dense_replace=1, attention_bias=True, partial_rotary_factor=0.5, num_nextn_predict_layers=1,
    ),
    "GLM-4.6-shaped, qk-norm": dict(
        model_type="glm4_moe", vocab_size=151552, hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536,
        num_hidden_layers=92, num_attention_heads=96, num_key_value_heads=8, head_dim=128, n_routed_experts=160, n_shared_experts=1,
        num_experts_per_tok=8, first_k_dense_replace=3, attention_bias=True, use_qk_norm=True, partial_rotary_factor=0.5,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPED))
def test_check_agrees_with_the_real_module_to_the_byte(case):
    """symform check builds the shrunk model and compares every part, saved activations included."""
    from symform.analysis.memory.oracle_check import check

    report = check(Model.from_config(SHAPED[case], name=case))
    assert report.differences == []
    assert {"params", "forward_flops", "kv_cache", "saved_activations"} <= {r.quantity for r in report.rows}
