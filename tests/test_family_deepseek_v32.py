"""Oracle: DeepSeek-V3.2 (deepseek_v32: DeepSeek-V3 plus DeepSeek Sparse Attention) against transformers' own model.

Parameters: the published config on the meta device (numel() of the whole class), and
the published checkpoint's element count rebuilt by hand from its tensor listing.
FLOPs: tiny float32 instances, eager attention, eager experts, counted by
FlopCounterMode. transformers' eager attention does not gather the index_topk keys
the indexer selects: it scatters them into a boolean mask over the whole past + seq
key range, fills the attention mask's unselected entries, and multiplies the dense
score map. So the counter sees dense attention products, which symform counts with
windowed = 0; symform's default (windowed = 1) counts what a sparse kernel computes,
min(past + seq, index_topk) keys per query, and the difference is checked by hand
arithmetic below. The indexer's own scores (every query against every key,
index_n_heads heads of index_head_dim) are dense in both, and transformers runs the
indexer under torch.no_grad: no backward FLOPs, nothing kept. Cache: the bytes of
every tensor transformers' cache holds (MLA's latent and rotary key, and the
indexer's key of every token).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, build_for_training, check_cache_bytes, check_forward_flops, check_saved_config_reads_the_same, check_train_step_flops, count_forward, input_ids, meta_params, preset_dict, saved_for_backward  # noqa: E402
from family_checks import check_tiny_params, eager  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(
    model_type="deepseek_v32", vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=4,
    max_position_embeddings=64, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
    n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, moe_intermediate_size=12,
)

# tiny instances; index_topk below and above the test sequences
TINY = {
    "2 layers, 1 dense, top-3 keys": dict(BASE, num_hidden_layers=2, first_k_dense_replace=1, index_n_heads=4, index_head_dim=8, index_topk=3),
    "3 layers, mlp_layer_types with a dense layer in the middle, top-64 keys, biases, 2 shared experts": dict(
        BASE, num_hidden_layers=3, first_k_dense_replace=0, mlp_layer_types=["sparse", "dense", "sparse"], index_n_heads=2,
        index_head_dim=4, index_topk=64, attention_bias=True, n_shared_experts=2, norm_topk_prob=False,
    ),
    "2 layers, no dense layer, top-1 key, wide indexer": dict(BASE, num_hidden_layers=2, first_k_dense_replace=0, index_n_heads=6, index_head_dim=12, index_topk=1),
}  # fmt: skip

SHAPES = [(2, 7), (1, 3), (1, 1)]  # seq above and below the tiny index_topk values, and one token
CACHE_SEQS = (3, 9)


def test_published_parameters_equal_numel():
    config = preset_dict("deepseek-v3.2")
    model = Model.from_config(config)
    assert model.spec.family == "deepseek_v32"
    assert model.evaluate("params") == meta_params(config) == 671_877_929_216


def test_published_checkpoint_elements_rebuilt_by_hand():
    """The published DeepSeek-V3.2 safetensors hold 685,396,921,376 elements (formulas/presets/index.toml).
    Beyond the model transformers builds they hold the multi-token-prediction layer 61 (include_mtp = 1, which
    shares the output head), that layer's own copies of the embedding and the output head, the routers'
    e_score_correction_bias buffers (59 expert layers: 3-60 and 61) and a float32 weight_scale_inv per 128 x 128
    block of every FP8 weight; the scale shapes below are the listing's."""
    config = preset_dict("deepseek-v3.2")
    with_mtp = Model.from_config(config).with_arguments(include_mtp=1).evaluate("params")
    own_embedding_and_head = 2 * 129280 * 7168
    bias_buffers = 59 * 256
    dense_mlp_scales = 3 * (56 * 144 + 144 * 56 + 144 * 56)
    attention_scales = 62 * (1 * 56 + 64 * 12 + 5 * 56 + 256 * 4 + 56 * 128 + 12 * 56 + 192 * 12)  # wk wq_b kv_a kv_b o q_a q_b
    expert_scales = 59 * (256 + 1) * 3 * (56 * 16)  # routed and shared experts: down, gate, up
    total = with_mtp + own_embedding_and_head + bias_buffers + dense_mlp_scales + attention_scales + expert_scales
    assert total == 685_396_921_376


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    check_tiny_params(TINY[case])


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter(case):
    config = TINY[case]
    check_forward_flops(eager(config), build(config, eager_experts=True), config, SHAPES)


@pytest.mark.parametrize("case", list(TINY))
def test_the_indexer_does_what_the_paper_says(case):
    """The counter's FLOPs inside each layer's indexer module against hand arithmetic from the indexer's
    definition (DeepSeek-V3.2-Exp §2.1): three projections, then index_n_heads scores of index_head_dim per
    (query, key) pair and their weighted sum over heads, every key of the span."""
    config = TINY[case]
    model = build(config, eager_experts=True)
    batch, seq = 2, 7
    counts = count_forward(model, input_ids(config, batch, seq)).get_flop_counts()
    indexers = {name: sum(ops.values()) for name, ops in counts.items() if name.endswith("self_attn.indexer")}
    assert len(indexers) == config["num_hidden_layers"]
    heads, width, d, q = config["index_n_heads"], config["index_head_dim"], config["hidden_size"], config["q_lora_rank"]
    by_hand = 2 * batch * seq * (q * heads * width + d * width + d * heads + heads * width * seq + heads * seq)
    assert set(indexers.values()) == {by_hand}


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter(case):
    """The counter's backward is two matrix products per forward one, none for the indexer (torch.no_grad)."""
    config = TINY[case]
    check_train_step_flops(eager(config), build(config, eager_experts=True), config)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize(("batch", "seq", "past"), [(2, 7, 0), (1, 1, 40), (3, 5, 9)])
def test_a_sparse_kernel_counts_min_span_topk_keys_per_query(case, batch, seq, past):
    """symform's default (windowed = 1) counts the two attention products over min(past + seq, index_topk) keys
    per query; eager attention (windowed = 0, the counter above) over past + seq. The difference, by hand:
    2 FLOPs per multiply-add, every layer, batch x heads x seq queries, the keys left out, d_qk + d_v per key."""
    config = TINY[case]
    sparse = Model.from_config(config).evaluate("forward_flops", batch=batch, seq=seq, past=past)
    dense = eager(config).evaluate("forward_flops", batch=batch, seq=seq, past=past)
    span = past + seq
    left_out = span - min(span, config["index_topk"])
    d_qk, d_v = config["qk_nope_head_dim"] + config["qk_rope_head_dim"], config["v_head_dim"]
    assert dense - sparse == 2 * config["num_hidden_layers"] * batch * config["num_attention_heads"] * seq * left_out * (d_qk + d_v)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", CACHE_SEQS)
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    check_cache_bytes(config, build(config, eager_experts=True), seq)


def test_the_indexer_key_cache_by_hand():
    """Per cached token and layer: MLA's kv_lora_rank latent and qk_rope_head_dim rotary key, and the indexer's
    one key of index_head_dim: at kv_bytes under the eager accounting (transformers' DynamicIndexedLayer.indexer_keys),
    one byte a value by default (serving engines' FP8 keys; their fp32 scale per 128 values is none at 8 values)."""
    config = TINY["2 layers, 1 dense, top-3 keys"]
    latent, index = config["kv_lora_rank"] + config["qk_rope_head_dim"], config["index_head_dim"]
    eager = Model.from_config(config, accounting="eager").with_conventions(kv_bytes=2)
    assert eager.evaluate("kv_cache", batch=3, seq=5, past=6) == 2 * 3 * 11 * 2 * (latent + index)
    engines = Model.from_config(config).with_conventions(kv_bytes=2)
    assert engines.evaluate("kv_cache", batch=3, seq=5, past=6) == 2 * 3 * 11 * (2 * latent + index)


@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
def test_saved_activations_equal_what_eager_pytorch_keeps(dtype, act_bytes):
    config = TINY["2 layers, 1 dense, top-3 keys"]
    batch, seq = 2, 8
    kept = saved_for_backward(build_for_training(config, dtype, experts_implementation="eager"), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


def test_a_config_without_the_query_bottleneck_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refusal:
        Model.from_config(dict(TINY["2 layers, 1 dense, top-3 keys"], q_lora_rank=None))
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("case", list(TINY))
def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(case, tmp_path):
    """transformers writes mlp_layer_types (and layer_types) out in full; the counts must not move."""
    config = TINY[case]
    check_saved_config_reads_the_same(config, tmp_path, ("params", "forward_flops", "saved_activations", "kv_cache"))
