"""Polynomials with whole coefficients in a nested (multivariate Horner) form: fewer operations.

Nodes: ``("c", int)`` a constant, ``("x", i)`` variable i, ``("*", a, b)`` and ``("+", a, b)``.
The sweeps' array kernels and the exact evaluators both write their code from this form.
"""

from __future__ import annotations

import math


def factor(terms: list[tuple[tuple[int, ...], int]], nvars: int):
    """A polynomial's terms (exponents, whole coefficient) as a tree of products and sums: a common
    whole factor pulled out, then the variable in most terms factored out of them (nested, Horner)."""
    if not terms:
        return ("c", 0)
    g = math.gcd(*(c for _, c in terms))
    if g > 1 and len(terms) > 1:
        return ("*", factor([(e, c // g) for e, c in terms], nvars), ("c", g))
    if len(terms) == 1:
        return _monomial(*terms[0])
    counts = [sum(1 for e, _ in terms if e[i] > 0) for i in range(nvars)]
    best = max(range(nvars), key=lambda i: counts[i]) if nvars else None
    if best is None or counts[best] < 2:
        node = _monomial(*terms[0])
        for t in terms[1:]:
            node = ("+", node, _monomial(*t))
        return node
    inner = [(e[:best] + (e[best] - 1,) + e[best + 1:], c) for e, c in terms if e[best] > 0]
    rest = [t for t in terms if t[0][best] == 0]
    node = ("*", factor(inner, nvars), ("x", best))
    return ("+", node, factor(rest, nvars)) if rest else node


def _monomial(exponents: tuple[int, ...], coefficient: int):
    factors = [("x", i) for i, e in enumerate(exponents) for _ in range(e)]
    if not factors:
        return ("c", coefficient)
    node = factors[0]
    for f in factors[1:]:
        node = ("*", node, f)
    return ("*", node, ("c", coefficient)) if coefficient != 1 else node
