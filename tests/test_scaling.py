"""Speedup, Amdahl, Gustafson and pipeline schedules against hand-derived and published values."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from checks import one_line_error
from hypothesis import given
from hypothesis import strategies as st

from symform.analysis.parallel import scaling
from symform.engine.errors import ConfigError, EvaluationError

S, N, T_S = scaling.SERIAL_FRACTION, scaling.WORKERS, scaling.SERIAL_TIME
K, M, v = scaling.STAGES, scaling.MICROBATCHES, scaling.CHUNKS

stages = st.integers(min_value=1, max_value=128)
microbatches = st.integers(min_value=1, max_value=1024)
chunks = st.integers(min_value=2, max_value=16)
fractions = st.fractions(min_value=Fraction(1, 1000), max_value=1)


def expand_equal(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


# --- speedup, Amdahl, Gustafson -----------------------------------------------------


def test_speedup_and_efficiency():
    assert scaling.speedup(100, 25) == 4
    assert scaling.efficiency(4, 8) == sympy.Rational(1, 2)
    assert scaling.efficiency(scaling.speedup(10.0, 4.0), 4) == pytest.approx(0.625)


def test_amdahl_formula_and_its_limit():
    assert expand_equal(
        sympy.cancel(1 / scaling.amdahl_speedup() - (S + (1 - S) / N)), 0
    )
    assert sympy.limit(scaling.amdahl_speedup(), N, sympy.oo) == 1 / S
    assert scaling.amdahl_speedup(sympy.Rational(1, 20), 64) == 1 / (
        sympy.Rational(1, 20) + sympy.Rational(19, 20) / 64
    )
    assert scaling.amdahl_speedup(0.05, 64) == pytest.approx(15.421686746987952)


def test_amdahl_with_overhead():
    overhead = scaling.OVERHEAD
    assert expand_equal(
        scaling.amdahl_parallel_time(overhead=overhead),
        T_S * S + T_S * (1 - S) / N + overhead,
    )
    # the overhead caps the speedup below 1/S: T_S / (T_S·S + K) as N grows
    limit = sympy.limit(
        scaling.amdahl_speedup(serial_time=T_S, overhead=overhead), N, sympy.oo
    )
    assert sympy.simplify(limit - T_S / (T_S * S + overhead)) == 0
    assert scaling.amdahl_speedup(
        Fraction(1, 10), 10, serial_time=100, overhead=1
    ) == sympy.Rational(100, 10 + 9 + 1)


def test_gustafson():
    assert expand_equal(scaling.gustafson_speedup(), S + N * (1 - S))
    assert scaling.gustafson_speedup(Fraction(1, 10), 8) == sympy.Rational(73, 10)
    assert scaling.gustafson_speedup(0.1, 8) == pytest.approx(7.3)


@given(fractions, st.integers(min_value=1, max_value=10**6))
def test_gustafson_never_below_amdahl_and_both_at_most_linear(serial, workers):
    amdahl = scaling.amdahl_speedup(serial, workers)
    assert 1 <= amdahl <= scaling.gustafson_speedup(serial, workers) <= workers
    assert amdahl < 1 / serial or workers == 1 or serial == 1


# --- pipeline bubbles ---------------------------------------------------------------------


def test_gpipe_bubble_with_eight_stages_and_eight_micro_batches_is_7_over_15():
    bubble = scaling.bubble_fraction("gpipe", 8, 8)
    assert bubble == sympy.Rational(7, 15)
    assert isinstance(bubble, sympy.Rational)
    assert scaling.bubble_fraction("1f1b", 8, 8) == sympy.Rational(7, 15)


def test_bubble_formulas():
    assert expand_equal(sympy.cancel(scaling.bubble_fraction("naive") - (K - 1) / K), 0)
    assert scaling.bubble_fraction("naive", 4, 100) == sympy.Rational(3, 4)
    assert sympy.cancel(scaling.bubble_fraction("gpipe") - (K - 1) / (M + K - 1)) == 0
    assert (
        sympy.cancel(scaling.bubble_ratio("interleaved", chunks=v) - (K - 1) / (v * M))
        == 0
    )
    assert scaling.bubble_ratio("interleaved", 4, 8, 2) == sympy.Rational(3, 16)
    assert scaling.bubble_ratio("gpipe", 4, 8) == sympy.Rational(3, 8)


@given(stages, microbatches, chunks)
def test_bubbles_shrink_with_micro_batches_and_chunks(k, m, c):
    gpipe = scaling.bubble_fraction("gpipe", k, m)
    assert 0 <= gpipe < 1
    assert scaling.bubble_fraction("gpipe", k, m + 1) <= gpipe
    assert (
        scaling.bubble_fraction("interleaved", k, m, c)
        <= gpipe
        <= scaling.bubble_fraction("naive", k, m)
    )
    assert scaling.bubble_fraction("interleaved", k, m, 1) == scaling.bubble_fraction(
        "1f1b", k, m
    )
    assert (gpipe == 0) == (k == 1)


# --- micro-batches in flight ---------------------------------------------------------------------


def test_in_flight_micro_batches_per_schedule():
    assert scaling.in_flight_microbatches("naive", 4, 8) == 1
    assert scaling.in_flight_microbatches("gpipe", 4, 8) == 8
    assert [
        scaling.in_flight_microbatches("1f1b", 4, 8, stage=i) for i in range(4)
    ] == [4, 3, 2, 1]
    assert (
        scaling.in_flight_microbatches("1f1b", 8, 3) == 3
    )  # fewer micro-batches than stages: all of them
    # Megatron-LM, 4 stages, 2 chunks: 2·3 + 4 warm-up chunk forwards + 1 = 11 chunks of half a stage
    assert scaling.in_flight_microbatches("interleaved", 4, 8, 2) == sympy.Rational(
        11, 2
    )
    assert scaling.in_flight_microbatches(
        "interleaved", 4, 8, 2, stage=3
    ) == sympy.Rational(5, 2)
    assert (
        scaling.in_flight_microbatches("interleaved", 4, 4, 2) == 4
    )  # every chunk forward in warm-up
    assert scaling.in_flight_microbatches("interleaved", 4, 8, 1) == 4


@given(
    st.integers(min_value=2, max_value=64),
    chunks,
    st.integers(min_value=2, max_value=8),
)
def test_interleaved_first_stage_holds_korthikanti_factor(k, c, extra):
    # Korthikanti et al. 2022 §4.2.3: the first stage holds p·(1 + (p − 1)/(p·m)) micro-batches' worth
    held = scaling.in_flight_microbatches("interleaved", k, extra * k, c)
    assert held == k * (1 + sympy.Rational(k - 1, k * c))


@given(stages, microbatches, chunks)
def test_one_f_one_b_never_holds_more_than_gpipe_and_earlier_stages_hold_more(k, m, c):
    for stage in range(min(k, 4)):
        one_f_one_b = scaling.in_flight_microbatches("1f1b", k, m, stage=stage)
        assert 1 <= one_f_one_b <= scaling.in_flight_microbatches("gpipe", k, m)
        assert scaling.in_flight_microbatches("interleaved", k, m, c, stage=stage) <= m
        if stage + 1 < k:
            assert (
                scaling.in_flight_microbatches("1f1b", k, m, stage=stage + 1)
                <= one_f_one_b
            )
            assert scaling.in_flight_microbatches(
                "interleaved", k, m, c, stage=stage + 1
            ) <= scaling.in_flight_microbatches("interleaved", k, m, c, stage=stage)


def test_in_flight_as_formulas():
    assert scaling.in_flight_microbatches("1f1b") == sympy.Min(K, M)
    first = scaling.in_flight_microbatches("interleaved", chunks=v)
    assert first.subs({K: 8, M: 64, v: 4}) == 8 * (1 + sympy.Rational(7, 32))


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input_names_the_problem_and_the_fix():
    one_line_error(
        ConfigError,
        lambda: scaling.bubble_fraction("zero_bubble", 4, 8),
        "zero_bubble",
        "gpipe",
    )
    one_line_error(
        EvaluationError,
        lambda: scaling.bubble_fraction("gpipe", 0, 8),
        "stages",
        "at least 1",
    )
    one_line_error(
        EvaluationError, lambda: scaling.bubble_fraction("gpipe", 4, 0), "microbatches"
    )
    one_line_error(
        EvaluationError,
        lambda: scaling.bubble_fraction("gpipe", 4.5, 8),
        "whole number",
    )
    one_line_error(
        ConfigError,
        lambda: scaling.bubble_fraction("gpipe", 4, 8, chunks=2),
        "interleaved",
    )
    one_line_error(
        EvaluationError,
        lambda: scaling.in_flight_microbatches("1f1b", 4, 8, stage=4),
        "stage",
        "0 to 3",
    )
    one_line_error(
        EvaluationError,
        lambda: scaling.amdahl_speedup(1.5, 8),
        "serial_fraction",
        "between 0 and 1",
    )
    one_line_error(
        EvaluationError, lambda: scaling.amdahl_speedup(0.1, 0), "workers", "at least 1"
    )
    one_line_error(EvaluationError, lambda: scaling.speedup(1, 0), "parallel_time")
