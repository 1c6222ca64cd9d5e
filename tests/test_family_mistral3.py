"""Oracle: the mistral3 family (Mistral Small 3.1 / 3.2) against transformers' Mistral3ForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults, whose sub-configs take Mistral Small
3.1's sizes when absent and their classes' defaults when given) and on tiny instances, the tower and the projector per
tower. FLOPs: tiny instances in float32 with eager attention, counted by FlopCounterMode, text only and with images:
Pixtral packs every image of the batch into one sequence, so its eager attention is counted over all their patches.
Cache: the bytes transformers' cache holds. Saved activations: the bytes autograd keeps for backward in a training
forward in bf16 and fp32, under the eager accounting.
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
    model_type="mistral", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, vocab_size=160, max_position_embeddings=512, sliding_window=None,
)
VISION = dict(model_type="pixtral", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, head_dim=16, patch_size=4, image_size=64)
CONFIGS = {
    "no window, untied head": dict(model_type="mistral3", image_token_index=IMAGE, tie_word_embeddings=False, text_config=TEXT, vision_config=VISION),
    "window 4, tied head, projector biases, merge 1, 1 channel, 3 layers": dict(
        model_type="mistral3", image_token_index=IMAGE, multimodal_projector_bias=True, spatial_merge_size=1,
        text_config=dict(TEXT, sliding_window=4, num_key_value_heads=1),
        vision_config=dict(VISION, num_hidden_layers=3, num_channels=1, num_attention_heads=4, head_dim=8),
    ),
}  # fmt: skip
ARCHITECTURES = {"architectures": ["Mistral3ForConditionalGeneration"]}


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Mistral3ForConditionalGeneration"
    return model.eval()


def ours(config: dict) -> Model:
    return Model.from_config(config).with_conventions(windowed=0)


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images wrapped in start/end tokens (one placeholder per
    merged square of patches), the pixels channels first, and each image's size."""
    vision = config["vision_config"]
    step = vision["patch_size"] * config.get("spatial_merge_size", 2)
    ids, generator = image_token_ids(batch, seq, images, (height // step) * (width // step), (IMAGE, START, END))
    return dict(
        input_ids=ids,
        pixel_values=torch.rand(batch * images, vision.get("num_channels", 3), height, width, generator=generator),
        image_sizes=torch.tensor([[height, width]] * (batch * images)),
    )


@pytest.mark.parametrize("config", [
    {"model_type": "mistral3"}, {"model_type": "mistral3", "tie_word_embeddings": False},
    {"model_type": "mistral3", "text_config": {"model_type": "mistral"}, "vision_config": {"model_type": "pixtral"}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """A sub-config left out takes Mistral Small 3.1's sizes (Mistral3Config's), one given takes its class's defaults."""
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).spec.family == "mistral3"
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    config = CONFIGS[case]
    real = build(config)
    model = ours(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    tower = sum(p.numel() for part in (real.model.vision_tower, real.model.multi_modal_projector) for p in part.parameters())
    assert model.evaluate_breakdown("params")["visual"] == tower


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 30)])
def test_text_only_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    assert ours(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


# (batch, seq, images per sequence, height, width): one wide image; two per sequence, packed four to one sequence
IMAGES = [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = ours(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    by_module = counter.get_flop_counts()
    tower = sum(sum(by_module.get(f"Mistral3ForConditionalGeneration.model.{part}", {}).values()) for part in ("vision_tower", "multi_modal_projector"))
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == tower


@pytest.mark.parametrize("case", CONFIGS)
def test_the_cache_holds_what_transformers_caches(case):
    check_cache_bytes(CONFIGS[case], build(CONFIGS[case]), 9)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", [(2, 40, 0, 0, 0), *IMAGES])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images, height, width):
    """On the CPU, the eager accounting (whole score matrices in the sliding layers, views at their storage's size)."""
    config = CONFIGS[case]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


@pytest.mark.parametrize("change, words", [
    (dict(text_config=dict(TEXT, model_type="llama")), ("model_type",)),
    (dict(vision_config=dict(VISION, head_dim=8)), ("head_dim",)),
    (dict(vision_feature_layer=[-1, -2]), ("vision_feature_layer",)),
])  # fmt: skip
def test_what_symform_does_not_model_is_refused_in_one_line(change, words):
    config = dict(CONFIGS["no window, untied head"], **change)
    one_line_error(ConfigError, lambda: Model.from_config(config).evaluate("params"), *words)


def test_an_image_the_projector_cannot_merge_is_refused_in_one_line():
    model = ours(CONFIGS["no window, untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=40, images=1, image_height=12, image_width=16), "image_height", "spatial_merge_size")
