"""What a sweep evaluates: each quantity's expression with the swept sizes left free, compiled once to numpy (float64 or int64) or a generated kernel, exact evaluation where floats are not exact, and SweepResult, the columns a sweep returns."""

from __future__ import annotations

import weakref


_COMPILED: "weakref.WeakKeyDictionary[Model, dict]" = weakref.WeakKeyDictionary()

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import sympy

from ...engine.budget import quoted
from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import check_value, exact_value, numpy_modules
from ...engine.algebra.exact import exact_function
from ...engine.graph.model import Model, normalise_quantity
from .kernels import INT64_LIMIT, Kernel, polynomial_kernel


FLOAT_EXACT = 2**53  # every integer of smaller magnitude is a float64


BLOCK = 1 << 14  # points per block of a sweep: the columns' slices, the checks' scratch and the kernel's


# temporaries (about 2 MB for 9 columns) stay in a core's L2 cache between the checks and the kernel
DEFAULT_CHUNK = 1 << 16  # points per dask block of a lazy sweep (each block one task)


MEMORY_PREFIX = "memory."


class InexactFloatError(EvaluationError):
    """A float64 sweep reached values float64 cannot hold to the last digit."""


class InexactFloatWarning(UserWarning):
    """A float64 sweep reached values float64 cannot hold to the last digit."""


def quantity_expression(model: Model, name: str, *, swept: Iterable[str] = (), training: Any = None) -> sympy.Expr:
    """The expression of a quantity or a memory category (``memory.weights``, ``memory.total``).

    Conventions stay symbolic where they are swept, so ``grid={"causal": [...]}`` works.
    """
    swept = set(swept)
    if hasattr(training, "quantity_expression"):  # a fine-tuning step (symform.analysis.memory.finetune.FineTuneStep) counts its own
        return training.quantity_expression(model, name, swept)
    if name.startswith(MEMORY_PREFIX):
        return _memory_expression(model, name[len(MEMORY_PREFIX):], training)
    expr = model.expression(name, conventions=False).expr
    kept = {s: v for s, v in model.conventions.items() if s.name not in swept}
    return sympy.expand(expr.xreplace(kept))


def _memory_expression(model: Model, category: str, training: Any) -> sympy.Expr:
    from ..memory.memory import Training, training_expressions  # memory imports model: keep the import cheap

    categories, _, _ = training_expressions(model, training or Training())
    if category == "total":
        return sympy.expand(sum(categories.values(), sympy.Integer(0)))
    if category not in categories:
        raise EvaluationError(f"unknown memory category {category!r}; choose one of {', '.join(['total', *categories])} (as memory.NAME)")
    return categories[category]


def _quantity_name(name: str, training: Any = None) -> str:
    if hasattr(training, "quantity_name"):
        return training.quantity_name(name)
    if name.startswith(MEMORY_PREFIX):
        return name
    return normalise_quantity(name)


def _bind(model: Model, exprs: Sequence[sympy.Expr], swept: Sequence[str], fixed: Mapping[str, object]) -> list[sympy.Expr]:
    """Substitute every value not swept: ``fixed`` first, then the model's own sizes."""
    vocabulary = model.vocabulary
    values = {**{k: v for k, v in model.values.items() if k not in swept}, **{k: v for k, v in fixed.items()}}
    bound = {vocabulary[k]: check_value(k, v, vocabulary) for k, v in values.items() if k not in swept}
    out = [sympy.expand(e.xreplace(bound)) for e in exprs]
    missing = sorted({s.name for e in out for s in e.free_symbols} - set(swept))
    if missing:
        raise EvaluationError(f"no value for {', '.join(missing)}: give it in fixed= (e.g. fixed={{'{missing[0]}': ...}}) or sweep it")
    return out


def scale_to_integer(expr: sympy.Expr) -> int:
    """The smallest m with m·expr an integer at whole-number inputs: the lcm of the coefficients' denominators."""
    free = sorted(expr.free_symbols, key=lambda s: s.name)
    if free and expr.is_polynomial(*free):
        coefficients = sympy.Poly(expr, *free).coeffs()
    else:  # not a polynomial: the rational numbers it contains are the best guide there is
        coefficients = list(expr.atoms(sympy.Rational)) or [sympy.Integer(1)]
    return int(sympy.ilcm(*[sympy.Rational(c).q for c in coefficients], 1))


class IntegerOverflowError(EvaluationError):
    """int64 inputs whose results int64 cannot be shown to hold: refused rather than wrapped."""


@dataclass(frozen=True)
class Compiled:
    """One function for several quantities over the swept names: a factored, in-place kernel
    (:mod:`symform.analysis.sweeps.kernels`) where every quantity is a polynomial, else sympy's
    lambdified function with common subexpressions computed once."""

    quantities: tuple[str, ...]
    names: tuple[str, ...]
    expressions: tuple[sympy.Expr, ...]
    function: Callable
    kernel: Kernel | None = None

    @property
    def scales(self) -> tuple[int, ...]:
        return tuple(scale_to_integer(e) for e in self.expressions) if self.kernel is None else self.kernel.scales

    def __call__(self, *arrays):
        """A tuple of arrays, one per quantity, broadcast against the inputs; no conversion of the inputs.

        float64 inputs give float64; int64 numpy inputs give exact int64 (quantities with whole
        coefficients), refused with :class:`IntegerOverflowError` unless every value provably
        fits; dask arrays give dask arrays, block by block (``map_blocks``), nothing computed.
        """
        if any(_is_dask(a) for a in arrays):
            return _map_blocks(self, arrays)
        if self.kernel is None:
            results = self.function(*arrays)
        elif Kernel.uniform(arrays) and arrays[0].ndim:
            return self._uniform(arrays)
        else:
            if arrays and all(_is_integer(a) for a in arrays) and any(isinstance(a, (np.ndarray, np.integer)) for a in arrays):
                self.check_int64(arrays)  # Python ints alone never wrap: only numpy's int64 is checked
            results = self.kernel(*arrays)
            results = tuple(r if m == 1 else r / m for r, m in zip(results, self.kernel.scales))
        shaped = [a for a in arrays if _is_array(a)]
        if not shaped:
            return tuple(results)
        shape = tuple(np.broadcast_shapes(*(tuple(a.shape) for a in shaped)))
        return tuple(r if _is_array(r) and tuple(r.shape) == shape else r + _zeros_like(shaped) for r in results)

    def _uniform(self, arrays) -> tuple:
        """Inputs of one shape and dtype: the kernel's allocation-free form, the results its own arrays
        (reused for the temporaries, as a hand-written in-place version would)."""
        first = arrays[0]
        if first.dtype.kind == "i":
            self.check_int64(arrays)
        out = [np.empty_like(first) for _ in self.quantities]
        self.kernel.into(arrays, out, [np.empty_like(first) for _ in range(self.kernel.slots)])
        return tuple(r if m == 1 else r / m for r, m in zip(out, self.kernel.scales))

    def check_int64(self, arrays) -> None:
        """Refuse int64 inputs unless every result provably fits int64 (see kernels.Kernel.int64_bound)."""
        magnitudes = [max(abs(int(np.min(a))), abs(int(np.max(a)))) if np.size(a) else 0 for a in arrays]
        for q, bound in zip(self.quantities, self.kernel.int64_bound(magnitudes)):
            if bound >= INT64_LIMIT:
                raise IntegerOverflowError(
                    f"{q} may pass int64's range (up to {bound:.3g} >= 2**63) at these int64 inputs; "
                    "give float64 arrays, or sweep with exact=True for exact integers of any size"
                )


def _is_dask(x) -> bool:
    return hasattr(x, "__dask_graph__") and hasattr(x, "map_blocks")


def _is_integer(x) -> bool:
    if isinstance(x, np.ndarray) or isinstance(x, np.integer):
        return x.dtype.kind in "iu"
    return isinstance(x, int) and not isinstance(x, bool)


def _map_blocks(compiled: "Compiled", arrays) -> tuple:
    """Each quantity as a dask array: the compiled function on each block, where the block lives."""
    import dask.array as da

    arrays = [a if _is_dask(a) else da.asarray(a) for a in arrays]
    dtype = np.result_type(*(a.dtype for a in arrays))
    if dtype.kind not in "iu" or any(m != 1 for m in compiled.scales):
        dtype = np.dtype(np.float64)
    return tuple(da.map_blocks(_one_quantity, *arrays, compiled=compiled, k=k, dtype=dtype) for k in range(len(compiled.quantities)))


def _one_quantity(*blocks, compiled, k):
    return compiled(*blocks)[k]


def _is_array(x) -> bool:
    return hasattr(x, "shape") and getattr(x, "ndim", 0) > 0


def _zeros_like(arrays):
    """Zeros of the inputs' broadcast shape and kind (numpy, dask, ...): a quantity free of every
    swept name still comes back as a full array."""
    zero = arrays[0] * 0
    for a in arrays[1:]:
        zero = zero + a * 0
    return zero


@lru_cache(maxsize=256)
def _lambdified(exprs: tuple[sympy.Expr, ...], names: tuple[str, ...]) -> Callable:
    symbols = {s.name: s for e in exprs for s in e.free_symbols}
    args = [symbols.get(n, sympy.Symbol(n)) for n in names]
    # a tuple of expressions: one function, common subexpressions computed once for all of them
    return sympy.lambdify(args, exprs, modules=numpy_modules(), cse=True)


@lru_cache(maxsize=256)
def _kernel(exprs: tuple[sympy.Expr, ...], names: tuple[str, ...]) -> Kernel | None:
    return polynomial_kernel(exprs, names, [scale_to_integer(e) for e in exprs])


def compile_quantities(model: Model, quantities: Sequence[str] | str, names: Sequence[str], *, fixed: Mapping[str, object] | None = None, training: Any = None) -> Compiled:
    """One function of ``names`` returning every quantity, for numpy or dask arrays alike.

    ``names`` are swept; everything else is bound from ``fixed``, the model's sizes and the conventions.
    The result is kept per model: a second sweep of the same quantities does no symbolic work.
    """
    if not isinstance(quantities, (str, list, tuple)) or not all(isinstance(q, str) for q in quantities):
        raise EvaluationError(f"quantities are {quoted(quantities)}; give a name or a list of names (symform.quantity_names(), or memory.total)")
    quantities = (quantities,) if isinstance(quantities, str) else tuple(quantities)
    if not quantities:
        raise EvaluationError("no quantity to sweep; name at least one (symform.quantity_names(), or memory.total)")
    names = tuple(names)
    key = _cache_key(model, quantities, names, fixed, training)
    cached = _COMPILED.get(model, {}).get(key) if key is not None else None
    if cached is not None:
        return cached
    _check_names(model, names)
    keys = tuple(_quantity_name(q, training) for q in quantities)
    exprs = [quantity_expression(model, q, swept=names, training=training) for q in keys]
    bound = tuple(_bind(model, exprs, names, fixed or {}))
    kernel = _kernel(bound, names)
    compiled = Compiled(keys, names, bound, _lambdified(bound, names) if kernel is None else kernel, kernel)
    if key is not None:
        _COMPILED.setdefault(model, {})[key] = compiled
    return compiled


def _cache_key(model: Model, quantities, names, fixed, training):
    """What a compiled function depends on; None (no caching) where something is unhashable."""
    try:
        key = (quantities, names, tuple(sorted((fixed or {}).items())), training,
               tuple(sorted(model.values.items())), tuple(sorted((s.name, v) for s, v in model.conventions.items())))
        hash(key)
        return key
    except TypeError:
        return None


def _check_names(model: Model, names: Sequence[str]) -> None:
    known = set(model.vocabulary.names())
    for n in names:
        if n not in known:
            raise EvaluationError(f"cannot sweep {n!r}: not a symbol symform knows (see symform.vocabulary().names())")
    if len(set(names)) != len(names):
        raise EvaluationError(f"a name is swept twice: {', '.join(names)}")


def _exact_values(expr: sympy.Expr, names: tuple[str, ...], columns: Sequence[list[int]]) -> list:
    """expr at every row, exactly: the engine's generated function, else (no exact Python form, or a
    division by zero at a point) sympy's substitution, which words any refusal."""
    function = exact_function(expr)
    symbols = [sympy.Symbol(n, **_assumptions(expr, n)) for n in names]

    def by_sympy(row) -> object:
        return exact_value(expr, dict(zip(symbols, map(sympy.Integer, row))))

    if function is None:
        return [by_sympy(row) for row in zip(*columns)]
    out = []
    for row in zip(*columns):
        try:
            out.append(function(dict(zip(names, row))))
        except Exception:  # a point it cannot compute (a division by zero): sympy decides and words it
            out.append(by_sympy(row))
    return out


def _assumptions(expr: sympy.Expr, name: str) -> dict:
    for s in expr.free_symbols:
        if s.name == name:
            return s.assumptions0
    return {}


class SweepResult(dict):
    """Column name → numpy array: the swept inputs first, then one array per quantity.

    ``shape`` is the sweep's shape (one entry per axis); ``r.grid("params")``
    reshapes a column to it. ``to_pandas()`` gives a DataFrame where pandas is installed.
    """

    def __init__(self, columns: Mapping[str, np.ndarray], *, inputs: Sequence[str], quantities: Sequence[str], shape: tuple[int, ...], fixed: Mapping[str, object]):
        super().__init__(columns)
        self.inputs = tuple(inputs)
        self.quantities = tuple(quantities)
        self.shape = shape
        self.fixed = dict(fixed)

    def grid(self, column: str) -> np.ndarray:
        return self[column].reshape(self.shape)

    def to_pandas(self):
        try:
            import pandas
        except ImportError:
            raise EvaluationError("to_pandas() needs pandas (pip install pandas); the result is already a dict of numpy arrays") from None
        return pandas.DataFrame(dict(self))

    @property
    def points(self) -> int:
        return math.prod(self.shape)

    def rows(self) -> list[dict[str, object]]:
        return [{k: _plain(self[k][i]) for k in self} for i in range(self.points)]


def _plain(value: object) -> object:
    """A JSON-friendly number: Python int where whole, float otherwise."""
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else float(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < FLOAT_EXACT else value
