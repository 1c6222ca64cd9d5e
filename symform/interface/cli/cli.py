"""The ``symform`` command: human tables by default, ``--json`` for machines.

Bad input ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..options.cli_args import DERIVE_WORKLOAD, given_once, positive_int
from ..options.parser import _ARGV, EXIT_BAD_INPUT, _assignment, _Parser, _setting
from ...engine.errors import SymformError
from ...engine.store.data import accountings_table, version

if TYPE_CHECKING:  # the commands that build expressions import these; --help and models never load sympy
    from ...engine.graph.derive import Derivation
    from ...engine.algebra.evaluate import Number
    from ...engine.graph.model import Model


# Verbs whose options and work live in their own module, imported only when the verb is used:
# verb -> (module, its arguments function, its command function, help)
_MODULE_VERBS = {
    "memory": ("reports.memory_report", "memory_arguments", "memory_command", "memory on one device for a training step or for serving: weights, gradients, optimizer, activations, KV cache"),
    "plan": ("reports.planner_report", "plan_arguments", "plan_command", "the fastest data/tensor/pipeline/expert layouts, micro-batches, ZeRO stages and recomputation that fit"),
    "fit": ("reports.memory_report", "fit_arguments", "fit_command", "the largest batch, sequence or cached context that fits a memory budget"),
    "roofline": ("reports.roofline_report", "roofline_arguments", "roofline_command", "roofline of a training step, prefill or decode on one accelerator: FLOPs, bytes, bound, time bounds"),
    "time": ("reports.timing_report", "time_arguments", "time_command", "training step time, MFU and HFU on N devices, or serving TTFT, TPOT and tokens/s"),
    "check": ("reports.check_report", "check_arguments", "check_command", "compare a model's declaration with a tiny instance of the real PyTorch module: parameters per module, FLOPs, KV cache, saved activations (pip install 'symform[oracle]')"),
    "sweep": ("reports.sweep_report", "sweep_arguments", "sweep_command", "quantities over a grid, zipped lists or random samples of sizes and workloads (table, --csv, --json)"),
}


def _from(module: str, name: str):
    return getattr(importlib.import_module(f"..{module}", __package__), name)


class _Version(argparse.Action):
    """--version: the version is looked up only when asked for (an installed copy reads its metadata, which is slow to import)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"symform {version()}\n", sys.stdout)  # where argparse's own version action prints it
        parser.exit()


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``verb``, the other verbs' options are left out (their modules not loaded); with "", every verb's are."""
    parser = _Parser(prog="symform", description="Symbolic cost formulas for transformer models.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser, metavar="COMMAND", help="what to work out (symform COMMAND --help for its options)")

    def wanted(name: str) -> bool:
        return verb is None or verb == name

    def model_command(name: str, help: str, *, quantity: bool = False) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help, description=help)
        if quantity:
            from ...engine.graph.model import quantity_names

            p.add_argument("quantity", help=f"one of {', '.join(q.replace('_', '-') for q in quantity_names())}")
        p.add_argument("model", help="a bundled preset (symform models), a Hugging Face Hub id (Qwen/Qwen3-8B), a path to a config.json, or an architecture file (.toml)")
        p.add_argument("--revision", metavar="REV", help="with a Hub id: the branch, tag or commit to read (default main)")
        p.add_argument("--set", dest="sizes", action="append", type=_setting, default=[], metavar="NAME=VALUE", help="change one of the model's arguments: a size (--set n_layers=32), an option (--set include_mtp=1) or a slot's component (--set attention=mla_attention_absorbed)")
        p.add_argument("--convention", dest="conventions", action="append", type=_assignment, default=[], metavar="NAME=VALUE", help="counting convention or storage size, e.g. --convention causal=1/2")
        p.add_argument("--accounting", choices=_accountings() if wanted(name) else None, help="a named convention set, applied before any --convention: eager counts what PyTorch eager keeps (formulas/accountings.toml, docs/memory.md)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        _from("options.media", "media_arguments")(p)
        return p

    def workload(p: argparse.ArgumentParser, *, required: bool) -> None:
        p.add_argument("--batch", type=positive_int, required=required, help="sequences per step")
        p.add_argument("--seq", type=positive_int, required=required, help="tokens per sequence")

    p = model_command("params", "parameter count: total and per component")
    p.add_argument("--depth", type=positive_int, default=None, help="breakdown depth in path segments (default: all the way down for tables, 1 for JSON)")

    p = model_command("flops", "forward, backward and training-step FLOPs for a batch")
    workload(p, required=True)
    p.add_argument("--depth", type=positive_int, default=None, help="breakdown depth in path segments")
    if wanted("flops"):
        from ..options.finetune_args import finetune_arguments

        finetune_arguments(p, needs="")

    for name, help in (("derive", "closed form of a quantity: exact, under assumptions, leading order"), ("latex", "LaTeX of a quantity's expression or derivation")):
        p = model_command(name, help, quantity=wanted(name))
        p.add_argument("--assume", metavar="NAME", help="assumption sets declared by the components, comma-separated, the first a component declares applying to it (standard; grouped,standard); none for no assumptions; the blocks use the family's default when not given")
        p.add_argument("--leading", action="store_true", help="keep only the leading order in the large symbols")
        p.add_argument("--recompute", default="none", choices=("none", "selective", "full"), help="saved-activations under activation recomputation: selective (attention cores recomputed) or full (each layer's input kept alone)")
        p.add_argument("--large", metavar="A,B", help="comma-separated symbols to treat as large (default: the vocabulary's widths)")
        workload(p, required=False)
        p.add_argument("--tokens", type=positive_int, help="training tokens D")
        for degree, what in (("tp", "tensor"), ("pp", "pipeline"), ("dp", "data")):
            p.add_argument(f"--{degree}", type=positive_int, help=f"{what}-parallel degree (training-bytes; a symbol when not given)")
        if name == "latex" and wanted("latex"):
            _from("reports.latex_report", "latex_arguments")(p)

    for name, (module, arguments, _, help) in _MODULE_VERBS.items():
        p = model_command(name, help)
        if wanted(name):
            _from(module, arguments)(p)

    p = verbs.add_parser("plot", help="charts as .png or .svg: parameter and FLOPs shares, training memory, roofline (needs matplotlib: pip install matplotlib)")
    if wanted("plot"):
        _from("reports.plots", "plot_arguments")(p)

    p = verbs.add_parser("docs", help="write the reference pages (a page per component and per family) from the declarations", description="write the reference pages (a page per component and per family) from the declarations")
    p.add_argument("--out", default="docs/reference", help="directory to write (default docs/reference)")

    p = verbs.add_parser("import", help="write a declaration file for a transformers causal LM no bundled family reads, its sizes bound to the config's fields (pip install 'symform[oracle]')", description="write a declaration file for a transformers causal LM no bundled family reads, its sizes bound to the config's fields (pip install 'symform[oracle]')")
    _from("reports.import_command", "import_arguments")(p)
    p = verbs.add_parser("models", help="list bundled presets and supported Hugging Face model types", description="list bundled presets and supported Hugging Face model types")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = verbs.add_parser("validate", help="symform's estimates of published measured runs and their errors (docs/validation.md)", description="symform's estimates of published measured runs and their errors (docs/validation.md)")
    if wanted("validate"):
        _from("reports.validation_report", "validate_arguments")(p)
    p = verbs.add_parser("hardware", help="accelerators and systems: the list, or one of them", description="accelerators and systems: the list, or one of them")
    p.add_argument("name", nargs="?", help="a bundled device (symform hardware) or a path to a device file (.toml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = verbs.add_parser("cache", help="the cache symform keeps between runs: where it is and what it holds (info), or empty it (clear)", description="the cache symform keeps between runs: where it is and what it holds (info), or empty it (clear)")
    p.add_argument("action", choices=("info", "clear"), help="info: the directory, each store file, its size and entries; clear: remove symform's store files, nothing else")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = verbs.add_parser("web", help="a local page and JSON API over these commands (needs starlette and uvicorn: pip install starlette uvicorn)", description="a local page and JSON API over these commands (needs starlette and uvicorn: pip install starlette uvicorn)")
    if wanted("web"):
        _from("cli.web", "web_arguments")(p)
    return parser


def _accountings() -> list[str]:
    """The named convention sets' names, read without building the engine (--help loads none of it)."""
    return sorted(accountings_table())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (``argv``: the command line's arguments, else sys.argv's)."""
    code = _main(list(sys.argv[1:] if argv is None else argv))
    if argv is None:
        # Run as a program (the console script, python -m symform): the interpreter exits next, and its
        # last garbage collection would walk every object the command built (sympy's trees, the loaded
        # libraries: some 90,000 after `symform params`) only to free memory the exit frees anyway.
        # Exit handlers, flushing and reference-counted clean-up still run; symform's commands close
        # their files themselves.
        gc.freeze()
    return code


def _main(argv: list[str]) -> int:
    _ARGV[:] = argv
    if argv[:1] == ["latex"] and "--formulas" in argv:  # models one after another, no quantity: its own parser
        return _print_or_fail(lambda: _from("reports.latex_report", "appendix_command")(argv[1:]))
    if argv[:1] == ["latex"] and "--compare" in argv:  # the same: models side by side
        return _print_or_fail(lambda: _from("reports.latex_report", "compare_command")(argv[1:]))
    if argv[:1] == ["latex"] and "--paper" in argv:  # a paper's forms: no model, no quantity
        return _print_or_fail(lambda: _from("reports.latex_report", "paper_command")(argv[1:]))
    try:  # no verb (--help, --version): "" wants none of the verbs' options, only their names and help
        args = build_parser(argv[0] if argv and not argv[0].startswith("-") else "").parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already reported on one line
        return int(e.code or 0)
    except SymformError as e:  # a data file the options are read from (the frameworks' names) is malformed
        print(f"symform: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _print_or_fail(lambda: _run(args), args)


def _print_or_fail(produce, args: argparse.Namespace | None = None) -> int:
    try:
        output = produce()
    except SystemExit as e:  # a usage error, already reported on one line
        return int(e.code or 0)
    except SymformError as e:  # one line: notes gathered on the way are moot
        print(f"symform: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in getattr(args, "notes", []):
        print(f"symform: note: {note}", file=sys.stderr)
    try:
        print(output)
    except BrokenPipeError:
        pass
    return 0


def _run(args: argparse.Namespace) -> str:
    for dest, flag in (("sizes", "--set"), ("conventions", "--convention")):
        given_once([name for name, _ in getattr(args, dest, None) or ()], flag)
    if args.verb == "models":
        return _models(args)
    if args.verb == "import":
        return _from("reports.import_command", "import_command")(args)
    if args.verb == "validate":
        return _from("reports.validation_report", "validate_command")(args)
    if args.verb == "hardware":
        return _hardware(args)
    if args.verb == "cache":
        return _cache(args)
    if args.verb == "web":
        return _from("cli.web", "web_command")(args)
    if args.verb == "plot":
        return _from("reports.plots", "plot_command")(args)
    if args.verb == "latex":
        return _from("reports.latex_report", "latex_command")(args, _load)
    if args.verb == "docs":
        from ..papers.docgen import docs_command

        return docs_command(args)
    if args.verb == "params":
        return _params_text(_facts(args, _params_facts), args)
    if args.verb == "flops":
        return _flops_text(_facts(args, _flops_facts), args)
    if args.verb in _MODULE_VERBS:
        module, _, command, _ = _MODULE_VERBS[args.verb]
        return _from(module, command)(_load(args), args)
    from ...engine.graph.derive import derive

    model = _from("options.media", "with_source_symbolic")(_load, args)

    workload = {k: getattr(args, k) for k in DERIVE_WORKLOAD if getattr(args, k) is not None}
    large = [s.strip() for s in args.large.split(",") if s.strip()] if args.large else None
    chain_assume = None if args.assume == "none" else args.assume
    derivation = derive(model, args.quantity, assume=chain_assume, leading=args.leading, large=large, **workload)
    if args.recompute != "none":  # what training keeps when it recomputes: the chain alone (blocks are of what it saves)
        return _from("reports.latex_report", "recomputed_text")(_from("papers.latex", "recomputed_derivation")(derivation, model, args.recompute, **workload), args.json)
    if args.verb == "latex":
        return derivation.latex() if (chain_assume or args.leading) else derivation.exact.latex()
    return _derivation(derivation, args, model, workload)


def _with_media(model: Model, args: argparse.Namespace) -> Model:
    """The model with the images, videos and audio clips the command line gives each sequence."""
    with_media = _from("options.media", "with_all_media")(model, args)
    # a sequence holds its media's tokens (a decode step's --seq is refused by its command, in its own words)
    if with_media is not model and getattr(args, "seq", None) is not None and getattr(args, "phase", None) != "decode":
        with_media.check_workload(seq=args.seq)
    return with_media


def _load(args: argparse.Namespace) -> Model:
    from ...engine.graph.model import Model

    model = Model.load(args.model, revision=getattr(args, "revision", None), conventions=dict(args.conventions), accounting=args.accounting)
    if not args.sizes:
        return _with_media(model, args)
    settings = dict(args.sizes)
    changed = _with_media(model.with_arguments(**settings), args)
    note = kept_sizes_note(model, settings)
    if note:
        args.notes = [*getattr(args, "notes", []), note]  # printed once the command has succeeded
    return changed


def kept_sizes_note(model: Model, settings: dict[str, object]) -> str | None:
    """Sizes are independent: --set d_model=12288 leaves d_ff, n_heads, d_head ... at the model's values. Say so."""
    changed = [name for name in settings if name in model.values]
    kept = {name: value for name, value in model.values.items() if name not in settings}
    if not changed or not kept:
        return None
    return (
        f"--set {', '.join(changed)} changes {'that size' if len(changed) == 1 else 'those sizes'} alone; "
        f"{', '.join(f'{k}={v:,}' for k, v in kept.items())} keep {model.name}'s values (--set them too to change them)"
    )


def _json_number(value: Number) -> int | float:
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value)
    return value if isinstance(value, int) else float(value)


def _conventions(model: Model) -> dict[str, int | float]:
    kinds = model.vocabulary.names("convention", "dtype")
    return {s.name: _json_number(Fraction(int(v.p), int(v.q))) for s, v in model.conventions.items() if s.name in kinds}


def _cache(args: argparse.Namespace) -> str:
    from ...engine.store import disk_cache

    if args.action == "clear":
        removed = disk_cache.clear()
        return json.dumps({"removed": removed}) if args.json else f"removed {len(removed)} file{'s' if len(removed) != 1 else ''} from {disk_cache.cache_dir() or 'no cache directory'}"
    found = disk_cache.info()
    if args.json:
        return json.dumps(found)
    lines = [f"cache directory  {found['directory'] or 'none'}  ({found['chosen_by']})"]
    for f in found["files"]:
        held = f"{f['entries']:,} entries" if f["current"] else "another version's: never read (symform cache clear removes it)"
        lines.append(f"  {f['file']}  {f['bytes']:,} bytes  {held}")
    lines.append(f"total            {found['bytes']:,} bytes in {len(found['files'])} file{'s' if len(found['files']) != 1 else ''}")
    return "\n".join(lines)


def _facts(args: argparse.Namespace, work: Callable[[Model, argparse.Namespace], dict[str, Any]]) -> dict[str, Any]:
    """``work``'s facts about the model the command line names."""
    return work(_load(args), args)


def _params_facts(model: Model, args: argparse.Namespace) -> dict[str, Any]:
    """The numbers ``symform params`` prints: tables break down all the way down by default, JSON one level."""
    total = model.evaluate("params")
    active = model.evaluate("active_params")
    parts = model.evaluate_breakdown("params", depth=args.depth or 1 if args.json else args.depth)
    return {"name": model.name, "total": total, "active": active, "parts": parts, "values": model.values, "stored": _stored_dtypes(model)}


def _params_text(facts: dict[str, Any], args: argparse.Namespace) -> str:
    name, total, active, parts, stored = facts["name"], facts["total"], facts["active"], facts["parts"], facts["stored"]
    if args.json:
        return json.dumps({"model": name, "total": _json_number(total), "active": _json_number(active), "components": {k: _json_number(v) for k, v in parts.items()}, "values": facts["values"], **({"checkpoint_dtypes": stored} if stored else {})})
    table = _table(f"parameters of {name}", parts, total, unit="")
    if active != total:
        table += f"\nactive per token {_count_text(active)}  ({_human(active)}; see docs/conventions.md)"
    if stored:
        elements = sum(d["elements"] for d in stored.values())
        by_dtype = ", ".join(f"{d} {v['elements']:,} in {v['tensors']} tensors ({v['bytes']:,} bytes)" for d, v in stored.items())
        table += f"\ncheckpoint stores {elements:,} elements (symform counts {_count_text(total)} parameters): {by_dtype}"
    return table


def _stored_dtypes(model: Model) -> dict | None:
    """Elements, tensors and bytes per dtype as the checkpoint's safetensors headers give them, where they were read."""
    checkpoint = model.spec.checkpoint
    return {k: dict(v) for k, v in checkpoint.dtypes.items()} if checkpoint is not None and checkpoint.dtypes else None


def _flops_facts(model: Model, args: argparse.Namespace) -> dict[str, Any]:
    """What ``symform flops`` prints: kept between runs where it is plain numbers (no fine-tuning setup)."""
    from ..options.finetune_args import finetune_setup

    workload = {"batch": args.batch, "seq": args.seq}
    forward = model.evaluate("forward_flops", **workload)
    backward = model.evaluate("backward_flops", **workload)
    tune = finetune_setup(args)
    counts = None
    if tune is not None:
        from ...analysis.memory.finetune import finetune_counts

        counts = finetune_counts(model, tune, **workload)
    parts = model.evaluate_breakdown("forward_flops", depth=args.depth or 1 if args.json else args.depth, **workload)
    return {
        "name": model.name, "forward": forward, "backward": backward, "parts": parts, "conventions": _conventions(model),
        "accounting": model.accounting or "default", **_from("options.media", "all_media_in")(model),
        **({"tune": tune, "counts": counts} if tune is not None else {}),  # objects: such facts are not kept
    }  # fmt: skip


def _flops_text(facts: dict[str, Any], args: argparse.Namespace) -> str:
    forward, backward, parts, tune, counts = facts["forward"], facts["backward"], facts["parts"], facts.get("tune"), facts.get("counts")
    images, videos, audio, source = facts["images"], facts["videos"], facts["audio"], facts["source"]
    if args.json:
        found = {
            "model": facts["name"],
            "batch": args.batch,
            "seq": args.seq,
            "forward": _json_number(forward),
            "backward": _json_number(backward),
            "train": _json_number(forward + backward),
            "components": {k: _json_number(v) for k, v in parts.items()},
            "conventions": facts["conventions"],
            "accounting": facts["accounting"],
            **images,
            **videos,
            **audio,
            **source,
        }
        if counts is not None:
            found.update(_finetune_json(tune, counts, forward, backward))
        return json.dumps(found)
    seen = f", {images['images']} image{'s' * (images['images'] > 1)} of {images['image_height']}×{images['image_width']} px per sequence" if images else ""
    seen += f", {videos['videos']} video{'s' * (videos['videos'] > 1)} of {videos['video_frames']} frames of {videos['video_height']}×{videos['video_width']} px per sequence" if videos else ""
    seen += f", {audio['audios']} audio clip{'s' * (audio['audios'] > 1)} of {audio['audio_frames']} mel frames per sequence" if audio else ""
    seen += f", source {source['source_seq']:,} tokens (the encoder's)" if source else ""
    table = _table(f"forward FLOPs of {facts['name']}, batch {args.batch} × seq {args.seq}{seen}", parts, forward, unit="FLOP")
    if counts is None:
        summary = [
            "",
            f"forward   {_number(forward)}",
            f"backward  {_number(backward)}",
            f"train     {_number(forward + backward)}  (one step: forward + backward)",
        ]
    else:
        adapters = counts.forward_flops - forward
        summary = [
            "",
            "fine-tuning: " + tune.summary(),
            f"trainable parameters {counts.trainable_params:,} of {counts.params:,} ({counts.trainable_params / counts.params:.3%})",
            f"forward   {_number(counts.forward_flops)}" + (f"  (the model's {_human(forward)} + adapters' {_human(adapters)})" if adapters else ""),
            f"backward  {_number(counts.backward_flops)}  (full training: {_human(backward)})",
            f"train     {_number(counts.step_flops)}  (one step: forward + backward; frozen weights take no weight gradient)",
        ]
    summary.append("conventions: " + ", ".join(f"{k}={v}" for k, v in facts["conventions"].items()))
    return table + "\n" + "\n".join(summary)


def _finetune_json(tune, counts, forward: Number, backward: Number) -> dict[str, object]:
    """The fine-tuning step's forward, backward and train, full training's beside them."""
    return {
        "fine_tuning": tune.describe(),
        "trainable_params": counts.trainable_params,
        "frozen_params": counts.frozen_params,
        "forward": _json_number(counts.forward_flops),
        "backward": _json_number(counts.backward_flops),
        "train": _json_number(counts.step_flops),
        "full_training": {"forward": _json_number(forward), "backward": _json_number(backward), "train": _json_number(forward + backward)},
    }




def _derivation(d: Derivation, args: argparse.Namespace, model: Model, given: dict[str, object]) -> str:
    from ...engine.graph.derive import blocks_of, step_blocks
    from ..papers.structure_report import block_forms, structure_json, structure_text, sum_text

    st, active, note = block_forms(model, d.quantity, assume=args.assume, leading=args.leading, workload=given)
    # each step as the model is built (n_dense·(…) + (n − n_dense)·(…)) where that is the same expression
    written = [sum_text(b) if b is not None else str(s.formula) for b, s in zip(step_blocks(model, d), d.steps)]
    params_blocks = d.params_leading and blocks_of(model, "params", d.params_leading.expr, assume=d.assumptions, leading=True, large=d.large)
    params_leading = sum_text(params_blocks) if params_blocks else str(d.params_leading)
    if args.json:
        return json.dumps(
            {
                "structure": structure_json(model, st, active, note, given),
                "model": d.model,
                "quantity": d.quantity,
                "assumptions": d.assumptions,
                "leading": d.leading,
                "large": list(d.large),
                "expression": str(d.result),
                "latex": d.result.latex(),
                "relative_error": d.relative_error,
                "in_terms_of_params": None if d.in_terms_of_params is None else str(d.in_terms_of_params),
                "params_leading": None if d.params_leading is None else params_leading,
                "params": d.params_value,
                "relative_error_with_real_params": d.relative_error_with_real_params,
                "missing": list(d.missing),
                "steps": [
                    {"label": s.label, "expression": str(s.formula), "written": text, "latex": s.formula.latex(), "value": s.value, "relative_error": s.relative_error}
                    for s, text in zip(d.steps, written)
                ],
            }
        )
    lines = [f"{d.quantity.replace('_', '-')} of {d.model}"]
    for step, text in zip(d.steps, written):
        lines.append(f"  {step.label}:")
        lines.append(f"    {text}")
        if step.relative_error is not None and step is not d.steps[0] and not (step is d.steps[-1] and d.in_terms_of_params is not None):
            lines.append(f"    relative error at {d.model}: {step.relative_error:+.2%}")
    if d.in_terms_of_params is not None:
        lines.append(f"  = {d.in_terms_of_params}    with n_params = {params_leading}")
        if d.relative_error is not None:
            lines.append(f"    relative error at {d.model} with n_params ≈ {params_leading}: {d.relative_error:+.2%}")
        if d.relative_error_with_real_params is not None:
            lines.append(f"    relative error at {d.model} with the real n_params = {d.params_value:,}: {d.relative_error_with_real_params:+.2%}")
    if d.missing and len(d.steps) > 1 and d.relative_error is None:
        flags = [f"--{m.replace('_', '-')}" for m in d.missing if m in set(DERIVE_WORKLOAD) - {"tokens"}] + [f"--set {m}=..." for m in d.missing if m not in DERIVE_WORKLOAD]
        if flags:
            lines.append(f"  (give {', '.join(flags)} to see the relative error at {d.model})")
    return "\n".join(lines + structure_text(model, st, active, note, given))


def _number(value: Number) -> str:
    value = float(value) if not isinstance(value, int) else value
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale * 1e6 and scale == 1e15:
            return f"{value:>26,}  ({float(value):.3e})" if isinstance(value, int) else f"{value:.6g}"
        if abs(value) >= scale:
            return f"{value:>26,}  ({value / scale:.2f} {suffix})" if isinstance(value, int) else f"{value:.6g}"
    return f"{value:>26,}"


def _table(title: str, parts: dict[str, Number], total: Number, *, unit: str) -> str:
    width = max([len(p) for p in parts] + [len("total")])
    lines = [title, f"{'component':<{width}}  {'count':>26}  {'share':>7}"]
    for path, value in parts.items():
        if value == 0:
            continue  # element-wise ops and parameter-free parts, under the conventions in force
        share = float(value) / float(total) if total else 0.0
        lines.append(f"{path:<{width}}  {_count_text(value):>26}  {share:>7.2%}")
    lines.append(f"{'total':<{width}}  {_count_text(total):>26}  {1:>7.2%}" + (f"  {unit}" if unit else ""))
    lines.append(f"{'':<{width}}  {_human(total):>26}")
    return "\n".join(lines)


def _count_text(value: Number) -> str:
    """A whole count with thousands separators; a fraction (a convention such as causal=1/2) to 6 significant digits."""
    return f"{value:,}" if isinstance(value, int) else f"{float(value):,.6g}"


def _human(value: Number) -> str:
    value = float(value)
    if abs(value) >= 1e21:
        return f"≈ {value:.3e}"
    for scale, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"≈ {value / scale:.3f} {suffix}"
    return f"{value:g}"


def _hardware(args: argparse.Namespace) -> str:
    from ...analysis.devices.hardware import device_names, load_device
    from ..reports.hardware_report import device_json, device_table, devices_table

    if args.name is None:
        if args.json:
            # each device's whole data by name, as `symform hardware NAME --json` gives one
            return json.dumps({kind + "s": {n: device_json(load_device(n)) for n in device_names(kind=kind)} for kind in ("accelerator", "system")})
        return devices_table()
    device = load_device(args.name)
    return json.dumps(device_json(device)) if args.json else device_table(device)


def _models(args: argparse.Namespace) -> str:
    from ...engine.language.families import preset_config, presets, supported_model_types

    if args.json:
        return json.dumps(
            {
                "presets": {name: {"hub": e.hub, "source": e.source, "model_type": preset_config(name)[0]["model_type"]} for name, e in presets().items()},
                "model_types": list(supported_model_types()),
            }
        )
    lines = ["bundled presets (symform params NAME):"]
    for name, entry in presets().items():
        lines.append(f"  {name:<18} {entry.hub}")
    lines.append("Hugging Face model types read from a config.json: " + ", ".join(supported_model_types()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
