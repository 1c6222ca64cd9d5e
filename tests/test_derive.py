"""Derivations reproduce the closed forms of the source notes (seed formulas §1, §2)."""

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform import derive, leading_order

V = symform.vocabulary()
d, n, vocab, h, s, D, b = (V[k] for k in ("d_model", "n_layers", "vocab", "n_heads", "seq", "tokens", "batch"))


def test_standard_parameters_are_the_notes_corrected_form():
    """Seed §1: with d_ff = 8/3·d, h_kv = h, d_h = d/h: N = n·(12d² + 2d + 2d/h) + d·(2V + 1)."""
    model = symform.load("qwen3-32b")
    assumed = model.expression("params", assume="standard").expr
    assert sympy.expand(assumed - (n * (12 * d**2 + 2 * d + 2 * d / h) + d * (2 * vocab + 1))) == 0


def test_standard_training_flops_per_token():
    """Seed §2: forward n·(24sd² ... ) per sequence; with the substitutions C ≈ 72·n·s·d² per sequence, 6·N·D for D tokens."""
    model = symform.load("llama-3.1-8b")
    step = model.expression("train_step_flops", assume="standard").expr
    # forward per sequence (seed §2, MHA + SwiGLU, d_ff = 8/3·d): n·(8sd² + 4s²d + 16sd²) + 2sdV; training = 3 × forward
    assert sympy.expand(step - 3 * b * (n * (24 * s * d**2 + 4 * s**2 * d) + 2 * s * d * vocab)) == 0
    result = derive(model, "train_flops", assume="standard", leading=True)
    assert result.result == 72 * d**2 * n * D
    assert str(result.in_terms_of_params) == "6*n_params*tokens"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=6))
def test_leading_order_keeps_exactly_the_top_degree_terms(terms):
    expr = sympy.Add(*(c * d**p * vocab**q for c, p, q in terms))
    expr = sympy.expand(expr)
    if expr == 0:
        return
    top = max(sympy.degree(t, d) for t in sympy.Add.make_args(expr))
    expected = sympy.Add(*(t for t in sympy.Add.make_args(expr) if sympy.degree(t, d) == top))
    assert sympy.expand(leading_order(expr, [d]) - expected) == 0


def test_relative_errors_are_against_the_real_count():
    model = symform.load("qwen3-8b")
    result = derive(model, "params", assume="standard", leading=True)
    exact_count = model.evaluate("params")
    leading_value = 12 * model.values["d_model"] ** 2 * model.values["n_layers"]
    assert result.steps[0].relative_error == 0
    assert abs(result.relative_error - (leading_value / exact_count - 1)) < 1e-12


def test_derivations_render_as_latex():
    model = symform.load("qwen3-0.6b")
    latex = derive(model, "train_flops", assume="standard", leading=True).latex()
    assert latex.startswith("\\begin{aligned}") and latex.endswith("\\end{aligned}")
    assert "6 N D" in latex and "72 d^{2} n D" in latex
    assert model.expression("params")._repr_latex_().startswith("$")


def test_models_render_in_notebooks():
    page = symform.load("qwen3-0.6b")._repr_html_()
    assert page.count("<tr>") == 1 + 3  # the header, then embed, layers, final_norm
    assert all(f"<td>{part}</td>" in page for part in ("embed", "layers", "final_norm"))
    assert "<td>lm_head</td>" not in page  # tied to the embedding: it owns no parameters
    assert "$3 d_{ff} d n" in page
    # an architecture file without sizes still renders its formulas
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "linear_attention.toml"
    assert "<table>" in symform.load(example)._repr_html_()


def test_six_n_d_error_is_shown_with_the_leading_and_with_the_real_parameter_count(capsys):
    from checks import run, run_json

    argv = ["derive", "train-flops", "qwen3-32b", "--assume", "standard", "--leading", "--seq", "4096", "--tokens", "10000000000"]
    real_n = 65_524_246_528 // 2  # the published checkpoint's bytes of bf16, halved
    model = symform.load("qwen3-32b")
    exact = model.evaluate("train_flops", seq=4096, tokens=10**10, batch=1)
    leading_n = 12 * model.values["d_model"] ** 2 * model.values["n_layers"]
    report = run_json(capsys, *argv)
    assert report["params"] == real_n
    assert abs(report["relative_error_with_real_params"] - (6 * real_n * 10**10 / exact - 1)) < 1e-12  # about -9.7 %
    assert abs(report["relative_error"] - (6 * leading_n * 10**10 / exact - 1)) < 1e-12  # about -44.5 %
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert f"with n_params ≈ 12*d_model**2*n_layers: {report['relative_error']:+.2%}" in out
    assert f"with the real n_params = {real_n:,}: {report['relative_error_with_real_params']:+.2%}" in out
    assert out.count(f"{report['relative_error']:+.2%}") == 1  # said once, with its label
