"""Oracle: the llava_next_video family (LLaVA-NeXT-Video) against transformers' LlavaNextVideoForConditionalGeneration:
parameters of the whole class (LLaVA-NeXT's and a weightless frame pooler) on the meta device and on tiny
instances, the text-only forward's FLOPs (eager attention, FlopCounterMode) and the cache; a learned pooling
convolution, images and videos are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_tiny_params  # noqa: E402
from test_family_llava_next import TEXT, VISION  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CONFIG = dict(model_type="llava_next_video", image_token_index=150, video_token_index=151, text_config=TEXT, vision_config=VISION)


@pytest.mark.parametrize("config", [
    {"model_type": "llava_next_video"}, {"model_type": "llava_next_video", "spatial_pool_mode": "max"},
    {"model_type": "llava_next_video", "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "clip_vision_model"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    check_defaults(config, "llava_next_video")


@pytest.mark.parametrize("config", [CONFIG, dict(CONFIG, tie_word_embeddings=True, spatial_pool_mode="max")], ids=["average", "max, tied"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector"), "image_newline": ("image_newline",)})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_a_pooling_convolution_and_images_are_refused_in_one_line():
    one_line_error(ConfigError, lambda: Model.from_config(dict(CONFIG, spatial_pool_mode="conv")).evaluate("params"), "spatial_pool_mode")
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
