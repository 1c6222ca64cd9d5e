"""Scaling-law helpers: the derived optimum really minimises the loss on the budget."""

from __future__ import annotations

import math

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.sweeps import scaling_laws as sl
from symform.analysis.sweeps.scaling_laws import ALPHA, BESIROGLU_2024, BETA, HOFFMANN_2022, C, LossFit, N, compute_optimal, optimum, training_run

FITS = [HOFFMANN_2022, BESIROGLU_2024]


def test_sympy_optimum_equals_the_textbook_closed_form():
    derived = optimum()
    textbook = sl.closed_form()
    for key in ("N", "D"):
        ratio = sympy.simplify(sympy.expand_power_base(sympy.powdenest(derived[key] / textbook[key], force=True), force=True))
        values = {sl.A_: 406.4, sl.B_: 410.7, ALPHA: 0.34, BETA: 0.28, C: 1e23}
        assert float(ratio.subs(values)) == pytest.approx(1.0, rel=1e-12)


def test_exponents_are_beta_and_alpha_over_their_sum():
    textbook = sl.closed_form()
    assert sympy.simplify(textbook["a"] - BETA / (ALPHA + BETA)) == 0
    # and they are what the derived N_opt scales with: d log N / d log C
    n_opt = optimum()["N"]
    slope = sympy.simplify(sympy.diff(sympy.log(n_opt), C) * C)
    assert sympy.simplify(slope - BETA / (ALPHA + BETA)) == 0
    assert HOFFMANN_2022.a == pytest.approx(0.28 / 0.62) and HOFFMANN_2022.a + HOFFMANN_2022.b == pytest.approx(1.0)


def test_derivative_of_the_loss_on_the_budget_vanishes_at_the_optimum():
    on_budget = sl.loss_expression().subs(sl.D, C / (6 * N))
    derivative = sympy.diff(on_budget, N).subs(N, optimum()["N"])
    for fit in FITS:
        values = {sl.E_: fit.E, sl.A_: fit.A, sl.B_: fit.B, ALPHA: fit.alpha, BETA: fit.beta, C: 1e24}
        scale = float(sympy.diff(sl.A_ * N**-ALPHA, N).subs(N, optimum()["N"]).subs(values))
        assert abs(float(derivative.subs(values))) < 1e-9 * abs(scale)


@settings(max_examples=25, deadline=None)
@given(log_budget=st.floats(18, 27), step=st.floats(0.01, 0.5), which=st.sampled_from(FITS))
def test_the_optimum_beats_its_neighbours_on_the_budget(log_budget, step, which):
    budget = 10**log_budget
    best = compute_optimal(budget, which)
    assert 6 * best.n_params * best.tokens == pytest.approx(budget, rel=1e-12)
    for factor in (math.exp(step), math.exp(-step)):
        n = best.n_params * factor
        assert which.loss(n, budget / (6 * n)) > best.loss


def test_tokens_per_parameter_near_20_at_chinchilla_scale_with_the_replication_fit():
    # Chinchilla: 70B parameters, 1.4T tokens, C = 6·N·D = 5.88e23 FLOPs, 20 tokens per parameter.
    chinchilla = compute_optimal(6 * 70e9 * 1.4e12, BESIROGLU_2024)
    assert 15 < chinchilla.tokens_per_param < 25
    assert 50e9 < chinchilla.n_params < 100e9
    # The paper's rounded approach-3 coefficients put the optimum much further towards data (documented).
    assert compute_optimal(6 * 70e9 * 1.4e12, HOFFMANN_2022).tokens_per_param > 60


def test_coefficients_are_named_inputs():
    flatter = HOFFMANN_2022.with_(beta=0.34)
    assert flatter.a == pytest.approx(0.5)
    n = compute_optimal(1e22, flatter).n_params
    assert n == pytest.approx(flatter.G * (1e22 / 6) ** 0.5)
    with pytest.raises(symform.EvaluationError):
        LossFit(E=1, A=-1, B=1, alpha=0.3, beta=0.3)


def test_budget_for_loss_inverts_compute_optimal():
    budget = sl.budget_for_loss(2.0, BESIROGLU_2024)
    assert compute_optimal(budget, BESIROGLU_2024).loss == pytest.approx(2.0, abs=1e-9)
    with pytest.raises(symform.EvaluationError, match="irreducible"):
        sl.budget_for_loss(1.0, HOFFMANN_2022)


def test_training_time_and_cost_on_a_fleet():
    device = symform.load_device("h100-sxm")
    peak = device.flops_per_s("bf16")
    run = training_run(1e24, device="h100-sxm", devices=1000, mfu=0.5, price_per_device_hour=2.5)
    assert run.seconds == pytest.approx(1e24 / (1000 * peak * 0.5))
    assert run.device_hours == pytest.approx(run.seconds * 1000 / 3600)
    assert run.cost == pytest.approx(run.device_hours * 2.5)
    assert training_run(1e24, device="h100-sxm", devices=2000, mfu=0.5).seconds == pytest.approx(run.seconds / 2)
    with pytest.raises(symform.EvaluationError, match="mfu"):
        training_run(1e24, mfu=1.5)


def test_a_models_own_flops_give_its_tokens_for_a_budget():
    model = symform.load("qwen3-0.6b")
    tokens = sl.tokens_for_budget(model, 1e20, seq=4096)
    assert float(sl.model_training_flops(model, round(tokens), seq=4096)) == pytest.approx(1e20, rel=1e-9)
    # symform counts attention and logits too: fewer tokens than 6·N·D alone would allow
    assert tokens < 1e20 / (6 * model.evaluate("params"))
