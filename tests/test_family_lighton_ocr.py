"""Oracle: the lighton_ocr family (LightOnOCR) against transformers' LightOnOcrForConditionalGeneration: parameters of
the whole class (Qwen3, Pixtral's tower, Mistral 3's projector without biases) on the meta device and on tiny
instances, the text-only forward's FLOPs (eager attention, FlopCounterMode), the cache, and what a text-only
training step keeps; images and a sliding window are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=160)
VISION = dict(model_type="pixtral", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, patch_size=4)
CONFIG = dict(model_type="lighton_ocr", image_token_id=150, text_config=TEXT, vision_config=VISION)


@pytest.mark.parametrize("config", [
    {"model_type": "lighton_ocr"}, {"model_type": "lighton_ocr", "tie_word_embeddings": False},
    {"model_type": "lighton_ocr", "text_config": {"model_type": "qwen3"}, "vision_config": {"model_type": "pixtral"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """Without sub-configs LightOnOCR-1B's sizes; given ones, Qwen3Config's and PixtralVisionConfig's defaults."""
    check_defaults(config, "lighton_ocr")


@pytest.mark.parametrize("config", [CONFIG, dict(CONFIG, tie_word_embeddings=False, spatial_merge_size=1)], ids=["tied", "untied, no merge"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_encoder", "vision_projection")})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_text_saved_activations_equal_what_eager_pytorch_keeps():
    check_text_saved_activations(CONFIG, torch.float32)


def test_images_and_a_sliding_window_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
    windowed = dict(CONFIG, text_config=dict(TEXT, use_sliding_window=True, sliding_window=4))
    one_line_error(ConfigError, lambda: Model.from_config(windowed).evaluate("params"), "use_sliding_window")
