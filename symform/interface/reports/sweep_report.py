"""``symform sweep``: options, table, CSV and JSON. The sweep module (and numpy) loads only when a sweep runs."""

from __future__ import annotations

import json
import sys
import warnings
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from ..options.cli_args import attention_arguments, given_once, uses_flash, non_negative_int, positive_int
from ...engine.budget import number_from_text, quoted
from ...engine.errors import EvaluationError
from ...engine.graph.model import Model

if TYPE_CHECKING:
    from ...analysis.sweeps.sweep_quantities import SweepResult


def sweep_arguments(p) -> None:
    """``symform sweep MODEL QUANTITY... --grid NAME=a,b,c --zip NAME=a,b --sample NAME=LOW:HIGH --n N``."""
    p.add_argument("quantities", nargs="+", metavar="QUANTITY", help="quantities (params, train-flops, ...) or memory categories (memory.total, memory.weights, ...)")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=A,B,C", help="one axis of the cartesian grid (repeat for more)")
    p.add_argument("--zip", action="append", default=[], metavar="NAME=A,B,C", help="values that go together: every --zip list is one axis, equal lengths")
    p.add_argument("--sample", action="append", default=[], metavar="NAME=LOW:HIGH", help="random whole numbers in [LOW, HIGH], --n points, --seed")
    p.add_argument("--n", type=positive_int, default=None, help="random points for --sample")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed for --sample (default 0)")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE", help="a workload value held fixed (seq, batch, tokens, ...)")
    p.add_argument("--exact", action="store_true", help="exact integers (slower; for small sweeps)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr")
    from ..options.finetune_args import finetune_arguments
    from .memory_report import recipe_arguments

    step = p.add_argument_group("training step (memory.NAME, fine-tuning)")
    recipe_arguments(step)
    attention_arguments(step)
    finetune_arguments(p, needs="", several_targets=True)


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for text in items:
        name, eq, values = text.partition("=")
        if not eq or not name.strip() or not values.strip():
            raise EvaluationError(f"{flag} {text!r}: write NAME=VALUES")
        given_once([*out, name.strip()], flag)
        out[name.strip()] = values.strip()
    return out


def _numbers(name: str, text: str) -> list:
    out = []
    for part in text.split(","):
        try:
            number = number_from_text(part, name)
        except ValueError as e:
            raise EvaluationError(str(e)) from None
        out.append(int(number) if number.denominator == 1 else number)
    return out


def _range(name: str, text: str) -> tuple[int, int]:
    low, colon, high = text.partition(":")
    try:
        bounds = number_from_text(low, name), number_from_text(high, name)
    except ValueError:
        bounds = ()
    if not colon or len(bounds) != 2 or any(b.denominator != 1 for b in bounds):
        raise EvaluationError(f"--sample {name}={quoted(text)}: write LOW:HIGH whole numbers")
    return int(bounds[0]), int(bounds[1])


def sweep_command(model: Model, args) -> str:
    import numpy as np

    from ...analysis.sweeps.sweeps import sweep
    from ...analysis.sweeps.sweep_quantities import InexactFloatWarning, _plain

    def numeric(values):  # Fractions (a convention such as causal=1/2) stay exact in object columns
        return np.array(values, dtype=object) if any(isinstance(v, Fraction) for v in values) else values

    grid = {k: numeric(_numbers(k, v)) for k, v in _pairs(args.grid, "--grid").items()}
    zipped = {k: numeric(_numbers(k, v)) for k, v in _pairs(args.zip, "--zip").items()}
    sample = {k: _range(k, v) for k, v in _pairs(args.sample, "--sample").items()}
    fixed = {k: _numbers(k, v)[0] for k, v in _pairs(args.fix, "--fix").items()}
    # The table prints values past 2**53 to 6 significant digits, so float64's 16 are enough there: the note is
    # for CSV and JSON, which print every digit float64 has.
    inexact = "warn" if args.csv or args.json else "allow"
    steps = _steps(args, {*grid, *zipped, *sample, *fixed})
    with warnings.catch_warnings(record=True) as caught:  # one plain line on stderr, not a warning's source line
        warnings.simplefilter("always", InexactFloatWarning)
        results = [
            sweep(model, args.quantities, grid=grid, zip=zipped, sample=sample, n=args.n, seed=args.seed, fixed=fixed, exact=args.exact, inexact=inexact, progress=args.progress, training=step)
            for step in steps
        ]  # fmt: skip
    for w in caught:  # float64 keeps 16 significant digits: worth a note on stderr, not a failure
        print(f"symform: note: {w.message}", file=sys.stderr)
    header, rows = _rows(results, steps)
    if args.json:
        out = {"model": model.name, "fixed": {k: _plain(v) for k, v in fixed.items()}, "shape": [len(steps), *results[0].shape] if len(steps) > 1 else list(results[0].shape)}
        if getattr(steps[0], "setup", None) is not None:
            described = [_described(s.setup) for s in steps]
            out["fine_tuning"] = described if len(steps) > 1 else described[0]
        return json.dumps({**out, "columns": {k: [row[k] for row in rows] for k in header}})
    if args.csv:
        return render_csv(header, rows)
    return render_table(header, rows)


def _steps(args, given: set[str]) -> list:
    """The training steps to sweep: one per --lora-targets set, or the plain training step."""
    from ...analysis.memory.memory import Training
    from ..options.finetune_args import SWEPT_RANK, finetune_setups

    training = Training(precision=args.precision, optimizer=args.optimizer, recompute=args.recompute, flash=uses_flash(args))
    setups = finetune_setups(args, given)
    if setups is None:
        if SWEPT_RANK in given:
            raise EvaluationError("lora_rank is swept or fixed without fine-tuning; add --lora-targets NAMES for adapters of that rank")
        return [training]
    from ...analysis.memory.finetune import FineTuneStep

    return [FineTuneStep(setup, training) for setup in setups]


def _described(setup) -> dict[str, object]:
    out = setup.describe()
    if setup.adapters and not setup.rank:
        out.pop("rank")  # the lora_rank column gives it
    return out


def _rows(results: Sequence[SweepResult], steps: Sequence) -> tuple[list[str], list[dict[str, object]]]:
    """Every point's columns; with several --lora-targets sets, the set first (its own axis, outermost)."""
    if len(results) == 1:
        return list(results[0]), results[0].rows()
    header = ["lora_targets", *results[0]]
    rows = [{"lora_targets": ",".join(step.setup.targets), **row} for step, result in zip(steps, results) for row in result.rows()]
    return header, rows


def render_csv(header: Sequence[str], rows: Sequence[dict[str, object]]) -> str:
    lines = [",".join(header)]
    lines += [",".join(_csv_cell(row[k]) for k in header) for row in rows]
    return "\n".join(lines)


def _csv_cell(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) and "," in value else str(value)


def render_table(header: Sequence[str], rows: Sequence[dict[str, object]]) -> str:
    cells = [[v if isinstance(v, str) else f"{v:,}" if isinstance(v, int) else f"{v:.6g}" for v in (row[k] for k in header)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    text = [bool(rows) and isinstance(rows[0][k], str) for k in header]  # names read left to right, numbers align right
    lines = ["  ".join(h.ljust(w) if t else h.rjust(w) for h, w, t in zip(header, widths, text))]
    lines += ["  ".join(c.ljust(w) if t else c.rjust(w) for c, w, t in zip(r, widths, text)).rstrip() for r in cells]
    return "\n".join(lines)
