"""Oracle: Gemma 4 configs with an audio_config against transformers' Gemma4ForConditionalGeneration.

A config with an audio tower and no vision tower is read by the gemma4 family, one with both by gemma4_vl; both
cost the audio tower and its embedder as the part `audio`. Parameters: numel() of the whole class on the meta device
(transformers' defaults) and on tiny instances, whole and per tower. FLOPs: tiny instances in float32 with eager
attention, counted by FlopCounterMode, with audio clips (and images) in every sequence, forward and backward. Each
clip is given as the feature extractor hands it over: audio_frames mel frames of 4·⌊subsampling_conv_channels[0]/4⌋
bins, every frame valid (no padding), so each clip fills ⌈audio_frames/4⌉ audio-token positions (each stride-2
halving rounds up). Saved activations: bf16 and fp32 on the CPU under the eager accounting, against the storages
autograd holds for the whole class.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import one_line_error  # noqa: E402
from oracle import check_params_per_tower, global_counts, hf_config, saved_for_backward  # noqa: E402

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

IMAGE, AUDIO, BOA, EOA = 150, 154, 155, 156  # token ids of the tiny vocabulary (160)
IDS = dict(image_token_id=IMAGE, boi_token_id=152, eoi_token_id=153, video_token_id=151, audio_token_id=AUDIO, boa_token_id=BOA, eoa_token_index=EOA)
TEXT = dict(
    vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, global_head_dim=24, sliding_window=8, hidden_size_per_layer_input=8, vocab_size_per_layer_input=160,
    max_position_embeddings=512,
)
AUDIO_CONFIG = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, subsampling_conv_channels=[16, 8], conv_kernel_size=3,
    attention_chunk_size=4, attention_context_left=5, attention_context_right=0, output_proj_dims=24,
)
VISION = dict(
    hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    patch_size=4, pooling_kernel_size=2, position_embedding_size=16,
)
CONFIGS = {
    "audio, no vision, tied head": dict(model_type="gemma4", text_config=TEXT, audio_config=AUDIO_CONFIG, **IDS),
    "audio with right context, odd channels, unclipped linears, untied head, no per-layer embeddings": dict(
        model_type="gemma4", tie_word_embeddings=False, **IDS,
        text_config=dict(TEXT, hidden_size_per_layer_input=0),
        audio_config=dict(AUDIO_CONFIG, num_hidden_layers=3, num_attention_heads=2, subsampling_conv_channels=[18, 6],
                          attention_chunk_size=3, attention_context_left=4, attention_context_right=2, conv_kernel_size=4,
                          use_clipped_linears=False),
    ),
    "audio and vision": dict(model_type="gemma4", text_config=TEXT, audio_config=AUDIO_CONFIG, vision_config=VISION, **IDS),
}  # fmt: skip
TOWERS = {"audio": ("audio_tower", "embed_audio")}


def build(config: dict):
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == "Gemma4ForConditionalGeneration"
    return model.eval()


def meta_numel(config: dict) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    return sum(p.numel() for p in model.parameters())


def ours(config: dict) -> Model:
    return Model.from_config(config).with_conventions(windowed=0)


def mel_bins(config: dict) -> int:
    return 4 * (config["audio_config"]["subsampling_conv_channels"][0] // 4)


def audio_inputs(config: dict, *, batch: int, seq: int, audios: int, frames: int) -> dict:
    """batch sequences of seq tokens, each with `audios` clips of `frames` mel frames wrapped in start/end-of-audio
    tokens (one placeholder per audio token: ⌈frames/4⌉), and the mel frames and their mask the processor hands over."""
    generator = torch.Generator().manual_seed(seq)
    ids = torch.randint(0, 100, (batch, seq), generator=generator)
    tokens = -(-frames // 4)
    for b in range(batch):
        at = 1
        for _ in range(audios):
            ids[b, at], ids[b, at + 1 + tokens] = BOA, EOA
            ids[b, at + 1 : at + 1 + tokens] = AUDIO
            at += tokens + 2
        assert at <= seq, "the sequence must hold the audio tokens"
    clips = batch * audios
    return dict(
        input_ids=ids,
        input_features=torch.randn(clips, frames, mel_bins(config), generator=generator),
        input_features_mask=torch.ones(clips, frames, dtype=torch.bool),
    )


def counted(model, **kwargs) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**kwargs)
    return counter


def tower_flops(counter: FlopCounterMode) -> int:
    by_module = counter.get_flop_counts()
    return sum(sum(by_module.get(f"Gemma4ForConditionalGeneration.model.{part}", {}).values()) for part in TOWERS["audio"])


@pytest.mark.parametrize("config", [{"model_type": "gemma4", "audio_config": {}}, {"model_type": "gemma4", "audio_config": {}, "vision_config": {}}, {"model_type": "gemma4", "audio_config": {}, "tie_word_embeddings": False}])
def test_the_defaults_are_transformers_defaults(config):
    """Gemma4AudioConfig's defaults: a 12-layer conformer 1024 wide, its embedder to the language model's width."""
    assert Model.from_config(config).spec.family == ("gemma4_vl" if "vision_config" in config else "gemma4")
    assert Model.from_config(config).evaluate("params") == meta_numel(config)


@pytest.mark.parametrize("case", CONFIGS)
def test_tiny_parameters_equal_numel_per_tower(case):
    towers = TOWERS | ({"visual": ("vision_tower", "embed_vision")} if "vision_config" in CONFIGS[case] else {})
    check_params_per_tower(CONFIGS[case], build(CONFIGS[case]), towers)


def test_the_audio_tower_adds_its_parameters_only():
    """Without audio_config the class has no audio tower: the same config costs exactly the tower less."""
    config = CONFIGS["audio, no vision, tied head"]
    without = {k: v for k, v in config.items() if k != "audio_config"}
    assert "audio" not in Model.from_config(without).evaluate_breakdown("params")
    assert Model.from_config(config).evaluate("params") - Model.from_config(without).evaluate("params") == Model.from_config(config).evaluate_breakdown("params")["audio"]


# (batch, seq, clips per sequence, mel frames per clip): padded last attention blocks, two clips per sequence, frames
# that each halving rounds up (30 s of audio is 2,999 frames: 750 tokens)
CLIPS = [(2, 40, 1, 40), (1, 48, 2, 24), (2, 24, 1, 12), (1, 40, 2, 43), (2, 24, 1, 13)]


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq, audios, frames", CLIPS)
def test_forward_flops_with_audio_equal_the_counter(case, batch, seq, audios, frames):
    config = CONFIGS[case]
    counter = counted(build(config), **audio_inputs(config, batch=batch, seq=seq, audios=audios, frames=frames))
    assert set(global_counts(counter)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"}
    workload = dict(batch=batch, seq=seq, audios=audios, audio_frames=frames)
    model = ours(config)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    assert model.evaluate_breakdown("forward_flops", **workload)["audio"] == tower_flops(counter)


def test_forward_flops_with_audio_and_images_equal_the_counter():
    config, batch, seq = CONFIGS["audio and vision"], 2, 48
    vision = config["vision_config"]
    patch, rows, cols = vision["patch_size"], 2, 4  # one 8 x 16 image: 8 patches, 2 soft tokens
    ids = audio_inputs(config, batch=batch, seq=seq, audios=1, frames=40)
    ids["input_ids"][:, 20:24] = torch.tensor([152, IMAGE, IMAGE, 153])
    x, y = torch.meshgrid(torch.arange(cols), torch.arange(rows), indexing="xy")
    positions = torch.stack([x, y], dim=-1).reshape(1, rows * cols, 2).expand(batch, -1, -1).contiguous()
    ids |= dict(pixel_values=torch.rand(batch, rows * cols, 3 * patch**2), image_position_ids=positions, mm_token_type_ids=(ids["input_ids"] == IMAGE).long())
    counter = counted(build(config), **ids)
    workload = dict(batch=batch, seq=seq, audios=1, audio_frames=40, images=1, image_height=8, image_width=16)
    assert ours(config).evaluate("forward_flops", **workload) == counter.get_total_flops()


@pytest.mark.parametrize("case", CONFIGS)
def test_text_only_forward_flops_run_no_part_of_the_tower(case):
    config, batch, seq = CONFIGS[case], 2, 20
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
    assert ours(config).evaluate("forward_flops", batch=batch, seq=seq) == counted(build(config), input_ids=ids).get_total_flops()


def test_a_decode_step_runs_no_part_of_the_tower():
    model = ours(CONFIGS["audio, no vision, tied head"])
    text_only = model.with_conventions(decoding=1).evaluate("forward_flops", batch=2, seq=1, past=30)
    assert model.with_conventions(decoding=1, audios=2, audio_frames=40).evaluate("forward_flops", batch=2, seq=1, past=30) == text_only


def test_audio_without_a_length_is_refused_in_one_line():
    model = ours(CONFIGS["audio, no vision, tied head"])
    one_line_error(ConfigError, lambda: model.evaluate("forward_flops", batch=1, seq=20, audios=1), "audio_frames", "--audio-frames")


DTYPES = {torch.bfloat16: 2, torch.float32: 4}


@pytest.mark.parametrize("case", [c for c in CONFIGS if "vision_config" not in CONFIGS[c]])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch, seq, audios, frames", [(2, 40, 1, 40), (1, 48, 2, 23)])
def test_saved_activations_with_audio_equal_what_eager_pytorch_keeps(case, dtype, batch, seq, audios, frames):
    """On the CPU: the eager accounting with the CPU's LayerNorm statistics (cpu_kernels = 1). The graph also holds
    buffers (per layer the soft cap; with clipped linears four bounds per projection): symform counts them like
    any kept tensor, as it does the vision tower's bounds."""
    config = CONFIGS[case]
    torch.manual_seed(0)
    real = transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=dtype).train()
    given = audio_inputs(config, batch=batch, seq=seq, audios=audios, frames=frames)
    given["input_features"] = given["input_features"].to(dtype)
    kept = saved_for_backward(real, given.pop("input_ids"), **given)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    ours = model.evaluate("saved_activations", batch=batch, seq=seq, audios=audios, audio_frames=frames)
    assert ours == kept


def test_text_only_saved_activations_keep_nothing_of_the_tower():
    config = CONFIGS["audio, no vision, tied head"]
    without = {k: v for k, v in config.items() if k != "audio_config"}
    for dtype, size in DTYPES.items():
        conventions = {"act_bytes": size, "cpu_kernels": 1}
        saved = [Model.from_config(c, accounting="eager", conventions=conventions).evaluate("saved_activations", batch=2, seq=40) for c in (config, without)]
        assert saved[0] == saved[1]


# -- the command line: --audio N --audio-frames F ------------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["audio, no vision, tied head"]))
    return str(path)


def test_the_command_line_counts_the_audio_as_the_counter_does(capsys, config_file):
    from checks import run_json

    config = CONFIGS["audio, no vision, tied head"]
    counter = counted(build(config), **audio_inputs(config, batch=1, seq=48, audios=2, frames=43))
    report = run_json(capsys, "flops", config_file, "--batch", "1", "--seq", "48", "--audio", "2", "--audio-frames", "43", "--convention", "windowed=0")
    assert report["forward"] == counter.get_total_flops()
    assert (report["audios"], report["audio_frames"]) == (2, 43)


@pytest.mark.parametrize(
    "options, words",
    [(["--audio", "1"], ["--audio-frames"]), (["--audio-frames", "40"], ["--audio"]), (["--audio", "0", "--audio-frames", "40"], ["--audio"])],
)
def test_audio_the_command_line_cannot_count_is_refused_in_one_line(capsys, config_file, options, words):
    from checks import run

    code, out, err = run(capsys, "flops", config_file, "--batch", "1", "--seq", "40", *options)
    assert code == 2 and not out and err.count("\n") == 1
    assert all(word in err for word in words), err


def test_audio_on_a_model_without_an_audio_tower_is_refused(capsys):
    from checks import run

    code, _, err = run(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "40", "--audio", "1", "--audio-frames", "40")
    assert code == 2 and "no audio tower" in err and err.count("\n") == 1


@pytest.mark.parametrize("case", [c for c in CONFIGS if "vision_config" not in CONFIGS[c]])
def test_a_forward_and_backward_with_audio_equal_the_counter_but_its_depthwise_weight_gradient(case):
    """Backward: the first convolution and relative_k_proj compute their weights' gradients alone (the mel frames
    and the positions' table need none). The counter takes the depthwise convolution's weight gradient for a dense
    one (its groups left out: d_audio times 2·clips·tokens·kernel·d_audio FLOPs); symform counts the grouped one,
    and the test names the difference."""
    config, batch, seq, audios, frames = CONFIGS[case], 2, 40, 1, 43
    real = build(config).train()
    given = audio_inputs(config, batch=batch, seq=seq, audios=audios, frames=frames)
    with FlopCounterMode(display=False) as counter:
        real(**given, labels=given["input_ids"]).loss.backward()
    workload = dict(batch=batch, seq=seq, audios=audios, audio_frames=frames)
    model = ours(config)
    audio = config["audio_config"]
    width, kernel, tokens = audio["hidden_size"], audio["conv_kernel_size"], -(-frames // 4)
    dense_as_counted = audio["num_hidden_layers"] * 2 * batch * audios * tokens * kernel * width * (width - 1)
    assert model.evaluate("forward_flops", **workload) + model.evaluate("backward_flops", **workload) == counter.get_total_flops() - dense_as_counted
