"""Oracle: the video_llava family (Video-LLaVA) against transformers' VideoLlavaForConditionalGeneration: parameters of
the whole class (Llama, an image tower with LLaVA's projector, a video tower of the same sizes) on the meta device
and on tiny instances, the text-only forward's FLOPs (eager attention, FlopCounterMode), the cache, and what a
text-only training step keeps; images are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402
from test_family_llava_next import TEXT, VISION  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CONFIG = dict(model_type="video_llava", image_token_index=150, video_token_index=151, text_config=TEXT, vision_config=VISION)


@pytest.mark.parametrize("config", [
    {"model_type": "video_llava"}, {"model_type": "video_llava", "multimodal_projector_bias": False},
    {"model_type": "video_llava", "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "clip_vision_model"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """Without a vision_config, CLIP ViT-L/14 at 224 pixels (LLaVA 1.5's is at 336), twice."""
    check_defaults(config, "video_llava")


def test_tiny_parameters_flops_and_cache_equal_pytorch():
    check_tiny_params(CONFIG, {"visual": ("image_tower", "multi_modal_projector", "video_tower")})
    check_text_forward_flops(CONFIG)
    check_text_cache(CONFIG)


def test_text_saved_activations_equal_what_eager_pytorch_keeps():
    check_text_saved_activations(CONFIG, torch.float32)


def test_images_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
