"""The block form of a derivation (``symform derive``): text, JSON and LaTeX of a Structure and an ActiveForm."""

from __future__ import annotations

import sympy

from ...engine.graph.model import Model
from ...engine.graph.structure import ActiveForm, Block, Structure, active_form, by_layer_kind, default_assumptions, error_at, structure
from . import latex as tex
from ..options.cli_args import DERIVE_WORKLOAD


def block_forms(model: Model, quantity: str, *, assume: str | None, leading: bool, workload: dict[str, object]) -> tuple[Structure, ActiveForm | None, str]:
    """The structure and the N_active form under ``assume`` (``none``: no assumptions; None: the family's
    default), and a note on which assumptions those are."""
    if assume is None:
        assume = default_assumptions(model)
        note = f"assuming {assume} (the family's default)" if assume else "no simple form: the family's sizes are no fixed multiples of d_model, so its own sizes stay"
    elif assume == "none":
        assume, note = None, "assuming nothing"
    else:
        note = f"assuming {assume}"
    st = structure(model, quantity, assume=assume, leading=leading)
    return st, active_form(model, quantity, assume=assume), note


def repeat_text(repeat: sympy.Expr) -> str:
    """``n_layers - n_dense_layers`` with the positive terms first, in parentheses when a sum."""
    if repeat == 1:
        return ""
    terms = sorted(sympy.Add.make_args(repeat), key=lambda t: t.could_extract_minus_sign())
    text = str(terms[0]) + "".join(f" - {-t}" if t.could_extract_minus_sign() else f" + {t}" for t in terms[1:])
    return f" × ({text})" if len(terms) > 1 else f" × {text}"


def sum_text(blocks) -> str:
    """Blocks summed as written, ``n_dense_layers*(…) + (n_layers - n_dense_layers)*(…) + …``: each repeat a factor."""
    first, *rest = [_term_text(b) for b in by_layer_kind(blocks)]
    return first + _signed(rest)


def _signed(texts: list[str]) -> str:
    return "".join(f" - {t[1:]}" if t.startswith("-") else f" + {t}" for t in texts)


def active_text(model: Model, active: ActiveForm) -> str:
    """The N_active form as written: the multiple of N_active, then what that leaves out, by layer kind."""
    lead = active.multiple * model.vocabulary[active.symbol_name]
    if not active.rest_blocks:
        return str(active.with_symbol(model.vocabulary[active.symbol_name]))
    return str(lead) + _signed([_term_text(b) for b in by_layer_kind(active.rest_blocks)])


def _term_text(block: Block) -> str:
    if not isinstance(block.repeat, sympy.Add):  # n·(…): sympy orders the factors as a reader writes them
        return str(readable(block.repeat * block.expr))
    repeat = repeat_text(block.repeat).removeprefix(" × ")
    coefficient, inner = readable(block.expr).as_coeff_Mul()
    inner_text = f"({inner})" if isinstance(inner, sympy.Add) else str(inner)
    return (f"{coefficient}*" if coefficient != 1 else "") + f"{repeat}*{inner_text}"


def readable(expr: sympy.Expr) -> sympy.Expr:
    """Common factors (b·s) pulled out, the rest collected as written."""
    return sympy.factor_terms(expr)


def structure_text(model: Model, st: Structure, active: ActiveForm | None, note: str, workload: dict[str, object]) -> list[str]:
    lines = [f"  by block, {note}" + (f"; leading order in {', '.join(st.large)}:" if st.leading else ":")]
    rows = []
    for block in st.blocks:
        rows.append((block.name + repeat_text(block.repeat), str(readable(block.expr))))
        rows += [(f"    {p.name}" + repeat_text(p.repeat), str(readable(p.expr))) for p in block.parts]
    width = max(len(r[0]) for r in rows) + 2
    lines += [f"    {name:<{width}}{expr}" for name, expr in rows]
    lines.append("    " + _error_line(model, st.quantity, st.expr, workload))
    if active is not None:
        letter = "N_active" if active.base == "active_params" else "N"
        lines.append(f"  in terms of {letter}, {note}:")
        lines.append(f"    = {active_text(model, active)}")
        lines.append(f"    with {active.symbol_name} ≈ {sum_text(active.active_blocks) if active.active_blocks else active.active}")
        lines.append("    " + _error_line(model, st.quantity, active.expr, workload))
    return lines




def _error_line(model: Model, quantity: str, expr: sympy.Expr, workload: dict[str, object]) -> str:
    error = error_at(model, quantity, expr, **workload)
    if error is None:
        # only the workload flags the expression reads and the command line left out: never one it already gave
        read = {s.name for s in expr.free_symbols}
        needed = [n for n in DERIVE_WORKLOAD if n in read and n not in workload]
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in needed) or "the workload"
        return f"(give {flags} to see the relative error at {model.name})"
    return f"relative error at {model.name}: {error:+.2%}"


def block_json(block: Block, model: Model) -> dict[str, object]:
    out: dict[str, object] = {"name": block.name, "repeat": str(block.repeat), "expression": str(readable(block.expr)), "latex": tex.latex(block.expr, model.vocabulary)}
    if block.parts:
        out["parts"] = [block_json(p, model) for p in block.parts]
    return out


def structure_json(model: Model, st: Structure, active: ActiveForm | None, note: str, workload: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {
        "assumptions": st.assumptions,
        "note": note,
        "leading": st.leading,
        "blocks": [block_json(b, model) for b in st.blocks],
        "expression": str(st.expr),
        "relative_error": error_at(model, st.quantity, st.expr, **workload),
    }
    if active is not None:
        out["in_terms_of_" + active.base] = {
            "expression": str(active.with_symbol(model.vocabulary[active.symbol_name])),
            "written": active_text(model, active),
            "multiple": str(active.multiple),
            active.symbol_name: str(active.active),
            "difference": str(active.difference),
            "attention": str(active.attention),
            "relative_error": error_at(model, st.quantity, active.expr, **workload),
        }
    return out
