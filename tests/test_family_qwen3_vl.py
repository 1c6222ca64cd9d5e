"""Oracle: the qwen3_vl family (Qwen3-VL) against transformers' Qwen3VLForConditionalGeneration.

Parameters: numel() of the whole class, vision tower included, on the meta device
(transformers' defaults) and on tiny instances. FLOPs: tiny instances in float32
with eager attention, counted by FlopCounterMode, text only (no images: the
default) and with images in every sequence: the vision tower's patch-embedding
convolution, ViT blocks (attention within each image), patch merger and DeepStack
mergers, then the language model over all seq tokens, image tokens among them.
Saved activations: the bytes autograd keeps for backward in a training forward in
bf16 and fp32, text only and with images, under the eager accounting.
A still image is one temporal patch: the processor repeats it temporal_patch_size
times, and the pixel rows given here are what it hands the model.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import check_params_per_tower, global_counts, hf_config, image_token_ids, saved_with_images  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

IMAGE, START, END = 150, 152, 153  # token ids of the tiny vocabulary (160)
TEXT = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    vocab_size=160, max_position_embeddings=512,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True},
)
VISION = dict(
    depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4, temporal_patch_size=2, spatial_merge_size=2,
    out_hidden_size=64, num_position_embeddings=16, deepstack_visual_indexes=[0, 2],
)
IDS = dict(image_token_id=IMAGE, video_token_id=151, vision_start_token_id=START, vision_end_token_id=END)

CONFIGS = {
    "two DeepStack mergers, untied head": dict(model_type="qwen3_vl", text_config=TEXT, vision_config=VISION, **IDS),
    "no DeepStack, tied head, attention bias, MHA, 3-frame patches, 1 channel": dict(
        model_type="qwen3_vl", tie_word_embeddings=True, **IDS,
        text_config=dict(TEXT, attention_bias=True, num_key_value_heads=4),
        vision_config=dict(VISION, deepstack_visual_indexes=[], depth=2, num_heads=4, temporal_patch_size=3, in_channels=1, spatial_merge_size=1),
    ),
}  # fmt: skip


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert model.config.text_config._attn_implementation == "eager" and model.config.vision_config._attn_implementation == "eager"
    return model.eval()


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images of height x width pixels wrapped in start/end tokens
    (their placeholder tokens among the seq), and the pixel rows the processor would hand the model."""
    vision = config["vision_config"]
    patch, merge = vision["patch_size"], vision["spatial_merge_size"]
    rows, cols = height // patch, width // patch
    per_image = rows * cols // merge**2
    ids, generator = image_token_ids(batch, seq, images, per_image, (IMAGE, START, END))
    pixels = vision.get("in_channels", 3) * vision["temporal_patch_size"] * patch**2
    return dict(
        input_ids=ids,
        pixel_values=torch.randn(batch * images * rows * cols, pixels, generator=generator),
        image_grid_thw=torch.tensor([[1, rows, cols]] * (batch * images)),
        mm_token_type_ids=(ids == IMAGE).long(),
    )


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


@pytest.mark.parametrize("case", CONFIGS)
def test_family_is_qwen3_vl(case):
    assert Model.from_config(CONFIGS[case]).spec.family == "qwen3_vl"


def test_the_defaults_are_transformers_defaults():
    """A config naming only the model type costs what Qwen3VLConfig's defaults build on the meta device, whole class."""
    config = {"model_type": "qwen3_vl"}
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


# (batch, seq, images per sequence, height, width): one image, two per sequence, a tall and a wide one
IMAGES = [(1, 40, 1, 16, 24), (2, 40, 2, 8, 16), (1, 64, 1, 32, 8)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    real = build(config)
    counter = counted(real, **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    tower = counter.get_flop_counts()["Qwen3VLForConditionalGeneration.model.visual"]
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == sum(tower.values())


def test_a_forward_and_backward_with_images_equal_the_counter():
    """The pixels need no gradient, so the patch embedding's backward is its weight's product alone (one forward's
    worth, not two); every other product's backward is two."""
    config = CONFIGS["two DeepStack mergers, untied head"]
    real = build(config).train()
    given = inputs(config, batch=2, seq=40, images=2, height=8, width=16)
    real.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        real(**given).logits.sum().backward()
    workload = dict(batch=2, seq=40, images=2, image_height=8, image_width=16)
    assert Model.from_config(config).evaluate("train_step_flops", **workload) == counter.get_total_flops()


def given_for(config: dict, batch: int, seq: int, images: int, height: int, width: int, make_inputs=None) -> dict:
    """What the model is handed: ``make_inputs``' token ids and pixels (this module's ``inputs`` unless given) with
    images, random ids alone without."""
    if images:
        return (make_inputs or inputs)(config, batch=batch, seq=seq, images=images, height=height, width=width)
    return dict(input_ids=torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq)))


DTYPES = {torch.bfloat16: 2, torch.float32: 4}
# (batch, seq, images per sequence, height, width): text only, one image, two per sequence of another size
SAVED = [(1, 40, 0, 0, 0), (2, 40, 0, 0, 0), (1, 40, 1, 16, 24), (2, 40, 2, 8, 16)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", SAVED)
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images, height, width):
    """On the CPU: the eager accounting (views count at their storage's size) with the CPU's LayerNorm statistics."""
    config = CONFIGS[case]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


def test_images_are_a_workload_setting_text_only_by_default():
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])
    assert model.evaluate("forward_flops", batch=1, seq=20) == model.evaluate("forward_flops", batch=1, seq=20, images=0, image_height=16, image_width=16)
    assert model.evaluate("forward_flops", batch=1, seq=20, images=1, image_height=16, image_width=16) > model.evaluate("forward_flops", batch=1, seq=20)
    assert model.evaluate("params") == model.with_conventions(images=3, image_height=16, image_width=16).evaluate("params")


@pytest.mark.parametrize(
    "setting, words",
    [
        (dict(images=1, image_height=12, image_width=16), ("image_height % (patch*merge)", "multiples of patch*merge")),
        (dict(images=1, image_height=16, image_width=20), ("image_width % (patch*merge)", "multiples of patch*merge")),
        (dict(images=1), ("image_height", "--image-size")),
    ],
)
def test_an_image_the_tower_cannot_read_is_refused_in_one_line(setting, words):
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=20, **setting), *words)


def test_a_decode_step_runs_no_part_of_the_tower():
    """The tower reads the images with the prompt; a decode step (decoding = 1) neither computes nor reads any of it."""
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])
    images = dict(images=2, image_height=16, image_width=16)
    for quantity in ("forward_flops", "bytes_moved"):
        text_only = model.with_conventions(decoding=1).evaluate(quantity, batch=2, seq=1, past=30)
        assert model.with_conventions(decoding=1, **images).evaluate(quantity, batch=2, seq=1, past=30) == text_only, quantity


# -- the command line: --images N --image-size HxW -------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["two DeepStack mergers, untied head"]))
    return str(path)


def test_the_command_line_counts_the_images_as_the_counter_does(capsys, config_file):
    from checks import run_json

    config = CONFIGS["two DeepStack mergers, untied head"]
    counter = counted(build(config), **inputs(config, batch=2, seq=40, images=2, height=8, width=16))
    report = run_json(capsys, "flops", config_file, "--batch", "2", "--seq", "40", "--images", "2", "--image-size", "8x16")
    assert report["forward"] == counter.get_total_flops()
    assert (report["images"], report["image_height"], report["image_width"]) == (2, 8, 16)
    square = run_json(capsys, "flops", config_file, "--batch", "2", "--seq", "40", "--images", "2", "--image-size", "16")
    assert square["image_height"] == square["image_width"] == 16


@pytest.mark.parametrize(
    "options, words",
    [
        (["--images", "1"], ["--image-size"]),
        (["--image-size", "16"], ["--images"]),
        (["--images", "1", "--image-size", "16x"], ["HxW"]),
        (["--images", "0", "--image-size", "16"], ["--images"]),
        (["--images", "1", "--image-size", "12x16"], ["multiples of patch*merge"]),
    ],
)
def test_images_the_command_line_cannot_count_are_refused_in_one_line(capsys, config_file, options, words):
    from checks import run

    code, out, err = run(capsys, "flops", config_file, "--batch", "1", "--seq", "40", *options)
    assert code == 2 and not out and err.count("\n") == 1
    assert all(word in err for word in words), err


def test_images_on_a_model_without_a_vision_tower_are_refused(capsys):
    from checks import run

    code, _, err = run(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "40", "--images", "1", "--image-size", "448")
    assert code == 2 and "no vision tower" in err and err.count("\n") == 1


@pytest.mark.parametrize("top, inner", [(None, True), (True, None), (True, False)])
def test_the_head_is_tied_by_the_top_level_field_alone(top, inner):
    """Qwen3VLConfig keeps tie_word_embeddings at the top level; a text_config's own is not what ties the head."""
    config = CONFIGS["two DeepStack mergers, untied head"] | {"text_config": dict(TEXT)}
    if top is not None:
        config["tie_word_embeddings"] = top
    if inner is not None:
        config["text_config"]["tie_word_embeddings"] = inner
    with torch.device("meta"):
        real = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in real.parameters())
