"""Numbers from users, checked once at the boundary, and results handed back in the kind asked for.

The communication and scaling formulas accept plain numbers or sympy expressions for
every argument: numbers give a number back, symbols give a formula back. These helpers
keep that rule in one place.
"""

from __future__ import annotations

import math
from fractions import Fraction

import sympy

from ..errors import EvaluationError

Value = int | float | Fraction | sympy.Expr


class CeilLog2(sympy.Function):
    """⌈log₂ x⌉: the rounds of a binomial-tree, recursive-doubling or dissemination algorithm over x ranks.

    Exact for whole numbers (no floating-point logarithm), printed as
    ``\\lceil \\log_2 x \\rceil`` in LaTeX and compiled to numpy.
    """

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, x):
        if x.is_Integer and x >= 1:
            return sympy.Integer(int(x - 1).bit_length())
        if x.is_Float and x >= 1:
            return sympy.Integer(math.ceil(math.log2(float(x))))
        return None

    def _latex(self, printer) -> str:
        argument = printer._print(self.args[0])
        return rf"\left\lceil \log_{{2}}{{{argument}}} \right\rceil"

    def _numpycode(self, printer) -> str:
        return f"numpy.ceil(numpy.log2({printer._print(self.args[0])}))"


def checked(
    name: str, value: object, *, minimum: int = 0, whole: bool = False, fix: str = ""
) -> sympy.Expr:
    """``value`` as a sympy number (or the expression itself), refused when it is no number or out of range.

    ``minimum`` is the least value allowed, ``whole`` asks for an integer; ``fix`` ends
    the message with what the user should do instead.
    """
    if isinstance(value, sympy.Basic) and value.free_symbols:
        return value  # a formula: checked when the user substitutes numbers
    number = _as_sympy_number(name, value)
    hint = f"; {fix}" if fix else ""
    if whole and not number.is_integer:
        raise EvaluationError(f"{name} must be a whole number, not {value!r}{hint}")
    if number < minimum:
        raise EvaluationError(
            f"{name} is {value!r} but must be at least {minimum}{hint}"
        )
    return number


def _as_sympy_number(name: str, value: object) -> sympy.Expr:
    if isinstance(value, bool) or not isinstance(
        value, (int, float, Fraction, sympy.Number)
    ):
        raise EvaluationError(
            f"{name} must be a number or a sympy expression, not {type(value).__name__} {value!r}"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EvaluationError(f"{name} must be a finite number, not {value!r}")
        return sympy.Integer(int(value)) if value.is_integer() else sympy.Float(value)
    if isinstance(value, Fraction):
        return sympy.Rational(value.numerator, value.denominator)
    if isinstance(value, int):
        return sympy.Integer(value)
    return value


def settled(expr: sympy.Expr) -> sympy.Expr | float:
    """A formula stays a formula; an exact number stays an exact sympy number; anything else becomes a float."""
    if expr.free_symbols:
        return expr
    if expr.is_Rational:
        return expr
    return float(expr)
