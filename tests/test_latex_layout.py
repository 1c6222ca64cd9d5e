"""LaTeX a paper can print: standalone documents whose every line fits the text, at the document's type size."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import sympy
from checks import run
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.interface.papers import latex as tex
from symform.interface.papers.latex_parse import parse_back
from symform.interface.papers.latex_layout import Group, Term, broken, breakable, joined, width_pt

# a dense, a mixture-of-experts with multi-head latent attention, and a hybrid (Mamba-2, attention, MLP) model
DOCUMENTS = {
    "dense": ("latex", "train-flops", "llama-3-8b", "--derivation", "--standalone"),
    "moe-mla": ("latex", "active-params", "deepseek-v3", "--derivation", "--standalone"),
    "hybrid": ("latex", "active-params", "nemotron-h-8b", "--derivation", "--standalone"),
    "blocks": ("latex", "forward-flops", "gemma-2-9b", "--blocks", "--leading", "--batch", "1", "--seq", "4096", "--standalone"),
    "glossary": ("latex", "training-bytes", "qwen3.5-0.8b", "--standalone"),  # forty symbols: the glossary runs over a page
    "table": ("latex", "forward-flops", "nemotron-h-8b", "--table", "--depth", "2", "--batch", "1", "--seq", "4096", "--standalone"),
    "part": ("latex", "params", "deepseek-v2", "--part", "layers/moe/attn", "--standalone"),
    "compare": ("latex", "--compare", "deepseek-v3", "qwen3-32b", "--standalone"),
    "paper-kaplan": ("latex", "--paper", "kaplan", "--standalone"),
    "paper-deepseek-v2": ("latex", "--paper", "deepseek-v2", "--standalone"),
    "appendix": ("latex", "--formulas", "qwen3-32b", "deepseek-v3", "mixtral-8x7b", "gpt-oss-120b", "nemotron-h-8b", "qwen3-next-80b-a3b", "--standalone"),
}
# commands that set type smaller than \small, or scale a box (and the type in it) to fit
SMALL_TYPE = re.compile(r"\\(footnotesize|scriptsize|tiny|resizebox|scalebox)\b")
OVERFULL = re.compile(r"Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too (?:wide|high)\)")


def overfull_boxes(log: str) -> list[float]:
    """The overfull boxes TeX reports in a .log, in points too wide."""
    return [float(x) for x in OVERFULL.findall(log)]


def test_overfull_boxes_are_read_from_the_log():
    log = "Overfull \\hbox (1075.41682pt too wide) in paragraph at lines 12--13\nOverfull \\hbox (0.5pt too wide) detected"
    log += "\nOverfull \\vbox (31.16876pt too high) has occurred while \\output is active []"
    assert overfull_boxes(log) == [1075.41682, 0.5, 31.16876]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX engine: apt-get install texlive-latex-base texlive-latex-recommended (the documents are not compiled)")
def test_standalone_documents_fit_the_page_at_the_document_s_type_size(capsys, tmp_path):
    for kind, argv in DOCUMENTS.items():
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert not SMALL_TYPE.search(out), f"{kind}: type below \\small or scaled: {SMALL_TYPE.search(out)[0]}"
        (tmp_path / f"{kind}.tex").write_text(out, encoding="utf-8")
        for _ in range(3):  # a longtable settles its column widths over runs ("Rerun LaTeX")
            result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{kind}.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stdout[-2000:]
            log = (tmp_path / f"{kind}.log").read_text(encoding="latin-1")
            if "Rerun LaTeX" not in log:
                break
        assert [x for x in overfull_boxes(log) if x > 1.0] == [], f"{kind}: {' '.join(argv)} has lines wider than the text or pages taller than it"


def test_the_hybrid_derivation_prints_no_line_twice():
    """Nemotron-H's default set (granular: d_e = d_ff/G) touches no symbol of the model: it adds no lines."""
    model = symform.load("nemotron-h-8b")
    d = symform.derive(model, "active_params", assume="granular", leading=True)
    lines = tex.derivation_lines(d, model)
    printed = [tex.latex(line.expr) for line in lines]
    assert len(printed) == len(set(printed))
    assert not any("d_{e}" in line.reason for line in lines)  # no substitution for a symbol the model has not


def test_a_long_derivation_is_broken_into_rows_each_no_wider_than_the_text():
    model = symform.load("deepseek-v3")
    text = tex.derivation_latex(symform.derive(model, "active_params", assume="standard", leading=True), model)
    rows = text.split("\n")[1:-1]
    assert len(rows) > 10  # one per block or group of terms, not one per step
    for row in rows:
        sum_part = row.split("&&")[0].split("&", 1)[1]
        assert width_pt(sum_part) < tex.TEXT_WIDTH_PT * 0.7, row
    # each layer kind starts a row of its own
    assert any(r.lstrip().startswith("&\\quad + \\left(n - n_{\\mathrm{dense}}\\right) \\cdot") for r in rows)


def test_width_estimates_grow_with_the_text_and_count_scripts_smaller():
    assert width_pt("d") < width_pt("d n") < width_pt("d n + V")
    assert width_pt("d_{ff}") < width_pt("d ff") + 1
    assert 20 < width_pt("12 d^{2} n + 2 d V") < 80  # TeX: 62.5 pt at 11 pt


_letters = st.sampled_from(["d", "n", "V", "d_{ff}", "h_{kv}", "n_{\\mathrm{dense}}", "\\frac{d}{2}", "s"])
_atom = st.builds(lambda c, xs: f"{c} " + " ".join(xs) if c > 1 else " ".join(xs), st.integers(1, 40), st.lists(_letters, min_size=1, max_size=4))


@st.composite
def _terms(draw, depth: int = 0):
    out = []
    for _ in range(draw(st.integers(1, 12))):
        if depth == 0 and draw(st.booleans()):
            body = Group(draw(_atom) + " \\cdot ", tuple(draw(_terms(depth=1))))
        else:
            body = draw(_atom)
        out.append(Term(draw(st.booleans()), body))
    return out


def _unbroken(rows: list[str]) -> str:
    text = " ".join(rows).replace("\\quad", " ").replace("\\qquad", " ")
    text = re.sub(r"\\[Bb]ig(l\(|r\))", lambda m: "\\left(" if m[1] == "l(" else "\\right)", text)
    return re.sub(r"\s+", " ", text).replace("\\left( ", "\\left(").strip()


@settings(max_examples=60, deadline=None)
@given(terms=_terms(), budget=st.floats(120, 500))
def test_broken_rows_are_the_sum_and_fit_where_its_terms_do(terms, budget):
    rows = broken(terms, budget)
    assert _unbroken(rows) == re.sub(r"\s+", " ", joined(terms)).strip()
    widest_atom = max(width_pt(a) for t in terms for a in ([t.body] if isinstance(t.body, str) else [t.body.opening, *(i.text() for i in t.body.inner)]))
    if widest_atom < budget / 3:
        assert all(width_pt("{}" + r) <= budget + 1 for r in rows)
    assert _unbroken([breakable(terms)]) == re.sub(r"\s+", " ", joined(terms)).strip()


def test_broken_derivation_rows_read_back_to_the_expression():
    pytest.importorskip("antlr4", reason="sympy's LaTeX parser needs antlr4-python3-runtime==4.11 (the test extra)")
    model = symform.load("deepseek-v3")
    d = symform.derive(model, "params", assume="standard", leading=True)
    v = model.vocabulary
    for line in tex.derivation_lines(d, model):
        rows = broken([t for run in line.runs(v) for t in run], 300)
        back = parse_back(_unbroken(rows), line.expr.free_symbols, v)
        assert sympy.expand(back - line.expr) == 0


def test_the_derivation_makes_the_family_s_default_assumptions_as_derive_s_blocks_do(capsys):
    """Nemotron-H's default (granular) leaves its MLP and attention at their own sizes; "standard" would put
    d_ff = 4d and as many KV heads as query heads, 21 % off at nemotron-h-8b."""
    code, out, _ = run(capsys, "latex", "params", "nemotron-h-8b", "--derivation")
    assert code == 0 and "d_{ff} = 4 d" not in out and "h_{kv} = h" not in out
    report = symform.load("nemotron-h-8b")
    from symform.engine.graph.structure import default_assumptions

    assert default_assumptions(report) == "granular"
    code, out, _ = run(capsys, "latex", "params", "deepseek-v3", "--derivation")
    assert code == 0 and "\\frac{d_{ff}}{G}" in out  # granular: d_e = d_ff/G, as `derive`'s block form writes it


def test_every_form_names_its_assumptions_and_its_error(capsys):
    code, out, _ = run(capsys, "latex", "params", "deepseek-v3", "--blocks", "--leading")
    assert code == 0 and "assuming granular, standard (the family's default); at" in out
    assert re.search(r"\\text\{[^}]*deepseek-v3:\}\\ \{[+-]0\.\d\d\}\\,\\%", out)
    code, out, _ = run(capsys, "latex", "active-params", "deepseek-v3", "--derivation")
    # the assumption step and the leading order each say how far they are at the model's sizes
    assert out.count("\\text{ at deepseek-v3}") == 2


def test_every_symbol_printed_is_in_the_glossary_left_hand_sides_included(capsys):
    for quantity, letter in (("training-bytes", "M_{\\mathrm{train}}"), ("train-flops", "C_{\\mathrm{train}}"), ("kv-cache", "M_{\\mathrm{KV}}")):
        code, out, _ = run(capsys, "latex", quantity, "qwen3-8b", "--derivation", "--standalone")
        assert code == 0 and "\\mathrm{training" not in out and "\\_" not in out.split("\\section*{Symbols}")[0].split("\\maketitle")[1]
        body, glossary = out.split("\\section*{Symbols}")
        assert f"{letter} &" in body and f"${letter}$ &" in glossary
        model = symform.load("qwen3-8b")
        d = tex.derivation_of(model, quantity.replace("-", "_"), assume=None)
        for symbol in tex.derivation_symbols(d):
            assert f"${model.vocabulary.entry(symbol.name).latex}$" in glossary, symbol
        assert "& unit \\\\" in glossary


def test_titles_are_in_words():
    assert tex.quantity_words("active_params") == "Active parameters per token"
    assert all(not any(c == "_" for c in tex.quantity_words(q)) for q in tex.QUANTITIES_PRINTED)


def test_the_appendix_s_kv_column_counts_a_sliding_window_at_the_context(capsys):
    """gpt-oss-120b (its config.json): 36 layers alternating a 128-token sliding window and full attention, 8 KV
    heads of 64, bf16: K and V are 2·8·64·2 = 2048 B per layer and token, 36 × 2048 = 73,728 B per cached token.
    At a 131,072-token context the 18 windowed layers hold 127 tokens each: 18·2048 + 18·2048·127/131072 =
    36,899.7 B per token, about half."""
    code, out, _ = run(capsys, "latex", "--formulas", "gpt-oss-120b", "--seq", "131072")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("$M_{\\mathrm{KV}}/s$"))
    by_hand = 18 * 2048 + 18 * 2048 * 127 / 131072
    assert f"{by_hand:,.1f}".replace(",", "\\,") + "~B" in row
    assert "\\frac{4 d_h h_{kv} n_{\\mathrm{local}}}{s} \\cdot \\bigl(w - 1\\bigr)" in row  # a windowed layer caches w − 1 tokens


def test_dsa_s_sparse_core_attention_stays_at_leading_order():
    """DeepSeek-V3.2-Exp (DeepSeek-AI 2025, §2.1): the lightning indexer is O(L²) and the core attention O(L·k),
    each query reading k = index_topk = 2048 selected keys. Per token and layer, the core's products over those k
    keys are Q·Kᵀ, 2·(d_nope + d_rope)·h·k, and A·V, 2·d_v·h·k: under DeepSeek-V2's ranks (d_rope = d_nope/2,
    d_v = d_nope) 3·d_nope·h·k + 2·d_nope·h·k = 5·d_nope·h·k. Dropped as lower order than the indexer's s²
    term, the block form was 9 % under the count at a 32k context."""
    from symform.engine.graph.structure import error_at, structure

    m = symform.load("deepseek-v3.2")
    v = m.vocabulary
    st = structure(m, "forward_flops", assume="granular,standard", leading=True)
    moe = next(b for b in st.blocks if b.name == "layers/moe")
    b, s, d_nope, h, k = v["batch"], v["seq"], v["d_nope"], v["n_heads"], v["index_topk"]
    core = sympy.expand(moe.expr).coeff(k)
    assert sympy.expand(core - 5 * b * s * d_nope * h) == 0
    assert abs(error_at(m, "forward_flops", st.expr, batch=1, seq=32768)) < 0.01


def test_compare_prints_two_architectures_forms_side_by_side(capsys):
    code, out, _ = run(capsys, "latex", "--compare", "mixtral-8x7b", "llama-3-8b")
    assert code == 0 and out.count("\\begin{longtable}") == 2  # the comparison, then the glossary
    head = next(line for line in out.splitlines() if line.startswith("\\textbf{mixtral-8x7b}"))
    assert "\\textbf{llama-3-8b}" in head and "(assuming granular, grouped, standard)" in head
    params = next(line for line in out.splitlines() if "46\\,702\\,792\\,704" in line)  # symform params mixtral-8x7b
    assert "8\\,030\\,261\\,248" in params.split("&")[1]  # llama-3-8b's, in the same row
    code, _, err = run(capsys, "latex", "--compare", "llama-3-8b")
    assert code == 2 and err.count("\n") == 1 and "two models" in err


def test_korthikanti_s_accounting_is_one_flag(capsys):
    """Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, §4.1, eq. (1): a GPT
    layer keeps sbh·(34 + 5as/h) bytes of activations (s tokens, b sequences, hidden size h, a heads), 16-bit
    activations and one-byte dropout masks. In symform's letters (d the hidden size, h the heads): b·s·(34·d +
    5·h·s), from the declarations under --accounting korthikanti and the standard GPT shape (d_ff = 4d, d_h = d/h)."""
    from symform.engine.graph.model import Model

    model = Model.from_component("optional_cross_attention_lm", mlp="one_op_activation_mlp").with_accounting("korthikanti")
    v = model.vocabulary
    b, s, d, h, n = v["batch"], v["seq"], v["d_model"], v["n_heads"], v["n_layers"]
    assumed = sympy.expand(symform.derive(model, "saved_activations", assume="standard").steps[1].formula.expr)
    assert sympy.expand(assumed.coeff(n) - s * b * (34 * d + 5 * h * s)) == 0
    code, out, _ = run(capsys, "latex", "saved-activations", "gpt2", "--accounting", "korthikanti", "--derivation", "--assume", "standard")
    assert code == 0 and "M_{\\mathrm{act}} &=" in out


@pytest.mark.parametrize("recompute, per_layer", [("selective", 34), ("full", 2)])
def test_recompute_gives_korthikanti_s_table_2(capsys, recompute, per_layer):
    """Korthikanti et al. 2022, Table 2 (no parallelism): selective recomputation keeps sbh·34 bytes per layer
    (the attention core, 5as²b, recomputed), full recomputation sbh·2 (each layer's 16-bit input)."""
    from symform.engine.graph.model import Model

    model = Model.from_component("optional_cross_attention_lm", mlp="one_op_activation_mlp").with_accounting("korthikanti")
    v = model.vocabulary
    d = symform.derive(model, "saved_activations", assume="standard")
    kept = tex.recomputed_derivation(d, model, recompute)
    assumed = sympy.expand(kept.steps[-1].formula.expr)
    assert sympy.expand(assumed.coeff(v["n_layers"]) - per_layer * v["seq"] * v["batch"] * v["d_model"]) == 0
    code, out, _ = run(capsys, "latex", "saved-activations", "gpt2", "--accounting", "korthikanti", "--recompute", recompute)
    assert code == 0 and f"exact, {recompute} recomputation" in out
    code, out, _ = run(capsys, "derive", "saved-activations", "gpt2", "--recompute", recompute, "--batch", "1", "--seq", "1024")
    assert code == 0 and f"exact, recompute {recompute}" in out
    code, _, err = run(capsys, "derive", "params", "gpt2", "--recompute", recompute)
    assert code == 2 and err.count("\n") == 1 and "saved-activations" in err


def test_bytes_per_element_are_symbols_with_units(capsys):
    """qwen3-8b keeps K and V of 8 heads of 128 per layer and token: M_KV = 2·b·s·n·h_kv·d_h·B_kv, B_kv = 2 (bf16)."""
    code, out, _ = run(capsys, "latex", "kv-cache", "qwen3-8b", "--derivation", "--standalone")
    assert code == 0
    body, glossary = out.split("\\section*{Symbols}")
    assert "M_{\\mathrm{KV}} &= 2 b d_h B_{kv} h_{kv} n s" in body
    assert "$B_{kv}$ & \\texttt{kv\\_bytes} &" in glossary and "B/element \\\\" in glossary
    model = symform.load("qwen3-8b")
    d = tex.derivation_of(model, "inference_bytes", assume=None, batch=1, seq=4096)
    assert model.vocabulary["weight_bytes"] in d.exact.expr.free_symbols
    assert d.relative_error is not None and abs(d.relative_error) < 0.3  # errors still at the model's bytes per element


def test_mla_per_projection_is_deepseek_v2_s_matrices(capsys):
    """DeepSeek-V2 (DeepSeek-AI 2024, §2.1.2, eqs. 9–14 and 37–38): W^DQ ∈ R^{d_c'×d}, W^UQ ∈ R^{d_h n_h×d_c'},
    W^QR ∈ R^{d_h^R n_h×d_c'}, W^DKV ∈ R^{d_c×d}, W^KR ∈ R^{d_h^R×d}, W^UK, W^UV ∈ R^{d_h n_h×d_c}, W^O ∈
    R^{d×d_h n_h}. transformers fuses W^UQ with W^QR (q_b_proj), W^DKV with W^KR (kv_a_proj), W^UK with W^UV
    (kv_b_proj); d_c' = r_q, d_c = r_kv, d_h = d_nope (and d_v for values), d_h^R = d_rope."""
    from symform.engine.graph.structure import part_block

    m = symform.load("deepseek-v2")
    v = m.vocabulary
    d, h, rq, rkv, dn, dr, dv = (v[x] for x in ("d_model", "n_heads", "q_lora_rank", "kv_lora_rank", "d_nope", "d_rope", "d_v"))
    paper = {
        "q_a_proj": rq * d,  # W^DQ
        "q_b_proj": dn * h * rq + dr * h * rq,  # W^UQ, W^QR
        "kv_a_proj": rkv * d + dr * d,  # W^DKV, W^KR
        "kv_b_proj": dn * h * rkv + dv * h * rkv,  # W^UK, W^UV
        "o_proj": d * dv * h,  # W^O
    }
    parts = {p.name: p.expr for p in part_block(m, "params", "layers/moe/attn").parts}
    for name, size in paper.items():
        assert sympy.expand(parts[name] - size) == 0, name
    code, out, _ = run(capsys, "latex", "params", "deepseek-v2", "--part", "layers/moe/attn")
    assert code == 0 and "h r_{q} \\cdot \\left(d_{\\mathrm{nope}} + d_{\\mathrm{rope}}\\right) && \\text{q\\_b\\_proj}" in out
    code, _, err = run(capsys, "latex", "params", "deepseek-v2", "--part", "layers/moe/atn")
    assert code == 2 and err.count("\n") == 1 and "layers/moe" in err


def test_width_breaks_for_a_two_column_paper(capsys):
    code, out, _ = run(capsys, "latex", "active-params", "deepseek-v3", "--derivation", "--width", "240")
    assert code == 0
    narrow = [row.split("&&")[0].split("&", 1)[1] for row in out.split("\n")[1:-1] if "&" in row]
    code, out, _ = run(capsys, "latex", "active-params", "deepseek-v3", "--derivation")
    wide = [row.split("&&")[0].split("&", 1)[1] for row in out.split("\n")[1:-1] if "&" in row]
    assert len(narrow) > len(wide) and max(width_pt(r) for r in narrow) < 240
