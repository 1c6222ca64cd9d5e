"""``symform time``: a training step (bounds, MFU, HFU, tokens/s) or a served request (TTFT, TPOT, tokens/s)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .cli_args import positive_int
from ..engine.errors import ConfigError
from ..analysis.memory import RECOMPUTE, SCHEDULES, Layout, matmul_rate, recipes, stored_weights
from ..engine.model import Model

if TYPE_CHECKING:  # the timing module (and numpy) load when a time is asked for, not with the CLI
    from ..analysis.timing import InferenceTime, PhaseTime, TrainingTime

TRAIN_ONLY = ("global_batch", "micro_batch", "seq", "dp", "pp", "ep", "recompute", "schedule")
INFER_ONLY = ("batch", "prompt", "output")


def time_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``symform time`` after MODEL (MODEL, --set, --convention and --json come from the CLI)."""
    p.add_argument("--gpu", required=True, metavar="NAME", help="an accelerator or a system (symform hardware), or a device file (.toml)")
    p.add_argument("--gpus", type=positive_int, help="devices in all: data × tensor × pipeline (training) or tensor (inference)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--train", action="store_true", help="one training step")
    mode.add_argument("--infer", action="store_true", help="one batch of requests: prefill, then decode")
    p.add_argument("--global-batch", type=positive_int, help="sequences per training step, over all data-parallel ranks")
    p.add_argument("--micro-batch", type=positive_int, help="sequences per micro-batch (default 1)")
    p.add_argument("--seq", type=positive_int, help="tokens per training sequence")
    for flag, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert")):
        p.add_argument(f"--{flag}", type=positive_int, help=f"{what}-parallel degree")
    p.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none)")
    p.add_argument("--schedule", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    p.add_argument("--batch", type=positive_int, help="requests served together (inference)")
    p.add_argument("--prompt", type=positive_int, help="prompt tokens per request (inference)")
    p.add_argument("--output", type=positive_int, help="tokens generated per request (inference)")
    p.add_argument("--dtype", default=None, help="peak rate used: bf16, fp16, fp8, … (default: serving at the rate of the checkpoint's weight format where the device has one, else bf16)")
    p.add_argument("--weight-format", default=None, choices=list(recipes().weight_format), help="serving: how the weights are stored and read (default: as the checkpoint says)")
    p.add_argument("--flash", action="store_true", help="FlashAttention's HBM traffic in the attention cores")
    p.add_argument("--node-size", type=positive_int, help="accelerators per scale-up domain (default: the system's, or 8 for an accelerator)")


def time_command(model: Model, args: argparse.Namespace) -> str:
    if args.train:
        result = _train(model, args)
        return json.dumps(result.as_dict()) if args.json else training_table(result)
    result = _infer(model, args)
    return json.dumps(result.as_dict()) if args.json else inference_table(result)


def _refuse(args: argparse.Namespace, names: tuple[str, ...], mode: str) -> None:
    given = [n for n in names if getattr(args, n) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} does not apply to {mode}; drop it")


def _require(args: argparse.Namespace, names: tuple[str, ...], mode: str) -> None:
    missing = ["--" + n.replace("_", "-") for n in names if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"{mode} needs {', '.join(missing)}")


def _degrees(args: argparse.Namespace) -> tuple[int, int, int]:
    """data, tensor, pipeline: --dp defaults to what --gpus leaves after tensor × pipeline."""
    tp, pp = args.tp or 1, args.pp or 1
    dp = args.dp
    if dp is None:
        if args.gpus is not None and args.gpus % (tp * pp):
            raise ConfigError(f"--gpus {args.gpus} is not a multiple of tensor × pipeline = {tp * pp}; change --gpus, --tp or --pp")
        dp = args.gpus // (tp * pp) if args.gpus else 1
    if args.gpus is not None and dp * tp * pp != args.gpus:
        raise ConfigError(f"--dp × --tp × --pp = {dp * tp * pp} but --gpus is {args.gpus}; make them agree")
    return dp, tp, pp


def _train(model: Model, args: argparse.Namespace) -> TrainingTime:
    _refuse(args, (*INFER_ONLY, "weight_format"), "--train")
    _require(args, ("global_batch", "seq"), "--train")
    dp, tp, pp = _degrees(args)
    layout = Layout(data=dp, tensor=tp, pipeline=pp, expert=args.ep or 1, schedule=args.schedule or "1f1b")
    from ..analysis.timing import training_time

    return training_time(
        model, args.gpu, global_batch=args.global_batch, micro_batch=args.micro_batch or 1, seq=args.seq,
        layout=layout, recompute=args.recompute or "none", dtype=args.dtype or "bf16", flash=args.flash, node_size=args.node_size,
    )


def _infer(model: Model, args: argparse.Namespace) -> InferenceTime:
    _refuse(args, TRAIN_ONLY, "--infer")
    _require(args, INFER_ONLY, "--infer")
    tp = args.tp or args.gpus or 1
    if args.gpus is not None and args.gpus != tp:
        raise ConfigError(f"inference runs on one tensor-parallel group: --gpus {args.gpus} must equal --tp {tp}")
    from ..analysis.timing import inference_time, placement

    stored, weight_bytes = stored_weights(model, args.weight_format, conventions=dict(args.conventions))
    dtype = matmul_rate(stored, placement(args.gpu, args.node_size).device.dense_flops_per_s, args.dtype)
    result = inference_time(
        model, args.gpu, batch=args.batch, prompt=args.prompt, output=args.output, tensor=tp,
        dtype=dtype, flash=args.flash, node_size=args.node_size, weight_bytes=weight_bytes,
    )
    if stored is not None:
        result.assumptions["weights"] = f"read as stored: {stored.read}"
    return result


# --- tables -----------------------------------------------------------------------------------


def _s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _sci(value: object) -> str:
    return f"{float(value):.4g}"


def training_table(r: TrainingTime) -> str:
    lay = r.layout
    lines = [
        f"training step of {r.model} on {r.devices} × {r.gpu} ({r.dtype}): data {lay['data']} × tensor {lay['tensor']} × pipeline {lay['pipeline']}, expert {lay['expert']}",
        f"global batch {r.global_batch} × seq {r.seq} = {r.tokens:,} tokens; micro-batch {r.micro_batch}, {r.microbatches} per step; recompute {r.recompute}",
        f"per device     FLOPs {_sci(r.flops_per_device)}   HBM bytes {_sci(r.bytes_per_device)}",
        f"compute        {_s(r.t_math)}",
        f"memory         {_s(r.t_mem)}",
    ]
    for kind, c in r.comm.items():
        lines.append(f"{kind + ' comm':<14} {_s(c.seconds)}  ({c.ranks} ranks over {c.link}, {_sci(c.bytes_per_rank)} bytes sent per rank)")
    if r.bubble_ratio:
        lines.append(f"bubble         {r.bubble_ratio:.2%} of the micro-batch work")
    lines += [
        f"step time      {_s(r.time_lower)} (full overlap) to {_s(r.time_upper)} (no overlap)",
        f"MFU            {r.mfu_high:.1%} to {r.mfu_low:.1%}    HFU {r.hfu_high:.1%} to {r.hfu_low:.1%}",
        f"tokens/s       {r.tokens_per_s_high:,.0f} to {r.tokens_per_s_low:,.0f}",
        "assumptions (--json lists them all): " + r.assumptions["peak"] + "; " + r.assumptions["node_size_source"],
    ]
    return "\n".join(lines)


def _phase_line(label: str, p: PhaseTime) -> str:
    return f"{label:<22} {_s(p.time_lower)} to {_s(p.time_upper)}  ({p.bound}-bound: compute {_s(p.t_math)}, memory {_s(p.t_mem)}, comm {_s(p.t_comm)})"


def inference_table(r: InferenceTime) -> str:
    lines = [
        f"serving {r.model} on {r.tensor} × {r.gpu} ({r.dtype}): batch {r.batch}, prompt {r.prompt}, output {r.output} tokens",
        _phase_line("TTFT (prefill)", r.prefill),
        _phase_line(f"decode at {r.first_decode.workload['past']}", r.first_decode),
        _phase_line(f"decode at {r.last_decode.workload['past']}", r.last_decode),
        f"{'TPOT (mean)':<22} {_s(r.tpot_lower)} to {_s(r.tpot_upper)}",
        f"{'request':<22} {_s(r.total_lower)} to {_s(r.total_upper)}",
        f"{'tokens/s (output)':<22} {r.tokens_per_s_high:,.1f} to {r.tokens_per_s_low:,.1f}",
        "assumptions (--json lists them all): " + r.assumptions["peak"] + "; " + r.assumptions["overlap"],
    ]
    return "\n".join(lines)
