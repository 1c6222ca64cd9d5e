"""Formula: an expression over the vocabulary that evaluates, compiles and prints itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping

import sympy

from .evaluate import Number, checked_values, compile_expression, formula_evaluator
from ..language.vocabulary import Vocabulary, default_vocabulary


def to_latex(expr: sympy.Basic, vocabulary: Vocabulary | None = None) -> str:
    vocabulary = vocabulary or default_vocabulary()
    names = {s: vocabulary.by_symbol(s).latex for s in expr.free_symbols if s.name in vocabulary}
    return sympy.latex(expr, symbol_names=names)


@dataclass(frozen=True)
class Formula:
    """A sympy expression over symform's vocabulary.

    ``expr`` is the sympy object; ``str()`` gives sympy syntax over the
    vocabulary's names, ``latex()`` the conventional letters.
    """

    expr: sympy.Expr
    vocabulary: Vocabulary = field(repr=False)  # the whole symbol table: thousands of characters in a repr

    def __str__(self) -> str:
        return str(self.expr)

    def latex(self) -> str:
        return to_latex(self.expr, self.vocabulary)

    def _repr_latex_(self) -> str:
        return f"${self.latex()}$"

    @property
    def free(self) -> list[str]:
        """Names of the symbols still free, sorted."""
        return sorted(s.name for s in self.expr.free_symbols)

    def subs(self, **values: object) -> "Formula":
        return Formula(self.expr.xreplace(self._checked(values)), self.vocabulary)

    def evaluate(self, **values: object) -> Number:
        """Exact value (int, or Fraction when not whole); every free symbol needs a value."""
        return self._evaluator(values)

    @cached_property
    def _evaluator(self) -> Callable[[Mapping[str, object]], Number]:
        """The exact evaluation of this formula, generated once: kept with the formula, which never changes."""
        return formula_evaluator(self.expr, self.vocabulary)

    def compile(self, *names: str) -> Callable:
        """A vectorised float64 numpy function of ``names`` (all free symbols, in this order)."""
        return compile_expression(self.expr, names or tuple(self.free))

    def _checked(self, values: Mapping[str, object]) -> dict[sympy.Symbol, sympy.Rational]:
        return checked_values(values, self.vocabulary)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Formula):
            other = other.expr
        if isinstance(other, (sympy.Basic, int)):
            return sympy.expand(self.expr - other) == 0
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.expr)
