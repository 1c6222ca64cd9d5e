"""How many routed experts a step touches: the weights a mixture-of-experts layer reads.

Each token goes through ``top_k`` of ``n_experts`` experts, but a step reads the weights
of every expert that any of its tokens is routed to. With T tokens routed independently
and uniformly (the default assumption), an expert is missed by all of them with
probability (1 − k/n)^T, so the step touches, in expectation,

    D(T) = n · (1 − (1 − k/n)^T)

experts: k at T = 1, nearly all n for a batch of a few dozen. A skew (a Zipf exponent s:
expert i chosen with probability ∝ i^−s, so hot experts take more of the tokens) gives
D(T) = Σ_i 1 − (1 − min(1, k·p_i))^T, fewer distinct experts for the same T.
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from ..engine.errors import EvaluationError


def expected_experts(n_experts: int | sympy.Expr, top_k: int | sympy.Expr, tokens: sympy.Expr | int, skew: float | Fraction = 0) -> sympy.Expr:
    """Expected distinct experts touched by ``tokens`` tokens routed to ``top_k`` of ``n_experts`` each."""
    if skew < 0:
        raise EvaluationError(f"expert skew is {skew}; give 0 (uniform routing) or a positive Zipf exponent")
    tokens = sympy.sympify(tokens)
    if not skew:
        n, k = sympy.sympify(n_experts), sympy.sympify(top_k)
        return n * (1 - (1 - k / n) ** tokens)
    if not (isinstance(n_experts, int) and isinstance(top_k, int)):
        raise EvaluationError("a routing skew needs the model's n_experts and top_k as numbers")
    raw = [i ** -float(skew) for i in range(1, n_experts + 1)]
    # routing probabilities as exact fractions (to nine digits), so the step's bytes stay exact numbers
    chosen = [min(Fraction(1), Fraction(top_k * w / sum(raw)).limit_denominator(10**9)) for w in raw]
    return sympy.Add(*(1 - (1 - sympy.Rational(q.numerator, q.denominator)) ** tokens for q in chosen))


def touched_weight_bytes(expr: sympy.Expr, top_k: sympy.Symbol, batch: sympy.Symbol, distinct: sympy.Expr) -> sympy.Expr:
    """A leaf's bytes with the routed experts' weight reads (its terms in ``top_k`` that do not grow with
    the batch) counted for ``distinct`` experts instead of ``top_k``."""
    terms = sympy.Add.make_args(sympy.expand(expr))
    return sympy.Add(*(t.xreplace({top_k: distinct}) if top_k in t.free_symbols and batch not in t.free_symbols else t for t in terms))
