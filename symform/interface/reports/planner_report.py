"""``symform plan``: the fastest parallel layouts that fit, as a table or JSON."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..options.cli_args import attention_arguments, positive_int, uses_flash
from ..options.finetune_args import finetune_arguments, finetune_setup
from ...engine.errors import ConfigError
from .memory_report import framework_argument, framework_line, framework_name, framework_version_argument, memory_budget, precision_arguments, time_profile_of

HEADROOM_TEXT = "2GiB"  # the planner's default (planner.HEADROOM), as --headroom takes it
from .serving_report import refuse_serving_options, serve_arguments, serve_command
from .timing_report import framework_facts_line, per_node
from ...engine.graph.model import Model

if TYPE_CHECKING:  # the planner (and numpy) load when a plan is asked for, not with the CLI
    from ...analysis.plans.planner import Plan


def plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", required=True, metavar="NAME", help="an accelerator or a system (symform hardware)")
    p.add_argument("--gpus", type=positive_int, help="devices in all (training)")
    p.add_argument("--global-batch", type=positive_int, help="sequences per training step")
    p.add_argument("--seq", type=positive_int, help="tokens per sequence (training)")
    precision_arguments(p)
    attention_arguments(p)
    p.add_argument("--memory", type=memory_budget, metavar="BYTES", help="memory per device (default: the device's)")
    p.add_argument("--headroom", type=headroom_bytes, default=HEADROOM_TEXT, metavar="BYTES", help=f"memory to leave free on every device (default {HEADROOM_TEXT}; 0 for none)")
    framework_argument(p)
    framework_version_argument(p)
    p.add_argument("--node-size", type=positive_int, help="devices per scale-up domain (default: the system's, or 8)")
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism beside tensor parallelism (default: the framework's, as torchtitan, Megatron and MaxText run it)")
    p.add_argument("--top", type=positive_int, default=5, help="layouts to show (default 5)")
    serve_arguments(p)
    finetune_arguments(p, needs="a training plan (not --serve)")


def plan_command(model: Model, args: argparse.Namespace) -> str:
    if args.serve:
        finetune_setup(args, training=False, hint="plan training instead: drop --serve")
        return serve_command(model, args)
    refuse_serving_options(args)
    missing = [f"--{n.replace('_', '-')}" for n in ("gpus", "global_batch", "seq") if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"a training plan needs {', '.join(missing)} (or --serve for a serving plan)")
    from ...analysis.plans.planner import plan

    result = plan(
        model, args.gpu, devices=args.gpus, global_batch=args.global_batch, seq=args.seq, precision=args.precision,
        optimizer=args.optimizer, flash=uses_flash(args), top=args.top, node_size=args.node_size, memory_bytes=args.memory,
        finetune=finetune_setup(args), framework=framework_name(args), headroom=args.headroom, time_facts=time_profile_of(args, model),
        sequence=args.sp,
    )  # fmt: skip
    return json.dumps(result.as_dict()) if args.json else _table(result)


def headroom_bytes(text: str) -> int:
    """--headroom: 0, or a memory size as --memory takes it."""
    return 0 if text.strip() in ("0", "0B", "0GB", "0GiB") else memory_budget(text)


def _headroom(result: Plan) -> str:
    free = result.assumptions["headroom_bytes"]
    return f", {free / 2**30:g} GiB of it kept free (--headroom)" if free else ""


def _table(result: Plan) -> str:
    lines = [
        f"layouts of {result.model} on {result.assumptions['devices']}, global batch {result.global_batch} × seq {result.seq}",
        f"{result.candidates:,} candidates screened in {result.screen_seconds * 1e3:.0f} ms, {result.fitting:,} fit in {result.assumptions['memory_budget_bytes'] / 2**30:.0f} GiB per device{_headroom(result)}",
        "attention: " + ("sdpa (FlashAttention kernels); --attention eager (--no-flash) for the other" if result.assumptions["flash_attention"] else "eager (scores materialised)"),
    ]
    if isinstance(result.assumptions.get("framework"), dict):
        lines.append(framework_line(result.assumptions["framework"]))
    if isinstance(result.assumptions.get("time_facts"), dict):
        lines += framework_facts_line(result.assumptions["time_facts"])
    sequence = result.assumptions.get("sequence_parallel", "")
    if not result.best:
        lines.append("none fits: add devices, lower the precision's bytes (--precision bf16) or shorten the sequence" + (f"; sequence parallelism {sequence}" if "left out" in sequence else ""))
        return "\n".join(lines)
    lines.append(f"{'#':>2}  {'dp':>4} {'tp':>3} {'pp':>3} {'ep':>3}  {'zero':>4}  {'mb':>3}  {'recompute':<9}  {'memory GiB':>10}  {'estimate s':>10}  {'step s (floor-ceiling)':>21}  {'MFU':>6}  {'tokens/s':>10}")
    for rank, row in enumerate(result.best, 1):
        layout = row.layout
        lines.append(
            f"{rank:>2}  {layout.data:>4} {layout.tensor:>3} {layout.pipeline:>3} {layout.expert:>3}  {layout.zero:>4}  {row.micro_batch:>3}  {row.recompute:<9}  "
            f"{float(row.memory.total) / 2**30:>10.2f}  {_estimate_text(row):>10}  {_range_text(row)}  {_mfu(row):>6.1%}  {_tokens_per_s(row):>10,.0f}"
        )
    best = result.best[0]
    lines.append("best layout, memory per device: " + ", ".join(f"{k} {float(v) / 2**30:.2f} GiB" for k, v in best.memory.values.items() if v))
    lines.append("best layout, time: " + ", ".join([f"math {best.time.t_math:.3f} s", f"memory {best.time.t_mem:.3f} s"] + [f"{k} comm {c.seconds:.3f} s over {c.link}{per_node(c)}" for k, c in best.time.comm.items()]))
    ranking = (
        "the estimate (symform time's), then its ceiling; floor: datasheet peaks, everything overlapped; ceiling: every kernel at its sustained rates, nothing overlapped; MFU and tokens/s at the estimate"
        if best.estimate
        else "the floor (full overlap at peak), then the sum at peak (no overlap): no efficiency data for an estimate, so no ceiling; step s is the floor to the sum at peak, MFU and tokens/s at the floor"
    )
    if "left out" in sequence or any(row.layout.sequence for row in result.best):
        lines.append(f"sequence parallelism {sequence}{'' if 'left out' in sequence else ' (--no-sp for none)'}, counted as symform memory and symform time count it")
    lines.append(f"ranked by {ranking}; symform time and symform memory give each layout's details")
    return "\n".join(lines)


def _range_text(row) -> str:
    """The bounds the estimate lies between (its floor and ceiling); without an estimate, the floor and the sum at peak."""
    timed = row.time
    upper = row.estimate.step.ceiling if row.estimate else timed.time_upper
    return f"{timed.time_lower:>10.3f} - {upper:<9.3f}"


def _mfu(row) -> float:
    return row.estimate.mfu() if row.estimate else row.time.mfu_high


def _tokens_per_s(row) -> float:
    return row.estimate.tokens_per_s if row.estimate else row.time.tokens_per_s_high


def _estimate_text(row) -> str:
    """The layout's estimated step in seconds, or a dash where the device has no efficiency data."""
    return f"{row.estimate.step.estimate:.3f}" if row.estimate else "-"
