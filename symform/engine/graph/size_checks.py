"""Whether a model's sizes certainly pass every check of its graph, in one generated function.

Every model checks, at its sizes, that no part's count is negative, that every
repeat is a whole number, and that every requirement holds (``Model`` words the
message). Models that differ only in their sizes share one graph, so the checks
are generated once per graph and set of bound sizes, as plain Python over ints;
where the function says anything but "all pass" (or cannot run), the model runs
its sympy checks, whose verdict and message stand.

A check on an expression with sizes still unbound (``batch``, ``seq``) fails in
sympy only where substituting the sizes leaves a number; that happens only where
every coefficient of the unbound sizes, multiplied out, is zero, so the function
tests exactly that (and the number left) and is never more lenient than sympy.
Where an unbound size sits inside a function together with bound ones
(``Max(0, 3 - batch - n_kv_heads)``) the check is left undecided: the model
checks it with sympy, once per set of values it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import sympy

from ..store.derivation import derivation
from ..algebra.exact import exact_predicate
from .graph import BoundRequirement, ComponentGraph


@dataclass(frozen=True)
class SizeCheck:
    """One check a model makes at its sizes: a part's count (``part``), a repeat (``repeat``), a requirement."""

    kind: str
    expr: sympy.Basic
    path: str
    quantity: str = ""
    requirement: BoundRequirement | None = None


@derivation
def size_checks(graph: ComponentGraph) -> list[SizeCheck]:
    """Every check, in the order a model makes them: parts, repeats, requirements."""
    checks = [SizeCheck("part", expr, path, quantity) for path in graph.leaves() for quantity, expr in graph.graph.nodes[path]["quantities"].items()]
    checks += [SizeCheck("repeat", count, child) for _parent, child, edge in graph.graph.edges(data=True) for count in edge["repeat"].values()]
    checks += [SizeCheck("requirement", r.relation, r.path, requirement=r) for r in graph.requirements]
    return checks


@dataclass(frozen=True)
class GeneratedChecks:
    """``passes(values)``: True where every check it decides passes; ``undecided``: the checks it cannot
    decide (an unbound size inside a function with bound ones), by index, with the bound names they read."""

    passes: Callable
    undecided: tuple[tuple[int, tuple[str, ...]], ...]


_TESTS = {"part": "{} >= 0", "repeat": "_whole({})"}


def generate_checks(checks: list[SizeCheck], bound: frozenset[sympy.Symbol]) -> GeneratedChecks:
    conditions, undecided = [], []
    for i, check in enumerate(checks):
        if check.kind == "requirement":
            condition = ("{0}", (check.expr,)) if check.expr.free_symbols <= bound else None
        else:
            condition = _condition(check.expr, bound, _TESTS[check.kind])
        if condition is None:
            undecided.append((i, tuple(sorted(s.name for s in check.expr.free_symbols & bound))))
        else:
            conditions.append(condition)
    return GeneratedChecks(exact_predicate(conditions), tuple(undecided))


def _condition(expr: sympy.Expr, bound: frozenset[sympy.Symbol], test: str) -> tuple[str, tuple[sympy.Expr, ...]] | None:
    """``test`` of the expression's value where every size is bound; else: some coefficient of the
    unbound sizes is non-zero (no number is left), or the part free of them passes ``test``."""
    if expr.free_symbols <= bound:
        return test.replace("{}", "{0}"), (expr,)
    groups = _coefficients(sympy.expand(expr), bound)
    if groups is None:
        return None
    constant = groups.pop(sympy.Integer(1), sympy.Integer(0))
    coefficients = list(groups.values())
    nonzero = [f"{{{i}}} != 0" for i in range(len(coefficients))]
    return " or ".join([*nonzero, test.replace("{}", f"{{{len(coefficients)}}}")]), (*coefficients, constant)


def _coefficients(expanded: sympy.Expr, bound: frozenset[sympy.Symbol]) -> dict[sympy.Expr, sympy.Expr] | None:
    """The expression as a polynomial in its unbound sizes: monomial -> coefficient over the bound ones;
    None where an unbound size sits anywhere but in a plain power."""
    groups: dict[sympy.Expr, list[sympy.Expr]] = {}
    for term in sympy.Add.make_args(expanded):
        known, unknown = [], []
        for factor in sympy.Mul.make_args(term):
            if factor.free_symbols <= bound:
                known.append(factor)
            elif _plain_power(factor, bound):
                unknown.append(factor)
            else:
                return None
        groups.setdefault(sympy.Mul(*unknown), []).append(sympy.Mul(*known))
    return {monomial: sympy.Add(*parts) for monomial, parts in groups.items()}


def _plain_power(factor: sympy.Expr, bound: Iterable[sympy.Symbol]) -> bool:
    base, exponent = factor.as_base_exp()
    return base.is_Symbol and base not in bound and exponent.is_Integer and exponent > 0
