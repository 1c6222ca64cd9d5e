"""``symform time``: a training step (bounds, MFU, HFU, tokens/s) or a served request (TTFT, TPOT, tokens/s)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING

from ..options.cli_args import attention_arguments, non_negative_float, non_negative_int, positive_float, positive_int, uses_flash
from ..options.finetune_args import finetune_arguments, finetune_setup
from .memory_report import kv_dtype_argument, with_kv_dtype

from ...engine.errors import BudgetError, ConfigError
from ...analysis.memory.finetune import describe_text
from ...analysis.memory.memory import matmul_rate, stored_weights
from ...analysis.memory.settings import PER_OP, RECOMPUTE, SCHEDULES, Layout, recipes
from ...engine.graph.model import Model
from ...analysis.memory.frameworks import sequence_parallel, timed_recompute, with_defaults
from .memory_report import ETP_HELP, RECOMPUTE_LAYERS_HELP, REPLICATE_HELP, counted_framework, framework_argument, framework_name, framework_version_argument, time_profile_of

if TYPE_CHECKING:  # the timing module (and numpy) load when a time is asked for, not with the CLI
    from ...analysis.time.timing import TrainingTime
    from ...analysis.time.phase_time import InferenceTime, PhaseTime

TRAIN_ONLY = ("global_batch", "micro_batch", "seq", "dp", "pp", "ep", "etp", "cp", "recompute", "schedule", "zero", "measured_step", "measured_tokens_per_s", "tokens", "sp", "chunks", "tp_comm_overlap", "ep_comm_overlap", "dualpipe", "replicate", "offload_layers", "recompute_layers", "pipeline_layout")
#: Decode attention kernels beyond sdpa and eager, with their sources (symform.analysis.time.efficiencies.ATTENTION)
DECODE_KERNELS = (
    ("fused_per_head", "a fused kernel reading each key/value head once per query head, not once per group (TensorRT-LLM's masked MHA for generation before its XQA kernel, v0.8: docs/source/blogs/XQA-kernel.md); sdpa reads it once per group (FlashDecoding, FlashAttention-2's grouped-query packing, TensorRT-LLM's XQA)"),
)
INFER_ONLY = ("batch", "prompt", "output")
CACHE_ONLY = ("kv_dtype",)  # training holds no KV cache


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
    for flag, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert"), ("cp", "context")):
        p.add_argument(f"--{flag}", type=positive_int, help=f"{what}-parallel degree")
    p.add_argument("--etp", type=positive_int, help=ETP_HELP)
    p.add_argument("--replicate", type=positive_int, metavar="N", help=REPLICATE_HELP)
    p.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none)")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage / FSDP sharding over the data-parallel ranks (3 = FSDP full shard; default 0)")
    p.add_argument("--fit-only", action="store_true", help="refuse a training layout whose memory does not fit one device")
    p.add_argument("--schedule", choices=SCHEDULES, help="pipeline schedule (default 1f1b; interleaved with --chunks above 1)")
    p.add_argument("--chunks", type=positive_int, help="virtual pipeline: model chunks per device in the interleaved schedule, bubble (pp − 1)/(chunks × micro-batches) (Narayanan et al. 2021, sec. 2.2.2); default 1")
    p.add_argument("--pipeline-layout", metavar="LAYOUT", help="the pipeline stages as the framework places them, in Megatron-Core's --pipeline-model-parallel-layout syntax (E embedding, t layer, m MTP module, L loss; '|' between stages; (...)*N repeats), e.g. 'Etttt|(tttt|)*14tmL': the device with the most work paces the pipeline (default: balanced stages)")
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism with tensor parallelism: all-gathers and reduce-scatters in place of the all-reduces (Korthikanti et al. 2022); default: the framework's, with --tp > 1 (torchtitan's, Megatron's and MaxText's run it)")
    p.add_argument("--tp-comm-overlap", action="store_true", default=None, help="with sequence parallelism (--sp, the default with --tp under torchtitan, Megatron and MaxText): the tensor-parallel communication pipelined with the GEMMs, as Megatron-LM's --tp-comm-overlap (Transformer Engine Userbuffers) runs it; only what outlasts the GEMMs is exposed in the estimate")
    p.add_argument("--ep-comm-overlap", action="store_true", default=None, help="with expert parallelism: the all-to-alls overlapped with other micro-batches' compute as Megatron-Core's overlap_moe_expert_parallel_comm runs them (off by default, as in Megatron-Core): one micro-batch's forward paired with another's backward phase by phase, so each hides under its partner's attention or experts only")
    p.add_argument("--dualpipe", action="store_true", default=None, help="with expert parallelism: the all-to-alls overlapped as DeepSeek-V3's DualPipe schedule does, anywhere in the step's compute (in place of --ep-comm-overlap's pairing)")
    p.add_argument("--recompute-layers", type=positive_int, metavar="N", help=RECOMPUTE_LAYERS_HELP)
    p.add_argument("--offload-layers", type=non_negative_int, metavar="N", help="layers whose saved activations go to host memory and back each micro-batch (Megatron-Core's cpu_offloading_num_layers): the memory check keeps them off the device, the copies over the host link are timed beside the compute (default 0)")
    framework_version_argument(p)
    p.add_argument("--batch", type=positive_int, help="requests served together (inference)")
    p.add_argument("--prompt", type=positive_int, help="prompt tokens per request (inference)")
    p.add_argument("--output", type=positive_int, help="tokens generated per request (inference)")
    p.add_argument("--dtype", default=None, help="matmul dtype: bf16, fp16, fp8, …; sets the peak rate, and fp8/int8/fp4 also the bytes of each weight read (default: bf16, or for serving the rate of the checkpoint's weight format where the device has one)")
    p.add_argument("--weight-format", default=None, choices=list(recipes().weight_format), help="serving: how the weights are stored and read (default: as the checkpoint says)")
    p.add_argument("--node-size", type=positive_int, help="accelerators per scale-up domain (default: the system's, or 8 for an accelerator)")
    kv_dtype_argument(p)
    p.add_argument("--expert-skew", type=non_negative_float, default=0.0, metavar="S", help="mixture of experts, serving: Zipf exponent of the routing (default 0: uniform), which sets how many distinct experts a decode step or a prefill reads")
    p.add_argument("--gemm-model", choices=("rows", "waves"), help="the estimate's GEMM model at its own fit: rows (the default) or waves (tiles and waves over the SMs; docs/time.md)")
    attention_arguments(p, DECODE_KERNELS)  # for the bounds, the estimate and the memory check alike
    framework_argument(p)  # the memory check's
    p.add_argument("--measured-step", type=positive_float, metavar="SECONDS", help="a measured training step: MFU and HFU by the PaLM, Megatron and exact definitions")
    p.add_argument("--measured-tokens-per-s", type=positive_float, metavar="TOKENS", help="a measured training throughput (tokens/s of the whole run), as --measured-step")
    p.add_argument("--tokens", type=positive_float, metavar="N", help="tokens of a whole training run (e.g. 15e12): its duration in days and GPU-hours")
    p.add_argument("--offload", metavar="KEY=TIER,...", help="optimizer, gradients or params to cpu or nvme (docs/offload.md): training's memory check counts what stays on the device; the transfers per step, or per decode step when serving, are timed")
    p.add_argument("--kv-offload", choices=("cpu",), help="serving: the KV cache in host memory, read back over PCIe each decode step (timed)")
    p.add_argument("--nvme", metavar="DRIVE", help="with an nvme tier: the drive (hardware/storage) that times its reads and writes")
    p.add_argument("--nvme-drives", type=positive_int, help="drives striped together (default 1)")
    p.add_argument("--price-per-hour", type=positive_float, metavar="DOLLARS", help="price of one device-hour (yours: symform ships no prices): $ per step or run (with --tokens) and $ per million tokens served (docs/cost.md)")
    p.add_argument("--energy", action="store_true", help="energy per token and per step or run, at the device's TDP (an upper bound; docs/cost.md)")
    finetune_arguments(p)


def time_command(model: Model, args: argparse.Namespace) -> str:
    try:
        return _time_command(model, args)
    except BudgetError as e:
        if not args.expert_skew:
            raise
        # the skewed routing's expectation is symform's own arithmetic, not the user's sizes: say which flag led there
        raise BudgetError(
            f"--expert-skew {args.expert_skew:g}: symform could not work out the expected distinct experts a step reads on "
            f"{model.name} within its budgets ({str(e).split(';')[0]}); this is a limit of symform, not of your sizes: drop --expert-skew (uniform routing) for now"
        ) from None


def _time_command(model: Model, args: argparse.Namespace) -> str:
    from ...analysis.time import estimate, utilisation

    if args.train:
        _refuse(args, CACHE_ONLY, "--train")
    model = with_kv_dtype(model, args)

    tune = finetune_setup(args, training=args.train)
    given = args.attention
    args.attention = "sdpa" if uses_flash(args) else "eager"  # one name from here on, whichever option gave it
    if given in (name for name, _ in DECODE_KERNELS):
        if args.train:
            raise ConfigError(f"--attention {given} is a serving engine's decode kernel; use sdpa or eager with --train")
        args.attention = given
    if args.train:
        args.dtype = args.dtype or "bf16"
        result = _train(model, args, tune)
        found = _estimate(lambda: estimate.training_estimate(model, args.gpu, global_batch=args.global_batch, micro_batch=args.micro_batch or 1, seq=args.seq, layout=_layout(args, tune), recompute=_timed_recompute(args, tune), dtype=args.dtype, attention=args.attention, node_size=args.node_size, finetune=tune, gemm_model=args.gemm_model, tp_comm_overlap=bool(args.tp_comm_overlap), profile=time_profile_of(args, model), ep_comm_overlap="dualpipe" if args.dualpipe else bool(args.ep_comm_overlap), offload_layers=args.offload_layers or 0, offload_framework=framework_name(args), recompute_layers=args.recompute_layers))
        memory = _memory_fit(model, args, result, tune)
        measured = utilisation.measured(model, result, step_s=args.measured_step, tokens_per_s=args.measured_tokens_per_s) if (args.measured_step or args.measured_tokens_per_s) else None
        run = utilisation.duration(model, result, found, args.tokens, measured) if args.tokens else None
        if tune:
            measured, run = _exact_only(measured, run)
        priced = _training_cost(args, result, found, measured, run)
        if args.json:
            data = result.as_dict() | {"attention": args.attention, "memory": memory}
            if isinstance(found, estimate.TrainingEstimate):
                data |= {"estimate_s": found.step.as_dict(), "estimate": found.as_dict()}
                if tune:
                    data["estimate"]["fine_tuning"] = FINETUNE_ESTIMATE
            else:
                data["estimate_missing"] = found
            if measured:
                data["measured"] = measured
            if run:
                data["run"] = run
            if priced:
                data["cost"] = priced
            return json.dumps(data)
        return _with_attention(training_table(result), args) + _memory_line(memory) + _training_extra(found, measured, run, tune) + _cost_lines(priced)
    result, weight_bytes = _infer(model, args)
    tp = args.tp or args.gpus or 1
    found = _estimate(
        lambda: estimate.serving_estimate(
            model, args.gpu, batch=args.batch, prompt=args.prompt, output=args.output, tensor=tp, dtype=args.dtype, attention=args.attention, node_size=args.node_size,
            expert_skew=args.expert_skew, gemm_model=args.gemm_model, weight_bytes=weight_bytes, bounds=result,
        )
    )  # fmt: skip
    priced = _serving_cost(args, result, found)
    offloaded = _serving_offload(model, args, result)
    if args.json:
        data = result.as_dict() | {"attention": args.attention}
        if offloaded:
            data["offload"] = offloaded
        if isinstance(found, estimate.ServingEstimate):
            for key, band in (("ttft_s", found.ttft), ("tpot_s", found.tpot), ("total_s", found.total)):
                data[key] |= band.as_dict()
            # the bounds' own high and low stand; the estimate's band is under "estimate"
            data["tokens_per_s"]["estimate"] = found.tokens_per_s.estimate
            data["estimate"] = found.as_dict()
        else:
            data["estimate_missing"] = found
        if priced:
            data["cost"] = priced
        return json.dumps(data)
    return _with_attention(inference_table(result), args) + _serving_extra(found) + _serving_offload_line(offloaded) + _cost_lines(priced)


FINETUNE_ESTIMATE = "fine-tuning at the efficiency factors fitted to full training runs (docs/validation.md); no fine-tuning run has checked them"


def _exact_only(measured: dict | None, run: dict | None) -> tuple[dict | None, dict | None]:
    """Fine-tuning: keep the MFU and HFU of the step's exact FLOPs; PaLM's, Megatron's and Narayanan's Eq. 4 count full training."""
    if measured:
        measured = {k: v for k, v in measured.items() if not k.endswith(("_palm", "_megatron"))}
    if run:
        run = {k: v for k, v in run.items() if k != "eq4_days"}
    return measured, run


def _estimate(make):
    """The estimate, or the one-line reason there is none (a device without efficiency data keeps its bounds)."""
    try:
        return make()
    except ConfigError as e:
        if "no efficiency data" in str(e):
            return str(e)
        raise


def _layout(args: argparse.Namespace, tune=None) -> Layout:
    dp, tp, pp = _degrees(args)
    chunks = args.chunks or 1
    schedule = args.schedule or ("interleaved" if chunks > 1 else "1f1b")
    # the framework the step is counted under (the default one unless named) brings its sequence-parallelism default
    # (torchtitan's and Megatron's tensor parallelism run it), as `memory` and `plan` count it; fine-tuning takes none
    sequence = sequence_parallel(counted_framework(args, tune), args.sp, tp)
    return Layout(data=dp, tensor=tp, pipeline=pp, expert=args.ep or 1, context=args.cp or 1, schedule=schedule, zero=args.zero or 0, sequence=sequence, chunks=chunks, expert_tensor=args.etp, replicate=args.replicate or 1, pipeline_layout=args.pipeline_layout)


def _with_attention(table: str, args: argparse.Namespace) -> str:
    first, _, rest = table.partition("\n")
    which = {"sdpa": "sdpa: FlashAttention kernels in the attention cores", "eager": "eager: scores materialised"}.get(args.attention, f"{args.attention}: {dict(DECODE_KERNELS).get(args.attention, '').split(';')[0]}")
    other = "--attention eager (--no-flash)" if args.attention == "sdpa" else "--attention sdpa (--flash)"
    return f"{first}\nattention      {which}; {other} for the other\n{rest}"


def _flash(args: argparse.Namespace) -> bool:
    """FlashAttention (SDPA) unless eager was asked for: the bounds, the estimate and the memory check agree."""
    return args.attention != "eager"


def _memory_fit(model: Model, args: argparse.Namespace, result: TrainingTime, tune=None) -> dict[str, object]:
    """The layout's training memory on one device (symform.analysis.memory.memory, as `symform memory --train` counts it) against the device's."""
    from ...analysis.memory.memory import Training, training_memory, whole_bytes
    from ...analysis.time.step_model import placement

    place = placement(args.gpu, args.node_size)
    flash = _flash(args)
    # the memory check counts the framework's buffers and the step's layout with its defaults; fine-tuning takes none
    name = counted_framework(args, tune)
    # the step's micro-batches: what its schedule keeps in flight reads them
    layout = replace(with_defaults(name, _layout(args, tune), sequence=args.sp), microbatches=result.microbatches)
    setup = Training(recompute=args.recompute or "none", flash=flash, layout=layout, framework=name, offload_layers=args.offload_layers or 0, recompute_layers=args.recompute_layers)
    if tune is not None:
        from ...analysis.memory.finetune import finetune_memory

        report = finetune_memory(model, tune, batch=args.micro_batch or 1, seq=args.seq, training=setup)
    else:
        report = training_memory(model, batch=args.micro_batch or 1, seq=args.seq, setup=setup)
    offloaded = _offloaded(report, args, place.device, result) if args.offload else None
    if offloaded is not None:
        report = offloaded.pop("device")
    need, have = whole_bytes(report.total), int(place.device.memory_bytes)
    fit = {"bytes_per_device": need, "capacity_bytes": have, "fits": need <= have, "attention": "flash" if flash else "eager", "framework": name}
    if layout.pipeline > 1:  # what the schedule keeps in flight reads them
        fit["microbatches"] = layout.microbatches
    if offloaded is not None:
        fit["offload"] = offloaded
    if getattr(args, "pipeline_layout", None):
        if args.fit_only:
            raise ConfigError("--fit-only sizes balanced pipeline stages, and a pipeline layout's heaviest stage is not sized yet; drop --fit-only or the layout")
        fit["stages"] = "balanced: the layout's heaviest stage is not sized"
    if args.fit_only and not fit["fits"]:
        raise ConfigError(f"this layout needs {need / 1e9:.1f} GB per device, more than the {have / 1e9:.1f} GB of {place.device.name}; raise --tp or --pp, add --recompute or --zero, lower --micro-batch, or drop --fit-only")
    return fit


def _placed(report, args: argparse.Namespace, device):
    """``report`` split by --offload (and --kv-offload), its transfers timed over the device's PCIe and --nvme's drives."""
    from dataclasses import replace

    from ...analysis.memory.offload import Offload, load_drive, parse_offload, place, with_times

    offload = parse_offload(args.offload) if args.offload else Offload()
    if getattr(args, "kv_offload", None):
        if offload.kv != "device":
            raise ConfigError("--kv-offload and --offload kv=... say the same; give one")
        offload = replace(offload, kv=args.kv_offload)
    if args.nvme and "nvme" not in (offload.optimizer, offload.params):
        raise ConfigError("--nvme names the drive of an nvme tier, but --offload puts nothing on nvme; drop it or offload to nvme")
    return with_times(place(report, offload), device, load_drive(args.nvme) if args.nvme else None, args.nvme_drives or 1)


def _offloaded(report, args: argparse.Namespace, device, result: TrainingTime) -> dict[str, object]:
    """The training memory split by --offload, and its transfers per step: per micro-batch ones times the micro-batches."""
    placed = _placed(report, args, device)
    times = [t.seconds * (result.microbatches if t.every == "micro-batch" else 1) if t.seconds is not None else None for t in placed.transfers]
    per_step = sum(times) if None not in times else None
    return {"device": placed.device, **placed.as_dict(), "transfer_s_per_step": per_step}


def _memory_line(memory: dict[str, object]) -> str:
    verdict = "fits" if memory["fits"] else "DOES NOT FIT (--fit-only refuses it)"
    stages = f"; stages {memory['stages']}" if "stages" in memory else ""
    microbatches = f" --microbatches {memory['microbatches']}" if "microbatches" in memory else ""
    line = f"\nmemory/device  {memory['bytes_per_device'] / 1e9:.1f} GB of {memory['capacity_bytes'] / 1e9:.1f} GB: {verdict} (symform memory --train --framework {memory['framework']}{microbatches}, {memory['attention']} attention{stages})"
    off = memory.get("offload")
    if off:
        where = ", ".join(f"{t / 1e9:.1f} GB {'in host memory' if tier == 'cpu' else 'on NVMe'}" for tier, t in off["totals"].items() if tier != "device")
        seconds = off["transfer_s_per_step"]
        timed = _s(seconds) + " of transfers per step, none overlapped (docs/offload.md)" if seconds is not None else "transfers untimed (give --nvme for the nvme tier)"
        line += f"\noffload        {where}; {timed}"
    return line


def _training_extra(found, measured, run, tune=None) -> str:
    if isinstance(found, str):
        lines = [f"estimate       none: {found}"]
    else:
        e = found.step
        lines = [
            f"estimate       {_s(e.estimate)} (band {_s(e.low)} to {_s(e.high)}; ceiling {_s(e.ceiling)}: sustained rates, nothing overlapped), attention {found.attention}: compute {_s(found.compute_s)}, exposed comm {_s(sum(found.exposed_comm_s.values()))}, bubble {_s(found.bubble_s)}, optimizer {_s(found.optimizer_s)}",
            f"at estimate    MFU {found.mfu():.1%}  HFU {found.hfu():.1%}  tokens/s {found.tokens_per_s:,.0f}",
            *_extrapolating_line(found.extrapolating, 14),
            *framework_facts_line(found.factors.get("framework")),
        ]
        if tune:
            lines.append(f"               {FINETUNE_ESTIMATE}")
    if measured:
        lines.append("measured       " + "  ".join(f"{k} {v:.1%}" for k, v in measured.items() if k.startswith(("mfu", "hfu"))))
    if run:
        eq4 = f"; Narayanan Eq. 4: {run['eq4_days']:.1f} days" if "eq4_days" in run else ""
        lines.append(f"whole run      {run['tokens']:.3g} tokens: {run['days']:.1f} days, {run['gpu_hours']:,.0f} GPU-hours ({run['from']}){eq4}")
    return "\n" + "\n".join(lines)


def _serving_extra(found) -> str:
    if isinstance(found, str):
        return f"\nestimate               none: {found}"
    return "\n" + "\n".join([
        f"{'estimate TTFT':<22} {_s(found.ttft.estimate)} (band {_s(found.ttft.low)} to {_s(found.ttft.high)}; ceiling {_s(found.ttft.ceiling)}), attention {found.attention}, fused kernels",
        f"{'estimate TPOT':<22} {_s(found.tpot.estimate)} (band {_s(found.tpot.low)} to {_s(found.tpot.high)}; ceiling {_s(found.tpot.ceiling)})",
        f"{'estimate tokens/s':<22} {found.tokens_per_s.estimate:,.1f}",
        *_extrapolating_line(found.extrapolating, 22),
    ])


def framework_facts_line(applied: dict | None) -> list[str]:
    """The framework's time facts the estimate applied, each with its source (formulas/frameworks/*.toml [[time.facts]])."""
    if not applied or not applied["facts"]:
        return []
    release = f"{applied['name']} {applied['version']}" if applied["version"] else applied["name"]
    return [f"{'framework':<14} {release}: " + "; ".join(f"{what} ({source})" for what, source in applied["facts"].items())]


def _extrapolating_line(reasons: tuple[str, ...], width: int) -> list[str]:
    """What the estimate lies outside the published runs by: its band is widened for each (docs/validation.md)."""
    if not reasons:
        return []
    return [f"{'extrapolating':<{width}} {'; '.join(reasons)}: band widened (rules.toml [band_widen])"]


def _serving_offload(model: Model, args: argparse.Namespace, result: InferenceTime) -> dict[str, object] | None:
    """With --offload params=... or --kv-offload: what each decode step moves over PCIe (and NVMe), at the first and the last decode step."""
    if not (args.offload or args.kv_offload):
        return None
    from ...analysis.memory.memory import Inference, inference_memory
    from ...analysis.time.step_model import placement

    device = placement(args.gpu, args.node_size).device
    setup = Inference(weight_format=args.weight_format, tensor=result.tensor, flash=_flash(args))
    found = {}
    for which, past in (("first_decode", args.prompt), ("last_decode", args.prompt + args.output - 1)):
        placed = _placed(inference_memory(model, batch=args.batch, seq=1, past=past, setup=setup), args, device)
        seconds = [t.seconds for t in placed.transfers]
        found[which] = placed.as_dict() | {"past": past, "transfer_s": sum(seconds) if None not in seconds else None}
    return found


def _serving_offload_line(offloaded: dict[str, object] | None) -> str:
    if not offloaded:
        return ""
    first, last = offloaded["first_decode"], offloaded["last_decode"]
    where = ", ".join(f"{t / 1e9:.2f} GB {'in host memory' if tier == 'cpu' else 'on NVMe'}" for tier, t in last["totals"].items() if tier != "device")
    if first["transfer_s"] is None or last["transfer_s"] is None:
        return f"\n{'offload':<22} {where} at the last decode step; transfers untimed (give --nvme for the nvme tier)"
    return f"\n{'offload':<22} {where} at the last decode step; each decode step moves it back: {_s(first['transfer_s'])} to {_s(last['transfer_s'])}, none overlapped (docs/offload.md)"


def _tdp(args: argparse.Namespace) -> float | None:
    from ...analysis.time.step_model import placement

    return placement(args.gpu, args.node_size).device.tdp_watts if args.energy else None


def _training_cost(args: argparse.Namespace, result: TrainingTime, found, measured, run) -> dict[str, object] | None:
    """$ and energy of the step, or of the run with --tokens, at the step time the run is counted at."""
    if not (args.price_per_hour or args.energy):
        return None
    from ...analysis.devices import cost
    from ...analysis.time import utilisation

    seconds, origin = (run["seconds"], run["from"]) if run else utilisation.step_seconds(result, found, measured)
    tokens = run["tokens"] if run else result.tokens
    return {"of": "whole run" if run else "one step", "from": origin} | cost.run_cost(seconds=seconds, devices=result.devices, tokens=tokens, price_per_hour=args.price_per_hour, tdp_watts=_tdp(args))


def _serving_cost(args: argparse.Namespace, result: InferenceTime, found) -> dict[str, object] | None:
    """$ and energy per million output tokens at the estimate's tokens/s, else at the upper time bound's."""
    if not (args.price_per_hour or args.energy):
        return None
    from ...analysis.devices import cost

    rate, origin = (found.tokens_per_s.estimate, "estimated tokens/s") if not isinstance(found, str) else (result.tokens_per_s_low, "tokens/s at the upper time bound (no efficiency data)")
    return {"of": "a million output tokens", "from": origin} | cost.serving_cost(tokens_per_s=rate, devices=result.tensor, price_per_hour=args.price_per_hour, tdp_watts=_tdp(args))


def _cost_lines(priced: dict[str, object] | None) -> str:
    if not priced:
        return ""
    head = f"cost of {priced['of']} ({priced['from']}, {priced['devices']} device{'s' if priced['devices'] > 1 else ''}, {priced['device_hours']:,.4g} device-hours)"
    lines = [head]
    if "dollars" in priced:
        lines.append(f"  ${priced['dollars']:,.2f} at ${priced['price_per_device_hour']:g}/device-hour: ${priced['dollars_per_million_tokens']:,.4g} per million tokens")
    if "energy_kwh" in priced:
        lines.append(f"  energy ≤ {priced['energy_kwh']:,.4g} kWh, {priced['joules_per_token']:,.4g} J per token")
    lines += [f"  assumed: {a}" for a in priced["assumptions"]]
    return "\n" + "\n".join(lines)


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
    """data, tensor, pipeline: --dp defaults to what --gpus leaves after tensor × pipeline × context."""
    tp, pp, cp = args.tp or 1, args.pp or 1, getattr(args, "cp", None) or 1
    dp = args.dp
    if dp is None:
        if args.gpus is not None and args.gpus % (tp * pp * cp):
            raise ConfigError(f"--gpus {args.gpus} is not a multiple of tensor × pipeline × context = {tp * pp * cp}; change --gpus, --tp, --pp or --cp")
        dp = args.gpus // (tp * pp * cp) if args.gpus else 1
    if args.gpus is not None and dp * tp * pp * cp != args.gpus:
        raise ConfigError(f"--dp × --tp × --pp × --cp = {dp * tp * pp * cp} but --gpus is {args.gpus}; make them agree")
    return dp, tp, pp


def _timed_recompute(args: argparse.Namespace, tune) -> str:
    """--recompute as the framework the memory check counts runs it (its selective policy), for the step's time."""
    return timed_recompute(counted_framework(args, tune), args.recompute or "none")


def _train(model: Model, args: argparse.Namespace, tune=None) -> TrainingTime:
    _refuse(args, (*INFER_ONLY, "weight_format", "kv_offload"), "--train")
    if args.measured_step and args.measured_tokens_per_s:
        raise ConfigError("give --measured-step or --measured-tokens-per-s, not both")
    _require(args, ("global_batch", "seq"), "--train")
    if tune is not None and args.tp_comm_overlap:  # it pipelines sequence parallelism's transfers, which adapters do not run
        raise ConfigError("--tp-comm-overlap pipelines sequence parallelism's transfers, and fine-tuning with adapters runs tensor parallelism without it; drop --tp-comm-overlap")
    from ...analysis.time.timing import training_time

    return training_time(
        model, args.gpu, global_batch=args.global_batch, micro_batch=args.micro_batch or 1, seq=args.seq,
        layout=_layout(args, tune), recompute=_timed_recompute(args, tune), dtype=args.dtype, flash=_flash(args), node_size=args.node_size, finetune=tune, offload_layers=args.offload_layers or 0, offload_framework=framework_name(args), recompute_layers=args.recompute_layers,
    )


def _infer(model: Model, args: argparse.Namespace) -> tuple[InferenceTime, Mapping[str, sympy.Expr] | None]:
    """The serving bounds, and the weights' bytes per parameter by leaf as stored (None: the model's convention),
    which the estimate reads as the bounds do."""
    _refuse(args, (*TRAIN_ONLY, "framework", "framework_version"), "--infer")  # a training framework's facts: none for serving
    if args.fit_only:
        raise ConfigError("--fit-only does not apply to --infer; drop it")
    _require(args, INFER_ONLY, "--infer")
    tp = args.tp or args.gpus or 1
    if args.gpus is not None and args.gpus != tp:
        raise ConfigError(f"inference runs on one tensor-parallel group: --gpus {args.gpus} must equal --tp {tp}")
    from ...analysis.time.phase_time import inference_time
    from ...analysis.time.step_model import placement

    stored, weight_bytes = stored_weights(model, args.weight_format, conventions=dict(args.conventions))
    dtype = matmul_rate(stored, placement(args.gpu, args.node_size).device.dense_flops_per_s, args.dtype)
    result = inference_time(
        model, args.gpu, batch=args.batch, prompt=args.prompt, output=args.output, tensor=tp,
        dtype=dtype, flash=_flash(args), node_size=args.node_size, weight_bytes=weight_bytes, expert_skew=args.expert_skew,
        grouped=args.attention != "fused_per_head",
    )
    if stored is not None:
        result.assumptions["weights"] = f"read as stored: {stored.read}"
    args.dtype = dtype  # the estimate runs at the same rate
    return result, weight_bytes


# --- tables -----------------------------------------------------------------------------------


def per_node(comm) -> str:
    """Where a group crosses nodes with several ranks in each: they pool their nodes' NICs (step_model.group_bandwidth)."""
    return f", {comm.per_node} in each node" if comm.link == "scale_out" and comm.per_node > 1 else ""


def _s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _sci(value: object) -> str:
    return f"{float(value):.4g}"


def _recompute_words(recompute: str) -> str:
    """The recomputation the step charges, in the option's words: a framework's per-op policy is its selective."""
    return f"selective (the framework's per-op policy, {recompute}: the ops it does not save run again)" if recompute in PER_OP else recompute


def training_table(r: TrainingTime) -> str:
    lay = r.layout
    lines = [
        f"training step of {r.model} on {r.assumptions['devices']} ({r.dtype}): data {lay['data']} × tensor {lay['tensor']}" + (" (sequence parallel)" if lay.get("sequence") else "") + f" × pipeline {lay['pipeline']}" + (f" × context {lay['context']}" if lay["context"] > 1 else "") + f", expert {lay['expert']}" + (f" × expert tensor {lay['expert_tensor']}" if lay.get("expert_tensor") not in (None, lay["tensor"]) else "")
        + (f"; ZeRO-{lay['zero']} sharded over {lay['data'] // lay['replicate']} data ranks, replicated {lay['replicate']} times (hybrid sharding)" if lay.get("replicate", 1) > 1 else ""),
        f"global batch {r.global_batch} × seq {r.seq} = {r.tokens:,} tokens; micro-batch {r.micro_batch}, {r.microbatches} per step; recompute {_recompute_words(r.recompute)}",
        *([f"fine-tuning    {describe_text(r.assumptions['fine_tuning'])}; step FLOPs {_sci(r.model_flops)}: frozen weights take no weight gradient"] if "fine_tuning" in r.assumptions else []),
        f"per device     FLOPs {_sci(r.flops_per_device)}   HBM bytes {_sci(r.bytes_per_device)}",
        f"compute        {_s(r.t_math)}",
        f"memory         {_s(r.t_mem)}",
    ]
    for kind, c in r.comm.items():
        lines.append(f"{kind + ' comm':<14} {_s(c.seconds)}  ({c.ranks} ranks over {c.link}{per_node(c)}, {_sci(c.bytes_per_rank)} bytes sent per rank)")
    if r.bubble_ratio:
        lines.append(f"bubble         {r.bubble_ratio:.2%} of the micro-batch work")
    if r.stage_pace != 1:
        lines.append(f"stages         {r.layout['pipeline_layout']}: the slowest device holds {r.stage_pace:.4g}× the mean share and paces the pipeline (compute, memory and bubble scaled)")
    lines += [
        f"step time      {_s(r.time_lower)} (floor: peak, full overlap) to {_s(r.time_upper)} (peak, no overlap; not a ceiling)",
        f"MFU            {r.mfu_high:.1%} to {r.mfu_low:.1%}    HFU {r.hfu_high:.1%} to {r.hfu_low:.1%}",
        f"tokens/s       {r.tokens_per_s_high:,.0f} to {r.tokens_per_s_low:,.0f}",
        "assumptions (--json lists them all): " + r.assumptions["peak"] + "; " + r.assumptions["node_size_source"],
    ]
    return "\n".join(lines)


def _phase_line(label: str, p: PhaseTime) -> str:
    memory = _s(p.t_mem) + (f" ({_s(p.mem_floor)} fused)" if p.mem_floor < p.t_mem else "")
    comm = _s(p.t_comm) + (f" ({_s(p.comm_floor)} at bandwidth alone)" if p.comm_floor < p.t_comm else "")
    return f"{label:<22} {_s(p.time_lower)} to {_s(p.time_upper)}  ({p.bound}-bound: compute {_s(p.t_math)}, memory {memory}, comm {comm})"


def inference_table(r: InferenceTime) -> str:
    lines = [
        f"serving {r.model} on {r.assumptions['devices']} ({r.dtype}): batch {r.batch}, prompt {r.prompt}, output {r.output} tokens",
        _phase_line("TTFT (prefill)", r.prefill),
        _phase_line(f"decode at {r.first_decode.workload['past']}", r.first_decode),
        _phase_line(f"decode at {r.last_decode.workload['past']}", r.last_decode),
        f"{'TPOT (mean)':<22} {_s(r.tpot_lower)} to {_s(r.tpot_upper)}",
        f"{'request':<22} {_s(r.total_lower)} to {_s(r.total_upper)}",
        f"{'tokens/s (output)':<22} {r.tokens_per_s_high:,.1f} to {r.tokens_per_s_low:,.1f}",
        "assumptions (--json lists them all): " + r.assumptions["peak"] + "; " + r.assumptions["overlap"],
    ]
    return "\n".join(lines)


