"""Oracle: the cosmos3_omni family (Cosmos 3 Omni, Qwen3-VL's modules under another wrapper) against transformers'
Cosmos3OmniForConditionalGeneration: parameters of the whole class on the meta device and on tiny instances, forward
FLOPs with and without images (eager attention, FlopCounterMode), the cache, and what a training step keeps with an
image (eager accounting)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from image_text_checks import build_image_text, check_defaults, check_text_cache, check_text_forward_flops, check_tiny_params  # noqa: E402
from oracle import global_counts, saved_with_images  # noqa: E402
from test_family_qwen3_vl import IDS, TEXT, VISION, counted, inputs  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CONFIG = dict(model_type="cosmos3_omni", text_config=dict(TEXT, model_type="qwen3_vl_text"), vision_config=dict(VISION, model_type="deepstack_vision"), **IDS)


@pytest.mark.parametrize("config", [{"model_type": "cosmos3_omni"}, {"model_type": "cosmos3_omni", "tie_word_embeddings": True}])
def test_the_defaults_are_transformers_defaults(config):
    check_defaults(config, "cosmos3_omni")


def test_tiny_parameters_text_flops_and_cache_equal_pytorch():
    check_tiny_params(CONFIG, {"visual": ("visual",)})
    check_text_forward_flops(CONFIG)
    check_text_cache(CONFIG)


@pytest.mark.parametrize("batch, seq, images, height, width", [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16)])
def test_forward_flops_with_images_equal_the_counter(batch, seq, images, height, width):
    counter = counted(build_image_text(CONFIG), **inputs(CONFIG, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    assert Model.from_config(CONFIG).evaluate("forward_flops", **workload) == counter.get_total_flops()


def test_saved_activations_with_an_image_equal_what_eager_pytorch_keeps():
    kept = saved_with_images(CONFIG, inputs(CONFIG, batch=1, seq=40, images=1, height=16, width=24), torch.float32)
    model = Model.from_config(CONFIG, accounting="eager", conventions={"act_bytes": 4, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=1, seq=40, images=1, image_height=16, image_width=24) == kept
