"""Oracle: the vipllava family (ViP-LLaVA) against transformers' VipLlavaForConditionalGeneration: parameters of the
whole class (LLaVA 1.5's CLIP tower, a projector over several layers' concatenated tokens) on the meta device and
on tiny instances, the text-only forward's FLOPs (eager attention, FlopCounterMode), the cache, and what a text-only
training step keeps; images are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=160)
VISION = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=2, image_size=16, patch_size=4)
CONFIG = dict(model_type="vipllava", image_token_index=150, vision_feature_layer=[-2, -3, 1], text_config=TEXT, vision_config=VISION)
TIED = dict(CONFIG, tie_word_embeddings=True, vision_feature_layer=[-1])


@pytest.mark.parametrize("config", [
    {"model_type": "vipllava"}, {"model_type": "vipllava", "vision_feature_layer": [-2, -1]},
    {"model_type": "vipllava", "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "clip_vision_model"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """transformers' default reads five layers (-2, -5, -8, -11 and 6): the projector's input is five towers wide."""
    check_defaults(config, "vipllava")


@pytest.mark.parametrize("config", [CONFIG, TIED], ids=["three layers read", "one layer read, tied"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector")})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_the_projector_reads_the_listed_layers_concatenated():
    """A LayerNorm over 3·32 (weight and bias) and linear_1 from 3·32 to 64 with a bias: 2·96 + 96·64 + 64."""
    parts = Model.from_config(CONFIG).evaluate_breakdown("params", depth=2)
    assert parts["visual/projector_in"] == 2 * 96 + 96 * 64 + 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_text_saved_activations_equal_what_eager_pytorch_keeps(dtype):
    check_text_saved_activations(CONFIG, dtype)


def test_images_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "vision_feature_layer", "images")
