"""Oracle: the qwen2_vl families (Qwen2-VL; its language model's fields at the top level as the Hub publishes them,
or in text_config as transformers 5 writes them) against transformers' Qwen2VLForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults) and on tiny instances, the vision
tower per tower. FLOPs: tiny instances in float32 with eager attention, counted by FlopCounterMode, text only and with
images in every sequence (attention within each image). Cache: the bytes transformers' cache holds. Saved activations:
the bytes autograd keeps for backward in a training forward in bf16 and fp32, under the eager accounting (quick GELU
keeps two tensors). Images are given as in tests/test_family_qwen3_vl.py (whose input helpers this module reuses).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from oracle import check_cache_bytes, check_params_per_tower, global_counts, hf_config, saved_with_images  # noqa: E402
from test_family_qwen2_5_vl import TEXT  # noqa: E402
from test_family_qwen3_vl import DTYPES, IDS, counted, given_for, inputs  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

# the tower 32 wide (embed_dim), its merger out to the language model's 64 (hidden_size)
VISION = dict(depth=3, embed_dim=32, mlp_ratio=2, hidden_size=64, num_heads=2, patch_size=4, temporal_patch_size=2, spatial_merge_size=2)
CONFIGS = {
    "published form (text fields at the top level), untied head": dict(model_type="qwen2_vl", vision_config=VISION, **TEXT, **IDS),
    "text_config, tied head, no merge, 3-frame patches, 1 channel, MHA": dict(
        model_type="qwen2_vl", tie_word_embeddings=True, text_config=dict(TEXT, num_key_value_heads=4), **IDS,
        vision_config=dict(VISION, spatial_merge_size=1, temporal_patch_size=3, in_channels=1, num_heads=4, depth=2),
    ),
}  # fmt: skip
FAMILY = {"published form (text fields at the top level), untied head": "qwen2_vl"}


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    return model.eval()


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2_vl"}, {"model_type": "qwen2_vl", "tie_word_embeddings": True},
    {"model_type": "qwen2_vl", "text_config": {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": None}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case", CONFIGS)
def test_the_form_decides_the_family(case):
    assert Model.from_config(CONFIGS[case]).spec.family == FAMILY.get(case, "qwen2_vl_nested")


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


IMAGES = [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16)]  # (batch, seq, images per sequence, height, width)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    tower = counter.get_flop_counts()["Qwen2VLForConditionalGeneration.model.visual"]
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


@pytest.mark.parametrize("change, words", [
    (dict(vision_config=dict(VISION, hidden_act="gelu")), ("hidden_act",)),
    (dict(use_sliding_window=True), ("use_sliding_window",)),
])  # fmt: skip
def test_what_symform_does_not_model_is_refused_in_one_line(change, words):
    config = dict(CONFIGS["published form (text fields at the top level), untied head"], **change)
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), *words)
