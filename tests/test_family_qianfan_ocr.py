"""Oracle: the qianfan_ocr family (Qianfan-OCR) against transformers' QianfanOCRForConditionalGeneration: parameters of
the whole class (Qwen3, InternViT with biased Q/K/V by default, the pixel-shuffle projector) on the meta device and
on tiny instances, the text-only forward's FLOPs (eager attention, FlopCounterMode) and the cache; images are
refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from image_text_checks import check_defaults, check_text_cache, check_text_forward_flops, check_tiny_params  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=160)
VISION = dict(model_type="qianfan_ocr_vision", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
CONFIG = dict(model_type="qianfan_ocr", image_token_id=150, text_config=TEXT, vision_config=VISION)


@pytest.mark.parametrize("config", [
    {"model_type": "qianfan_ocr"}, {"model_type": "qianfan_ocr", "tie_word_embeddings": True},
    {"model_type": "qianfan_ocr", "vision_config": {"model_type": "qianfan_ocr_vision", "attention_bias": False, "use_qk_norm": True}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    check_defaults(config, "qianfan_ocr")


@pytest.mark.parametrize("config", [CONFIG, dict(CONFIG, tie_word_embeddings=True, vision_config=dict(VISION, attention_bias=False, norm_type="rms_norm"))], ids=["untied", "tied, RMSNorm tower"])
def test_tiny_parameters_flops_and_cache_equal_pytorch(config):
    check_tiny_params(config, {"visual": ("vision_tower", "multi_modal_projector")})
    check_text_forward_flops(config)
    check_text_cache(config)


def test_images_are_refused_in_one_line():
    model = Model.from_config(CONFIG)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=60, images=1, image_height=16, image_width=16), "images")
