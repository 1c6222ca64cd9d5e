"""The fine-tuning options (docs/fine-tuning.md), one definition for every command that counts a training step:
``memory``, ``fit``, ``flops`` and ``time``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .cli_args import positive_int
from ...engine.budget import quoted
from ...engine.errors import EvaluationError

if TYPE_CHECKING:  # sympy loads with the analysis, not with --help
    from ...analysis.memory.finetune import FineTune

def names(text: str) -> tuple[str, ...]:
    found = tuple(n.strip() for n in text.split(",") if n.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give comma-separated names, such as q_proj,v_proj")
    return found


def finetune_arguments(p: argparse.ArgumentParser, *, needs: str = "--train", several_targets: bool = False) -> None:
    """Adds the options; ``needs`` names the option they go with in that command's help ('' for none);
    ``several_targets``: --lora-targets may be repeated, each set one value of a sweep's axis."""
    from ...analysis.memory.finetune import QLORA_FORMAT  # only where a verb that counts a step is parsed

    title = "fine-tuning (" + (f"with {needs}; " if needs else "") + "docs/fine-tuning.md)"
    tune = p.add_argument_group(title)
    tune.add_argument("--lora-rank", type=positive_int, metavar="R", help="rank of a LoRA adapter on each target projection; the base weights are frozen")
    targets = "the projections that get an adapter, by part name: q_proj,v_proj (symform params MODEL --depth 4 lists them), or all-linear (peft's: every projection but the output head)"
    if several_targets:
        tune.add_argument("--lora-targets", type=names, action="append", metavar="NAMES", help=targets + "; repeat it to sweep several sets")
    else:
        tune.add_argument("--lora-targets", type=names, metavar="NAMES", help=targets)
    tune.add_argument("--lora-alpha", type=positive_int, metavar="A", help="the adapters' scale alpha/r (recorded; it costs nothing)")
    tune.add_argument("--dora", action="store_true", help="DoRA: LoRA plus a trained magnitude per output feature")
    tune.add_argument("--qlora", action="store_true", help=f"QLoRA: the frozen base weights stored as {QLORA_FORMAT} (NF4 with double-quantised scales; the output head stays unquantised)")
    tune.add_argument("--freeze", type=names, metavar="PARTS", help="frozen without adapters: embeddings and layer ranges, e.g. embeddings,layers:0-11")


def finetune_setup(args: argparse.Namespace, *, training: bool = True, hint: str = "add --train") -> FineTune | None:
    """The setup the options describe, or None for full training; ``training``: whether the command counts a training
    step, ``hint``: how to make it one."""
    from ...analysis.memory.finetune import QLORA_FORMAT, FineTune

    adapters = args.lora_rank is not None or args.lora_targets or args.dora or args.qlora or args.lora_alpha
    if not adapters and not args.freeze:
        return None
    if not training:
        raise EvaluationError(f"--lora-rank, --lora-targets, --dora, --qlora and --freeze describe training; {hint}")
    if adapters and (args.lora_rank is None or not args.lora_targets):
        raise EvaluationError("adapters need both --lora-rank R and --lora-targets NAMES (e.g. --lora-rank 16 --lora-targets q_proj,v_proj)")
    return FineTune(
        rank=args.lora_rank or 0, targets=args.lora_targets or (), method="dora" if args.dora else "lora", alpha=args.lora_alpha,
        freeze=args.freeze or (), base_format=QLORA_FORMAT if args.qlora else None,
    )  # fmt: skip



SWEPT_RANK = "lora_rank"


def finetune_setups(args: argparse.Namespace, given: set[str]) -> list[FineTune] | None:
    """``symform sweep``: one setup per --lora-targets set (they make an axis of the sweep), or None for no
    fine-tuning; the rank may come from a swept or fixed lora_rank (``given``: the names swept or fixed)."""
    from ...analysis.memory.finetune import QLORA_FORMAT, FineTune

    sets = args.lora_targets or []
    adapters = args.lora_rank is not None or sets or args.dora or args.qlora or args.lora_alpha
    if SWEPT_RANK in given:
        if not sets:
            raise EvaluationError("lora_rank is swept or fixed but no projection carries an adapter; add --lora-targets NAMES (e.g. q_proj,v_proj)")
        if args.lora_rank is not None:
            raise EvaluationError(f"--lora-rank {args.lora_rank} and lora_rank in --grid/--zip/--sample/--fix: give the rank in one place")
    if not adapters and not args.freeze:
        return None
    if adapters and not sets:
        raise EvaluationError("adapters need --lora-targets NAMES (e.g. --lora-targets q_proj,v_proj) and a rank: --lora-rank R or --grid lora_rank=8,16,64")
    if adapters and args.lora_rank is None and SWEPT_RANK not in given:
        raise EvaluationError("adapters need a rank: --lora-rank R, or sweep it (--grid lora_rank=8,16,64)")
    repeated = next((t for i, t in enumerate(sets) if t in sets[:i]), None)
    if repeated:
        raise EvaluationError(f"--lora-targets {','.join(repeated)} is given twice; give each set once")
    return [
        FineTune(
            rank=args.lora_rank or 0, targets=targets, method="dora" if args.dora else "lora", alpha=args.lora_alpha,
            freeze=args.freeze or (), base_format=QLORA_FORMAT if args.qlora else None,
        )
        for targets in (sets or [()])
    ]  # fmt: skip
