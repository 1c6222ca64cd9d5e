"""The points a sweep visits: axes from a grid, zipped lists or random samples, their values checked against each size's domain, and the model's requirements (heads divide, ...) checked over every point, block by block."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
import sympy

from ...engine.budget import ARRAY_ELEMENTS, check_count, quoted
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.evaluate import above_most, check_value, numpy_modules
from ...engine.graph.graph import BoundRequirement
from ...engine.graph.model import Model
from ...engine.graph.requirements import failed_requirement
from .sweep_quantities import FLOAT_EXACT, InexactFloatError, _plain


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


def validate_columns(domains: Mapping[str, str], axes: Sequence[Axis], exact: bool, vocabulary=None, extremes: dict | None = None, greatest: Mapping[str, int] | None = None) -> None:
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
            most = (greatest if greatest is not None else vocabulary.greatest if vocabulary is not None else {}).get(name)
            if most is not None and high > most:
                raise EvaluationError(above_most(name, most, high))
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

        # a switch's column (0 or 1) is checked block by block against its greatest value, which the screen does not know
        switch = not names.isdisjoint(self.vocabulary.greatest)
        self.screen = None if switch else _Screen.of(axes[self.split], self.domains, self.relations, exact, min(chunk, len(axes[self.split])))
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


def check_sequence_split(training: Any, values: Sequence[Any]) -> None:
    """A training step's sequences split evenly over the ranks that share them (Layout.check_sequence), every value
    swept or fixed; a sweep with no layout, or none that splits a sequence, has nothing to check."""
    layout = getattr(training, "layout", None)
    if layout is None or layout.sequence_step == 1 or not values:
        return
    for value in np.unique(np.concatenate([np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values])):
        if float(value).is_integer():
            layout.check_sequence(int(value))
