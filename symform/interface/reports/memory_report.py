"""``symform memory`` and ``symform fit``: options, tables in GB and GiB, JSON."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from fractions import Fraction

from ..options.cli_args import attention_arguments, uses_flash, non_negative_int, positive_int
from ...engine.budget import number_from_text, quoted
from ...engine.errors import ConfigError, EvaluationError
from ...analysis.devices.hardware import load_device
from ...analysis.memory.memory import Inference, MemoryReport, Training, bit_width, inference_expressions, inference_memory, training_expressions, training_memory, whole_bytes
from ...analysis.memory.fitting import solve_fit
from ...analysis.memory.settings import RECOMPUTE, SCHEDULES, Layout, recipes
from ...engine.graph.model import Model
from ...analysis.memory.finetune import finetune_memory, finetune_memory_expressions
from ...analysis.memory.frameworks import DEFAULT as DEFAULT_FRAMEWORK, EAGER, frameworks, with_defaults
from ..options.finetune_args import finetune_arguments, finetune_setup

REPLICATE_HELP = "hybrid sharding (PyTorch FSDP2's HSDP, torchtitan's dp_replicate, MaxText's dcn_data_parallelism): the data-parallel ranks form N replicas, each sharding the --zero stage's copies over its dp / N ranks, the gradient shards all-reduced across the replicas (N divides --dp; needs --zero 1 or more; default 1)"
ETP_HELP = "expert tensor-parallel degree: the tensor split of each routed expert (Megatron-Core's --expert-tensor-parallel-size; default: --tp); another degree folds the expert ranks over the tensor and data ranks (expert × etp divides tp × dp × cp)"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": Fraction(1, 2)}


def kv_dtype(text: str) -> Fraction:
    """Bytes per cached K or V value: a named type, or any bit width (6bit: 3/4 of a byte, exactly)."""
    if text in KV_DTYPES:
        return Fraction(KV_DTYPES[text])
    bits = bit_width(text)
    if bits is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give one of {', '.join(KV_DTYPES)} or a bit width such as 6bit")
    return Fraction(bits, 8)


def kv_dtype_argument(group) -> None:
    """--kv-dtype, with one meaning and default in every command that holds a KV cache."""
    group.add_argument("--kv-dtype", type=kv_dtype, metavar="TYPE", help=f"KV cache element type: {', '.join(KV_DTYPES)} or any bit width (6bit); default: the kv_bytes convention, 2 bytes (bf16)")


def with_kv_dtype(model, args: argparse.Namespace):
    """The model with --kv-dtype's bytes per cached value, where it is given (refused beside a different --convention kv_bytes)."""
    if getattr(args, "kv_dtype", None) is None:
        return model
    given = dict(args.conventions).get("kv_bytes")
    if given is not None and Fraction(given) != args.kv_dtype:
        raise EvaluationError(f"--kv-dtype gives kv_bytes={args.kv_dtype} but --convention kv_bytes={given}; give one of them")
    return model.with_conventions(kv_bytes=args.kv_dtype)


def weight_format_name(text: str) -> str:
    if text in recipes().weight_format or bit_width(text) is not None:
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give one of {', '.join(recipes().weight_format)} or a bit width such as 6bit")


def memory_budget(text: str) -> int:
    """80e9, 80GB, 80GiB, 1.5TB: a number of bytes, units decimal (GB) or binary (GiB)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([KMGT]i?B|B)?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a memory size; write 80e9, 80GB or 80GiB")
    try:
        value = number_from_text(match.group(1), "memory") * _UNITS[(match.group(2) or "").upper()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: the budget must be positive")
    return int(value)


def precision_arguments(group) -> None:
    """How a training step stores its copies: --precision and --optimizer, with one meaning and default in every command."""
    table = recipes()
    group.add_argument("--precision", default="mixed", choices=list(table.precision), help="training recipe: bytes per parameter of each copy (default mixed: bf16 weights and grads, fp32 master and states; formulas/memory.toml)")
    group.add_argument("--optimizer", default="adamw", choices=list(table.optimizer), help="optimizer whose states each parameter keeps (default adamw: two fp32 moments; formulas/memory.toml)")


RECOMPUTE_LAYERS_HELP = "with --recompute full: only N layers of each pipeline stage (of each chunk with --chunks) recomputed, the rest keeping every activation (Megatron-Core's --recompute-method block --recompute-num-layers N)"


def recipe_arguments(group) -> None:
    """How a training step stores its copies and keeps its activations: --precision, --optimizer, --recompute."""
    precision_arguments(group)
    group.add_argument("--recompute", default="none", choices=RECOMPUTE, help="activation recomputation: selective (attention cores) or full (whole layers)")


def framework_argument(group, *, accounting: bool = True) -> None:
    """--framework; ``accounting``: whether the command takes --accounting, whose named conventions count under the eager framework."""
    default = f"{DEFAULT_FRAMEWORK}, or {EAGER} with --accounting" if accounting else DEFAULT_FRAMEWORK
    group.add_argument("--framework", choices=list(frameworks()), help=f"the training framework whose kernels, selective recomputation, buffers and overheads to count (formulas/frameworks; default {default})")


def framework_version_argument(group) -> None:
    group.add_argument("--framework-version", metavar="RELEASE", help="with --framework: the release whose time facts the estimate applies (formulas/frameworks/*.toml [[time.facts]], e.g. megatron 25.11); the named framework's release-free facts apply without it")


def time_profile_of(args: argparse.Namespace, model):
    """The named framework's time facts at the named release, for this model on the named device (none unless
    --framework is given)."""
    from ...analysis.time.efficiencies import accelerator_name, profile

    if getattr(args, "framework_version", None) and not getattr(args, "framework", None):
        raise ConfigError("--framework-version names a release of a framework; give --framework too")
    if not getattr(args, "framework", None):
        return None
    # a fact names the presets it was measured on: it holds for a model loaded as one of them, not for a file of that name
    return profile(args.framework, args.framework_version, model.spec.preset, device=accelerator_name(args.gpu) if getattr(args, "gpu", None) else None, dtype=getattr(args, "dtype", None) or "bf16")


def framework_name(args: argparse.Namespace) -> str:
    """The framework a command assumes: the one named, else eager where an accounting was named, else the default."""
    if getattr(args, "framework", None):
        return args.framework
    return EAGER if getattr(args, "accounting", None) else DEFAULT_FRAMEWORK


def setup_arguments(p: argparse.ArgumentParser) -> None:
    """The options both commands share: phase, precision, optimizer, layout, recomputation, formats."""
    phase = p.add_mutually_exclusive_group(required=True)
    phase.add_argument("--train", action="store_true", help="a training step")
    phase.add_argument("--infer", action="store_true", help="serving: weights, KV cache, activations")
    table = recipes()
    train = p.add_argument_group("training")
    recipe_arguments(train)
    train.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage over the data-parallel ranks")
    train.add_argument("--recompute-modules", type=lambda text: tuple(m.strip() for m in text.split(",") if m.strip()), default=(), metavar="A,B", help="the framework's modules to recompute (Megatron-Core's recompute_modules: core_attn, layernorm, moe_act, mla_up_proj); replaces --recompute selective's default")
    train.add_argument("--offload-layers", type=non_negative_int, default=0, metavar="N", help="layers whose saved activations wait in host memory between forward and backward (Megatron-Core's cpu_offloading_num_layers; default 0)")
    train.add_argument("--recompute-layers", type=positive_int, metavar="N", help=RECOMPUTE_LAYERS_HELP)
    train.add_argument("--distributed-optimizer", action=argparse.BooleanOptionalAction, default=None, help="Megatron's distributed optimizer (optimizer states sharded like ZeRO-1; default: the framework's)")
    train.add_argument("--grad-reduce-fp32", action=argparse.BooleanOptionalAction, default=None, help="Megatron-Core's main_grad buffers in fp32 (grad_reduce_in_fp32; default: the framework's, on for megatron); --no-grad-reduce-fp32 keeps them in the parameters' bf16, as Megatron-Bridge's performance recipes do")
    for name, help in (("dp", "data"), ("pp", "pipeline"), ("ep", "expert"), ("cp", "context")):
        train.add_argument(f"--{name}", type=positive_int, default=1, help=f"{help}-parallel degree")
    train.add_argument("--etp", type=positive_int, help=ETP_HELP)
    train.add_argument("--replicate", type=positive_int, default=1, metavar="N", help=REPLICATE_HELP)
    train.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism alongside tensor parallelism (default: the framework's, with --tp > 1)")
    framework_argument(train)
    train.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule")
    train.add_argument("--microbatches", type=positive_int, help="micro-batches per step (default: as many as pipeline stages)")
    train.add_argument("--chunks", type=positive_int, default=1, help="model chunks per device (interleaved schedule)")
    finetune_arguments(p)
    both = p.add_argument_group("both")
    both.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree")
    attention_arguments(both)
    infer = p.add_argument_group("inference")
    infer.add_argument("--past", "--context", dest="past", type=non_negative_int, default=0, help="tokens already in the KV cache (the context when decoding; --context is the same flag)")
    infer.add_argument("--weight-format", type=weight_format_name, default=None, metavar="FORMAT", help=f"stored weights: {', '.join(table.weight_format)}, or any bit width of the linear layers' weights (6bit); default: as the checkpoint says (its quantization_config or hf_quant_config.json), bf16 when it names none")
    kv_dtype_argument(infer)
    infer.add_argument("--kv-block", "--block-size", dest="kv_block", type=positive_int, help="paged KV cache block size in tokens (vLLM: 16); default: the kv_block convention, 1 (--block-size is the same flag)")


def memory_arguments(p: argparse.ArgumentParser) -> None:
    setup_arguments(p)
    p.add_argument("--batch", type=positive_int, required=True, help="sequences (per device: the micro-batch when training)")
    p.add_argument("--seq", type=positive_int, required=True, help="tokens per sequence (new tokens when serving)")
    p.add_argument("--gpu", metavar="NAME", help="an accelerator whose memory to compare with (symform hardware)")
    offload_arguments(p)


def offload_arguments(p: argparse.ArgumentParser) -> None:
    """Offload to host memory or NVMe (docs/offload.md): where each byte lives and the transfers it costs."""
    off = p.add_argument_group("offload (docs/offload.md)")
    off.add_argument("--offload", metavar="KEY=TIER,...", help="optimizer, gradients, params to cpu or nvme (ZeRO-Offload: optimizer=cpu; ZeRO-Infinity: optimizer=nvme,params=nvme)")
    off.add_argument("--kv-offload", choices=("cpu",), help="serving: keep the KV cache in host memory, read back each decode step")
    off.add_argument("--nvme", metavar="DRIVE", help="the NVMe drive of the nvme tier, for transfer times (hardware/storage: " + ", ".join(_drive_names()) + ", or a .toml file)")
    off.add_argument("--nvme-drives", type=positive_int, default=1, help="drives striped together (default 1)")


def _drive_names() -> list[str]:
    from ...analysis.memory.offload import drive_names

    return drive_names()


def fit_arguments(p: argparse.ArgumentParser) -> None:
    setup_arguments(p)
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--memory", type=memory_budget, metavar="BYTES", help="the budget: 80e9, 80GB or 80GiB")
    budget.add_argument("--gpu", metavar="NAME", help="an accelerator whose memory is the budget")
    p.add_argument("--solve", required=True, choices=("batch", "seq", "past"), help="the variable to maximise (past: the context a decode can hold)")
    p.add_argument("--batch", type=positive_int, help="sequences (required unless solved for)")
    p.add_argument("--seq", type=positive_int, help="tokens per sequence (required unless solved for; serving default 1)")
    offload_arguments(p)


def counted_framework(args: argparse.Namespace, tune) -> str:
    """The framework a training step is counted under: the one the command assumes; a fine-tuning step (``tune``) is
    counted by symform.analysis.memory.finetune, which takes no framework: none of its defaults apply."""
    return framework_name(args) if tune is None else EAGER


def _layout(args: argparse.Namespace) -> Layout:
    layout = Layout(
        data=args.dp, tensor=args.tp, pipeline=args.pp, expert=args.ep, expert_tensor=args.etp, context=args.cp, zero=args.zero,
        schedule=args.schedule, microbatches=args.microbatches, chunks=args.chunks, replicate=args.replicate,
    )  # fmt: skip
    return with_defaults(counted_framework(args, finetune_setup(args)), layout, sequence=args.sp, distributed_optimizer=args.distributed_optimizer)


def _training(args: argparse.Namespace) -> Training:
    return Training(
        precision=args.precision, optimizer=args.optimizer, recompute=args.recompute, flash=uses_flash(args), layout=_layout(args), framework=framework_name(args),
        recompute_modules=getattr(args, "recompute_modules", ()), grad_reduce_fp32=getattr(args, "grad_reduce_fp32", None), offload_layers=getattr(args, "offload_layers", 0), recompute_layers=getattr(args, "recompute_layers", None),
    )  # fmt: skip


def _inference(args: argparse.Namespace) -> Inference:
    flash = uses_flash(args)
    conventions = dict(args.conventions)
    for option, name, value in (("--kv-dtype", "kv_bytes", args.kv_dtype), ("--kv-block", "kv_block", args.kv_block)):
        if value is not None and name in conventions and Fraction(conventions[name]) != value:
            raise EvaluationError(f"{option} gives {name}={value} but --convention {name}={conventions[name]}; give one of them")
    # None: the model's conventions decide (an explicit --convention kv_bytes=..., else the default)
    return Inference(weight_format=args.weight_format, kv_bytes=args.kv_dtype, kv_block=args.kv_block, tensor=args.tp, flash=flash)


def _gpu_memory(name: str) -> tuple[str, int]:
    device = load_device(name)
    if getattr(device, "kind", None) != "accelerator":
        raise EvaluationError(f"{name} is a system; give one of its accelerators (symform hardware {name} names it)")
    return device.name or name, int(device.memory_bytes)


#: Training options that mean nothing to a serving step, with the value that leaves them unset.
TRAINING_ONLY = {"recompute": "none", "recompute_modules": (), "offload_layers": 0, "recompute_layers": None, "zero": 0, "distributed_optimizer": None, "grad_reduce_fp32": None}


def refuse_training_options(args: argparse.Namespace) -> None:
    """--infer with an option only a training step reads: refused rather than silently ignored."""
    given = [f"--{name.replace('_', '-')}" for name, unset in TRAINING_ONLY.items() if getattr(args, name, unset) != unset]
    if given:
        raise ConfigError(f"{', '.join(given)} describe a training step; drop them with --infer, or use --train")


def memory_command(model: Model, args: argparse.Namespace) -> str:
    if args.infer:
        refuse_training_options(args)
    tune = finetune_setup(args, training=args.train)
    if tune is not None:
        report = finetune_memory(model, tune, batch=args.batch, seq=args.seq, training=_training(args))
    elif args.train:
        report = training_memory(model, batch=args.batch, seq=args.seq, setup=_training(args))
    else:
        report = inference_memory(model, batch=args.batch, seq=args.seq, past=args.past, setup=_inference(args))
    placed = _placed(report, args)
    if placed is not None:
        report = placed.device
    device = _gpu_memory(args.gpu) if args.gpu else None
    tokens = args.seq + (0 if args.train else args.past)
    limit = model.context_limit
    if args.json:
        result = report.as_dict()
        if device:
            result["device"] = {"name": device[0], "memory_bytes": device[1], "fits": report.total <= device[1]}
        if limit is not None:
            result["context_limit"] = {**limit.as_dict(), "exceeded": tokens > limit.tokens}
        if placed is not None:
            result["offload"] = placed.as_dict()
        return json.dumps(result)
    table = _memory_table(report, device)
    if placed is not None:
        table += "\n" + _offload_table(placed)
    if limit is not None and tokens > limit.tokens:
        table += f"\nnote: {tokens:,} tokens per sequence exceed the model's own context, {limit.describe()}"
    return table


def _memory_table(report: MemoryReport, device: tuple[str, int] | None) -> str:
    workload = ", ".join(f"{k} {v}" for k, v in report.assumptions["workload"].items())
    title = f"{'training' if report.phase == 'train' else 'inference'} memory per device of {report.model} ({workload})"
    rows = [(k, v) for k, v in report.values.items() if v] + [("total", report.total)]
    width = max(len(k) for k, _ in rows)
    lines = [title, f"{'category':<{width}}  {'bytes':>20}  {'GB (10^9)':>10}  {'GiB (2^30)':>10}"]
    for name, value in rows:
        lines.append(f"{name:<{width}}  {whole_bytes(value):>20,}  {float(value) / 1e9:>10.3f}  {float(value) / 2**30:>10.3f}")
    if "trainable_params" in report.assumptions:
        trainable, params = report.assumptions["trainable_params"], report.assumptions["params"]
        lines.append(f"trainable parameters {trainable:,} of {params:,} ({trainable / params:.3%})")
    if report.values.get("backward_peak"):
        lines.append(f"backward_peak: {report.assumptions['backward_peak']}")
    if "attention" in report.assumptions:
        other = "--attention sdpa (--flash)" if report.assumptions["attention"].startswith("eager") else "--attention eager (--no-flash)"
        lines.append(f"attention: {report.assumptions['attention']}; {other} for the other")
    if isinstance(report.assumptions.get("framework"), dict):
        lines.append(framework_line(report.assumptions["framework"]))
    if "activation_offload_host_bytes" in report.assumptions:
        lines.append(f"activation offload: {report.assumptions['activation_offload_host_bytes'] / 1e9:.3f} GB of {report.assumptions['offload_layers']} layers in host memory per micro-batch, moved each way over the host link")
    if report.activations_by_component:
        lines.append("activations by component: " + ", ".join(f"{k} {float(v) / 1e9:.3f} GB" for k, v in report.activations_by_component.items() if v))
    if device:
        name, capacity = device
        verdict = "fits" if report.total <= capacity else "does NOT fit"
        lines.append(f"{name}: {capacity / 2**30:.0f} GiB ({capacity / 1e9:.1f} GB); this {verdict} ({float(report.total) / capacity:.0%} of it)")
    size = report.assumptions.get("checkpoint_size")
    if size:
        lines.append(_checkpoint_line(size))
    lines.append("assumptions: " + _assumptions_line(report.assumptions))
    return "\n".join(lines)


def framework_line(described: dict) -> str:
    """The framework a report assumed, in one line: its name, what it is, what it leaves out."""
    line = f"framework {described['name']}: {described['doc']}; --framework {' | '.join(frameworks())} for another"
    given = {k: v for k, v in described.get("settings", {}).items() if described["defaults"].get(k) != v}
    if given:  # its doc reads its defaults: say which the command turned
        line += "; given: " + ", ".join(f"{k} {'on' if v else 'off'}" for k, v in given.items())
    if described.get("not_modelled"):
        line += "; not modelled: " + ", ".join(described["not_modelled"])
    return line


def _placed(report: MemoryReport, args: argparse.Namespace):
    """The report split by --offload and --kv-offload, with transfer times where --gpu (PCIe) and --nvme give the links; None without offload."""
    from ...analysis.memory.offload import load_drive, place, with_times

    if not (args.offload or args.kv_offload):
        if args.nvme:
            raise EvaluationError("--nvme names the drive of an nvme tier; give --offload ...=nvme too, or drop it")
        return None
    offload = _offload(args)
    if args.nvme and "nvme" not in (offload.optimizer, offload.params):
        raise EvaluationError("--nvme names the drive of an nvme tier, but nothing is offloaded to nvme; drop it or offload to nvme")
    device = load_device(args.gpu) if getattr(args, "gpu", None) else None
    if device is not None and getattr(device, "kind", None) != "accelerator":
        device = None  # _gpu_memory refuses a system with its own message
    return with_times(place(report, offload), device, load_drive(args.nvme) if args.nvme else None, args.nvme_drives)


def _offloaded_categories(args: argparse.Namespace) -> set[str]:
    """What --offload and --kv-offload take off the device: the budget holds only the rest."""
    if not (args.offload or args.kv_offload):
        return set()
    from ...analysis.memory.offload import offloaded_categories

    return offloaded_categories(_offload(args), "train" if args.train else "infer")


def _offload(args: argparse.Namespace):
    from dataclasses import replace

    from ...analysis.memory.offload import Offload, parse_offload

    offload = parse_offload(args.offload) if args.offload else Offload()
    if args.kv_offload:
        if offload.kv != "device":
            raise EvaluationError("--kv-offload and --offload kv=... say the same; give one")
        offload = replace(offload, kv=args.kv_offload)
    return offload


def _offload_table(placed) -> str:
    from ...analysis.memory.offload import PLACES

    lines = [f"offloaded (per device): {float(placed.device.total) / 1e9:.3f} GB stay on the device"]
    for tier, found in placed.offloaded.items():
        parts = ", ".join(f"{k} {float(v) / 1e9:.3f} GB" for k, v in found.items() if v)
        lines.append(f"  {PLACES[tier]:<12} {float(placed.tier_total(tier)) / 1e9:.3f} GB: {parts}")
    if placed.transfers:
        lines.append("transfers per device:")
        for t in placed.transfers:
            when = f"{t.seconds * 1e3:,.3f} ms" if t.seconds is not None else "untimed (give --gpu for PCIe, --nvme for NVMe)"
            lines.append(f"  each {t.every:<15} {t.link:<17} {float(t.bytes) / 1e9:>10.3f} GB  {when}: {t.what}")
    lines += [f"  assumed: {a}" for a in placed.assumptions]
    return "\n".join(lines)


def _checkpoint_line(size: dict) -> str:
    """The checkpoint's own size beside symform's weights, and what makes the difference."""
    line = f"checkpoint total_size {size['total_size']:,} bytes; symform's weights {size['symform_weight_bytes']:,}"
    if size["difference"] == 0:
        line += ": equal"
    else:
        causes = [f"{name} ({value:+,})" for name, value in size["explained"].items()]
        if size["unexplained"]:
            causes.append(f"not explained ({size['unexplained']:+,}: buffers or tensors symform does not model)")
        line += f"; difference {size['difference']:+,}: " + ", ".join(causes)
    if size.get("dtypes"):
        line += "; stored " + ", ".join(f"{d} {v['tensors']} tensors {v['elements']:,} elements {v['bytes']:,} bytes" for d, v in size["dtypes"].items())
    return line


def _assumptions_line(assumptions: dict) -> str:
    skip = {"conventions", "workload", "layout", "checkpoint_size", "trainable_params", "params", "attention", "backward_peak", "flash_attention", "framework"}
    items = [f"{k}={v}" for k, v in assumptions.items() if k not in skip]
    layout = assumptions.get("layout")
    if layout:
        defaults = asdict(Layout())
        changed = [f"{k}={v}" for k, v in layout.items() if v != defaults[k]]
        items.append("layout " + (" ".join(changed) if changed else "one device"))
    return "; ".join(items)


def fit_command(model: Model, args: argparse.Namespace) -> str:
    budget = args.memory if args.memory else _gpu_memory(args.gpu)[1]
    fixed = {"batch": args.batch, "seq": args.seq if args.seq or args.train else 1}
    fixed.pop(args.solve, None)
    missing = [f"--{k}" for k, value in fixed.items() if value is None]
    if missing:
        raise EvaluationError(f"solving for {args.solve} needs {' and '.join(missing)}")
    tune = finetune_setup(args, training=args.train)
    if args.train:
        if args.solve == "past":
            raise EvaluationError("past (the cached context) is a serving variable; solve for batch or seq with --train, or use --infer")
        if tune is not None:
            categories, _, _ = finetune_memory_expressions(model, tune, _training(args))
        else:
            categories, _, _ = training_expressions(model, _training(args))
        values = {**model.values, **fixed}
    else:
        categories, _ = inference_expressions(model, _inference(args), keep=("past",))
        values = {**model.values, **fixed, **({"past": args.past} if args.solve != "past" else {})}
    gone = _offloaded_categories(args)
    total = sum(v for k, v in categories.items() if k not in gone)
    # a training sequence splits evenly over the ranks that share it (context, and tensor with sequence parallelism)
    if args.train and "seq" in fixed:
        _training(args).layout.check_sequence(fixed["seq"])
    step = _training(args).layout.sequence_step if args.train and args.solve == "seq" else 1
    fit = solve_fit(total, args.solve, budget, values, model.vocabulary, step=step)
    report = None
    if fit.largest:
        at = {**fixed, args.solve: fit.largest}
        report = (
            finetune_memory(model, tune, batch=at["batch"], seq=at["seq"], training=_training(args))
            if tune is not None
            else training_memory(model, batch=at["batch"], seq=at["seq"], setup=_training(args))
            if args.train
            else inference_memory(model, batch=at["batch"], seq=at["seq"], past=at.get("past", args.past), setup=_inference(args))
        )
        placed = _placed(report, args)
        report = placed.device if placed is not None else report
    context = _context_bound(model, args.solve, fixed, args.past if args.infer else 0)
    if context is not None:
        context -= context % fit.step  # the largest the context holds that the ranks split evenly
    if args.json:
        return json.dumps(
            {
                "model": model.name,
                "solve": args.solve,
                "largest": fit.largest,
                "step": fit.step,
                "budget_bytes": budget,
                "closed_form": None if fit.closed_form is None else str(fit.closed_form),
                "at_largest": None if report is None else report.as_dict(),
                "context_limit": None if model.context_limit is None else model.context_limit.as_dict(),
                "largest_within_context": None if context is None else max(0, min(fit.largest, context)),
            }
        )
    multiple = f" (a multiple of {fit.step}: the ranks sharing each sequence split it evenly)" if fit.step > 1 else ""
    lines = [f"largest {args.solve} of {model.name} within {budget:,} bytes ({budget / 1e9:.2f} GB, {budget / 2**30:.2f} GiB): {fit.largest:,}{multiple}"]
    if fit.closed_form is not None:
        lines.append(f"  closed form: {args.solve} ≤ {fit.closed_form}")
    if report is not None:
        lines.append(f"  at {args.solve} = {fit.largest:,}: {whole_bytes(report.total):,} bytes")
    else:
        lines.append(f"  not even {args.solve} = {fit.step} fits; add devices, shard (--zero, --tp) or recompute")
    if context is not None:
        lines.append(_context_line(model, args.solve, context, fit.largest, fixed, args.past if args.infer else 0))
    return "\n".join(lines)


def _context_bound(model: Model, solve: str, fixed: dict[str, int], past: int) -> int | None:
    """The largest ``solve`` the model's own context allows (past + seq tokens at most), or None where that does not bound it."""
    if model.context_limit is None or solve not in ("past", "seq"):
        return None
    others = fixed.get("seq", 0) if solve == "past" else past
    return model.context_limit.tokens - others


def _context_line(model: Model, solve: str, bound: int, largest: int, fixed: dict[str, int], past: int) -> str:
    limit = model.context_limit
    given = f" with seq {fixed['seq']:,}" if solve == "past" else (f" with past {past:,}" if past else "")
    head = f"  the model's own context: {limit.describe()}"
    if bound < 1:
        return f"{head}: nothing is left for {solve}{given}"
    verdict = "the memory holds more than the model reads" if largest > bound else "memory is the tighter limit"
    return f"{head}, so {solve} ≤ {bound:,}{given}: {verdict}; largest usable {min(largest, bound):,}"
