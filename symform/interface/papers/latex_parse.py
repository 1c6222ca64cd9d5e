"""Reading symform's LaTeX back into sympy, for checking: every printed formula parses back to the expression it
prints (``sympy.parsing.latex.parse_latex`` with symform's letters mapped back to its symbols)."""

from __future__ import annotations

import re
from functools import cache
from typing import Iterable

import sympy

from ...engine.errors import EvaluationError
from ...engine.language.vocabulary import Vocabulary, default_vocabulary
from .latex import _D_BEFORE_COMMAND, _thin_d, symbol_latex


def parse_back(text: str, symbols: Iterable[sympy.Symbol], vocabulary: Vocabulary | None = None) -> sympy.Expr:
    """Parse LaTeX printed by :func:`latex` back to symform's symbols (needs antlr4-python3-runtime 4.11)."""
    vocabulary = vocabulary or default_vocabulary()
    symbols = list(symbols)
    letters: dict[str, sympy.Symbol] = {}
    for symbol in symbols:
        parsed = _parsed_letter(symbol_latex(symbol, vocabulary))
        if parsed is None or letters.get(parsed, symbol) != symbol:
            raise EvaluationError(f"the letter of {symbol.name!r} does not read back as one symbol of its own")
        letters[parsed] = symbol
    read = _Reader(symbols, vocabulary)
    expr = read.expression(read.without_cases(text))
    return expr.xreplace({sympy.Symbol(name): s for name, s in letters.items()})


class _Reader:
    """sympy's LaTeX parser, and what it cannot read: conditionals (``\\begin{cases}``), their conditions and
    named predicates (``\\mathrm{fp32\\_copy}``), each cases block read on its own and put back by a stand-in letter."""

    def __init__(self, symbols: Iterable[sympy.Symbol], vocabulary: Vocabulary):
        self.names = {**{n: vocabulary[n] for n in vocabulary.names()}, **{s.name: s for s in symbols}}
        self.blocks: dict[sympy.Symbol, sympy.Expr] = {}

    def expression(self, text: str) -> sympy.Expr:
        from sympy.parsing.latex import parse_latex

        expr = parse_latex(_lexable(text))
        for name, function in _FUNCTIONS.items():  # bottom-up, so nested \max(…\min(…)) both convert
            expr = expr.replace(sympy.Function(name), function)
        return expr.xreplace(self.blocks) if self.blocks else expr

    def without_cases(self, text: str) -> str:
        """``text`` with each cases block (innermost first) read and replaced by a stand-in letter."""
        while (end := text.find(_END_CASES)) >= 0:
            start = text.rfind(_BEGIN_CASES, 0, end)
            rows = text[start + len(_BEGIN_CASES):end].split(r"\\")
            stand_in = sympy.Symbol(f"Xi_{{{len(self.blocks)}}}")
            self.blocks[stand_in] = sympy.Piecewise(*(self.row(r) for r in rows))
            text = f"{text[:start]}\\Xi_{{{len(self.blocks) - 1}}}{text[end + len(_END_CASES):]}"
        return text

    def row(self, text: str) -> tuple[sympy.Expr, sympy.Basic]:
        value, _, condition = text.partition("&")
        condition = condition.strip()
        if condition == r"\text{otherwise}":
            return self.expression(value), sympy.true
        return self.expression(value), self.condition(condition.removeprefix(r"\text{for}\:"))

    def condition(self, text: str) -> sympy.Basic:
        text = _unwrapped(text.strip())
        for joiner, join in ((r"\vee", sympy.Or), (r"\wedge", sympy.And)):
            parts = _split_top(text, joiner)
            if len(parts) > 1:
                return join(*(self.condition(p) for p in parts))
        if text.startswith(r"\neg"):
            return sympy.Not(self.condition(text[len(r"\neg"):]))
        named = _NAMED.fullmatch(text)
        if named:
            return self.predicate(named[1].replace(r"\_", "_"))
        return self.expression(text)

    def predicate(self, name: str) -> sympy.Basic:
        from ...engine.language.conditions import predicates
        from ...engine.language.safe_expr import parse

        if name not in predicates():
            raise EvaluationError(f"{name!r} is no named predicate of formulas/predicates.toml")
        return parse(f"1 if {name} else 0", {**self.names, **predicates()}).args[0].cond


_BEGIN_CASES, _END_CASES = r"\begin{cases}", r"\end{cases}"
_NAMED = re.compile(r"\\mathrm\{([A-Za-z0-9\\_]+)\}")


def _depths(text: str) -> list[int]:
    """The bracket depth before each character (\\left … \\right and braces)."""
    depths, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(r"\left", i) or text[i] == "{":
            depth += 1
        elif text.startswith(r"\right", i) or text[i] == "}":
            depth -= 1
        depths.append(depth)
        i += 1
    return depths


def _split_top(text: str, joiner: str) -> list[str]:
    depths = _depths(text)
    parts, last, i = [], 0, 0
    while (i := text.find(joiner, i)) >= 0:
        if depths[i] == 0 and not text[i + len(joiner):i + len(joiner) + 1].isalpha():
            parts.append(text[last:i])
            last = i + len(joiner)
        i += len(joiner)
    return parts + [text[last:]]


def _unwrapped(text: str) -> str:
    """``text`` without \\left( … \\right) around the whole of it."""
    while text.startswith(r"\left(") and text.endswith(r"\right)"):
        inner = text[len(r"\left("):-len(r"\right)")]
        depths = _depths(inner)
        if depths and min(depths) < 0:
            break
        text = inner.strip()
    return text


@cache
def _parsed_letter(letter: str) -> str | None:
    """The name sympy's parser gives a letter (d_{ff} reads as the symbol 'd_{f*f}'), None if not one symbol."""
    from sympy.parsing.latex import parse_latex

    parsed = parse_latex(_lexable(_thin_d(letter)))
    return parsed.name if isinstance(parsed, sympy.Symbol) else None


# the parser reads \max and \min as undefined functions of those names
_FUNCTIONS = {"max": sympy.Max, "min": sympy.Min}


def _lexable(text: str) -> str:
    """The parser lexes d followed by a letter as a differential even inside \\mathit{…} (\\mathit{width}
    fails), so such a d is read as D there; symbol_latex never prints D inside \\mathit. A d before a command
    (``2 d\\right)``) gets the thin space the parser needs to see a symbol."""
    text = _D_BEFORE_COMMAND.sub(lambda m: "d\\, ", text)
    return _MATHIT.sub(lambda m: "\\mathit{" + re.sub("d(?=[A-Za-z])", "D", m[1]) + "}", text)


_MATHIT = re.compile(r"\\mathit\{([A-Za-z]+)\}")
