"""Oracle: the Llama 4 text stack (llama4_text) against transformers' Llama4ForCausalLM.

Parameters: numel() of tiny instances. FLOPs: tiny instances (float32, eager
attention) counted by FlopCounterMode, whose chunked layers multiply the full
seq x seq score map and mask it, so symform runs with windowed = 0. The
counter counts only matrix products; symform's element-wise work is off by
default. transformers' Llama4TextExperts runs EVERY expert on every token (the
unchosen ones with a zero sigmoid score scaling their input) as one bmm over all
experts, so the counter sees n_experts experts per token where a routed engine
runs top_k; symform counts the top_k, and the tests assert the difference, 3
projections of d_model x d_ff_expert per extra expert, exactly. Cache: the bytes
of every tensor transformers' cache holds after a forward, at a sequence shorter
and one longer than the chunk.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build, build_for_training, cached_bytes, check_saved_config_reads_the_same, count_forward, count_forward_backward, global_counts, input_ids, meta_params, saved_for_backward  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BASE = dict(
    model_type="llama4_text", vocab_size=101, hidden_size=32, intermediate_size=24, intermediate_size_mlp=40,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64, attention_chunk_size=4,
)  # fmt: skip

# tiny instances: 4 layers with layer 3 NoPE (no_rope_layer_interval 4), or 2 with layer 1 NoPE
TINY = {
    "Scout-like: every layer experts, 3 experts top-1, qk-norm, temperature": dict(BASE, num_hidden_layers=4, num_local_experts=3),
    "Maverick-like: experts every 2nd layer, no qk-norm, top-2": dict(
        BASE, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, interleave_moe_layer_step=2, use_qk_norm=False,
    ),
    "explicit moe_layers, NoPE every 2nd layer, tied head, attention bias, chunk 6": dict(
        BASE, num_hidden_layers=4, num_local_experts=2, moe_layers=[0, 3], no_rope_layer_interval=2, tie_word_embeddings=True,
        attention_bias=True, attention_chunk_size=6,
    ),
    "no chunking (attention_chunk_size null), no temperature, MQA": dict(
        BASE, num_hidden_layers=2, num_local_experts=2, num_key_value_heads=1, attention_chunk_size=None, attn_temperature_tuning=False,
    ),
    # transformers' Llama4TextConfig.no_rope_layers: 1 a RoPE (chunked) layer, 0 a NoPE one; with experts every 2nd
    # layer, the four layers are one of each kind: NoPE dense, RoPE experts, RoPE dense, NoPE experts
    "explicit no_rope_layers [0, 1, 1, 0], experts every 2nd layer": dict(
        BASE, num_hidden_layers=4, num_local_experts=2, interleave_moe_layer_step=2, no_rope_layers=[0, 1, 1, 0],
    ),
    "explicit no_rope_layers [1, 0, 1, 1], explicit moe_layers, no chunking": dict(
        BASE, num_hidden_layers=4, num_local_experts=2, moe_layers=[1, 2], no_rope_layers=[1, 0, 1, 1], attention_chunk_size=None,
    ),
}  # fmt: skip

# The text_config sizes of the published checkpoints (huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct and
# Llama-4-Maverick-17B-128E-Instruct, config.json; their attn_temperature_tuning is 4, which transformers 5 refuses
# as not a bool, so it is left at its default here; symform reads the 4 as on, tested below), and Meta's model card: 17B active parameters of 109B and 400B
# total for Scout and Maverick, the vision tower included.
PUBLISHED_TEXT = {
    "Llama-4-Scout-17B-16E": dict(
        model_type="llama4_text", hidden_size=5120, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        intermediate_size=8192, intermediate_size_mlp=16384, vocab_size=202048, num_local_experts=16, num_experts_per_tok=1,
        interleave_moe_layer_step=1, attention_chunk_size=8192, use_qk_norm=True, tie_word_embeddings=False, max_position_embeddings=10485760,
    ),
    "Llama-4-Maverick-17B-128E": dict(
        model_type="llama4_text", hidden_size=5120, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        intermediate_size=8192, intermediate_size_mlp=16384, vocab_size=202048, num_local_experts=128, num_experts_per_tok=1,
        interleave_moe_layer_step=2, attention_chunk_size=8192, use_qk_norm=False, tie_word_embeddings=False, max_position_embeddings=1048576,
    ),
}  # fmt: skip
# (total without the vision tower, below the card's total; active, which the card rounds to 17B)
CARD = {"Llama-4-Scout-17B-16E": (109e9, 17e9), "Llama-4-Maverick-17B-128E": (400e9, 17e9)}

SHAPES = [(2, 7), (1, 3), (1, 1)]  # seq above and below every tiny chunk, and one token
CACHE_SEQS = (3, 9)  # shorter and longer than every tiny chunk


def eager(config: dict) -> Model:
    return Model.from_config(config, name="tiny").with_conventions(windowed=0)


def expert_layers(model) -> int:
    return sum(1 for layer in model.model.layers if layer.is_moe_layer)


def unrouted_expert_flops(config: dict, model, tokens: int) -> int:
    """What the eager experts compute beyond the top_k a routed engine runs: n_experts - top_k experts
    per token, three d_model x d_ff_expert products (gate, up, down) of 2 FLOPs per multiply-add."""
    idle = model.config.num_local_experts - model.config.num_experts_per_tok
    return expert_layers(model) * tokens * idle * 3 * 2 * config["hidden_size"] * config["intermediate_size"]


@pytest.mark.parametrize("name", list(PUBLISHED_TEXT))
def test_published_text_stacks_equal_numel_and_the_model_card(name):
    config = PUBLISHED_TEXT[name]
    model = Model.from_config(config)
    total, active = model.evaluate("params"), model.evaluate("active_params")
    assert total == meta_params(config)
    card_total, card_active = CARD[name]
    assert card_total - 2e9 < total < card_total + 1e9  # the card's total also holds the vision tower and projector
    assert round(active / 1e9) == card_active / 1e9


@pytest.mark.parametrize("case", list(TINY))
def test_tiny_parameters_equal_numel(case):
    config = TINY[case]
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in build(config).parameters())


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_equal_the_counter_less_the_unrouted_experts(case):
    config = TINY[case]
    model, sym = build(config), eager(config)
    for batch, seq in SHAPES:
        counter = count_forward(model, input_ids(config, batch, seq))
        assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
        expected = counter.get_total_flops() - unrouted_expert_flops(config, model, batch * seq)
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == expected, (batch, seq, global_counts(counter))


@pytest.mark.parametrize("case", list(TINY))
def test_forward_and_backward_flops_equal_the_counter_less_the_unrouted_experts(case):
    """The counter's backward is two matrix products per forward one, as symform's bwd_mult = 2."""
    config = TINY[case]
    model, sym = build(config), eager(config)
    model.train()  # train mode changes no product (attention_dropout 0) but lets the gradient flow as in training
    batch, seq = 2, 7
    both = count_forward_backward(model, input_ids(config, batch, seq)).get_total_flops()
    assert sym.evaluate("train_step_flops", batch=batch, seq=seq) == both - 3 * unrouted_expert_flops(config, model, batch * seq)


@pytest.mark.parametrize("case", list(TINY))
@pytest.mark.parametrize("seq", CACHE_SEQS)
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    config = TINY[case]
    expected = cached_bytes(build(config), 2, seq)
    assert Model.from_config(config).with_conventions(kv_bytes=4).evaluate("kv_cache", batch=2, seq=seq) == expected


def test_the_eager_experts_cost_every_expert_on_every_token():
    """The difference the tests above subtract, by hand for the Scout-like case: 4 expert layers,
    2 idle experts per token, 3 products of 32 x 24."""
    config = TINY["Scout-like: every layer experts, 3 experts top-1, qk-norm, temperature"]
    model = build(config)
    assert unrouted_expert_flops(config, model, 14) == 4 * 14 * 2 * 3 * 2 * 32 * 24


def layer_kinds(model) -> list[tuple[bool, bool]]:
    """Each transformers layer's (uses rotary positions, has experts), read from the built module."""
    return [(bool(layer.self_attn.use_rope), bool(layer.is_moe_layer)) for layer in model.model.layers]


def test_an_explicit_no_rope_layers_list_makes_the_layers_transformers_builds():
    config = TINY["explicit no_rope_layers [0, 1, 1, 0], experts every 2nd layer"]
    assert layer_kinds(build(config)) == [(False, False), (True, True), (True, False), (False, True)]
    values = Model.from_config(config).values
    assert (values["n_rope_moe"], values["n_rope_dense"], values["n_nope_moe"], values["n_chunked"]) == (1, 1, 1, 2)


def test_the_config_transformers_saves_reads_the_same(tmp_path):
    """save_pretrained writes no_rope_layers, layer_types and moe_layers as lists: the same model as the interval."""
    check_saved_config_reads_the_same(TINY["Maverick-like: experts every 2nd layer, no qk-norm, top-2"], tmp_path / "interval")
    check_saved_config_reads_the_same(TINY["explicit no_rope_layers [0, 1, 1, 0], experts every 2nd layer"], tmp_path / "listed")


def test_a_no_rope_layers_list_of_the_wrong_length_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refusal:
        Model.from_config(dict(TINY["Scout-like: every layer experts, 3 experts top-1, qk-norm, temperature"], no_rope_layers=[1, 1, 0]))
    assert "\n" not in str(refusal.value) and "no_rope_layers" in str(refusal.value)


def test_metas_integer_attn_temperature_tuning_reads_as_transformers_modelling_tests_it():
    """Meta's published configs write attn_temperature_tuning: 4; Llama4TextAttention applies the temperature when
    the value is true (`if self.attn_temperature_tuning and not self.use_rope`), so 4 is on and 0 off. (transformers
    5's strict config refuses the integer, so the oracle is built with the bool it stands for.)"""
    config = TINY["Scout-like: every layer experts, 3 experts top-1, qk-norm, temperature"]
    counted = count_forward(build(config), input_ids(config, 2, 7)).get_total_flops()
    for written, meaning in ((4, True), (0, False)):
        model = Model.from_config(dict(config, attn_temperature_tuning=written)).with_conventions(count_elementwise=1)
        same = Model.from_config(dict(config, attn_temperature_tuning=meaning)).with_conventions(count_elementwise=1)
        for quantity in ("params", "forward_flops", "saved_activations"):
            assert model.evaluate(quantity, batch=2, seq=7) == same.evaluate(quantity, batch=2, seq=7)
    temperature = {v: Model.from_config(dict(config, attn_temperature_tuning=v)).with_conventions(count_elementwise=1) for v in (4, 0)}
    # on costs, in the 1 NoPE layer, one multiply per query element (14 tokens x 4 heads x 8) and the 7 positions'
    # scales, log1p(floor((pos + 1)/floor_scale))*attn_scale + 1 after the float cast: 6 operations each
    assert temperature[4].evaluate("forward_flops", batch=2, seq=7) - temperature[0].evaluate("forward_flops", batch=2, seq=7) == 14 * 4 * 8 + 7 * 6
    on = Model.from_config(dict(config, attn_temperature_tuning=4)).with_conventions(windowed=0)
    assert on.evaluate("forward_flops", batch=2, seq=7) == counted - unrouted_expert_flops(config, build(config), 14)
    with pytest.raises(ConfigError) as refusal:
        Model.from_config(dict(config, attn_temperature_tuning=-1))
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_the_query_temperature_keeps_what_eager_pytorch_keeps(dtype, act_bytes):
    """What attn_temperature_tuning adds to the saved activations: the product keeps the float32 per-position
    scales (the queries need no keeping, the scales no gradient). The eager experts keep every expert's
    activations, so the test compares the difference the temperature makes, on against off."""
    config = TINY["explicit no_rope_layers [0, 1, 1, 0], experts every 2nd layer"]
    batch, seq = 2, 7
    kept, ours = {}, {}
    for on in (True, False):
        tuned = dict(config, attn_temperature_tuning=on)
        kept[on] = saved_for_backward(build_for_training(tuned, dtype), input_ids(config, batch, seq))
        model = Model.from_config(tuned, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
        ours[on] = model.evaluate("saved_activations", batch=batch, seq=seq)
    assert ours[True] - ours[False] == kept[True] - kept[False] == 2 * seq * 4  # two NoPE layers, seq float32 scales each


def test_layer_types_read_when_they_agree_with_the_rope_pattern_and_refused_otherwise():
    """transformers writes layer_types into a saved config: the RoPE layers chunked, the NoPE ones full."""
    config = TINY["Scout-like: every layer experts, 3 experts top-1, qk-norm, temperature"]
    listed = dict(config, layer_types=["chunked_attention"] * 3 + ["full_attention"])
    assert Model.from_config(listed).evaluate("kv_cache", batch=1, seq=9) == Model.from_config(config).evaluate("kv_cache", batch=1, seq=9)
    with pytest.raises(ConfigError) as refusal:
        Model.from_config(dict(config, layer_types=["full_attention"] * 4)).evaluate("params")
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("case", ["explicit no_rope_layers [0, 1, 1, 0], experts every 2nd layer", "no chunking (attention_chunk_size null), no temperature, MQA"])
def test_a_dense_stack_keeps_what_eager_pytorch_keeps(case, dtype, act_bytes):
    """Without expert layers (moe_layers []) nothing differs from a routed engine, so the saved bytes are equal
    outright: Llama 4's eager attention runs its softmax in the scores' dtype, keeping one copy of the weights."""
    config = dict(TINY[case], moe_layers=[])
    batch, seq = 2, 7
    kept = saved_for_backward(build_for_training(config, dtype), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("case", list(TINY))
def test_saved_activations_under_the_eager_accounting_equal_what_eager_pytorch_keeps(case, dtype, act_bytes):
    """transformers' Llama4TextExperts runs every expert on every token (the hidden states repeated once per
    expert, scaled by the sigmoid scores, one batched product): the eager accounting counts what that keeps."""
    config, batch, seq = TINY[case], 2, 7
    kept = saved_for_backward(build_for_training(config, dtype), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("case", list(TINY))
def test_forward_flops_under_the_eager_accounting_equal_the_counter(case):
    """Under the eager accounting the unrouted experts the tests above subtract are counted: every expert, every token."""
    config = TINY[case]
    model, sym = build(config), Model.from_config(config, accounting="eager")
    for batch, seq in SHAPES:
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == count_forward(model, input_ids(config, batch, seq)).get_total_flops()
