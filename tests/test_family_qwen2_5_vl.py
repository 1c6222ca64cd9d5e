"""Oracle: the qwen2_5_vl families (Qwen2.5-VL; its language model's fields at the top level as the Hub publishes
them, or in text_config as transformers 5 writes them) against transformers' Qwen2_5_VLForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults) and on tiny instances, the vision
tower per tower. FLOPs: tiny instances in float32 with eager attention, counted by FlopCounterMode, text only and with
images in every sequence whose merged patches fill whole windows, windows cut short at the bottom or right edge, and
the corner: the tower's window attention is counted window by window. Cache: the bytes transformers' cache holds.
Saved activations: the bytes autograd keeps for backward in a training forward in bf16 and fp32, under the eager
accounting. Images are given as in tests/test_family_qwen3_vl.py (whose input helpers this module reuses).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from oracle import check_cache_bytes, check_params_per_tower, global_counts, hf_config, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, IDS, counted, given_for, inputs  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
    max_position_embeddings=512, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
)
# windows of 2 × 2 merged squares (16 pixels over 4-pixel patches merged 2 × 2); block 1 attends within the whole image
VISION = dict(
    depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4, temporal_patch_size=2, spatial_merge_size=2,
    window_size=16, out_hidden_size=64, fullatt_block_indexes=[1],
)
CONFIGS = {
    "published form (text fields at the top level), untied head": dict(model_type="qwen2_5_vl", vision_config=VISION, **TEXT, **IDS),
    "text_config, tied head, no merge, 3-frame patches, 1 channel, an index past the depth": dict(
        model_type="qwen2_5_vl", tie_word_embeddings=True, text_config=dict(TEXT, num_key_value_heads=4), **IDS,
        vision_config=dict(VISION, spatial_merge_size=1, window_size=8, temporal_patch_size=3, in_channels=1, fullatt_block_indexes=[0, 5], num_heads=4),
    ),
}  # fmt: skip
FAMILY = {"published form (text fields at the top level), untied head": "qwen2_5_vl"}


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    return model.eval()


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2_5_vl"}, {"model_type": "qwen2_5_vl", "tie_word_embeddings": True},
    {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": None}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case", CONFIGS)
def test_the_form_decides_the_family(case):
    assert Model.from_config(CONFIGS[case]).spec.family == FAMILY.get(case, "qwen2_5_vl_nested")


def test_a_text_config_is_read_in_place_of_the_top_levels_copies():
    """Qwen2_5_VLConfig builds its text model from text_config where there is one; top-level sizes are then ignored."""
    config = dict(CONFIGS["text_config, tied head, no merge, 3-frame patches, 1 channel, an index past the depth"], hidden_size=128, num_hidden_layers=5)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
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


# (batch, seq, images per sequence, height, width): whole windows and a right edge; all four shapes of window; a
# bottom strip alone; two images per sequence
IMAGES = [(1, 40, 1, 16, 24), (1, 60, 1, 24, 24), (2, 40, 2, 8, 16)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    tower = counter.get_flop_counts()["Qwen2_5_VLForConditionalGeneration.model.visual"]
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


@pytest.mark.parametrize("setting, words", [
    (dict(images=1, image_height=12, image_width=16), ("image_height", "patch*merge")),
    (dict(images=1), ("image_height", "--image-size")),
])  # fmt: skip
def test_what_the_tower_cannot_read_is_refused_in_one_line(setting, words):
    model = Model.from_config(CONFIGS["published form (text fields at the top level), untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=40, **setting), *words)


def test_sliding_window_text_layers_are_refused_in_one_line():
    config = dict(CONFIGS["published form (text fields at the top level), untied head"], use_sliding_window=True)
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), "use_sliding_window")


def test_videos_are_refused_on_the_command_line(capsys, tmp_path):
    """No cost of this family depends on videos: --videos is refused by name, not counted as nothing."""
    import json

    from checks import run

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["published form (text fields at the top level), untied head"]))
    code, out, err = run(capsys, "flops", str(path), "--batch", "1", "--seq", "40", "--videos", "1", "--video-frames", "2", "--video-size", "16")
    assert code == 2 and not out and err.count("\n") == 1 and "videos" in err


def test_a_head_dim_other_than_the_heads_width_is_refused_in_one_line():
    """transformers sizes the heads hidden_size // num_attention_heads and the rotary tables head_dim: they must agree."""
    config = dict(CONFIGS["published form (text fields at the top level), untied head"], head_dim=8)
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), "head_dim")
    agreeing = dict(config, head_dim=16)
    assert Model.from_config(agreeing).evaluate("params") == Model.from_config(CONFIGS["published form (text fields at the top level), untied head"]).evaluate("params")
