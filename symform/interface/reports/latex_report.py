"""``symform latex``: a quantity, a derivation, a breakdown table or a glossary as LaTeX, or a whole document."""

from __future__ import annotations

import argparse
import json
import re
from typing import Callable

from ..papers import latex as tex
from ...engine.graph.derive import derive
from ...engine.errors import EvaluationError
from ...engine.graph.model import Model, normalise_quantity
from ..options.cli_args import DERIVE_WORKLOAD
from ..options.media import with_source_symbolic, with_source_where_read, without_source


def latex_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--derivation", action="store_true", help="the whole derivation: exact, per layer, under the assumptions (--assume; by default the family's, as derive's blocks), leading order, in terms of N and D")
    p.add_argument("--table", action="store_true", help="a booktabs table per component (params, forward-flops, ...), of training compute in PF-days (train-flops: give --tokens, --seq) or of training memory in GB (quantity memory: give --batch, --seq)")
    p.add_argument("--and", dest="more", action="append", default=[], metavar="MODEL", help="another model for the table's columns (repeat for more)")
    p.add_argument("--depth", type=int, default=1, help="table rows: component paths this many segments deep (default 1)")
    p.add_argument("--glossary", action="store_true", help="a booktabs glossary of the symbols the quantity uses: letter, name, meaning")
    p.add_argument("--component", action="store_true", help="MODEL names a declared component (gated_mlp, gqa_attention, ...): its quantity over its own arguments")
    p.add_argument("--standalone", action="store_true", help="a complete .tex document (pdflatex) with the symbols' glossary")
    p.add_argument("--blocks", action="store_true", help="the quantity by block (each layer kind a repeat times one layer), one line per block; with --leading to leading order; the family's default assumptions unless --assume")
    p.add_argument("--width", type=float, default=tex.TEXT_WIDTH_PT, metavar="PT", help=f"the text width the lines are broken to, in points (default {tex.TEXT_WIDTH_PT:g}: the standalone document's; about 240 for a column of a two-column paper)")
    p.add_argument("--part", metavar="PATH", help="one component of the model part by part (--part layers/moe/attn: MLA's projections, each its own matrix, as DeepSeek-V2 writes them)")
    p.add_argument("--formulas", action="store_true", help="symform latex --formulas MODEL [MODEL ...] [--seq S]: an appendix table of N, N_active, forward FLOPs and KV bytes per token, formula and number, with a glossary")
    p.add_argument("--compare", action="store_true", help="symform latex --compare MODEL MODEL [--seq S]: the same forms of two architectures side by side")
    symbols_argument(p)
    p.add_argument("--paper", metavar="NAME", help="symform latex --paper NAME: the forms a paper writes (kaplan, chinchilla, korthikanti, deepseek-v2, mamba2), as symform derives them, in its letters")


def symbols_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--symbols", metavar="FILE", help="a paper's own letters: a .toml file with a [symbols] table (d_model = \"d_{\\mathrm{model}}\"), or a bundled paper's (kaplan, chinchilla, korthikanti, deepseek-v2, mamba2)")


def in_letters(symbols: str | None, produce: Callable[[], str]) -> str:
    """``produce()``'s LaTeX in the letters of the mapping file ``symbols`` (symform's own where None)."""
    if symbols is None:
        return produce()
    from ..papers.paper_forms import read_paper

    with tex.letters_in_force(read_paper(symbols).symbols):
        return produce()


def paper_command(argv: list[str]) -> str:
    """``symform latex --paper NAME``: a paper's forms, each derived from the declarations, in its letters."""
    from ..options.parser import _Parser
    from ..papers.paper_forms import paper_latex

    p = _Parser(prog="symform latex --paper", description="the forms a paper writes, as symform derives them, in the paper's letters")
    p.add_argument("--paper", metavar="NAME", required=True, help="a bundled paper (kaplan, chinchilla, korthikanti, deepseek-v2, mamba2) or a paper file with [symbols] and [[forms]]")
    p.add_argument("--standalone", action="store_true", help="a complete .tex document (pdflatex) with the letters' glossary")
    p.add_argument("--width", type=float, default=tex.TEXT_WIDTH_PT, metavar="PT", help="the text width the lines are broken to, in points")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    text = paper_latex(args.paper, standalone=args.standalone, width=args.width)
    return json.dumps({"latex": text}) if args.json else text


def appendix_parser():
    """The options of ``symform latex --formulas``: its own parser, since it takes models one after another."""
    from ..options.parser import _Parser
    from ..options.cli_args import positive_int

    p = _Parser(prog="symform latex --formulas", description="an appendix table of N, N_active, forward FLOPs and KV bytes per token")
    p.add_argument("--formulas", action="store_true", help="the appendix table (the option that chose this form of symform latex)")
    p.add_argument("models", nargs="+", metavar="MODEL", help="bundled presets, Hub ids, config.json paths or architecture files, one column each")
    p.add_argument("--seq", type=positive_int, default=4096, help="sequence length the forward FLOPs per token average over (default 4096)")
    p.add_argument("--standalone", action="store_true", help="a complete .tex document (pdflatex)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    symbols_argument(p)
    return p


def appendix_command(argv: list[str]) -> str:
    """``symform latex --formulas MODEL...``: models given one after another, no quantity."""
    from ..papers.appendix import appendix

    args = appendix_parser().parse_args(argv)
    models = [Model.load(m) for m in args.models]
    text = in_letters(args.symbols, lambda: appendix(models, seq=args.seq, standalone=args.standalone))
    return json.dumps({"latex": text}) if args.json else text


def compare_command(argv: list[str]) -> str:
    """``symform latex --compare A B``: two (or more) architectures' forms side by side."""
    from ..papers.appendix import comparison
    from ..options.parser import _Parser
    from ..options.cli_args import positive_int

    p = _Parser(prog="symform latex --compare", description="two architectures' forms side by side: N, N_active, forward FLOPs and KV bytes per token")
    p.add_argument("--compare", action="store_true", help="the comparison (the option that chose this form of symform latex)")
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument("--seq", type=positive_int, default=4096, help="sequence length the per-token columns average over (default 4096)")
    p.add_argument("--standalone", action="store_true", help="a complete .tex document (pdflatex)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    symbols_argument(p)
    args = p.parse_args(argv)
    if len(args.models) < 2:
        raise EvaluationError("--compare needs two models or more: symform latex --compare MODEL MODEL")
    models = [Model.load(m) for m in args.models]
    text = in_letters(args.symbols, lambda: comparison(models, seq=args.seq, standalone=args.standalone))
    return json.dumps({"latex": text}) if args.json else text


def latex_command(args: argparse.Namespace, load: Callable[[argparse.Namespace], Model]) -> str:
    return in_letters(args.symbols, lambda: _latex_text(args, load))


def _latex_text(args: argparse.Namespace, load: Callable[[argparse.Namespace], Model]) -> str:
    sections = _component_sections(args) if args.component else _model_sections(args, load)
    if args.standalone:
        models = [args.model, *args.more] if args.table else [args.model]
        return tex.standalone(sections, title=_title(args.quantity, models))
    text = "\n\n".join(body for _, body in sections)
    return json.dumps({"latex": text}) if args.json else text


def _title(quantity: str, models: list[str]) -> str:
    """The document's title in words: ``Training memory of qwen3-8b``, ``Active parameters per token of deepseek-v3``."""
    words = "Training memory" if quantity == "memory" else tex.quantity_words(normalise_quantity(quantity))
    return f"{words} of {', '.join(models)}"


def _workload(args: argparse.Namespace) -> dict[str, int]:
    """The workload the forms' errors are evaluated at (the forms keep every length a symbol, the source's too)."""
    return {k: getattr(args, k, None) for k in DERIVE_WORKLOAD if getattr(args, k, None) is not None}


def _model_sections(args: argparse.Namespace, load: Callable[[argparse.Namespace], Model]) -> list[tuple[str, str]]:
    if args.table:  # numbers: every length given is put in, the source's into each model that reads one
        loaded = [without_source(load, args), *(without_source(load, argparse.Namespace(**{**vars(args), "model": m})) for m in args.more)]
        models = with_source_where_read(loaded, args)
        sections = [("", _table(models, args))]
        if args.standalone:
            sections.append(("Symbols", tex.glossary(models[0].vocabulary, _table_symbols(models, args.quantity))))
        return sections
    model = with_source_symbolic(load, args)
    quantity = normalise_quantity(args.quantity)
    large = [s.strip() for s in args.large.split(",") if s.strip()] if args.large else None
    if args.part:
        from ...engine.graph.structure import part_block

        block = part_block(model, quantity, args.part, assume=None if args.assume in (None, "none") else args.assume)
        body, used, quantities = tex.part_latex(block, model, quantity, width=args.width), block.expr.free_symbols, [quantity]
    elif args.blocks:
        from ..papers.structure_report import block_forms

        st, active, note = block_forms(model, quantity, assume=args.assume, leading=args.leading, workload=_workload(args))
        st, active = _in_one_meaning(model, st, active)
        body = tex.structure_latex(st, model, active, notes=_block_notes(model, st, active, note, _workload(args)), width=args.width)
        used, quantities = st.expr.free_symbols | ({model.vocabulary[active.symbol_name]} if active else set()), [quantity]
    elif args.derivation:
        d = _recomputed(tex.derivation_of(model, quantity, assume=shared_default(model, args.assume), leading=True, large=large, **_workload(args)), model, args)
        body, used, quantities = tex.derivation_latex(d, model, width=args.width), tex.derivation_symbols(d), [quantity]
    elif args.assume or args.leading or args.recompute != "none":
        d = derive(model, quantity, assume=shared_default(model, args.assume), leading=args.leading, large=large, symbolic=tex.storage_sizes(model, quantity), **_workload(args))
        d = _recomputed(tex.derivation_in_one_meaning(d, model, **_workload(args)), model, args)
        body, used, quantities = tex.derivation_latex(d, model, width=args.width), tex.derivation_symbols(d), [quantity]
    else:
        expr = model.expression(quantity).expr
        body, used, quantities = tex.latex(expr, model.vocabulary), expr.free_symbols, [quantity]
        if args.standalone:
            body = tex.equation_block(tex.quantity_letter(quantity), expr, model.vocabulary, width=args.width)
    if args.glossary:
        return [("Symbols", tex.glossary(model.vocabulary, used, quantities))]
    sections = [("", body)]
    if args.standalone:
        sections.append(("Symbols", tex.glossary(model.vocabulary, used, quantities)))
    return sections


def recomputed_text(d, as_json: bool) -> str:
    """``derive saved-activations --recompute …``: the chain of forms of what training keeps, each with its error."""
    if as_json:
        steps = [{"label": s.label, "expression": str(s.formula), "latex": s.formula.latex(), "value": s.value, "relative_error": s.relative_error} for s in d.steps]
        return json.dumps({"model": d.model, "quantity": d.quantity, "assumptions": d.assumptions, "steps": steps, "expression": str(d.result), "relative_error": d.relative_error})
    lines = [f"{d.quantity.replace('_', '-')} of {d.model}"]
    for step in d.steps:
        lines += [f"  {step.label}:", f"    {step.formula}"]
        if step.relative_error is not None:
            lines.append(f"    relative error at {d.model}: {step.relative_error:+.2%}")
    return "\n".join(lines)


def shared_default(model: Model, assume: str | None) -> str | None:
    """The assumption set a derivation makes: the one named (``none``: none), else the family's default, which
    ``derive``'s block form makes too (``default_assumptions``)."""
    from ...engine.graph.structure import default_assumptions

    if assume is None:
        return default_assumptions(model)
    return None if assume == "none" else assume


def _recomputed(d, model: Model, args: argparse.Namespace):
    return tex.recomputed_derivation(d, model, args.recompute, **_workload(args)) if args.recompute != "none" else d


def _in_one_meaning(model: Model, st, active):
    """The block form with each symbol one meaning (``tex.one_meaning``: DeepSeek-V3's d_ff its own 18,432 in
    every block, not 8d/3 in one and 18,432 in d_ff/G in the next); the N_active form prints only N_active's
    multiple and what grows with the sequence, which no such symbol is in."""
    from dataclasses import replace

    blocks = tex.blocks_in_one_meaning(model, st.quantity, st.assumptions, leading=st.leading, large=list(st.large) if st.leading else None)
    return (st if blocks is None else replace(st, blocks=blocks)), active


def _block_notes(model: Model, st, active, note: str, workload: dict[str, int]) -> tuple[tex.Note, tex.Note | None]:
    """The line under the block form and under its N_active form: the assumptions and the error at the model."""
    from ...engine.graph.structure import error_at

    note = re.sub(r",(?=\S)", ", ", note)  # granular,standard as words: granular, standard

    def line(expr) -> tex.Note:
        error = error_at(model, st.quantity, expr, **workload)
        if error is None:
            return tex.Note(tex._text(f"{note}; give the workload (--batch, --seq, --tokens) for its error at {model.name}"))
        return tex.Note(tex._text(f"{note}; at {model.name}:"), f"{{{error * 100:+.2f}}}\\,\\%")  # braced: a sign, not an operator after the words

    return line(st.expr), line(active.expr) if active is not None else None


def _table_symbols(models: list[Model], quantity: str) -> set:
    """The symbols behind a table's numbers, over all its models (a memory table: parameters and saved activations)."""
    quantities = ["params", "saved_activations"] if quantity == "memory" else [normalise_quantity(quantity)]
    return {s for m in models for q in quantities for s in m.expression(q).expr.free_symbols}


def _table(models: list[Model], args: argparse.Namespace) -> str:
    workload = {k: v for k, v in _workload(args).items() if k != "source_seq"}  # the models carry it already
    if args.quantity == "memory":
        if args.batch is None or args.seq is None:
            raise EvaluationError("a memory table needs --batch and --seq (one training micro-batch)")
        return tex.memory_table(models, batch=args.batch, seq=args.seq)
    quantity = normalise_quantity(args.quantity)
    if quantity == "train_flops":
        if args.tokens is None or args.seq is None:
            raise EvaluationError("a training-compute table needs --tokens and --seq")
        return tex.training_flops_table(models, tokens=args.tokens, seq=args.seq, batch=args.batch or 1)
    return tex.breakdown_table(models, quantity, depth=args.depth, **workload)


def _component_sections(args: argparse.Namespace) -> list[tuple[str, str]]:
    quantity = normalise_quantity(args.quantity)
    expressions = tex.component_expressions(args.model)
    if quantity not in expressions:
        raise EvaluationError(f"a component declares {', '.join(expressions)}; {args.quantity!r} is a whole-model quantity")
    expr = expressions[quantity]
    vocabulary = tex.default_vocabulary()
    if args.glossary:
        return [("Symbols", tex.glossary(vocabulary, expr.free_symbols, [quantity]))]
    body = f"{tex.quantity_letter(quantity)} = {tex.latex(expr, vocabulary)}"
    if args.standalone:
        return [("", tex.equation_block(tex.quantity_letter(quantity), expr, vocabulary)), ("Symbols", tex.glossary(vocabulary, expr.free_symbols, [quantity]))]
    return [("", body)]
