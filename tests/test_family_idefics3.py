"""Oracle: the idefics3 and smolvlm families (Idefics3, SmolVLM) against transformers' Idefics3ForConditionalGeneration
and SmolVLMForConditionalGeneration: parameters of the whole class (Llama, SigLIP's tower, the pixel-shuffle
connector) on the meta device and on tiny instances, the text-only forward's FLOPs (eager attention,
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

TYPES = ["idefics3", "smolvlm"]
TEXT = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=160)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=4)


def config(model_type: str, **changes) -> dict:
    return dict(model_type=model_type, image_token_id=150, text_config=TEXT, vision_config=dict(VISION, model_type=f"{model_type}_vision"), **changes)


@pytest.mark.parametrize("model_type", TYPES)
@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": True}, {"scale_factor": 4}], ids=["defaults", "tied", "scale 4"])
def test_the_defaults_are_transformers_defaults(model_type, changes):
    check_defaults({"model_type": model_type, **changes}, model_type)


@pytest.mark.parametrize("model_type", TYPES)
@pytest.mark.parametrize("changes", [{}, {"scale_factor": 4, "tie_word_embeddings": True}], ids=["scale 2", "scale 4, tied"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(model_type, changes):
    tiny = config(model_type, **changes)
    check_tiny_params(tiny, {"visual": ("vision_model", "connector")})
    check_text_forward_flops(tiny)
    check_text_cache(tiny)


def test_the_connector_folds_scale_squared_patches_into_one_token():
    """modality_projection: (32·2²) → 64 without bias."""
    assert Model.from_config(config("idefics3")).evaluate_breakdown("params", depth=2)["visual/modality_projection"] == 32 * 4 * 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_text_saved_activations_equal_what_eager_pytorch_keeps(dtype):
    check_text_saved_activations(config("smolvlm"), dtype)


def test_images_are_refused_in_one_line():
    model = Model.from_config(config("idefics3"))
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=32, image_width=32), "crops", "images")
