"""Full recomputation of some layers only (Megatron-Core's --recompute-method block --recompute-num-layers N).

Memory against Korthikanti et al. 2022 (§4): a layer keeps s·b·h·(34 + 5·a·s/h) bytes without recomputation and its
2·s·b·h input with full recomputation, so N recomputed layers of L save N·(s·b·h·(34 + 5·a·s/h) − 2·s·b·h). Time:
the recomputed forward and its collectives grow by one layer's share per layer recomputed, reaching full
recomputation's at every layer.
"""

from __future__ import annotations

import json

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform import EvaluationError, Model
from symform.analysis.memory.memory import Training, training_expressions, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.time.estimate import training_estimate
from symform.analysis.time.timing import training_time
from symform.interface.cli.cli import main

KORTHIKANTI = {"upcast": 0, "stat_bytes": 0, "dropout": 1, "mask_bytes": 1, "index_bytes": 0, "loss_bytes": 0}
SIZES = dict(n_layers=12, d_model=768, n_heads=12, d_head=64, d_ff=3072, n_kv_heads=12, vocab=50257, max_positions=1024)
S, B = 1024, 2


@pytest.fixture(scope="module")
def gpt():
    return Model.from_component("optional_cross_attention_lm", mlp="one_op_activation_mlp", conventions=KORTHIKANTI).with_arguments(**SIZES)


def _activations(model, **options) -> int:
    return training_memory(model, batch=B, seq=S, setup=Training(precision="bf16", flash=False, **options)).values["activations"]


@pytest.mark.parametrize("layers", [1, 5, 12])
def test_each_recomputed_layer_keeps_its_input_alone(gpt, layers):
    h, a = SIZES["d_model"], SIZES["n_heads"]
    kept, rebuilt = S * B * h * (34 + sympy.Rational(5 * a * S, h)), 2 * S * B * h
    assert _activations(gpt, recompute="full", recompute_layers=layers) == _activations(gpt) - layers * (kept - rebuilt)
    assert _activations(gpt, recompute="full", recompute_layers=12) == _activations(gpt, recompute="full")


def test_the_recompute_buffer_is_one_rebuilt_layer(gpt):
    some = training_memory(gpt, batch=B, seq=S, setup=Training(precision="bf16", flash=False, recompute="full", recompute_layers=3))
    full = training_memory(gpt, batch=B, seq=S, setup=Training(precision="bf16", flash=False, recompute="full"))
    assert some.values["recompute_buffer"] == full.values["recompute_buffer"] != 0


@settings(max_examples=8, deadline=None)
@given(layers=st.integers(1, 14), pipeline=st.sampled_from((1, 2)))
def test_the_recomputed_forward_grows_by_one_layer_per_layer(layers, pipeline):
    """Qwen3-0.6B's 28 layers, 14 a stage with a pipeline of 2: each recomputed layer of a stage adds 1/14 (1/28
    without a pipeline) of full recomputation's extra FLOPs and tensor-parallel traffic."""
    model = symform.load("qwen3-0.6b")
    step = dict(global_batch=8, micro_batch=1, seq=1024, layout=Layout(data=2, tensor=2, pipeline=pipeline), flash=True)
    none, full = training_time(model, "h100-sxm", **step), training_time(model, "h100-sxm", recompute="full", **step)
    some = training_time(model, "h100-sxm", recompute="full", recompute_layers=layers, **step)
    share = sympy.Rational(layers * pipeline, 28)
    assert some.flops_per_device == none.flops_per_device + share * (full.flops_per_device - none.flops_per_device)
    assert some.comm["tensor"].seconds == pytest.approx(none.comm["tensor"].seconds + float(share) * (full.comm["tensor"].seconds - none.comm["tensor"].seconds), rel=1e-9)
    estimates = [training_estimate(model, "h100-sxm", recompute=r, recompute_layers=n, **{k: v for k, v in step.items() if k != "flash"}).step.estimate for r, n in (("none", None), ("full", layers), ("full", None))]
    assert estimates[0] < estimates[1] <= estimates[2]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--recompute-layers", "4"], "recomputed layers need full recomputation (recompute is 'none'); add --recompute full"),
        (["--recompute", "full", "--recompute-layers", "29"], "29 recomputed layers of a stage chunk holding 28 of qwen3-0.6b's 28 layers; give at most 28"),
        (["--recompute", "full", "--recompute-layers", "15", "--pp", "2"], "give at most 14"),
        (["--recompute", "full", "--recompute-layers", "0"], "--recompute-layers"),
    ],
)
def test_time_and_memory_refuse_recomputed_layers_that_do_not_fit_the_step(capsys, argv, message):
    timed = ["time", "qwen3-0.6b", "--train", "--gpu", "h100-sxm", "--gpus", "4", "--global-batch", "8", "--seq", "1024"]
    assert main([*timed, *argv]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(EvaluationError, match="full recomputation"):
        training_expressions(symform.load("qwen3-0.6b"), Training(recompute="selective", recompute_layers=4))


def test_memory_names_the_recomputed_layers(capsys):
    assert main(["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "1024", "--recompute", "full", "--recompute-layers", "7"]) == 0
    assert "recompute=full; recompute_layers=7" in capsys.readouterr().out


def test_the_json_report_of_a_share_is_plain_numbers(capsys):
    """The share runs the forward's collectives again a fraction of a time: the JSON stays numbers."""
    argv = ["time", "qwen3-0.6b", "--train", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "2", "--global-batch", "16", "--seq", "1024", "--recompute", "full", "--recompute-layers", "7", "--json"]
    assert main(argv) == 0
    found = json.loads(capsys.readouterr().out)
    assert isinstance(found["comm"]["tensor"]["seconds"], float)


def test_an_uneven_split_takes_the_fuller_stages_layers():
    """DeepSeek-V3's 61 layers over 16 stages: 3.8125 a stage, the fuller ones 4; 4 recomputed is all of them."""
    model = symform.load("deepseek-v3")
    layout = Layout(data=8, pipeline=16, expert=8)
    full = training_memory(model, batch=1, seq=4096, setup=Training(recompute="full", layout=layout)).values["activations"]
    assert training_memory(model, batch=1, seq=4096, setup=Training(recompute="full", recompute_layers=4, layout=layout)).values["activations"] == full
    with pytest.raises(EvaluationError, match="give at most 4"):
        training_memory(model, batch=1, seq=4096, setup=Training(recompute="full", recompute_layers=5, layout=layout))


def test_fine_tuning_and_serving_refuse_it(capsys):
    lora = ["--lora-rank", "8", "--lora-targets", "q_proj,v_proj", "--recompute", "full", "--recompute-layers", "4"]
    assert main(["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "512", *lora]) == 2
    assert "drop --recompute-layers for a fine-tuning step" in capsys.readouterr().err
    assert main(["time", "qwen3-0.6b", "--train", "--gpu", "h100-sxm", "--global-batch", "4", "--seq", "512", *lora]) == 2
    assert "--recompute-layers" in capsys.readouterr().err
    assert main(["memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "512", "--recompute-layers", "3", "--zero", "2"]) == 2
    assert "--recompute-layers, --zero describe a training step; drop them with --infer" in capsys.readouterr().err
