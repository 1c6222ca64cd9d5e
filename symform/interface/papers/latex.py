"""LaTeX for papers: formulas, derivations, breakdown tables, a glossary, whole documents.

Every formula printed here parses back with sympy's own LaTeX parser
(``sympy.parsing.latex.parse_latex``, through :func:`parse_back`) to the
expression it came from, so what a reader pastes into a paper is what symform
computed. Habits of sympy's printer that stop that round trip are avoided here:

- a bare ``d`` followed by a letter (``d n``) reads as a differential ``dn``,
  so such a ``d`` is followed by a thin space, ``d\\,n`` (typeset as a product should be);
  before a command (``2 d\\right)``) only the parser misreads it, so :func:`parse_back`
  adds the space and the printed text has none;
- a letter before a parenthesis (``n \\left(…\\right)``) reads as a function
  call, so a product with a parenthesised factor is written with ``\\cdot``;
- a multi-letter name (``rows``) reads as a product of letters, so names
  outside the vocabulary are printed ``\\mathit{rows}``.

``parse_back`` is the inverse, for checking: it maps the letters back to
symform's symbols through the vocabulary.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, Sequence

import sympy
from sympy.printing.latex import LatexPrinter

from ...engine.language.declarations import QUANTITIES, Library, default_library
from ...engine.graph.derive import Derivation, derive
from ...engine.graph.structure import by_layer_kind
from ...engine.errors import EvaluationError
from ...engine.graph.graph import build_graph, root_component
from ...engine.algebra.multiplied import multiplied_out
from ...engine.graph.model import Model, normalise_quantity
from ...engine.store import derivation as derivations  # its decorator; derivation() here is a LaTeX derivation
from ...engine.language.vocabulary import Vocabulary, default_vocabulary
from ...engine.language.conditions import NamedCondition
from .latex_text import PF_DAY, PREAMBLE, _longtable, _tabular, _text, _typesettable, display, human, standalone  # noqa: F401  (tex.human, tex.standalone, ...)
from .latex_layout import TEXT_WIDTH_PT, Group, Term, breakable, broken, broken_runs, joined, width_pt

@dataclass(frozen=True)
class Printed:
    """How a quantity is printed: the letter it goes by on the left of an equation, in words, and its unit."""

    letter: str
    words: str
    unit: str


QUANTITIES_PRINTED = {
    "params": Printed("N", "parameters", "parameters"),
    "active_params": Printed("N_{\\mathrm{active}}", "active parameters per token", "parameters"),
    "forward_flops": Printed("C_{\\mathrm{fwd}}", "forward FLOPs", "FLOP"),
    "backward_flops": Printed("C_{\\mathrm{bwd}}", "backward FLOPs", "FLOP"),
    "train_step_flops": Printed("C_{\\mathrm{step}}", "FLOPs of one training step", "FLOP"),
    "train_flops": Printed("C_{\\mathrm{train}}", "training FLOPs for D tokens", "FLOP"),
    "bytes_moved": Printed("Q", "bytes moved to and from memory", "B"),
    "saved_activations": Printed("M_{\\mathrm{act}}", "activation bytes saved for backward", "B"),
    "kv_cache": Printed("M_{\\mathrm{KV}}", "KV-cache bytes", "B"),
    "recurrent_state": Printed("M_{\\mathrm{state}}", "recurrent-state bytes", "B"),
    "inference_bytes": Printed("M_{\\mathrm{infer}}", "bytes held to serve", "B"),
    "training_bytes": Printed("M_{\\mathrm{train}}", "bytes one device holds to train", "B"),
}
# The letter each quantity conventionally goes by on the left of an equation.
QUANTITY_LETTERS = {q: p.letter for q, p in QUANTITIES_PRINTED.items()}

# A bare d (not part of \delta, not d_{...}) followed by a letter, which reads as a differential (dn) to the
# parser and to a reader alike: the printer separates the two.
_DIFFERENTIAL = re.compile(r"(?<![A-Za-z\\])d\s+(?=[A-Za-z])")
# A bare d before a command (d\right), d \cdot): the parser reads a differential there too, a reader does
# not, so only parse_back separates them; the printed text keeps no stray space.
_D_BEFORE_COMMAND = re.compile(r"(?<![A-Za-z\\])d\s*(?=\\[A-Za-z])")
# A letter or number juxtaposed with a parenthesis: the parser reads n \left(…\right) as a function n(…).
_CALL = re.compile(r"(?<=[\w}])(?<!\\neg)\s+\\left\(")  # a product, not \neg (…)


# --- formulas ----------------------------------------------------------------------------

# A paper's own letters for symform's symbols and quantities (``--symbols kaplan``), by name: in force while a
# document is written, so that every formula, reason and glossary row of it prints them.
_LETTERS: ContextVar[Mapping[str, str]] = ContextVar("letters", default=MappingProxyType({}))


@contextmanager
def letters_in_force(letters: Mapping[str, str]) -> Iterator[None]:
    """Print ``letters`` (symbol or quantity name → LaTeX) in place of symform's own inside the block."""
    token = _LETTERS.set(MappingProxyType(dict(letters)))
    try:
        yield
    finally:
        _LETTERS.reset(token)


def symbol_latex(symbol: sympy.Symbol, vocabulary: Vocabulary | None = None) -> str:
    """The conventional letter of a vocabulary symbol (a paper's, where its letters are in force); other names
    in a form the parser reads as one symbol."""
    vocabulary = vocabulary or default_vocabulary()
    own = _LETTERS.get().get(symbol.name)
    if own is not None and symbol.name in vocabulary:
        return own
    if symbol.name in vocabulary:
        return vocabulary.by_symbol(symbol).latex
    base, _, sub = symbol.name.partition("_")
    if len(base) == 1 and (not sub or sub.isalnum()):
        return f"{base}_{{{sub}}}" if sub else base  # d_in -> d_{in}, k -> k
    return "\\mathit{" + "".join(w if i == 0 else w.capitalize() for i, w in enumerate(symbol.name.split("_"))) + "}"


class _Printer(LatexPrinter):
    """sympy's LaTeX printer with symform's letters."""

    def __init__(self, vocabulary: Vocabulary):
        super().__init__({"mul_symbol": None})
        self._vocabulary = vocabulary

    def _print_Symbol(self, expr: sympy.Symbol, style: str = "plain") -> str:
        return symbol_latex(expr, self._vocabulary)

    def _print_Not(self, expr: sympy.Not) -> str:
        """A named predicate negated reads as its name: ¬fp32_copy, not ¬(fp32_copy)."""
        inner = expr.args[0]
        return r"\neg " + self._print(inner) if isinstance(inner, NamedCondition) else super()._print_Not(expr)


def latex(expr: sympy.Basic, vocabulary: Vocabulary | None = None) -> str:
    """LaTeX of an expression over symform's symbols that sympy's parser reads back to the same expression."""
    text = _Printer(vocabulary or default_vocabulary()).doprint(sympy.sympify(expr))
    return _thin_d(_CALL.sub(r" \\cdot \\left(", text))


def _thin_d(text: str) -> str:
    """``d\\,n`` for d·n."""
    return _DIFFERENTIAL.sub(lambda m: "d\\,", text)


def equation(lhs: str, expr: sympy.Basic, vocabulary: Vocabulary | None = None) -> str:
    return f"{lhs} = {latex(expr, vocabulary)}"


def quantity_letter(quantity: str) -> str:
    return _LETTERS.get().get(quantity) or QUANTITIES_PRINTED[quantity].letter


def quantity_words(quantity: str) -> str:
    """The quantity in words, as a title says it (``Training FLOPs for D tokens``)."""
    words = QUANTITIES_PRINTED[quantity].words
    return words[0].upper() + words[1:]


# --- one quantity of a model or a component ------------------------------------------------


def component_expressions(component: str, *, library: Library | None = None, defaults: bool = True, conventions: bool = True) -> dict[str, sympy.Expr]:
    """A component's declared quantities over its own arguments: required ones as symbols, the
    others at their defaults (``defaults=False`` keeps every numeric argument a symbol),
    conventions at their default values unless ``conventions=False``."""
    library = library or default_library()
    comp = root_component(library, component, {})  # with the sizes of the towers its slots hold by default
    numeric = [a for a in comp.args if not a.is_slot and (a.default is None or not defaults)]
    graph = build_graph(library, component, {a.name: a.symbol for a in numeric})
    fixed = library.vocabulary.defaults() if conventions else {}
    return {q: multiplied_out(graph.total(q), fixed) for q in QUANTITIES}


def component_expression(component: str, quantity: str, **options: object) -> sympy.Expr:
    if quantity not in QUANTITIES:
        raise EvaluationError(f"a component declares {', '.join(QUANTITIES)}; {quantity!r} is a whole-model quantity")
    return component_expressions(component, **options)[quantity]


def quantity_latex(model: Model, quantity: str, *, assume: str | None = None, leading: bool = False, large: Sequence[str] | None = None) -> str:
    """``N = ...``: a model's quantity, exact, under an assumption set, or its leading order."""
    d = derive(model, quantity, assume=assume, leading=leading, large=large)
    relation = "=" if len(d.steps) == 1 else "\\approx"
    return f"{quantity_letter(d.quantity)} {relation} {latex(d.result.expr, model.vocabulary)}"


# --- derivations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of an aligned derivation: relation, formula, and the reason in words."""

    relation: str
    expr: sympy.Expr
    reason: str
    blocks: tuple | None = None  # expr block by block, each layer kind's repeat a factor, where that is how it is written
    params: sympy.Expr | None = None  # the N the line is written with (its reason, ``with N ≈ …``), to leading order

    def runs(self, vocabulary: Vocabulary) -> list[list[Term]]:
        """The line's sum in runs that each start a row: one per layer kind where it is written by block."""
        if self.blocks:
            return [block_terms(b, vocabulary) for b in by_layer_kind(self.blocks)]
        return [expr_terms(self.expr, vocabulary)]


def assumption_substitutions(model: Model, assume: str) -> dict[sympy.Symbol, sympy.Expr]:
    """What an assumption set puts in place of the model's sizes (d_ff = 8/3·d, ...), over the vocabulary."""
    found: dict[sympy.Symbol, sympy.Expr] = {}
    vocabulary = model.vocabulary
    for node in model.graph(assume=assume).graph.nodes.values():
        for name, value in node["assumed"].items():
            if name in vocabulary and value.free_symbols <= set(vocabulary.symbols()):
                found.setdefault(vocabulary[name], value)
    return dict(sorted(found.items(), key=lambda kv: kv[0].name))


def one_meaning(model: Model, quantity: str, assume: str | None) -> dict[sympy.Symbol, sympy.Expr] | None:
    """The substitutions to write ``quantity``'s forms under ``assume`` with, where the engine's would give a letter
    two meanings; None where they give it one. One component's set may name a symbol another's replaces:
    DeepSeek-V3's experts take granular's d_e = d_ff/G, G = d_ff/d_e at the model's own d_ff (18,432), while its
    dense MLP takes standard's d_ff = 8d/3 (19,115), and the form would print d_ff for 8d/3 in one block and for
    18,432 in the next. Such a symbol stays itself, the model's own size, in every block (d_ff, not 8d/3, in the
    dense MLP too); the others are put in as the set says. None also where putting them in over the whole model
    does not give the engine's form up to that symbol (a set that replaces a symbol differently per component)."""
    if assume is None:
        return None
    subs = assumption_substitutions(model, assume)
    kept = {s for s in subs if any(s in e.free_symbols for e in subs.values())}
    if not kept:
        return None
    one = {s: e for s, e in subs.items() if s not in kept}
    exact = model.expression(quantity).expr
    engine = model.expression(quantity, assume=assume).expr
    if sympy.expand(_closed(exact.xreplace(one), subs) - _closed(engine, subs)) != 0:
        return None
    return one


def _closed(expr: sympy.Expr, subs: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr`` with the substitutions put in until none of their symbols is left (d_e = d_ff/G, d_ff = 8d/3)."""
    for _ in range(len(subs) + 1):
        again = expr.xreplace(subs)
        if again == expr:
            break
        expr = again
    return sympy.expand(expr)


def derivation_in_one_meaning(d: Derivation, model: Model, **workload: object) -> Derivation:
    """``d`` with its steps under the assumptions written with :func:`one_meaning`'s substitutions (each
    symbol one meaning), their leading order and errors at the model recomputed; ``d`` where there is nothing
    to change."""
    from ...engine.graph.derive import Step, _monomial_ratio, leading_order
    from ...engine.algebra.formula import Formula
    from ...engine.graph.structure import in_stand_ins, without_flags

    one = one_meaning(model, d.quantity, d.assumptions)
    if one is None:
        return d
    v = model.vocabulary
    values = {v[k]: sympy.nsimplify(x) for k, x in {**model.values, **model.ratio_values, **workload}.items()} | dict(model.conventions)
    exact_at = d.steps[0].formula.expr.xreplace(values)
    rewrites = model.leading_rewrites(assume=d.assumptions)
    large = [v[n] for n in d.large]

    def leading(expr: sympy.Expr) -> sympy.Expr:
        return leading_order(in_stand_ins(expr, rewrites), large, rewrites)

    expr, steps = d.steps[0].formula.expr, [d.steps[0]]
    for step in d.steps[1:]:
        expr = sympy.expand(expr.xreplace(one)) if step.label.startswith("assuming") else leading(expr)
        at = expr.xreplace(values)
        known = not (at.free_symbols or exact_at.free_symbols)
        error = float(sympy.Rational(at) / sympy.Rational(exact_at) - 1) if known and exact_at != 0 else None
        steps.append(Step(step.label, step.latex_label, Formula(expr, v), float(at) if known else None, error))
    params = in_terms = None
    if d.params_leading is not None:
        params = leading(sympy.expand(without_flags(model.expression("params").expr, model.values).xreplace(one)))
        ratio = _monomial_ratio(expr, params)
        if ratio is not None and ratio.free_symbols <= set(v.symbols("workload", "convention", "dtype")):
            in_terms = Formula(ratio * v["n_params"], v)
    return replace(d, steps=tuple(steps), params_leading=params and Formula(params, v), in_terms_of_params=in_terms)


def blocks_in_one_meaning(model: Model, quantity: str, assume: str | None, *, leading: bool, large=None):
    """The structure's blocks under ``assume`` written with :func:`one_meaning`'s substitutions (the exact
    blocks with them put in, then to leading order as ``structure`` takes it); None where the engine's are."""
    from ...engine.graph.structure import block_large, leading_blocks, structure

    one = one_meaning(model, quantity, assume)
    if one is None:
        return None
    blocks = [replace(b, expr=sympy.expand(b.expr.xreplace(one)), parts=()) for b in structure(model, quantity, parts=False).blocks]
    if leading:
        rewrites = model.leading_rewrites(assume=assume)
        if any(b.expr.has(k) for b in blocks for k in rewrites):
            blocks = leading_blocks(blocks, block_large(model), rewrites)
        symbols = [model.vocabulary[n] for n in large] if large is not None else block_large(model, within=sympy.Add(*(b.total for b in blocks)))
        blocks = leading_blocks(blocks, symbols, rewrites)
    return tuple(blocks)


def derivation_lines(d: Derivation, model: Model) -> list[Line]:
    """The steps of a derivation as lines: exact, grouped per layer, each assumption, leading order, in N and D.
    An assumption set that changes nothing in this model (granular's d_e = d_ff/G where no layer has experts)
    adds no line: the lines it would add are the ones above."""
    v = model.vocabulary
    blocks = _step_blocks(model, d)
    lines = [Line("=", d.steps[0].formula.expr, d.steps[0].latex_label)]
    per_layer = _per_layer_line(d.steps[0].formula.expr, blocks[0], v)
    if per_layer is not None:
        lines.append(per_layer)
    for i, step in enumerate(d.steps[1:], start=1):
        before = d.steps[i - 1].formula.expr
        if sympy.expand(step.formula.expr - before) == 0:
            continue
        if step.label.startswith("assuming"):
            said = one_meaning(model, d.quantity, d.assumptions) or assumption_substitutions(model, d.assumptions)
            subs = {s: e for s, e in said.items() if s in before.free_symbols}
            reason = "\\text{with } " + ",\\ ".join(f"{latex(s, v)} = {latex(e, v)}" for s, e in subs.items()) if subs else step.latex_label
            lines.append(Line("=", step.formula.expr, reason + _error_note(step.relative_error, d.model)))
            grouped = _per_layer_line(step.formula.expr, blocks[i], v)
            if grouped is not None:
                lines.append(grouped)
        else:
            written = blocks[i] if _several_kinds(blocks[i]) else None
            label = _leading_label(d, before, v) if step.label.startswith("leading") else step.latex_label
            lines.append(Line("\\approx", step.formula.expr, label + _error_note(step.relative_error, d.model), written))
    if d.in_terms_of_params is not None and d.result.expr != 0:  # 0 = 0·N says nothing
        lines.append(Line("=", d.in_terms_of_params.expr, f"\\text{{with }} {quantity_letter('params')} \\approx {latex(d.params_leading.expr, v)}", params=d.params_leading.expr))
    return lines


def _leading_label(d: Derivation, before: sympy.Expr, vocabulary: Vocabulary) -> str:
    """``leading order in d, d_nope``: the large symbols the step's form has (in the letters in force)."""
    large = [n for n in d.large if vocabulary[n] in before.free_symbols] or list(d.large)
    return "\\text{leading order in } " + ", ".join(latex(vocabulary[n], vocabulary) for n in large)


def _step_blocks(model: Model, d: Derivation) -> list:
    """Each step as blocks where they are its expression (derive's ``step_blocks``), the steps under the
    assumptions written with :func:`one_meaning`'s substitutions where derivation_in_one_meaning wrote them so."""
    from ...engine.graph.structure import structure

    found = []
    for i, step in enumerate(d.steps):
        leading = d.leading and i == len(d.steps) - 1
        large = list(d.large) if leading else None
        blocks = blocks_in_one_meaning(model, d.quantity, d.assumptions, leading=leading, large=large) if i else None
        if blocks is None:
            blocks = structure(model, d.quantity, assume=d.assumptions if i else None, leading=leading, large=large, parts=False).blocks
        found.append(blocks if sympy.expand(sympy.Add(*(b.total for b in blocks)) - step.formula.expr) == 0 else None)
    return found


def _per_layer_line(expr: sympy.Expr, blocks, vocabulary: Vocabulary) -> Line | None:
    """The expression per layer kind, a repeat times one layer each (``(n − n_dense)·(…)``), where the model has
    several kinds and its block form is that expression (collected in n alone, n_dense's terms would cancel);
    else collected in the layer count; None when that says no more than the sum."""
    if _several_kinds(blocks):
        return Line("=", sympy.Add(*(b.total for b in blocks)), "\\text{per layer}", blocks)
    grouped = _per_layer(expr, vocabulary)
    return Line("=", grouped, "\\text{per layer}") if grouped is not None else None


def _several_kinds(blocks) -> bool:
    kinds = [b for b in blocks or () if b.repeat.free_symbols]
    return len(kinds) > 1 or any(isinstance(b.repeat, sympy.Add) for b in kinds)


def _per_layer(expr: sympy.Expr, vocabulary: Vocabulary) -> sympy.Expr | None:
    """The expression collected in the layer count, n·(…) + (…), when that says more than the sum."""
    if "n_layers" not in vocabulary:
        return None
    n = vocabulary["n_layers"]
    collected = sympy.collect(sympy.expand(expr), n, evaluate=False)
    if set(collected) != {n, sympy.S.One} or len(sympy.Add.make_args(collected[n])) < 2:
        return None
    return n * sympy.factor_terms(collected[n]) + sympy.factor_terms(collected[sympy.S.One])


def _error_note(error: float | None, model: str) -> str:
    if error is None:
        return ""
    percent = f"{error * 100:+.1f}"
    return f"\\quad ({percent}\\,\\% \\text{{ at {_text(model)}}})"


def derivation_latex(d: Derivation, model: Model, *, width: float = TEXT_WIDTH_PT) -> str:
    """An ``aligned`` block: the quantity's letter, then one step per line (a long sum over several, broken
    between blocks or terms so that no line is wider than ``width`` points), each with its reason on the right."""
    v = model.vocabulary
    steps = [(line.relation, line.runs(v), _reason(line, v)) for line in derivation_lines(d, model)]
    return aligned(quantity_letter(d.quantity), steps, width=width)


def _reason(line: Line, vocabulary: Vocabulary) -> "str | Aside":
    if line.params is None:
        return line.reason
    return Aside(f"\\text{{with }} {quantity_letter('params')} \\approx", tuple(expr_terms(line.params, vocabulary)))


@dataclass(frozen=True)
class Aside:
    """A reason that is itself a formula (``with N ≈ 12 d² n``): on the right where it fits, else on rows of
    its own under the step, broken as a sum is."""

    opening: str
    terms: tuple[Term, ...]

    def text(self) -> str:
        return f"{self.opening} {joined(self.terms)}"


def aligned(letter: str, steps: Sequence[tuple[str, Sequence[Sequence[Term]], "str | Aside"]], *, width: float = TEXT_WIDTH_PT) -> str:
    """``letter &rel sum && reason`` per step in an ``aligned`` block no wider than ``width`` points: the reasons
    (wrapped at their commas where long) in a right-hand column, each sum broken into as many rows as it needs;
    a reason that is a formula too wide for that column goes on rows of its own under its step."""
    cap = width * _LABEL_SHARE
    labels = [_label(reason, cap) for _, _, reason in steps]
    # a reason that does not wrap to the right-hand column's share (a narrow page) goes under its step instead
    under = [rows if any(width_pt(r) > cap for r in rows) else [] for rows in labels]
    labels = [[] if below else rows for rows, below in zip(labels, under)]
    label_width = max((width_pt(r) for rows in labels for r in rows), default=0.0)
    relation_width = max(width_pt("{}" + relation + "{}") for relation, _, _ in steps)
    budget = width - width_pt(letter) - relation_width - label_width - _COLUMN_GAP_PT
    rows = []
    for i, ((relation, runs, reason), label, below) in enumerate(zip(steps, labels, under)):
        sums = broken_runs(runs, budget)
        for j in range(max(len(sums), len(label))):
            lhs = letter if i == 0 and j == 0 else ""
            rhs = (relation + " " if j == 0 else "") + (sums[j] if j < len(sums) else "")
            rows.append(f"{lhs} &{rhs}".rstrip() + (f" && {label[j]}" if j < len(label) and label[j] else ""))
        rows += [f" &\\qquad {row.removeprefix(chr(92) + 'quad ')}" for row in below]
        if isinstance(reason, Note):
            rows += [f" &\\qquad {row}" for row in reason.rows(budget - width_pt("\\qquad"))]
        if isinstance(reason, Aside) and not label:
            first, *rest = reason.terms
            aside = broken([Term(False, f"{reason.opening} {'- ' if first.negative else ''}{first.text()}"), *rest], budget - width_pt("\\qquad"), indent="\\qquad ")
            rows += [f" &\\qquad {row}" for row in aside]
    return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"


@dataclass(frozen=True)
class Note:
    """A line under a form, in words (``assuming granular, standard;``) and then a formula (``+0.01 % at …``): on
    rows of its own, wrapped between words."""

    words: str  # text, LaTeX-escaped
    tail: str = ""  # math

    def rows(self, budget: float) -> list[str]:
        rows: list[str] = []
        for word in self.words.split(" "):
            if rows and width_pt(f"\\text{{{rows[-1]} {word}}}") <= budget:
                rows[-1] += " " + word
            else:
                rows.append(word)
        if self.tail and width_pt(f"\\text{{{rows[-1]}}}\\ {self.tail}") > budget:
            *kept, last = rows[-1].split(" ")  # the formula keeps the words before it company on a row of its own
            rows[-1:] = ([" ".join(kept)] if kept else []) + [last]
        return [f"\\text{{{r}}}" for r in rows[:-1]] + [f"\\text{{{rows[-1]}}}" + (f"\\ {self.tail}" if self.tail else "")]


def _label(reason: "str | Aside | Note", cap: float) -> list[str]:
    if isinstance(reason, Note):
        return []
    if isinstance(reason, Aside):
        text = reason.text()
        return [text] if width_pt(text) <= cap else []
    return label_rows(reason, cap)


# what of the width the reasons on the right may take before they wrap; the space amsmath's aligned puts
# between a column pair and the next (2 em at 11 pt) and some to spare
_LABEL_SHARE = 0.34
_COLUMN_GAP_PT = 26.0


def label_rows(reason: str, budget: float) -> list[str]:
    """A reason as rows no wider than ``budget`` where its pieces allow: split after the commas of a list of
    substitutions and before a parenthesised note (``\\quad (−5.1 % at …)``)."""
    pieces = re.split(r"(?<=,)\\ |\\quad (?=\()", reason)
    rows: list[str] = []
    for piece in pieces:
        if rows and width_pt(rows[-1] + "\\ " + piece) <= budget:
            rows[-1] += "\\ " + piece
        else:
            rows.append(piece if not rows else "\\quad " + piece)
    return rows


def derivation(model: Model, quantity: str, *, assume: str | None = "standard", leading: bool = True, large: Sequence[str] | None = None, **workload: object) -> str:
    """derive() as LaTeX: exact → after the named assumptions → leading order → in terms of N and D."""
    return derivation_latex(derivation_of(model, quantity, assume=assume, leading=leading, large=large, **workload), model)


def derivation_of(model: Model, quantity: str, *, assume: str | None, leading: bool = True, large: Sequence[str] | None = None, **workload: object) -> Derivation:
    """derive() under ``assume`` where the model's components declare every set it names; else the exact form
    and its leading order. Bytes per element stay symbols (B_kv, B_w, …) in a count of bytes."""
    if assume is not None and not all(a.strip() in model.assumption_sets() for a in assume.split(",")):
        assume = None
    d = derive(model, quantity, assume=assume, leading=leading, large=large, symbolic=storage_sizes(model, quantity), **workload)
    return derivation_in_one_meaning(d, model, **workload)


def storage_sizes(model: Model, quantity: str) -> tuple[str, ...]:
    """The bytes per element a count of bytes is printed with as symbols (B_kv·…), not folded into its numbers;
    activations keep theirs folded (their dtypes interlock with the accounting's switches)."""
    if QUANTITIES_PRINTED[normalise_quantity(quantity)].unit != "B" or normalise_quantity(quantity) in ("saved_activations", "bytes_moved"):
        return ()
    return tuple(n for n in model.vocabulary.names("dtype") if n.endswith("_bytes") and n not in ("act_bytes", "stat_bytes", "mask_bytes", "index_bytes", "loss_bytes"))


def recomputed_derivation(d: Derivation, model: Model, recompute: str, **workload: object) -> Derivation:
    """``d`` (a derivation of saved_activations) for what a training step keeps under activation recomputation
    (``selective``: attention cores recomputed; ``full``: each layer's input alone): every step's expression the
    kept bytes' under the same assumptions and to the same leading order, its error against the kept bytes."""
    from dataclasses import replace

    from ...analysis.memory.memory import saved_activations
    from ...engine.graph.derive import Step, leading_order
    from ...engine.algebra.formula import Formula
    from ...engine.graph.structure import in_stand_ins, without_flags

    if d.quantity != "saved_activations":
        raise EvaluationError(f"--recompute changes what training keeps: it applies to saved-activations, not {d.quantity.replace('_', '-')}")
    v = model.vocabulary
    kept = without_flags(saved_activations(model, recompute=recompute)[0], model.values)
    values = {v[k]: sympy.nsimplify(x) for k, x in {**model.values, **model.ratio_values, **workload}.items()}
    exact_at = kept.xreplace(values)
    expr, steps = kept, []
    for step in d.steps:
        if step.label.startswith("assuming"):
            expr = sympy.expand(expr.xreplace(assumption_substitutions(model, d.assumptions)))
        elif step.label.startswith("leading"):
            rewrites = model.leading_rewrites(assume=d.assumptions)
            expr = leading_order(in_stand_ins(expr, rewrites), [v[n] for n in d.large], rewrites)
        at = expr.xreplace(values)
        error = float(sympy.Rational(at) / sympy.Rational(exact_at) - 1) if not (at.free_symbols or exact_at.free_symbols) and exact_at != 0 else None
        label = step.label if step.label != "exact" else f"exact, recompute {recompute}"
        steps.append(Step(label, step.latex_label if step.label != "exact" else f"\\text{{exact, {recompute} recomputation}}", Formula(expr, v), None if at.free_symbols else float(at), error if step is not d.steps[0] else None))
    return replace(d, steps=tuple(steps), in_terms_of_params=None, params_leading=None, params_value=None, relative_error_with_real_params=None)


def derivation_symbols(d: Derivation) -> set[sympy.Symbol]:
    """Every symbol a derivation's lines print (an assumption's ratios, N on the right of the last)."""
    formulas = [s.formula for s in d.steps] + [f for f in (d.in_terms_of_params, d.params_leading) if f is not None]
    return set().union(*(f.expr.free_symbols for f in formulas))


# --- numbers ---------------------------------------------------------------------------------


# --- tables ------------------------------------------------------------------------------------


def _unit(quantity: str) -> str:
    unit = QUANTITIES_PRINTED[quantity].unit
    return "" if unit == "parameters" else unit


def breakdown_table(models: Sequence[Model], quantity: str, *, depth: int = 1, formulas: bool | None = None, **workload: object) -> str:
    """A booktabs table of a quantity per component, one column per model, numbers as people quote them.
    With one model the per-component formulas come in a last column."""
    quantity = normalise_quantity(quantity)
    formulas = len(models) == 1 if formulas is None else formulas
    values = [m.evaluate_breakdown(quantity, depth=depth, **workload) for m in models]
    # a part that is zero in every column (dropout, a residual add, under the conventions in force) says nothing
    paths = [p for p in dict.fromkeys(p for v in values for p in v) if any(v.get(p, 0) != 0 for v in values)]
    unit = _unit(quantity)
    rows = []
    for path in paths:
        cells = [human(v[path], unit) if path in v else "--" for v in values]
        row = [f"\\texttt{{{_text(path)}}}", *cells]
        if formulas:  # as inline math TeX may break at its operators, so that a long part's formula wraps in its column
            row.append(f"${breakable(expr_terms(models[0].breakdown(quantity, depth=depth)[path].expr, models[0].vocabulary))}$" if path in values[0] else "")
        rows.append(row)
    total = ["total", *[human(m.evaluate(quantity, **workload), unit) for m in models]] + ([""] if formulas else [])
    header = ["component", *[_text(m.name) for m in models]] + (["formula"] if formulas else [])
    return _tabular(header, rows, total, "l" + "r" * len(models) + (">{\\raggedright\\arraybackslash}p{0.6\\linewidth}" if formulas else ""))


def training_flops_table(models: Sequence[Model], *, tokens: int, seq: int, batch: int = 1) -> str:
    """Training compute for ``tokens`` tokens per model, exact and as 6·N·D, in PF-days."""
    rows = []
    for m in models:
        exact = m.evaluate("train_flops", tokens=tokens, seq=seq, batch=batch)
        rule = 6 * m.evaluate("params") * tokens
        rows.append([_text(m.name), human(m.evaluate("params")), human(exact, "PF-days"), human(rule, "PF-days"), f"{(float(rule) / float(exact) - 1) * 100:+.1f}\\,\\%"])
    return _tabular(["model", "$N$", "$C$ exact", "$6ND$", "$6ND/C - 1$"], rows, None, "lrrrr")


def memory_table(models: Sequence[Model], *, batch: int, seq: int) -> str:
    """Training memory on one device by category (mixed precision, AdamW, no recompute), one column per model, in GB."""
    from ...analysis.memory.memory import training_memory  # the memory model is optional here: only this table needs it

    reports = [training_memory(m, batch=batch, seq=seq) for m in models]
    categories = list(dict.fromkeys(c for r in reports for c in r.values))
    rows = [[_text(c.replace("_", " ")), *[human(r.values.get(c, 0), "B") for r in reports]] for c in categories]
    total = ["total", *[human(r.total, "B") for r in reports]]
    return _tabular(["", *[_text(m.name) for m in models]], rows, total, "l" + "r" * len(models))


# --- glossary and documents ------------------------------------------------------------------


def glossary(vocabulary: Vocabulary | None = None, symbols: Iterable[sympy.Symbol] | None = None, quantities: Iterable[str] = ()) -> str:
    """A booktabs table of the symbols (all of them, or those given), after the ``quantities`` whose letters stand
    on the left of the equations: letter, name, meaning, unit."""
    vocabulary = vocabulary or default_vocabulary()
    names = vocabulary.names() if symbols is None else [n for n in vocabulary.names() if vocabulary[n] in set(symbols)]
    letters = {symbol_latex(vocabulary[n], vocabulary) for n in names}
    rows = [[f"${quantity_letter(q)}$", f"\\texttt{{{_text(q)}}}", _text(p.words), _text(p.unit)] for q, p in ((q, QUANTITIES_PRINTED[q]) for q in dict.fromkeys(quantities)) if quantity_letter(q) not in letters]
    rows += [[f"${symbol_latex(vocabulary[n], vocabulary)}$", f"\\texttt{{{_text(n)}}}", _text(vocabulary.entry(n).spec.description), _symbol_unit(n, vocabulary)] for n in names]
    return _longtable(["symbol", "name", "meaning", "unit"], rows, "llp{0.42\\linewidth}l")


def _symbol_unit(name: str, vocabulary: Vocabulary | None = None) -> str:
    """A storage size is bytes per element; N and N_active parameters; the sizes count (layers, heads, tokens,
    elements of a width); a ratio (G = d_ff/d_e, causal's 1/2) has none."""
    vocabulary = vocabulary or default_vocabulary()
    if name.endswith("_bytes"):
        return "B/element"
    if name in ("n_params", "n_active_params"):
        return "parameters"
    if name == "flops_per_mac":
        return "FLOP/MAC"
    return "count" if name in vocabulary and "integer" in vocabulary.entry(name).spec.domain else "ratio"


def equation_block(letter: str, expr: sympy.Expr, vocabulary: Vocabulary, *, width: float = TEXT_WIDTH_PT) -> str:
    """``letter = expr`` as an ``aligned`` block, the sum broken into rows no wider than ``width`` points."""
    return aligned(letter, [("=", [expr_terms(expr, vocabulary)], "")], width=width)


# --- block forms ----------------------------------------------------------------------------------


def repeat_latex(repeat: sympy.Expr, vocabulary: Vocabulary) -> str:
    """A block's repeat, positive terms first (n - n_dense), parenthesised when a sum."""
    terms = sorted(sympy.Add.make_args(repeat), key=lambda t: t.could_extract_minus_sign())
    text = latex(terms[0], vocabulary) + "".join(f" - {latex(-t, vocabulary)}" if t.could_extract_minus_sign() else f" + {latex(t, vocabulary)}" for t in terms[1:])
    return f"\\left({text}\\right)" if len(terms) > 1 else text


def block_latex(block, vocabulary: Vocabulary) -> str:
    """``repeat · (one instance)``, the instance with its common factors pulled out."""
    return joined(block_terms(block, vocabulary))


def block_terms(block, vocabulary: Vocabulary) -> list[Term]:
    """A block as terms of a sum: ``repeat · (one instance)``, one Group that may break between the instance's
    terms; the instance alone (its terms) where the repeat is 1."""
    return list(_block_terms(block, vocabulary, _LETTERS.get()))


@derivations.derivation  # a derivation's lines and a family's block forms print the same blocks; the letters in force key it too
def _block_terms(block, vocabulary: Vocabulary, letters: Mapping[str, str]) -> tuple[Term, ...]:
    inner = sympy.factor_terms(block.expr)
    if block.repeat == 1:
        return tuple(expr_terms(inner, vocabulary))
    if len(sympy.Add.make_args(block.repeat)) == 1:  # n·(…): sympy orders the factors as a reader writes them
        return tuple(expr_terms(block.repeat * inner, vocabulary))
    repeat = repeat_latex(block.repeat, vocabulary) + " \\cdot "
    terms = expr_terms(inner, vocabulary)
    if len(terms) > 1:
        return (Term(False, Group(repeat, tuple(terms))),)
    (term,) = terms
    body = Group(repeat + term.body.opening, term.body.inner) if isinstance(term.body, Group) else repeat + term.body
    return (Term(term.negative, body),)


def expr_terms(expr: sympy.Expr, vocabulary: Vocabulary) -> list[Term]:
    """An expression's summands in the order :func:`latex` prints them, a product with a parenthesised sum
    (``n·(…)``) as a Group that may break between the sum's terms."""
    expr = sympy.sympify(expr)
    printer = _Printer(vocabulary)
    ordered = printer._as_ordered_terms(expr) if isinstance(expr, sympy.Add) else [expr]
    return [_term(t, vocabulary) for t in ordered]


def _term(term: sympy.Expr, vocabulary: Vocabulary) -> Term:
    negative = term.could_extract_minus_sign()
    body = -term if negative else term
    if isinstance(body, sympy.Mul):
        sums = [f for f in body.args if isinstance(f, sympy.Add)]
        if len(sums) == 1:
            rest = sympy.Mul(*(f for f in body.args if f is not sums[0]))
            opening = "" if rest == 1 else latex(rest, vocabulary) + " \\cdot "
            return Term(negative, Group(opening, tuple(expr_terms(sums[0], vocabulary))))
    return Term(negative, latex(body, vocabulary))


def structure_latex(st, model: Model, active=None, *, width: float = TEXT_WIDTH_PT, notes: "tuple[Note | None, Note | None]" = (None, None)) -> str:
    """An ``aligned`` block, one line per block (its name on the right); then, when given, the N_active form;
    under each, where given, its note (the assumptions it makes, its error at the model)."""
    v = model.vocabulary
    relation = "\\approx" if st.leading else "="
    steps = []
    for i, block in enumerate(st.blocks):
        terms = block_terms(block, v)
        if i > 0:  # a block after the first continues the sum: its sign is the relation column's
            first, *rest = terms
            steps.append(("-" if first.negative else "+", [[Term(False, first.body), *rest]], f"\\text{{{_text(block.name)}}}"))
        else:
            steps.append((relation, [terms], f"\\text{{{_text(block.name)}}}"))
    if notes[0] is not None:
        steps.append(("", [], notes[0]))
    if active is not None:
        letter = symbol_latex(v[active.symbol_name], v)
        steps.append(("\\approx", active_runs(active, v), f"\\text{{in terms of }} {letter}"))
        if notes[1] is not None:
            steps.append(("", [], notes[1]))
    return aligned(quantity_letter(st.quantity), steps, width=width)


def part_latex(block, model: Model, quantity: str, *, width: float = TEXT_WIDTH_PT, labels: Mapping[str, str] | None = None) -> str:
    """One instance of a component (``layers/moe/attn``) part by part, each part's own product on a line of its
    own with its name on the right (MLA's projections as DeepSeek-V2 writes its matrices), or the label
    ``labels`` gives it (LaTeX: the paper's matrices, W^{DQ}); under them, how many instances the model holds."""
    v = model.vocabulary

    def label(name: str) -> str:
        return f"{labels[name]}\\ (\\text{{{_text(name)}}})" if labels and name in labels else f"\\text{{{_text(name)}}}"

    parts = [p for p in block.parts if p.expr != 0] or [replace(block, parts=())]
    steps = []
    for i, part in enumerate(parts):
        terms = expr_terms(sympy.factor_terms(part.total), v)
        if i > 0:
            first, *rest = terms
            steps.append(("-" if first.negative else "+", [[Term(False, first.body), *rest]], label(part.name)))
        else:
            steps.append(("=", [terms], label(part.name)))
    steps.append(("", [], Note(_text(f"one {block.name}; the model holds"), f"{repeat_latex(block.repeat, v)} \\text{{ of them}}")))
    return aligned(f"{quantity_letter(quantity)}\\,[\\text{{{_text(block.name.rsplit('/', 1)[-1])}}}]", steps, width=width)


def active_latex(active, vocabulary: Vocabulary) -> str:
    """The N_active form: the multiple of N_active, then what that leaves out, one term per layer kind."""
    return joined([t for run in active_runs(active, vocabulary) for t in run])


def active_runs(active, vocabulary: Vocabulary) -> list[list[Term]]:
    n_active = vocabulary[active.symbol_name]
    if not active.rest_blocks:
        return [expr_terms(active.with_symbol(n_active), vocabulary)]
    return [expr_terms(active.multiple * n_active, vocabulary)] + [block_terms(b, vocabulary) for b in by_layer_kind(active.rest_blocks)]
