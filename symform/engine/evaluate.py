"""Two ways to turn an expression into numbers: exact, and compiled for arrays."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import sympy

from .budget import check_number, check_result, quoted
from .errors import EvaluationError
from .vocabulary import Vocabulary

Number = int | Fraction


def exact_value(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> Number:
    """Substitute exact numbers; a Python int (or Fraction) to the last digit, or a clear error."""
    try:
        result = sympy.sympify(expr).xreplace(dict(values))
    except ZeroDivisionError:  # a modulo or floor division by a size that is zero here
        raise EvaluationError(f"division by zero in {quoted(str(expr))} at these sizes; give sizes that keep every divisor positive") from None
    if result.free_symbols:
        missing = ", ".join(sorted(s.name for s in result.free_symbols))
        raise EvaluationError(f"cannot evaluate exactly: no value for {missing}; give one (e.g. --set {sorted(s.name for s in result.free_symbols)[0]}=...)")
    result = sympy.nsimplify(result) if result.has(sympy.Float) else result
    if result.is_Integer:
        value: Number = int(result)
    elif result.is_Rational:
        value = Fraction(int(result.p), int(result.q))
    else:
        raise EvaluationError(_not_rational(expr, result))
    check_result(value, "the result")
    return value


def _not_rational(expr: sympy.Expr, result: sympy.Expr) -> str:
    """Why an expression gave no exact rational: a division by zero, a complex or an irrational number."""
    where = quoted(str(expr))
    if result.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        return f"division by zero in {where} at these sizes; give sizes that keep every divisor positive"
    if result.has(sympy.I) or result.is_real is False:
        return f"{where} is a complex number at these sizes (a square root or logarithm of a negative number); counts are real: check the sizes"
    return f"{where} is irrational at these sizes, not an exact count; wrap the square root or logarithm in ceil() or floor()"


def check_value(name: str, value: object, vocabulary: Vocabulary) -> sympy.Rational:
    """Validate a user-supplied value against the symbol's domain."""
    spec = vocabulary.entry(name).spec
    if isinstance(value, sympy.Basic) and value.is_Rational:
        value = Fraction(int(value.p), int(value.q))
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        if isinstance(value, float) and not math.isfinite(value):
            raise EvaluationError(f"{name} is {value!r}; give a finite number")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str):
            raise EvaluationError(f"{name} is {quoted(value)}; give a number")
        elif isinstance(value, float) and spec.domain == "positive_rational":
            value = Fraction(value).limit_denominator(10**6)
        else:
            raise EvaluationError(f"{name} must be {'an integer' if 'integer' in spec.domain else 'a number'}, got {quoted(value)}")
    check_number(value, name)
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

        if any(hasattr(a, "__dask_graph__") and hasattr(a, "map_blocks") for a in arrays):  # lazy in, lazy out: each block where it lives
            import dask.array as da

            return da.map_blocks(evaluate, *arrays, dtype=np.float64)
        inputs = [np.asarray(a, dtype=np.float64) for a in arrays]
        with np.errstate(all="ignore"):  # refused below in one line, not warned about on stderr
            result = np.asarray(function(*inputs), dtype=np.float64)
        if not np.all(np.isfinite(result)) and all(np.all(np.isfinite(a)) for a in inputs):
            raise EvaluationError("a value is past float64's range (about 1.8e308) or undefined (a division by zero); use exact evaluation or smaller sizes")
        return np.broadcast_to(result, np.broadcast_shapes(result.shape, *(a.shape for a in inputs)))

    return evaluate
