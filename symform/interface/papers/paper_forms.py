"""A paper's own letters and forms: ``symform latex ... --symbols kaplan`` and ``symform latex --paper kaplan``.

A paper file (formulas/papers/NAME.toml, or any file of the same shape) has a ``[symbols]`` table, symform's
symbol and quantity names to the paper's LaTeX letters (``d_model = "d_{\\mathrm{model}}"``), and optionally
``[[forms]]``: the forms the paper writes (Kaplan's N ≈ 12·n_layer·d_model², Korthikanti's sbh·(34 + 5as/h)),
each as the declared expression of a quantity under the paper's assumptions, accounting and conventions,
restricted to the blocks the paper counts, per token or per layer as the paper states it. Nothing here knows a
formula: each form is derived from formulas/ like every other.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sympy
from pydantic import BaseModel, ConfigDict, ValidationError

from ...engine.budget import number_from_text
from ...engine.store.data import formulas_dir, read_toml
from ...engine.errors import ConfigError, EvaluationError, describe_validation
from ...engine.language.latex_fragment import latex_problem
from ...engine.graph.model import Model, normalise_quantity
from ...engine.language.vocabulary import Vocabulary, default_vocabulary
from . import latex as tex


class PaperForm(BaseModel):
    """One form a paper writes, as symform derives it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # in words: "non-embedding parameters"
    where: str  # where the paper writes it: "Table 1"
    quantity: str
    model: str | None = None  # a bundled preset, else the file's
    component: str | None = None  # or a declared model component with slots (a GPT layer with a one-op GELU)
    slots: dict[str, str] = {}
    assume: str | None = None
    accounting: str | None = None
    conventions: dict[str, str] = {}  # symform's conventions and bytes per element (1: elements) at the paper's
    recompute: Literal["none", "selective", "full"] = "none"
    blocks: list[str] | None = None  # the blocks the paper counts (Kaplan leaves out the embedding)
    per_instance: bool = False  # one instance of the block: per layer
    set: dict[str, str] = {}  # symbols put at a value (batch = 1)
    per: list[str] = []  # symbols the form is divided by (per token: seq)
    leading: bool = True
    large: list[str] | None = None  # the symbols large at leading order (default: the model's widths)
    in_terms_of: str | None = None  # another form's name: this one as a multiple of its letter plus the rest
    part: str | None = None  # a component part by part (DeepSeek-V2's MLA projections)
    at: dict[str, int] = {}  # the workload its error is evaluated at
    factor: bool = False  # printed with its common factors out, as the paper writes it
    labels: dict[str, str] = {}  # a part's label as the paper writes it (q_a_proj = "W^{DQ}"), LaTeX


class PaperFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    citation: str = ""
    model: str | None = None
    symbols: dict[str, str]
    forms: list[PaperForm] = []


def bundled_papers() -> list[str]:
    return sorted(p.stem for p in (formulas_dir() / "papers").glob("*.toml"))


def paper_path(source: str) -> Path:
    """A bundled paper's file by name (``kaplan``), else the path given."""
    if source in bundled_papers():
        return formulas_dir() / "papers" / f"{source}.toml"
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"{source}: no such mapping file; give a .toml file with a [symbols] table, or a bundled paper: {', '.join(bundled_papers())}")
    return path


def read_paper(source: str, vocabulary: Vocabulary | None = None) -> PaperFile:
    """A paper file, checked: every name one of symform's symbols or quantities, every letter a safe LaTeX
    fragment, no two symbols printed with the same letter. Every failure one line naming the file."""
    vocabulary = vocabulary or default_vocabulary()
    path = paper_path(source)
    table = read_toml(path)
    if not isinstance(table.get("symbols"), dict):
        raise ConfigError(f"{path}: no [symbols] table; write [symbols] and a line per symbol, e.g. d_model = \"d_{{\\mathrm{{model}}}}\"")
    try:
        paper = PaperFile.model_validate(table)
    except ValidationError as e:
        raise ConfigError(f"{path}: {describe_validation(e)}; fix the file") from None
    for name, letter in paper.symbols.items():
        if name not in vocabulary and name not in tex.QUANTITIES_PRINTED:
            close = difflib.get_close_matches(name, [*vocabulary.names(), *tex.QUANTITIES_PRINTED], n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see formulas/symbols.toml for the names"
            raise ConfigError(f"{path}: [symbols] names {name!r}, which is none of symform's symbols or quantities; {hint}")
        problem = latex_problem(letter)
        if problem:
            raise ConfigError(f"{path}: [symbols] {name}: the letter {letter[:40]!r} is refused: {problem}")
    _check_distinct(paper.symbols, vocabulary, path)
    return paper


# a quantity's letter may be the symbol that stands for it in a formula (N for the parameters and in C ≈ 6·N·D)
_SAME_THING = {"params": "n_params", "active_params": "n_active_params"}


def _check_distinct(letters: dict[str, str], vocabulary: Vocabulary, path: Path) -> None:
    """Two names printed alike would make a formula mean two things: refuse the file."""
    printed: dict[str, str] = {}
    with tex.letters_in_force(letters):
        for name in vocabulary.names():
            _claim(printed, tex.symbol_latex(vocabulary[name], vocabulary), name, path)
        for quantity in tex.QUANTITIES_PRINTED:
            letter = tex.quantity_letter(quantity)
            if printed.get(_normal(letter)) != _SAME_THING.get(quantity):
                _claim(printed, letter, quantity, path)


def _claim(printed: dict[str, str], letter: str, name: str, path: Path) -> None:
    other = printed.setdefault(_normal(letter), name)
    if other != name:
        raise ConfigError(f"{path}: {name} and {other} would both print as {letter!r}; give one of them another letter in [symbols]")


def _normal(letter: str) -> str:
    return letter.replace(" ", "").replace("{", "").replace("}", "")


# --- the forms --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    spec: PaperForm
    model: Model
    lhs: str  # LaTeX
    expr: sympy.Expr  # as symform derives it, in symform's symbols
    error: float | None  # at the model's sizes and the form's workload, against the same count exact
    body: str | None = None  # an aligned block of its own (a component part by part)


def paper_forms(paper: PaperFile) -> list[Form]:
    forms: dict[str, Form] = {}
    for spec in paper.forms:
        forms[spec.name] = _form(spec, paper, forms)
    return list(forms.values())


def _model(spec: PaperForm, paper: PaperFile) -> Model:
    conventions = {k: sympy.Rational(number_from_text(v, k)) for k, v in spec.conventions.items()}
    if spec.component is not None:
        model = Model.from_component(spec.component, **spec.slots)
        model = model.with_accounting(spec.accounting) if spec.accounting else model
        return model.with_conventions(**conventions) if conventions else model
    name = spec.model or paper.model
    if name is None:
        raise ConfigError(f"the form {spec.name!r} names no model; give model = \"PRESET\" in it or in the file")
    return Model.load(name, conventions=conventions or None, accounting=spec.accounting)


def _form(spec: PaperForm, paper: PaperFile, earlier: dict[str, Form]) -> Form:
    from ...engine.graph.structure import part_block

    model = _model(spec, paper)
    v = model.vocabulary
    quantity = normalise_quantity(spec.quantity)
    if spec.part is not None:
        block = part_block(model, quantity, spec.part, assume=spec.assume)
        return Form(spec, model, tex.quantity_letter(quantity), block.expr, None, tex.part_latex(block, model, quantity, labels=_labels(spec)))
    expr = _selected(model, spec, quantity, leading=spec.leading, assume=spec.assume)
    exact = _selected(model, spec, quantity, leading=False, assume=None)
    if spec.in_terms_of is not None:
        if spec.in_terms_of not in earlier:
            raise ConfigError(f"the form {spec.name!r} is written in terms of {spec.in_terms_of!r}, which no earlier form is named")
        expr = in_terms_of(expr, earlier[spec.in_terms_of].expr, v["n_params"], v)
    per = "".join(tex.latex(v[n], v) for n in spec.per)
    lhs = tex.quantity_letter(quantity) + (f"/{per}" if len(spec.per) == 1 else f"/({per})" if spec.per else "")
    return Form(spec, model, lhs, expr, _error(model, spec, expr, exact, earlier))


def _labels(spec: PaperForm) -> dict[str, str]:
    for name, label in spec.labels.items():
        problem = latex_problem(label)
        if problem:
            raise ConfigError(f"the form {spec.name!r}: the label {label[:40]!r} of {name!r} is refused: {problem}")
    return spec.labels


def _selected(model: Model, spec: PaperForm, quantity: str, *, leading: bool, assume: str | None) -> sympy.Expr:
    """The quantity over the blocks the paper counts, per instance where it says per layer, divided as it says."""
    from ...engine.graph.structure import structure

    v = model.vocabulary
    st = structure(model, quantity, assume=assume, leading=leading and spec.recompute == "none", large=spec.large)
    names = [b.name for b in st.blocks]
    for wanted in spec.blocks or ():
        if wanted not in names:
            raise ConfigError(f"the form {spec.name!r} counts the block {wanted!r}; {model.name}'s blocks are {', '.join(names)}")
    blocks = [b for b in st.blocks if spec.blocks is None or b.name in spec.blocks]
    if spec.recompute != "none":
        expr = _recomputed(model, spec, assume, blocks)
    else:
        expr = sympy.Add(*(b.expr if spec.per_instance else b.total for b in blocks))
    fixed = {v[k]: sympy.Rational(number_from_text(x, k)) for k, x in spec.set.items()}
    return sympy.expand(expr.xreplace(fixed) / sympy.Mul(*(v[n] for n in spec.per)))


def _recomputed(model: Model, spec: PaperForm, assume: str | None, blocks) -> sympy.Expr:
    """What a training step keeps when it recomputes (Korthikanti's Table 2), per layer: the kept bytes'
    coefficient of the layer count, under the paper's assumptions."""
    from ...analysis.memory.memory import saved_activations
    from ...engine.graph.structure import without_flags

    if not spec.per_instance or len(blocks) != 1 or not isinstance(blocks[0].repeat, sympy.Symbol):
        raise ConfigError(f"the form {spec.name!r}: recomputation is written per layer of one block (per_instance = true, blocks = [one])")
    kept = without_flags(saved_activations(model, recompute=spec.recompute)[0], model.values)
    if assume is not None:
        kept = kept.xreplace(tex.assumption_substitutions(model, assume))
    return sympy.expand(kept).coeff(blocks[0].repeat)


def in_terms_of(expr: sympy.Expr, base: sympy.Expr, letter: sympy.Symbol, vocabulary: Vocabulary) -> sympy.Expr:
    """``expr`` as ``c·letter + rest`` where ``base`` (what the letter stands for) goes into it ``c`` times, ``c`` a
    number or a workload symbol (6·D): Kaplan's 2N + 2·n_layer·n_ctx·d_attn, Chinchilla's 6ND."""
    expr, base = sympy.expand(expr), sympy.expand(base)
    allowed = set(vocabulary.symbols("workload", "convention", "dtype"))
    first = sympy.Add.make_args(base)[0]
    for term in sympy.Add.make_args(expr):
        multiple = sympy.cancel(term / first)
        if multiple.free_symbols <= allowed and not sympy.fraction(multiple)[1].free_symbols:
            rest = sympy.expand(expr - multiple * base)
            if len(sympy.Add.make_args(rest)) + len(sympy.Add.make_args(base)) == len(sympy.Add.make_args(expr)) or rest == 0:
                return multiple * letter + rest
    raise EvaluationError(f"{expr} is no multiple of {base} plus other terms")


def _error(model: Model, spec: PaperForm, expr: sympy.Expr, exact: sympy.Expr, earlier: dict[str, Form]) -> float | None:
    v = model.vocabulary
    values = {v[k]: sympy.nsimplify(x) for k, x in {**model.values, **model.ratio_values, **spec.at}.items()}
    if spec.in_terms_of is not None:
        values[v["n_params"]] = earlier[spec.in_terms_of].expr.xreplace(values)
    at, exact_at = expr.xreplace(values), exact.xreplace(values)
    if at.free_symbols or exact_at.free_symbols or exact_at == 0:
        return None
    return float(sympy.Rational(at) / sympy.Rational(exact_at) - 1)


# --- the document -----------------------------------------------------------------------------


def paper_latex(source: str, *, standalone: bool = False, width: float = tex.TEXT_WIDTH_PT) -> str:
    """Each form of a paper as symform derives it, in the paper's letters, with where the paper writes it, the
    assumptions it makes and its error at the model; a glossary of every letter printed."""
    paper = read_paper(source)
    with tex.letters_in_force(paper.symbols):
        forms = paper_forms(paper)
        sections, used, quantities = [], set(), []
        for form in forms:
            v = form.model.vocabulary
            quantities.append(normalise_quantity(form.spec.quantity))
            used |= form.expr.free_symbols | {v[n] for n in form.spec.per}
            if form.body is not None:
                sections.append((f"{form.spec.name} ({form.spec.where})", form.body))
                continue
            steps = [("\\approx" if form.spec.leading else "=", [_terms(form.expr, v, form.spec.factor)], f"\\text{{{tex._text(form.spec.where)}}}"), ("", [], _note(form))]
            sections.append((f"{form.spec.name} ({form.spec.where})", tex.aligned(form.lhs, steps, width=width)))
        glossary = tex.glossary(default_vocabulary(), used, quantities)
        if standalone:
            return tex.standalone([("", tex._text(paper.citation)), *sections, ("Symbols", glossary)], title=f"{paper.citation.split(',')[0]}: its forms, derived by symform")
        return "\n\n".join([f"% {tex._text(paper.citation)}", *(f"% {h}\n{b}" for h, b in sections)])


def _terms(expr: sympy.Expr, vocabulary: Vocabulary, factor: bool = False) -> list:
    """The form's terms, a multiple of N first, as the papers write 2N + … and 6ND; with ``factor``, the common
    factors out, as sbh·(34 + …) and (d_c + d_h^R)·l."""
    if factor:
        return tex.expr_terms(sympy.factor_terms(expr), vocabulary)
    n = vocabulary["n_params"]
    with_n = sympy.Add(*(t for t in sympy.Add.make_args(expr) if t.has(n)))
    if with_n == 0 or with_n == expr:
        return tex.expr_terms(expr, vocabulary)
    return tex.expr_terms(with_n, vocabulary) + tex.expr_terms(expr - with_n, vocabulary)


def _note(form: Form) -> tex.Note:
    spec = form.spec
    said = [f"assuming {spec.assume}" if spec.assume else "the model's own sizes"]
    said += [f"accounting {spec.accounting}"] if spec.accounting else []
    said += [f"{spec.recompute} recomputation"] if spec.recompute != "none" else []
    said += [f"{k} = {x}" for k, x in {**spec.conventions, **spec.set}.items()]
    said += [f"blocks {', '.join(spec.blocks)}"] if spec.blocks else []
    said += ["per layer"] if spec.per_instance else []
    at = ", ".join(f"{k} = {x}" for k, x in spec.at.items())
    if form.error is None:
        return tex.Note(tex._text(f"{'; '.join(said)}; from {form.model.name}"))
    return tex.Note(tex._text(f"{'; '.join(said)}; at {form.model.name}{' (' + at + ')' if at else ''}:"), f"{{{form.error * 100:+.2f}}}\\,\\%")
