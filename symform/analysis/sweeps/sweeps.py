"""Sweeps: any quantity (or several, through one compiled function) over grids, zipped arrays and samples.

>>> import symform
>>> r = symform.sweep(symform.load("qwen3-8b"), ["params", "train_flops"],
...                   grid={"d_model": [2048, 4096], "n_layers": [16, 32]},
...                   fixed={"seq": 4096, "batch": 1, "tokens": 10**12}, inexact="allow")
>>> r["params"].shape
(4,)

Points are the cartesian product of the axes: every ``grid`` name is one axis;
the ``zip`` arrays together are one axis (their rows go together); a ``sample``
is one more zipped axis of ``n`` seeded random rows. Names not swept keep the
model's own sizes, the ``fixed`` values and the conventions in force.

Numbers are float64 by default. Every quantity symform counts is a polynomial
with rational coefficients in whole-number sizes, so ``q·m`` is an integer for
``m`` the common denominator of its coefficients (1 for most): float64 holds it
exactly while ``|q·m| < 2**53``. Past that, float64 keeps ~16 significant
digits but not every digit: by default the sweep warns (``InexactFloatWarning``),
``inexact="raise"`` raises ``InexactFloatError`` (an ``EvaluationError``) and
``inexact="allow"`` is silent. ``exact="int64"`` gives exact int64 arrays,
object-free, where every value provably fits (else ``IntegerOverflowError``);
``exact=True`` gives Python ints (Fractions where a value is not whole) in
object arrays, exactly: through int64 where that is proven exact, else a few µs
a point. docs/sweeps.md says how the proof goes.

The quantities compile to one factored, in-place kernel (:mod:`.kernels`); a sweep
runs it block by block (``chunk`` points) straight into the result arrays, each
block's inputs views of the swept columns, checked just before the kernel reads
them: memory is the result arrays plus one block's temporaries. ``progress=True``
shows a bar (tqdm if installed, else a plain line on stderr).

The compiled function (:func:`compile_quantities`) runs on numpy arrays and on
dask arrays (lazily, block by block); ``zip=`` dask arrays, and
:func:`symform.analysis.sweeps.lazy_sweeps.lazy_sweep` for points described rather than
given, keep a whole sweep lazy.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass
from fractions import Fraction
import weakref
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import sympy

from ...engine.budget import ARRAY_ELEMENTS, check_count, quoted
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.evaluate import check_value, exact_value, numpy_modules
from ...engine.algebra.exact import exact_function
from ...engine.graph.graph import BoundRequirement
from ...engine.graph.model import Model, failed_requirement, normalise_quantity
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


# --- expressions ---------------------------------------------------------------------------------


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


# --- compiling ------------------------------------------------------------------------------------


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


_COMPILED: "weakref.WeakKeyDictionary[Model, dict]" = weakref.WeakKeyDictionary()


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


# --- exact evaluation -----------------------------------------------------------------------------


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


# --- the points -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """Names that vary together, with their values as equal-length columns."""

    names: tuple[str, ...]
    columns: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.columns[0])


def _column(name: str, values: object) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype == object or array.dtype.kind in "iu":
        return array
    if array.dtype.kind == "f":
        return array  # finite or not: _validate's minimum and maximum say (nan and inf reach them)
    if array.dtype.kind == "b":
        raise EvaluationError(f"{name}: give numbers, not booleans")
    raise EvaluationError(f"{name}: values must be finite numbers, got dtype {array.dtype}")


def _values(kind: str, name: str, values: object) -> np.ndarray:
    """One name's values as a 1-D column: an array of more dimensions is refused (flattened, zip= would pair
    elements by memory order whatever the shapes, and the result would lose the shape)."""
    column = _column(name, values)
    if column.ndim > 1:
        raise EvaluationError(f"{kind} {name}: give a 1-D list of values, got an array of shape {column.shape} (flatten it with .ravel() first)")
    return column.ravel()


def _axes(grid, zipped, sample, n, seed) -> list[Axis]:
    axes = [Axis((k,), (_values("grid", k, v),)) for k, v in (grid or {}).items()]
    if zipped:
        columns = {k: _values("zip", k, v) for k, v in zipped.items()}
        lengths = {len(c) for c in columns.values()}
        if len(lengths) != 1:
            raise EvaluationError(f"zip= arrays must have one length; got {', '.join(f'{k}: {len(c)}' for k, c in columns.items())}")
        axes.append(Axis(tuple(columns), tuple(columns.values())))
    points = math.prod(len(a) for a in axes)
    check_count(points, ARRAY_ELEMENTS, "points in the grid", "ARRAY_ELEMENTS", "sweep fewer values per axis, or sample points (--sample with --n)")
    if sample:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EvaluationError("sample= needs n=, the number of random points (1 or more)")
        check_count(points * n, ARRAY_ELEMENTS, "points in the sweep", "ARRAY_ELEMENTS", "ask for fewer random points (--n)")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise EvaluationError(f"seed={quoted(seed)}: a seed is a whole number of 0 or more")
        rng = np.random.default_rng(seed)
        axes.append(Axis(tuple(sample), tuple(_draw(rng, k, spec, n) for k, spec in sample.items())))
    if any(len(a) == 0 for a in axes):
        raise EvaluationError("a sweep axis is empty: give at least one value per name")
    return axes


def _draw(rng: np.random.Generator, name: str, spec: object, n: int) -> np.ndarray:
    """(low, high): whole numbers uniform in [low, high]; a list: picks from it."""
    if isinstance(spec, tuple) and len(spec) == 2:
        low, high = spec
        if not (isinstance(low, int) and isinstance(high, int)) or low > high:
            raise EvaluationError(f"sample {name}={quoted(spec)}: a range is (low, high) whole numbers with low <= high")
        if not -(2**53) < low <= high < 2**53:
            raise EvaluationError(f"sample {name}={quoted(spec)}: sampled values must lie within ±2^53 (float64's whole numbers)")
        return rng.integers(low, high, n, endpoint=True, dtype=np.int64)
    choices = _values("sample", name, spec)
    if len(choices) == 0:
        raise EvaluationError(f"sample {name}: nothing to choose from")
    return rng.choice(choices, n)


def _validate(model: Model, axes: Sequence[Axis], exact: bool, extremes: dict | None = None) -> None:
    """Every value in each column within its symbol's domain; whole numbers below 2**53 for float64."""
    vocabulary = model.vocabulary
    validate_columns({n: vocabulary.entry(n).spec.domain for a in axes for n in a.names}, axes, exact, vocabulary, extremes)


def validate_columns(domains: Mapping[str, str], axes: Sequence[Axis], exact: bool, vocabulary=None, extremes: dict | None = None) -> None:
    """``extremes``, where given, receives each numeric column's least and greatest values by name."""
    for axis in axes:
        for name, column in zip(axis.names, axis.columns):
            domain = domains[name]
            if column.dtype == object:
                if vocabulary is None:
                    raise EvaluationError(f"{name}: give numeric arrays (int64 or float64), not Python objects")
                for v in column:  # object columns: Python ints or Fractions, checked one by one
                    check_value(name, v, vocabulary)
                continue
            low, high = column.min(), column.max()
            if extremes is not None:
                extremes[name] = (low, high)
            if column.dtype.kind == "f" and not (math.isfinite(low) and math.isfinite(high)):
                raise EvaluationError(f"{name}: values must be finite numbers, got {high if math.isfinite(low) else low}")
            if "integer" in domain and column.dtype.kind == "f" and not _whole(column):
                raise EvaluationError(f"{name} must be a whole number; some values are not")
            if (domain == "nonnegative_integer" and low < 0) or (domain != "nonnegative_integer" and low <= 0):
                raise EvaluationError(f"{name} must be {'0 or more' if domain == 'nonnegative_integer' else 'positive'}, got {low}")
            if not exact and max(abs(low), abs(high)) >= FLOAT_EXACT:
                raise InexactFloatError(f"{name} reaches {max(abs(low), abs(high)):.3g} >= 2**53, which float64 cannot hold exactly; pass exact=True")


PIECE = 1 << 16  # elements per piece of a check: its temporaries stay in the processor's cache


def _whole(column: np.ndarray) -> bool:
    size = min(PIECE, len(column))
    scratch, differs = np.empty(size), np.empty(size, dtype=bool)
    for start in range(0, len(column), PIECE):
        piece = column[start:start + PIECE]
        n = len(piece)
        np.trunc(piece, out=scratch[:n])
        if np.not_equal(scratch[:n], piece, out=differs[:n]).any():
            return False
    return True


REQUIREMENT_POINTS = 10**7  # a requirement over more combinations of its swept sizes is checked on the model's own sizes only


@dataclass(frozen=True)
class Relation:
    """A requirement left over the swept names once everything else is bound."""

    relation: sympy.Basic
    text: str
    why: str
    # what words a failure as the model's own checks word it: the model, the requirement where it is bound,
    # the values of its names that are not swept, the arguments of the part that declares it
    model: str = ""
    bound: BoundRequirement | None = None
    context: tuple = ()
    args: tuple = ()

    def failure(self, point: Mapping[sympy.Symbol, object]) -> str:
        """The one-line message of Model's checks, at a point where the requirement fails."""
        if self.bound is None:
            return f"{self.text} does not hold at {', '.join(f'{s.name}={v}' for s, v in point.items())}: {self.why}"
        return failed_requirement(self.model, self.bound, {**dict(self.context), **{s: sympy.sympify(v) for s, v in point.items()}}, dict(self.args))


def requirement_relations(model: Model, swept: Sequence[str], fixed: Mapping[str, object]) -> list[Relation]:
    """The components' requirements (heads that divide, top_k ≤ n_experts) over the swept names;
    one that fails at the fixed sizes alone is refused here."""
    # the model's conventions too: its media settings (images and their size) decide how many of seq's tokens they take
    known = {**{s.name: v for s, v in model.conventions.items()}, **model.values, **fixed}
    out = []
    graph = model.graph()
    for bound in graph.requirements:
        context = {s: sympy.sympify(known[s.name]) for s in bound.relation.free_symbols if s.name in known and s.name not in swept}
        relation = bound.relation.xreplace(context)
        args = graph.graph.nodes[bound.path]["args"]
        if relation in (sympy.true, sympy.false) or not relation.free_symbols:
            if relation == sympy.false:
                raise ConfigError(failed_requirement(model.name, bound, context, args))
            continue
        if any(s.name not in known and s.name not in swept for s in relation.free_symbols):
            continue
        out.append(Relation(relation, bound.requirement.text, bound.requirement.why, model.name, bound, tuple(context.items()), tuple(args.items())))
    return out


def _check_requirements(model: Model, axes: Sequence[Axis], fixed: Mapping[str, object]) -> None:
    """Every point must satisfy the components' requirements: each is checked over the
    combinations of the axes it depends on, not the whole sweep."""
    check_relations(requirement_relations(model, [n for a in axes for n in a.names], fixed), axes)


def check_relations(relations: Sequence[Relation], axes: Sequence[Axis]) -> None:
    for r in relations:
        involved = [a for a in axes if any(s.name in a.names for s in r.relation.free_symbols)]
        if math.prod(len(a) for a in involved) > REQUIREMENT_POINTS:
            continue
        symbols = sorted(r.relation.free_symbols, key=lambda s: s.name)
        values = _relation_inputs(involved, [s.name for s in symbols])
        holds = np.broadcast_to(_relation(r.relation, tuple(symbols))(*(values[s.name] for s in symbols)), tuple(len(a) for a in involved))
        if not holds.all():
            first = np.unravel_index(int(np.argmin(holds)), holds.shape)
            point = {s: _plain(_axis_of(involved, s.name)[1][first[_axis_of(involved, s.name)[0]]]) for s in symbols}
            raise ConfigError(r.failure(point))



@lru_cache(maxsize=256)
def _relation(relation, symbols):
    return sympy.lambdify(symbols, relation, modules=numpy_modules({"mod": _mod, "Mod": _mod}))


def _mod(a, b):
    """a mod b; for whole float64 values 0 <= a < 2**53 and b > 0 as a - floor(a/b)·b, exact there
    (a/b rounds to a whole number only when b divides a) and several times faster than fmod."""
    if isinstance(a, np.ndarray) and a.dtype == np.float64 and np.size(a) and np.size(b):
        if 0 <= a.min() and a.max() < FLOAT_EXACT and np.min(b) > 0:
            return a - np.floor(a / b) * b
    return np.mod(a, b)


def _axis_of(axes: Sequence[Axis], name: str) -> tuple[int, np.ndarray]:
    for i, a in enumerate(axes):
        if name in a.names:
            return i, a.columns[a.names.index(name)]
    raise KeyError(name)


def _relation_inputs(axes: Sequence[Axis], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Each name's column shaped to broadcast over the axes involved (no copies)."""
    out = {}
    for name in names:
        i, column = _axis_of(axes, name)
        out[name] = column.reshape((1,) * i + (-1,) + (1,) * (len(axes) - i - 1))
    return out


def _swept(axes: Sequence[Axis], name: str) -> bool:
    return any(name in a.names for a in axes)


@dataclass(frozen=True)
class Block:
    """Points start..stop-1 (the last axis fastest) as a box: scalars for the leading axes,
    a slice of axis ``axis``, every later axis whole."""

    start: int
    stop: int
    prefix: tuple[int, ...]
    axis: int
    low: int
    high: int
    shape: tuple[int, ...]


def split_axis(shape: tuple[int, ...], chunk: int) -> int:
    """The axis that blocks slice: the first whose later axes fit in one chunk together."""
    return next(d for d in range(len(shape)) if math.prod(shape[d + 1:]) <= chunk or d == len(shape) - 1)


class _Checks:
    """Domains, whole numbers and requirements: the axis the blocks slice is checked a block at a time
    (its slice still in the processor's cache when the kernel reads it), every other axis once up front."""

    def __init__(self, model: Model, axes: Sequence[Axis], fixed: Mapping[str, object], exact: bool, chunk: int):
        shape = tuple(len(a) for a in axes)
        self.axes, self.exact = list(axes), exact
        self.vocabulary = model.vocabulary
        self.domains = {n: self.vocabulary.entry(n).spec.domain for a in axes for n in a.names}
        relations = requirement_relations(model, [n for a in axes for n in a.names], fixed)
        self.split = split_axis(shape, chunk) if axes else None
        if self.split is None:
            self.relations = []
            return
        others = [a for i, a in enumerate(axes) if i != self.split]
        validate_columns(self.domains, others, exact, self.vocabulary)
        names = set(axes[self.split].names)
        check_relations([r for r in relations if not {s.name for s in r.relation.free_symbols} & names], others)
        self.relations = [r for r in relations if {s.name for s in r.relation.free_symbols} & names]

        self.screen = _Screen.of(axes[self.split], self.domains, self.relations, exact, min(chunk, len(axes[self.split])))
        self.unscreened = [r for r in self.relations if self.screen is None or r not in self.screen.relations]

    def block(self, block: "Block") -> list[float] | None:
        """Check the block's slice of the sliced axis; its columns' greatest values where the screen passed it, else None."""
        if self.split is None or any(block.prefix):  # later prefixes see the same slices again
            return None
        return self.slice(block.low, block.high)

    def slice(self, low: int, high: int) -> list[float] | None:
        """Check rows low..high-1 of the sliced axis; as :meth:`block`."""
        axis = self.axes[self.split]
        columns = tuple(c[low:high] for c in axis.columns)
        if self.screen is not None and self.screen.passes(columns):
            if self.unscreened:
                check_relations(self.unscreened, self._with(Axis(axis.names, columns)))
            return self.screen.greatest
        piece = Axis(axis.names, columns)
        validate_columns(self.domains, [piece], self.exact, self.vocabulary)
        check_relations(self.relations, self._with(piece))
        return None

    def _with(self, piece: Axis) -> list[Axis]:
        return [piece if i == self.split else a for i, a in enumerate(self.axes)]


_LEAST = {"positive_integer": 1.0, "nonnegative_integer": 0.0, "positive_rational": float(np.nextafter(0.0, 1.0))}
_GREATEST = float(FLOAT_EXACT - 1)  # every float64 below 2**53 is at most this


class _Screen:
    """Whether a block of the sliced axis certainly passes its checks, in few passes over it: per float64
    column its least and greatest values (which NaN fails) and, for whole-number domains, trunc(x) == x;
    per integer column its least and greatest; each requirement ``b divides a`` (a a float64 column, b
    one or a whole number below 2**53: d_head even) as a/b == trunc(a/b), exact for whole 0 <= a < 2**53
    and b >= 1 (a wrong remainder would leave a/b at least 1/b from every integer, farther than its
    rounding error a/b·2**-53 < 1/b).
    Anything it cannot vouch for, the full checks decide and word."""

    def __init__(self, columns: list[tuple[int, float, bool]], relations: list[tuple["Relation", int, int]], size: int):
        self.columns = columns  # (index in the axis, least value, whole numbers required)
        self.divides = relations  # (relation, index of a, index of b or the divisor itself as a float)
        self.relations = [r for r, _, _ in relations]
        self.real, self.other = np.empty(size), np.empty(size)
        # one row per test of whole numbers (quotients, then columns): all of them are reduced at once
        self.flags = np.empty((sum(whole for _, _, whole in columns) + len(relations), size), dtype=bool)
        self.greatest = [0.0] * len(columns)  # each column's greatest value in the block last passed

    @classmethod
    def of(cls, axis: Axis, domains: Mapping[str, str], relations: Sequence["Relation"], exact: bool, size: int) -> "_Screen | None":
        if exact:
            return None
        divides = []
        for r in relations:
            ab = _divides(r.relation, axis, domains)
            if ab is not None:
                divides.append((r, *ab))
        # a/b whole, b whole and 1 <= a < 2**53 imply a whole: a fraction of a would leave a/b
        # at least ulp(a)/b from every integer, farther than the quotient's rounding error.
        # Every b keeps its own test, so no chain of such proofs rests on an unchecked column.
        denominators = {b for _, _, b in divides if type(b) is int}
        implied = {a for _, a, _ in divides if domains[axis.names[a]] == "positive_integer" and a not in denominators}
        columns = []
        for i, (name, column) in enumerate(zip(axis.names, axis.columns)):
            domain = domains[name]
            if domain not in _LEAST or column.dtype not in (np.float64, np.int64):
                return None
            columns.append((i, _LEAST[domain], "integer" in domain and column.dtype == np.float64 and i not in implied))
        return cls(columns, divides, size)

    def passes(self, columns: Sequence[np.ndarray]) -> bool:
        # a column's first pass reads it from memory: the passes that compute more go first (the
        # quotients read two columns at once), the least and greatest values then find it in the cache
        n = len(columns[0]) if columns else 0
        real, other, flags = self.real[:n], self.other[:n], self.flags[:, :n]
        row = 0
        if self.divides:
            with np.errstate(all="ignore"):  # b < 1 is refused below, with every column's range
                for _, a, b in self.divides:
                    np.divide(columns[a], columns[b] if type(b) is int else b, out=real)
                    np.trunc(real, out=other)
                    np.equal(real, other, out=flags[row])
                    row += 1
        greatest = self.greatest
        for i, least, whole in self.columns:
            column = columns[i]
            if whole:
                np.trunc(column, out=real)
                np.equal(real, column, out=flags[row])
                row += 1
            high = _greatest(column)
            if not (least <= _least(column) and high <= _GREATEST):
                return False
            greatest[i] = high
        return bool(_all(flags, axis=None)) if row and n else True


_greatest, _least = np.maximum.reduce, np.minimum.reduce
_all = np.logical_and.reduce


def _divides(relation: sympy.Basic, axis: Axis, domains: Mapping[str, str]) -> tuple[int, int | float] | None:
    """(i, j) where ``relation`` is ``Mod(a, b) == 0`` for float64 columns i, j of whole numbers, b >= 1;
    (i, b) for a whole number b, 1 <= b < 2**53, as a float."""
    if not (isinstance(relation, sympy.Eq) and relation.rhs == 0 and isinstance(relation.lhs, sympy.Mod)):
        return None
    a, b = relation.lhs.args
    if not (a.is_Symbol and a.name in axis.names) or domains[a.name] not in ("positive_integer", "nonnegative_integer"):
        return None
    i = axis.names.index(a.name)
    if axis.columns[i].dtype != np.float64:
        return None
    if b.is_Integer and 1 <= b < FLOAT_EXACT:
        return i, float(b)
    if not (b.is_Symbol and b.name in axis.names) or domains[b.name] != "positive_integer":
        return None
    j = axis.names.index(b.name)
    return (i, j) if axis.columns[j].dtype == np.float64 else None


def _blocks(shape: tuple[int, ...], chunk: int):
    if not shape:
        yield Block(0, 1, (), 0, 0, 1, ())
        return
    axis = split_axis(shape, chunk)
    inner = math.prod(shape[axis + 1:])
    step = max(1, chunk // inner)
    for prefix in np.ndindex(*shape[:axis]):
        base = (np.ravel_multi_index(prefix, shape[:axis]) if prefix else 0) * shape[axis] * inner
        for low in range(0, shape[axis], step):
            high = min(low + step, shape[axis])
            yield Block(base + low * inner, base + high * inner, prefix, axis, low, high, (high - low,) + shape[axis + 1:])


def _block_inputs(axes: Sequence[Axis], block: Block, columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each swept name's values over the block, shaped to broadcast to ``block.shape`` (views, no copies)."""
    out = {}
    for i, axis in enumerate(axes):
        for name in axis.names:
            column = columns[name]
            if i < block.axis:
                out[name] = column[block.prefix[i]]
            elif i == block.axis:
                out[name] = column[block.low:block.high].reshape((-1,) + (1,) * (len(axes) - i - 1))
            else:
                out[name] = column.reshape((-1,) + (1,) * (len(axes) - i - 1))
    return out


# --- the result -----------------------------------------------------------------------------------


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


# --- the sweep ------------------------------------------------------------------------------------


def sweep(
    model: Model,
    quantities: Sequence[str] | str,
    *,
    grid: Mapping[str, Sequence] | None = None,
    zip: Mapping[str, Sequence] | None = None,
    sample: Mapping[str, object] | None = None,
    n: int | None = None,
    seed: int = 0,
    fixed: Mapping[str, object] | None = None,
    exact: bool | str = False,
    inexact: str = "warn",
    chunk: int = BLOCK,
    progress: bool = False,
    inputs: bool = True,
    training: Any = None,
) -> SweepResult:
    """Evaluate quantities at every point of a sweep; a dict of numpy arrays (:class:`SweepResult`).

    ``quantities``: names of :func:`symform.quantity_names` and memory categories
    ``memory.weights`` … ``memory.total`` (a training step, ``training=`` a
    ``symform.analysis.memory.memory.Training``). ``grid``: name → values, each its own axis of ``result.shape`` (the columns are flat, one entry a point; ``result.grid(name)`` gives one in that shape).
    ``zip``: name → equal-length arrays, one axis. ``sample``: name → ``(low, high)``
    (whole numbers, inclusive) or a list to pick from, ``n`` random rows from ``seed``.
    ``inexact``: ``"warn"`` (default), ``"raise"`` or ``"allow"``, for float64 values
    at or past 2**53 (see the module docstring). ``inputs=False`` leaves the swept
    inputs out of the result (less memory for very large sweeps).
    ``exact``: ``False`` (float64), ``True`` (Python ints and Fractions in object arrays)
    or ``"int64"`` (exact int64 arrays, refused with :class:`IntegerOverflowError` unless
    every value provably fits). ``zip=`` dask arrays give a lazy result
    (:func:`symform.analysis.sweeps.lazy_sweeps.lazy_sweep`).
    """
    if zip and any(_is_dask(v) for v in zip.values()):
        from .lazy_sweeps import lazy_sweep

        return lazy_sweep(model, quantities, grid=grid, zip=zip, sample=sample, n=n, seed=seed, fixed=fixed, chunk=chunk, training=training)
    if exact not in (False, True, "int64"):
        raise EvaluationError(f"exact={exact!r}; choose False, True or 'int64'")
    if inexact not in ("warn", "raise", "allow"):
        raise EvaluationError(f"inexact={inexact!r}; choose 'warn', 'raise' or 'allow'")
    if chunk < 1:
        raise EvaluationError("chunk must be 1 or more points")
    axes = _axes(grid, zip, sample, n, seed)
    names = tuple(name for axis in axes for name in axis.names)
    fixed = dict(fixed or {})
    overlap = sorted(set(names) & set(fixed))
    if overlap:
        raise EvaluationError(f"{overlap[0]} is both swept and fixed; give it in one place")
    compiled = compile_quantities(model, quantities, names, fixed=fixed, training=training)
    shape = tuple(len(a) for a in axes)
    total = math.prod(shape)
    if exact is False:
        columns = _run_float(compiled, axes, shape, chunk, progress, inexact, _Checks(model, axes, fixed, False, chunk))
    else:
        extremes: dict = {}  # read once: the int64 proof needs the magnitudes the checks find
        _validate(model, axes, True, extremes)
        _check_requirements(model, axes, fixed)
        columns = _run_int64(compiled, axes, shape, chunk, progress, strict=exact == "int64", extremes=extremes)
        if columns is None:
            columns = _run_exact(compiled, axes, total, chunk, progress)
    if inputs:
        columns = {**_input_columns(axes, shape, chunk), **columns}
    return SweepResult(columns, inputs=names if inputs else (), quantities=compiled.quantities, shape=shape, fixed=fixed)


def _input_columns(axes: Sequence[Axis], shape: tuple[int, ...], chunk: int) -> dict[str, np.ndarray]:
    """The swept inputs at every point: the columns themselves (read-only) for one axis, else filled block by block."""
    if len(axes) == 1:
        out = {}
        for name, column in zip(axes[0].names, axes[0].columns):
            view = column.view()
            view.flags.writeable = False
            out[name] = view
        return out
    total = math.prod(shape)
    out = {name: np.empty(total, dtype=column.dtype) for axis in axes for name, column in zip(axis.names, axis.columns)}
    sources = {name: column for axis in axes for name, column in zip(axis.names, axis.columns)}
    for block in _blocks(shape, chunk):
        for name, values in _block_inputs(axes, block, sources).items():
            out[name][block.start:block.stop].reshape(block.shape)[...] = values
    return out


def _evaluate_into(compiled: Compiled, arrays: Sequence, targets: Sequence[np.ndarray], divide: bool, block: Block, scratch: Sequence[np.ndarray]) -> None:
    """Every quantity at the block's points into ``targets`` (the result arrays' slices); inputs that
    fill the block, of the results' dtype, run the kernel's allocation-free form with ``scratch``."""
    if compiled.kernel is None:
        results = compiled.function(*arrays)
        for target, values in zip(targets, results):
            target[...] = values
        return
    if Kernel.uniform(arrays) and arrays[0].shape == block.shape and arrays[0].dtype == targets[0].dtype:
        size = block.stop - block.start
        compiled.kernel.into(arrays, targets, [s[:size].reshape(block.shape) for s in scratch])
        results = targets
    else:
        results = compiled.kernel(*arrays, out=targets)
    for target, values, scale in zip(targets, results, compiled.kernel.scales):
        if values is not target:
            target[...] = values
        if divide and scale != 1:
            np.divide(target, scale, out=target)


def _run_float(compiled: Compiled, axes, shape, chunk, progress, inexact, checks: _Checks) -> dict[str, np.ndarray]:
    total = math.prod(shape)
    columns = {q: np.empty(total, dtype=np.float64) for q in compiled.quantities}
    sources = {name: column for axis in axes for name, column in zip(axis.names, axis.columns)}
    worst = {q: 0.0 for q in compiled.quantities}
    kernel = compiled.kernel
    scratch = [np.empty(min(chunk, total)) for _ in range(kernel.slots)] if kernel is not None else []
    inputs = _kernel_inputs(axes, sources, compiled.names, np.float64)
    bounds = _ResultBounds(compiled, axes, checks, inexact)
    with _Progress(total, progress) as bar, np.errstate(all="ignore"):  # a value past float64's range is refused below, not warned about
        if len(axes) == 1 and kernel is not None and all(c.dtype == np.float64 for c in axes[0].columns):
            _run_slices(compiled, axes[0], columns, scratch, chunk, checks, bounds, worst, bar)
        else:
            for block in _blocks(shape, chunk):
                greatest = checks.block(block)
                targets = [columns[q][block.start:block.stop].reshape(block.shape) for q in compiled.quantities]
                _evaluate_into(compiled, inputs(block), targets, divide=True, block=block, scratch=scratch)
                _scan_results(compiled, bounds.unproven(greatest), targets, worst)
                bar.update(block.stop - block.start)
    _check_range(worst, dict(zip(compiled.quantities, compiled.scales)), inexact)
    return columns


def _run_slices(compiled: Compiled, axis: Axis, columns, scratch, chunk, checks: _Checks, bounds: "_ResultBounds", worst, bar) -> None:
    """One axis of float64 columns (a zip, most often): each block's inputs are plain slices, checked
    and then read by the kernel's allocation-free form while still in the cache, its results written
    straight into the result arrays' slices; no per-block shapes, conversions or dispatch."""
    kernel, total = compiled.kernel, len(axis)
    ordered = [axis.columns[axis.names.index(n)] for n in compiled.names]
    results = [columns[q] for q in compiled.quantities]
    scaled = [(k, m) for k, m in enumerate(kernel.scales) if m != 1]
    for low in range(0, total, chunk):
        high = min(low + chunk, total)
        greatest = checks.slice(low, high)
        targets = [r[low:high] for r in results]
        kernel.into([c[low:high] for c in ordered], targets, [s[:high - low] for s in scratch])
        for k, m in scaled:
            np.divide(targets[k], m, out=targets[k])
        _scan_results(compiled, bounds.unproven(greatest), targets, worst)
        bar.update(high - low)


def _scan_results(compiled: Compiled, unproven: Sequence[int], targets: Sequence[np.ndarray], worst: dict[str, float]) -> None:
    """The least and greatest values of the quantities not proven finite and exact: refused where
    not finite, the greatest magnitude kept for the 2**53 warning."""
    for k in unproven:
        q, target = compiled.quantities[k], targets[k]
        high, low = float(np.maximum.reduce(target, axis=None)), float(np.minimum.reduce(target, axis=None))
        if not (math.isfinite(high) and math.isfinite(low)):
            raise EvaluationError(f"{q} is past float64's range (or undefined) at some points; sweep with exact=True (--exact) or smaller sizes")
        worst[q] = max(worst[q], high, -low)


def _kernel_inputs(axes: Sequence[Axis], sources: Mapping[str, np.ndarray], names: Sequence[str], dtype) -> Callable[[Block], list]:
    """A block's kernel arguments, of ``dtype``, in the order of ``names``: for one axis, slices of its columns."""
    if len(axes) != 1:
        def arrays(block: Block) -> list:
            values = _block_inputs(axes, block, sources)
            return [np.asarray(values[n], dtype=dtype) for n in names]
        return arrays
    ordered = [sources[n] for n in names]

    def sliced(block: Block) -> list:
        low, high = block.low, block.high
        return [c[low:high] if c.dtype == dtype else np.asarray(c[low:high], dtype=dtype) for c in ordered]
    return sliced


FINITE_BOUND = 2**1000  # far below float64's greatest (~2**1024), whatever rounding a kernel's operations add


class _ResultBounds:
    """Which quantities' blocks need their least and greatest values: none whose values the inputs' greatest
    values already prove finite (``inexact="allow"``), or finite and below 2**53/m (nothing to warn of).

    Every array the kernel computes is, by the nested form's construction (engine/algebra/horner.py: whole factors
    and variables pulled out of sums of the polynomial's terms), a sum of some of the scaled polynomial's terms
    divided by a product of variables and a whole number; at inputs of magnitude at most M >= 1 it is at most
    the polynomial with every coefficient made positive, at M (Kernel.int64_bound). Each float64 operation adds
    a relative error of at most 2**-53, so a bound B with 2B < 2**53 keeps every computed value below 2**53
    (exact, where the inputs are whole), and B < 2**1000 keeps it finite. Magnitudes are rounded up to
    powers of two, so that a new bound is worked out only when a block reaches past every earlier one."""

    def __init__(self, compiled: Compiled, axes: Sequence[Axis], checks: _Checks, inexact: str):
        self.all = tuple(range(len(compiled.quantities)))
        self.kernel, self.limit = compiled.kernel, (FINITE_BOUND if inexact == "allow" else FLOAT_EXACT // 2)
        self.split: list[tuple[int, int]] = []  # (argument, column of the sliced axis)
        self.magnitudes: list[int] = []
        self.pending = self.all
        if self.kernel is None or checks.split is None or getattr(checks, "screen", None) is None:
            self.kernel = None
            return
        for k, name in enumerate(compiled.names):
            i, column = _axis_of(axes, name)
            if i == checks.split:
                self.split.append((k, axes[i].names.index(name)))
                self.magnitudes.append(0)
            elif column.dtype in (np.float64, np.int64) and len(column):  # checked finite and in its domain up front
                self.magnitudes.append(_power_of_two(max(abs(column.min()), abs(column.max()))))
            else:
                self.kernel = None
                return

    def unproven(self, greatest: Sequence | None) -> Sequence[int]:
        """The quantities whose values in this block must be looked at; ``greatest``: the sliced axis's
        greatest values in the block (None: not known)."""
        if greatest is None or self.kernel is None:
            return self.all
        magnitudes = self.magnitudes
        if any(greatest[i] > magnitudes[k] for k, i in self.split):
            for k, i in self.split:
                magnitudes[k] = max(magnitudes[k], _power_of_two(greatest[i]))
            self.pending = tuple(q for q, bound in enumerate(self.kernel.int64_bound(magnitudes)) if not bound < self.limit)
        return self.pending


def _power_of_two(value) -> int:
    """The least power of two above ``value`` (1 or more): an upper bound of any value at most ``value``."""
    return 1 << int(value).bit_length()


def _run_int64(compiled: Compiled, axes, shape, chunk, progress, *, strict: bool, extremes: Mapping | None = None) -> dict[str, np.ndarray] | None:
    """Exact int64 arrays, object-free, where every value provably fits (kernels.Kernel.int64_bound);
    else None (exact=True goes on to Python ints) or IntegerOverflowError (exact="int64")."""
    why = _int64_refusal(compiled, axes, extremes or {})
    if why:
        if strict:
            raise IntegerOverflowError(f"{why}; sweep with exact=True for exact integers of any size")
        return None
    total = math.prod(shape)
    columns = {q: np.empty(total, dtype=np.int64) for q in compiled.quantities}
    sources = {name: column.astype(np.int64, copy=False) for axis in axes for name, column in zip(axis.names, axis.columns)}
    scratch = [np.empty(min(chunk, total), dtype=np.int64) for _ in range(compiled.kernel.slots)]
    with _Progress(total, progress) as bar:
        for block in _blocks(shape, chunk):
            values = _block_inputs(axes, block, sources)
            targets = [columns[q][block.start:block.stop].reshape(block.shape) for q in compiled.quantities]
            _evaluate_into(compiled, [values[n] for n in compiled.names], targets, divide=False, block=block, scratch=scratch)
            bar.update(block.stop - block.start)
    for q, scale in zip(compiled.quantities, compiled.kernel.scales):
        if scale != 1:
            if np.any(columns[q] % scale):
                if strict:
                    raise EvaluationError(f"{q} is not a whole number at some points (a multiple of 1/{scale}); sweep with exact=True for Fractions")
                return None
            columns[q] //= scale
    if strict:
        return columns
    return {q: v.astype(object) for q, v in columns.items()}  # Python ints, as exact=True promises


def _int64_refusal(compiled: Compiled, axes: Sequence[Axis], extremes: Mapping) -> str:
    """Why the int64 path cannot be proven exact here ('' when it can)."""
    if compiled.kernel is None:
        return "a quantity is no polynomial in the swept names, so int64 cannot be proven exact"
    magnitudes = []
    for name in compiled.names:
        column = next(c for a in axes for n, c in zip(a.names, a.columns) if n == name)
        if column.dtype == object or (column.dtype.kind == "f" and not _whole(column)):
            return f"{name} has values that are not whole numbers"
        low, high = extremes[name] if name in extremes else (column.min(), column.max()) if len(column) else (0, 0)
        magnitudes.append(max(abs(int(low)), abs(int(high))))
    for q, bound in zip(compiled.quantities, compiled.kernel.int64_bound(magnitudes)):
        if bound >= INT64_LIMIT:
            return f"{q} may reach {bound:.3g} >= 2**63, past int64's range"
    return ""


def _check_range(worst: Mapping[str, float], scales: Mapping[str, int], inexact: str) -> None:
    """float64 holds integers exactly below 2**53 (multiples of 1/m below 2**53/m); past that, say so (or raise) and name the way out."""
    over = {q: v for q, v in worst.items() if not v < FLOAT_EXACT / scales[q]}
    if not over or inexact == "allow":
        return

    def reach(q: str, v: float) -> str:
        m = scales[q]
        return f"{q} reaches {v:.3g}" + (f" (a multiple of 1/{m}: exact below 2**53/{m} ≈ {FLOAT_EXACT / m:.2g})" if m != 1 else "")

    detail = ", ".join(reach(q, v) for q, v in over.items())
    message = (
        f"{detail}, at or past 2**53 ≈ 9.0e15: float64 keeps about 16 significant digits there, not every digit; "
        "pass exact=True for exact integers (object arrays; slower, for small sweeps) or inexact='allow' if 16 digits are enough"
    )
    if inexact == "raise":
        raise InexactFloatError(message)
    warnings.warn(message, InexactFloatWarning, stacklevel=4)


def _run_exact(compiled: Compiled, axes, total, chunk, progress) -> dict[str, np.ndarray]:
    columns = {q: np.empty(total, dtype=object) for q in compiled.quantities}
    shape = tuple(len(a) for a in axes)
    with _Progress(total, progress) as bar:
        for start in range(0, total, chunk):
            stop = min(start + chunk, total)
            index = np.unravel_index(np.arange(start, stop, dtype=np.int64), shape) if axes else ()
            points = {name: column[i] for axis, i in zip(axes, index) for name, column in zip(axis.names, axis.columns)}
            # Python ints (not int64 or float64) so that products never wrap or round
            lists = [[_exact_number(v) for v in points[n].tolist()] for n in compiled.names]
            for q, expr in zip(compiled.quantities, compiled.expressions):
                values = _exact_values(expr, compiled.names, lists) if lists else [exact_value(expr, {})] * (stop - start)
                columns[q][start:stop] = values
            bar.update(stop - start)
    return columns


def _exact_number(v):
    if isinstance(v, float):
        return int(v) if v.is_integer() else Fraction(v)
    return v


# --- progress -------------------------------------------------------------------------------------


class _Progress:
    """tqdm where installed, else a line on stderr rewritten in place; nothing unless asked."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.bar = total, enabled, 0, None

    def __enter__(self):
        if self.enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=self.total, unit="pt", unit_scale=True, desc="sweep", file=sys.stderr)
            except ImportError:
                self.bar = None
        return self

    def update(self, k: int) -> None:
        self.done += k
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(k)
        else:
            print(f"\rsweep: {self.done:,}/{self.total:,} points ({self.done / self.total:.0%})", end="", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(file=sys.stderr)
        return False


# --- command line ----------------------------------------------------------------------------------
