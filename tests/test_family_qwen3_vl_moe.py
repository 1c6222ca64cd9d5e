"""Oracle: the qwen3_vl_moe family (Qwen3-VL-30B-A3B, -235B-A22B) against transformers'
Qwen3VLMoeForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults) and on tiny instances, the vision
tower per tower. FLOPs: tiny instances in float32 with eager attention and eager experts, counted by FlopCounterMode,
text only and with images in every sequence (Qwen3-VL's tower with DeepStack, then routed experts over all seq
tokens). Cache: the bytes transformers' cache holds after a forward. Saved activations: the bytes autograd keeps for
backward in a training forward in bf16 and fp32, under the eager accounting. Images are given as in
tests/test_family_qwen3_vl.py (whose input helpers this module reuses).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import check_cache_bytes, check_params_per_tower, global_counts, hf_config, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, IDS, TEXT, VISION, counted, given_for, inputs  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

MOE = dict(TEXT, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
CONFIGS = {
    "two DeepStack mergers, every layer experts, untied head": dict(model_type="qwen3_vl_moe", text_config=MOE, vision_config=VISION, **IDS),
    "one DeepStack merger, first layer dense, tied head, attention bias, 3 layers": dict(
        model_type="qwen3_vl_moe", tie_word_embeddings=True, **IDS,
        text_config=dict(MOE, attention_bias=True, num_hidden_layers=3, mlp_only_layers=[0], num_experts_per_tok=1),
        vision_config=dict(VISION, deepstack_visual_indexes=[1], depth=2),
    ),
}  # fmt: skip
ARCHITECTURES = {"architectures": ["Qwen3VLMoeForConditionalGeneration"]}


def build(config: dict, dtype=torch.float32):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", experts_implementation="eager", dtype=dtype)
    assert type(model).__name__ == "Qwen3VLMoeForConditionalGeneration"
    return model.eval()


@pytest.mark.parametrize("config", [{"model_type": "qwen3_vl_moe"}, {"model_type": "qwen3_vl_moe", "tie_word_embeddings": True}])
def test_the_defaults_are_transformers_defaults(config):
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).spec.family == "qwen3_vl_moe"
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    check_params_per_tower(CONFIGS[case], build(CONFIGS[case]))


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 30)])
def test_text_only_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    assert Model.from_config(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


# (batch, seq, images per sequence, height, width): one image, two per sequence
IMAGES = [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    tower = counter.get_flop_counts()["Qwen3VLMoeForConditionalGeneration.model.visual"]
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == sum(tower.values())


@pytest.mark.parametrize("case", CONFIGS)
def test_the_cache_holds_what_transformers_caches(case):
    check_cache_bytes(CONFIGS[case], build(CONFIGS[case]), 9)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", [(2, 40, 0, 0, 0), *IMAGES])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images, height, width):
    config = CONFIGS[case]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


def test_the_routers_auxiliary_loss_is_refused_in_one_line():
    from checks import one_line_error

    config = dict(CONFIGS["two DeepStack mergers, every layer experts, untied head"], text_config=dict(MOE, output_router_logits=True))
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), "output_router_logits")
