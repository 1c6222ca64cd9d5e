"""What fits: the largest batch, sequence or cached context whose memory stays within a budget, by bisection over exact values or by solving the expression."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sympy

from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import Number, exact_value
from ...engine.algebra.formula import Formula


@dataclass(frozen=True)
class Fit:
    """The largest value of one workload variable whose memory stays within a budget."""

    variable: str
    largest: int  # 0 when not even ``step`` fits
    budget: Number
    closed_form: Formula | None  # variable ≤ this, when sympy can solve total(variable) = budget
    step: int = 1  # the answer is a multiple of it (a sequence the ranks sharing it must split evenly)

    def _repr_latex_(self) -> str:
        name = r"\mathrm{" + self.variable.replace("_", r"\_") + "}"
        largest = rf"{name}_{{\max}} = {self.largest}"
        if self.closed_form is None:
            return f"${largest}$"
        return rf"${largest},\quad {name} \le {self.closed_form.latex()}$"


def largest_fitting(total: Callable[[int], Number], budget: Number, *, limit: int = 1 << 40) -> int:
    """The largest n ≥ 1 with total(n) ≤ budget (0 if none), for a total that grows with n: doubling, then bisection."""
    if total(1) > budget:
        return 0
    low, high = 1, 2
    while total(high) <= budget:
        low, high = high, high * 2
        if high > limit:
            raise EvaluationError(f"more than {limit:,} fit in the budget; the memory does not grow with this variable")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if total(middle) <= budget else (low, middle)
    return low


def solve_fit(expr: sympy.Expr, variable: str, budget: Number, values: Mapping[str, object], vocabulary, *, step: int = 1) -> Fit:
    """Largest multiple of ``step`` for ``variable`` with expr ≤ budget, every other symbol bound from ``values``."""
    symbol = vocabulary[variable]
    others = {s: sympy.Rational(values[s.name]) for s in expr.free_symbols if s != symbol and s.name in values}
    bound = sympy.expand(expr.xreplace(others))
    missing = sorted(s.name for s in bound.free_symbols if s != symbol)
    if missing:
        raise EvaluationError(f"cannot solve for {variable}: no value for {', '.join(missing)}")
    largest = step * largest_fitting(lambda n: exact_value(bound, {symbol: sympy.Integer(n * step)}), budget)
    return Fit(variable, largest, budget, _closed_form(bound, symbol, budget, vocabulary), step)


def _closed_form(expr: sympy.Expr, symbol: sympy.Symbol, budget: Number, vocabulary) -> Formula | None:
    """The root of expr = budget when expr is a polynomial of degree 1 or 2 in the variable."""
    if expr.has(sympy.Min, sympy.Max, sympy.ceiling):
        return None
    poly = sympy.Poly(expr, symbol)
    if poly.degree() not in (1, 2):
        return None
    real = sympy.Symbol(symbol.name, positive=True)  # the root is rarely a whole number: solve over the reals
    roots = [r for r in sympy.solve(sympy.Eq(expr.xreplace({symbol: real}), sympy.Rational(budget)), real) if r.is_real]
    return Formula(roots[0], vocabulary) if len(roots) == 1 else None
