"""Oracle: videos read by Qwen3-VL's vision tower (qwen3_vl, and qwen3_5 / qwen3_5_moe configs with a vision_config)
against transformers' whole checkpoint class fed pixel_values_videos and video_grid_thw.

What a video is, as transformers' Qwen3VLVideoProcessor hands it over: F sampled frames of H x W pixels (multiples
of patch x merge after its resize), padded to a multiple of temporal_patch_size with copies of the last frame and
grouped into ceil(F / temporal_patch_size) temporal patches, the rows of pixel_values_videos, with
video_grid_thw = [ceil(F / temporal_patch_size), H / patch, W / patch]. The processor writes each temporal patch as
text "<t seconds>", vision start, (H/patch)(W/patch)/merge² video tokens, vision end (Qwen3VLProcessor's
replace_video_token); the sequences here are laid out the same way, the timestamp a few text tokens.

FLOPs: tiny instances in float32 with eager attention, counted by FlopCounterMode, with one and two videos per
sequence of an even and an odd frame count, with images and videos together, forward and backward. Saved
activations: the bytes autograd keeps for backward in a training forward in bf16 and fp32 with videos, and with
images and videos together, under the eager accounting. Parameters: unchanged by any workload.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import global_counts, saved_with_images  # noqa: E402
from test_family_qwen3_vl import CONFIGS, DTYPES, END, IMAGE, START, build  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

VIDEO = 151  # the configs' video_token_id
TIMESTAMP = 6  # text tokens written before each temporal patch: "<0.5 seconds>" is < 0 . 5 " seconds" > to Qwen's tokenizer


def video_grid(config: dict, frames: int, height: int, width: int) -> tuple[int, int, int]:
    """video_grid_thw of one video: the processor pads the frames to a multiple of temporal_patch_size."""
    vision = config["vision_config"]
    patch, temporal = vision["patch_size"], vision["temporal_patch_size"]
    return -(-frames // temporal), height // patch, width // patch


def visual_inputs(config: dict, *, batch: int, seq: int, videos: int, frames: int, height: int, width: int, images: int = 0, image_size: int = 0) -> dict:
    """batch sequences of seq tokens, each with ``images`` square images of image_size pixels, then ``videos`` videos
    laid out as Qwen3VLProcessor writes them (each temporal patch: timestamp text, start, video tokens, end), and the
    pixel rows and grids the processors hand the model beside them."""
    vision = config["vision_config"]
    merge, patch = vision["spatial_merge_size"], vision["patch_size"]
    row = vision.get("in_channels", 3) * vision["temporal_patch_size"] * patch**2
    generator = torch.Generator().manual_seed(seq)
    ids = torch.randint(0, 100, (batch, seq), generator=generator)
    t, h, w = video_grid(config, frames, height, width)
    image_rows, image_tokens = (image_size // patch) ** 2, (image_size // patch) ** 2 // merge**2
    for b in range(batch):
        at = 1
        for _ in range(images):
            ids[b, at], ids[b, at + 1 : at + 1 + image_tokens], ids[b, at + 1 + image_tokens] = START, IMAGE, END
            at += image_tokens + 2
        for _ in range(videos * t):
            at += TIMESTAMP
            ids[b, at], ids[b, at + 1 : at + 1 + h * w // merge**2], ids[b, at + 1 + h * w // merge**2] = START, VIDEO, END
            at += h * w // merge**2 + 2
        assert at <= seq, "the sequence must hold the visual tokens and their text"
    given = dict(
        input_ids=ids,
        pixel_values_videos=torch.randn(batch * videos * t * h * w, row, generator=generator),
        video_grid_thw=torch.tensor([[t, h, w]] * (batch * videos)),
        mm_token_type_ids=(ids == IMAGE).long() + 2 * (ids == VIDEO).long(),
    )
    if images:
        side = image_size // patch
        given |= dict(pixel_values=torch.randn(batch * images * image_rows, row, generator=generator), image_grid_thw=torch.tensor([[1, side, side]] * (batch * images)))
    return given


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


def workload(batch: int, seq: int, videos: int, frames: int, height: int, width: int, images: int = 0, image_size: int = 0) -> dict:
    return dict(batch=batch, seq=seq, videos=videos, video_frames=frames, video_height=height, video_width=width, images=images, image_height=image_size, image_width=image_size)


# (batch, seq, videos per sequence, frames, height, width): one video of an odd frame count, two per sequence of an
# even one, two of 5 frames (3-frame patches: 2 temporal patches, the second padded)
VIDEOS = [(1, 90, 1, 3, 16, 24), (2, 120, 2, 4, 8, 16), (1, 130, 2, 5, 16, 8)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, videos, frames, height, width", VIDEOS)
def test_forward_flops_with_videos_equal_the_counter(case, batch, seq, videos, frames, height, width):
    config = CONFIGS[case]
    counter = counted(build(config), **visual_inputs(config, batch=batch, seq=seq, videos=videos, frames=frames, height=height, width=width))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    model, given = Model.from_config(config), workload(batch, seq, videos, frames, height, width)
    assert model.evaluate("forward_flops", **given) == counter.get_total_flops()
    tower = counter.get_flop_counts()["Qwen3VLForConditionalGeneration.model.visual"]
    parts = model.evaluate_breakdown("forward_flops", **given)
    assert parts["visual"] == 0 and parts["visual_videos"] == sum(tower.values())


@pytest.mark.parametrize("case", CONFIGS)
def test_images_and_videos_in_one_sequence_equal_the_counter(case):
    """The tower runs twice, once on the images and once on the videos, each chunk of its own size."""
    config = CONFIGS[case]
    shape = dict(batch=2, seq=150, videos=1, frames=3, height=8, width=16, images=2, image_size=16)
    counter = counted(build(config), **visual_inputs(config, **shape))
    model = Model.from_config(config)
    assert model.evaluate("forward_flops", **workload(**shape)) == counter.get_total_flops()
    parts = model.evaluate_breakdown("forward_flops", **workload(**shape))
    tower = counter.get_flop_counts()["Qwen3VLForConditionalGeneration.model.visual"]
    assert parts["visual"] + parts["visual_videos"] == sum(tower.values()) and parts["visual"] > 0


def test_a_forward_and_backward_with_videos_equal_the_counter():
    config = CONFIGS["two DeepStack mergers, untied head"]
    real = build(config).train()
    shape = dict(batch=2, seq=120, videos=2, frames=3, height=8, width=16)
    with FlopCounterMode(display=False) as counter:
        real(**visual_inputs(config, **shape)).logits.sum().backward()
    assert Model.from_config(config).evaluate("train_step_flops", **workload(**shape)) == counter.get_total_flops()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, videos, frames, height, width", VIDEOS[:2])
def test_saved_activations_with_videos_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, videos, frames, height, width):
    """On the CPU (its LayerNorm statistics), under the eager accounting."""
    config = CONFIGS[case]
    kept = saved_with_images(config, visual_inputs(config, batch=batch, seq=seq, videos=videos, frames=frames, height=height, width=width), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", **workload(batch, seq, videos, frames, height, width)) == kept


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONFIGS)
def test_saved_activations_with_images_and_videos_equal_what_eager_pytorch_keeps(case, dtype):
    """With both, DeepStack's visual positions are a mask of their own and its features are scattered through two more."""
    config, shape = CONFIGS[case], dict(batch=2, seq=150, videos=1, frames=3, height=8, width=16, images=2, image_size=16)
    kept = saved_with_images(config, visual_inputs(config, **shape), dtype)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", **workload(**shape)) == kept


@pytest.mark.parametrize("case", CONFIGS)
def test_videos_change_no_parameter_count(case):
    config = CONFIGS[case]
    model = Model.from_config(config)
    with_videos = model.with_conventions(videos=2, video_frames=7, video_height=16, video_width=16)
    assert with_videos.evaluate("params") == model.evaluate("params") == sum(p.numel() for p in build(config).parameters())
    assert with_videos.evaluate("active_params") == model.evaluate("active_params")
    assert with_videos.evaluate_breakdown("params").get("visual_videos", 0) == 0


def test_a_decode_step_runs_no_part_of_the_tower_on_videos():
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])
    videos = dict(videos=2, video_frames=4, video_height=16, video_width=16)
    for quantity in ("forward_flops", "bytes_moved"):
        text_only = model.with_conventions(decoding=1).evaluate(quantity, batch=2, seq=1, past=30)
        assert model.with_conventions(decoding=1, **videos).evaluate(quantity, batch=2, seq=1, past=30) == text_only, quantity


def test_frames_count_in_temporal_patches():
    """Hand arithmetic: 2k - 1 and 2k frames are k temporal patches of 2, so they cost the same; 2k + 1 costs more."""
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])

    def flops(frames: int):
        return model.evaluate("forward_flops", batch=1, seq=200, videos=1, video_frames=frames, video_height=16, video_width=16)

    assert flops(3) == flops(4) < flops(5) == flops(6)


@pytest.mark.parametrize(
    "setting, words",
    [
        (dict(videos=1, video_frames=4, video_height=12, video_width=16), ("video_height % (patch*merge)", "multiples of patch*merge")),
        (dict(videos=1, video_frames=4, video_height=16, video_width=20), ("video_width % (patch*merge)", "multiples of patch*merge")),
        (dict(videos=1, video_frames=1, video_height=16, video_width=16), ("temporal_patch", "frames")),
        (dict(videos=1), ("video_frames", "--video-size")),
    ],
)
def test_a_video_the_tower_cannot_read_is_refused_in_one_line(setting, words):
    model = Model.from_config(CONFIGS["two DeepStack mergers, untied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=200, **setting), *words)


# -- Qwen3.5: the same tower without DeepStack ---------------------------------------------------------------


def test_qwen3_5_configs_with_a_vision_config_count_videos_as_the_counter_does():
    from test_family_qwen3_5_vl import CLASSES
    from test_family_qwen3_5_vl import CONFIGS as QWEN3_5
    from test_family_qwen3_5_vl import build as build_qwen3_5
    from test_family_recurrent import uncounted_solves

    shape = dict(batch=2, seq=120, videos=2, frames=3, height=8, width=16)
    for case, config in QWEN3_5.items():
        counter = counted(build_qwen3_5(config), **visual_inputs(config, **shape))
        model = Model.from_config(config)
        assert model.evaluate("forward_flops", **workload(**shape)) == counter.get_total_flops() + uncounted_solves(config, 2, 120), case
        tower = counter.get_flop_counts()[f"{CLASSES[config['model_type']]}.model.visual"]
        assert model.evaluate_breakdown("forward_flops", **workload(**shape))["visual_videos"] == sum(tower.values()), case


# -- the command line: --videos N --video-frames F --video-size HxW ----------------------------------------------


@pytest.fixture
def config_file(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["two DeepStack mergers, untied head"]))
    return str(path)


def test_the_command_line_counts_the_videos_as_the_counter_does(capsys, config_file):
    from checks import run_json

    config = CONFIGS["two DeepStack mergers, untied head"]
    counter = counted(build(config), **visual_inputs(config, batch=2, seq=120, videos=2, frames=3, height=8, width=16))
    report = run_json(capsys, "flops", config_file, "--batch", "2", "--seq", "120", "--videos", "2", "--video-frames", "3", "--video-size", "8x16")
    assert report["forward"] == counter.get_total_flops()
    assert (report["videos"], report["video_frames"], report["video_height"], report["video_width"]) == (2, 3, 8, 16)
    square = run_json(capsys, "flops", config_file, "--batch", "1", "--seq", "120", "--videos", "1", "--video-frames", "4", "--video-size", "16")
    assert square["video_height"] == square["video_width"] == 16 and "images" not in square


@pytest.mark.parametrize(
    "options, words",
    [
        (["--videos", "1"], ["--video-frames", "--video-size"]),
        (["--videos", "1", "--video-frames", "4"], ["--video-size"]),
        (["--video-frames", "4", "--video-size", "16"], ["--videos"]),
        (["--video-size", "16"], ["--videos"]),
        (["--videos", "1", "--video-frames", "4", "--video-size", "16x"], ["HxW"]),
        (["--videos", "0", "--video-frames", "4", "--video-size", "16"], ["--videos"]),
        (["--videos", "1", "--video-frames", "0", "--video-size", "16"], ["--video-frames"]),
        (["--videos", "1", "--video-frames", "1", "--video-size", "16"], ["temporal_patch"]),
        (["--videos", "1", "--video-frames", "4", "--video-size", "12x16"], ["multiples of patch*merge"]),
    ],
)
def test_videos_the_command_line_cannot_count_are_refused_in_one_line(capsys, config_file, options, words):
    from checks import run

    code, out, err = run(capsys, "flops", config_file, "--batch", "1", "--seq", "120", *options)
    assert code == 2 and not out and err.count("\n") == 1
    assert all(word in err for word in words), err


@pytest.mark.parametrize("model", ["qwen3-0.6b"])
def test_videos_on_a_model_whose_tower_reads_none_are_refused(capsys, model):
    from checks import run

    code, _, err = run(capsys, "flops", model, "--batch", "1", "--seq", "40", "--videos", "1", "--video-frames", "4", "--video-size", "448")
    assert code == 2 and "reads videos" in err and err.count("\n") == 1
