"""HTML tables for notebook display: each object that renders itself in Jupyter builds its rows from these."""

from __future__ import annotations

import html
from fractions import Fraction

from ..algebra.evaluate import Number


def table(head: str, columns: tuple[str, ...], rows: list[str]) -> str:
    """``head`` is already HTML; ``columns`` are plain text."""
    header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    return f"{head}<table><tr>{header}</tr>{''.join(rows)}</table>"


def row(cells: list[str], *, right: tuple[int, ...], bold: bool = False) -> str:
    """One table row of HTML cells; numbers right-aligned so that digits line up."""
    out = []
    for i, cell in enumerate(cells):
        style = " style='text-align:right'" if i in right else ""
        out.append(f"<td{style}>{f'<b>{cell}</b>' if bold else cell}</td>")
    return "<tr>" + "".join(out) + "</tr>"


def count(value: Number) -> str:
    """Whole numbers with thousands separators, others to six significant digits."""
    if isinstance(value, int) or (isinstance(value, Fraction) and value.denominator == 1):
        return f"{int(value):,}"
    return f"{float(value):,.6g}"


def formula_cell(latex: str) -> str:
    """MathJax typesets $…$ inside HTML tables."""
    return f"${html.escape(latex)}$" if latex else ""
