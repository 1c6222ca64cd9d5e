"""Sweeps as dask arrays: points described, generated where each block is computed, results reduced there.

>>> import symform
>>> from symform.analysis.sweeps.lazy_sweeps import lazy_sweep
>>> lazy = lazy_sweep(symform.load("qwen3-8b"), ["params"], grid={"d_model": [2048, 4096], "n_layers": [16, 32]}, chunk=2)
>>> lazy.points, lazy.compute()["params"].shape
(4, (4,))

Nothing is materialised on the client: the task graph holds the description
(grid values, sample ranges and seed, the generated kernel's source text) and one
small task per block; each block makes its own points, checks them (domains,
whole numbers, the components' requirements) and evaluates the kernel. Where a
``dask.distributed`` client is active, blocks run on its workers and the
reductions (:meth:`LazySweep.top_k`, :meth:`argmin`, :meth:`histogram`) return
only their small results.

Points are ordered as in :func:`symform.sweep`: the grid's cartesian product
(last name fastest), then, where there is a sample, ``n`` rows per grid point.
Sampled rows come in blocks of ``chunk`` rows, block ``j`` drawn from
``numpy.random.default_rng([seed, j])``: the same seed and chunk give the same
points on any cluster, in any order of execution (but not the rows of
``symform.sweep(sample=...)``, which draws all rows from one generator).
Values are float64, as in a float sweep; beyond 2**53 they keep about 16
significant digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ...engine.errors import EvaluationError
from ...engine.graph.model import Model
from .sweep_points import Axis, Relation, _column, _draw, _values, check_relations, check_sequence_split, validate_columns
from .sweep_quantities import DEFAULT_CHUNK, FLOAT_EXACT, SweepResult, _is_dask, compile_quantities

MAX_BLOCKS = 10**6  # tasks in one graph: past this the scheduler, not the arithmetic, is the cost


@dataclass(frozen=True)
class Description:
    """Everything a block needs to make its points and values: small, whatever the number of points."""

    names: tuple[str, ...]  # the kernel's arguments, in order
    grid_names: tuple[str, ...]
    grid_columns: tuple[np.ndarray, ...]
    sample: tuple[tuple[str, Any], ...]
    n: int
    seed: int
    chunk: int
    domains: tuple[tuple[str, str], ...]
    relations: tuple[Relation, ...]
    compiled: Any  # a Compiled whose kernel pickles as its source text
    greatest: tuple[tuple[str, int], ...] = ()  # the swept switches' greatest value (1)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.grid_columns)


def lazy_sweep(
    model: Model,
    quantities: Sequence[str] | str,
    *,
    grid: Mapping[str, Sequence] | None = None,
    zip: Mapping[str, Any] | None = None,
    sample: Mapping[str, object] | None = None,
    n: int | None = None,
    seed: int = 0,
    fixed: Mapping[str, object] | None = None,
    chunk: int = DEFAULT_CHUNK,
    training: Any = None,
) -> "LazySweep":
    """Like :func:`symform.sweep`, but every column is a dask array and nothing is computed yet.

    ``grid`` and ``sample`` are described, not materialised; ``zip`` takes dask arrays
    (alone: their blocks are the sweep's blocks).
    """
    fixed = dict(fixed or {})
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise EvaluationError("chunk must be a whole number of points, 1 or more")
    if zip:
        if grid or sample:
            raise EvaluationError("a lazy sweep takes zip= dask arrays alone; put grid values into the zipped arrays, or use grid=/sample= without zip=")
        return _zipped(model, quantities, zip, fixed, training)
    grid = dict(grid or {})
    sample = dict(sample or {})
    grid_axes = [Axis((k,), (_values("grid", k, v),)) for k, v in grid.items()]
    if any(len(a) == 0 for a in grid_axes):
        raise EvaluationError("a sweep axis is empty: give at least one value per name")
    check_sequence_split(training, [*(a.columns[0] for a in grid_axes if a.names == ("seq",)), *([fixed["seq"]] if "seq" in fixed else [])])
    if sample:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EvaluationError("sample= needs n=, the number of random points (1 or more)")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise EvaluationError(f"seed={seed!r}: a seed is a whole number of 0 or more")
        for k, spec in sample.items():  # a bad range or an empty list is refused here, not on a worker
            _draw(np.random.default_rng(0), k, spec, 1)
    names = tuple([*grid, *sample])
    overlap = sorted(set(names) & set(fixed))
    if overlap:
        raise EvaluationError(f"{overlap[0]} is both swept and fixed; give it in one place")
    compiled = compile_quantities(model, quantities, names, fixed=fixed, training=training)
    if compiled.kernel is None:
        raise EvaluationError("a lazy sweep needs quantities that are polynomials in the swept names; use symform.sweep for this one")
    vocabulary = model.vocabulary
    domains = {k: vocabulary.entry(k).spec.domain for k in names}
    greatest = _greatest(vocabulary, names)
    validate_columns(domains, grid_axes, exact=False, greatest=greatest)
    from .sweep_points import requirement_relations

    description = Description(
        names, tuple(grid), tuple(a.columns[0] for a in grid_axes), tuple(sample.items()), n or 1, seed, chunk,
        tuple(domains.items()), tuple(requirement_relations(model, names, fixed)), compiled, tuple(greatest.items()),
    )
    return LazySweep(description, _block_sizes(description))


def _block_sizes(d: Description) -> np.ndarray:
    """Each block's number of points, in order (block ``j`` is ``_block(d, j)``)."""
    grid_points = math.prod(d.grid_shape)
    per_grid_point = -(-d.n // d.chunk)
    count = -(-grid_points // d.chunk) if not d.sample else grid_points * per_grid_point
    if count > MAX_BLOCKS:  # counted before any array is made: a request for 10**15 points is refused at once
        raise EvaluationError(f"{count:,} blocks is more than {MAX_BLOCKS:,} (symform.analysis.sweeps.lazy_sweeps.MAX_BLOCKS); give a larger chunk= or fewer points")
    total, chunk = (grid_points, d.chunk) if not d.sample else (d.n, d.chunk)
    sizes = np.full(-(-total // chunk), chunk, dtype=np.int64)
    sizes[-1] = total - chunk * (len(sizes) - 1)
    return sizes if not d.sample else np.tile(sizes, grid_points)


def _block(d: Description, j: int) -> tuple[int, int, int, int]:
    """Block ``j`` as (grid flat start, grid flat stop, sample row start, sample row stop)."""
    if not d.sample:
        start = j * d.chunk
        return start, min(start + d.chunk, math.prod(d.grid_shape)), 0, 1
    g, k = divmod(j, -(-d.n // d.chunk))
    return g, g + 1, k * d.chunk, min((k + 1) * d.chunk, d.n)


def block_points(d: Description, block: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    """The inputs of one block's points, made from the description (on the worker that computes it)."""
    g0, g1, r0, r1 = block
    rows = r1 - r0
    out = {}
    if d.grid_names:
        index = np.unravel_index(np.arange(g0, g1, dtype=np.int64), d.grid_shape)
        for name, column, i in zip(d.grid_names, d.grid_columns, index):
            out[name] = np.repeat(column[i], rows) if d.sample else column[i]
    if d.sample:
        j = r0 // d.chunk
        rng = np.random.default_rng([d.seed, j])
        for name, spec in d.sample:
            out[name] = _draw(rng, name, spec, rows)
    return out


def _evaluate_block(d: Description, block: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    points = block_points(d, block)
    axis = [Axis(tuple(points), tuple(points.values()))] if points else []
    validate_columns(dict(d.domains), axis, exact=False, greatest=dict(d.greatest))
    check_relations(d.relations, axis)
    arrays = [np.asarray(points[name], dtype=np.float64) for name in d.names]
    size = (block[1] - block[0]) * (block[3] - block[2])
    with np.errstate(all="ignore"):
        values = d.compiled(*arrays) if arrays else d.compiled()
    out = dict(points)
    for q, v in zip(d.compiled.quantities, values):
        v = np.broadcast_to(np.asarray(v, dtype=np.float64), (size,))
        if not np.all(np.isfinite(v)):
            raise EvaluationError(f"{q} is past float64's range (or undefined) at some points; sweep smaller sizes")
        out[q] = v
    return out


def _block_record(index: np.ndarray, d: Description, fields: np.dtype) -> np.ndarray:
    """One block's columns as one structured array (map_blocks over the block numbers: the graph holds the
    description once and one small task per block)."""
    columns = _evaluate_block(d, _block(d, int(index[0])))
    record = np.empty(len(next(iter(columns.values()))), dtype=fields)
    for name in fields.names:
        record[name] = columns[name]
    return record


class LazySweep:
    """Column name → dask array (the inputs, then one per quantity), with reductions computed where the blocks are."""

    def __init__(self, description: Description | None, sizes: np.ndarray | None, columns: Mapping[str, Any] | None = None, quantities: Sequence[str] = ()):
        import dask.array as da
        from dask.base import tokenize

        self.description = description
        if columns is not None:
            self.columns = dict(columns)
            self.quantities = tuple(quantities)
            self.inputs = tuple(k for k in self.columns if k not in self.quantities)
            return
        d = description
        dtypes = {name: np.dtype(np.int64) if isinstance(spec, tuple) else _column(name, spec).dtype for name, spec in d.sample}
        dtypes.update({name: c.dtype for name, c in zip(d.grid_names, d.grid_columns)})
        self.quantities = tuple(d.compiled.quantities)
        self.inputs = tuple([*d.grid_names, *(name for name, _ in d.sample)])
        record = np.dtype([(name, np.float64 if name in self.quantities else dtypes[name]) for name in (*self.inputs, *self.quantities)])
        blocks = da.arange(len(sizes), chunks=1)
        # named by everything a block's values follow from (tokenizing the kernel itself would pickle it)
        name = f"symform-sweep-{tokenize(d.names, d.grid_columns, repr(d.sample), d.n, d.seed, d.chunk, repr(d.domains), repr(d.greatest), repr(d.relations), d.compiled.quantities, tuple(map(str, d.compiled.expressions)))}"
        records = da.map_blocks(_block_record, blocks, d=d, fields=record, dtype=record, chunks=(tuple(sizes.tolist()),), meta=np.empty(0, dtype=record), name=name)
        self.columns = {column: records[column] for column in record.names}

    def __getitem__(self, name: str):
        return self.columns[name]

    @property
    def points(self) -> int:
        return int(self.columns[self.quantities[0]].shape[0])

    def compute(self) -> SweepResult:
        """Every column as numpy (for sweeps that fit in the client's memory)."""
        import dask

        values = dask.compute(self.columns)[0]
        return SweepResult(values, inputs=self.inputs, quantities=self.quantities, shape=(self.points,), fixed={})

    def rows_at(self, index: Sequence[int]) -> dict[str, np.ndarray]:
        """The points at these flat indices, every column (only their blocks are computed)."""
        import dask

        index = np.asarray(index, dtype=np.int64)
        return dict(zip(self.columns, dask.compute(*(c[index] for c in self.columns.values()))))

    def top_k(self, quantity: str, k: int, *, smallest: bool = False) -> dict[str, np.ndarray]:
        """The k points with the largest (or smallest) values of a quantity, best first: a dict of k-row columns."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise EvaluationError("top_k needs k, a whole number of 1 or more")
        k = min(k, self.points)
        index = self.columns[quantity].argtopk(-k if smallest else k).compute()
        return {"index": index, **self.rows_at(index)}

    def argmin(self, quantity: str) -> dict[str, object]:
        """The first point where the quantity is smallest: its flat index and every column's value."""
        i = int(self.columns[quantity].argmin().compute())
        return {"index": i, **{k: v[0] for k, v in self.rows_at([i]).items()}}

    def argmax(self, quantity: str) -> dict[str, object]:
        i = int(self.columns[quantity].argmax().compute())
        return {"index": i, **{k: v[0] for k, v in self.rows_at([i]).items()}}

    def histogram(self, quantity: str, bins: int | Sequence[float], range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Counts and bin edges, as numpy.histogram; with a bin count, ``range=`` is required (the data are not all here)."""
        import dask.array as da

        if range is None and isinstance(bins, int):
            raise EvaluationError("histogram with a bin count needs range=(low, high): a lazy sweep cannot look at all values first")
        counts, edges = da.histogram(self.columns[quantity], bins=bins, range=range)
        return counts.compute(), np.asarray(edges)


def _zipped(model: Model, quantities, zipped: Mapping[str, Any], fixed, training) -> LazySweep:
    """zip= dask arrays: the compiled function over their blocks (map_blocks), inputs untouched."""
    import dask.array as da

    names = tuple(zipped)
    check_sequence_split(training, [*([fixed["seq"]] if "seq" in fixed else []), *(v for k, v in zipped.items() if k == "seq" and not _is_dask(v))])
    arrays = [v if _is_dask(v) else da.asarray(v) for v in zipped.values()]
    if any(a.ndim != 1 for a in arrays) or len({a.shape[0] for a in arrays}) != 1:
        raise EvaluationError(f"zip= arrays must be one-dimensional and of one length; got {', '.join(f'{k}: {a.shape}' for k, a in zip(names, arrays))}")
    overlap = sorted(set(names) & set(fixed))
    if overlap:
        raise EvaluationError(f"{overlap[0]} is both swept and fixed; give it in one place")
    arrays = list(da.core.unify_chunks(*[x for a in arrays for x in (a, "i")])[1])
    compiled = compile_quantities(model, quantities, names, fixed=fixed, training=training)
    from .sweep_points import requirement_relations

    vocabulary = model.vocabulary
    domains = tuple((k, vocabulary.entry(k).spec.domain) for k in names)
    greatest = tuple(_greatest(vocabulary, names).items())
    relations = tuple(requirement_relations(model, names, fixed))
    checked = [a.astype(np.float64) for a in arrays]
    values = da.map_blocks(_checked_block, *checked, names=names, domains=domains, greatest=greatest, relations=relations, compiled=compiled, dtype=np.float64, new_axis=0, chunks=((len(compiled.quantities),), checked[0].chunks[0]))
    columns = {**dict(zip(names, arrays)), **{q: values[i] for i, q in enumerate(compiled.quantities)}}
    return LazySweep(None, None, columns, compiled.quantities)


def _checked_block(*arrays, names, domains, greatest, relations, compiled):
    axis = [Axis(tuple(names), tuple(arrays))]
    validate_columns(dict(domains), axis, exact=False, greatest=dict(greatest))
    check_relations(relations, axis)
    size = arrays[0].shape[0]
    with np.errstate(all="ignore"):
        values = compiled(*arrays)
    return np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), (size,)) for v in values])


__all__ = ["LazySweep", "lazy_sweep", "block_points", "FLOAT_EXACT"]


def _greatest(vocabulary, names) -> dict[str, int]:
    """The greatest value of each swept name that has one (a switch's 1), which a block checks without the vocabulary."""
    return {k: vocabulary.greatest[k] for k in names if k in vocabulary.greatest}
