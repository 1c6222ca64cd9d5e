"""Oracle: mixture-of-experts and latent-attention families against transformers' own models.

Tiny models of each family run on the CPU with eager attention and eager
experts (the default grouped expert kernel, aten._grouped_mm, has no formula in
FlopCounterMode and would count the routed experts as 0). Parameters are the
models' numel, FLOPs the counter's totals: never symform's own formulas.
"""

from __future__ import annotations

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from oracle import build, count_forward, count_forward_backward  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, max_position_embeddings=64)

CONFIGS = {
    "qwen2_moe, a dense layer in mlp_only_layers": dict(
        BASE, model_type="qwen2_moe", moe_intermediate_size=16, shared_expert_intermediate_size=24, num_hidden_layers=4,
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[1],
    ),
    "qwen2_moe, experts every other layer": dict(
        BASE, model_type="qwen2_moe", moe_intermediate_size=16, shared_expert_intermediate_size=24, num_hidden_layers=4,
        num_key_value_heads=4, num_experts=4, num_experts_per_tok=1, decoder_sparse_step=2, tie_word_embeddings=True,
    ),
    "qwen3_moe, head_dim and mlp_only_layers": dict(
        BASE, model_type="qwen3_moe", moe_intermediate_size=16, num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0], norm_topk_prob=True,
    ),
    "qwen3_moe, sparse step 3": dict(
        BASE, model_type="qwen3_moe", moe_intermediate_size=16, num_hidden_layers=6, num_key_value_heads=1,
        num_experts=5, num_experts_per_tok=3, decoder_sparse_step=3, attention_bias=True,
    ),
    "mixtral": dict(
        BASE, model_type="mixtral", intermediate_size=24, num_hidden_layers=2, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "deepseek_v2, direct query (q_lora_rank null)": dict(
        BASE, model_type="deepseek_v2", moe_intermediate_size=8, num_hidden_layers=3, q_lora_rank=None, kv_lora_rank=12,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=2, first_k_dense_replace=1, topk_method="greedy",
    ),
    "deepseek_v2, compressed query, biases": dict(
        BASE, model_type="deepseek_v2", moe_intermediate_size=8, num_hidden_layers=2, q_lora_rank=10, kv_lora_rank=12,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=0, topk_method="greedy", attention_bias=True, mlp_bias=True,
    ),
    "deepseek_v3": dict(
        BASE, model_type="deepseek_v3", moe_intermediate_size=8, num_hidden_layers=3, num_key_value_heads=4,
        q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
    ),
}


def counted(model, batch: int, seq: int, *, backward: bool = False) -> int:
    ids = torch.randint(0, BASE["vocab_size"], (batch, seq))
    return (count_forward_backward if backward else count_forward)(model, ids).get_total_flops()


@pytest.mark.parametrize("case", list(CONFIGS))
def test_parameters_match_numel(case):
    config = CONFIGS[case]
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in build(config, eager_experts=True).parameters())


@pytest.mark.parametrize("case", list(CONFIGS))
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 1), (3, 5)])
def test_forward_flops_match_the_counter(case, batch, seq):
    config = CONFIGS[case]
    assert Model.from_config(config).evaluate("forward_flops", batch=batch, seq=seq) == counted(build(config, eager_experts=True), batch, seq)


@pytest.mark.parametrize("case", list(CONFIGS))
def test_training_step_is_three_forwards(case):
    config = CONFIGS[case]
    model = Model.from_config(config)
    total = counted(build(config, eager_experts=True), 2, 7, backward=True)
    assert total == model.evaluate("train_step_flops", batch=2, seq=7) == 3 * model.evaluate("forward_flops", batch=2, seq=7)


@pytest.mark.parametrize("case", ["qwen3_moe, head_dim and mlp_only_layers", "deepseek_v3"])
def test_expert_flops_do_not_depend_on_the_routing(case):
    """Each token goes through exactly top_k experts: any router weights give the same count."""
    config = CONFIGS[case]
    model = build(config, eager_experts=True)
    totals = set()
    for scale in (0.0, 1.0, 100.0):
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    parameter.copy_(torch.randn_like(parameter) * scale)
        totals.add(counted(model, 2, 7))
    assert totals == {Model.from_config(config).evaluate("forward_flops", batch=2, seq=7)}


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 512), d_ff=st.integers(1, 1024), batch=st.integers(1, 8), seq=st.integers(1, 512))
def test_one_expert_top_1_is_the_dense_ffn_plus_its_router(d, d_ff, batch, seq):
    moe = Model.from_component("moe", d_model=d, d_ff_expert=d_ff, n_experts=1, top_k=1)
    dense = Model.from_component("gated_mlp", d_model=d, d_ff=d_ff)
    router = Model.from_component("linear", d_in=d, d_out=1)
    for quantity in ("params", "active_params"):
        assert moe.evaluate(quantity) == dense.evaluate(quantity) + router.evaluate(quantity)
    for quantity in ("forward_flops", "backward_flops"):
        assert moe.evaluate(quantity, batch=batch, seq=seq) == dense.evaluate(quantity, batch=batch, seq=seq) + router.evaluate(quantity, batch=batch, seq=seq)


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 16), d=st.integers(1, 256), nope=st.integers(1, 64), rope=st.integers(1, 32), v=st.integers(1, 64))
def test_mla_at_full_rank_counts_its_uncompressed_projections_plus_the_square_factors(h, d, nope, rope, v):
    """DeepSeek-V2 §2.1: with q_lora_rank = h·(d_nope + d_rope) and kv_lora_rank = h·(d_nope + d_v), the
    down-projections are the uncompressed W_Q, W_KV (plus the shared rotary key) and the up-projections
    are square: uncompressed + r_q² + r_kv² + the two latent norms."""
    r_q, r_kv = h * (nope + rope), h * (nope + v)
    mla = Model.from_component("mla_attention", d_model=d, n_heads=h, q_lora_rank=r_q, kv_lora_rank=r_kv, d_nope=nope, d_rope=rope, d_v=v)
    uncompressed = d * h * (nope + rope) + d * (h * (nope + v) + rope) + h * v * d
    assert mla.evaluate("params") == uncompressed + r_q**2 + r_kv**2 + r_q + r_kv
    assumed = mla.expression("params", assume="full_rank").subs(**{k: x for k, x in mla.values.items() if k not in ("q_lora_rank", "kv_lora_rank")})
    assert assumed.evaluate() == mla.evaluate("params")


def test_active_parameters_reconcile_with_the_publishers():
    # Qwen3-235B-A22B, "22B activated": the seed notes' corrected count (whole router, top_k experts)
    assert Model.load("qwen3-235b-a22b").evaluate("active_params") == 22_190_763_520
    # DeepSeek-V3, "37B activated, including 0.9B embedding and 0.9B head"
    v3 = Model.load("deepseek-v3")
    parts = v3.evaluate_breakdown("active_params")
    assert 37e9 <= v3.evaluate("active_params") < 38e9
    assert round(parts["embed"] / 1e9, 1) == round(parts["lm_head"] / 1e9, 1) == 0.9


def test_deepseek_v3_multi_token_prediction_explains_685b():
    """transformers builds 671B (no MTP module); the hub's 685B adds one MTP module and the checkpoint's
    own copies of the embedding and head that the module uses."""
    v3 = Model.load("deepseek-v3")
    main = v3.evaluate("params")
    assert main == 671_026_404_352  # = transformers' meta-device numel, tested for every preset
    with_mtp = v3.with_arguments(include_mtp=1)
    mtp = with_mtp.evaluate_breakdown("params")["mtp"]
    vocab, d = v3.values["vocab"], v3.values["d_model"]
    stored = main + mtp + 2 * vocab * d
    assert 684e9 < stored < 685e9
    assert with_mtp.evaluate("params") == main + mtp


def test_the_absorbed_form_keeps_parameters_and_changes_flops():
    trained = Model.from_component("mla_attention", d_model=7168, n_heads=128, q_lora_rank=1536, kv_lora_rank=512, d_nope=128, d_rope=64, d_v=128)
    absorbed = Model.from_component("mla_attention_absorbed", d_model=7168, n_heads=128, q_lora_rank=1536, kv_lora_rank=512, d_nope=128, d_rope=64, d_v=128)
    assert trained.evaluate("params") == absorbed.evaluate("params")
    seq = symform.vocabulary()["seq"]
    # per query, the absorbed scores and weighted sum run over the latent: (r_kv + d_rope) + r_kv instead of (d_nope + d_rope) + d_v
    def flops(model):
        return model.expression("forward_flops").subs(batch=1, **model.values).expr

    ratio = sympy.limit(flops(absorbed) / flops(trained), seq, sympy.oo)
    assert ratio == sympy.Rational(512 + 64 + 512, 128 + 64 + 128)
