"""Formulas that fit the page: the typeset width of symform's LaTeX, estimated, and long sums broken into lines.

A derivation of DeepSeek-V3's parameters is a sum of some twenty products; on one line it runs a thousand
points past an article's margin. TeX breaks no display formula by itself, so the sums are broken here, where
their structure is known: between the blocks of a model (one layer kind per line) and, inside a block too wide
for a line, between its terms, the parentheses written ``\\bigl(``/``\\bigr)`` so that they may open on one
line and close on another.

The widths are estimated from the glyphs of Computer Modern at 11 pt (the document :func:`latex.standalone`
writes), from above: a line this module measures as fitting fits (``tests/test_latex_layout.py`` compiles the
documents and reads TeX's own overfull-box report).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

# \textwidth of the standalone document: article, 11 pt, letter paper, 2 cm margins (614.3 − 2·56.9 pt)
TEXT_WIDTH_PT = 500.0
EM = 10.95  # 11 pt type is 10.95 pt

# glyph widths in em, of Computer Modern math italic (letters), roman (digits, \mathrm) and symbols, rounded up
_ITALIC = {**{c: 0.58 for c in "abcdeghknopqsuvxyz"}, **{c: 0.47 for c in "fijlrt"}, "m": 0.88, "w": 0.73}
_ITALIC.update({c: 0.86 for c in "ABCDEFGHKNOPQRSUVXYZ"})
_ITALIC.update({"I": 0.45, "J": 0.58, "L": 0.69, "M": 0.98, "T": 0.72, "W": 1.05})
_ROMAN = {**{c: 0.50 for c in "0123456789abcdeghknopqsuvxyz"}, **{c: 0.30 for c in "fijlrt.,:;!'()[]/|"}, "m": 0.84, "w": 0.73}
_ROMAN.update({c: 0.75 for c in "ABCDEFGHKNOPQRSUVXYZ"})
_ROMAN.update({"I": 0.37, "J": 0.52, "L": 0.63, "M": 0.92, "T": 0.73, "W": 1.03, " ": 0.34, "-": 0.34, "%": 0.84})
_SCRIPT = 0.74  # a subscript's size: 8 pt against 10.95 pt

# spacing in em: a binary operator (+ − ·) takes 4/18 em each side, a relation (= ≈) 5/18
_BINARY = {"+": 0.78 + 8 / 18, "-": 0.78 + 8 / 18}
_COMMANDS = {
    "cdot": 0.28 + 8 / 18, "times": 0.78 + 8 / 18, "approx": 0.78 + 10 / 18, "le": 0.78 + 10 / 18, "ge": 0.78 + 10 / 18,
    ",": 3 / 18, ":": 4 / 18, ";": 5 / 18, " ": 0.34, "quad": 1.0, "qquad": 2.0, "!": -3 / 18,
    "left(": 0.39, "right)": 0.39, "left.": 0.0, "right.": 0.0, "bigl(": 0.46, "bigr)": 0.46, "Bigl(": 0.60, "Bigr)": 0.60,
    "lceil": 0.45, "rceil": 0.45, "lfloor": 0.45, "rfloor": 0.45, "left\\lceil": 0.5, "right\\rceil": 0.5,
    "left\\lfloor": 0.5, "right\\rfloor": 0.5, "max": 1.6, "min": 1.5, "log": 1.3, "infty": 1.0, "sqrt": 0.9,
    "%": 0.84, "_": 0.5, "&": 0.78, "#": 0.84, "alpha": 0.65, "beta": 0.6, "gamma": 0.55, "delta": 0.48, "lambda": 0.6,
    "mu": 0.61, "sigma": 0.6, "tau": 0.5, "rho": 0.55, "theta": 0.5, "phi": 0.6, "epsilon": 0.45, "eta": 0.5,
}
_FONT_COMMANDS = {"mathrm", "text", "mathit", "texttt", "mathbf", "operatorname", "textit", "textbf"}


def width_pt(text: str, size: float = EM) -> float:
    """The width TeX gives ``text`` (math in display style, at ``size`` points a em), from above."""
    return _Reader(text).width(math=True) * size * 1.03  # 3 % to spare: kerns and italic corrections


class _Reader:
    """A small reader of the LaTeX symform writes: groups, scripts, fractions, font commands, letters."""

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def width(self, *, math: bool, scale: float = 1.0, until: str = "") -> float:
        total = 0.0
        while self.at < len(self.text) and self.text[self.at] != until:
            total += self._item(math, scale)
        self.at += 1 if until else 0
        return total

    def _item(self, math: bool, scale: float) -> float:
        ch = self.text[self.at]
        self.at += 1
        if ch == "{":
            return self.width(math=math, scale=scale, until="}")
        if ch in "_^" and math:
            return self._argument(math, scale * _SCRIPT) + 0.05 * scale
        if ch == "\\":
            return self._command(math, scale)
        if ch.isspace():
            return 0.0 if math else _ROMAN[" "] * scale
        if ch == "$":
            return 0.0
        if math and ch in _BINARY:
            return (_BINARY[ch] if scale == 1.0 else 0.78) * scale
        if math and ch == "=":
            return (0.78 + 10 / 18) * scale
        if math and ch in ",;":
            return (0.28 + 3 / 18) * scale
        table = _ITALIC if math and ch.isalpha() else _ROMAN
        return table.get(ch, 0.6) * scale

    def _argument(self, math: bool, scale: float) -> float:
        if self.at < len(self.text) and self.text[self.at] == "{":
            self.at += 1
            return self.width(math=math, scale=scale, until="}")
        return self._item(math, scale)

    def _command(self, math: bool, scale: float) -> float:
        match = re.compile(r"(left|right|bigl|bigr|Bigl|Bigr)(\\[a-z]+|[()\[\].|])|[A-Za-z]+|.").match(self.text, self.at)
        name = match[0]
        self.at = match.end()
        if name in ("frac", "tfrac", "dfrac"):
            size = scale * (_SCRIPT if name == "tfrac" or scale < 1 else 1.0)
            return max(self._argument(math, size), self._argument(math, size)) + 0.3 * scale
        if name in _FONT_COMMANDS:
            return self._argument(name.startswith("math") and name != "mathrm" and name != "operatorname", scale)
        if name.startswith(("left", "right", "bigl", "bigr", "Bigl", "Bigr")) and name not in _COMMANDS:
            return 0.5 * scale
        return _COMMANDS.get(name, 0.8) * scale


# --- pieces of a formula ------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """``opening (inner₁ + inner₂ + …)``: a product with a parenthesised sum (``n \\cdot``, then the sum), which
    may be broken between its inner terms, its parentheses then ``\\bigl(``/``\\bigr)`` (``\\Bigl`` around fractions)."""

    opening: str
    inner: tuple["Term", ...]

    def whole(self) -> str:
        return f"{self.opening}\\left({joined(self.inner)}\\right)"

    def delimiters(self) -> tuple[str, str]:
        size = "Big" if "\\frac" in joined(self.inner) else "big"
        return f"\\{size}l(", f"\\{size}r)"


@dataclass(frozen=True)
class Term:
    """One summand: its sign and its LaTeX (a plain string, or a Group that may be broken)."""

    negative: bool
    body: "str | Group"

    def text(self) -> str:
        return self.body.whole() if isinstance(self.body, Group) else self.body


def joined(terms: Sequence[Term]) -> str:
    """The terms as one sum: the first with its minus sign where negative, the others joined by + and −."""
    out = ""
    for i, t in enumerate(terms):
        sign = ("- " if t.negative else "") if i == 0 else (" - " if t.negative else " + ")
        out += sign + t.text()
    return out


def _lead(term: Term, first: bool) -> str:
    return ("- " if term.negative else "") if first else ("- " if term.negative else "+ ")


def broken(terms: Sequence[Term], budget: float, indent: str = "\\quad ", *, continued: bool = False) -> list[str]:
    """The sum as rows no wider than ``budget`` points where its terms allow: as many terms a row as fit, a
    Group too wide for a row of its own broken between its inner terms; every row after the first starts with
    ``indent`` and its sign (an operator, so TeX spaces it as a binary one). ``continued``: the terms continue a
    sum begun on an earlier row, so the first row is a continuation too."""
    rows: list[str] = []
    current = ""
    continuation = width_pt(indent)
    for i, term in enumerate(terms):
        first = i == 0 and not continued
        piece = _lead(term, first) + term.text()
        room = budget - (continuation if rows or continued else 0.0)
        candidate = f"{current} {piece}" if current else piece
        if width_pt(_operand(candidate)) <= room:
            current = candidate
            continue
        if current:
            rows.append(current)
            current, room = "", budget - continuation
        if width_pt(_operand(piece)) <= room or not isinstance(term.body, Group):
            current = piece
            continue
        inner_rows = _broken_group(term, room, "\\qquad ", first=first)
        rows += inner_rows[:-1]
        current = inner_rows[-1]
    if current:
        rows.append(current)
    return [row if j == 0 and not continued else f"{indent}{row}" for j, row in enumerate(rows)]


def broken_runs(runs: Sequence[Sequence[Term]], budget: float, indent: str = "\\quad ") -> list[str]:
    """A sum of runs of terms (a model's blocks), each run starting a row of its own, broken as :func:`broken`
    breaks one: one block, or one group of terms, per line."""
    rows: list[str] = []
    for k, run in enumerate(r for r in runs if r):
        rows += broken(run, budget, indent, continued=k > 0)
    return rows


def _broken_group(term: Term, room: float, indent: str, *, first: bool) -> list[str]:
    """A Group's rows: its opening and inner terms, broken as :func:`broken` breaks a sum, then the closing
    parenthesis. The inner rows are indented from the row's start, so a reader sees them inside the parentheses."""
    group = term.body
    assert isinstance(group, Group)
    opening, closing = group.delimiters()
    head = _lead(term, first) + group.opening + opening
    inner = broken(group.inner, room - max(width_pt(_operand(head)), width_pt(indent)) - width_pt(closing), indent="")
    rows = [head + inner[0]] + [f"{indent}{r}" for r in inner[1:]]
    rows[-1] += closing
    return rows


def _operand(text: str) -> str:
    """A row's text as measured: a leading + or − is a binary operator in print (the & before it leaves it one)."""
    return "{}" + text if text[:1] in "+-" else text


def breakable(terms: Sequence[Term]) -> str:
    """The sum as inline math TeX may break at its operators, inside parentheses too (``\\bigl(``/``\\bigr)``,
    which TeX does not pair as it pairs ``\\left``/``\\right``): for a table's paragraph column."""
    out = ""
    for i, t in enumerate(terms):
        out += (("- " if t.negative else "") if i == 0 else (" - " if t.negative else " + ")) + _breakable_body(t.body)
    return out


def _breakable_body(body: "str | Group") -> str:
    if not isinstance(body, Group):
        return body
    opening, closing = body.delimiters()
    return f"{body.opening}{opening}{breakable(body.inner)}{closing}"


def rows_width(rows: Sequence[str]) -> float:
    return max((width_pt(_operand(r)) for r in rows), default=0.0)
