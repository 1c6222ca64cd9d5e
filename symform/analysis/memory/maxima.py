"""sympy.Max of large expressions, without its costliest step where it is shown to find nothing.

sympy.Max compares each pair of arguments (``_find_localzeros``): it tries to prove one at least the
other from the symbols' assumptions, then factors their difference and tries again, dropping the
smaller where it succeeds. On memory expressions of hundreds of terms that search costs tens of
milliseconds per Max, and it almost always finds nothing. Where a point of the symbols' domains puts
one argument of a pair above the other and another point puts it below, no sound proof either way
exists, so the search cannot connect that pair; when every pair is so shown, the result is sympy's
own unevaluated Max of the arguments as its first, cheap steps leave them. Otherwise sympy decides.
"""

from __future__ import annotations

from itertools import combinations

import sympy

from ...engine.algebra.multiplied import value_at

_LARGE = sympy.Integer(10**6)


def max_of(*args: sympy.Expr) -> sympy.Expr:
    """``sympy.Max(*args)``, the same expression, sooner for large arguments that no proof orders."""
    values = [sympy.sympify(a) for a in args]
    try:
        kept = sympy.Max._collapse_arguments(frozenset(sympy.Max._new_args_filter(values)))
    except Exception:  # an infinity, a non-real argument, or a sympy without these steps: sympy decides
        return sympy.Max(*values)
    if len(kept) < 2 or not _unordered(kept):
        return sympy.Max(*values)
    return sympy.Max(*kept, evaluate=False)


def _unordered(args: list[sympy.Expr]) -> bool:
    """Whether every pair of ``args`` comes out both ways at points their symbols' assumptions allow: all
    symbols 1, then each in turn large, looked at only until each pair has been seen both ways."""
    symbols = sorted(set().union(*(a.free_symbols for a in args)), key=lambda s: s.name)
    if not all(_allowed(s, v) for s in symbols for v in (sympy.Integer(1), _LARGE)):
        return False
    points = [{s: sympy.Integer(1) for s in symbols}] + [{s: _LARGE if s == big else sympy.Integer(1) for s in symbols} for big in symbols]
    unseen = {pair: {True, False} for pair in combinations(range(len(args)), 2)}  # the orders each pair still has to show
    for point in points:
        try:
            at = [value_at(a, point) for a in args]
        except (TypeError, ValueError, ZeroDivisionError):
            return False
        if not all(v.is_Rational for v in at):
            return False
        for (i, j), orders in list(unseen.items()):
            if at[i] != at[j]:
                orders.discard(bool(at[i] > at[j]))
            if not orders:
                del unseen[i, j]
        if not unseen:
            return True
    return False


def _allowed(symbol: sympy.Symbol, value: sympy.Integer) -> bool:
    """Whether ``value`` has every property ``symbol`` is assumed to have (positive, integer, ...)."""
    return all(getattr(value, f"is_{name}") == holds for name, holds in symbol.assumptions0.items())
