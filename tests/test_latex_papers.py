"""The papers' forms, one flag each (symform latex --paper NAME), and a paper's own letters (--symbols FILE).

Each paper's test writes the paper's formula out by hand, in symform's symbols, from the equation or table it
cites, and shows with sympy that the form symform derives from formulas/ (formulas/papers/NAME.toml says only
which quantity, blocks, assumptions and conventions the paper counts) is that formula.
"""

from __future__ import annotations

import re

import pytest
import sympy
from checks import run
from hypothesis import given, settings
from hypothesis import strategies as st

from symform.engine.language.vocabulary import default_vocabulary
from symform.interface.papers import latex as tex
from symform.interface.papers.latex_parse import parse_back
from symform.interface.papers.paper_forms import paper_forms, read_paper

V = default_vocabulary()


def forms(paper: str) -> dict[str, sympy.Expr]:
    return {f.spec.name: f.expr for f in paper_forms(read_paper(paper))}


def equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    return sympy.expand(a - b) == 0


def test_kaplan_2020_eqs_2_1_and_2_2():
    """Kaplan et al. 2020, Scaling Laws for Neural Language Models, §2.1: eq. (2.1) N ≈ 2·d_model·n_layer·
    (2·d_attn + d_ff) = 12·n_layer·d_model² with d_attn = d_ff/4 = d_model (embeddings left out); eq. (2.2)
    C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn FLOPs per token."""
    d, n, s, N = V["d_model"], V["n_layers"], V["seq"], V["n_params"]
    d_attn, d_ff = d, 4 * d
    got = forms("kaplan")
    assert equal(got["Non-embedding parameters"], 2 * d * n * (2 * d_attn + d_ff))
    assert equal(got["Forward FLOPs per token"], 2 * N + 2 * n * s * d_attn)


def test_chinchilla_6nd():
    """Hoffmann et al. 2022, Training Compute-Optimal Large Language Models, §3 and Appendix F: C ≈ 6·N·D
    (2·N forward and 4·N backward FLOPs per parameter and token)."""
    got = forms("chinchilla")
    assert equal(got["Training FLOPs"], 6 * V["n_params"] * V["tokens"])


def test_korthikanti_2022_eq_1_and_table_2():
    """Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models: §4.1 eq. (1), a
    layer keeps sbh·(34 + 5as/h) bytes; Table 2, sbh·34 with selective and sbh·2 with full recomputation
    (s sequence, b micro-batch, h hidden size, a heads)."""
    s, b, h, a = V["seq"], V["batch"], V["d_model"], V["n_heads"]
    got = forms("korthikanti")
    assert equal(got["Activations per layer"], s * b * h * (34 + 5 * a * s / h))
    assert equal(got["Activations per layer, selective recomputation"], s * b * h * 34)
    assert equal(got["Activations per layer, full recomputation"], s * b * h * 2)


def test_deepseek_v2_table_1_and_mla_projections():
    """DeepSeek-AI 2024, DeepSeek-V2, Table 1: MLA caches (d_c + d_h^R)·l elements per token, ≈ 9/2·d_h·l with
    d_c = 4·d_h and d_h^R = d_h/2; §2.1.2–2.1.3: W^DQ ∈ R^{d_c'×d}, W^UQ ∈ R^{d_h n_h×d_c'}, W^QR ∈
    R^{d_h^R n_h×d_c'}, W^DKV ∈ R^{d_c×d}, W^KR ∈ R^{d_h^R×d}, W^UK, W^UV ∈ R^{d_h n_h×d_c}, W^O ∈ R^{d×d_h n_h}
    (transformers adds the two latents' RMSNorm weights, d_c' + d_c)."""
    d_c, d_c_q, d_h, d_hr, d_v, n_h, l, d = (V[x] for x in "kv_lora_rank q_lora_rank d_nope d_rope d_v n_heads n_layers d_model".split())
    got = forms("deepseek-v2")
    assert equal(got["KV cache per token, in elements"], (d_c + d_hr) * l)
    assert equal(got["KV cache per token, in elements, at the paper's ranks"], sympy.Rational(9, 2) * d_h * l)
    matrices = d_c_q * d + d_h * n_h * d_c_q + d_hr * n_h * d_c_q + d_c * d + d_hr * d + d_h * n_h * d_c + d_v * n_h * d_c + d * d_v * n_h
    assert equal(got["Latent attention, projection by projection"], matrices + d_c_q + d_c)


def test_mamba2_state_per_layer():
    """Dao and Gu 2024 (Mamba-2), §3.1 and §7.2: each of the H heads of P channels keeps an SSM state of N per
    channel, H·P·N elements per layer; the convolution in front of the scan (over x, B and C: H·P + 2·G·N
    channels) keeps its last K inputs in transformers' cache."""
    N, P, H, G, K = (V[x] for x in "ssm_state ssm_head_dim ssm_heads ssm_groups conv_kernel".split())
    got = forms("mamba2")
    assert equal(got["Recurrent state per layer, in elements"], H * P * N + K * (H * P + 2 * G * N))


@pytest.mark.parametrize("paper, letters", [
    ("kaplan", ["C_{\\mathrm{forward}}/n_{\\mathrm{ctx}} &\\approx 2 N + 2 d_{\\mathrm{model}} n_{\\mathrm{layer}} n_{\\mathrm{ctx}}"]),
    ("chinchilla", ["C &\\approx 6 N D"]),
    ("korthikanti", ["b s \\cdot \\left(34 h + 5 a s\\right)", "$a$ & \\texttt{n\\_heads}"]),
    ("deepseek-v2", ["l \\cdot \\left(d_{h}^{R} + d_{c}\\right)", "d \\cdot \\left(d_{h}^{R} + d_{c}\\right) && W^{DKV}, W^{KR}\\ (\\text{kv\\_a\\_proj})", "\\frac{9 d_{h} l}{2}", "$d_{c}$ & \\texttt{kv\\_lora\\_rank}"]),
    ("mamba2", ["2 K G N + K P H + P H N", "$N$ & \\texttt{ssm\\_state}"]),
])
def test_each_paper_is_one_flag_in_its_own_letters(capsys, paper, letters):
    code, out, err = run(capsys, "latex", "--paper", paper, "--standalone")
    assert code == 0, err
    for text in letters:
        assert text in out
    glossary = out.split("\\section*{Symbols}")[1]
    assert "\\mathrm{training" not in out and glossary.count("\\texttt{") >= 2


def test_a_paper_s_letters_reach_every_symbol_printed_and_the_glossary(capsys):
    code, out, err = run(capsys, "latex", "forward-flops", "gpt2-xl", "--derivation", "--seq", "1024", "--batch", "1", "--standalone", "--symbols", "kaplan")
    assert code == 0, err
    body, glossary = out.split("\\section*{Symbols}")
    assert "C_{\\mathrm{forward}} &=" in body and "n_{\\mathrm{layer}}" in body and "d_{\\mathrm{model}}" in body
    assert "leading order in }" in body and "\\text{leading order in } d_{\\mathrm{ff}}" not in body  # the reason's letters too
    assert not re.search(r"(?<![\\{A-Za-z_])d(?![_A-Za-z{])", re.sub(r"\\text\{[^}]*\}", "", body.split("\\maketitle")[1]))  # no bare d left
    assert "$d_{\\mathrm{model}}$ & \\texttt{d\\_model}" in glossary and "$n_{\\mathrm{layer}}$ & \\texttt{n\\_layers}" in glossary
    assert "$C_{\\mathrm{forward}}$ & \\texttt{forward\\_flops}" in glossary
    code, out, err = run(capsys, "latex", "--formulas", "deepseek-v2", "--symbols", "deepseek-v2")
    assert code == 0 and "d_{h}" in out and "d_{\\mathrm{nope}}" not in out and "$d_{h}$ & \\texttt{d\\_nope}" in out


@pytest.mark.parametrize("content, problem", [
    ("[symbols]\nd_modle = \"x\"\n", "did you mean 'd_model'"),
    ("[symbols]\nd_model = \"\\\\input{/etc/passwd}\"\n", "\\input is not allowed"),
    ("[symbols]\nd_model = \"n\"\n", "would both print as 'n'"),
    ("[symbols]\nd_model = 3\n", "symbols.d_model"),
    ("[symbols\n", "not valid TOML"),
    ("d_model = \"x\"\n", "no [symbols] table"),
    ("[symbols]\nd_model = \"x}{\"\n", "braces do not balance"),
    ("[symbols]\nd_model = \"x\"\n[[forms]]\nname = 1\n", "forms.0"),
])
def test_a_hostile_mapping_file_gets_one_line(capsys, tmp_path, content, problem):
    path = tmp_path / "letters.toml"
    path.write_text(content, encoding="utf-8")
    code, _, err = run(capsys, "latex", "params", "gpt2", "--symbols", str(path))
    assert code == 2 and err.count("\n") == 1 and problem in err, err
    code, _, err = run(capsys, "latex", "--formulas", "gpt2", "--symbols", str(tmp_path / "missing.toml"))
    assert code == 2 and err.count("\n") == 1 and "no such mapping file" in err
    code, _, err = run(capsys, "latex", "--paper", "kaplann")
    assert code == 2 and err.count("\n") == 1 and "kaplan" in err


def test_no_symbol_is_printed_with_a_cost_s_letter():
    """C is compute (C_fwd, C_train, C = 6ND), M memory, Q bytes moved: a chunk's length printed C made a
    Mamba-2 or Gated DeltaNet form say compute where it meant tokens per chunk."""
    for name in V.names():
        letter = V.entry(name).latex
        if name not in ("n_params", "n_active_params"):
            assert re.match(r"[CMQ](?![A-Za-z])", letter) is None, (name, letter)


def test_the_appendix_glossary_defines_its_columns_letters(capsys):
    code, out, _ = run(capsys, "latex", "--formulas", "qwen3-8b", "--standalone")
    assert code == 0
    glossary = out.split("\\section*{Symbols}")[1]
    for letter in ("N", "N_{\\mathrm{active}}", "C_{\\mathrm{fwd}}", "M_{\\mathrm{KV}}", "s"):
        assert f"${letter}$ &" in glossary, letter


def test_d_ff_means_one_thing_in_every_form_of_deepseek_v3(capsys):
    """DeepSeek-V3's config: hidden 7,168, dense intermediate 18,432, expert intermediate 2,048, so granular's
    G = d_ff/d_e = 9 and its experts' d_e = d_ff/G; standard's d_ff = 8d/3 would be 19,114.7. A form that wrote
    8d/3 for d_ff in the dense layers and d_ff/G in the experts used d_ff for two numbers. By hand, per MoE layer
    the routed and shared experts hold 3·d·d_e·(e + e_s) = 3·d·d_ff·(e + e_s)/G and the dense MLP 3·d·d_ff: d_ff
    the model's own in both."""
    import symform
    from symform.engine.graph.structure import default_assumptions

    m = symform.load("deepseek-v3")
    v = m.vocabulary
    d, d_ff, G, e, e_s, n_dense = v["d_model"], v["d_ff"], v["granularity"], v["n_experts"], v["n_shared_experts"], v["n_dense_layers"]
    assume = default_assumptions(m)
    d_params = tex.derivation_of(m, "params", assume=assume)
    assumed = next(s for s in d_params.steps if s.label.startswith("assuming")).formula.expr
    assert sympy.expand(assumed).coeff(n_dense).coeff(d_ff) != 0  # the dense MLP's d_ff kept, not 8d/3
    experts = sympy.expand(assumed).coeff(v["n_layers"]).coeff(d_ff)
    assert sympy.expand(experts - 3 * d * (e + e_s) / G) == 0
    code, out, _ = run(capsys, "latex", "params", "deepseek-v3", "--derivation")
    assert code == 0 and "d_{ff} = \\frac{8 d}{3}" not in out and "d_{e} = \\frac{d_{ff}}{G}" in out
    for argv in (("latex", "params", "deepseek-v3", "--blocks", "--leading"), ("latex", "--formulas", "deepseek-v3")):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "8 d^{2}" not in out and "\\frac{3 d_{ff} d\\,e}{G}" in out and "3 d_{ff} d" in out
    code, out, _ = run(capsys, "latex", "params", "deepseek-v3", "--blocks", "--leading")
    assert re.search(r"deepseek-v3:\}\\ \{[+-]0\.\d\d\}", out)  # the MLA ranks' error alone, no 8d/3 ≠ 18,432 in it


def test_every_glossary_row_has_a_unit(capsys):
    """Each letter printed has its unit: bytes per element for a storage size, parameters for N, a count for a
    size (d, n, h, s), none for a ratio (G = d_ff/d_e)."""
    code, out, _ = run(capsys, "latex", "inference-bytes", "deepseek-v3", "--derivation", "--standalone", "--batch", "1", "--seq", "4096")
    assert code == 0
    rows = [r for r in out.split("\\section*{Symbols}")[1].split("\\endhead")[1].splitlines() if r.startswith("$")]
    units = {r.split(" & ")[0]: r.split(" & ")[-1].removesuffix(" \\\\") for r in rows}
    assert units["$d$"] == "count" and units["$G$"] == "ratio" and units["$B_{kv}$"] == "B/element"
    assert units["$M_{\\mathrm{infer}}$"] == "B" and all(units.values()), units


_USED = [default_vocabulary()[n] for n in ("d_model", "n_layers", "vocab", "d_ff", "n_heads", "n_kv_heads", "d_head", "seq", "batch")]


@settings(max_examples=25, deadline=None)
@given(chosen=st.sets(st.sampled_from(_USED), min_size=1), tags=st.lists(st.sampled_from("abcxyz"), min_size=9, max_size=9))
def test_a_formula_in_a_paper_s_letters_reads_back_to_the_same_expression(chosen, tags):
    """Whatever symbols a mapping renames (to distinct letters), the printed formula is still the expression."""
    pytest.importorskip("antlr4", reason="sympy's LaTeX parser needs antlr4-python3-runtime==4.11 (the test extra)")
    import symform

    m = symform.load("llama-3-8b")
    expr = symform.derive(m, "forward_flops", assume=None).exact.expr
    letters = {s.name: f"\\xi_{{{tags[i]}{i}}}" for i, s in enumerate(_USED) if s in chosen}
    with tex.letters_in_force(letters):
        text = tex.latex(expr, m.vocabulary)
        assert all(letter in text for name, letter in letters.items() if m.vocabulary[name] in expr.free_symbols)
        assert sympy.expand(parse_back(text, expr.free_symbols, m.vocabulary) - expr) == 0
