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
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import exact_value
from ...engine.graph.model import Model
from .kernels import INT64_LIMIT, Kernel
from .sweep_quantities import BLOCK, FLOAT_EXACT, Compiled, InexactFloatError, InexactFloatWarning, IntegerOverflowError, SweepResult, _exact_values, _is_dask, compile_quantities
from .sweep_points import Axis, Block, _Checks, _axes, _axis_of, _block_inputs, _blocks, _check_requirements, _validate, _whole, check_sequence_split


# --- expressions ---------------------------------------------------------------------------------


# --- exact evaluation -----------------------------------------------------------------------------


# --- the points -----------------------------------------------------------------------------------


# --- the result -----------------------------------------------------------------------------------


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
    check_sequence_split(training, [*(axis.columns[axis.names.index("seq")] for axis in axes if "seq" in axis.names), *([fixed["seq"]] if "seq" in fixed else [])])
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
