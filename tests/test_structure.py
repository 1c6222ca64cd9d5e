"""Block forms: each layer kind a repeat times one layer, no encoding artefacts, a default assumption set per
family within 20 % of every preset, the N_active form, and the appendix table."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache

import pytest
import sympy

from checks import run, run_json
from symform import Model
from symform.engine.language.families import all_families, presets
from symform.engine.graph.structure import active_form, default_assumptions, error_at, structure, without_flags
from symform.interface.papers import latex as tex
from symform.interface.papers.latex_parse import parse_back
from symform.interface.papers.appendix import COLUMNS, cell, family_members


@cache
def model(name: str) -> Model:
    return Model.load(name)


def one_preset_per_family() -> list[str]:
    seen: dict[str, str] = {}
    for name in presets():
        seen.setdefault(model(name).spec.family, name)
    return list(seen.values())


def at(m: Model, expr: sympy.Expr, **workload) -> sympy.Expr:
    """``expr`` at the model's sizes, with an MoE's granularity G = d_ff/d_e (Krajewski et al. 2024) where it has experts."""
    values = {**m.values, **workload}
    if "d_ff_expert" in values and "d_ff" in values:
        values["granularity"] = sympy.Rational(values["d_ff"], values["d_ff_expert"])
    return expr.xreplace({m.vocabulary[k]: v for k, v in values.items()})


def test_moe_layers_are_one_block_times_n_minus_n_dense():
    m = model("deepseek-v3")
    blocks = {b.name: b for b in structure(m, "params").blocks}
    v = m.vocabulary
    assert sympy.expand(blocks["layers/moe"].repeat - (v["n_layers"] - v["n_dense_layers"])) == 0
    assert blocks["layers/dense"].repeat == v["n_dense_layers"]
    mlp = {p.name: p.expr for p in blocks["layers/moe"].parts}["mlp"]
    d, de, e, es = v["d_model"], v["d_ff_expert"], v["n_experts"], v["n_shared_experts"]
    assert sympy.expand(mlp - (3 * d * de * (e + es) + d * e)) == 0  # experts, shared experts (no Min(1, e_s)), router


@pytest.mark.parametrize("name", one_preset_per_family())
@pytest.mark.parametrize("quantity", ["params", "forward_flops", "kv_cache"])
def test_blocks_add_up_to_the_exact_expression_with_positive_terms(name, quantity):
    m = model(name)
    st = structure(m, quantity)
    exact = without_flags(m.expression(quantity).expr, m.values)
    assert sympy.expand(at(m, sympy.expand(st.expr - exact))) == 0  # blocks this model has none of are left out
    # The recurrent mixers' exact counts hold genuine "size − 1" factors (the causal convolution runs over
    # seq + conv_kernel − 1 padded positions, the chunked scan over chunk·(chunk − 1) pairs): written with
    # conv_kernel = 1 + k′ and chunk = 1 + c′ (both at least 1) every term is positive, as a cancelling artefact's is not.
    shift = {m.vocabulary[k]: m.vocabulary[k] + 1 for k in ("conv_kernel", "chunk") if k in m.vocabulary}
    for block in st.blocks:
        assert at(m, block.repeat) > 0, block.name
        terms = sympy.Add.make_args(sympy.expand(block.expr.xreplace(shift)))
        assert all(t.as_coeff_Mul()[0] > 0 for t in terms), block.name
        flags = [e for e in block.expr.atoms(sympy.Min, sympy.Max) if sympy.S.One in e.args and e.args[1 - e.args.index(sympy.S.One)].is_Symbol]
        assert not flags, (block.name, flags)


def test_min_flags_only_go_where_the_part_is_present():
    v = model("deepseek-v3").vocabulary
    flag = sympy.Min(1, v["n_shared_experts"])
    assert without_flags(flag, {"n_shared_experts": 2}) == 1
    assert without_flags(flag, {}) == 1  # a symbol: the form of the models that have shared experts
    assert without_flags(flag, {"n_shared_experts": 0}) == flag  # kept where it would be wrong


@cache
def members(family: str) -> tuple[Model, ...]:
    """The family's presets (or its config's defaults), loaded once: their expressions are cached on them."""
    return tuple(family_members(family))


# Hybrid families whose leading forms are not declared yet, each with what is missing. Expected to fail, strictly,
# until they are.
LEADING_NOT_YET = {
    "jamba": "the granular default leaves Mamba-1's scan and projections out of the leading order: -24 % at jamba-1.5-mini",
    "mamba2": "derive's error report has no value for the chunked scan's leading form at mamba-codestral-7b",
    "hunyuan_v1_moe": "no preset (Hunyuan-A13B's per-layer lists are refused) and config defaults that leave head_dim null",
}


@pytest.mark.parametrize("family", sorted(all_families()))
def test_each_family_s_default_assumptions_are_within_20_percent_at_every_preset(family, request):
    """The appendix columns to leading order under the family's default sets (or none, where it declares no
    simple form) against the exact counts at every bundled preset of the family, or its defaults."""
    if family == "jamba":
        request.applymarker(pytest.mark.xfail(strict=True, reason=LEADING_NOT_YET[family]))
    for m in members(family):
        name = m.name
        for quantity, _, _ in COLUMNS:
            c = cell(m, quantity, 4096)
            assert not c.formula.atoms(sympy.Min, sympy.Max, sympy.ceiling), (name, quantity, c.formula)
            got = at(m, c.formula, seq=4096, source_seq=4096)  # an encoder-decoder's source as long as the sequence
            if c.value == 0:  # an encoder (bert) keeps no KV cache: its formula must be 0 too
                assert got == 0, (name, quantity, got)
                continue
            error = float(got) / float(c.value) - 1
            assert abs(error) <= 0.20, (name, quantity, default_assumptions(m), f"{error:+.1%}")


DERIVED = {"params": {}, "forward_flops": {"batch": 1, "seq": 4096, "source_seq": 1024}, "train_flops": {"batch": 1, "seq": 4096, "source_seq": 1024, "tokens": 4096}}


def _plain(block, where) -> None:
    """No Min/Max/ceil of how a part is encoded, in the block or its parts."""
    for part in (block, *block.parts):
        assert not part.expr.atoms(sympy.Min, sympy.Max, sympy.ceiling, sympy.floor), (*where, part.name, str(part.expr))


def _positive_and_plain(block, where) -> None:
    """Every term of the block (and of its parts) added, none subtracted, and plain (``_plain``)."""
    _plain(block, where)
    for part in (block, *block.parts):
        terms = sympy.Add.make_args(sympy.expand(part.expr))
        assert all(t.as_coeff_Mul()[0] > 0 for t in terms), (*where, part.name, str(part.expr))


@pytest.mark.parametrize("family", sorted(all_families()))
def test_derive_s_leading_forms_of_every_family_add_positive_blocks_within_20_percent(family, request):
    """What `derive QUANTITY MODEL --leading` prints under the family's default sets, for parameters, forward and
    training FLOPs at every preset (or the config's defaults): blocks that only add, no encoding artefacts, an
    error that can be printed (every symbol has a value) and is within 20 %; the same for the N_active form, whose
    blocks are what a multiple of N_active leaves out and so may subtract (lookups that cost no FLOPs, weights
    without a gradient)."""
    if family in LEADING_NOT_YET:
        request.applymarker(pytest.mark.xfail(strict=True, reason=LEADING_NOT_YET[family]))
    found = members(family)
    assert found, f"{family}: no preset and no config defaults to check its leading order at"
    for m in found:
        assume = default_assumptions(m)
        for quantity, workload in DERIVED.items():
            where = (m.name, quantity, assume)
            st = structure(m, quantity, assume=assume, leading=True)
            for block in st.blocks:
                _positive_and_plain(block, where)
            error = error_at(m, quantity, st.expr, **workload)
            assert error is not None and abs(error) <= 0.20, (*where, error)
            if quantity == "params":
                continue
            form = active_form(m, quantity, assume=assume)
            assert form is not None, where
            for block in form.rest_blocks:
                _plain(block, where)
            error = error_at(m, quantity, form.expr, **workload)
            assert error is not None and abs(error) <= 0.20, (*where, "N_active", error)


def test_experts_keep_their_width_under_the_dense_assumptions():
    m = model("deepseek-v3")
    v = m.vocabulary
    expr = m.expression("params", assume="standard").expr
    assert v["d_ff_expert"] in expr.free_symbols and v["kv_lora_rank"] not in expr.free_symbols
    assert abs(error_at(m, "params", structure(m, "params", assume="standard", leading=True).expr)) < 0.01


def test_assumption_sets_compose_first_declared_wins():
    m = model("llama-3.1-8b")
    v = m.vocabulary
    grouped = m.expression("params", assume="grouped,standard").expr.free_symbols
    assert v["n_kv_heads"] in grouped and v["d_head"] not in grouped  # the attention declares grouped: it applies
    assert v["d_ff"] not in grouped  # the gated MLP declares no grouped set: its standard one applies
    standard = m.expression("params", assume="standard").expr.free_symbols
    assert v["n_kv_heads"] not in standard
    mixtral = model("mixtral-8x7b")
    assert error_at(mixtral, "kv_cache", mixtral.expression("kv_cache", assume="grouped,standard").expr, batch=1, seq=1) == 0


def test_forward_flops_per_token_are_two_n_active_plus_attention():
    m = model("qwen3-8b")
    v = m.vocabulary
    form = active_form(m, "forward_flops", assume="standard")
    b, s, d, n, vocab = v["batch"], v["seq"], v["d_model"], v["n_layers"], v["vocab"]
    assert form.multiple == 2 * b * s
    assert sympy.expand(form.attention - 4 * b * s**2 * d * n) == 0  # 2·(QKᵀ + AV) per token and layer: 4·n·s·d
    assert sympy.expand(form.difference + 2 * b * s * d * vocab) == 0  # untied: embedding lookups cost no FLOPs
    assert abs(error_at(m, "forward_flops", active_form(m, "forward_flops").expr, batch=1, seq=4096)) < 0.001


def test_derive_prints_blocks_and_their_error(capsys):
    code, out, _ = run(capsys, "derive", "params", "deepseek-v3", "--leading")
    assert code == 0
    section = out[out.index("by block"):]
    assert "layers/moe × (n_layers - n_dense_layers)" in section and "Min(" not in section
    assert re.search(r"relative error at deepseek-v3: [+-]0\.\d\d%", section)
    code, out, _ = run(capsys, "derive", "params", "gemma-2-9b", "--leading")
    assert "no simple form" in out


def test_derive_json_is_a_tree_of_named_blocks(capsys):
    report = run_json(capsys, "derive", "forward-flops", "deepseek-v3", "--leading", "--batch", "1", "--seq", "4096")
    tree = report["structure"]
    names = [b["name"] for b in tree["blocks"]]
    assert "layers/dense" in names and "layers/moe" in names
    moe = tree["blocks"][names.index("layers/moe")]
    assert sympy.sympify(moe["repeat"]) == sympy.sympify("n_layers - n_dense_layers")
    assert {"attn", "mlp"} <= {p["name"] for p in moe["parts"]}
    assert abs(tree["relative_error"]) < 0.2 and abs(tree["in_terms_of_active_params"]["relative_error"]) < 0.2


def test_block_latex_is_one_aligned_line_per_block_without_braced_d(capsys):
    code, out, _ = run(capsys, "latex", "params", "deepseek-v3", "--blocks", "--leading")
    assert code == 0 and out.startswith("\\begin{aligned}")
    lines = out.strip().splitlines()[1:-1]
    assert any("\\left(n - n_{\\mathrm{dense}}\\right) \\cdot" in line for line in lines)
    assert "{d}" not in out and "Min" not in out


def test_block_latex_reads_back():
    pytest.importorskip("antlr4")
    m = model("mixtral-8x7b")
    for block in structure(m, "params", assume="grouped,standard").blocks:
        text = tex.block_latex(block, m.vocabulary)
        assert sympy.expand(parse_back(text, block.total.free_symbols, m.vocabulary) - block.total) == 0


APPENDIX = ["qwen3-32b", "deepseek-v3", "mixtral-8x7b", "gemma-2-9b", "gpt-oss-120b", "qwen3-next-80b-a3b", "nemotron-h-8b", "deepseek-v3.2", "glm-4.7"]


def _appendix_rows(text: str) -> dict[str, list[list[str]]]:
    """The appendix's rows by model: under each model's heading row, one row of cells per quantity."""
    rows: dict[str, list[list[str]]] = {}
    for line in text.split("\\end{longtable}")[0].splitlines():
        heading = re.match(r"\\multicolumn\{4\}\{@\{\}l\}\{\\textbf\{([^}]*)\}", line)
        if heading:
            current = rows.setdefault(heading[1].replace("\\_", "_"), [])
        elif rows and line.endswith("\\\\") and line.count("&") == 3:
            current.append([c.strip() for c in line.removesuffix("\\\\").split("&")])
    return rows


def test_appendix_numbers_are_the_cli_s(capsys):
    code, out, _ = run(capsys, "latex", "--formulas", *APPENDIX, "--seq", "4096")
    assert code == 0 and "\\begin{longtable}" in out and "Symbols" not in out and "\\texttt{vocab}" in out
    assert "resizebox" not in out and "\\begin{table}" not in out  # at the document's type size, where it is written
    rows = _appendix_rows(out)
    assert list(rows) == APPENDIX
    for name in APPENDIX:
        cells = [float(re.sub(r"[^\d.]", "", row[2])) for row in rows[name]]
        params = run_json(capsys, "params", name)
        flops = run_json(capsys, "flops", name, "--batch", "1", "--seq", "4096")
        memory = run_json(capsys, "memory", name, "--infer", "--batch", "1", "--seq", "4096")  # the cache of a 4096-token context
        assert cells == [params["total"], params["active"], flops["forward"] // 4096, round(memory["components"]["kv_cache"] / 4096, 1)], name
        assert flops["forward"] % 4096 == 0


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX engine (apt-get install texlive-latex-base texlive-latex-recommended)")
def test_appendix_compiles_with_pdflatex(capsys, tmp_path):
    code, out, _ = run(capsys, "latex", "--formulas", *APPENDIX, "--standalone")
    assert code == 0
    (tmp_path / "appendix.tex").write_text(out, encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "appendix.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


def test_appendix_bad_input_is_one_line(capsys):
    code, _, err = run(capsys, "latex", "--formulas", "no-such-model")
    assert code == 2 and err.count("\n") == 1 and "no-such-model" in err
    code, _, err = run(capsys, "latex", "--formulas")
    assert code == 2 and err.count("\n") == 1


def test_inference_bytes_are_weights_plus_kv_and_derive_as_2n_plus_kv(capsys):
    """Serving holds B_w·N of weights and the KV cache: the memory report's two parts, and to leading order
    2·N + (d_c + d_h^R)·l·B_kv·b·s for DeepSeek-V3 under DeepSeek-V2's ranks (4.5·d_h·l elements per token)."""
    # memory defaults to the checkpoint's weight format (fp8-block for DeepSeek-V3); B_w's default is bf16
    memory = run_json(capsys, "memory", "deepseek-v3", "--infer", "--batch", "2", "--seq", "100", "--weight-format", "bf16")
    m = model("deepseek-v3")
    assert m.evaluate("inference_bytes", batch=2, seq=100) == memory["components"]["weights"] + memory["components"]["kv_cache"]
    form = active_form(m, "inference_bytes", assume="standard")
    b, s, n, d_nope = (m.vocabulary[x] for x in ("batch", "seq", "n_layers", "d_nope"))
    assert form.base == "params" and form.multiple == 2 and form.difference == 0
    assert sympy.expand(form.attention - 2 * sympy.Rational(9, 2) * d_nope * n * b * s) == 0
    flops = active_form(m, "forward_flops", assume="standard")
    assert flops.base == "active_params"


@pytest.mark.parametrize("name, quantity", [("deepseek-v3", "forward-flops"), ("deepseek-v3", "params"), ("mixtral-8x7b", "params")])
def test_derive_s_exact_and_leading_lines_are_written_per_layer_kind(capsys, name, quantity):
    """No n·x − n_dense·x: each layer kind's repeat a factor, the same expression as the expanded one."""
    report = run_json(capsys, "derive", quantity, name, "--leading")
    for step in report["steps"]:
        written = sympy.sympify(step["written"])
        assert sympy.expand(written - sympy.sympify(step["expression"])) == 0, step["label"]
        cancelling = step["written"].replace("(n_layers - n_dense_layers)", "")  # the repeat is the one difference
        assert "Min(" not in cancelling and " - " not in cancelling and not cancelling.startswith("-"), step["written"]
        if name == "deepseek-v3":
            assert "(n_layers - n_dense_layers)*" in step["written"] and "n_dense_layers*(" in step["written"].replace("2*batch*n_dense_layers*seq*(", "n_dense_layers*(")
    code, out, _ = run(capsys, "derive", quantity, name, "--leading")
    assert code == 0 and all(s["written"] in out for s in report["steps"])
