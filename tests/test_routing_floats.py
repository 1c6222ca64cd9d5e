"""The experts a decode batch touches are an expected count: evaluated in floats, at any batch and routing skew.

As exact fractions, (1 − k/n)^batch runs past the 300-digit result budget at Mixtral's batch 512 ((3/4)^512 has a
309-digit denominator), and a skewed routing's nine-digit probabilities at a batch of a few dozen: both used to
fail with a message blaming the user's sizes.
"""

import math

import pytest
import sympy

import symform
from symform.analysis.time.estimate import serving_estimate
from symform.analysis.time.roofline import roofline
from symform.analysis.time.routing import expected_experts, expected_value, is_expected_count
from symform.analysis.time.phase_time import inference_time

from checks import run

MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b")


def test_a_skewed_routing_by_hand():
    """Two experts, top-1, Zipf exponent 1: p = (2/3, 1/3); two tokens miss expert 1 with (1/3)^2 and expert 2 with
    (2/3)^2, so they touch (1 − 1/9) + (1 − 4/9) = 13/9 experts on average."""
    tokens = sympy.Symbol("batch", positive=True, integer=True)
    found = expected_experts(2, 1, tokens, skew=1.0)
    assert expected_value(found, {tokens: 2}) == pytest.approx(13 / 9, rel=1e-12)


def test_a_large_batch_touches_every_expert_in_floats():
    tokens = sympy.Symbol("batch", positive=True, integer=True)
    uniform = expected_experts(8, 2, tokens)
    assert is_expected_count(uniform)
    assert expected_value(uniform, {tokens: 512}) == 8.0  # 8·(1 − (3/4)^512): (3/4)^512 ≈ 4e-65
    skewed = expected_experts(256, 8, tokens, skew=1.2)
    at = expected_value(skewed, {tokens: 4096})
    assert 0 < at < 256 and at == pytest.approx(sum(1 - (1 - min(1.0, 8 * i**-1.2 / sum(j**-1.2 for j in range(1, 257)))) ** 4096 for i in range(1, 257)), rel=1e-12)


@pytest.mark.parametrize("name", MOE)
def test_a_skewed_decode_times_on_every_moe_preset(name):
    """--expert-skew used to fail on every MoE preset: the decode step reads fewer distinct experts than uniform routing."""
    model = symform.load(name)
    setup = dict(batch=64, prompt=128, output=16)
    uniform, skewed = (inference_time(model, "h100-sxm", expert_skew=s, flash=True, **setup) for s in (0, 1.0))
    assert skewed.first_decode.bytes < uniform.first_decode.bytes
    assert serving_estimate(model, "h100-sxm", expert_skew=1.0, **setup).tpot.estimate > 0


def test_mixtral_decodes_at_a_batch_of_512():
    model = symform.load("mixtral-8x7b")
    served = inference_time(model, "h100-sxm", batch=512, prompt=128, output=8, tensor=2, flash=True)
    assert math.isfinite(served.tpot_lower) and served.tpot_lower > 0
    assert serving_estimate(model, "h100-sxm", batch=512, prompt=128, output=8, tensor=2).tpot.estimate > served.tpot_lower
    roof = roofline(model, "h100-sxm", phase="decode", batch=512, context=1024)
    # every one of the 8 experts is read: the step reads at least the bf16 weights of all 46.7 B parameters
    assert roof.total.bytes >= 2 * model.evaluate("params")


def test_the_cli_times_a_skewed_moe_and_a_batch_of_512(capsys):
    for argv in (
        ["time", "deepseek-v2-lite", "--gpu", "h100-sxm", "--infer", "--batch", "64", "--prompt", "128", "--output", "16", "--expert-skew", "1.0"],
        ["time", "mixtral-8x7b", "--gpu", "h100-sxm", "--infer", "--tp", "2", "--batch", "512", "--prompt", "128", "--output", "16"],
        ["roofline", "mixtral-8x7b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "512", "--context", "1024"],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 0, err


@pytest.mark.parametrize("prompt", [1, 2, 128])
def test_a_prefill_reads_the_weights_of_every_expert_its_prompt_touches(prompt):
    """A prompt of T tokens, each routed to 2 of Mixtral's 8 experts, touches 8·(1 − (3/4)^T) of them on average:
    2 at one token, nearly all 8 at 128. Each expert's weights (gate, up, down: 3 · 4096 · 14336 at 2 bytes, over 32
    layers) are read once however many tokens it takes; the tokens' activations grow with T. A single token's
    prefill reads top_k experts' weights, as a decode step of batch 1 does."""
    from symform.analysis.time.roofline import phase_work
    from symform.analysis.time.step_model import _bind

    model = symform.load("mixtral-8x7b")
    leaves = phase_work(model, "prefill", depth=None, flash=True).components
    experts = [path for path in leaves if "/experts/" in path]

    def moved(tokens: int) -> float:
        return sum(float(_bind(model, leaves[p].bytes, batch=1, seq=tokens)) for p in experts)

    per_expert = 3 * 4096 * 14336 * 2 * 32
    activations_per_token = moved(1) - 2 * per_expert  # one token touches exactly top_k = 2 experts
    touched = 8 * (1 - (3 / 4) ** prompt)
    assert moved(prompt) == pytest.approx(touched * per_expert + prompt * activations_per_token, rel=1e-9)
