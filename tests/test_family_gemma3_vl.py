"""Oracle: the gemma3 family (Gemma 3 4B/12B/27B configs) against transformers' Gemma3ForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults, whose SigLIP tower builds its
attention-pooling head) and on tiny instances, the tower and the projector per tower. FLOPs: tiny instances in
float32 with eager attention, counted by FlopCounterMode, text only and with images in every sequence. Each image
is what the processor hands the model: image_size × image_size pixels, channels first. The counter computes every
sliding-window layer's whole score matrix and masks it, so symform is matched with windowed = 0. Cache: the bytes
transformers' cache holds after a forward. Saved activations: the bytes autograd keeps for backward in a training
forward in bf16 and fp32, text only and with images, under the eager accounting.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import check_cache_bytes, global_counts, hf_config, image_token_ids, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, given_for  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

IMAGE, START, END = 150, 152, 153  # token ids of the tiny vocabulary (160)
IDS = dict(image_token_index=IMAGE, boi_token_index=START, eoi_token_index=END)
TEXT = dict(
    vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, sliding_window=4, sliding_window_pattern=2, max_position_embeddings=512,
)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4, vision_use_head=False)
CONFIGS = {
    "16 patches pooled to 4, tied head": dict(model_type="gemma3", mm_tokens_per_image=4, text_config=TEXT, vision_config=VISION, **IDS),
    "36 patches pooled to 9, 1 channel, 3 layers, untied head, attention bias": dict(
        model_type="gemma3", mm_tokens_per_image=9, tie_word_embeddings=False, **IDS,
        text_config=dict(TEXT, attention_bias=True, num_hidden_layers=2),
        vision_config=dict(VISION, num_hidden_layers=3, num_attention_heads=4, image_size=24, num_channels=1),
    ),
}  # fmt: skip


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Gemma3ForConditionalGeneration"
    return model.eval()


def tower_parameters(real) -> int:
    return sum(p.numel() for part in (real.model.vision_tower, real.model.multi_modal_projector) for p in part.parameters())


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images wrapped in start/end tokens (mm_tokens_per_image
    placeholders each), the pixels channels first, and the token types that mark the image tokens."""
    vision = config["vision_config"]
    ids, generator = image_token_ids(batch, seq, images, config["mm_tokens_per_image"], (IMAGE, START, END))
    channels = vision.get("num_channels", 3)
    return dict(
        input_ids=ids,
        pixel_values=torch.rand(batch * images, channels, height, width, generator=generator),
        token_type_ids=(ids == IMAGE).long(),
    )


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


def ours(config: dict) -> Model:
    return Model.from_config(config).with_conventions(windowed=0)


def meta_numel(config: dict) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert type(model).__name__ == "Gemma3ForConditionalGeneration"
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", [
    {"model_type": "gemma3"}, {"model_type": "gemma3", "tie_word_embeddings": False},
    {"model_type": "gemma3", "vision_config": {"vision_use_head": False, "image_size": 896, "patch_size": 14}},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    assert Model.from_config(config).spec.family == "gemma3"
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    config = CONFIGS[case]
    real = build(config)
    model = ours(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    assert model.evaluate_breakdown("params")["visual"] == tower_parameters(real)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 20)])
def test_text_only_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    assert ours(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


# (batch, seq, images per sequence): two per sequence, one
IMAGES = [(2, 40, 2), (1, 30, 1)]


def size(config: dict) -> int:
    return config["vision_config"]["image_size"]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images):
    config = CONFIGS[case]
    real = build(config)
    counter = counted(real, **inputs(config, batch=batch, seq=seq, images=images, height=size(config), width=size(config)))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=size(config), image_width=size(config))
    model = ours(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    by_module = counter.get_flop_counts()
    tower = sum(sum(by_module.get(f"Gemma3ForConditionalGeneration.model.{part}", {}).values()) for part in ("vision_tower", "multi_modal_projector"))
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == tower


def test_a_forward_and_backward_with_images_equal_the_counter():
    config = CONFIGS["16 patches pooled to 4, tied head"]
    real = build(config).train()
    given = inputs(config, batch=2, seq=40, images=2, height=16, width=16)
    real.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        real(**given).logits.sum().backward()
    workload = dict(batch=2, seq=40, images=2, image_height=16, image_width=16)
    assert ours(config).evaluate("train_step_flops", **workload) == counter.get_total_flops()


@pytest.mark.parametrize("case", CONFIGS)
def test_the_cache_holds_what_transformers_caches(case):
    check_cache_bytes(CONFIGS[case], build(CONFIGS[case]), 9)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images", [(2, 40, 0), *IMAGES])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images):
    """On the CPU, the eager accounting (whole score matrices in the sliding layers, views at their storage's size)."""
    config = CONFIGS[case]
    side = size(config) if images else 0
    kept = saved_with_images(config, given_for(config, batch, seq, images, side, side, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=side, image_width=side) == kept


@pytest.mark.parametrize("setting, words", [
    (dict(images=1, image_height=16, image_width=20), ("image_width", "image_size")),
    (dict(images=1, image_height=8, image_width=16), ("image_height", "image_size")),
    (dict(images=4, image_height=16, image_width=16), ("--seq",)),
])  # fmt: skip
def test_an_image_the_processor_would_not_hand_over_is_refused_in_one_line(setting, words):
    model = ours(CONFIGS["16 patches pooled to 4, tied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=12, **setting), *words)


def test_images_through_siglips_pooling_head_are_refused_in_one_line():
    model = ours(dict(CONFIGS["16 patches pooled to 4, tied head"], vision_config=dict(VISION, vision_use_head=True)))
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=20, images=1, image_height=16, image_width=16), "vision_use_head")


def test_a_decode_step_runs_no_part_of_the_tower():
    model = ours(CONFIGS["16 patches pooled to 4, tied head"])
    text_only = model.with_conventions(decoding=1).evaluate("forward_flops", batch=2, seq=1, past=30)
    assert model.with_conventions(decoding=1, images=2, image_height=16, image_width=16).evaluate("forward_flops", batch=2, seq=1, past=30) == text_only
