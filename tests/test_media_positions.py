"""Images, videos and audio clips take token positions among the --seq tokens: a sequence too short to hold
them is refused (the command line, Model.evaluate and sweep alike), never costed as if it held them.

The token counts below follow each processor's rule, worked out by hand: Qwen3-VL merges 2 × 2 patches of 16
pixels (448 × 448: 14² = 196 tokens; a video of 4 frames at 448 × 256, two frames a temporal patch: 2 · 14 · 8 =
224); Gemma 4 pools 3 × 3 patches of 16 pixels (1536 × 1536: 32² = 1,024); Llama 4 cuts 336-pixel tiles,
adds a global tile when it cuts more than one and folds 2 × 2 patches of 14 pixels (672 × 672: 5 tiles of
12² = 720); Gemma 4's audio makes one token per 4 mel frames (400 frames: 100).
"""

from __future__ import annotations

import pytest

import symform
from symform.engine.errors import ConfigError
from symform.interface.cli.cli import main

QWEN3_VL = "docs/examples/qwen3_vl_defaults.json"
CASES = [  # (model, the media's command-line arguments, the media's settings, their tokens)
    (QWEN3_VL, ["--images", "1", "--image-size", "448x448"], {"images": 1, "image_height": 448, "image_width": 448}, 196),
    (QWEN3_VL, ["--videos", "1", "--video-frames", "4", "--video-size", "448x256"], {"videos": 1, "video_frames": 4, "video_height": 448, "video_width": 256}, 224),
    ("qwen3.5-0.8b", ["--images", "1", "--image-size", "448x448"], {"images": 1, "image_height": 448, "image_width": 448}, 196),
    ("gemma-4-31b-it", ["--images", "1", "--image-size", "1536x1536"], {"images": 1, "image_height": 1536, "image_width": 1536}, 1024),
    ("llama-4-maverick", ["--images", "1", "--image-size", "672x672"], {"images": 1, "image_height": 672, "image_width": 672}, 720),
    ("docs/examples/gemma4_audio_defaults.json", ["--audio", "1", "--audio-frames", "400"], {"audios": 1, "audio_frames": 400}, 100),
]
IDS = [f"{model.rsplit('/', 1)[-1]}-{args[0][2:]}" for model, args, _, _ in CASES]


@pytest.mark.parametrize("model, args, settings, tokens", CASES, ids=IDS)
def test_a_sequence_holds_its_media_tokens_or_is_refused(model, args, settings, tokens, capsys):
    assert main(["flops", model, "--batch", "2", "--seq", str(tokens), *args]) == 0
    capsys.readouterr()
    assert main(["flops", model, "--batch", "2", "--seq", str(tokens - 1), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not hold" in err and "give --seq at least" in err


@pytest.mark.parametrize("model, args, settings, tokens", CASES, ids=IDS)
def test_evaluate_and_sweep_refuse_a_sequence_shorter_than_its_media(model, args, settings, tokens):
    loaded = symform.load(model)
    assert loaded.evaluate("forward_flops", batch=1, seq=tokens, **settings) > 0
    with pytest.raises(ConfigError, match="give --seq at least"):
        loaded.evaluate("forward_flops", batch=1, seq=tokens - 1, **settings)
    with_media = loaded.with_conventions(**settings)
    with pytest.raises(ConfigError, match="give --seq at least"):
        with_media.evaluate("saved_activations", batch=3, seq=tokens - 1)
    with pytest.raises(ConfigError, match=f"seq={tokens - 1}.*give --seq at least"):  # as evaluate words it
        symform.sweep(with_media, ["forward_flops"], grid={"seq": [tokens - 1, tokens], "batch": [1]})
    swept = symform.sweep(with_media, ["forward_flops"], grid={"seq": [tokens, 2 * tokens], "batch": [1]})
    assert list(swept["seq"]) == [tokens, 2 * tokens]


def test_a_decode_step_reads_no_media_tokens():
    """A decode step's new token is text: the images sit in the cache (past), not among its seq tokens."""
    loaded = symform.load(QWEN3_VL).with_conventions(images=1, image_height=448, image_width=448)
    assert loaded.evaluate("forward_flops", batch=1, seq=1, past=195, decoding=1) > 0


def test_a_workload_from_numpy_is_checked_the_same():
    np = pytest.importorskip("numpy")
    loaded = symform.load(QWEN3_VL).with_conventions(images=1, image_height=448, image_width=448)
    assert loaded.evaluate("forward_flops", batch=np.int64(1), seq=np.int64(196)) == loaded.evaluate("forward_flops", batch=1, seq=196)
    with pytest.raises(ConfigError, match="give --seq at least"):
        loaded.evaluate("forward_flops", batch=1, seq=np.int64(195))


def test_roofline_timing_and_the_planner_refuse_a_sequence_shorter_than_its_media():
    """The Python API's phase functions check the workload as the commands do (qwen3.5-0.8b: 196 tokens)."""
    from symform.analysis.plans.planner import plan
    from symform.analysis.time.roofline import roofline
    from symform.analysis.time.timing import training_time
    from symform.analysis.time.phase_time import inference_time, prefill_time

    loaded = symform.load("qwen3.5-0.8b").with_conventions(images=1, image_height=448, image_width=448)
    refused = {
        "roofline": lambda seq: roofline(loaded, "h100-sxm", phase="prefill", batch=1, seq=seq),
        "prefill_time": lambda seq: prefill_time(loaded, "h100-sxm", batch=1, prompt=seq),
        "inference_time": lambda seq: inference_time(loaded, "h100-sxm", batch=1, prompt=seq, output=2),
        "training_time": lambda seq: training_time(loaded, "h100-sxm", global_batch=1, micro_batch=1, seq=seq),
        "plan": lambda seq: plan(loaded, "h100-sxm", devices=1, global_batch=1, seq=seq, top=1),
    }
    for name, call in refused.items():
        with pytest.raises(ConfigError, match="seq=195.*give --seq at least their tokens"):
            call(195)
        assert call(196) is not None, name
    # a decode step's images are in the cache: its one new token is text
    assert roofline(loaded, "h100-sxm", phase="decode", batch=1, context=195).total.flops > 0


def test_images_and_audio_together_share_the_one_sequence(capsys):
    """Gemma 4 with both towers: 1,024 image soft tokens plus 100 audio tokens need 1,124 positions, though
    either alone fits in fewer."""
    model = "docs/examples/gemma4_audio_defaults.json"
    media = ["--images", "1", "--image-size", "1536x1536", "--audio", "1", "--audio-frames", "400"]
    assert main(["flops", model, "--batch", "1", "--seq", "1124", *media]) == 0
    capsys.readouterr()
    assert main(["flops", model, "--batch", "1", "--seq", "1123", *media]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seq=1123" in err and "together take more positions" in err
    settings = {"images": 1, "image_height": 1536, "image_width": 1536, "audios": 1, "audio_frames": 400}
    with_media = symform.load(model).with_conventions(**settings)
    with pytest.raises(ConfigError, match="seq=1123.*together take more positions"):  # as the command words it
        symform.sweep(with_media, ["forward_flops"], grid={"seq": [1123, 1124], "batch": [1]})
    assert list(symform.sweep(with_media, ["forward_flops"], grid={"seq": [1124], "batch": [1]})["seq"]) == [1124]


def test_the_first_model_of_its_structure_checks_the_media_its_workload_gives():
    """A model whose own checks wait for nothing skipped every check of the workload, even one that gave media
    (and so a model with checks of its own): in a fresh process, the first model built printed a number for a
    sequence shorter than its image's 196 tokens."""
    code = (
        "import symform\n"
        f"m = symform.load({QWEN3_VL!r})\n"
        "media = dict(images=1, image_height=448, image_width=448)\n"
        "m.evaluate('forward_flops', batch=1, seq=196, **media)\n"
        "try:\n"
        "    m.evaluate('forward_flops', batch=1, seq=195, **media)\n"
        "except symform.ConfigError as e:\n"
        "    print(e)\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
    assert "give --seq at least" in done.stdout, done.stdout + done.stderr
