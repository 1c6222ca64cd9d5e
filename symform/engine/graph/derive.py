"""Derivations: from a model's exact expression to the closed forms people quote.

Steps: the exact expression; the same after a named assumption set (declared by
the components themselves, e.g. gated_mlp's d_ff = 8/3·d_model); its leading
order in the symbols declared large; and, where the result is a multiple of the
leading-order parameter count, that multiple written with N (6·N·D). Each step
carries its value and relative error at the model's own sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping

import sympy

from ..errors import EvaluationError
from ..algebra.evaluate import check_value
from ..algebra.formula import Formula, to_latex
from .model import Model, normalise_quantity
from ..algebra.multiplied import degree_in, from_polynomial, polynomial
from .structure import Block, block_large, in_stand_ins, structure, without_flags


def leading_order(expr: sympy.Expr, large: Iterable[sympy.Symbol], rewrites: Mapping[sympy.Expr, sympy.Expr] | None = None) -> sympy.Expr:
    """The terms of highest total degree in the ``large`` symbols (each scaled by λ, top power of λ kept), after
    the ``rewrites`` the components declare for leading order (``Model.leading_rewrites``: ceil(seq/chunk) → seq/chunk)."""
    large = frozenset(large)
    branching = _branching_in_large(expr, large)
    if branching is not None:  # each branch has its own leading order: taken branch by branch, under its condition
        return sympy.Piecewise(*((leading_order(expr.xreplace({branching: value}), large, rewrites), condition) for value, condition in branching.args))
    fast = None if rewrites else _leading_monomials(expr, large)
    if fast is not None:
        return fast
    scale = sympy.Dummy("lambda", positive=True)
    # a conditional left here picks between values free of the large symbols: a factor of degree 0, whatever it tests
    base = _without_rounding(in_stand_ins(expr, rewrites or {}), large)
    factors = {p: sympy.Dummy("branch") for p in base.atoms(sympy.Piecewise)} if base.has(sympy.Piecewise) else {}
    scaled = sympy.expand(base.xreplace(factors).xreplace({s: scale * s for s in large}))
    terms: dict[sympy.Expr, list[sympy.Expr]] = {}
    for term in sympy.Add.make_args(scaled):
        _, power = term.as_coeff_exponent(scale)
        terms.setdefault(power, []).append(term)
    top = max(terms, key=lambda p: sympy.N(p))
    return sympy.expand(sympy.Add(*terms[top]).xreplace({scale: 1}).xreplace({d: p for p, d in factors.items()}))


_BRANCHINGS = 6  # conditionals over large symbols split branch by branch (2**6 leading orders at most); past it, as factors


def _branching_in_large(expr: sympy.Expr, large: frozenset[sympy.Symbol]) -> sympy.Piecewise | None:
    """A conditional whose branches hold a large symbol (its degree depends on the branch), where there are few."""
    if not expr.has(sympy.Piecewise):
        return None
    found = [p for p in expr.atoms(sympy.Piecewise) if any(large & value.free_symbols for value, _ in p.args)]
    return found[0] if 0 < len(found) <= _BRANCHINGS else None


def _leading_monomials(expr: sympy.Expr, large: frozenset[sympy.Symbol]) -> sympy.Expr | None:
    """leading_order's result read off the monomials, where each is a product of powers of symbols and of
    functions free of the large symbols (no rounding to drop, no function to scale); None elsewhere."""
    poly = polynomial(expr)
    if poly is None:
        return None
    degrees: dict[tuple, object] = {}
    for monomial in poly:
        degree = degree_in(monomial, large)
        if degree is None:
            return None
        degrees[monomial] = degree
    if not poly:
        return sympy.S.Zero
    top = max(degrees.values())
    return from_polynomial({m: c for m, c in poly.items() if degrees[m] == top})


def _in_chunks(expr: sympy.Expr, model: Model, rewrites: Mapping[sympy.Expr, sympy.Expr]) -> sympy.Expr:
    """Where a declared leading form divides the sequence into chunks (seq/chunk), the chunks scale with the
    sequence and the widths: what is of lower degree in all of them goes first (Mamba-2's (s/C)² pass between
    chunks, the initial state's row of it), before the leading order in the widths alone."""
    if not any(expr.has(k) for k in rewrites):
        return expr
    return leading_order(expr, block_large(model), rewrites)


def _without_rounding(expr: sympy.Expr, large: frozenset[sympy.Symbol]) -> sympy.Expr:
    """ceil(x) and floor(x) differ from x by less than 1, so to leading order in a large symbol inside x they are
    x (a chunked scan's ceil(seq/chunk) chunks are seq/chunk of them)."""
    return expr.replace(
        lambda e: isinstance(e, (sympy.ceiling, sympy.floor)) and bool(e.free_symbols & large),
        lambda e: e.args[0],
    )


@dataclass(frozen=True)
class Step:
    label: str
    latex_label: str
    formula: Formula
    value: float | None
    relative_error: float | None  # against the exact expression at the model's values


@dataclass(frozen=True)
class Derivation:
    quantity: str
    model: str
    assumptions: str | None
    leading: bool
    large: tuple[str, ...]
    steps: tuple[Step, ...]
    params_leading: Formula | None  # N, when the result is a multiple of it
    in_terms_of_params: Formula | None  # the result written with N (6·N·D)
    missing: tuple[str, ...]  # workload symbols without a value, so errors could not be computed
    # The result in terms of N (6·N·D) with N the model's exact parameter count, against the exact quantity:
    # the error of the rule itself, where the last step's error also counts N's own leading-order error.
    params_value: int | None = None
    relative_error_with_real_params: float | None = None

    @property
    def exact(self) -> Formula:
        return self.steps[0].formula

    @property
    def result(self) -> Formula:
        return self.steps[-1].formula

    @property
    def relative_error(self) -> float | None:
        return self.steps[-1].relative_error

    def latex(self) -> str:
        """An ``aligned`` block, one line per step, each labelled."""
        first, *rest = self.steps
        name = self.quantity.replace("_", "\\_")
        lines = [f"\\mathrm{{{name}}} &= {first.formula.latex()} && {first.latex_label}"]
        lines += [f"&\\approx {step.formula.latex()} && {step.latex_label}" for step in rest]
        if self.in_terms_of_params is not None:
            lines.append(f"&= {self.in_terms_of_params.latex()} && \\text{{with }} N = {self.params_leading.latex()}")
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def _repr_latex_(self) -> str:
        return f"$${self.latex()}$$"


def derive(
    model: Model,
    quantity: str,
    *,
    assume: str | None = None,
    leading: bool = False,
    large: Iterable[str] | None = None,
    symbolic: Iterable[str] = (),
    **workload: object,
) -> Derivation:
    """Derive ``quantity`` for ``model``: exact → assumptions → leading order → in terms of N. ``symbolic``: the
    conventions kept as symbols rather than put in at their values (bytes per element: B_kv·…), each step's
    error still at the model's values of them."""
    quantity = normalise_quantity(quantity)
    vocabulary = model.vocabulary
    large_symbols = [vocabulary[n] for n in large] if large is not None else sorted(vocabulary.large, key=lambda s: s.name)
    values = {vocabulary[k]: v for k, v in _checked_values(model, workload).items()}
    kept = {vocabulary[n] for n in symbolic}
    values |= {s: x for s, x in model.conventions.items() if s in kept}

    def expression(assume: str | None) -> sympy.Expr:
        # Min(1, n_shared_experts) says how an optional part is encoded; at a model that has the part it is 1
        if not kept:
            return without_flags(model.expression(quantity, assume=assume).expr, model.values)
        raw = model.expression(quantity, assume=assume, conventions=False).expr
        return without_flags(sympy.expand(raw.xreplace({s: x for s, x in model.conventions.items() if s not in kept})), model.values)

    exact = expression(None)
    chain = [("exact", "\\text{exact}", exact)]
    if assume is not None:
        chain.append((f"assuming {assume}", f"\\text{{assuming {assume}}}", expression(assume)))
    if leading:
        present = chain[-1][2].free_symbols
        large_symbols = [s for s in large_symbols if s in present] or large_symbols
        letters = ", ".join(to_latex(s, vocabulary) for s in large_symbols)
        label = "leading order in " + ", ".join(s.name for s in large_symbols)
        rewrites = model.leading_rewrites(assume=assume)
        chain.append((label, f"\\text{{leading order in }} {letters}", leading_order(_in_chunks(chain[-1][2], model, rewrites), large_symbols, rewrites)))

    exact_at = exact.xreplace(values)
    missing = tuple(sorted(s.name for s in exact_at.free_symbols))
    steps = tuple(Step(label, tex, Formula(e, vocabulary), *_value_and_error(e, exact_at, values)) for label, tex, e in chain)

    in_terms = params_formula = params_value = real_error = None
    if leading and quantity != "params":
        params_leading = leading_order(without_flags(model.expression("params", assume=assume).expr, model.values), large_symbols, model.leading_rewrites(assume=assume))
        ratio = _monomial_ratio(steps[-1].formula.expr, params_leading)
        if ratio is None:
            ratio = sympy.cancel(steps[-1].formula.expr / params_leading)
        if ratio.free_symbols <= set(vocabulary.symbols("workload", "convention", "dtype")):
            in_terms = Formula(ratio * vocabulary["n_params"], vocabulary)
            params_formula = Formula(params_leading, vocabulary)
            real_params = model.expression("params").expr.xreplace(values)
            if not real_params.free_symbols:
                params_value = int(real_params)
                _, real_error = _value_and_error(ratio * real_params, exact_at, values)
    return Derivation(
        quantity=quantity,
        model=model.name,
        assumptions=assume,
        leading=leading,
        large=tuple(s.name for s in large_symbols),
        steps=steps,
        params_leading=params_formula,
        in_terms_of_params=in_terms,
        missing=missing,
        params_value=params_value,
        relative_error_with_real_params=real_error,
    )


def _checked_values(model: Model, workload: dict[str, object]) -> dict[str, object]:
    allowed = set(model.vocabulary.names("workload"))
    unknown = sorted(set(workload) - allowed)
    if unknown:
        raise EvaluationError(f"unknown workload value {unknown[0]!r}; give any of {', '.join(sorted(allowed))}")
    values = {k: check_value(k, v, model.vocabulary) for k, v in workload.items()}
    return {**model.values, **model.ratio_values, **values}


def _value_and_error(expr: sympy.Expr, exact_at: sympy.Expr, values: dict) -> tuple[float | None, float | None]:
    at = expr.xreplace(values)
    value = float(at) if not at.free_symbols else None
    top, bottom = polynomial(at), polynomial(exact_at)
    if top is None or not bottom:
        ratio = sympy.cancel(at / exact_at)
    else:
        ratio = _monomial_ratio(at, exact_at, top, bottom)
        if ratio is None:  # no monomial multiple, so no constant one: the ratio keeps symbols (sympy.cancel's too)
            return value, None
    error = float(ratio - 1) if not ratio.free_symbols else None
    return value, error


def _monomial_ratio(numerator: sympy.Expr, denominator: sympy.Expr, top: dict | None = None, bottom: dict | None = None) -> sympy.Expr | None:
    """sympy.cancel(numerator/denominator) where that is one monomial (a number, 6·D): the numerator's
    monomials are the denominator's times it; None where it is anything else (sympy.cancel's to work out)."""
    top = polynomial(numerator) if top is None else top
    bottom = polynomial(denominator) if bottom is None else bottom
    if top is None or not bottom:
        return None
    if not top:
        return sympy.S.Zero
    first, c = next(iter(bottom.items()))
    for m, d in top.items():
        multiple = _divided(m, first)
        if multiple is None:
            continue
        k = Fraction(d) / c
        if len(top) == len(bottom) and all(top.get(_times_monomial(b, multiple)) == k * e for b, e in bottom.items()):
            return from_polynomial({multiple: k if type(k) is not Fraction or k.denominator != 1 else k.numerator})
    return None


def _divided(a: frozenset, b: frozenset) -> frozenset | None:
    """Monomial a/b, over symbols alone (a function's powers are left to sympy)."""
    powers = dict(a)
    for v, e in b:
        powers[v] = powers.get(v, 0) - e
    if any(not v.is_Symbol for v, e in powers.items() if e):
        return None
    return frozenset((v, e) for v, e in powers.items() if e)


def _times_monomial(a: frozenset, b: frozenset) -> frozenset:
    powers = dict(a)
    for v, e in b:
        powers[v] = powers.get(v, 0) + e
    return frozenset((v, e) for v, e in powers.items() if e)


def blocks_of(model: Model, quantity: str, expr: sympy.Expr, *, assume: str | None, leading: bool, large: Iterable[str]) -> tuple[Block, ...] | None:
    """``expr`` written the way the model is built: one block per layer kind, ``repeat · (one layer)``, so that
    nothing cancels (``(n − n_dense)·(…)``, not ``n·x − n_dense·x``); None where the block form is not the same
    expression (blocks a model has none of are left out of a form, not out of its exact expression)."""
    st = structure(model, quantity, assume=assume, leading=leading, large=list(large) if leading else None, parts=False)
    return st.blocks if sympy.expand(st.expr - expr) == 0 else None


def step_blocks(model: Model, d: Derivation) -> list[tuple[Block, ...] | None]:
    """Each step of ``d`` as blocks (``blocks_of``), where they are the step's expression."""
    return [
        blocks_of(model, d.quantity, step.formula.expr, assume=d.assumptions if i else None, leading=d.leading and i == len(d.steps) - 1, large=d.large)
        for i, step in enumerate(d.steps)
    ]
