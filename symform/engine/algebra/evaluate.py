"""Two ways to turn an expression into numbers: exact, and compiled for arrays."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from functools import lru_cache, partial
from typing import Callable, Mapping, Sequence

import sympy

from ..budget import NUMBER_DIGITS, RESULT_DIGITS, _digits, check_number, check_result, quoted
from ..errors import EvaluationError
from .exact import Screen, exact_function, exact_number, screened_maker
from ..language.vocabulary import Vocabulary

Number = int | Fraction


def _how_to_give(name: str) -> str:
    """Where a missing value is given: a workload size by its own option (--source-seq), any other by --set."""
    from ..language.vocabulary import default_vocabulary

    vocabulary = default_vocabulary()
    if name in vocabulary and vocabulary.entry(name).spec.kind == "workload":
        return f"--{name.replace('_', '-')} on the command line, {name}=... to an evaluation"
    return f"e.g. --set {name}=..."


def exact_value(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> Number:
    """Substitute exact numbers; a Python int (or Fraction) to the last digit, or a clear error."""
    try:
        result = sympy.sympify(expr).xreplace(dict(values))
    except ZeroDivisionError:  # a modulo or floor division by a size that is zero here
        raise EvaluationError(f"division by zero in {quoted(str(expr))} at these sizes; give sizes that keep every divisor positive") from None
    except (ValueError, TypeError):  # min/max over an infinity or a complex number (1/0 inside min) cannot compare
        raise EvaluationError(f"{quoted(str(expr))} has a min or max of incomparable values at these sizes (a division by zero or a complex number inside); give sizes that keep every divisor positive") from None
    if result.free_symbols:
        missing = ", ".join(sorted(s.name for s in result.free_symbols))
        raise EvaluationError(f"cannot evaluate exactly: no value for {missing}; give one ({_how_to_give(sorted(s.name for s in result.free_symbols)[0])})")
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
    elif isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):  # numpy's int64, int32 ...
        value = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, (float, int, Fraction)):  # numpy's float32 ...
        value = float(value)
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
    if spec.most is not None and number > spec.most:
        raise EvaluationError(above_most(name, spec.most, value))
    return number


def above_most(name: str, most: int, value: object) -> str:
    """The refusal of a value above a name's greatest (a switch's 1)."""
    return f"{name} is a switch: give 0 or 1, got {value}" if most == 1 else f"{name} must be at most {most}, got {value}"


# the largest bit length check_number lets through: ints up to it need no further check
_PLAIN_BITS = max(b for b in range(1, 4 * NUMBER_DIGITS) if _digits(2**b - 1) <= NUMBER_DIGITS)


_PLAIN_MAX = 2**_PLAIN_BITS - 1
_NEVER = _PLAIN_MAX + 1  # the least value of a name outside the vocabulary: no int is plain there


def plain_values(values: Mapping[str, object], vocabulary: Vocabulary) -> dict[str, int] | None:
    """The values as they are, where each is plainly valid (a known name, an int in its domain and budget);
    None where any needs :func:`check_value`'s closer look, or its message."""
    least, greatest = vocabulary.least_ints, vocabulary.greatest
    for name, value in values.items():
        if type(value) is not int or not least.get(name, _NEVER) <= value <= greatest.get(name, _PLAIN_MAX):
            return None
    return values  # type: ignore[return-value]


# the largest bit length of an int result check_result lets through
_RESULT_BITS = max(b for b in range(1, 4 * RESULT_DIGITS) if _digits(2**b - 1) <= RESULT_DIGITS)

@lru_cache(maxsize=4096)
def _free(expr: sympy.Basic) -> frozenset[sympy.Symbol]:
    return frozenset(expr.free_symbols)


def exact_evaluator(expr: sympy.Expr, vocabulary: Vocabulary) -> Callable | None:
    """The generated exact function of ``expr`` (values by name); None where there is none
    (a symbol outside the vocabulary, a node with no exact Python form)."""
    if not _free(expr) <= vocabulary.symbol_set:  # a symbol outside the vocabulary is never bound by name
        return None
    return exact_function(expr)


def run_exact(function: Callable, values: Mapping[str, Number]) -> Number | None:
    """:func:`exact_value` at already-checked values by name, through the generated function; None
    wherever it cannot answer (then sympy answers, or words the error)."""
    try:
        value = function(values)
        if type(value) is not int:
            value = exact_number(value)
    except Exception:  # a missing value, a division by zero, a non-exact step: sympy gives the answer or the message
        return None
    if type(value) is not int or value.bit_length() > _RESULT_BITS:
        check_result(value, "the result")
    return value


def evaluate_checked(expr: sympy.Expr, vocabulary: Vocabulary, values: Mapping[str, object]) -> Number:
    """``expr``'s exact value with every value checked (:func:`check_value`'s refusal for the first that
    fails, in the order given), through the generated function where the values are plain, else sympy."""
    function = exact_evaluator(expr, vocabulary)
    if function is not None and plain_values(values, vocabulary) is not None:
        value = run_exact(function, values)
        if value is not None:
            return value
    return exact_value(expr, checked_values(values, vocabulary))


def checked_values(values: Mapping[str, object], vocabulary: Vocabulary) -> dict[sympy.Symbol, sympy.Rational]:
    """Each value by its symbol, checked (:func:`check_value`) in the order given."""
    return {vocabulary[name]: check_value(name, value, vocabulary) for name, value in values.items()}


def formula_evaluator(expr: sympy.Expr, vocabulary: Vocabulary) -> Callable[[Mapping[str, object]], Number]:
    """``expr``'s exact evaluation at values by name, as :func:`evaluate_checked` gives it: generated code
    that answers plainly valid values in one pass (:func:`symform.engine.algebra.exact.screened_maker`) and hands
    everything else to :func:`evaluate_checked`, which refuses or answers it as it always has."""
    checked = partial(evaluate_checked, expr, vocabulary)
    if not _free(expr) <= vocabulary.symbol_set:  # a symbol outside the vocabulary is never bound by name
        return checked
    reads = frozenset(s.name for s in _free(expr))
    least = vocabulary.least_ints
    make = screened_maker(expr, Screen(frozenset(n for n in reads if least[n] == 0), _PLAIN_MAX, _RESULT_BITS))
    return make(_others_plain(vocabulary, reads), checked) if make is not None else checked


def _others_plain(vocabulary: Vocabulary, reads: frozenset[str]) -> Callable[[Mapping[str, object]], bool]:
    """Whether the values of names outside ``reads`` are plain (:func:`plain_values`), for a mapping that has
    every name in ``reads``. Callers mostly pass the same other names call after call (a model's sizes a
    formula does not use): those of the last call that passed are tried first, by count and by name,
    which proves they are all the others without a pass over every name."""
    least = vocabulary.least_ints
    size = len(reads)
    last: list[tuple[str, ...]] = [()]

    def plain(values: Mapping[str, object]) -> bool:
        others = last[0]
        if len(values) == size + len(others):
            for name in others:
                value = values.get(name)
                if type(value) is not int or not least[name] <= value <= _PLAIN_MAX:
                    break
            else:
                return True
        others = tuple(name for name in values if name not in reads)
        if plain_values({name: values[name] for name in others}, vocabulary) is None:
            return False
        last[0] = others
        return True

    return plain


def fast_exact(expr: sympy.Expr, values: Mapping[str, Number], vocabulary: Vocabulary) -> Number | None:
    evaluator = exact_evaluator(expr, vocabulary)
    return run_exact(evaluator, values) if evaluator is not None else None


@lru_cache(maxsize=512)
def _compiled(expr: sympy.Expr, names: tuple[str, ...]) -> Callable:
    symbols = {s.name: s for s in expr.free_symbols}
    args = [symbols.get(n, sympy.Symbol(n)) for n in names]
    return sympy.lambdify(args, expr, modules=numpy_modules(), cse=True)


def numpy_modules(*overrides: dict) -> list:
    """lambdify's modules for numpy code: numpy's own namespace, not modules="numpy", which runs
    `from numpy import *` and so imports every lazily loaded numpy submodule (f2py, testing, ma, ...) on
    the first compile, a third of a second. ``overrides`` come first, as lambdify reads them."""
    import numpy

    return [*overrides, _NUMPY_DEFAULTS, numpy]


_NUMPY_DEFAULTS = {"I": 1j}  # what modules="numpy" adds to numpy's names (sympy's NUMPY_DEFAULT)


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
