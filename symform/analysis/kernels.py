"""Array kernels generated from the quantities' polynomials: factored, in place, into the caller's arrays.

Every quantity symform counts is a polynomial with rational coefficients in the
sizes. Scaled by ``m`` (the lcm of the coefficients' denominators) it has whole
coefficients; the kernel evaluates ``m·q`` in a nested (multivariate Horner) form
with common integer factors pulled out, so it does about as few array operations
as a hand-factored version. Each operation writes into a temporary the kernel owns
(``a *= b``), never into an input; the last one writes straight into ``out``.

Whole coefficients make the kernel exact on int64 arrays: numpy's int64
arithmetic is arithmetic modulo 2**64, so the result is ``m·q`` modulo 2**64,
which is ``m·q`` itself once ``|m·q| < 2**63``. :meth:`Kernel.int64_bound` proves
that before anything is computed: the polynomial with every coefficient made
positive, at the inputs' largest magnitudes, is at least ``|m·q|`` at every point.

The generated source is plain text: a kernel pickles as that text (a dask
worker rebuilds it once), not as a function object.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import sympy

INT64_LIMIT = 2**63


@dataclass(frozen=True)
class Kernel:
    """``m·q`` for several quantities over ``names``; ``scales`` are the m's, ``terms`` the scaled polynomials."""

    names: tuple[str, ...]
    source: str
    scales: tuple[int, ...]
    terms: tuple[tuple[tuple[tuple[int, ...], int], ...], ...]
    _function: list = field(default_factory=list, compare=False, repr=False)

    @property
    def function(self) -> Callable:
        if not self._function:
            self._function.append(_from_source(self.source))
        return self._function[0]

    def __getstate__(self):
        return {"names": self.names, "source": self.source, "scales": self.scales, "terms": self.terms}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_function", [])

    def __call__(self, *arrays, out: Sequence | None = None) -> tuple:
        """``m·q`` for each quantity (into ``out`` where given and shaped alike)."""
        return self.function(*arrays, out=out)

    def int64_bound(self, magnitudes: Sequence[int]) -> list[int]:
        """An upper bound of ``|m·q|`` at any point whose inputs are at most ``magnitudes`` in size (exact ints)."""
        bounds = []
        for terms in self.terms:
            total = 0
            for exponents, coefficient in terms:
                total += abs(coefficient) * math.prod(int(v) ** e for v, e in zip(magnitudes, exponents))
            bounds.append(total)
        return bounds


def polynomial_kernel(exprs: Sequence[sympy.Expr], names: Sequence[str], scales: Sequence[int]) -> Kernel | None:
    """The kernel of ``scales[i]·exprs[i]``; None when an expression is no polynomial in ``names``."""
    names = tuple(names)
    symbols = [_symbol(exprs, n) for n in names]
    all_terms = []
    for expr, scale in zip(exprs, scales):
        if not set(expr.free_symbols) <= set(symbols):
            return None
        scaled = sympy.expand(expr * scale)
        if not scaled.free_symbols:
            if not scaled.is_Integer:
                return None
            all_terms.append(((((0,) * len(names)), int(scaled)),) if scaled != 0 else ())
            continue
        if not scaled.is_polynomial(*symbols):
            return None
        poly = sympy.Poly(scaled, *symbols)
        terms = tuple((tuple(e), int(c)) for e, c in poly.terms())
        if any(not sympy.Integer(c) == c for _, c in poly.terms()):
            return None
        all_terms.append(terms)
    source = _source([_factor(list(t), len(names)) for t in all_terms], names)
    return Kernel(names, source, tuple(int(s) for s in scales), tuple(all_terms))


def _symbol(exprs, name):
    for e in exprs:
        for s in e.free_symbols:
            if s.name == name:
                return s
    return sympy.Symbol(name)


# --- factoring ------------------------------------------------------------------------------------
# nodes: ("c", int) | ("x", index) | ("*", a, b) | ("+", a, b)


def _factor(terms: list[tuple[tuple[int, ...], int]], nvars: int):
    if not terms:
        return ("c", 0)
    g = math.gcd(*(c for _, c in terms))
    if g > 1 and len(terms) > 1:
        return ("*", _factor([(e, c // g) for e, c in terms], nvars), ("c", g))
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
    node = ("*", _factor(inner, nvars), ("x", best))
    return ("+", node, _factor(rest, nvars)) if rest else node


def _monomial(exponents: tuple[int, ...], coefficient: int):
    factors = [("x", i) for i, e in enumerate(exponents) for _ in range(e)]
    if not factors:
        return ("c", coefficient)
    node = factors[0]
    for f in factors[1:]:
        node = ("*", node, f)
    return ("*", node, ("c", coefficient)) if coefficient != 1 else node


# --- code -----------------------------------------------------------------------------------------


def _source(roots, names: tuple[str, ...]) -> str:
    uses: Counter = Counter()

    def count(node):
        uses[node] += 1
        if uses[node] == 1 and node[0] in "*+":
            count(node[1])
            count(node[2])

    for r in roots:
        count(r)
    args = [f"a{i}" for i in range(len(names))]
    lines = [f"def kernel({', '.join(args + ['out=None'])}):"]
    done: dict = {}
    counter = [0]

    def emit(node, last: int | None = None) -> tuple[str, bool]:
        """(text, owned): owned values are temporaries this kernel may overwrite."""
        if node in done:
            return done[node], False
        kind = node[0]
        if kind == "c":
            return repr(node[1]), False
        if kind == "x":
            return args[node[1]], False
        a, a_owned = emit(node[1])
        b, b_owned = emit(node[2])
        if b_owned and not a_owned:
            a, b, a_owned = b, a, True
        op = "multiply" if kind == "*" else "add"
        counter[0] += 1
        name = f"t{counter[0]}"
        if last is not None:
            lines.append(f"    {name} = _last(_np.{op}, {a}, {b}, {'True' if a_owned else 'False'}, out, {last})")
        elif a_owned:
            lines.append(f"    {name} = _inplace(_np.{op}, {a}, {b})")
        else:
            lines.append(f"    {name} = {a} {'*' if kind == '*' else '+'} {b}")
        if uses[node] > 1:
            done[node] = name
            return name, False
        return name, True

    results = []
    for k, r in enumerate(roots):
        text, _ = emit(r, last=k if r[0] in "*+" and uses[r] == 1 else None)
        if r[0] not in "*+" or uses[r] > 1:
            text = f"_store({text}, out, {k})"
        results.append(text)
    lines.append(f"    return ({', '.join(results)},)")
    return "\n".join(lines) + "\n"


def _inplace(ufunc, a, b):
    """a ⊕ b into a (a temporary of the kernel's own) where shape and dtype allow, else a new array."""
    if type(a) is np.ndarray and a.shape == np.broadcast_shapes(a.shape, getattr(b, "shape", ())) and np.result_type(a, b) == a.dtype:
        return ufunc(a, b, out=a)
    return ufunc(a, b) if type(a) is np.ndarray or type(b) is np.ndarray else (a * b if ufunc is np.multiply else a + b)


def _fits(target, a, b) -> bool:
    return (
        type(target) is np.ndarray
        and target.shape == np.broadcast_shapes(getattr(a, "shape", ()), getattr(b, "shape", ()))
        and np.can_cast(np.result_type(a, b), target.dtype, "same_kind")
    )


def _last(ufunc, a, b, a_owned, out, k):
    """The last operation of quantity k: straight into out[k] where given and alike."""
    if out is not None and out[k] is not None and _fits(out[k], a, b):
        return ufunc(a, b, out=out[k])
    return _inplace(ufunc, a, b) if a_owned else (a * b if ufunc is np.multiply else a + b)


def _store(value, out, k):
    if out is not None and out[k] is not None and type(out[k]) is np.ndarray:
        out[k][...] = value
        return out[k]
    return value


@lru_cache(maxsize=512)
def _from_source(source: str) -> Callable:
    namespace = {"_np": np, "_inplace": _inplace, "_last": _last, "_store": _store}
    exec(compile(source, "<symform kernel>", "exec"), namespace)  # noqa: S102: text generated above from integers and names a0..aN
    return namespace["kernel"]
