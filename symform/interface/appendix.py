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

from ..engine.errors import ConfigError
from ..engine.evaluate import Number
from ..engine.families import all_families, family_for, preset_config, presets
from ..engine.model import Model
from ..engine.structure import Block, block_large, default_assumptions, leading_blocks, structure, without_flags
from . import latex as tex

COLUMNS = (
    ("params", "$N$", "parameters"),
    ("active_params", "$N_{\\mathrm{active}}$", "active parameters per token"),
    ("forward_flops", "$C_{\\mathrm{fwd}}/s$", "forward FLOPs per token, averaged over a sequence of s tokens"),
    ("kv_cache", "$M_{\\mathrm{KV}}$", "KV-cache (or state) bytes per cached token"),
)


@dataclass(frozen=True)
class Cell:
    blocks: tuple[Block, ...]  # per token, leading order
    value: Number  # exact, per token

    @property
    def formula(self) -> sympy.Expr:
        return sympy.Add(*(b.total for b in self.blocks))


def per_token_workload(quantity: str, seq: int) -> dict[str, int]:
    """What each column is evaluated at: forward FLOPs over one sequence of ``seq`` tokens, the cache of one token."""
    return {"forward_flops": {"batch": 1, "seq": seq}, "kv_cache": {"batch": 1, "seq": 1}}.get(quantity, {})


def cell(model: Model, quantity: str, seq: int) -> Cell:
    """The column's value for one token, exact, and its block formula per token to leading order."""
    v = model.vocabulary
    workload = per_token_workload(quantity, seq)
    value = model.evaluate(quantity, **workload)
    per_token = {"forward_flops": {v["batch"]: 1}, "kv_cache": {v["batch"]: 1, v["seq"]: 1, v["past"]: 0}}.get(quantity, {})
    divide = v["seq"] if quantity == "forward_flops" else 1
    assume = default_assumptions(model)
    exact = structure(model, quantity, assume=assume).blocks
    blocks = [replace(b, expr=without_flags(sympy.expand(b.expr.xreplace(per_token) / divide), model.values), parts=()) for b in exact]
    large = [s for s in block_large(model) if quantity == "forward_flops" or s != v["seq"]]
    return Cell(tuple(leading_blocks(blocks, large, model.leading_rewrites(assume=assume))), value / seq if quantity == "forward_flops" else value)


def cell_latex(c: Cell, model: Model) -> str:
    return " + ".join(tex.block_latex(b, model.vocabulary) for b in c.blocks)


def appendix_table(models: Sequence[Model], *, seq: int) -> tuple[str, set[sympy.Symbol]]:
    """The booktabs table (formula over number in each cell) and the symbols its formulas use."""
    used: set[sympy.Symbol] = set()
    rows = []
    for m in models:
        cells = [cell(m, q, seq) for q, _, _ in COLUMNS]
        used |= {s for c in cells for s in c.formula.free_symbols}
        unit = {"forward_flops": "FLOP", "kv_cache": "B"}
        rows.append([tex._text(m.name), *(f"${cell_latex(c, m)}$" for c in cells)])
        rows.append(["", *(_number(c.value, unit.get(q, "")) for c, (q, _, _) in zip(cells, COLUMNS))])
    header = ["model", *(h for _, h, _ in COLUMNS)]
    table = tex._tabular(header, rows, None, "l" + "l" * len(COLUMNS))
    return table, used


def _number(value: Number, unit: str) -> str:
    exact = f"{int(value):,}".replace(",", "\\,") if float(value).is_integer() else f"{float(value):,.1f}".replace(",", "\\,")
    return f"{exact}{(' ' + unit) if unit else ''}"


def appendix(models: Sequence[Model], *, seq: int, standalone: bool = False) -> str:
    table, used = appendix_table(models, seq=seq)
    vocabulary = models[0].vocabulary
    note = (
        f"Each cell: the formula to leading order in the widths, the vocabulary and the sequence, under each family's "
        f"default assumptions, and below it the exact count (forward FLOPs per token over a sequence of {seq} tokens, "
        f"batch 1; KV bytes per cached token at the default storage sizes)."
    )
    body = "\\begin{table}[t]\n\\centering\n\\small\n\\resizebox{\\linewidth}{!}{%\n" + table + "}\n\\caption{" + tex._text(note) + "}\n\\end{table}"
    glossary = tex.glossary(vocabulary, used)
    if standalone:
        return tex.standalone([("", body), ("Symbols", glossary)], title="Model costs")
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
