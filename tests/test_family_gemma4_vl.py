"""Oracle: the gemma4 family (Gemma 4 configs) against transformers' Gemma4ForConditionalGeneration.

Parameters: numel() of the whole class on the meta device (transformers' defaults, with and without a vision
tower) and on tiny instances, the vision tower and its embedder per tower. FLOPs: tiny instances in float32 with
eager attention, counted by FlopCounterMode, text only and with images in every sequence. Each image is given as
the processor hands it over: rows of 3·patch² pixels, one per patch, with their (x, y) positions, no padding.
The counter computes every sliding-window layer's whole score matrix and masks it, so symform is matched with
the convention windowed = 0 (tests/test_family_gemma.py checks what windowed = 1 changes). Saved activations: the
bytes autograd keeps for backward in a training forward in bf16 and fp32, text only and with images of two sizes,
under the eager accounting. A config with an audio tower too: tests/test_family_gemma4_audio.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import global_counts, hf_config, image_token_ids, saved_with_images  # noqa: E402
from test_family_qwen3_vl import DTYPES, given_for  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

IMAGE, START, END = 150, 152, 153  # token ids of the tiny vocabulary (160)
IDS = dict(image_token_id=IMAGE, boi_token_id=START, eoi_token_id=END, video_token_id=151, audio_token_id=154, boa_token_id=155, eoa_token_index=156)
TEXT = dict(
    vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, global_head_dim=24, sliding_window=8, hidden_size_per_layer_input=8, vocab_size_per_layer_input=160,
    max_position_embeddings=512,
)
VISION = dict(
    hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    patch_size=4, pooling_kernel_size=2, position_embedding_size=16,
)
CONFIGS = {
    "grouped-query tower, pool 2, tied head": dict(model_type="gemma4", text_config=TEXT, vision_config=VISION, **IDS),
    "multi-head tower, patch 2, pool 4, 3 layers, untied head, no per-layer embeddings": dict(
        model_type="gemma4", tie_word_embeddings=False, **IDS,
        text_config=dict(TEXT, hidden_size_per_layer_input=0),
        vision_config=dict(VISION, num_hidden_layers=3, num_key_value_heads=4, patch_size=2, pooling_kernel_size=4),
    ),
}  # fmt: skip


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Gemma4ForConditionalGeneration"
    return model.eval()


def tower_parameters(real) -> int:
    return sum(p.numel() for part in (real.model.vision_tower, real.model.embed_vision) for p in part.parameters())


def inputs(config: dict, *, batch: int, seq: int, images: int, height: int, width: int) -> dict:
    """batch sequences of seq tokens, each with `images` images of height x width pixels wrapped in start/end tokens
    (one placeholder per soft token), and the patch rows and (x, y) patch positions the processor hands the model."""
    vision = config["vision_config"]
    patch, pool = vision["patch_size"], vision["pooling_kernel_size"]
    rows, cols = height // patch, width // patch
    soft = rows * cols // pool**2
    ids, generator = image_token_ids(batch, seq, images, soft, (IMAGE, START, END))
    x, y = torch.meshgrid(torch.arange(cols), torch.arange(rows), indexing="xy")
    positions = torch.stack([x, y], dim=-1).reshape(1, rows * cols, 2).expand(batch * images, -1, -1).contiguous()
    return dict(
        input_ids=ids,
        pixel_values=torch.rand(batch * images, rows * cols, 3 * patch**2, generator=generator),
        image_position_ids=positions,
        mm_token_type_ids=(ids == IMAGE).long(),
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
    assert type(model).__name__ == "Gemma4ForConditionalGeneration"
    return sum(p.numel() for p in model.parameters())


ARCHITECTURES = {"architectures": ["Gemma4ForConditionalGeneration"]}  # as published checkpoints name their class


@pytest.mark.parametrize("config", [
    {"model_type": "gemma4"}, {"model_type": "gemma4", "vision_config": {}}, {"model_type": "gemma4", "vision_config": {}, "tie_word_embeddings": False},
    {"model_type": "gemma4", **ARCHITECTURES}, {"model_type": "gemma4", "vision_config": {}, **ARCHITECTURES},
])  # fmt: skip
def test_the_defaults_are_transformers_defaults(config):
    """Gemma4Config's towers are optional: without a vision_config the class is the language model and its head.
    With one, the class is the same whether or not `architectures` names it: the vision_config decides."""
    assert Model.from_config(config).spec.family == ("gemma4_vl" if "vision_config" in config else "gemma4")
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    config = CONFIGS[case]
    real = build(config)
    model = ours(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    assert model.evaluate_breakdown("params")["visual"] == tower_parameters(real)


@pytest.mark.parametrize("case", CONFIGS)
def test_text_only_forward_flops_equal_the_counter(case):
    config, batch, seq = CONFIGS[case], 2, 20
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    counter = counted(build(config), input_ids=ids)
    assert ours(config).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()


# (batch, seq, images per sequence, height, width): two per sequence, a tall one
IMAGES = [(2, 40, 2, 8, 16), (1, 40, 1, 24, 8)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_forward_flops_with_images_equal_the_counter(case, batch, seq, images, height, width):
    config = CONFIGS[case]
    real = build(config)
    counter = counted(real, **inputs(config, batch=batch, seq=seq, images=images, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.bmm"}
    workload = dict(batch=batch, seq=seq, images=images, image_height=height, image_width=width)
    model = ours(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    by_module = counter.get_flop_counts()
    tower = sum(sum(by_module.get(f"Gemma4ForConditionalGeneration.model.{part}", {}).values()) for part in ("vision_tower", "embed_vision"))
    assert model.evaluate_breakdown("forward_flops", **workload)["visual"] == tower


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, images, height, width", [(2, 40, 0, 0, 0), *IMAGES])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, images, height, width):
    """On the CPU, the eager accounting (whole score matrices in the sliding layers, views at their storage's size)."""
    config = CONFIGS[case]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clamped_projections_and_standardised_soft_tokens_keep_what_eager_pytorch_keeps(dtype):
    """use_clipped_linears clamps every block projection's input and output between bound buffers; standardize
    shifts and scales the pooled soft tokens by buffers in fp32."""
    config = dict(CONFIGS["grouped-query tower, pool 2, tied head"], vision_config=dict(VISION, use_clipped_linears=True, standardize=True))
    batch, seq, images, height, width = IMAGES[0]
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch, seq, images, height, width", IMAGES)
def test_one_key_head_of_one_image_is_kept_as_a_view(dtype, batch, seq, images, height, width):
    """A tower with one key/value head: for a single image the keys and values repeated to the query heads are views
    of that head (the products keep its storage), for several images copies."""
    config = dict(CONFIGS["grouped-query tower, pool 2, tied head"], vision_config=dict(VISION, num_key_value_heads=1))
    kept = saved_with_images(config, given_for(config, batch, seq, images, height, width, inputs), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq, images=images, image_height=height, image_width=width) == kept


@pytest.mark.parametrize("size, words", [((12, 16), ("image_height", "patch*pool")), ((16, 12), ("image_width", "patch*pool"))])
def test_an_image_the_pooler_cannot_pool_is_refused_in_one_line(size, words):
    model = ours(CONFIGS["grouped-query tower, pool 2, tied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=20, images=1, image_height=size[0], image_width=size[1]), *words)


def test_a_decode_step_runs_no_part_of_the_tower():
    model = ours(CONFIGS["grouped-query tower, pool 2, tied head"])
    text_only = model.with_conventions(decoding=1).evaluate("forward_flops", batch=2, seq=1, past=30)
    assert model.with_conventions(decoding=1, images=2, image_height=16, image_width=16).evaluate("forward_flops", batch=2, seq=1, past=30) == text_only
