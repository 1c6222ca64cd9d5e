"""Plain text and numbers in LaTeX: numbers as people quote them, text made safe for pdflatex, the tables'
environments and the standalone document around them."""

from __future__ import annotations

import unicodedata
from typing import Sequence

from ...engine.algebra.evaluate import Number


PF_DAY = 10**15 * 86400  # FLOPs in one petaFLOP/s-day


def human(value: Number, unit: str = "") -> str:
    """A number as people quote it: 1.2B parameters, 3.4 PF-days, 80 GB (SI prefixes, 3 figures)."""
    x = float(value)
    if unit == "PF-days":
        return f"{_figures(x / PF_DAY)} PF-days"
    prefixes = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")) if not unit else ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    for scale, prefix in prefixes:
        if abs(x) >= scale:
            return f"{_figures(x / scale)}{' ' if unit else ''}{prefix}{unit}"
    return f"{_figures(x)}{' ' + unit if unit else ''}"


def _figures(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _text(s: str) -> str:
    """Plain text made safe for LaTeX (pdflatex's default encoding)."""
    return "".join(_TEXT_ESCAPES.get(ch) or _typesettable(ch) for ch in s)


def _typesettable(ch: str) -> str:
    """A character pdflatex's utf8 input and T1 fonts typeset (ASCII and Latin-1), else its compatibility form where
    that is such text (₀ → 0), else its code point in brackets: a user's description never stops the document."""
    if 32 <= ord(ch) < 127 or ch in "\n\t" or 0xA0 <= ord(ch) < 256:
        return ch
    plain = unicodedata.normalize("NFKD", ch)
    if plain and all(32 <= ord(c) < 127 for c in plain):
        return "".join(_TEXT_ESCAPES.get(c, c) for c in plain)
    return f"[U+{ord(ch):04X}]"


_TEXT_ESCAPES = {
    "\\": "\\textbackslash{}", "_": "\\_", "%": "\\%", "&": "\\&", "#": "\\#", "$": "\\$", "{": "\\{", "}": "\\}",
    "^": "\\^{}", "~": "\\~{}", "·": "$\\cdot$", "×": "$\\times$", "→": "$\\to$", "≈": "$\\approx$",
    "√": "$\\surd$", "ᵀ": "$^{T}$", "⊙": "$\\odot$", "§": "\\S{}", "≤": "$\\le$", "≥": "$\\ge$", "½": "$\\frac12$",
    "⌊": "$\\lfloor$", "⌋": "$\\rfloor$", "⌈": "$\\lceil$", "⌉": "$\\rceil$", "−": "$-$", "∞": "$\\infty$",
}


def _tabular(header: Sequence[str], rows: Sequence[Sequence[str]], total: Sequence[str] | None, align: str) -> str:
    body = ["\\begin{tabular}{" + align + "}", "\\toprule", " & ".join(header) + " \\\\", "\\midrule"]
    body += [" & ".join(r) + " \\\\" for r in rows]
    if total is not None:
        body += ["\\midrule", " & ".join(total) + " \\\\"]
    body += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(body)


def _longtable(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """A booktabs ``longtable``: a glossary of a hybrid model's forty symbols continues on the next page, where a
    ``tabular`` would run off the bottom of this one; its header repeats on each page."""
    head = [" & ".join(header) + " \\\\", "\\midrule"]
    body = ["\\begin{longtable}{" + align + "}", "\\toprule", *head, "\\endfirsthead", "\\toprule", *head, "\\endhead"]
    body += [" & ".join(r) + " \\\\" for r in rows]
    return "\n".join(body + ["\\bottomrule", "\\end{longtable}"])


PREAMBLE = r"""\documentclass[11pt]{article}
\usepackage[utf8]{inputenc}
\usepackage[T1]{fontenc}
\IfFileExists{lmodern.sty}{\usepackage{lmodern}}{}% scalable fonts (T1 Computer Modern is bitmaps otherwise)
\usepackage{amsmath,amssymb}
\allowdisplaybreaks % a long derivation may continue on the next page
\usepackage{array,longtable}
\usepackage[margin=2cm]{geometry}
\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{% a minimal TeX without booktabs: plain rules
  \newcommand{\toprule}{\hline}\newcommand{\midrule}{\hline}\newcommand{\bottomrule}{\hline}}
"""


def standalone(sections: Sequence[tuple[str, str]], *, title: str = "symform") -> str:
    """A complete document from (heading, body) pairs; bodies are LaTeX (tables, or display math given as aligned
    blocks, which become ``align*`` so that a long one may continue on the next page)."""
    parts = [PREAMBLE, "\\title{" + _text(title) + "}", "\\date{}", "\\begin{document}", "\\maketitle"]
    for heading, body in sections:
        if heading:
            parts.append("\\section*{" + _text(heading) + "}")
        if body.lstrip().startswith("\\begin{aligned}"):
            body = body.replace("\\begin{aligned}", "\\begin{align*}").replace("\\end{aligned}", "\\end{align*}")
        elif body.lstrip().startswith("\\begin{tabular}"):
            body = "\\begin{center}\n" + body + "\n\\end{center}"
        parts.append(body)
    parts.append("\\end{document}")
    return "\n".join(parts) + "\n"


def display(formula: str) -> str:
    """A formula as display math in a document."""
    return "\\[\n" + formula + "\n\\]"
