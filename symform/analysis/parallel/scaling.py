"""Scaling laws of parallel work and the bubbles and in-flight micro-batches of pipeline schedules.

Every function takes numbers or sympy expressions and returns the same kind: called
with its default symbols it returns the formula (``amdahl_speedup()`` is
``1/(S + (1 - S)/N)``), with numbers a number (exact sympy Rationals for exact
inputs, floats for floats). Each formula is written once, here.

Letters: S the serial fraction (the parallel fraction is 1 − S), N workers, K the
overhead in Amdahl's law, T_S the serial time; K stages, M micro-batches and v model
chunks per device in pipeline schedules.
"""

from __future__ import annotations

import sympy

from ...engine.algebra._numeric import Value, checked, settled
from ...engine.errors import ConfigError, EvaluationError
from ...engine.language.vocabulary import make_symbol

SERIAL_FRACTION = make_symbol("S", "positive_rational")
"""S: the fraction of the serial run time that cannot be parallelised."""
WORKERS = make_symbol("N", "positive_integer")
"""N: devices (or processors) working in parallel."""
OVERHEAD = make_symbol("K", "positive_rational")
"""K: seconds of parallel overhead (communication, synchronisation) added to Amdahl's parallel time."""
SERIAL_TIME = make_symbol("T_S", "positive_rational")
"""T_S: seconds the work takes on one worker."""
STAGES = make_symbol("K", "positive_integer")
"""K: pipeline stages (devices in the pipeline)."""
MICROBATCHES = make_symbol("M", "positive_integer")
"""M: micro-batches per step."""
CHUNKS = make_symbol("v", "positive_integer")
"""v: model chunks per device in the interleaved schedule (virtual stages)."""

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved")
"""Pipeline schedules: naive model parallelism, GPipe (all forward, all backward), 1F1B (PipeDream-Flush), interleaved 1F1B."""


# --- speedup, efficiency, Amdahl, Gustafson ------------------------------------------


def speedup(serial_time: Value, parallel_time: Value) -> sympy.Expr | float:
    """T_S / T_P."""
    return settled(
        _positive("serial_time", serial_time)
        / _positive("parallel_time", parallel_time)
    )


def efficiency(speedup: Value, workers: Value = WORKERS) -> sympy.Expr | float:
    """Speedup / N: the share of N workers' time doing useful work (1 is linear scaling)."""
    return settled(checked("speedup", speedup) / _workers(workers))


def amdahl_parallel_time(
    serial_fraction: Value = SERIAL_FRACTION,
    workers: Value = WORKERS,
    *,
    serial_time: Value = SERIAL_TIME,
    overhead: Value = 0,
) -> sympy.Expr | float:
    """T_P = T_S·S + T_S·(1 − S)/N + K: strong scaling, a fixed problem split N ways, plus an overhead K in seconds."""
    s = _fraction(serial_fraction)
    t = _positive("serial_time", serial_time)
    k = checked("overhead", overhead, fix="give the overhead in seconds (0 for none)")
    return settled(t * s + t * (1 - s) / _workers(workers) + k)


def amdahl_speedup(
    serial_fraction: Value = SERIAL_FRACTION,
    workers: Value = WORKERS,
    *,
    serial_time: Value = 1,
    overhead: Value = 0,
) -> sympy.Expr | float:
    """Amdahl's speedup T_S / T_P: 1/(S + (1 − S)/N) without overhead, which tends to 1/S as N grows."""
    t = _positive("serial_time", serial_time)
    return settled(
        t
        / amdahl_parallel_time(
            serial_fraction, workers, serial_time=t, overhead=overhead
        )
    )


def gustafson_speedup(
    serial_fraction: Value = SERIAL_FRACTION, workers: Value = WORKERS
) -> sympy.Expr | float:
    """Gustafson's scaled speedup S + N·(1 − S): weak scaling, the parallel part grows with N at fixed time."""
    s = _fraction(serial_fraction)
    return settled(s + _workers(workers) * (1 - s))


# --- pipeline bubbles ------------------------------------------------------------------


def bubble_ratio(
    schedule: str,
    stages: Value = STAGES,
    microbatches: Value = MICROBATCHES,
    chunks: Value = 1,
) -> sympy.Expr | float:
    """Idle time over ideal (bubble-free) time of one step: Narayanan et al. 2021's bubble time fraction.

    naive: K − 1 (one stage busy at a time); GPipe and 1F1B: (K − 1)/M; interleaved
    1F1B with v chunks per device: (K − 1)/(v·M) (Narayanan et al. 2021, §2.2.1–2.2.2).
    """
    k, m, v = _pipeline(schedule, stages, microbatches, chunks)
    ratios = {
        "naive": k - 1,
        "gpipe": (k - 1) / m,
        "1f1b": (k - 1) / m,
        "interleaved": (k - 1) / (v * m),
    }
    return settled(ratios[schedule])


def bubble_fraction(
    schedule: str,
    stages: Value = STAGES,
    microbatches: Value = MICROBATCHES,
    chunks: Value = 1,
) -> sympy.Expr | float:
    """Idle share of the step's time, bubble / (ideal + bubble).

    naive: (K − 1)/K; GPipe and 1F1B: (K − 1)/(M + K − 1) (Huang et al. 2019; K = M = 8
    gives 7/15); interleaved: (K − 1)/(v·M + K − 1).
    """
    ratio = sympy.sympify(bubble_ratio(schedule, stages, microbatches, chunks))
    return settled(sympy.factor(sympy.cancel(ratio / (1 + ratio))))


def in_flight_microbatches(
    schedule: str,
    stages: Value = STAGES,
    microbatches: Value = MICROBATCHES,
    chunks: Value = 1,
    stage: Value = 0,
) -> sympy.Expr | float:
    """Micro-batches whose activations pipeline stage ``stage`` (0 = first) holds at its peak, in whole-stage units.

    - naive: 1 (each micro-batch runs forward and backward through every stage before the next starts).
    - gpipe: M (every forward pass runs before the first backward pass).
    - 1f1b: min(K − stage, M) (the warm-up forwards plus one; Narayanan et al. 2021).
    - interleaved, v ≥ 2: min(2·(K − stage − 1) + (v − 1)·K + 1, v·M) / v. Megatron-LM's
      interleaved schedule runs 2·(K − stage − 1) + (v − 1)·K warm-up forwards of one
      chunk each, then one more before the first backward; a chunk holds 1/v of the
      stage's layers. For the first stage that is K·(1 + (K − 1)/(K·v)), the factor
      Korthikanti et al. 2022 (§4.2.3) give for the interleaved schedule's activation
      memory. With v = 1 the schedule is 1F1B.
    """
    k, m, v = _pipeline(schedule, stages, microbatches, chunks)
    i = checked(
        "stage", stage, minimum=0, whole=True, fix="stages count from 0 (the first)"
    )
    if _known(i) and _known(k) and i >= k:
        raise EvaluationError(
            f"stage is {stage} but a {k}-stage pipeline has stages 0 to {k - 1}; give a stage below stages"
        )
    if schedule == "interleaved" and v != 1:
        return settled(sympy.Min(2 * (k - i - 1) + (v - 1) * k + 1, v * m) / v)
    held = {
        "naive": sympy.Integer(1),
        "gpipe": m,
        "1f1b": sympy.Min(k - i, m),
        "interleaved": sympy.Min(k - i, m),
    }
    return settled(held[schedule])


# --- argument checks ---------------------------------------------------------------------


def _pipeline(
    schedule: str, stages: Value, microbatches: Value, chunks: Value
) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    if schedule not in SCHEDULES:
        raise ConfigError(
            f"unknown pipeline schedule {schedule!r}; use one of {', '.join(SCHEDULES)}"
        )
    k = checked(
        "stages", stages, minimum=1, whole=True, fix="a pipeline has at least one stage"
    )
    m = checked(
        "microbatches",
        microbatches,
        minimum=1,
        whole=True,
        fix="a step has at least one micro-batch",
    )
    v = checked(
        "chunks",
        chunks,
        minimum=1,
        whole=True,
        fix="each device holds at least one model chunk",
    )
    if schedule != "interleaved" and v != 1:
        raise ConfigError(
            f"chunks={chunks} applies to the interleaved schedule only; use schedule='interleaved' or chunks=1"
        )
    return k, m, v


def _known(value: sympy.Expr) -> bool:
    return not value.free_symbols


def _workers(workers: Value) -> sympy.Expr:
    return checked(
        "workers",
        workers,
        minimum=1,
        whole=True,
        fix="give the number of devices, 1 or more",
    )


def _positive(name: str, value: Value) -> sympy.Expr:
    number = checked(name, value, fix="give a time in seconds")
    if _known(number) and number == 0:
        raise EvaluationError(f"{name} is 0; give a positive time in seconds")
    return number


def _fraction(value: Value) -> sympy.Expr:
    s = checked(
        "serial_fraction",
        value,
        fix="give the serial share of the run time, between 0 and 1",
    )
    if _known(s) and s > 1:
        raise EvaluationError(
            f"serial_fraction is {value} but must lie between 0 and 1; give the serial share of the run time"
        )
    return s
