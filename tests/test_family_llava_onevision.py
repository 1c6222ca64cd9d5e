"""Oracle: the llava_onevision family (LLaVA-OneVision) against transformers' LlavaOnevisionForConditionalGeneration:
parameters of the whole class (Qwen2 language model, SigLIP tower with or without its pooling head, LLaVA's
projector, image_newline) on the meta device and on tiny instances, the text-only forward's FLOPs (eager attention,
FlopCounterMode), the cache, and what a text-only training step keeps; images are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(model_type="qwen2", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=160)
VISION = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
CONFIG = dict(model_type="llava_onevision", image_token_index=150, video_token_index=151, text_config=TEXT, vision_config=VISION)
HEADLESS = dict(CONFIG, tie_word_embeddings=True, multimodal_projector_bias=False, vision_config=dict(VISION, vision_use_head=False))


@pytest.mark.parametrize("config", [
    {"model_type": "llava_onevision"},
    {"model_type": "llava_onevision", "text_config": {"model_type": "qwen2"}, "vision_config": {"model_type": "siglip_vision_model"}},
    {"model_type": "llava_onevision", "vision_config": {"model_type": "siglip_vision_model", "vision_use_head": False}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """Without a vision_config, SigLIP-so400m without its head; with one, SiglipVisionConfig's defaults, head built."""
    check_defaults(config, "llava_onevision")


@pytest.mark.parametrize("config", [CONFIG, HEADLESS], ids=["pooling head built", "no head, tied, no projector biases"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector"), "image_newline": ("image_newline",)})
    check_text_forward_flops(config)
    check_text_cache(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_text_saved_activations_equal_what_eager_pytorch_keeps(dtype):
    check_text_saved_activations(CONFIG, dtype)


def test_images_and_a_sliding_window_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "anyres", "images")
    windowed = dict(CONFIG, text_config=dict(TEXT, use_sliding_window=True, sliding_window=4))
    one_line_error(ConfigError, lambda: Model.from_config(windowed).evaluate("params"), "use_sliding_window")
