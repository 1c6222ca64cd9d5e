"""Oracle: more mixture-of-experts families against transformers' own modules (tiny float32 instances, eager attention,
eager experts). Parameters: numel(); forward FLOPs: FlopCounterMode (matrix products only); cache: the bytes of the tensors
transformers' cache holds after a forward; saved activations: the bytes autograd keeps, against the eager accounting."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, check_cache_bytes, check_forward_flops  # noqa: E402
from family_checks import check_saved_activations, check_tiny_params, eager  # noqa: E402

from symform.engine.errors import SymformError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TINY = {
    "olmoe: GQA, renormalised top-k": (
        "olmoe",
        dict(model_type="olmoe", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, num_experts=6, num_experts_per_tok=2, norm_topk_prob=True),
    ),
    "olmoe: MHA, tied head, raw top-k": (
        "olmoe",
        dict(model_type="olmoe", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, num_experts=4, num_experts_per_tok=3, tie_word_embeddings=True),
    ),
    "flex_olmo: post-norm layers, GQA, renormalised top-k": (
        "flex_olmo",
        dict(model_type="flex_olmo", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, num_experts=5, num_experts_per_tok=2, norm_topk_prob=True, pad_token_id=None, eos_token_id=None),
    ),
    "granitemoe: multipliers, GQA, top-3 of 5": (
        "granitemoe",
        dict(model_type="granitemoe", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, num_local_experts=5, num_experts_per_tok=3, embedding_multiplier=12.0,
             residual_multiplier=0.22, attention_multiplier=0.0078125, logits_scaling=6.0),
    ),
    "granitemoeshared: a shared MLP beside the experts, tied head": (
        "granitemoeshared",
        dict(model_type="granitemoeshared", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=1, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=20,
             tie_word_embeddings=True),
    ),
    "granitemoeshared: no shared MLP (shared_intermediate_size 0)": (
        "granitemoeshared",
        dict(model_type="granitemoeshared", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2),
    ),
    "ernie4_5_moe: layers 1 and 3 of 4 with experts, 2 shared": (
        "ernie4_5_moe",
        dict(model_type="ernie4_5_moe", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, moe_intermediate_size=12, moe_num_experts=6, moe_k=2, moe_num_shared_experts=2,
             moe_layer_start_index=1, moe_layer_interval=2),
    ),
    "ernie4_5_moe: no shared expert, experts up to layer 1, untied": (
        "ernie4_5_moe",
        dict(model_type="ernie4_5_moe", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=4, head_dim=12, max_position_embeddings=64, moe_intermediate_size=12, moe_num_experts=4, moe_k=3,
             moe_num_shared_experts=0, moe_layer_start_index=0, moe_layer_end_index=1, tie_word_embeddings=False),
    ),
    "glm4_moe_lite: MLA, the first layer dense by default, groups": (
        "glm4_moe_lite",
        dict(model_type="glm4_moe_lite", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=2,
             n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10),
    ),
    "glm4_moe_lite: mlp_layer_types, 2 shared experts, no query bottleneck": (
        "glm4_moe_lite",
        dict(model_type="glm4_moe_lite", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=4, num_experts_per_tok=2,
             n_shared_experts=2, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10,
             mlp_layer_types=["sparse", "dense", "sparse"]),
    ),
    "phimoe: SparseMixer, biased attention and head, input jitter": (
        "phimoe",
        dict(model_type="phimoe", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, num_local_experts=6, num_experts_per_tok=2, attention_bias=True,
             lm_head_bias=True, input_jitter_noise=0.01, router_jitter_noise=0.01, sliding_window=64),
    ),
    "phimoe: SparseMixer, no biases, no jitter": (
        "phimoe",
        dict(model_type="phimoe", vocab_size=101, hidden_size=32, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=1, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2),
    ),
    "dots1: one dense layer, groups, 2 shared, biased attention": (
        "dots1",
        dict(model_type="dots1", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=2,
             n_shared_experts=2, first_k_dense_replace=1, n_group=2, topk_group=1, attention_bias=True, norm_topk_prob=True,
             max_window_layers=3),
    ),
    "dots1: every layer experts, head_dim of its own": (
        "dots1",
        dict(model_type="dots1", vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, head_dim=12, max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=4,
             num_experts_per_tok=3, n_shared_experts=1, sliding_window=None),
    ),
}  # fmt: skip

SHAPES = [(2, 7), (1, 3)]


@pytest.mark.parametrize("case", list(TINY))
def test_the_config_is_read_by_its_family(case):
    family, config = TINY[case]
    assert Model.from_config(config).spec.family == family


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    check_tiny_params(TINY[case][1])


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case][1]
    check_forward_flops(eager(config), build(config, eager_experts=True), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_cache_bytes_equal_the_tensors_transformers_keeps(case):
    config = TINY[case][1]
    check_cache_bytes(config, build(config, eager_experts=True), 5)


@pytest.mark.parametrize("case", list(TINY))
def test_saved_activations_equal_what_eager_pytorch_keeps(case):
    check_saved_activations(TINY[case][1], torch.float32)


@pytest.mark.parametrize("case", [c for c in TINY if c.startswith("phimoe")])
def test_sparsemixer_saved_activations_in_bfloat16(case):
    """SparseMixer's softmaxes and multipliers are kept in the logits' dtype, its masks one byte each."""
    check_saved_activations(TINY[case][1], torch.bfloat16)


REFUSED = {
    "olmoe clip_qkv": (dict(model_type="olmoe", clip_qkv=8.0), "clip_qkv"),
    "phimoe window shorter than the context": (dict(model_type="phimoe", sliding_window=4096, max_position_embeddings=131072), "sliding_window"),
    "phimoe tied head": (dict(model_type="phimoe", tie_word_embeddings=True), "tie_word_embeddings"),
    "phimoe three experts per token": (dict(model_type="phimoe", num_experts_per_tok=3), "num_experts_per_tok"),
    "dots1 sliding layers": (dict(model_type="dots1", n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, max_window_layers=30), "max_window_layers"),
    "ernie4_5_moe use_bias (the head's bias)": (dict(model_type="ernie4_5_moe", use_bias=True), "use_bias"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_is_not_modelled_is_refused_by_name(case):
    config, word = REFUSED[case]
    with pytest.raises(SymformError, match=word):
        Model.from_config(config).evaluate("params")


# DBRX: its sizes in the attn_config and ffn_config sub-configs; transformers' DbrxAttention reads rope_theta there
DBRX = {
    "clip_qkv, p-norm weights, jitter of width 0 (still noise), top-2 of 4": dict(
        model_type="dbrx", vocab_size=101, d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
        attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 12, "moe_num_experts": 4, "moe_top_k": 2, "moe_normalize_expert_weights": 1.0, "moe_jitter_eps": 0},
    ),
    "router jitter, raw weights, top-3 of 6": dict(
        model_type="dbrx", vocab_size=101, d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
        attn_config={"kv_n_heads": 1, "clip_qkv": 6.0, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 12, "moe_num_experts": 6, "moe_top_k": 3, "moe_normalize_expert_weights": None, "moe_jitter_eps": 0.01},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(DBRX))
def test_dbrx_parameters_flops_and_cache_equal_transformers(case):
    """FLOPs counted with autograd on: DbrxExperts hands views of the fused expert weights to a submodule, which
    FlopCounterMode's module tracker cannot hook under no_grad."""
    from torch.utils.flop_counter import FlopCounterMode

    from oracle import input_ids

    config = DBRX[case]
    assert Model.from_config(config).spec.family == "dbrx"
    check_tiny_params(config)
    module = build(config, eager_experts=True)
    with FlopCounterMode(display=False) as counter:
        module(input_ids=input_ids(config, 2, 7))
    assert eager(config).evaluate("forward_flops", batch=2, seq=7) == counter.get_total_flops()
    check_cache_bytes(config, module, 5)


@pytest.mark.parametrize("case", list(DBRX))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dbrx_saved_activations_equal_what_eager_pytorch_keeps(case, dtype):
    """The clamp keeps the fused projection's output, the router's softmax stays in the activations' dtype, the
    p-norm keeps the picked weights and their norm, the router's jitter its noise."""
    check_saved_activations(DBRX[case], dtype)


def test_dbrx_tied_head_is_refused_as_transformers_refuses_it():
    with pytest.raises(SymformError, match="tie_word_embeddings"):
        Model.from_config(dict(model_type="dbrx", tie_word_embeddings=True)).evaluate("params")
