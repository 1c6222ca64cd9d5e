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

import math
from functools import lru_cache
from collections.abc import Mapping

import sympy

from ...engine.errors import EvaluationError
from ...engine.store.derivation import derivation


def expected_experts(n_experts: int | sympy.Expr, top_k: int | sympy.Expr, tokens: sympy.Expr | int, skew: float = 0) -> sympy.Expr:
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
    # routing probabilities as floats: an expected count, not an exact one; as fractions their powers grow by
    # nine digits a token, past any budget at a few dozen tokens
    chosen = [min(1.0, top_k * w / sum(raw)) for w in raw]
    return sympy.Add(*(1 - sympy.Float(1 - q) ** tokens for q in chosen))


@derivation  # asked of every leaf of every layout a plan estimates
def is_expected_count(expr: sympy.Expr) -> bool:
    """Whether ``expr`` raises a probability to a workload size: an expected value (the experts a batch touches),
    evaluated in floats where its exact fraction would run to hundreds of digits."""
    return _raises_to_a_size(sympy.sympify(expr))


@lru_cache(maxsize=4096)  # asked of every leaf at every layout a plan ranks
def _raises_to_a_size(expr: sympy.Expr) -> bool:
    return any(p.exp.free_symbols for p in expr.atoms(sympy.Pow))


def expected_value(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> float:
    """``expr`` at ``values`` in floats (30 digits, then float64): (3/4)^512 as a fraction has 309 digits."""
    found = sympy.sympify(expr).xreplace({s: sympy.Float(v, 30) for s, v in values.items()})
    if found.free_symbols:
        missing = ", ".join(sorted(s.name for s in found.free_symbols))
        raise EvaluationError(f"cannot evaluate: no value for {missing}; give one")
    value = float(found)
    if not math.isfinite(value):
        raise EvaluationError("an expected count is past float64's range at these sizes; give smaller sizes")
    return value


def touched_weight_bytes(expr: sympy.Expr, top_k: sympy.Symbol, batch: sympy.Symbol, distinct: sympy.Expr) -> sympy.Expr:
    """A leaf's bytes with the routed experts' weight reads (its terms in ``top_k`` that do not grow with
    the batch) counted for ``distinct`` experts instead of ``top_k``."""
    terms = sympy.Add.make_args(sympy.expand(expr))
    return sympy.Add(*(t.xreplace({top_k: distinct}) if top_k in t.free_symbols and batch not in t.free_symbols else t for t in terms))
