"""Two ways to turn an expression into numbers: exact, and compiled for arrays."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import sympy

from .errors import EvaluationError
from .vocabulary import Vocabulary

Number = int | Fraction


def exact_value(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> Number:
    """Substitute exact numbers; a Python int (or Fraction) to the last digit, or a clear error."""
    result = sympy.sympify(expr).xreplace(dict(values))
    if result.free_symbols:
        missing = ", ".join(sorted(s.name for s in result.free_symbols))
        raise EvaluationError(f"cannot evaluate exactly: no value for {missing}; give one (e.g. --set {sorted(s.name for s in result.free_symbols)[0]}=...)")
    result = sympy.nsimplify(result) if result.has(sympy.Float) else result
    if not result.is_Rational:
        result = sympy.simplify(result)
    if result.is_Integer:
        return int(result)
    if result.is_Rational:
        return Fraction(int(result.p), int(result.q))
    raise EvaluationError(f"value {result} is not a rational number; evaluate it with compiled() instead")


def check_value(name: str, value: object, vocabulary: Vocabulary) -> sympy.Rational:
    """Validate a user-supplied value against the symbol's domain."""
    spec = vocabulary.entry(name).spec
    if isinstance(value, bool) or not isinstance(value, (int, Fraction, sympy.Rational)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str):
            raise EvaluationError(f"{name} is {value!r}; give a number")
        elif isinstance(value, float) and spec.domain == "positive_rational":
            value = Fraction(value).limit_denominator(10**6)
        else:
            raise EvaluationError(f"{name} must be {'an integer' if 'integer' in spec.domain else 'a number'}, got {value!r}")
    number = sympy.Rational(value)
    if "integer" in spec.domain and not number.is_Integer:
        raise EvaluationError(f"{name} must be an integer, got {value}")
    if spec.domain == "nonnegative_integer" and number < 0:
        raise EvaluationError(f"{name} must be 0 or more, got {value}")
    if spec.domain != "nonnegative_integer" and number <= 0:
        raise EvaluationError(f"{name} must be positive, got {value}; sizes and counts start at 1")
    return number


@lru_cache(maxsize=512)
def _compiled(expr: sympy.Expr, names: tuple[str, ...]) -> Callable:
    symbols = {s.name: s for s in expr.free_symbols}
    args = [symbols.get(n, sympy.Symbol(n)) for n in names]
    return sympy.lambdify(args, expr, modules="numpy", cse=True)


def compile_expression(expr: sympy.Expr, names: Sequence[str]) -> Callable:
    """A numpy function of ``names`` (in that order), float64, vectorised; cached per expression."""
    names = tuple(names)
    free = {s.name for s in expr.free_symbols}
    missing = sorted(free - set(names))
    if missing:
        raise EvaluationError(f"compiled function needs every free symbol as an argument; missing {', '.join(missing)}")
    function = _compiled(expr, names)

    def evaluate(*arrays):
        import numpy as np

        inputs = [np.asarray(a, dtype=np.float64) for a in arrays]
        result = np.asarray(function(*inputs), dtype=np.float64)
        return np.broadcast_to(result, np.broadcast_shapes(result.shape, *(a.shape for a in inputs)))

    return evaluate
