"""Oracle: qwen3_5 and qwen3_5_moe configs with a vision_config against transformers' whole checkpoint class
(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration).

Parameters: numel() of the whole class, vision tower included, on the meta device (transformers' defaults, the
bundled Qwen3.5-0.8B) and on tiny instances. FLOPs: tiny instances in float32 with eager attention and experts,
counted by FlopCounterMode, text only and with images in every sequence; the counter sees none of the Gated
DeltaNet's triangular solves (tests/test_family_recurrent.py names them), the vision tower none of them at all.
Saved activations: the bytes autograd keeps for backward in a training forward in bf16 and fp32, with images of
two sizes, under the eager accounting (eager experts). The tower is Qwen3-VL's without DeepStack. A config without
vision_config stays the text stack alone.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from oracle import check_params_per_tower, global_counts, hf_config, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, IDS, given_for, inputs  # noqa: E402
from test_family_recurrent import uncounted_solves  # noqa: E402

from symform.engine.language.families import preset_config  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    vocab_size=160, max_position_embeddings=512, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
    linear_value_head_dim=12, linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"],
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1], "mrope_interleaved": True, "partial_rotary_factor": 0.5},
)
MOE = dict(TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40)
VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4, temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)

CONFIGS = {
    "qwen3_5, untied head": dict(model_type="qwen3_5", text_config=TEXT, vision_config=VISION, **IDS),
    "qwen3_5, tied head, 1 channel, 3-frame patches, no merge": dict(
        model_type="qwen3_5", tie_word_embeddings=True, text_config=TEXT, **IDS,
        vision_config=dict(VISION, depth=2, num_heads=4, in_channels=1, temporal_patch_size=3, spatial_merge_size=1),
    ),
    "qwen3_5_moe": dict(model_type="qwen3_5_moe", text_config=MOE, vision_config=VISION, **IDS),
}  # fmt: skip
CLASSES = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}


def build(config: dict):
    torch.manual_seed(0)
    options = dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), **options)
    assert type(model).__name__ == CLASSES[config["model_type"]]
    return model.eval()


def meta_numel(config: dict) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert type(model).__name__ == CLASSES[config["model_type"]]
    return sum(p.numel() for p in model.parameters())


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


@pytest.mark.parametrize("case", CONFIGS)
def test_a_vision_config_selects_the_whole_class(case):
    config = CONFIGS[case]
    assert Model.from_config(config).spec.family == f"{config['model_type']}_vl"
    text_only = {k: v for k, v in config.items() if k != "vision_config"}
    assert Model.from_config(text_only).spec.family == config["model_type"]


@pytest.mark.parametrize("config", [{"model_type": "qwen3_5", "vision_config": {}}, {"model_type": "qwen3_5_moe", "vision_config": {}, "tie_word_embeddings": True}])
def test_the_defaults_are_transformers_defaults(config):
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


def test_the_bundled_qwen3_5_0_8b_counts_its_checkpoint_class():
    """The preset's architectures names Qwen3_5ForConditionalGeneration, and its config has a vision_config."""
    config, _ = preset_config("qwen3.5-0.8b")
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    check_params_per_tower(CONFIGS[case], build(CONFIGS[case]))


@pytest.mark.parametrize("case", CONFIGS)
def test_text_only_forward_flops_equal_the_counter_but_for_the_solves(case):
    config, batch, seq = CONFIGS[case], 2, 7
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    expected = counter.get_total_flops() + uncounted_solves(config, batch, seq)
    assert Model.from_config(config).evaluate("forward_flops", batch=batch, seq=seq) == expected


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", [(2, 40, 2, 8, 16), (1, 64, 1, 32, 8)])
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    real = build(config)
    counter = counted(real, **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops() + uncounted_solves(config, batch, seq)
    tower = counter.get_flop_counts()[f"{CLASSES[config['model_type']]}.model.visual"]
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == sum(tower.values())



@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16)])
def test_saved_activations_with_images_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images, height, width):
    """On the CPU (its LayerNorm statistics): one image, and two of another size in each of two sequences; the
    Gated DeltaNet's scan runs one chunk, padded."""
    config = CONFIGS[case]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept
