"""Hunyuan dense (hunyuan_v1_dense) against transformers' own model: parameters on the meta device, forward FLOPs
(the counter sees the matrix products only), the KV cache, and what training keeps under the eager accounting. Its
attention normalises queries and keys per head after the rotation, not before as Qwen3's does: no count changes
with the order but the saved tensors, which the saved-activation check compares byte for byte."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from family_checks import check_saved_activations, check_tiny_params  # noqa: E402
from oracle import TINY, build, check_cache_bytes, check_forward_flops, check_train_step_flops  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

HUNYUAN = dict(TINY, model_type="hunyuan_v1_dense", head_dim=24)  # heads of 24, not hidden/heads (16)
HUNYUAN_TIED_BIASED = dict(TINY, model_type="hunyuan_v1_dense", head_dim=16, tie_word_embeddings=True, attention_bias=True, num_key_value_heads=4)
CONFIGS = {"hunyuan": HUNYUAN, "hunyuan-tied-biased": HUNYUAN_TIED_BIASED}


@pytest.mark.parametrize("case", CONFIGS)
def test_parameters_equal_numel(case):
    check_tiny_params(CONFIGS[case])


@pytest.mark.parametrize("case", CONFIGS)
def test_forward_and_train_flops_equal_the_counter(case):
    config = CONFIGS[case]
    model = build(config)
    check_forward_flops(Model.from_config(config).with_conventions(training=0), model, config, [(2, 7), (1, 3), (1, 1)])
    check_train_step_flops(Model.from_config(config), build(config).train(), config)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("seq", (3, 9))
def test_cache_bytes_equal_the_tensors_transformers_keeps(case, seq):
    check_cache_bytes(CONFIGS[case], build(CONFIGS[case]), seq)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype):
    check_saved_activations(CONFIGS[case], dtype)


def test_a_config_without_head_dim_is_refused_in_one_line():
    """transformers' config class leaves head_dim null when absent and its attention cannot be built then."""
    from checks import one_line_error

    one_line_error(symform.ConfigError, lambda: Model.from_config({k: v for k, v in HUNYUAN.items() if k != "head_dim"}), "head_dim")


# Hunyuan MoE: 4 experts (2 a token) beside a shared MLP, every layer
HUNYUAN_MOE = dict(TINY, model_type="hunyuan_v1_moe", head_dim=16, num_experts=4, moe_topk=2, intermediate_size=32)
MOE_CONFIGS = {"hunyuan-moe": HUNYUAN_MOE, "hunyuan-moe-tied-gqa1": dict(HUNYUAN_MOE, tie_word_embeddings=True, num_key_value_heads=1, moe_topk=3)}


@pytest.mark.parametrize("case", MOE_CONFIGS)
def test_moe_parameters_equal_numel(case):
    check_tiny_params(MOE_CONFIGS[case])


@pytest.mark.parametrize("case", MOE_CONFIGS)
def test_moe_forward_flops_and_cache_equal_the_counter(case):
    """The fp32 router is one more matrix product the counter counts like any other."""
    config = MOE_CONFIGS[case]
    model = build(config, eager_experts=True)
    check_forward_flops(Model.from_config(config).with_conventions(training=0), model, config, [(2, 7), (1, 3), (1, 1)])
    check_cache_bytes(config, model, 5)


@pytest.mark.parametrize("case", MOE_CONFIGS)
def test_moe_saved_activations_in_float32(case):
    check_saved_activations(MOE_CONFIGS[case], torch.float32)


def test_per_layer_lists_of_expert_settings_are_refused_in_one_line():
    """Hunyuan-A13B's published config writes moe_topk per layer; symform reads one value for every layer."""
    from checks import one_line_error

    one_line_error(symform.ConfigError, lambda: Model.from_config(dict(HUNYUAN_MOE, moe_topk=[2, 2])), "moe_topk")
