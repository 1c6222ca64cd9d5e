"""Oracle: the internvl family (InternVL 2.5/3, transformers' format) against transformers'
InternVLForConditionalGeneration: parameters of the whole class (Qwen2, InternViT with its settings: Q/K norms,
RMSNorm layers, mask token, no absolute positions, a final LayerNorm; the pixel-shuffle projector) on the meta
device and on tiny instances, the text-only forward's FLOPs (eager attention, FlopCounterMode), the cache, and what
a text-only training step keeps; images are refused in one line."""

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
VISION = dict(model_type="internvl_vision", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=[16, 16], patch_size=[4, 4])
CONFIG = dict(model_type="internvl", image_token_id=150, text_config=TEXT, vision_config=VISION)
VARIANT = dict(
    CONFIG, tie_word_embeddings=False, downsample_ratio=0.25,
    vision_config=dict(VISION, image_size=32, patch_size=4, use_qk_norm=True, norm_type="rms_norm", use_mask_token=True,
                       use_absolute_position_embeddings=False, use_mean_pooling=False, attention_bias=True),
)  # fmt: skip


@pytest.mark.parametrize("config", [
    {"model_type": "internvl"}, {"model_type": "internvl", "tie_word_embeddings": False},
    {"model_type": "internvl", "text_config": {"model_type": "qwen2"}, "vision_config": {"model_type": "internvl_vision", "use_qk_norm": True}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    check_defaults(config, "internvl")


@pytest.mark.parametrize("config", [CONFIG, VARIANT], ids=["defaults", "every vision switch turned"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector")})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_the_projector_folds_shuffle_squared_patches():
    """downsample_ratio 1/4: 16 patches to one token; a LayerNorm over 16·32 and linear_1 from 16·32 to 64."""
    parts = Model.from_config(VARIANT).evaluate_breakdown("params", depth=2)
    assert parts["visual/projector_norm"] + parts["visual/linear_1"] == 2 * 512 + 512 * 64 + 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_text_saved_activations_equal_what_eager_pytorch_keeps(dtype):
    check_text_saved_activations(CONFIG, dtype)


def test_images_and_rectangular_tiles_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "tiles", "images")
    rectangle = dict(CONFIG, vision_config=dict(VISION, image_size=[16, 32]))
    one_line_error(ConfigError, lambda: Model.from_config(rectangle).evaluate("params"), "image_size")
