"""Model: a root component with its arguments bound, and the verbs users call on it."""

from __future__ import annotations

import html
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import sympy
from pydantic import BaseModel, ConfigDict, ValidationError

from . import html_table
from .data import formulas_dir, read_toml
from .declarations import QUANTITIES, Library, default_library
from .errors import ConfigError, DeclarationError, EvaluationError, SymformError, describe_validation
from .budget import quoted
from .evaluate import Number, check_value
from . import hub
from .families import Checkpoint, ContextLimit, ModelSpec, checkpoint_facts, find_preset, load_config_file, preset_config, presets, spec_from_config
from .formula import Formula
from .graph import ComponentGraph, assumption_names, build_graph
from .safe_expr import parse
from .userfile import load_declaration_file


class DerivedQuantity(BaseModel):
    model_config = ConfigDict(extra="forbid")

    doc: str
    expression: str


@cache
def derived_quantities() -> Mapping[str, DerivedQuantity]:
    table = read_toml(formulas_dir() / "quantities.toml")
    try:
        return MappingProxyType({k: DerivedQuantity.model_validate(v) for k, v in table.items()})
    except ValidationError as e:
        raise DeclarationError(f"quantities.toml: {describe_validation(e)}") from None


class Accounting(BaseModel):
    model_config = ConfigDict(extra="allow")

    doc: str


@cache
def accountings() -> Mapping[str, Mapping[str, object]]:
    """The named convention sets (formulas/accountings.toml): name -> {convention: value}."""
    table = read_toml(formulas_dir() / "accountings.toml")
    try:
        return MappingProxyType({name: {k: v for k, v in Accounting.model_validate(raw).model_dump().items() if k != "doc"} for name, raw in table.items()})
    except ValidationError as e:
        raise DeclarationError(f"accountings.toml: {describe_validation(e)}") from None


def accounting_conventions(name: str) -> Mapping[str, object]:
    if name not in accountings():
        raise EvaluationError(f"unknown accounting {name!r}; choose one of {', '.join(accountings())}")
    return accountings()[name]


def quantity_names() -> list[str]:
    return [*QUANTITIES, *derived_quantities()]


def normalise_quantity(name: str) -> str:
    if not isinstance(name, str):
        raise EvaluationError(f"a quantity is named by a string such as 'params', not {type(name).__name__}")
    key = name.replace("-", "_")
    if key not in quantity_names():
        raise EvaluationError(f"unknown quantity {quoted(name)}; choose one of {', '.join(q.replace('_', '-') for q in quantity_names())}")
    return key


class Model:
    """A whole model: a root component, its arguments, and the counting conventions in force.

    Build one with :meth:`load` (a preset name or a path to a Hugging Face
    ``config.json``), :meth:`from_config` (a dict) or :meth:`from_component`
    (any declared component with its arguments).
    """

    def __init__(self, spec: ModelSpec, *, library: Library | None = None, conventions: Mapping[str, object] | None = None, accounting: str | None = None, _graphs_of: "Model | None" = None):
        self.spec = spec
        self.library = library or default_library()
        self.vocabulary = self.library.vocabulary
        self.accounting = accounting  # a named convention set (formulas/accountings.toml), applied before `conventions`
        named = accounting_conventions(accounting) if accounting else {}
        self.conventions = self._conventions({**named, **(conventions or {})})
        # conventions enter expressions only as they are finished (_finish): a model that differs from another
        # in its conventions alone shares that one's graphs, already built and checked
        self._graphs: dict[str | None, ComponentGraph] = {} if _graphs_of is None else _graphs_of._graphs
        self._values, self._arguments = self._split_arguments()
        if _graphs_of is None:
            self._check_requirements()

    # -- construction ---------------------------------------------------------

    @classmethod
    def load(cls, source: str | Path, *, revision: str | None = None, **options: Any) -> "Model":
        """A bundled preset by name or Hub id, a Hugging Face config.json by path, an architecture file
        (.toml), or any model by its Hub id (``Qwen/Qwen3-8B``; ``revision`` a branch, tag or commit)."""
        text = str(source)
        preset = find_preset(text) if revision is None else None
        if preset is not None:
            return cls(_preset_spec(preset), **options)
        path = Path(text)
        try:
            exists = path.exists()
        except OSError as e:  # a name too long for the filesystem
            raise ConfigError(f"{quoted(text)}: cannot read ({e.strerror or e.__class__.__name__}); give a preset name or a shorter path") from None
        if not exists and hub.looks_like_repo_id(text):
            files = hub.fetch(text, revision=revision)
            dtypes = hub.safetensors_dtypes(files.folder) if files.folder else None  # the weights, where the cache has them
            checkpoint = checkpoint_facts(files.config, quant_file=files.quant_config, index=files.index, dtypes=dtypes)
            spec = spec_from_config(files.config, name=text, origin=files.origin)
            return cls(replace(spec, checkpoint=checkpoint), **options)
        if not exists and path.suffix == "":
            near = hub.close_names(text, [*presets(), *(e.hub for e in presets().values())])
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            raise ConfigError(f"{quoted(text)} is neither a bundled preset nor a file, nor a Hub id (org/name); {hint}symform models lists the presets")
        if path.suffix == ".toml":
            spec, library = load_declaration_file(path)
            return cls(spec, library=library, **options)
        name = path.parent.name if path.name == "config.json" else path.stem
        config = load_config_file(path)
        spec = spec_from_config(config, name=name or text, origin=str(path))
        return cls(replace(spec, checkpoint=_local_checkpoint(config, path)), **options)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, name: str = "model", **options: Any) -> "Model":
        """A model from a Hugging Face config given as a dict."""
        return cls(spec_from_config(config, name=name, origin=name), **options)

    @classmethod
    def from_component(cls, root: str, *, name: str | None = None, library: Library | None = None, conventions: Mapping[str, object] | None = None, **arguments: int | str) -> "Model":
        """Any declared component as a model: ``Model.from_component("gated_mlp", d_model=4096, d_ff=11008)``."""
        spec = ModelSpec(name=name or root, root=root, arguments=MappingProxyType(dict(arguments)))
        return cls(spec, library=library, conventions=conventions)

    def with_arguments(self, **arguments: int | str) -> "Model":
        """The same model with some root arguments changed: sizes, 0/1 options, slot components."""
        spec = replace(self.spec, arguments=MappingProxyType({**self.spec.arguments, **arguments}))
        return Model(spec, library=self.library, conventions={s.name: v for s, v in self.conventions.items()}, accounting=self.accounting)

    def with_conventions(self, **conventions: object) -> "Model":
        merged = {s.name: v for s, v in self.conventions.items()} | conventions
        return Model(self.spec, library=self.library, conventions=merged, accounting=self.accounting, _graphs_of=self)

    def with_accounting(self, name: str) -> "Model":
        """The same model under a named convention set (``"eager"``): its conventions replace the current ones."""
        return Model(self.spec, library=self.library, conventions=accounting_conventions(name), accounting=name, _graphs_of=self)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def context_limit(self) -> ContextLimit | None:
        """The most tokens (cached and new) the model reads, as its config states it (a ``ContextLimit``:
        ``tokens``, the config ``field``, its RoPE scaling); None for architecture files and bare components."""
        return self.spec.context

    @property
    def values(self) -> dict[str, int]:
        """The architecture's sizes, by vocabulary name."""
        return {s.name: int(v) for s, v in self._values.items()}

    def __repr__(self) -> str:
        return f"Model({self.name!r}, root={self.spec.root!r})"

    def _repr_html_(self) -> str:
        """In a notebook: parameters per top-level component, as numbers where the sizes are known and as formulas."""
        rows = []
        for path, formula in self.breakdown("params").items():
            free = set(formula.free) - set(self.values)
            value = html_table.count(formula.evaluate(**{k: v for k, v in self.values.items() if k in formula.free})) if not free else ""
            rows.append(html_table.row([html.escape(path), value, html_table.formula_cell(formula.latex())], right=(1,)))
        head = f"<b>{html.escape(self.name)}</b> ({html.escape(self.spec.root)}): parameters"
        return html_table.table(head, ("component", "count", "formula"), rows)

    # -- expressions ------------------------------------------------------------

    def graph(self, *, assume: str | None = None) -> ComponentGraph:
        if assume not in self._graphs:
            unknown = [a for a in assumption_names(assume) if a not in self.assumption_sets()]
            if assume is not None and (unknown or not assumption_names(assume)):
                known = ", ".join(self.assumption_sets()) or "none"
                raise EvaluationError(f"unknown assumption set {(unknown or [assume])[0]!r}; this model's components declare: {known}")
            try:
                self._graphs[assume] = build_graph(self.library, self.spec.root, self._arguments, assume=assume)
            except ZeroDivisionError:  # a part binds a divisor to 0 (sympy folds Mod(x, 0) as it substitutes)
                raise DeclarationError(f"{self.name}: a part's arguments make a divisor zero; give sizes and bindings that keep every divisor positive") from None
        return self._graphs[assume]

    def assumption_sets(self) -> list[str]:
        found = {name for node in self.graph().graph.nodes.values() for name in node["component"].assumptions}
        return sorted(found)

    def expression(self, quantity: str, *, assume: str | None = None, conventions: bool = True) -> Formula:
        """The whole model's expression for a quantity, over the vocabulary's symbols."""
        quantity = normalise_quantity(quantity)
        graph = self.graph(assume=assume)
        if quantity in QUANTITIES:
            expr = graph.total(quantity)
        else:
            names = {**{n: self.vocabulary[n] for n in self.vocabulary.names()}, **{q: graph.total(q) for q in QUANTITIES}}
            expr = parse(derived_quantities()[quantity].expression, names)
        return self._finish(expr, conventions)

    def breakdown(self, quantity: str, *, depth: int | None = 1, assume: str | None = None, conventions: bool = True) -> dict[str, Formula]:
        """Per-component expressions by slash path (``depth`` segments deep); they sum to the total."""
        quantity = normalise_quantity(quantity)
        if quantity not in QUANTITIES:
            raise EvaluationError(f"a breakdown is per declared quantity: {', '.join(QUANTITIES)}")
        parts = self.graph(assume=assume).breakdown(quantity, depth)
        return {path: self._finish(e, conventions) for path, e in parts.items()}

    def _finish(self, expr: sympy.Expr, conventions: bool) -> Formula:
        if conventions:
            expr = sympy.expand(expr.xreplace(self.conventions))
        return Formula(sympy.expand(expr), self.vocabulary)

    # -- numbers -------------------------------------------------------------------

    def bindings(self, **workload: object) -> dict[str, object]:
        """The model's own sizes plus the given workload values, by name."""
        return {**self.values, **workload}

    def evaluate(self, quantity: str, **workload: object) -> Number:
        """Exact value of a quantity at this model's sizes and the given workload (batch, seq, tokens, past)."""
        model, workload = self._with_settings(workload)
        value = model.expression(quantity).evaluate(**model.bindings(**workload))
        _check_count(self.name, quantity, "", value)
        return value

    def _with_settings(self, workload: dict[str, object]) -> tuple["Model", dict[str, object]]:
        """Workload values that have defaults (past) are settings: they select the expression, not just a value."""
        settings = {k: v for k, v in workload.items() if k in self._settable and k not in self.vocabulary.names("convention", "dtype")}
        if not settings:
            return self, workload
        return self.with_conventions(**settings), {k: v for k, v in workload.items() if k not in settings}

    def compile(self, quantity: str, *names: str):
        """A vectorised float64 function of ``names``; the model's own sizes not named are bound."""
        fixed = {k: v for k, v in self.values.items() if k not in names}
        return self.expression(quantity).subs(**fixed).compile(*names)

    def evaluate_breakdown(self, quantity: str, *, depth: int | None = 1, **workload: object) -> dict[str, Number]:
        model, workload = self._with_settings(workload)
        values = model.bindings(**workload)
        parts = {path: f.evaluate(**{k: v for k, v in values.items() if k in f.free}) for path, f in model.breakdown(quantity, depth=depth).items()}
        for path, value in parts.items():
            _check_count(self.name, quantity, path, value)
        return parts

    # -- internals ----------------------------------------------------------------

    @property
    def _settable(self) -> list[str]:
        """Names with a default that a user may override: conventions, storage sizes, workload settings (past)."""
        return [s.name for s in self.vocabulary.defaults()]

    def _conventions(self, overrides: Mapping[str, object]) -> dict[sympy.Symbol, sympy.Rational]:
        settable = set(self._settable)
        unknown = sorted(set(overrides) - settable)
        if unknown:
            raise EvaluationError(f"unknown convention {unknown[0]!r}; conventions: {', '.join(sorted(settable))}")
        values = dict(self.vocabulary.defaults())
        for name, value in overrides.items():
            values[self.vocabulary[name]] = check_value(name, value, self.vocabulary)
        return values

    def _split_arguments(self) -> tuple[dict[sympy.Symbol, sympy.Integer], dict[str, object]]:
        """Architecture sizes stay symbolic (their values kept aside); flags and slots are bound now."""
        root = self.library[self.spec.root]
        architecture = set(self.vocabulary.names("architecture"))
        values: dict[sympy.Symbol, sympy.Integer] = {}
        arguments: dict[str, object] = {}
        for arg in root.args:  # sizes left unset stay symbolic: every expression still derives and prints
            if arg.name not in self.spec.arguments and arg.default is None and arg.name in architecture:
                arguments[arg.name] = self.vocabulary[arg.name]
        for name, value in self.spec.arguments.items():
            if name not in root.arg_names:
                raise ConfigError(f"{self.name}: {root.name} has no argument {name!r}; it takes {', '.join(root.arg_names)}")
            if root.arg(name).is_slot:
                arguments[name] = value
            elif name in architecture:
                size = _checked_size(self.name, name, value, self.vocabulary)
                # a count of zero (no dense layers, no local layers) removes that structure outright
                arguments[name] = self.vocabulary[name] if size != 0 else size
                values[self.vocabulary[name]] = size
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"{self.name}: argument {name!r} is {value!r}; it must be a non-negative integer")
                arguments[name] = sympy.Integer(value)
        return values, arguments

    def _check_requirements(self) -> None:
        graph = self.graph()
        for path in graph.leaves():  # a negative part hides in a positive total: check each where sizes decide it
            for quantity, expr in graph.graph.nodes[path]["quantities"].items():
                value = _substituted(expr, self._values, f"{self.name}: {quantity} of {path or 'the root'}")
                if value.is_Number and value < 0:
                    raise ConfigError(f"{self.name}: {quantity} of {path or 'the root'} ({graph.graph.nodes[path]['component'].name}) is {value}, below zero; a count cannot be negative: check its declaration")
        for parent, child, edge in graph.graph.edges(data=True):
            for count in edge["repeat"].values():
                count = _substituted(count, self._values, f"{self.name}: the repeat of {child}")
                if count.is_Number and (not count.is_Integer or count < 0):
                    raise ConfigError(f"{self.name}: {child} repeats {count} times at these sizes; a repeat is a whole number of 0 or more")
        for bound in self.graph().requirements:
            holds = _substituted(bound.relation, self._values, f"{self.name}: {bound.requirement.text} in {bound.path or bound.component}")
            if holds.free_symbols:
                continue  # stays symbolic: checked when the user binds values
            if holds != sympy.true:
                got = ", ".join(f"{s.name}={self._values[s]}" for s in sorted(bound.relation.free_symbols, key=lambda s: s.name) if s in self._values)
                raise ConfigError(
                    f"{self.name}: {bound.requirement.text} does not hold ({got}) in {bound.path or bound.component}: {bound.requirement.why}"
                )


def _substituted(expr: sympy.Basic, values: Mapping[sympy.Symbol, sympy.Expr], where: str) -> sympy.Basic:
    try:
        return expr.xreplace(values)
    except ZeroDivisionError:
        raise ConfigError(f"{where}: division by zero at these sizes; give sizes that keep every divisor positive") from None


WHOLE_QUANTITIES = ("params", "active_params")  # tensors hold whole numbers of elements, whatever the conventions


def _check_count(model: str, quantity: str, path: str, value: Number) -> None:
    """Every quantity counts something (parameters, FLOPs, bytes): a negative value is a wrong declaration, never an answer."""
    if value < 0:
        where = f" in {path}" if path else ""
        raise EvaluationError(f"{model}: {quantity}{where} is {value}, below zero; a count cannot be negative: check the declaration's signs and sizes")
    if quantity in WHOLE_QUANTITIES and not isinstance(value, int):
        where = f" in {path}" if path else ""
        raise EvaluationError(f"{model}: {quantity}{where} is {value}, not a whole number; parameters come in whole numbers: check the declaration's divisions")


def _preset_spec(name: str) -> ModelSpec:
    config, entry = preset_config(name)
    spec = spec_from_config(config, name=name, origin=f"preset {name}")
    total = (entry.model_extra or {}).get("checkpoint_total_size_bytes")
    return replace(spec, checkpoint=checkpoint_facts(config, total_size=total))


def _local_checkpoint(config: Mapping[str, Any], path: Path) -> Checkpoint:
    """A config.json's checkpoint facts, with the hf_quant_config.json, safetensors index and weights' headers beside it."""
    folder = path if path.is_dir() else path.parent
    extra = {}
    for key, filename in (("quant_file", hub.QUANT_CONFIG), ("index", hub.INDEX)):
        if (folder / filename).is_file():
            extra[key] = load_config_file(folder / filename)
    return checkpoint_facts(config, dtypes=hub.safetensors_dtypes(folder), **extra)


def _checked_size(model: str, name: str, value: object, vocabulary) -> sympy.Integer:
    try:
        return check_value(name, value, vocabulary)
    except SymformError as e:
        raise ConfigError(f"{model}: {e}") from None
