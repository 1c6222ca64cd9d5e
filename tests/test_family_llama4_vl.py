"""Oracle: the llama4_vl family (Llama 4 configs) against transformers' Llama4ForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults) and on tiny instances, the
vision tower and the multi-modal projector per tower. FLOPs: tiny instances in float32 with eager attention,
counted by FlopCounterMode, text only and with images in every sequence. Each image is handed over as the
processor cuts it: tiles of vision_config's image_size pixels, plus one global tile when it cut more than one.
The counter computes every chunked layer's whole score matrix and masks it, so symform is matched with
windowed = 0. transformers' eager experts run every expert on every token (tests/test_family_llama4.py states
that difference exactly); the FLOP and saved-activation checks here use text stacks whose experts it does not
change (one expert, top-1) or with no expert layer. transformers 5.24's Llama4ForConditionalGeneration.forward
ends by reading `image_outputs` from its language model's output, which has none: the tests give that output
class an `image_outputs` of None (the `returns_outputs` fixture), which changes no computation.
"""

from __future__ import annotations

import weakref

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import global_counts, hf_config, image_token_ids  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.usefixtures("returns_outputs")]


@pytest.fixture
def returns_outputs(monkeypatch):
    from transformers.modeling_outputs import MoeCausalLMOutputWithPast

    if not hasattr(MoeCausalLMOutputWithPast, "image_outputs"):
        monkeypatch.setattr(MoeCausalLMOutputWithPast, "image_outputs", None, raising=False)

IMAGE, START, END = 150, 152, 153  # token ids of the tiny vocabulary (160)
IDS = dict(image_token_index=IMAGE, boi_token_index=START, eoi_token_index=END)
TEXT = dict(
    vocab_size=160, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, num_local_experts=1, num_experts_per_tok=1, interleave_moe_layer_step=2,
    attention_chunk_size=8, max_position_embeddings=512,
)
# hidden 32 shuffled by ratio 1/2 into 4·32 = 128 values per token: the adapter's fc1 reads intermediate_size of them
VISION = dict(
    hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=16, patch_size=4,
    pixel_shuffle_ratio=0.5, projector_input_dim=40, projector_output_dim=40, vision_output_dim=40,
)
CONFIGS = {
    "experts every 2nd layer, patch 4, untied head": dict(model_type="llama4", text_config=TEXT, vision_config=VISION, **IDS),
    "dense text stack, tied head, patch 2, 3 blocks, 1 channel, ratio 1/4": dict(
        model_type="llama4", **IDS,
        text_config=dict(TEXT, moe_layers=[], use_qk_norm=False, attention_bias=True, tie_word_embeddings=True),
        vision_config=dict(VISION, num_hidden_layers=3, patch_size=2, num_channels=1, pixel_shuffle_ratio=0.25, intermediate_size=512,
            projector_input_dim=48, projector_output_dim=48, vision_output_dim=48),
    ),
}  # fmt: skip
DENSE = "dense text stack, tied head, patch 2, 3 blocks, 1 channel, ratio 1/4"


def build(config: dict, dtype=torch.float32):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=dtype)
    assert type(model).__name__ == "Llama4ForConditionalGeneration"
    return model.eval()


def tower_parameters(real) -> int:
    return sum(p.numel() for part in (real.vision_model, real.multi_modal_projector) for p in part.parameters())


def tiles(config: dict, height: int, width: int) -> int:
    """The processor's tiles of one image: image_size squares, plus a global tile when there is more than one."""
    size = config["vision_config"]["image_size"]
    cut = (height // size) * (width // size)
    return cut + (cut > 1)


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images wrapped in start/end tokens (one placeholder per
    language-model token of every tile), and the tiles' pixels the processor hands the model."""
    vision = config["vision_config"]
    size, patch, ratio = vision["image_size"], vision["patch_size"], vision["pixel_shuffle_ratio"]
    per_tile = int((size // patch) ** 2 * ratio**2)
    count = tiles(config, height, width)
    ids, generator = image_token_ids(batch, seq, images, count * per_tile, (IMAGE, START, END))
    channels = vision.get("num_channels", 3)
    return dict(input_ids=ids, pixel_values=torch.rand(batch * images * count, channels, size, size, generator=generator))


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


def ours(config: dict, **options) -> Model:
    return Model.from_config(config, **options).with_conventions(windowed=0)


def meta_numel(config: dict) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert type(model).__name__ == "Llama4ForConditionalGeneration"
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", [{"model_type": "llama4"}, {"model_type": "llama4", "text_config": {"tie_word_embeddings": True}}])
def test_the_defaults_are_transformers_defaults(config):
    """Llama4Config always builds the vision tower: a config naming only the model type is the whole class."""
    model = Model.from_config(config)
    assert model.spec.family == "llama4_vl"
    assert model.evaluate("params") == meta_numel(config)


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    config = CONFIGS[case]
    real = build(config)
    model = ours(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    assert model.evaluate_breakdown("params")["visual"] == tower_parameters(real)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 20), (1, 7)])
def test_text_only_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert ours(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


# (batch, seq, images per sequence, height, width): one tile each; a 2x1-tile image (two tiles and the global one)
IMAGES = [(2, 30, 2, 16, 16), (1, 60, 1, 32, 16)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = ours(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    by_module = counter.get_flop_counts()
    tower = sum(sum(by_module.get(f"Llama4ForConditionalGeneration.{part}", {}).values()) for part in ("vision_model", "multi_modal_projector"))
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == tower


@pytest.mark.parametrize("top, inner", [(None, True), (True, None), (True, True), (False, True)])
def test_the_head_is_tied_by_text_configs_field_alone(top, inner):
    """Llama4ForCausalLM reads its own config (text_config) to tie the head; the top level's field ties nothing."""
    config = CONFIGS["experts every 2nd layer, patch 4, untied head"] | {"text_config": dict(TEXT)}
    if top is not None:
        config["tie_word_embeddings"] = top
    if inner is not None:
        config["text_config"]["tie_word_embeddings"] = inner
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


def saved_for_backward(model, given: dict) -> int:
    """Bytes of the distinct storages autograd holds for backward after a training forward (loss included),
    parameters left out (as oracle.saved_for_backward, with the tiles' pixels beside the ids)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packed = []

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            packed.append((weakref.ref(tensor), storage.data_ptr(), storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**given, labels=given["input_ids"]).loss
    assert loss.requires_grad  # held until the bytes are summed: the graph keeps the saved tensors alive
    return sum({ptr: size for alive, ptr, size in packed if alive() is not None}.values())


@pytest.mark.parametrize("case", [DENSE])
@pytest.mark.parametrize("batch, seq, images, height, width", [(1, 20, 0, 0, 0), (2, 20, 0, 0, 0), (2, 30, 2, 16, 16), (1, 60, 1, 32, 16)])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, batch, seq, images, height, width):
    """bf16 on the CPU: the eager accounting (views count at their storage's size) with the CPU's LayerNorm statistics.
    The text stack is dense: transformers' eager experts keep every expert's activations for every token, where
    symform counts the top_k a routed engine keeps."""
    config = CONFIGS[case]
    real = build(config, torch.bfloat16).train()
    if images:
        given = inputs(config, batch=batch, seq=seq, images=images, height=height, width=width)
        given["pixel_values"] = given["pixel_values"].to(torch.bfloat16)
    else:
        given = dict(input_ids=torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq)))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": 2, "cpu_kernels": 1})
    workload = dict(images=images, image_height=height, image_width=width) if images else {}
    assert model.evaluate("saved_activations", batch=batch, seq=seq, **workload) == saved_for_backward(real, given)


def test_images_are_a_workload_setting_text_only_by_default():
    model = ours(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    assert model.evaluate("forward_flops", batch=1, seq=20) == model.evaluate("forward_flops", batch=1, seq=20, images=0, image_height=16, image_width=16)
    assert model.evaluate("forward_flops", batch=1, seq=20, images=1, image_height=16, image_width=16) > model.evaluate("forward_flops", batch=1, seq=20)
    assert model.evaluate("params") == model.with_conventions(images=3, image_height=16, image_width=16).evaluate("params")


def test_an_image_of_several_tiles_adds_the_global_tile():
    """A 32x16 image is two 16x16 tiles and the global one: three tiles' work in the tower; one tile, no global."""
    model = ours(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    tower = {size: model.evaluate_breakdown("forward_flops", batch=1, seq=40, images=1, image_height=size[0], image_width=size[1])["visual"] for size in ((16, 16), (32, 16), (32, 32))}
    assert tower[(32, 16)] == 3 * tower[(16, 16)] and tower[(32, 32)] == 5 * tower[(16, 16)]


@pytest.mark.parametrize(
    "setting, words",
    [
        (dict(images=1, image_height=24, image_width=16), ("image_height % tile", "image_size")),
        (dict(images=1, image_height=16, image_width=20), ("image_width % tile", "image_size")),
        (dict(images=1), ("image_height", "--image-size")),
    ],
)
def test_an_image_the_processor_cannot_tile_is_refused_in_one_line(setting, words):
    model = ours(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=20, **setting), *words)


@pytest.mark.parametrize(
    "vision, words",
    [
        (dict(intermediate_size=96), ("intermediate_size", "pixel_shuffle_ratio")),
        (dict(projector_input_dim=24), ("projector_input_dim", "projector_output_dim")),
        (dict(vision_output_dim=48), ("vision_output_dim", "projector_output_dim")),
        (dict(image_size=20), ("image_size", "patch_size/pixel_shuffle_ratio")),
    ],
)
def test_a_tower_whose_forward_cannot_run_costs_its_parameters_and_refuses_images(vision, words):
    """transformers builds these towers (their parameters equal numel) but cannot run images through them."""
    config = dict(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    config["vision_config"] = dict(VISION, **vision)
    model = ours(config)
    assert model.evaluate("params") == meta_numel(config)
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=40, images=1, image_height=20 if "image_size" in vision else 16, image_width=20 if "image_size" in vision else 16), *words)


def test_a_decode_step_runs_no_part_of_the_tower():
    """The tower reads the images with the prompt; a decode step (decoding = 1) neither computes nor reads any of it."""
    model = ours(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    images = dict(images=2, image_height=16, image_width=16)
    for quantity in ("forward_flops", "bytes_moved", "saved_activations"):
        text_only = model.with_conventions(decoding=1).evaluate(quantity, batch=2, seq=1, past=30)
        assert model.with_conventions(decoding=1, **images).evaluate(quantity, batch=2, seq=1, past=30) == text_only, quantity


def test_the_command_line_counts_the_images_as_the_counter_does(capsys, tmp_path):
    import json

    from checks import run_json

    config = CONFIGS["experts every 2nd layer, patch 4, untied head"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    counter = counted(build(config), **inputs(config, batch=1, seq=60, images=1, height=32, width=16))
    report = run_json(capsys, "flops", str(path), "--batch", "1", "--seq", "60", "--images", "1", "--image-size", "32x16", "--convention", "windowed=0")
    assert report["forward"] == counter.get_total_flops()


def test_an_image_size_not_a_multiple_of_the_patch_is_refused_where_transformers_floors_it():
    """transformers builds (image_size // patch_size)² + 1 positions and drops the pixels left over; every
    checkpoint's image_size is a multiple of its patch_size, and symform's count (image_size/patch_size)² + 1
    is whole only then: such a tower is refused in one line, never counted as a fraction of a parameter."""
    config = dict(CONFIGS["experts every 2nd layer, patch 4, untied head"])
    config["vision_config"] = dict(VISION, image_size=18)  # 4.5 patches a side
    with torch.device("meta"):
        real = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    assert real.vision_model.positional_embedding_vlm.shape[0] == (18 // 4) ** 2 + 1
    one_line_error(ConfigError, lambda: ours(config), "tile % patch", "image_size", "patch_size")
