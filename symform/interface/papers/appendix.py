"""``symform latex --formulas MODEL...``: a paper's appendix table, one row per model.

Columns: N, N_active, forward FLOPs per token and KV-cache (or state) bytes per
token, each as the family's block formula to leading order (under the family's
default assumptions) and as the exact number ``symform params``, ``flops`` and
``memory --infer`` print; a glossary of every symbol the formulas use follows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import sympy

from ...engine.errors import ConfigError
from ...engine.algebra.evaluate import Number
from ...engine.language.families import all_families, family_for, preset_config, presets
from ...engine.graph.model import Model
from ...engine.graph.structure import Block, block_large, by_layer_kind, default_assumptions, leading_blocks, structure, without_flags
from ...engine.graph.structure import branches_in_force
from . import latex as tex
from .latex_layout import breakable
from ..options.media import reads_source

COLUMNS = (
    ("params", "$N$", "parameters"),
    ("active_params", "$N_{\\mathrm{active}}$", "active parameters per token"),
    ("forward_flops", "$C_{\\mathrm{fwd}}/s$", "forward FLOPs per token, averaged over a sequence of s tokens"),
    ("kv_cache", "$M_{\\mathrm{KV}}/s$", "KV-cache bytes per token of a context of s tokens (a sliding window holds no more than its width)"),
)


@dataclass(frozen=True)
class Cell:
    blocks: tuple[Block, ...]  # per token, leading order
    value: Number  # exact, per token

    @property
    def formula(self) -> sympy.Expr:
        return sympy.Add(*(b.total for b in self.blocks))


def per_token_workload(quantity: str, seq: int) -> dict[str, int]:
    """What each column is evaluated at: forward FLOPs over one sequence of ``seq`` tokens, and the cache of that
    sequence (a windowed layer caches no more than its window, so the bytes per token fall as the context grows).
    An encoder-decoder's encoder reads a source as long (a model without one reads no source_seq)."""
    one = {"batch": 1, "seq": seq, "source_seq": seq}
    return {"forward_flops": one, "kv_cache": one}.get(quantity, {})


PER_SEQUENCE = ("forward_flops", "kv_cache")  # columns given per token: the sequence's count over its tokens


def cell(model: Model, quantity: str, seq: int, *, one: dict | None = None) -> Cell:
    """The column's value for one token, exact, and its block formula per token to leading order (under the
    family's default assumptions, or, given ``one``, the exact blocks with those substitutions put in)."""
    v = model.vocabulary
    workload = per_token_workload(quantity, seq)
    value = model.evaluate(quantity, **workload)
    per_token = {"forward_flops": {v["batch"]: 1}, "kv_cache": {v["batch"]: 1, v["past"]: 0}}.get(quantity, {})
    divide = v["seq"] if quantity in PER_SEQUENCE else 1
    assume = default_assumptions(model)
    exact = structure(model, quantity, assume=assume).blocks if one is None else [replace(b, expr=b.expr.xreplace(one)) for b in structure(model, quantity).blocks]
    at = {v[k]: sympy.nsimplify(x) for k, x in {**model.values, **model.ratio_values, **workload}.items()}
    blocks = [replace(b, expr=branch_in_force(without_flags(sympy.expand(b.expr.xreplace(per_token) / divide), model.values), at), parts=()) for b in exact]
    large = [s for s in block_large(model) if quantity == "forward_flops" or s not in (v["seq"], v["source_seq"])]
    return Cell(tuple(leading_blocks(blocks, large, model.leading_rewrites(assume=assume))), value / seq if quantity in PER_SEQUENCE else value)


def printed_cell(model: Model, quantity: str, seq: int) -> Cell:
    """The cell as LaTeX prints it: each symbol one meaning (``tex.one_meaning``: DeepSeek-V3's d_ff its own
    18,432 in the dense MLP as in its experts' d_ff/G, not 8d/3 there)."""
    return cell(model, quantity, seq, one=tex.one_meaning(model, quantity, default_assumptions(model)))


def branch_in_force(expr: sympy.Expr, values: dict) -> sympy.Expr:
    """``expr`` with each min/max that the model's sizes and the workload settle written as the branch in force
    there: a windowed layer at a context longer than its window caches w − 1 tokens, min(s, w − 1) is w − 1
    (a formula for contexts at least that long, exact at the one the column is for)."""

    def in_force(e: sympy.Expr) -> sympy.Expr:
        sizes = [a.xreplace(values) for a in e.args]
        if any(x.free_symbols for x in sizes):
            return e
        pick = min if isinstance(e, sympy.Min) else max
        return e.args[sizes.index(pick(sizes))]

    return branches_in_force(expr.replace(lambda e: isinstance(e, (sympy.Min, sympy.Max)), in_force), values)


def cell_latex(c: Cell, model: Model) -> str:
    return " + ".join(tex.block_latex(b, model.vocabulary) for b in c.blocks)


def _breakable_latex(c: Cell, model: Model) -> str:
    """The cell's formula as inline math TeX may break between blocks and inside a block's parentheses."""
    terms = [t for b in by_layer_kind(c.blocks) for t in tex.block_terms(b, model.vocabulary)]
    return breakable(terms) if terms else "0"


UNITS = {"forward_flops": "FLOP", "kv_cache": "B"}


def appendix_table(models: Sequence[Model], *, seq: int) -> tuple[str, set[sympy.Symbol]]:
    """A ``longtable`` at the document's type size, placed where it is written and continued over pages: per
    model a heading row (its name and the assumptions its forms make), then one row per quantity with the
    formula to leading order (broken over lines as it needs), the exact count and the formula's error there."""
    used: set[sympy.Symbol] = set()
    rows = []
    for m in models:
        cells = [printed_cell(m, q, seq) for q, _, _ in COLUMNS]
        used |= {s for c in cells for s in c.formula.free_symbols}
        assume = default_assumptions(m)
        rows.append(f"\\multicolumn{{4}}{{@{{}}l}}{{\\textbf{{{tex._text(m.name)}}}\\quad {_assumption_words(assume)}}} \\\\*")
        for c, (q, _, _) in zip(cells, COLUMNS):
            letter = column_letter(q)
            error = _error(m, c, q, seq)
            error = error if error == "n/a" else f"${error.removesuffix('%')}\\,\\%$"  # in math: a minus sign, not a hyphen
            rows.append(f"{letter} & ${_breakable_latex(c, m)}$ & {_number(c.value, UNITS.get(q, ''))} & {error} \\\\")
        rows.append("\\midrule" if m is not models[-1] else "\\bottomrule")
    head = "& formula, to leading order & exact & error \\\\"
    table = "\n".join([
        "\\begin{longtable}{@{}l>{\\raggedright\\arraybackslash}p{0.55\\linewidth}rr@{}}",
        "\\toprule", head, "\\midrule", "\\endfirsthead",
        "\\toprule", head, "\\midrule", "\\endhead",
        *rows,
        "\\end{longtable}",
    ])
    return table, used


def _source_words(models: Sequence[Model]) -> str:
    """What the notes say of an encoder-decoder's source (per_token_workload's), where a model reads one."""
    return "; an encoder-decoder's source as long" if any(reads_source(m) for m in models) else ""


def column_letter(quantity: str) -> str:
    """A column's letter in the letters in force (a paper's, with --symbols): per token where the column is."""
    return f"${tex.quantity_letter(quantity)}{'/' + tex.symbol_latex(tex.default_vocabulary()['seq']) if quantity in PER_SEQUENCE else ''}$"


def _assumption_words(assume: str | None) -> str:
    if assume is None:
        return "(its own sizes: no assumption set)"
    return f"(assuming {tex._text(assume.replace(',', ', '))})"


def _number(value: Number, unit: str) -> str:
    exact = f"{int(value):,}".replace(",", "\\,") if float(value).is_integer() else f"{float(value):,.1f}".replace(",", "\\,")
    return f"{exact}{('~' + unit) if unit else ''}"


def appendix(models: Sequence[Model], *, seq: int, standalone: bool = False) -> str:
    table, used = appendix_table(models, seq=seq)
    vocabulary = models[0].vocabulary
    n, n_active, fwd, kv = (column_letter(q) for q, _, _ in COLUMNS)
    s = f"${tex.symbol_latex(vocabulary['seq'], vocabulary)}$"
    note = (
        f"Per model: its parameters {n}, its active parameters {n_active}, its forward FLOPs per token "
        f"{fwd} averaged over a sequence of {s[:-1]} = {seq}$ tokens (batch 1{_source_words(models)}) "
        f"and its KV-cache (or state) bytes per token {kv} of a context of {s} tokens at the default storage sizes (a sliding-window "
        "layer caches at most its window); each as its formula to leading order "
        "in the widths, the vocabulary and the sequence, under the family's default assumptions, as the exact count, "
        "and as the formula's relative error at the model's own sizes."
    )
    body = note + "\n\n" + table
    glossary = tex.glossary(vocabulary, used | {vocabulary["seq"]}, [q for q, _, _ in COLUMNS])  # the columns' letters and their s too
    if standalone:
        return tex.standalone([("", body), ("Symbols", glossary)], title="Model costs")
    return body + "\n\n" + glossary


def compare_table(models: Sequence[Model], *, seq: int) -> tuple[str, set[sympy.Symbol]]:
    """The models' forms side by side: a column per model (its assumption set at the head), a row per quantity,
    each cell the formula to leading order (broken over lines as it needs), then the exact count and the
    formula's error there."""
    used: set[sympy.Symbol] = set()
    width = f"{0.96 / len(models) - 0.02:.2f}"
    column = f">{{\\raggedright\\arraybackslash}}p{{{width}\\linewidth}}"
    heads = [f"\\textbf{{{tex._text(m.name)}}} {_assumption_words(default_assumptions(m))}" for m in models]
    rows = []
    for q, _, _ in COLUMNS:
        letter = column_letter(q)
        cells = [printed_cell(m, q, seq) for m in models]
        used |= {s for c in cells for s in c.formula.free_symbols}
        rows.append(f"\\multicolumn{{{len(models)}}}{{@{{}}l}}{{{letter}}} \\\\*")
        texts = []
        for m, c in zip(models, cells):
            error = _error(m, c, q, seq)
            error = error if error == "n/a" else f"${error.removesuffix('%')}\\,\\%$"
            texts.append(f"${_breakable_latex(c, m)}$\\newline {_number(c.value, UNITS.get(q, ''))}, {error}")
        rows.append(" & ".join(texts) + " \\\\")
        rows.append("\\midrule" if q != COLUMNS[-1][0] else "\\bottomrule")
    table = "\n".join([
        f"\\begin{{longtable}}{{@{{}}{column * len(models)}@{{}}}}",
        "\\toprule", " & ".join(heads) + " \\\\", "\\midrule", "\\endhead",
        *rows,
        "\\end{longtable}",
    ])
    return table, used


def comparison(models: Sequence[Model], *, seq: int, standalone: bool = False) -> str:
    """``symform latex --compare A B``: the appendix's four forms of each model, side by side."""
    table, used = compare_table(models, seq=seq)
    note = (
        "Each cell: the formula to leading order in the widths, the vocabulary and the sequence, under the family's "
        f"default assumptions; below it the exact count and the formula's relative error at the model's own sizes "
        f"(per token: forward FLOPs and KV-cache bytes over a sequence of $s = {seq}$ tokens, batch 1{_source_words(models)})."
    )
    glossary = tex.glossary(models[0].vocabulary, used | {models[0].vocabulary["seq"]}, [q for q, _, _ in COLUMNS])
    body = note + "\n\n" + table
    if standalone:
        return tex.standalone([("", body), ("Symbols", glossary)], title=f"{', '.join(m.name for m in models[:-1])} and {models[-1].name} compared")
    return body + "\n\n" + glossary


def family_members(family: str) -> list[Model]:
    """The family's bundled presets; a family with none (llama4_text, gemma4_text), at its config's defaults
    (transformers' Llama4TextConfig defaults are Llama 4 Scout's text sizes); none where it has neither."""
    members = [Model.load(n) for n in presets() if family_for(preset_config(n)[0], n).name == family]
    if members:
        return members
    spec = all_families()[family].spec
    config = {"model_type": spec.model_types[0], **({spec.when_present: {}} if spec.when_present else {})}
    try:
        return [Model.from_config(config, name=f"{family} defaults")]
    except ConfigError:  # neither a preset nor defaults for its sizes
        return []


def family_row(family: str, assume: str, members: Sequence[Model], *, seq: int = 4096) -> str:
    """One row of the family table in docs/block-forms.md: the default sets, N to leading order (at the first
    member) and, at each member, the error of every column's leading form against its exact count."""
    if not members:
        return f"| `{family}` | `{assume or 'none (no simple form)'}` | (no bundled preset; its config fields have no defaults) | |"
    errors = []
    for m in members:
        cells = [cell(m, q, seq) for q, _, _ in COLUMNS]
        parts = [_error(m, c, q, seq) for c, (q, _, _) in zip(cells, COLUMNS)]
        errors.append(f"{m.name}: " + " / ".join(parts))
    formula = cell_latex(cell(members[0], "params", seq), members[0])
    return f"| `{family}` | `{assume or 'none (no simple form)'}` | ${formula}$ | {'<br>'.join(errors)} |"


def _error(model: Model, c: Cell, quantity: str, seq: int) -> str:
    values = {**model.values, **model.ratio_values, **per_token_workload(quantity, seq)}
    at = c.formula.xreplace({model.vocabulary[k]: sympy.nsimplify(v) for k, v in values.items()})
    if c.value == 0:
        return "+0.0%" if at == 0 else "n/a"
    return f"{float(at) / float(c.value) - 1:+.1%}"
