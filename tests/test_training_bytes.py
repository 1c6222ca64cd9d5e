"""Training bytes per device as a derivable quantity, the parallel layout as symbols: ZeRO's per-device model
states (Rajbhandari et al. 2020, ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, §5 and
Figure 1), the notes' pure-bf16 8P + activations, and Megatron's split of weights over t·p ranks and of
activations over t (Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, §4)."""

from __future__ import annotations

from functools import cache

import pytest
import sympy

from checks import run, run_json
from symform import Model
from symform.engine.graph.structure import active_form


@cache
def model(name: str, **conventions) -> Model:
    m = Model.load(name)
    return m.with_conventions(**conventions) if conventions else m


def parts(m: Model):
    v = m.vocabulary
    return (m.expression("params").expr, m.expression("saved_activations").expr, v["tp"], v["pp"], v["dp"])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_s_model_states_per_device(stage):
    """ZeRO §5 with mixed precision (K = 12 bytes of optimizer state per parameter: fp32 master, m, v):
    baseline (2 + 2 + K)·Ψ; P_os 2Ψ + 2Ψ + K·Ψ/N_d; P_os+g 2Ψ + (2 + K)·Ψ/N_d; P_os+g+p (2 + 2 + K)·Ψ/N_d."""
    m = model("qwen3-8b", optimizer_bytes=12, zero=stage)
    P, A, t, p, Nd = parts(m)
    paper = {0: 16 * P, 1: 4 * P + 12 * P / Nd, 2: 2 * P + 14 * P / Nd, 3: 16 * P / Nd}[stage]
    assert sympy.simplify(m.expression("training_bytes").expr - (paper / (t * p) + A / t)) == 0


def test_zero_s_figure_1_numbers():
    """ZeRO's Figure 1: Ψ = 7.5B, N_d = 64, K = 12 gives 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per device."""
    m = Model.from_component("linear", d_in=75_000, d_out=100_000, conventions={"optimizer_bytes": 12})  # 7.5B weights
    assert m.evaluate("params") == 7_500_000_000
    got = [m.with_conventions(zero=z).evaluate("training_bytes", batch=1, seq=1, tp=1, pp=1, dp=64) for z in range(4)]
    saved = m.evaluate("saved_activations", batch=1, seq=1)
    # by hand: 16·7.5e9 = 120e9; (4 + 12/64)·7.5e9 = 31.40625e9; (2 + 14/64)·7.5e9 = 16.640625e9; 16/64·7.5e9 = 1.875e9
    assert [g - saved for g in got] == [120_000_000_000, 31_406_250_000, 16_640_625_000, 1_875_000_000]


def test_pure_bf16_training_is_8p_plus_activations():
    """The notes' §3: bf16 weights, gradients and AdamW's m and v, 2 bytes each: 8P + activations on one device."""
    m = model("qwen3-8b")
    P, A, t, p, Nd = parts(m)
    at_one = m.expression("training_bytes").expr.xreplace({t: 1, p: 1, Nd: 1})
    assert sympy.expand(at_one - (8 * P + A)) == 0
    assert m.evaluate("training_bytes", batch=2, seq=512, tp=1, pp=1, dp=1) == 8 * m.evaluate("params") + m.evaluate("saved_activations", batch=2, seq=512)


def test_in_terms_of_n_it_is_8n_over_tp_pp_plus_the_attention_scores():
    """To leading order: 8·N/(t·p) and the s² attention scores of every layer over t (eager attention keeps them)."""
    m = model("mixtral-8x7b")
    form = active_form(m, "training_bytes", assume="granular,grouped,standard")
    v = m.vocabulary
    assert form.base == "params" and sympy.simplify(form.multiple - 8 / (v["tp"] * v["pp"])) == 0
    b, s, h, n = v["batch"], v["seq"], v["n_heads"], v["n_layers"]
    assert sympy.simplify(form.attention / (b * s**2 * h * n / v["tp"])).is_number


def test_derive_prints_the_layout_as_symbols_and_takes_it_as_options(capsys):
    code, out, _ = run(capsys, "derive", "training-bytes", "qwen3-8b", "--leading")
    assert code == 0 and "8*n_params/(pp*tp)" in out and "--tp" in out
    code, out, _ = run(capsys, "derive", "training-bytes", "qwen3-8b", "--leading", "--convention", "zero=3")
    assert "/(dp*pp*tp)" in out
    report = run_json(capsys, "derive", "training-bytes", "qwen3-8b", "--leading", "--batch", "1", "--seq", "512", "--tp", "2", "--pp", "2", "--dp", "4")
    assert abs(report["structure"]["relative_error"]) < 0.01
