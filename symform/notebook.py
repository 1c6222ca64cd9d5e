"""Rich display in Jupyter: breakdown tables and memory reports as HTML, expressions as LaTeX.

``Formula``, ``Derivation`` and ``MemoryReport`` render themselves; a breakdown
is a plain dict, so :func:`breakdown` wraps one for display without changing
what ``Model.breakdown`` and ``Model.evaluate_breakdown`` return::

    from symform.notebook import breakdown
    breakdown(model, "forward_flops", depth=2, batch=8, seq=4096)   # a table in a notebook
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from .evaluate import Number
from .formula import Formula
from .model import Model


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
        return f"{head}<table><tr><th>component</th><th>value</th><th>share</th><th>formula</th></tr>{''.join(rows)}</table>"

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
    number = "" if value is None else _number(value)
    share = f"{float(Fraction(value) / Fraction(total)):.2%}" if value is not None and total else ""
    formula = f"${html.escape(latex)}$" if latex else ""  # MathJax typesets $…$ inside HTML tables
    return _tr([html.escape(path), number, share, formula], right=(1, 2), bold=bold)


def _tr(cells: list[str], *, right: tuple[int, ...], bold: bool = False) -> str:
    """One table row; numbers right-aligned so that digits line up."""
    out = []
    for i, cell in enumerate(cells):
        style = " style='text-align:right'" if i in right else ""
        out.append(f"<td{style}>{f'<b>{cell}</b>' if bold else cell}</td>")
    return "<tr>" + "".join(out) + "</tr>"


def _number(value: Number) -> str:
    if isinstance(value, int) or (isinstance(value, Fraction) and value.denominator == 1):
        return f"{int(value):,}"
    return f"{float(value):,.6g}"


def _latex_text(text: str) -> str:
    return text.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&").replace("%", "\\%").replace("#", "\\#")


def memory_html(report) -> str:
    """A MemoryReport as a table: each category in bytes, GB and GiB, its share, and its expression."""
    total = report.total
    rows = []
    for name, value in [*report.values.items(), ("total", total)]:
        formula = report.expressions[name].latex() if name in report.expressions else report.expression().latex()
        share = f"{float(Fraction(value) / Fraction(total)):.1%}" if total else ""
        gb = float(value) / 1e9
        gib = float(value) / 2**30
        cells = [html.escape(name.replace("_", " ")), _number(value), f"{gb:,.3f}", f"{gib:,.3f}", share, f"${html.escape(formula)}$"]
        rows.append(_tr(cells, right=(1, 2, 3, 4), bold=name == "total"))
    workload = ", ".join(f"{k} {v:,}" for k, v in report.assumptions.get("workload", {}).items())
    phase = "training" if report.phase == "train" else "inference"
    head = f"<b>{html.escape(report.model)}</b>: {phase} memory per device ({html.escape(workload)})"
    columns = "".join(f"<th>{c}</th>" for c in ("category", "bytes", "GB", "GiB", "share", "expression"))
    return f"{head}<table><tr>{columns}</tr>{''.join(rows)}</table>"
