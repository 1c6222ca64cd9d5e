"""Oracle: the qwen3_5_moe family (the Qwen3.5 mixtures of experts) against transformers' Qwen3_5MoeForCausalLM.

The configs are the multimodal wrapper's: the language model's fields live in text_config.
Parameters: numel() of the whole model. FLOPs: tiny instances (float32, eager attention,
eager experts, transformers' torch Gated DeltaNet path) counted by FlopCounterMode, with the
counter's two known mistakes put right as in test_family_recurrent.py (it does not count the
chunked scan's triangular solves, and counts a depthwise convolution's weight gradient as a
dense one). Cache: the bytes of every key, value, convolution window and state matrix
transformers' cache holds after a forward.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import TINY, build, build_for_training, check_saved_config_reads_the_same, hf_config, count_forward, count_forward_backward, input_ids, meta_params, saved_for_backward  # noqa: E402
from test_family_recurrent import cache_after, check_decode_step_flops, conv_forward, mixer_shapes, tensors_bytes, text, uncounted_solves  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

MIXERS = dict(linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4)
EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, shared_expert_intermediate_size=16)

CONFIGS = {
    "1 linear : 1 full from layer_types, 2 value heads per key head": dict(
        model_type="qwen3_5_moe",
        text_config=dict(TINY, head_dim=16, linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"], **MIXERS, **EXPERTS),
    ),
    "3 linear : 1 full from the interval, tied head, q/k/v/o bias, every expert chosen": dict(
        model_type="qwen3_5_moe",
        text_config=dict(
            TINY, num_hidden_layers=4, head_dim=24, linear_num_value_heads=2, tie_word_embeddings=True, attention_bias=True,
            **MIXERS, **(EXPERTS | {"num_experts": 3, "num_experts_per_tok": 3}),
        ),
    ),
}  # fmt: skip


def tiny_model(config: dict):
    return build(config, eager_experts=True)


@pytest.mark.parametrize("case", CONFIGS)
def test_family_is_qwen3_5_moe(case):
    assert Model.from_config(CONFIGS[case]).spec.family == "qwen3_5_moe"


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel(case):
    config = CONFIGS[case]
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in tiny_model(config).parameters())


def test_the_defaults_are_transformers_defaults_and_the_size_they_are_named_for():
    """A config naming only the model type costs what Qwen3_5MoeConfig's defaults build on the meta device; its
    docstring calls them Qwen3.5-35B-A3B style: 35 billion parameters, 3 billion active."""
    config = {"model_type": "qwen3_5_moe"}
    model = Model.from_config(config)
    assert model.evaluate("params") == meta_params(config)
    assert round(model.evaluate("params"), -9) == 35 * 10**9
    assert round(model.evaluate("active_params"), -9) == 3 * 10**9


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 5), (1, 70)])
def test_forward_flops_equal_the_counter_but_for_the_triangular_solves(case, batch, seq):
    config = CONFIGS[case]
    counted = count_forward(tiny_model(config), input_ids(text(config), batch, seq)).get_total_flops()
    model = Model.from_config(config).with_conventions(training=0)
    assert model.evaluate("forward_flops", batch=batch, seq=seq) - uncounted_solves(config, batch, seq) == counted


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 70)])
def test_train_step_flops_equal_the_counter_once_its_mistakes_are_named(case, batch, seq):
    config = CONFIGS[case]
    counted = count_forward_backward(tiny_model(config).train(), input_ids(text(config), batch, seq)).get_total_flops()
    channels = mixer_shapes(config)["channels"]
    # backward: one more transposed solve per solve; the depthwise weight gradient counted channels times
    expected = counted + 2 * uncounted_solves(config, batch, seq) - (channels - 1) * conv_forward(config, batch, seq)
    assert Model.from_config(config).evaluate("train_step_flops", batch=batch, seq=seq) == expected


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 2), (3, 70)])
def test_cache_and_state_bytes_equal_the_tensors_transformers_keeps(case, batch, seq):
    config = CONFIGS[case]
    cache = cache_after(tiny_model(config), config, batch, seq)
    keys_values = tensors_bytes(t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None)))
    states = tensors_bytes(t for layer in cache.layers for t in (*getattr(layer, "conv_states", {}).values(), *getattr(layer, "recurrent_states", {}).values()))
    # float32 model; the state is fp32 by default, and transformers' conv windows hold conv_kernel inputs (eager)
    model = Model.from_config(config, accounting="eager").with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=batch, seq=seq) == keys_values > 0
    assert model.evaluate("recurrent_state", batch=batch, seq=seq) == states > 0


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, past", [(2, 9), (1, 70)])
def test_a_decode_step_takes_the_recurrent_update(case, batch, past):
    """One token after a cached prefix: the conv updates its window, the delta rule takes one element-wise step."""
    config = CONFIGS[case]
    check_decode_step_flops(tiny_model(config), config, batch, past)


@pytest.mark.parametrize("case", CONFIGS)
def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(case, tmp_path):
    """save_pretrained writes the text config's every field (layer_types spelled out) inside text_config, and a
    vision_config at its defaults beside it: `architectures` naming the causal LM keeps the checkpoint text-only."""
    config = dict(CONFIGS[case], architectures=["Qwen3_5MoeForCausalLM"])
    check_saved_config_reads_the_same(config, tmp_path, ("params", "forward_flops", "kv_cache", "recurrent_state"))


def test_a_causal_lm_checkpoint_with_a_vision_config_is_text_only():
    """transformers' Qwen3_5MoeForCausalLM builds no vision tower, whatever vision_config its config keeps."""
    config = dict(CONFIGS[next(iter(CONFIGS))], vision_config={}, architectures=["Qwen3_5MoeForCausalLM"])
    with torch.device("meta"):
        real = transformers.AutoModelForCausalLM.from_config(hf_config(config))
    assert type(real).__name__ == "Qwen3_5MoeForCausalLM"
    assert Model.from_config(config).spec.family == "qwen3_5_moe"
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in real.parameters())


def test_the_router_loss_is_refused_in_one_line():
    config = dict(model_type="qwen3_5_moe", text_config=dict(output_router_logits=True))
    with pytest.raises(ConfigError, match="output_router_logits"):
        Model.from_config(config)


# the shape Qwen3_5MoeTextConfig's defaults are named for (Qwen3.5-35B-A3B style; no published config.json is
# bundled), its layer kinds spelled out as checkpoints write them; check shrinks the sizes
SHAPED = dict(
    model_type="qwen3_5_moe",
    text_config=dict(
        hidden_size=2048, num_hidden_layers=40, vocab_size=248320, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(40)],
    ),
)  # fmt: skip


def test_check_agrees_with_the_real_module():
    """symform check builds the shrunk model and compares every part: parameters per module, forward and backward
    FLOPs, KV cache, recurrent state and saved activations agree to the byte."""
    from symform.analysis.memory.oracle_check import check

    report = check(Model.from_config(SHAPED, name="Qwen3.5-35B-A3B-shaped"))
    assert report.differences == []
    assert {"params", "forward_flops", "backward_flops", "kv_cache", "recurrent_state", "saved_activations"} <= {row.quantity for row in report.rows}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("batch", "seq"), [(2, 8), (1, 64)])
def test_saved_activations_equal_what_eager_pytorch_keeps(dtype, batch, seq):
    """What the mixers keep (tests/test_activations.py's Gated DeltaNet cases), the routed and shared experts
    and the (1 + w) fp32 norms (rms_norm(form=offset)), to the byte: within one 64-token chunk, and exactly one."""
    config = CONFIGS["1 linear : 1 full from layer_types, 2 value heads per key head"]
    kept = saved_for_backward(build_for_training(config, dtype, experts_implementation="eager"), input_ids(text(config), batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": 4 if dtype == torch.float32 else 2, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept
