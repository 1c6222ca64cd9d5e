"""The fine-grained MoE assumption set: experts d_ff/G wide, G = d_ff/d_e the granularity (Krajewski et al. 2024,
Scaling Laws for Fine-Grained Mixture of Experts, §3), top-k, the expert count and shared experts kept as symbols."""

from __future__ import annotations

from functools import cache

import pytest
import sympy

from checks import run, run_json
from symform import Model
from symform.engine.language.families import presets
from symform.engine.graph.structure import default_assumptions, structure

TINY_QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 32, "num_hidden_layers": 3, "vocab_size": 101, "intermediate_size": 64,
    "moe_intermediate_size": 16, "num_experts": 6, "num_experts_per_tok": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8,
}


@cache
def model(name: str) -> Model:
    return Model.load(name)


def moe_presets() -> list[str]:
    """Presets with expert layers: an expert width in their parameter count (Nemotron-H-8B binds one, has none)."""
    return [n for n in presets() if "d_ff_expert" in {s.name for s in model(n).expression("params").expr.free_symbols}]


def granularity(m: Model) -> sympy.Rational:
    """G = d_ff/d_e, the paper's definition, from the config's own widths."""
    return sympy.Rational(m.values["d_ff"], m.values["d_ff_expert"])


def at(m: Model, expr: sympy.Expr) -> sympy.Expr:
    values = {**m.values, "granularity": granularity(m)}
    return expr.xreplace({m.vocabulary[k]: v for k, v in values.items() if k in m.vocabulary})


def test_the_published_granularities():
    """From the configs: Mixtral's experts are its dense width, Qwen3-MoE's 6144/768, DeepSeek-V3's 18432/2048."""
    assert {n: model(n).ratio_values["granularity"] for n in ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")} == {
        "mixtral-8x7b": 1, "qwen3-30b-a3b": 8, "qwen3-235b-a22b": 8, "deepseek-v3": 9,
    }
    assert model("qwen2-57b-a14b").ratio_values["granularity"] == sympy.Rational(18944, 2560)
    assert "granularity" not in model("llama-3.1-8b").ratio_values  # no experts, no granularity


def test_a_tiny_qwen3_moe_by_hand():
    """transformers' Qwen3MoeForCausalLM: an untied V×d embedding and head, a final norm, and per layer q, k, v, o
    projections, q/k norms of d_h, two norms of d, a d×E router and E gated experts of 3·d·d_e, d_e = d_ff/G."""
    m = Model.from_config(TINY_QWEN3_MOE, name="tiny")
    d, n, V, h, hkv, dh, E, dff, G = (m.vocabulary[k] for k in ("d_model", "n_layers", "vocab", "n_heads", "n_kv_heads", "d_head", "n_experts", "d_ff", "granularity"))
    by_hand = 2 * V * d + d + n * (2 * d + 2 * dh + 2 * d * dh * (h + hkv) + d * E + 3 * d * E * dff / G)
    assert sympy.expand(m.expression("params", assume="granular").expr - by_hand) == 0
    assert m.ratio_values == {"granularity": 4}  # 64 / 16
    # at the tiny sizes: 2·101·32 + 32 + 3·(64 + 16 + 2·32·8·6 + 32·6 + 3·32·6·16) = 6,496 + 3·12,560 = 44,176
    assert m.evaluate("params") == 44_176
    assert at(m, by_hand) == 44_176


def test_deepseek_moe_active_layer_is_k_plus_shared_experts_of_d_ff_over_g():
    """DeepSeekMoE (Dai et al. 2024, §3): a token goes through K_r routed experts of width d_ff/G and K_s shared
    ones; the router's d×E weights all count for every token (symform's convention, docs/conventions.md)."""
    m = model("deepseek-v3")
    v = m.vocabulary
    d, dff, G, k, es, E = (v[x] for x in ("d_model", "d_ff", "granularity", "top_k", "n_shared_experts", "n_experts"))
    blocks = {b.name: b for b in structure(m, "active_params", assume="granular,standard").blocks}
    mlp = {p.name: p.expr for p in blocks["layers/moe"].parts}["mlp"]
    assert sympy.expand(mlp - (3 * d * dff * (k + es) / G + d * E)) == 0


# Hybrid MoE presets whose granular leading forms are not declared yet. Expected to fail, strictly, until they are.
GRANULAR_NOT_YET = {
    "granite-4.0-h-tiny": "granitemoehybrid declares no granular default yet",
    "jamba-1.5-mini": "the granular form leaves Mamba-1's layers out of N_active: -24 %",
}


@pytest.mark.parametrize("name", moe_presets())
@pytest.mark.parametrize("quantity", ["params", "active_params"])
def test_each_moe_preset_s_leading_order_is_within_20_percent_under_its_family_default(name, quantity, request):
    if name in GRANULAR_NOT_YET and (name, quantity) != ("jamba-1.5-mini", "params"):
        request.applymarker(pytest.mark.xfail(strict=True, reason=GRANULAR_NOT_YET[name]))
    m = model(name)
    assume = default_assumptions(m)
    assert assume is not None and "granular" in assume.split(","), f"{m.spec.family} declares no granular default"
    form = structure(m, quantity, assume=assume, leading=True).expr
    assert m.vocabulary["granularity"] in form.free_symbols
    error = float(at(m, form)) / m.evaluate(quantity) - 1
    assert abs(error) <= 0.20, f"{name} {quantity} {error:+.1%}"


def test_derive_prints_the_granular_form_in_text_json_and_latex(capsys):
    code, out, _ = run(capsys, "derive", "params", "deepseek-v3", "--assume", "granular,standard", "--leading")
    assert code == 0 and "granularity" in out and "assuming granular,standard" in out
    report = run_json(capsys, "derive", "params", "mixtral-8x7b", "--leading")
    assert report["structure"]["assumptions"] == "granular,grouped,standard"
    assert "granularity" in report["structure"]["expression"] and abs(report["structure"]["relative_error"]) < 0.2
    code, out, _ = run(capsys, "latex", "params", "qwen3-30b-a3b", "--assume", "granular", "--leading")
    leading = next(row for row in out.splitlines() if "&\\approx" in row)  # the leading-order step's first row
    assert code == 0 and "{G}" in leading and "d_{ff}" in leading and "d_{e}" not in leading
