"""Pipeline stages as a framework places them (Megatron-Core's pipeline_model_parallel_layout): the layout is read as
Megatron-Core reads it, and the device with the most work paces the step."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.memory.settings import Layout
from symform.analysis.parallel import pipeline_layout
from symform.analysis.time import timing
from symform.analysis.time.estimate import training_estimate
from symform.engine.errors import ConfigError

from checks import run, run_json


def test_the_layout_unrolls_as_megatron_cores_own_example():
    """parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" is [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]."""
    assert pipeline_layout.parse("Ettt|(tt|)*29,m|L", 32) == ("Ettt", *["tt"] * 29, "m", "L")
    # its documentation's PP16 × VPP2 example: the embedding with 3 layers, 29 stages of 2, the MTP module, the loss
    assert pipeline_layout.parse("Et*3|(tt|)*29,m|L", 32) == ("Ettt", *["tt"] * 29, "m", "L")


def test_an_uneven_layout_is_paced_by_its_heaviest_device():
    work = {"E": Fraction(0), "t": Fraction(3), "m": Fraction(5), "L": Fraction(2)}
    # one stage a device: 6, 6, 6 and 8 of 26
    assert pipeline_layout.pace(("Ett", "tt", "tt", "ttL"), 4, work) == Fraction(8 * 4, 26)
    # two chunks a device (Megatron-Core runs stage v·p + d on device d): device 0 "Et" + "tt" = 9, device 1 "t" + "tmL" = 13
    assert pipeline_layout.pace(("Et", "t", "tt", "tmL"), 2, work) == Fraction(13 * 2, 22)


@settings(max_examples=60, deadline=None)
@given(layers=st.lists(st.integers(0, 6), min_size=2, max_size=12), head=st.integers(0, 9))
def test_the_pace_is_at_least_one_and_one_only_when_the_devices_hold_the_same(layers, head):
    stages = tuple(("E" if i == 0 else "") + "t" * n + ("L" if i == len(layers) - 1 else "") for i, n in enumerate(layers))
    work = {"E": Fraction(0), "t": Fraction(1), "m": Fraction(0), "L": Fraction(head)}
    held = [n + (head if i == len(layers) - 1 else 0) for i, n in enumerate(layers)]
    found = pipeline_layout.pace(stages, len(layers), work)
    if sum(held):
        assert found == Fraction(max(held) * len(held), sum(held))
        assert found >= 1 and (found == 1) == (len(set(held)) == 1)


def test_llama_on_two_stages_is_paced_by_the_stage_with_the_head():
    """Llama 3 8B, 32 layers as 'Et*16|t*16L' on two stages: the second stage holds 16 layers and the output layer.
    Forward FLOPs of one sequence of s tokens, written out from the model's sizes (d 4096, 32 query and 8 key/value
    heads of 128, MLP 14336, vocabulary 128256): each layer's projections 2·s·(2·4096² + 2·4096·1024 + 3·4096·14336)
    and its attention scores and context 2·2·s²·4096 (the causal convention of 1 counts the whole square), the
    output layer 2·s·4096·128256."""
    model = symform.load("llama-3-8b")
    s = 2048
    layer = 2 * s * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 2 * s * s * 4096
    head = 2 * s * 4096 * 128256
    found = timing.stage_pace(model, Layout(data=1, pipeline=2, pipeline_layout="Et*16|t*16L"), 1, s)
    assert found == Fraction(2 * (16 * layer + head), 32 * layer + head)


def test_the_slowest_device_scales_the_step_and_the_estimate_stays_between_its_bounds():
    model = symform.load("llama-3-8b")
    step = dict(global_batch=32, micro_batch=1, seq=2048)
    even, uneven = Layout(data=4, pipeline=2), Layout(data=4, pipeline=2, pipeline_layout="Et*8|t*24L")
    balanced = timing.training_time(model, "h100-sxm", flash=True, layout=even, **step)
    paced = timing.training_time(model, "h100-sxm", flash=True, layout=uneven, **step)
    assert paced.stage_pace > 1.4
    assert paced.t_math == pytest.approx(balanced.t_math * paced.stage_pace, rel=1e-12)
    first, second = (training_estimate(model, "h100-sxm", layout=layout, bounds=bounds, **step) for layout, bounds in ((even, balanced), (uneven, paced)))
    assert second.compute_s == pytest.approx(first.compute_s * paced.stage_pace, rel=1e-12)
    assert paced.time_lower <= second.step.estimate <= second.step.ceiling


@pytest.mark.parametrize(
    "layout, pipeline, words",
    [
        ("Et*16|t*15L", 2, "31 transformer layers"),
        ("Et*16|t*16mL", 2, "1 multi-token-prediction modules (m) where llama-3-8b has 0"),
        ("Et*16|t*16L|", 2, "3 stages"),
        ("Et*16|t*16X", 2, "'X', which is no layer"),
        ("t*16|Et*16L", 2, "begin with the embedding (E)"),
        ("tEt*15|t*16L", 2, "begin with the embedding (E)"),
        ("Et*16|t*15Lt", 2, "end with the loss (L)"),
        ("E(t*16|)*99999999L", 2, "more than 10,000 letters"),
        ("E" + "(t)*1" * 5000 + "|L", 2, "characters long"),
        ("E((t|)*2)*3L", 2, "without nesting"),
        ("Et*16|(t*16L", 2, "cannot read"),
    ],
)
def test_layouts_that_do_not_place_the_model_are_refused_in_one_line(layout, pipeline, words):
    model = symform.load("llama-3-8b")
    with pytest.raises(ConfigError) as refused:
        timing.stage_pace(model, Layout(data=1, pipeline=pipeline, pipeline_layout=layout), 1, 128)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_the_command_line_takes_a_layout_and_refuses_a_bad_one_with_status_2(capsys):
    argv = ["time", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "8", "--seq", "2048"]
    code, out, _ = run(capsys, *argv, "--pp", "2", "--pipeline-layout", "Et*8|t*24L")
    assert code == 0 and "the slowest device holds" in out
    code, out, err = run(capsys, *argv, "--pp", "2", "--pipeline-layout", "Et*8|t*23L")
    assert code == 2 and out == "" and "31 transformer layers" in err and err.strip().count("\n") == 0
    code, _, err = run(capsys, *argv, "--pipeline-layout", "Et*16|t*16L")
    assert code == 2 and "pipeline degree above 1" in err


def test_a_repeat_count_is_read_as_its_number_and_a_layout_must_be_text():
    assert pipeline_layout.parse("Et*0016|t*16L", 2) == ("E" + "t" * 16, "t" * 16 + "L")
    with pytest.raises(ConfigError, match="not text"):
        pipeline_layout.parse(["E", "L"], 1)


def test_a_pipeline_layout_is_refused_when_serving(capsys):
    """--pp, --chunks and --schedule are refused with --infer; a layout, which only a training pipeline reads, too."""
    code, out, err = run(capsys, "time", "llama-3-8b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "128", "--output", "2", "--pipeline-layout", "garbage")
    assert code == 2 and out == "" and "--pipeline-layout" in err


def test_a_vision_tower_runs_on_the_first_stage_not_beside_the_loss():
    """Megatron-Core builds a vision-language model's encoder on the first pipeline stage, with the embedding: moving
    layers off the first stage lightens the device that holds the tower. With 4 images of 896², Gemma 3 12B's tower is
    over a tenth of the forward FLOPs, so 20 layers beside it are better balanced than 24."""
    model = symform.load("gemma-3-12b").with_conventions(images=4, image_height=896, image_width=896)
    parts = model.evaluate_breakdown("forward_flops", batch=1, seq=4096)
    assert parts["visual"] > 0.1 * sum(parts.values())
    pace = {lay: timing.stage_pace(model, Layout(data=1, pipeline=2, pipeline_layout=lay), 1, 4096) for lay in ("Et*24|t*24L", "Et*20|t*28L")}
    assert pace["Et*20|t*28L"] < pace["Et*24|t*24L"]


@pytest.mark.parametrize("layout, words", [("Etttt|(tttt|)*14tmmL", "2 multi-token-prediction modules (m) where deepseek-v3 has 1"), ("Emttt|(tttt|)*14ttL", "after a multi-token-prediction module")])
def test_the_layout_names_the_mtp_modules_the_model_has_after_its_layers(layout, words):
    """Megatron-Core: as many m as mtp_num_layers, and the decoder layers before them."""
    model = symform.load("deepseek-v3").with_arguments(include_mtp=1)
    with pytest.raises(ConfigError, match="m") as refused:
        timing.stage_pace(model, Layout(data=1, pipeline=16, pipeline_layout=layout), 1, 4096)
    assert words in str(refused.value)


def test_the_memory_check_says_it_sized_balanced_stages_and_fit_only_refuses_a_layout(capsys):
    """The memory check counts balanced stages: with a layout it says so, and --fit-only, whose verdict would rest on it,
    is refused rather than passing a layout whose last device holds 29 of 32 layers."""
    argv = ["time", "llama-3-8b", "--gpu", "h100-sxm", "--train", "--seq", "4096", "--gpus", "4", "--global-batch", "8", "--pp", "4", "--pipeline-layout", "Et|t|t|t*29L"]
    assert "heaviest stage is not sized" in run_json(capsys, *argv)["memory"]["stages"]
    code, _, err = run(capsys, *argv, "--fit-only")
    assert code == 2 and "--fit-only" in err and err.strip().count("\n") == 0


def test_recomputed_layers_of_balanced_chunks_are_refused_beside_a_layout(capsys):
    argv = ["time", "llama-3-8b", "--gpu", "h100-sxm", "--train", "--seq", "4096", "--gpus", "4", "--global-batch", "8", "--pp", "4", "--recompute", "full"]
    code, _, err = run(capsys, *argv, "--recompute-layers", "20", "--pipeline-layout", "Et|t|t|t*29L")
    assert code == 2 and "--recompute-layers" in err and err.strip().count("\n") == 0


def test_a_skewed_routing_touches_fewer_experts_in_the_prefill_too(capsys):
    """A prefill reads the experts its tokens touch, as a decode step does; a Zipf skew concentrates 4 tokens' 8
    routings on fewer of Mixtral's 8 experts, so the first token's memory-bound floor and estimate drop with it."""
    argv = ["time", "mixtral-8x7b", "--gpu", "h100-sxm", "--tp", "2", "--infer", "--batch", "1", "--prompt", "4", "--output", "2"]
    uniform, skewed = run_json(capsys, *argv), run_json(capsys, *argv, "--expert-skew", "3")
    assert skewed["ttft_s"]["lower"] < uniform["ttft_s"]["lower"]
    assert skewed["ttft_s"]["estimate"] < uniform["ttft_s"]["estimate"]
    assert "a prefill's batch·seq" in uniform["assumptions"]["experts"]
