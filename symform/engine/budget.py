"""Budgets on the work one request may cause: every limit named once, each checked before the work.

Declarations, configs, device files and command lines come from users and from
the internet. Each limit below is far above what any real model needs (the
largest bundled model uses a small fraction of each) and far below what would
hang the process or exhaust its memory. A request over a budget is refused
with one line that names the budget and how to stay within it.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sympy is imported by the code that builds expressions: reading files and numbers needs none
    import sympy

from .errors import BudgetError, FileBudgetError

# digits of a number given in text (command line, config, data file): numerator and denominator each
NUMBER_DIGITS = 40
# digits of a constant an expression folds to (9**64 has 62)
CONSTANT_DIGITS = 100
# digits of an exact result's numerator or denominator (a float holds about 308)
RESULT_DIGITS = 300
# sqrt and log calls nested in one another in one expression: sympy's numeric evaluation of a nested log
# doubles its work at each level (log(log(…)) 20 deep runs for minutes); real formulas nest at most 2
ROOT_LOG_DEPTH = 8
# conditionals (a if c else b) nested in one another in one expression: each level is a Piecewise sympy
# compares with the ones it holds; real formulas nest at most 3
CONDITION_DEPTH = 12
# terms of an expression once multiplied out, and its degree in the sizes
EXPANDED_TERMS = 5_000
DEGREE = 128
# component instances in one model's graph, and how deep they nest
GRAPH_NODES = 2_000
GRAPH_DEPTH = 32
# layers enumerated one by one when a family counts layers of a kind
LAYERS = 10_000
# elements of one array: sweep points, decode steps
ARRAY_ELEMENTS = 1_000_000
# devices a layout may span
DEVICES = 2**24
# tokens of one training step (global batch × seq) laid out over float64 and int64 arrays: their whole numbers
STEP_TOKENS = 2**53
# bytes read from one model, declaration or device file, and its nesting depth
FILE_BYTES = 16 * 2**20
# bytes of safetensors headers read for one checkpoint, all its files together (DeepSeek-V3's 163 shards: ~10 MiB)
HEADER_BYTES = 32 * 2**20
NESTING_DEPTH = 64
# characters of user text quoted back in a message
QUOTED = 60


def quoted(text: object) -> str:
    """``text`` as repr, cut to a readable length: messages stay one short line."""
    try:
        shown = repr(text)
    except ValueError:  # an int past Python's digit limit for text (10**5000) has no repr
        return f"an integer of about {int(text.bit_length() * 0.30103):,} digits" if isinstance(text, int) else f"a {type(text).__name__} too large to show"
    return shown if len(shown) <= QUOTED else shown[: QUOTED - 5] + "…" + shown[-4:]


# -- numbers written as text -------------------------------------------------------------------

# around a number only ASCII spaces, tabs and line ends: a control character (\x1f) is no blank
_NUMBER = re.compile(r"[ \t\r\n]*([+-]?)(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?[ \t\r\n]*")
_RATIO = re.compile(r"[ \t\r\n]*([+-]?\d+)[ \t\r\n]*/[ \t\r\n]*([+-]?\d+)[ \t\r\n]*")


def number_from_text(text: str, what: str) -> Fraction:
    """A decimal (``4096``, ``0.5``, ``1.5e12``) or ratio (``1/2``) as an exact Fraction, within NUMBER_DIGITS.

    The exponent is checked before any power of ten is formed: ``1e100000000``
    costs nothing. Raises ValueError (for argparse) naming the problem.
    """
    if not isinstance(text, str) or len(text) > 4 * NUMBER_DIGITS:
        raise ValueError(f"{what}: {quoted(text)} is not a number within the budget of {NUMBER_DIGITS} digits")
    ratio = _RATIO.fullmatch(text)
    if ratio:
        top, bottom = ratio.groups()
        _check_digits(len(top.lstrip("+-")), text, what)
        _check_digits(len(bottom.lstrip("+-")), text, what)
        if int(bottom) == 0:
            raise ValueError(f"{what}: {quoted(text)} divides by zero")
        return Fraction(int(top), int(bottom))
    match = _NUMBER.fullmatch(text)
    if not match:
        raise ValueError(f"{what}: {quoted(text)} is not a number (write 4096, 0.5, 1.5e12 or 1/2)")
    sign, whole, fraction, bare_fraction, exponent = match.groups()
    fraction = fraction if fraction is not None else bare_fraction or ""
    digits = ((whole or "") + fraction).lstrip("0")
    if not digits:
        return Fraction(0)
    # only the exponent's size matters past 7 digits: it is out of range either way
    scale = int(exponent[:8] if exponent and len(exponent.lstrip("+-")) > 7 else exponent or 0) - len(fraction)
    _check_digits(len(digits) + max(scale, 0), text, what)  # the number's size
    _check_digits(max(-scale, 0), text, what)  # its denominator's
    value = Fraction(int(digits)) * 10**scale if scale >= 0 else Fraction(int(digits), 10**-scale)
    return -value if sign == "-" else value


_NUMBER_FIX = f"past symform's number budget (symform.engine.budget.NUMBER_DIGITS); give a number below 10^{NUMBER_DIGITS}"


def _check_digits(digits: int, text: str, what: str) -> None:
    if digits > NUMBER_DIGITS:
        raise ValueError(f"{what}: {quoted(text)} has over {NUMBER_DIGITS} digits, {_NUMBER_FIX}")


def check_number(value: Any, what: str) -> None:
    """An int or Fraction from a data file or an API call: within NUMBER_DIGITS, refused before any arithmetic."""
    _check_parts(value, NUMBER_DIGITS, f"{what} has over {NUMBER_DIGITS} digits, {_NUMBER_FIX}")


def check_result(value: Any, what: str) -> None:
    """An exact result within RESULT_DIGITS: it prints, converts to float and fits in JSON."""
    _check_parts(
        value, RESULT_DIGITS,
        f"{what} has over {RESULT_DIGITS} digits, past symform's result budget (symform.engine.budget.RESULT_DIGITS); "
        "give smaller sizes or a declaration of lower degree",
    )  # fmt: skip


def _check_parts(value: Any, limit: int, message: str) -> None:
    if any(_digits(part) > limit for part in _parts(value)):
        raise BudgetError(message)


def check_constant(value: sympy.Expr, source: str) -> None:
    if value.is_Rational and max(_digits(int(value.p)), _digits(int(value.q))) > CONSTANT_DIGITS:
        raise BudgetError(f"a constant in {quoted(source)} has over {CONSTANT_DIGITS} digits, past symform's budget (symform.engine.budget.CONSTANT_DIGITS); write smaller numbers")


def power_digits(base: sympy.Expr, exponent: sympy.Expr) -> int:
    """Digits of base**exponent for rational base and integer exponent, without computing it."""
    if not (base.is_Rational and exponent.is_Integer) or base == 0:
        return 0
    return abs(int(exponent)) * max(_digits(int(base.p)), _digits(int(base.q)))


def _parts(value: Any) -> tuple[int, ...]:
    if isinstance(value, bool):
        return ()
    if isinstance(value, int):
        return (value,)
    if isinstance(value, Fraction):
        return (value.numerator, value.denominator)
    sympy = sys.modules.get("sympy")  # a sympy number exists only once sympy is loaded
    if sympy is not None and isinstance(value, sympy.Rational):
        return (int(value.p), int(value.q))
    return ()


def _digits(n: int) -> int:
    """Decimal digits of |n|, from its bit length: no string conversion (Python refuses past 4300 digits)."""
    bits = abs(n).bit_length()
    return 1 if bits == 0 else int(bits * math.log10(2)) + 1


# -- expressions -------------------------------------------------------------------------------


def check_roots_and_logs(expr: sympy.Basic, what: str) -> None:
    """Refuse sqrt and log nested past ROOT_LOG_DEPTH, however they came to nest: written so, or a part's argument
    bound to such a call (each declaration within the budget, their composition past it)."""
    if _root_log_depth(expr, {}) > ROOT_LOG_DEPTH:
        raise BudgetError(
            f"{what} nests sqrt and log over {ROOT_LOG_DEPTH} deep, past symform's budget (symform.engine.budget.ROOT_LOG_DEPTH): "
            "each level multiplies the work of evaluating them; nest fewer calls across the parts"
        )


def _root_log_depth(expr: sympy.Basic, seen: dict) -> int:
    if expr.is_Atom:
        return 0
    if expr in seen:
        return seen[expr]
    inner = max((_root_log_depth(a, seen) for a in expr.args), default=0)
    here = type(expr).__name__ == "log" or (expr.is_Pow and expr.exp.is_Rational and not expr.exp.is_Integer)
    seen[expr] = depth = inner + here
    return depth


def check_expansion(expr: sympy.Basic, what: str) -> None:
    """Refuse before sympy.expand when the multiplied-out expression would pass EXPANDED_TERMS or DEGREE, or nest
    sqrt and log past ROOT_LOG_DEPTH."""
    check_roots_and_logs(expr, what)
    terms, degree = _size(expr, {})
    if terms > EXPANDED_TERMS:
        raise BudgetError(
            f"{what} would multiply out to over {EXPANDED_TERMS:,} terms, past symform's expression budget "
            f"(symform.engine.budget.EXPANDED_TERMS); use fewer sums inside powers and products"
        )
    if degree > DEGREE:
        raise BudgetError(
            f"{what} has degree {degree} in the sizes, past symform's budget of {DEGREE} "
            f"(symform.engine.budget.DEGREE); use smaller exponents"
        )


_CAP = EXPANDED_TERMS * 10  # estimates saturate here: past the budget the exact count does not matter


def _size(expr: sympy.Basic, seen: dict) -> tuple[int, int]:
    """(terms once expanded, degree): upper bounds, computed once per distinct subexpression."""
    if expr in seen:
        return seen[expr]
    if expr.is_Atom:
        result = (1, 1 if expr.is_Symbol else 0)
    elif expr.is_Add:
        sizes = [_size(a, seen) for a in expr.args]
        result = (min(_CAP, sum(t for t, _ in sizes)), max(d for _, d in sizes))
    elif expr.is_Mul:
        terms, degree = 1, 0
        for a in expr.args:
            t, d = _size(a, seen)
            terms, degree = min(_CAP, terms * t), degree + d
        result = (terms, degree)
    elif expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        t, d = _size(expr.base, seen)
        n = int(expr.exp)
        result = (min(_CAP, math.comb(n + t - 1, n)) if t > 1 else 1, d * n)
    else:  # functions, negative and fractional powers: one term each, their arguments expanded within
        sizes = [_size(a, seen) for a in expr.args]
        inner = sum(t for t, _ in sizes)
        result = (1 if inner <= _CAP else _CAP, max([d for _, d in sizes] + [0]))
        if inner > EXPANDED_TERMS:
            result = (_CAP, result[1])
    seen[expr] = result
    return result


def check_count(count: int, budget: int, what: str, name: str, fix: str) -> None:
    """``count`` things of a kind within ``budget`` (named ``name`` in symform.engine.budget)."""
    if count > budget:
        shown = f"{count:,}" if count.bit_length() < 10_000 else quoted(count)  # past ~3,000 digits Python has no text for it
        raise BudgetError(f"{what}: {shown} is past symform's budget of {budget:,} (symform.engine.budget.{name}); {fix}")


# -- files ---------------------------------------------------------------------------------------


def check_plain_file(path, what: str) -> None:
    """Refuse a pipe or socket before it is opened: reading would wait for a writer that may never come."""
    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise FileBudgetError(f"{path}: {what} is a pipe or socket, which symform does not wait on; give the file itself")


def read_bounded(path, what: str) -> bytes:
    """A file's bytes, FILE_BYTES at most: a link to /dev/zero or a huge file is refused after one read."""
    check_plain_file(path, what)
    with open(path, "rb") as f:
        data = f.read(FILE_BYTES + 1)
    if len(data) > FILE_BYTES:
        raise FileBudgetError(f"{path}: {what} is over {FILE_BYTES // 2**20} MiB, past symform's file budget (symform.engine.budget.FILE_BYTES); give the file itself, not a device or an archive")
    return data


def check_nesting(text: str, path: object) -> None:
    """Refuse text whose brackets nest past NESTING_DEPTH, before a recursive parser sees it.

    Brackets inside strings count too: an upper bound, and no real file comes near it.
    """
    depth = 0
    deepest = 0
    for match in re.finditer(r"[\[{]|[\]}]", text):
        depth += 1 if match.group() in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > NESTING_DEPTH:
                raise FileBudgetError(f"{path}: nested too deeply: brackets nest over {NESTING_DEPTH} deep, past symform's budget (symform.engine.budget.NESTING_DEPTH); flatten the file")
