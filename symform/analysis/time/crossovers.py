"""Crossovers: where a workload moves from memory-bound to compute-bound on a device (the batch, or the context, at which its arithmetic intensity meets the ridge), in closed form where sympy solves it, by bisection where not."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from . import flash_attention
from ...engine.algebra.formula import to_latex
from ..devices.hardware import Device
from ...engine.graph.model import Model
from .roofline import Work, _values, accelerator, phase_work


#: The ridge point as a symbol, for crossovers solved in closed form.
R = sympy.Symbol("R", positive=True)


@dataclass(frozen=True)
class Crossover:
    """Where intensity(variable) = ridge: the closed form in R (the ridge, when sympy can solve it) and its value on a device."""

    variable: str
    expression: sympy.Expr | None  # in R; None when sympy finds no closed form
    ridge: float
    value: (
        float | None
    )  # None when the intensity never crosses this ridge for a positive value
    limit_intensity: float  # the intensity as the variable → ∞

    def _repr_latex_(self) -> str:
        """In a notebook: the crossover in closed form (R the ridge) and on this device."""
        name = r"\mathrm{" + self.variable + "}^{*}"
        closed = f"{name} = {to_latex(self.expression)},\\quad " if self.expression is not None else ""
        value = "\\infty" if self.value is None else f"{self.value:.1f}"
        return f"${closed}{name}({self.ridge:.1f}) = {value}$"

    @property
    def first_compute_bound(self) -> int | None:
        """The smallest whole value of the variable past the crossover (compute-bound when the intensity rises with it)."""
        return None if self.value is None else math.floor(self.value) + 1


def crossover(work: Work, variable: sympy.Symbol, ridge: float) -> Crossover:
    """Solve intensity(variable) = R for ``variable`` and evaluate at the given ridge.

    Other symbols must already have values. When sympy finds no closed form
    (block counts with ceilings), the crossover is found by bisection over whole values.
    """
    if _in_exponent(work.intensity, variable):  # MoE decode: distinct experts E·(1 − (1 − k/E)^batch), no closed form
        limit = float(sympy.sympify(work.intensity).xreplace({variable: sympy.Float(1e15)}))
        return Crossover(variable.name, None, float(ridge), _bisect(work, variable, ridge, floats=True), limit)
    limit = float(sympy.limit(work.intensity, variable, sympy.oo))
    try:
        solutions = sympy.solve(sympy.Eq(work.flops, R * work.bytes), variable)
    except NotImplementedError:
        solutions = []
    closed = [s for s in solutions if s.free_symbols <= {R}]
    if not closed:
        return Crossover(
            variable.name, None, float(ridge), _bisect(work, variable, ridge), limit
        )
    values = [float(s.xreplace({R: sympy.Float(ridge, 30)})) for s in closed]
    positive = [v for v in values if v > 0]
    return Crossover(
        variable.name,
        closed[0] if len(closed) == 1 else None,
        float(ridge),
        min(positive) if positive else None,
        limit,
    )


def _in_exponent(expr: object, variable: sympy.Symbol) -> bool:
    return any(variable in power.exp.free_symbols for power in sympy.sympify(expr).atoms(sympy.Pow))


def _bisect(
    work: Work, variable: sympy.Symbol, ridge: float, *, largest: int = 1 << 40, floats: bool = False
) -> float | None:
    """The last whole value on the starting side of intensity = ridge, for a monotone intensity.
    ``floats``: evaluate in floating point (a power with the variable in its exponent is slow exactly)."""

    def side(x: int) -> bool:
        point = {variable: sympy.Float(x) if floats else sympy.Integer(x)}
        return float(sympy.sympify(work.flops).xreplace(point)) > ridge * float(
            sympy.sympify(work.bytes).xreplace(point)
        )

    low, start = 1, side(1)
    high = 2
    while side(high) == start:
        if high > largest:
            return None
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if side(middle) == start else (low, middle)
    return float(low)


def decode_crossover(
    model: Model,
    device: str | Device,
    *,
    context: int,
    dtype: str = "bf16",
    flash: bool = False,
    sram_bytes: int = flash_attention.DEFAULT_SRAM_BYTES,
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
) -> Crossover:
    """The batch at which decoding one token after ``context`` cached tokens turns compute-bound on ``device``."""
    gpu = accelerator(device)
    total = phase_work(
        model, "decode", depth=1, flash=flash, sram_bytes=sram_bytes, weight_bytes=weight_bytes
    ).total
    return crossover(
        total.subs(_values(model, {"past": context})),
        model.vocabulary["batch"],
        gpu.ridge(dtype),
    )


def decode_context_limit(
    model: Model,
    device: str | Device,
    *,
    dtype: str = "bf16",
    flash: bool = False,
    sram_bytes: int = flash_attention.DEFAULT_SRAM_BYTES,
) -> Crossover:
    """The context beyond which no batch makes decoding compute-bound.

    As batch → ∞ the weights' bytes stop mattering and each sequence's own
    traffic (activations, its KV cache) sets the intensity, which falls as
    the context grows: solve that limit = ridge for past.
    """
    gpu = accelerator(device)
    total = phase_work(
        model, "decode", depth=1, flash=flash, sram_bytes=sram_bytes
    ).total
    batch = model.vocabulary["batch"]
    per_sequence = Work(
        sympy.expand(total.flops).coeff(batch, 1),
        sympy.expand(total.bytes).coeff(batch, 1),
    )
    return crossover(
        per_sequence.subs(_values(model, {})),
        model.vocabulary["past"],
        gpu.ridge(dtype),
    )
