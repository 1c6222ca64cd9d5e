"""Oracle: the llava family (LLaVA 1.5) against transformers' LlavaForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults, whose vision sub-config takes LLaVA
1.5's CLIP sizes when absent and CLIPVisionConfig's defaults when given) and on tiny instances, the tower and the
projector per tower. FLOPs: tiny instances in float32 with eager attention, counted by FlopCounterMode, text only and
with images (image_size square, as the processor hands them over). Cache: the bytes transformers' cache holds. Saved
activations: the bytes autograd keeps for backward in a training forward in bf16 and fp32, under the eager accounting
(the CLIP layers after the one LLaVA reads run but keep nothing).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from oracle import check_cache_bytes, global_counts, hf_config, image_token_ids, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, counted, given_for  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

IMAGE, START, END = 150, 152, 153  # token ids of the tiny vocabulary (160)
TEXT = dict(
    model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=160, max_position_embeddings=512,
)
VISION = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2, image_size=16, patch_size=4)
CONFIGS = {
    "second to last layer read, untied head": dict(model_type="llava", image_token_index=IMAGE, text_config=TEXT, vision_config=VISION),
    "last layer read, tied head, no projector biases, 1 channel, MHA": dict(
        model_type="llava", image_token_index=IMAGE, tie_word_embeddings=True, multimodal_projector_bias=False, vision_feature_layer=-1,
        text_config=dict(TEXT, num_key_value_heads=4), vision_config=dict(VISION, num_channels=1, num_attention_heads=4, image_size=24),
    ),
}  # fmt: skip


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    return model.eval()


def size(config: dict) -> int:
    return config["vision_config"]["image_size"]


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images wrapped in start/end tokens (one placeholder per
    patch), the pixels channels first."""
    vision = config["vision_config"]
    ids, generator = image_token_ids(batch, seq, images, (height // vision["patch_size"]) * (width // vision["patch_size"]), (IMAGE, START, END))
    return dict(input_ids=ids, pixel_values=torch.rand(batch * images, vision.get("num_channels", 3), height, width, generator=generator))


@pytest.mark.parametrize("config", [
    {"model_type": "llava"}, {"model_type": "llava", "tie_word_embeddings": True},
    {"model_type": "llava", "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "clip_vision_model"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).spec.family == "llava"
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    config = CONFIGS[case]
    real = build(config)
    model = Model.from_config(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    tower = sum(p.numel() for part in (real.model.vision_tower, real.model.multi_modal_projector) for p in part.parameters())
    assert model.evaluate_breakdown("params")["visual"] == tower


@pytest.mark.parametrize("case", CONFIGS)
def test_no_tower_leaves_the_language_model_and_its_head(case):
    """vision = no_tower sheds the tower's sizes with the tower: what is left is transformers' language model and head
    (tied heads counted once, as numel() of the whole class counts them)."""
    real = build(CONFIGS[case])
    text = {id(p): p.numel() for part in (real.model.language_model, real.lm_head) for p in part.parameters()}
    model = Model.from_config(CONFIGS[case]).with_arguments(vision="no_tower")
    assert model.evaluate("params") == sum(text.values())
    assert "visual" not in model.evaluate_breakdown("params")


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 30)])
def test_text_only_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    assert Model.from_config(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


IMAGES = [(1, 60, 1), (2, 90, 2)]  # (batch, seq, images per sequence)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images):
    config = CONFIGS[case]
    side = size(config)
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=side, width=side))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=side, image_width=side)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    by_module = counter.get_flop_counts()
    tower = sum(sum(by_module.get(f"LlavaForConditionalGeneration.model.{part}", {}).values()) for part in ("vision_tower", "multi_modal_projector"))
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == tower


@pytest.mark.parametrize("case", CONFIGS)
def test_the_cache_holds_what_transformers_caches(case):
    check_cache_bytes(CONFIGS[case], build(CONFIGS[case]), 9)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images", [(2, 40, 0), *IMAGES])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images):
    config = CONFIGS[case]
    side = size(config) if images else 0
    kept = saved_with_images(config, given_for(config, batch, seq, images, side, side, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=side, image_width=side) == kept


@pytest.mark.parametrize("change, words", [
    (dict(text_config=dict(TEXT, model_type="mistral")), ("model_type",)),
    (dict(vision_feature_select_strategy="full"), ("vision_feature_select_strategy",)),
    (dict(vision_feature_layer=[-2, -1]), ("vision_feature_layer",)),
    (dict(vision_config=dict(VISION, model_type="siglip_vision_model")), ("model_type",)),
    (dict(projector_hidden_act="quick_gelu"), ("projector_hidden_act",)),
])  # fmt: skip
def test_what_symform_does_not_model_is_refused_in_one_line(change, words):
    config = dict(CONFIGS["second to last layer read, untied head"], **change)
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), *words)


def test_an_image_clip_does_not_read_is_refused_in_one_line():
    model = Model.from_config(CONFIGS["second to last layer read, untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=40, images=1, image_height=16, image_width=24), "image_width", "image_size")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_tower_with_pytorchs_gelu_keeps_what_eager_pytorch_keeps(dtype):
    """quick GELU keeps fc1's output and its sigmoid; PyTorch's GELU keeps its input alone."""
    config = dict(CONFIGS["second to last layer read, untied head"], vision_config=dict(VISION, hidden_act="gelu"))
    kept = saved_with_images(config, given_for(config, 1, 60, 1, 16, 16, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=1, seq=60, images=1, image_height=16, image_width=16) == kept


def test_an_activation_whose_saved_tensors_are_not_modelled_is_refused_in_one_line():
    config = dict(CONFIGS["second to last layer read, untied head"], vision_config=dict(VISION, hidden_act="gelu_new"))
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), "hidden_act")
