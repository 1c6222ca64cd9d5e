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

Where every input is an array of one shape and dtype (a sweep's block, a zipped
sweep's columns), a second form runs: every operation writes into one of a few
arrays the caller lends (``scratch``), reused as soon as its value is dead, and
each quantity's last operation into its result array, so that nothing is
allocated and no shape or dtype is looked at per operation. It performs the
same operations on the same operands, so its values are bit-identical.

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

from ...engine.algebra.horner import factor as _factor

INT64_LIMIT = 2**63


@dataclass(frozen=True)
class Kernel:
    """``m·q`` for several quantities over ``names``; ``scales`` are the m's, ``terms`` the scaled polynomials."""

    names: tuple[str, ...]
    source: str
    scales: tuple[int, ...]
    terms: tuple[tuple[tuple[tuple[int, ...], int], ...], ...]
    uniform_source: str = ""
    slots: int = 0
    constants: tuple[int, ...] = ()  # the uniform form's whole-number operands k0, k1, ..., bound per dtype
    _function: list = field(default_factory=list, compare=False, repr=False)

    @property
    def function(self) -> Callable:
        if not self._function:
            self._function.append(_from_source(self.source))
        return self._function[0]

    def into(self, arrays: Sequence[np.ndarray], out: Sequence[np.ndarray], scratch: Sequence[np.ndarray]) -> None:
        """``m·q`` for each quantity into ``out``: every input, result and scratch array (``slots`` of them)
        one ndarray of one shape and dtype (see :meth:`uniform`); nothing is allocated."""
        _uniform_function(self.uniform_source, arrays[0].dtype.char, self.constants)(*arrays, out=out, s=scratch)

    @staticmethod
    def uniform(arrays: Sequence) -> bool:
        """Whether the inputs allow :meth:`into`: ndarrays of one shape and one dtype, float64 or int64."""
        if not arrays:
            return False
        first = arrays[0]
        if type(first) is not np.ndarray or first.dtype not in _UNIFORM_DTYPES:
            return False
        shape, dtype = first.shape, first.dtype
        return all(type(a) is np.ndarray and a.shape == shape and a.dtype == dtype for a in arrays)

    def __getstate__(self):
        return {"names": self.names, "source": self.source, "scales": self.scales, "terms": self.terms, "uniform_source": self.uniform_source, "slots": self.slots, "constants": self.constants}

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
    roots = [_factor(list(t), len(names)) for t in all_terms]
    uniform_source, slots, constants = _uniform_source(roots, names)
    return Kernel(names, _source(roots, names), tuple(int(s) for s in scales), tuple(all_terms), uniform_source, slots, constants)


def _symbol(exprs, name):
    for e in exprs:
        for s in e.free_symbols:
            if s.name == name:
                return s
    return sympy.Symbol(name)


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


_UNIFORM_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))


def _uniform_source(roots, names: tuple[str, ...]) -> tuple[str, int, tuple[int, ...]]:
    """``kernel_into(a0, .., out, s)``: the operations of :func:`_source` (each distinct node once),
    each into ``out[k]`` or a scratch array ``s[i]``. Quantity k's result array holds its last
    value and, until then, any value dead by that point (the hand-written form's reuse); a scratch
    array is reused once its value is dead. Whole-number operands are names (``k0``, ...) bound
    per dtype (:func:`_uniform_function`), with the constants in the order of their names."""
    order: list = []
    seen: set = set()

    def visit(node):
        if node[0] in "*+" and node not in seen:
            visit(node[1])
            visit(node[2])
            seen.add(node)
            order.append(node)

    for r in roots:
        visit(r)
    position = {node: i for i, node in enumerate(order)}
    last_use = {node: i for i, node in enumerate(order)}
    for i, node in enumerate(order):
        for operand in node[1:]:
            last_use[operand] = i
    owner = {}  # node -> the quantity whose result array holds it
    for k, r in enumerate(roots):
        if r[0] in "*+":
            owner.setdefault(r, k)
    result_at = {k: position[r] for r, k in owner.items()}
    for r, k in owner.items():
        last_use[r] = len(order)  # a result stays
    args = [f"a{i}" for i in range(len(names))]
    where: dict = {}
    free = [f"out[{k}]" for k in sorted(result_at, key=result_at.get)]
    slots = 0
    lines = [f"def kernel_into({', '.join(args + ['out', 's'])}):"]
    constants: dict[int, str] = {}

    def text(node) -> str:
        if node[0] == "c":
            return constants.setdefault(node[1], f"k{len(constants)}")
        if node[0] == "x":
            return args[node[1]]
        return where[node]

    def fits(place: str, node) -> bool:
        return not place.startswith("out[") or result_at[int(place[4:-1])] >= last_use[node]

    for i, node in enumerate(order):
        a, b = text(node[1]), text(node[2])
        released = [where[o] for o in dict.fromkeys(node[1:]) if o in where and last_use[o] == i]
        free.extend(released)
        if node in owner:
            place = f"out[{owner[node]}]"
            free.remove(place)
        else:  # an operand's own array first: in place, still in the cache
            place = next((p for p in [*released, *free] if fits(p, node)), None)
            if place is None:
                place = f"s[{slots}]"
                slots += 1
            else:
                free.remove(place)
        where[node] = place
        lines.append(f"    _np.{'multiply' if node[0] == '*' else 'add'}({a}, {b}, out={place})")
    for k, r in enumerate(roots):
        if r[0] not in "*+" or owner[r] != k:
            lines.append(f"    out[{k}][...] = {text(r)}")
    return "\n".join(lines) + "\n", slots, tuple(constants)


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
def _from_source(source: str, name: str = "kernel") -> Callable:
    return _defined(source, name, {})


@lru_cache(maxsize=512)
def _uniform_function(source: str, dtype: str, constants: tuple[int, ...]) -> Callable:
    """The uniform form for arrays of ``dtype``: each constant a 0-d array of that dtype where that holds
    its value exactly (a Python int costs each ufunc call about 1 µs more to convert, the same value
    and so the same result), else the Python int itself."""
    return _defined(source, "kernel_into", {f"k{i}": _operand(c, np.dtype(dtype)) for i, c in enumerate(constants)})


def _operand(value: int, dtype: np.dtype):
    if dtype.kind == "f" and abs(value) <= 2**53:
        return np.array(float(value), dtype)
    if dtype.kind == "i" and -INT64_LIMIT <= value < INT64_LIMIT:
        return np.array(value, dtype)
    return value


def _defined(source: str, name: str, constants: dict) -> Callable:
    namespace = {"_np": np, "_inplace": _inplace, "_last": _last, "_store": _store, **constants}
    exec(compile(source, "<symform kernel>", "exec"), namespace)  # noqa: S102: text generated above from integers and names a0..aN, k0..kN
    return namespace[name]
