"""``symform roofline``: a phase of a model on one accelerator, as a table, JSON or a chart."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ...analysis.time import flash_attention
from ...analysis.devices.hardware import DTYPE_BYTES
from ..options.finetune_args import finetune_arguments, finetune_setup
from .memory_report import kv_dtype_argument, with_kv_dtype
from ..options.cli_args import attention_arguments, uses_flash, non_negative_int, positive_int
from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from ...analysis.memory.memory import matmul_rate, stored_weights
from ...analysis.memory.settings import recipes
from ...analysis.time.roofline import PHASES, PhaseRoofline, Roofline, accelerator, roofline
from ...analysis.time.crossovers import Crossover, decode_crossover

#: --dtype sets the bytes of weights, activations and KV cache to its width
#: (symform.analysis.devices.hardware.DTYPE_BYTES) unless --convention names them.
STORAGE = ("weight_bytes", "act_bytes", "kv_bytes")


def roofline_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``symform roofline`` after MODEL (MODEL, --set, --convention and --json come from the CLI)."""
    p.add_argument(
        "--gpu",
        required=True,
        metavar="NAME",
        help="an accelerator (symform hardware) or a device file (.toml)",
    )
    p.add_argument(
        "--phase",
        required=True,
        choices=PHASES,
        help="train: one forward+backward step; prefill: a forward pass over the prompts; decode: one new token per sequence",
    )
    finetune_arguments(p, needs="--phase train")
    p.add_argument("--batch", required=True, type=positive_int, help="sequences per step")
    p.add_argument("--seq", type=positive_int, help="tokens per sequence (train, prefill)")
    p.add_argument(
        "--past", "--context", dest="context", type=non_negative_int, help="tokens already in the KV cache (decode; --context is the same flag)"
    )
    p.add_argument(
        "--dtype",
        default=None,
        help="peak rate and storage width: bf16, fp16, fp8, tf32, fp32, … (default: the rate the checkpoint's weight format runs at where the device has it, else bf16)",
    )
    kv_dtype_argument(p)
    p.add_argument(
        "--weight-format",
        default=None,
        choices=list(recipes().weight_format),
        help="how the weights are stored and read (default: as the checkpoint says; else --dtype's width)",
    )
    p.add_argument(
        "--depth",
        type=positive_int,
        default=1,
        help="component breakdown depth in path segments (default 1)",
    )
    attention_arguments(p)
    p.add_argument(
        "--sram-bytes",
        type=positive_int,
        default=flash_attention.DEFAULT_SRAM_BYTES,
        help=f"on-chip bytes FlashAttention re-reads keys and values from (the paper's M; default {flash_attention.DEFAULT_SRAM_BYTES}: an L2 cache; {flash_attention.PAPER_SRAM_BYTES} is one A100 SM's SRAM, the paper's)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the roofline chart to FILE (.png or .svg; needs matplotlib: pip install matplotlib)",
    )


def roofline_command(model: Model, args: argparse.Namespace) -> str:
    _check_workload(args)
    gpu = accelerator(args.gpu)
    stored, weight_bytes = stored_weights(model, args.weight_format, conventions=dict(args.conventions))
    widths = args.dtype or "bf16"  # a rate taken from the checkpoint leaves activations and the cache in bf16
    args.dtype = matmul_rate(stored, gpu.dense_flops_per_s, args.dtype)
    gpu.flops_per_s(args.dtype)  # an unknown dtype fails here, before any algebra
    model = with_kv_dtype(_in_dtype(model, widths, given=dict(args.conventions)), args)
    options = {"dtype": args.dtype, "flash": uses_flash(args), "sram_bytes": args.sram_bytes}
    if weight_bytes is not None:
        options["weight_bytes"] = weight_bytes
    result = roofline(
        model,
        gpu,
        phase=args.phase,
        batch=args.batch,
        seq=args.seq,
        context=args.context,
        depth=args.depth,
        finetune=finetune_setup(args, training=args.phase == "train", hint="give --phase train"),
        **options,
    )
    if stored is not None:
        result = replace(result, notes=(*result.notes, f"weights read as stored: {stored.read}; matrix products at the {args.dtype} rate"))
    found = (
        decode_crossover(model, gpu, context=args.context, **options)
        if args.phase == "decode"
        else None
    )
    if args.plot:
        from .roofline_chart import roofline_chart  # matplotlib only when a chart is asked for

        roofline_chart(result, args.plot)
    if args.json:
        return json.dumps(roofline_json(result, found))
    return roofline_table(result, found)


def _check_workload(args: argparse.Namespace) -> None:
    if args.plot and not args.plot.lower().endswith((".png", ".svg")):
        raise ConfigError(f"--plot {args.plot}: a chart is written as .png or .svg")
    if args.phase == "decode":
        if args.context is None:
            raise ConfigError(
                "--phase decode needs --past C (tokens already in the KV cache)"
            )
        if args.seq is not None:
            raise ConfigError(
                "--phase decode runs one new token per sequence; give --past, not --seq"
            )
    else:
        if args.seq is None:
            raise ConfigError(
                f"--phase {args.phase} needs --seq S (tokens per sequence)"
            )
        if args.context is not None:
            raise ConfigError(
                f"--phase {args.phase} starts from an empty cache; --past is for --phase decode"
            )


def _in_dtype(model: Model, dtype: str, *, given: dict[str, object]) -> Model:
    """Stored elements take the dtype's width, except the storage sizes the user set with --convention."""
    width = DTYPE_BYTES.get(dtype)
    if width is None:
        return model
    return model.with_conventions(
        **{name: width for name in STORAGE if name not in given}
    )


def roofline_json(result: PhaseRoofline, found: Crossover | None) -> dict[str, object]:
    report = result.as_dict()
    if found is not None:
        report["crossover"] = crossover_json(found)
    return report


def crossover_json(found: Crossover) -> dict[str, object]:
    return {
        "variable": found.variable,
        "value": found.value,
        "first_compute_bound": found.first_compute_bound,
        "expression": None if found.expression is None else str(found.expression),
        "ridge": found.ridge,
        "limit_intensity": found.limit_intensity,
    }


# --- the human table -------------------------------------------------------------------


def roofline_table(result: PhaseRoofline, found: Crossover | None = None) -> str:
    total = result.total
    lines = [
        _title(result),
        f"peak {_si(total.peak_flops_per_s)}FLOP/s, HBM {_si(total.bytes_per_s)}B/s, ridge {float(total.ridge):.1f} FLOP/byte",
        "",
    ]
    width = max([len(p) for p in result.components] + [len("total")])
    header = f"{'component':<{width}}  {'FLOPs':>10}  {'bytes':>10}  {'FLOP/byte':>10}  {'bound':<7}  {'T_math':>9}  {'T_mem':>9}"
    lines += [header]
    lines += [_row(path, r, width) for path, r in result.components.items()]
    lines += [_row("total", total, width), ""]
    lines.append(
        f"time ≥ {_seconds(total.time_lower)} (max: full overlap)   ≤ {_seconds(total.time_upper)} (sum: no overlap)   {total.bound}-bound"
    )
    if found is not None:
        lines.append(_crossover_line(found, result))
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def _title(result: PhaseRoofline) -> str:
    w = result.workload
    what = {
        "train": f"one training step, batch {w.get('batch')} × seq {w.get('seq')}",
        "prefill": f"prefill, batch {w.get('batch')} × seq {w.get('seq')}",
        "decode": f"decode of one token after {w.get('past', 0):,} cached, batch {w.get('batch')}",
    }[result.phase]
    return f"roofline of {result.model}: {what}, on {result.device} ({result.dtype})"


def _row(path: str, r: Roofline, width: int) -> str:
    intensity = "-" if r.intensity is None else f"{float(r.intensity):.3g}"
    return f"{path:<{width}}  {_si(r.flops):>10}  {_si(r.bytes) + 'B':>10}  {intensity:>10}  {r.bound:<7}  {_seconds(r.t_math):>9}  {_seconds(r.t_mem):>9}"


def _crossover_line(found: Crossover, result: PhaseRoofline) -> str:
    context = f"{result.workload.get('past', 0):,} cached tokens"
    if found.value is None:
        return f"crossover: decode never turns compute-bound at {context} (intensity tends to {found.limit_intensity:.3g} FLOP/byte as batch grows, below the ridge)"
    closed = (
        f"; batch = {found.expression} with R the ridge"
        if found.expression is not None
        else ""
    )
    return f"crossover: decode turns compute-bound from batch {found.first_compute_bound:,} at {context} (intensity = ridge at batch {found.value:.1f}{closed})"


def _si(value: object) -> str:
    number = float(value)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(number) >= scale:
            return f"{number / scale:.3g} {prefix}"
    return f"{number:.3g} "


def _seconds(value: object) -> str:
    number = float(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if number >= scale:
            return f"{number / scale:.3g} {unit}"
    return f"{number / 1e-9:.3g} ns"
