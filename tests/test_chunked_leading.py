"""Chunked scans to leading order: Gated DeltaNet and Mamba-2 linear in the sequence, no padding artefacts.

The exact count pads a sequence to ceil(seq/chunk) whole chunks; the recurrent components declare
(`leading` in formulas/components/recurrent.toml) that a leading-order form counts seq/chunk of them, and
block forms, where the sequence is large, count the chunk as large too (a tile the size of a head). The
forms expected here are counted by hand from what transformers' torch paths run, per chunk of C tokens and
head (2 FLOPs per multiply-add):

Gated DeltaNet (torch_chunk_gated_delta_rule; H value heads, keys d_k, values d_v):
  (β⊙K)·Kᵀ and Q·Kᵀ            2·2·C²·d_k
  two unit-triangular solves    C²·(d_k + d_v)   (C·(C − 1)/2 multiply-adds per column, leading C²/2)
  W·S and Q·S                   2·2·C·d_k·d_v
  (Q·Kᵀ ⊙ decay)·V_new          2·C²·d_v
  S += Kᵀ·V_new                 2·C·d_k·d_v
  per token (÷ C):              C·(5·d_k + 3·d_v) + 6·d_k·d_v per head
  projections: in_proj_qkvz d → 2·h_k·d_k + 2·H·d_v, out_proj H·d_v → d: d·(4·h_k·d_k + 6·H·d_v) per token
  (the β/decay projection d → 2H, the convolution, gates and norms are of lower degree).

Mamba-2 SSD (mamba2_chunk_scan; H heads of P channels, state N, g groups):
  C·Bᵀ 2·C²·N, (scores ⊙ decay)·X 2·C²·P, Xᵀ·B 2·C·P·N, C·S 2·C·N·P; the [chunks + 1]² product
  passing states between chunks is (seq/C)²·P·N, of lower degree (C counts as large);
  per token: 2·C·(N + P) + 4·P·N per head;
  projections: in_proj d → 2·H·P + 2·g·N (+ H for dt, lower), out_proj H·P → d: 2·d·(3·H·P + 2·g·N).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import sympy

import symform
from checks import run_json
from symform import DeclarationError, Model
from symform.engine.language.declarations import default_library, parse_components
from symform.engine.graph.structure import active_form, structure

DOC = Path(__file__).resolve().parents[1] / "docs" / "block-forms.md"
SEQ = 4096


@cache
def model(name: str) -> Model:
    return Model.load(name)


def hand_forward_flops(m: Model) -> dict[str, sympy.Expr]:
    """Forward FLOPs of one layer of each kind to leading order, counted by hand (the module docstring)."""
    S = {n: m.vocabulary[n] for n in m.vocabulary.names()}
    b, s, d = S["batch"], S["seq"], S["d_model"]
    forms: dict[str, sympy.Expr] = {"lm_head": 2 * b * s * d * S["vocab"]}
    if "d_k_lin" in m.values:  # Qwen3-Next: Gated DeltaNet + MoE layers, gated attention + MoE layers
        C, H, hk, dk, dv = S["chunk"], S["lin_v_heads"], S["lin_k_heads"], S["d_k_lin"], S["d_v_lin"]
        gdn = b * s * (d * (4 * hk * dk + 6 * H * dv) + H * (C * (5 * dk + 3 * dv) + 6 * dk * dv))
        moe = 6 * b * s * d * (S["top_k"] * S["d_ff_expert"] + S["d_ff_shared"])  # gated experts and shared expert
        h, hkv, dh = S["n_heads"], S["n_kv_heads"], S["d_head"]
        attention = 2 * b * s * d * dh * (2 * h + 2 * hkv + h) + 4 * b * h * dh * s**2  # q and its gate, k, v, o; QKᵀ, AV
        forms |= {"mixer": gdn, "layers/linear": gdn + moe, "layers/full": attention + moe}
    else:  # Nemotron-H: Mamba-2, attention and MLP blocks
        C, H, P, N, g = S["chunk"], S["ssm_heads"], S["ssm_head_dim"], S["ssm_state"], S["ssm_groups"]
        mamba = 2 * b * s * (d * (3 * H * P + 2 * g * N) + H * (C * (N + P) + 2 * P * N))
        h, hkv, dh = S["n_heads"], S["n_kv_heads"], S["d_head"]
        forms |= {
            "mixer": mamba,
            "layers/mamba": mamba,
            "layers/attention": 2 * b * s * d * dh * (2 * h + 2 * hkv) + 4 * b * h * dh * s**2,
            "layers/mlp": 4 * b * s * d * S["d_ff"],  # up and down, no gate
        }
    return forms


HYBRIDS = ["qwen3-next-80b-a3b", "nemotron-h-8b"]


@pytest.mark.parametrize("name", HYBRIDS)
def test_the_block_form_is_the_hand_count(name):
    m = model(name)
    hand = hand_forward_flops(m)
    st = structure(m, "forward_flops", leading=True)
    blocks = {b.name: b for b in st.blocks}
    recurrent = blocks["layers/linear" if "layers/linear" in blocks else "layers/mamba"]
    assert sympy.expand(recurrent.expr - hand[recurrent.name]) == 0
    assert sympy.expand({p.name: p.expr for p in recurrent.parts}["mixer"] - hand["mixer"]) == 0
    for block in st.blocks:
        assert sympy.expand(block.expr - hand[block.name]) == 0, block.name
    assert not st.expr.atoms(sympy.ceiling, sympy.Min, sympy.Max)


def test_derive_s_leading_order_in_the_widths_counts_seq_over_chunk_chunks():
    """derive's first leading order is in the widths alone (neither the sequence nor its chunks large): the
    scan's state products s·d_k·d_v stand with the projections' s·d², its products within a chunk, s·C·d_k, and
    attention's s²·d_h are of lower degree; no ceil(seq/chunk) is left."""
    m = model("qwen3-next-80b-a3b")
    v = m.vocabulary
    hand = hand_forward_flops(m)
    b, s, d, n, n_lin = v["batch"], v["seq"], v["d_model"], v["n_layers"], v["n_linear_layers"]
    within_chunks = b * s * v["lin_v_heads"] * v["chunk"] * (5 * v["d_k_lin"] + 3 * v["d_v_lin"])
    scores = 4 * b * v["n_heads"] * v["d_head"] * s**2
    expected = n_lin * (hand["layers/linear"] - within_chunks) + (n - n_lin) * (hand["layers/full"] - scores)
    derived = symform.derive(m, "forward_flops", leading=True).result.expr
    assert sympy.expand(derived - expected) == 0
    assert not derived.atoms(sympy.ceiling)


def test_exact_derivation_keeps_the_padding():
    """Only leading-order forms count seq/chunk chunks: the exact step is the model's own expression."""
    m = model("qwen3-next-80b-a3b")
    exact = symform.derive(m, "forward_flops", leading=True).exact.expr
    assert sympy.expand(exact - m.expression("forward_flops").expr) == 0
    assert sympy.ceiling(m.vocabulary["seq"] / m.vocabulary["chunk"]) in exact.atoms(sympy.ceiling)
    values = {m.vocabulary[k]: v for k, v in m.values.items()} | {m.vocabulary["batch"]: 1, m.vocabulary["seq"]: 4000}
    assert exact.xreplace(values) == m.evaluate("forward_flops", batch=1, seq=4000)  # 63 chunks: 4032 padded tokens


def test_the_replacement_is_declared_not_named():
    v = model("qwen3-next-80b-a3b").vocabulary
    assert model("qwen3-next-80b-a3b").leading_rewrites() == {sympy.ceiling(v["seq"] / v["chunk"]): v["seq"] / v["chunk"]}
    assert model("nemotron-h-8b").leading_rewrites() == {sympy.ceiling(v["seq"] / v["chunk"]): v["seq"] / v["chunk"]}
    assert model("qwen3-8b").leading_rewrites() == {}


@pytest.mark.parametrize("leading", ["chunk", "2"])
def test_a_leading_replacement_of_a_symbol_or_number_is_refused(leading):
    library = default_library()
    table = {"c": {"doc": "", "args": ["d_model", "chunk"], "leading": {leading: "1"}, "parts": [{"name": "p", "use": "linear", "with": {"d_in": "d_model", "d_out": "chunk"}}]}}
    with pytest.raises(DeclarationError, match="leading replaces") as info:
        library.merged(parse_components(table, library.vocabulary, "test", existing=library.components))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", HYBRIDS)
def test_n_active_form_writes_attention_on_the_attention_layers_only(name):
    """2·b·s·N_active, plus what N_active leaves out per layer kind: (n − n_lin)·4·b·d_h·h·s², not n·… − n_lin·…."""
    m = model(name)
    v = m.vocabulary
    b, s, d = v["batch"], v["seq"], v["d_model"]
    form = active_form(m, "forward_flops")
    rest = {blk.name: blk for blk in form.rest_blocks}
    attention = "layers/full" if "layers/full" in rest else "layers/attention"
    assert sympy.expand(rest[attention].expr - 4 * b * v["n_heads"] * v["d_head"] * s**2) == 0
    if name == "qwen3-next-80b-a3b":
        assert sympy.expand(rest[attention].repeat - (v["n_layers"] - v["n_linear_layers"])) == 0
        H, dk, dv = v["lin_v_heads"], v["d_k_lin"], v["d_v_lin"]
        assert sympy.expand(rest["layers/linear"].expr - 6 * b * s * H * dk * dv) == 0  # the state's reads and update
    assert sympy.expand(rest[""].expr + 2 * b * s * d * v["vocab"]) == 0  # untied: the embedding lookup is no matmul
    assert sympy.expand(sum((blk.total for blk in form.rest_blocks), sympy.S.Zero) - form.difference - form.attention) == 0


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "qwen3.5-0.8b", "nemotron-h-8b", "nemotron-3-nano-30b-a3b"])
def test_derive_leading_prints_no_rounding_or_cancelling_terms(capsys, name):
    report = run_json(capsys, "derive", "forward-flops", name, "--leading", "--batch", "1", "--seq", str(SEQ))
    exact, *approximations = report["steps"]
    assert "ceiling" in exact["expression"]
    texts = [step["written"] for step in approximations] + [report["structure"]["expression"]]
    texts += [blk["expression"] for blk in report["structure"]["blocks"]]
    written = report["structure"]["in_terms_of_active_params"]["written"]
    for text in texts + [written]:
        assert not re.search(r"ceiling|Max\(|Min\(", text), text
    # the only differences left: a layer kind's repeat, and the lookups that cost no FLOPs
    rest = re.sub(r"\(n_layers - n_linear_layers\)", "", written).replace(" - 2*batch*d_model*seq*vocab", "")
    # and a vision tower's weights, in N_active but not run by text tokens (qwen3.5-0.8b is the whole VL class)
    rest = re.sub(r" - 2\*batch\*d_vision\*seq\*\([^()]*\)$", "", rest)
    assert " - " not in rest, written
    assert abs(report["structure"]["relative_error"]) < 0.02


def _doc_errors() -> dict[str, list[str]]:
    """docs/block-forms.md's family table: each preset's errors N / N_active / C_fwd per token / KV per token."""
    found = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            for entry in line.rsplit(" | ", 1)[-1].rstrip(" |").split("<br>"):
                if ": " in entry:
                    preset, errors = entry.split(": ", 1)
                    found[preset] = errors.split(" / ")
    return found


@pytest.mark.parametrize("name", HYBRIDS)
def test_doc_s_forward_flops_error_is_the_hand_form_s(name):
    """The hand form per token at the preset against the exact count (s = 4096): the error the doc prints."""
    m = model(name)
    hand = hand_forward_flops(m)
    v = m.vocabulary
    repeats = {"layers/linear": v["n_linear_layers"], "layers/full": v["n_layers"] - v["n_linear_layers"],
               "layers/mamba": v["n_mamba_layers"], "layers/attention": v["n_attention_layers"], "layers/mlp": v["n_mlp_layers"], "lm_head": 1}
    total = sum((repeats[k] * e for k, e in hand.items() if k != "mixer"), sympy.S.Zero)
    values = {v[k]: x for k, x in m.values.items()} | {v["batch"]: 1, v["seq"]: SEQ}
    error = sympy.Rational(total.xreplace(values)) / m.evaluate("forward_flops", batch=1, seq=SEQ) - 1
    assert _doc_errors()[name][2] == f"{float(error):+.1%}"


@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h"])
def test_doc_rows_of_the_recurrent_families_are_current(family):
    from symform.engine.language.families import families
    from symform.interface.papers.appendix import family_members, family_row

    spec = next(f.spec for f in families().values() if f.name == family)
    row = family_row(family, spec.assume, family_members(family), seq=SEQ)
    assert row in DOC.read_text(encoding="utf-8").splitlines()


def test_per_repeat_writes_a_sum_with_the_layer_kinds_counts_as_factors():
    from symform.engine.graph.structure import Block, per_repeat

    n, n_lin, x, y, z = sympy.symbols("n n_lin x y z", positive=True)
    kinds = [Block("linear", n_lin, y), Block("full", n - n_lin, x), Block("head", sympy.S.One, z)]
    written = {b.name: (b.repeat, b.expr) for b in per_repeat(n * x - n_lin * x + n_lin * y + z, kinds)}
    assert written == {"linear": (n_lin, y), "full": (n - n_lin, x), "": (1, z)}
    assert per_repeat(n**2 * x, kinds) is None  # not linear in the counts
    assert per_repeat(sympy.Min(n, x), kinds) is None
    assert per_repeat(x, [Block("head", sympy.S.One, z)]) is None  # no layer kinds to write it with


def test_a_sequence_is_many_chunks_so_a_cost_per_sequence_beside_one_per_chunk_goes():
    """The stand-in seq/chunk declares the number of chunks large: a term that is another times (chunk/seq)^k is of
    lower order (once per sequence next to once per chunk), whether written per token or per sequence; terms of
    other shapes stay (C·d per token within a chunk, s·d attention, a window's Min)."""
    from symform.engine.graph.structure import in_stand_ins

    s, C, d, k, h, b, t, w = sympy.symbols("seq chunk d k h b tokens w", positive=True)
    rewrites = {sympy.ceiling(s / C): s / C}
    per_token = t * (9 * d**2 - 4 * C * d**2 / s + 8 * C * d * k + 2 * d * s * h + sympy.Min(s, w) * d)
    assert sympy.expand(in_stand_ins(per_token, rewrites) - t * (9 * d**2 + 8 * C * d * k + 2 * d * s * h + sympy.Min(s, w) * d)) == 0
    per_sequence = b * sympy.ceiling(s / C) * C * 9 * d**2 - 4 * b * C * d**2
    assert sympy.expand(in_stand_ins(per_sequence, rewrites) - 9 * b * s * d**2) == 0
    assert in_stand_ins(per_token, {}) == per_token  # no stand-in, no ratio declared large


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "qwen3.5-0.8b"])
def test_training_s_first_chunk_saving_is_exact_only(name):
    """The backward forms no state gradient for the first chunk (state_reads' backward repeat 2 − 1/ceil(seq/chunk)
    in formulas/components/recurrent.toml): the exact count subtracts it once per sequence, a leading form not."""
    m = model(name)
    v = m.vocabulary
    once_per_sequence = v["chunk"] * v["d_k_lin"] * v["d_v_lin"] * v["tokens"] / v["seq"]
    exact = sympy.expand(m.expression("train_flops").expr)
    assert any(t.has(once_per_sequence) and t.as_coeff_Mul()[0] < 0 for t in sympy.Add.make_args(exact))
    derived = sympy.expand(symform.derive(m, "train_flops", leading=True).result.expr)
    blocks = sympy.expand(structure(m, "train_flops", leading=True).expr)
    active = sympy.expand(active_form(m, "train_flops").expr)
    for form in (derived, blocks, active):
        assert not any(t.has(1 / v["seq"]) for t in sympy.Add.make_args(form)), form
        assert form.has(v["d_k_lin"] * v["d_v_lin"])  # the per-chunk state work stays


def test_derive_train_flops_prints_no_per_sequence_term(capsys):
    """`derive train-flops --leading` on Gated DeltaNet: no −C·d_k·d_v/seq in any leading line, block or N_active form."""
    report = run_json(capsys, "derive", "train-flops", "qwen3-next-80b-a3b", "--leading", "--batch", "1", "--seq", str(SEQ), "--tokens", str(SEQ))
    exact, *approximations = report["steps"]
    assert "/seq" in exact["expression"]  # the exact count keeps it
    structure_json = report["structure"]
    texts = [step["written"] for step in approximations] + [structure_json["expression"]]
    texts += [blk["expression"] for blk in structure_json["blocks"]]
    written = structure_json["in_terms_of_active_params"]["written"]
    for text in texts + [written]:
        assert "/seq" not in text and not re.search(r"ceiling|Max\(|Min\(", text), text
    assert " - " not in written.replace("(n_layers - n_linear_layers)", "").replace(" - 6*d_model*tokens*vocab", ""), written
    assert abs(structure_json["relative_error"]) < 0.2 and abs(structure_json["in_terms_of_active_params"]["relative_error"]) < 0.2
