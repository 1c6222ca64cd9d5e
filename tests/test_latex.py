"""LaTeX emission: every formula symform prints reads back (sympy's LaTeX parser) to the expression it came from."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import sympy
from checks import run

import symform
from symform.interface.papers import latex as tex
from symform.interface.papers.latex_parse import parse_back
from symform.engine.language.declarations import default_library

pytest.importorskip("antlr4", reason="sympy's LaTeX parser needs antlr4-python3-runtime==4.11 (the test extra)")


def round_trips(expr: sympy.Expr) -> bool:
    text = tex.latex(expr)
    back = parse_back(text, expr.free_symbols)
    return sympy.expand(back - expr) == 0


def _component_failures(name: str) -> list[str]:
    """Quantities of one component whose LaTeX does not read back: as the reference pages print them
    (defaults, conventions at their values) and, for primitives, as declared (every argument and
    convention a symbol)."""
    prim = default_library()[name].is_primitive
    variants = [tex.component_expressions(name)] + ([tex.component_expressions(name, defaults=False, conventions=False)] if prim else [])
    return [f"{name}.{q}: {tex.latex(e)}" for exprs in variants for q, e in exprs.items() if not round_trips(e)]


def test_every_declared_quantity_of_every_primitive_parses_back():
    names = [name for name, component in default_library().components.items() if component.is_primitive]
    # sympy's parser takes about a millisecond per character: spread the primitives over the cores
    with ProcessPoolExecutor(max_workers=min(4, os.cpu_count() or 1), mp_context=multiprocessing.get_context("fork")) as pool:
        failures = [f for found in pool.map(_component_failures, names) for f in found]
    assert failures == []


_COMPOSITES = sorted(name for name, component in default_library().components.items() if not component.is_primitive)


@settings(max_examples=6, deadline=None)
@given(name=st.sampled_from(_COMPOSITES))
def test_the_quantities_of_composite_components_parse_back(name):
    """A composite's expressions are its parts' summed and multiplied (195,000 characters of LaTeX in all, some
    four minutes of sympy's parser): each run reads back a sample of them, another sample the next run."""
    assert _component_failures(name) == []


def test_letters_are_the_vocabulary_s_and_read_back_uniquely():
    v = symform.vocabulary()
    assert tex.latex(v["d_ff"] * v["d_model"] * v["n_layers"]) == r"d_{ff} d\,n"  # d\,n: not the differential dn
    assert tex.latex(12 * v["d_model"] ** 2 * v["n_layers"]) == "12 d^{2} n"
    everything = sympy.Add(*v.symbols())
    assert round_trips(everything) and round_trips(sympy.Mul(*v.symbols()))
    width = sympy.Symbol("width", integer=True, nonnegative=True)
    assert tex.latex(width) == r"\mathit{width}" and round_trips(width * v["seq"])


def test_functions_read_back():
    v = symform.vocabulary()
    s, w, b = v["seq"], v["window"], v["kv_block"]
    for expr in (sympy.Min(s, w) * v["d_model"], sympy.Max(v["dropout"], sympy.Min(1, 4 - v["act_bytes"])), b * sympy.ceiling(s / b)):
        assert round_trips(expr)


@pytest.fixture(scope="module")
def qwen():
    return symform.load("qwen3-32b")


def _lines_round_trip(model, quantity, **workload):
    d = symform.derive(model, quantity, assume="standard", leading=True, **workload)
    lines = tex.derivation_lines(d, model)
    for line in lines:
        assert sympy.expand(parse_back(tex.latex(line.expr), line.expr.free_symbols) - line.expr) == 0
    return lines


def test_params_derivation_gives_12_n_d_squared_step_by_step(qwen):
    v = qwen.vocabulary
    d, n, h, V = v["d_model"], v["n_layers"], v["n_heads"], v["vocab"]
    lines = _lines_round_trip(qwen, "params")
    reasons = [line.reason for line in lines]
    assert reasons[0] == r"\text{exact}" and reasons[1] == r"\text{per layer}"
    assert r"d_{ff} = \frac{8 d}{3}" in reasons[2] and r"h_{kv} = h" in reasons[2] and r"d_h = \frac{d}{h}" in reasons[2]
    # the notes' n·(12d² + 2d + 2d/h) + d(2V + 1), grouped per layer as they write it
    assert sympy.expand(lines[3].expr - (n * (12 * d**2 + 2 * d + 2 * d / h) + d * (2 * V + 1))) == 0
    assert lines[-1].relation == r"\approx" and lines[-1].expr == 12 * d**2 * n
    block = tex.derivation(qwen, "params")
    assert block.startswith(r"\begin{aligned}" + "\nN &= ") and block.endswith(r"\end{aligned}")


def test_training_flops_derivation_gives_6_n_d(qwen):
    v = qwen.vocabulary
    lines = _lines_round_trip(qwen, "train_flops", seq=4096)
    assert lines[-2].expr == 72 * v["d_model"] ** 2 * v["n_layers"] * v["tokens"]
    assert lines[-1].expr == 6 * v["n_params"] * v["tokens"] and "N \\approx 12 d^{2} n" in lines[-1].reason
    block = tex.derivation(qwen, "train_flops", seq=4096)
    assert "&= 6 N D" in block and "at qwen3-32b" in block  # the leading order's error at the model's sizes


def test_quantity_letters_and_approximations(qwen):
    assert tex.quantity_latex(qwen, "params", assume="standard", leading=True) == r"N \approx 12 d^{2} n"
    exact = tex.quantity_latex(qwen, "params")
    lhs, _, rhs = exact.partition(" = ")
    assert lhs == "N" and parse_back(rhs, qwen.expression("params").expr.free_symbols) == qwen.expression("params").expr


def test_numbers_as_people_quote_them():
    assert tex.human(1.2e9) == "1.2B"
    assert tex.human(3.4 * tex.PF_DAY, "PF-days") == "3.4 PF-days"
    assert tex.human(80 * 10**9, "B") == "80 GB"
    assert tex.human(32_762_123_264) == "32.8B" and tex.human(512) == "512"


def test_breakdown_table_is_booktabs_with_one_column_per_model(qwen):
    llama = symform.load("llama-3-8b")
    table = tex.breakdown_table([qwen, llama], "params")
    rows = table.splitlines()
    assert rows[:2] == [r"\begin{tabular}{lrr}", r"\toprule"] and rows[-2:] == [r"\bottomrule", r"\end{tabular}"]
    assert r"component & qwen3-32b & llama-3-8b \\" in rows and r"total & 32.8B & 8.03B \\" in rows
    assert r"\texttt{final\_norm} & 5.12k & 4.1k \\" in rows
    single = tex.breakdown_table([qwen], "forward_flops", batch=1, seq=4096)
    formula = re.search(r"\\texttt\{lm\\_head\} & [^&]+ & \$(.*)\$ \\\\", single)[1]
    expr = qwen.breakdown("forward_flops")["lm_head"].expr
    assert parse_back(formula, expr.free_symbols) == expr


def test_breakdown_table_leaves_out_parts_that_are_zero_in_every_column(qwen):
    # Qwen3's layers are layers/global/... (its breakdown names its global layers): the parts are at depth 3, and
    # the second column is another Qwen3 so that both columns share those paths
    parts = qwen.evaluate_breakdown("params", depth=3)
    assert parts["layers/global/attn_dropout"] == 0 and parts["layers/global/attn_residual"] == 0  # in the API: every part
    table = tex.breakdown_table([qwen, symform.load("qwen3-8b")], "params", depth=3)
    assert "dropout" not in table and "residual" not in table
    assert table.count(r"\texttt{") == len([p for p, v in parts.items() if v])


def test_standalone_table_has_a_title_with_every_model_and_a_glossary(capsys, qwen):
    code, out, _ = run(capsys, "latex", "params", "qwen3-0.6b", "--table", "--and", "qwen3-8b", "--and", "llama-3-8b", "--standalone")
    assert code == 0 and r"\title{Parameters of qwen3-0.6b, qwen3-8b, llama-3-8b}" in out
    glossary = out.split(r"\section*{Symbols}")[1]
    for symbol in ("d_model", "n_layers", "vocab", "d_ff", "n_kv_heads"):
        assert rf"\texttt{{{symbol.replace('_', chr(92) + '_')}}}" in glossary
    assert r"\texttt{seq}" not in glossary  # the symbols the numbers depend on, not the whole vocabulary


def test_compute_and_memory_tables(qwen):
    compute = tex.training_flops_table([qwen], tokens=10**12, seq=4096)
    assert "PF-days" in compute and r"$6ND$" in compute
    memory = tex.memory_table([qwen], batch=1, seq=4096)
    assert "weights & 65.5 GB" in memory and "total &" in memory


def test_glossary_lists_letters_names_and_meanings():
    table = tex.glossary()
    v = symform.vocabulary()
    for name in v.names():
        assert f"${v.entry(name).latex}$ & \\texttt{{{name.replace('_', chr(92) + '_')}}}" in table
    assert "·" not in table and r"6$\cdot$N$\cdot$D" in table  # safe for pdflatex


def test_cli_latex(capsys, qwen):
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b")
    assert code == 0 and parse_back(out.strip(), qwen.expression("params").expr.free_symbols) == qwen.expression("params").expr
    code, out, _ = run(capsys, "latex", "train-flops", "qwen3-32b", "--derivation")
    assert code == 0 and "&= 6 N D" in out and r"\begin{aligned}" in out
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b", "--table", "--and", "llama-3-8b")
    assert code == 0 and "qwen3-32b & llama-3-8b" in out
    code, out, _ = run(capsys, "latex", "memory", "qwen3-32b", "--table", "--batch", "1", "--seq", "2048")
    assert code == 0 and "GB" in out
    code, out, _ = run(capsys, "latex", "forward-flops", "gated_mlp", "--component")
    assert code == 0 and out.strip() == r"C_{\mathrm{fwd}} = 6 b d_{ff} d\,s"
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b", "--glossary")
    assert code == 0 and r"$h_{kv}$" in out and "$s$" not in out  # only the symbols the formula uses


def test_cli_latex_bad_input(capsys):
    code, _, err = run(capsys, "latex", "memory", "qwen3-32b", "--table")
    assert code == 2 and "--batch and --seq" in err
    code, _, err = run(capsys, "latex", "train-flops", "no_such_component", "--component")
    assert code == 2 and err.count("\n") == 1


def _document(capsys) -> str:
    code, out, _ = run(capsys, "latex", "train-flops", "qwen3-32b", "--derivation", "--standalone")
    assert code == 0
    tables = "\n".join(
        tex.standalone([("", b)]).split("\\maketitle\n")[1].rsplit("\\end{document}", 1)[0]
        for b in (tex.breakdown_table([symform.load("qwen3-0.6b"), symform.load("llama-3.2-1b")], "params"), tex.glossary())
    )
    return out.replace("\\end{document}", tables + "\\end{document}")


def test_standalone_document_is_complete(capsys):
    doc = _document(capsys)
    assert doc.startswith(r"\documentclass") and doc.rstrip().endswith(r"\end{document}")
    assert r"\usepackage{amsmath" in doc and r"\begin{align*}" in doc and "Symbols" in doc


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX engine (apt-get install texlive-latex-base texlive-latex-recommended)")
def test_standalone_document_compiles_with_pdflatex(capsys, tmp_path):
    (tmp_path / "doc.tex").write_text(_document(capsys), encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0


def test_no_stray_thin_space_before_a_command_yet_every_line_reads_back(capsys, qwen):
    """A d that ends a parenthesis or stands before \\cdot needs no space in print (only sympy's parser reads
    ``d\\right`` as a differential): the derivation's per-layer line ends ``+ 2 d\\right)``."""
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b", "--derivation")
    assert code == 0
    assert "\\,\\right" not in out and "\\, \\cdot" not in out
    assert "+ 2 d\\right)" in out and "d \\cdot \\left(2 V + 1\\right)" in out
    symbols = qwen.expression("params").expr.free_symbols
    v = qwen.vocabulary
    d, n, V, dff, dh, h, hkv = (v[x] for x in ("d_model", "n_layers", "vocab", "d_ff", "d_head", "n_heads", "n_kv_heads"))
    per_layer = out.splitlines()[2].split("&")[1].removeprefix("=").strip()
    # Qwen3's parameters per layer (q, k, v, o projections; q/k norms of d_h; two norms of d; a gated MLP)
    by_hand = d * (2 * V + 1) + n * (3 * dff * d + 2 * dh * d * h + 2 * dh * d * hkv + 2 * dh + 2 * d)
    assert sympy.expand(parse_back(per_layer, symbols) - by_hand) == 0


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX engine (apt-get install texlive-latex-base texlive-latex-recommended)")
def test_a_derivation_compiles_with_pdflatex(capsys, tmp_path):
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b", "--derivation")
    assert code == 0
    document = "\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n\\[\n" + out + "\\]\n\\end{document}\n"
    (tmp_path / "d.tex").write_text(document, encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "d.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_any_description_is_made_of_characters_pdflatex_typesets(text):
    """Descriptions and docs come from declarations, a user's among them: whatever they hold, the text LaTeX gets is
    printable ASCII or Latin-1 (pdflatex's utf8 input with T1 fonts), so no character stops the document."""
    typeset = tex._text(text)
    assert all(32 <= ord(c) < 127 or c in "\n\t" or 0xA0 <= ord(c) < 256 for c in typeset)


def test_characters_outside_latin_1_become_their_plain_form_or_their_code_point():
    assert tex._text("4·⌊c₀/4⌋ ☃") == "4$\\cdot$$\\lfloor$c0/4$\\rfloor$ [U+2603]"
