"""Oracle: the deepseek_vl family (DeepSeek-VL, transformers' format) against transformers'
DeepseekVLForConditionalGeneration: parameters of the whole class (Llama, SigLIP's tower with or without its pooling
head, the two-layer aligner) on the meta device and on tiny instances, the text-only forward's FLOPs (eager
attention, FlopCounterMode), the cache, and what a text-only training step keeps; images are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402
from test_family_llava_next import TEXT  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

VISION = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
CONFIG = dict(model_type="deepseek_vl", image_token_id=150, text_config=TEXT, vision_config=VISION)


@pytest.mark.parametrize("config", [
    {"model_type": "deepseek_vl"}, {"model_type": "deepseek_vl", "tie_word_embeddings": False},
    {"model_type": "deepseek_vl", "vision_config": {"model_type": "siglip_vision_model", "vision_use_head": False}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    check_defaults(config, "deepseek_vl")


@pytest.mark.parametrize("config", [CONFIG, dict(CONFIG, tie_word_embeddings=False, vision_config=dict(VISION, vision_use_head=False))], ids=["head, tied", "no head, untied"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_model", "aligner")})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_text_saved_activations_equal_what_eager_pytorch_keeps():
    check_text_saved_activations(CONFIG, torch.float32)


def test_images_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
