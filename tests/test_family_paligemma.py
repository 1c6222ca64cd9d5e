"""Oracle: the paligemma family (PaliGemma with a Gemma language model) against transformers'
PaliGemmaForConditionalGeneration: parameters of the whole class (Gemma, SigLIP's tower with or without its pooling
head, one linear projector) on the meta device and on tiny instances, the text-only forward's FLOPs (eager
attention, FlopCounterMode), the cache, and what a text-only training step keeps; images are refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_text_saved_activations, check_tiny_params  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(model_type="gemma", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16, vocab_size=160)
VISION = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
CONFIG = dict(model_type="paligemma", image_token_index=150, projection_dim=64, text_config=TEXT, vision_config=VISION)
UNTIED = dict(CONFIG, tie_word_embeddings=False, vision_config=dict(VISION, vision_use_head=False))


@pytest.mark.parametrize("config", [
    {"model_type": "paligemma"}, {"model_type": "paligemma", "tie_word_embeddings": False},
    {"model_type": "paligemma", "text_config": {"model_type": "gemma"}, "vision_config": {"model_type": "siglip_vision_model"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """Without sub-configs PaliGemma 3B's sizes (SigLIP So400m, no pooling head); given ones, their classes' defaults."""
    check_defaults(config, "paligemma")


@pytest.mark.parametrize("config", [CONFIG, UNTIED], ids=["pooling head built, tied", "no head, untied"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector")})
    check_text_forward_flops(config)
    check_text_cache(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_text_saved_activations_equal_what_eager_pytorch_keeps(dtype):
    check_text_saved_activations(CONFIG, dtype)


def test_images_and_gemma_2_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
    one_line_error(ConfigError, lambda: Model.from_config(dict(CONFIG, text_config=dict(TEXT, model_type="gemma2"))).evaluate("params"), "model_type")


def test_the_paligemma_3b_preset_counts_what_transformers_builds():
    """google/paligemma-3b-pt-224: numel() of the whole class on the meta device from the bundled config.json, and
    keras-hub's published count for the same model with a vocabulary 64 rows shorter (257,152 x 2048 embedding)."""
    from oracle import preset_dict

    from image_text_checks import meta_image_text_params

    count = Model.load("paligemma-3b-pt-224").evaluate("params")
    assert count == meta_image_text_params(preset_dict("paligemma-3b-pt-224"))
    assert count - 64 * 2048 == 2_923_335_408
