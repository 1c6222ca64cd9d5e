"""Rich display in Jupyter: breakdown tables and memory reports as HTML, expressions as LaTeX.

``Model``, ``Formula``, ``Derivation`` and ``MemoryReport`` render themselves; a breakdown
is a plain dict, so :func:`breakdown` wraps one for display without changing
what ``Model.breakdown`` and ``Model.evaluate_breakdown`` return::

    from symform.interface.papers.notebook import breakdown
    breakdown(model, "forward_flops", depth=2, batch=8, seq=4096)   # a table in a notebook
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from ...engine.graph import html_table
from ...engine.algebra.evaluate import Number
from ...engine.algebra.formula import Formula
from ...engine.graph.model import Model


@dataclass(frozen=True)
class Breakdown(Mapping[str, Formula]):
    """A quantity per component: each path's formula and, where the sizes and workload are known, its value.

    Reads as a ``{path: Formula}`` mapping; ``numbers`` holds the values.
    """

    model: str
    quantity: str
    formulas: dict[str, Formula]
    numbers: dict[str, Number]  # not `values`: that is the mapping's own method
    workload: dict[str, object]

    def __getitem__(self, path: str) -> Formula:
        return self.formulas[path]

    def __iter__(self):
        return iter(self.formulas)

    def __len__(self) -> int:
        return len(self.formulas)

    def __repr__(self) -> str:  # outside notebooks: the numbers, or the formulas where a value is missing
        shown = {path: self.numbers.get(path, str(f)) for path, f in self.formulas.items()}
        return f"Breakdown({self.model!r}, {self.quantity!r}, {shown!r})"

    @property
    def total(self) -> Number | None:
        return sum(self.numbers.values()) if len(self.numbers) == len(self.formulas) else None

    def _repr_html_(self) -> str:
        total = self.total
        rows = [_row(path, self.numbers.get(path), total, f.latex()) for path, f in self._nonzero()]
        if total is not None:
            rows.append(_row("total", total, total, "", bold=True))
        workload = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in self.workload.items())
        head = f"<b>{html.escape(self.model)}</b>: {html.escape(self.quantity.replace('_', ' '))}" + (f" ({html.escape(workload)})" if workload else "")
        return html_table.table(head, ("component", "value", "share", "formula"), rows)

    def _nonzero(self) -> list[tuple[str, Formula]]:
        """Rows worth showing: element-wise ops and parameter-free parts are zero under the default conventions."""
        return [(path, f) for path, f in self.formulas.items() if f.expr != 0]

    def _repr_latex_(self) -> str:
        lines = [f"\\text{{{_latex_text(path)}}} &= {f.latex()}" for path, f in self._nonzero()]
        return "$$\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}$$"


def breakdown(model: Model, quantity: str, *, depth: int | None = 1, **workload: object) -> Breakdown:
    """``model.breakdown`` for display: formulas per path, with numbers where every symbol has a value."""
    formulas = model.breakdown(quantity, depth=depth)
    known = model.bindings(**workload)
    values = {}
    for path, f in formulas.items():
        if set(f.free) <= set(known):
            values[path] = f.evaluate(**{k: known[k] for k in f.free})
    return Breakdown(model.name, quantity, formulas, values, dict(workload))


def _row(path: str, value: Number | None, total: Number | None, latex: str, *, bold: bool = False) -> str:
    number = "" if value is None else html_table.count(value)
    share = f"{float(Fraction(value) / Fraction(total)):.2%}" if value is not None and total else ""
    return html_table.row([html.escape(path), number, share, html_table.formula_cell(latex)], right=(1, 2), bold=bold)


def _latex_text(text: str) -> str:
    return text.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&").replace("%", "\\%").replace("#", "\\#")
