"""Oracle: MiniMax-M2 (`minimax_m2`) against transformers' own MiniMaxM2ForCausalLM.

Parameters: tiny configs built from transformers' MiniMaxM2Config, numel() of the
whole model (the router's e_score_correction_bias is a buffer, so not counted),
and the published config on the meta device. FLOPs: tiny instances in float32
with eager attention and eager experts, counted by FlopCounterMode, which counts
only matrix products (symform's element-wise work is off by default). Cache: the
bytes of every tensor transformers' cache holds after a forward.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, check_cache_bytes, check_forward_flops, check_saved_config_reads_the_same, check_train_step_flops, meta_params  # noqa: E402
from family_checks import check_saved_activations  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(model_type="minimax_m2", vocab_size=101, hidden_size=32, intermediate_size=24, num_hidden_layers=2, max_position_embeddings=64)

# the projections are wider than the model (n_heads·d_head = 2·d_model, as in MiniMax-M2), the
# rotary part narrower than a head; the Q/K norms' widths tell whole-projection norms from per-head ones
TINY = {
    "GQA, rotary on half of each head (rotary_dim)": dict(
        BASE, num_attention_heads=4, num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=4, num_experts_per_tok=2,
    ),
    "MQA, full rotary, every expert chosen": dict(
        BASE, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=8, num_local_experts=3, num_experts_per_tok=3,
    ),
    "MHA, tied head, partial_rotary_factor in rope_parameters": dict(
        BASE, num_attention_heads=2, num_key_value_heads=2, head_dim=24, num_local_experts=5, num_experts_per_tok=1,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    ),
}  # fmt: skip

SHAPES = [(2, 7), (1, 3), (1, 1)]


def tiny_model(config: dict):
    return build(config, eager_experts=True)


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    config = TINY[case]
    assert Model.from_config(config).evaluate("params") == numel(tiny_model(config))


def test_the_qk_norms_span_the_whole_projections():
    """One scale per channel of the query and key projections, as MiniMaxM2Attention builds them."""
    config = TINY["GQA, rotary on half of each head (rotary_dim)"]
    attention = tiny_model(config).model.layers[0].self_attn
    assert attention.q_norm.weight.numel() == 4 * 16 and attention.k_norm.weight.numel() == 2 * 16
    per_head = dict(config, model_type="qwen3_moe", num_experts=4, moe_intermediate_size=24, norm_topk_prob=True)
    # a per-head norm (Qwen3-MoE, otherwise the same sizes) has (4 - 1)·16 + (2 - 1)·16 fewer weights per layer
    difference = Model.from_config(config).evaluate("params") - Model.from_config(per_head).evaluate("params")
    assert difference == 2 * (3 * 16 + 1 * 16)


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case]
    check_forward_flops(Model.from_config(config), tiny_model(config), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter(case):
    config = TINY[case]
    check_train_step_flops(Model.from_config(config), tiny_model(config), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", (3, 9))
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, tiny_model(config), seq)


@pytest.mark.parametrize("case", list(TINY))
def test_the_rotary_tables_are_as_wide_as_transformers_makes_them(case):
    """cos and sin are int(head_dim · partial_rotary_factor) wide; a top-level rotary_dim sets that factor."""
    config = TINY[case]
    cos, sin = tiny_model(config).model.rotary_emb(torch.zeros(1, 5, 1), torch.arange(5)[None])
    kept = Model.from_config(config).with_conventions(act_bytes=4).evaluate_breakdown("saved_activations", depth=1, batch=1, seq=5)
    assert kept["rotary"] == cos.numel() * cos.element_size() + sin.numel() * sin.element_size()


@pytest.mark.parametrize("setting", [{"router_jitter_noise": 0.01}, {"output_router_logits": True}])
def test_a_setting_symform_does_not_model_is_refused_in_one_line(setting):
    with pytest.raises(ConfigError) as refusal:
        Model.from_config({**TINY["GQA, rotary on half of each head (rotary_dim)"], **setting})
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("case", list(TINY))
def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(case, tmp_path):
    """save_pretrained writes rotary_dim as rope_parameters.partial_rotary_factor and leaves out default fields."""
    config = TINY[case]
    check_saved_config_reads_the_same(config, tmp_path, ("forward_flops", "saved_activations", "kv_cache"))
    saved, by_hand = Model.load(tmp_path / "config.json"), Model.from_config(config)
    assert saved.evaluate("params") == meta_params(config) == by_hand.evaluate("params")


def test_the_defaults_are_transformers_defaults_and_the_published_size():
    """A config naming only the model type costs what MiniMaxM2Config's defaults build (MiniMax-M2's sizes:
    transformers' model_doc/minimax_m2.md gives 230 billion parameters in total, 10 billion active)."""
    config = {"model_type": "minimax_m2"}
    model = Model.from_config(config)
    assert model.evaluate("params") == meta_params(config)
    assert round(model.evaluate("params"), -10) == 230 * 10**9
    assert round(model.evaluate("active_params"), -10) == 10 * 10**9


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("case", list(TINY))
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype):
    """Every tensor autograd keeps for backward (the fp32 sigmoid scores, the whole-projection norms' statistics)."""
    check_saved_activations(TINY[case], dtype)
