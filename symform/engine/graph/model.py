"""Model: a root component with its arguments bound, and the verbs users call on it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from collections import OrderedDict
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import sympy

from . import html_table
from ..store.data import accountings_table, formulas_dir, read_toml
from ..language.declarations import QUANTITIES, Library, default_library
from ..errors import ConfigError, DeclarationError, EvaluationError, SymformError, describe_validation
from ..budget import check_count, quoted
from ..algebra.multiplied import expand
from ..algebra.evaluate import Number, check_value, exact_evaluator, plain_values, run_exact
from ..store import hub
from ..language.families import Checkpoint, ContextLimit, ModelSpec, checkpoint_facts, find_preset, load_config_file, preset_config, presets, spec_from_config
from ..algebra.formula import Formula
from ..algebra.multiplied import multiplied_out
from ..store.derivation import Identity, derivation, inputs_key
from .graph import ComponentGraph, assumption_names, build_graph, check_slot_sizes, introduced_ratios, root_component
from ..language.safe_expr import parse
from ..algebra.exact import exact_predicate
from .size_checks import GeneratedChecks, SizeCheck, size_checks
from . import requirements
from .requirements import NO_CHECKS, _reading_workload
from ..language.userfile import load_declaration_file
from ..language.families import load_family
from ..language.schema import OTHER_KEYS, SchemaError, build


@dataclass(frozen=True, kw_only=True)
class DerivedQuantity:
    doc: str
    expression: str


@cache
def derived_quantities() -> Mapping[str, DerivedQuantity]:
    table = read_toml(formulas_dir() / "quantities.toml")
    try:
        return MappingProxyType({k: build(DerivedQuantity, v) for k, v in table.items()})
    except SchemaError as e:
        raise DeclarationError(f"quantities.toml: {describe_validation(e)}") from None


@dataclass(frozen=True, kw_only=True)
class Accounting:
    EXTRA = "allow"

    doc: str
    extra: Mapping[str, object] = field(default_factory=dict, metadata=OTHER_KEYS)  # the conventions it sets


@cache
def accountings() -> Mapping[str, Mapping[str, object]]:
    """The named convention sets (formulas/accountings.toml): name -> {convention: value}."""
    table = accountings_table()
    try:
        return MappingProxyType({name: dict(build(Accounting, raw).extra) for name, raw in table.items()})
    except SchemaError as e:
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
        shown = [q.replace("_", "-") for q in quantity_names()]
        near = hub.close_names(name.replace("_", "-"), shown)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        raise EvaluationError(f"unknown quantity {quoted(name)}; {hint}choose one of {', '.join(shown)}")
    return key


def _names_a_file(text: str) -> bool:
    """Whether ``text`` is the path of a config or architecture file, which no preset's name or Hub id is (so
    loading it reads no preset index); a path the filesystem refuses is left to the load's own message."""
    try:
        return Path(text).suffix in (".json", ".toml") and Path(text).is_file()
    except OSError:
        return False


class Model:
    """A whole model: a root component, its arguments, and the counting conventions in force.

    Build one with :meth:`load` (a preset name or a path to a Hugging Face
    ``config.json``), :meth:`from_config` (a dict) or :meth:`from_component`
    (any declared component with its arguments).
    """

    def __init__(self, spec: ModelSpec, *, library: Library | None = None, conventions: Mapping[str, object] | None = None, accounting: str | None = None):
        self.spec = spec
        self.library = library or default_library()
        self.vocabulary = self.library.vocabulary
        self.accounting = accounting  # a named convention set (formulas/accountings.toml), applied before `conventions`
        named = accounting_conventions(accounting) if accounting else {}
        # the config's own settings (its dropout) first: an accounting and the user's conventions override them
        self.conventions = self._conventions({**spec.conventions, **named, **(conventions or {})})
        self.chosen = frozenset(conventions or ())  # the caller's own: a framework's conventions yield to these
        self._bind()

    def _bind(self, like: "Model | None" = None, resized: tuple[dict, dict] | None = None, changed: frozenset | None = None) -> None:
        """Sizes and arguments from the spec, the structure shared with every model like this one, and the checks.
        ``like``: a model with the same library and conventions, whose structure this one shares where
        only sizes differ (then nothing is looked up, let alone rebuilt). ``changed``: made from a model with
        the same sizes, which passed its checks: the conventions that differ from its own (only the requirements
        reading those can fail here: parts and repeats read sizes alone)."""
        self._values, self._arguments = resized or self._split_arguments()
        self._key: tuple | None = None  # derivation_key, made when a derivation first asks
        self._evaluators: dict[str, object] = {}  # quantity -> exact function with this model's sizes bound
        self._evaluations: dict[str, int] = {}
        self._ratios: dict[str, sympy.Rational] | None = None
        self._plain_values = {s.name: int(v) for s, v in self._values.items()}
        self._workload_checks: tuple | None = None  # found at the first evaluation; NO_CHECKS for most models
        same = like is not None and like._arguments == self._arguments
        self._structure = like._structure if same else _structure(self.library, self.spec.root, self._arguments, self.conventions)
        self._bound = like._bound if same and like._values.keys() == self._values.keys() else frozenset(self._values)
        self._graphs = self._structure.graphs
        if changed is None:
            requirements.check_requirements(self)
        else:
            requirements.check_changed_conventions(self, changed)

    # -- construction ---------------------------------------------------------

    @classmethod
    def load(cls, source: str | Path, *, revision: str | None = None, **options: Any) -> "Model":
        """A bundled preset by name or Hub id, a Hugging Face config.json by path, an architecture file
        (.toml), or any model by its Hub id (``Qwen/Qwen3-8B``; ``revision`` a branch, tag or commit)."""
        text = str(source)
        preset = find_preset(text) if revision is None and not _names_a_file(text) else None
        if preset is not None:
            return cls(_preset_spec(preset), **options)
        path = Path(text)
        try:
            exists = path.exists()
        except OSError as e:  # a name too long for the filesystem
            raise ConfigError(f"{quoted(text)}: cannot read ({e.strerror or e.__class__.__name__}); give a preset name or a shorter path") from None
        if not exists and hub.looks_like_repo_id(text):
            files = hub.fetch(text, revision=revision)
            checkpoint = checkpoint_facts(files.config, quant_file=files.quant_config, index=files.index, dtypes=hub.checkpoint_dtypes(files))
            spec = spec_from_config(files.config, name=text, origin=files.origin)
            return cls(replace(spec, checkpoint=checkpoint), **options)
        named = find_preset(text) if revision is not None and not exists else None
        if named is not None:  # a preset's own name with --revision: only its Hub id has revisions
            raise ConfigError(f"{quoted(text)} is a bundled preset, which has no revisions; give its Hub id with the revision ({presets()[named].hub} --revision {revision}) or drop the revision")
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
    def from_config(cls, config: Mapping[str, Any], *, name: str = "model", family: str | Path | None = None, **options: Any) -> "Model":
        """A model from a Hugging Face config given as a dict; ``family``: a family file of your own to read it with."""
        return cls(spec_from_config(config, name=name, origin=name, family=load_family(Path(family)) if family else None), **options)

    @classmethod
    def from_component(cls, root: str, *, name: str | None = None, library: Library | None = None, conventions: Mapping[str, object] | None = None, **arguments: int | str) -> "Model":
        """Any declared component as a model: ``Model.from_component("gated_mlp", d_model=4096, d_ff=11008)``."""
        spec = ModelSpec(name=name or root, root=root, arguments=MappingProxyType(dict(arguments)))
        return cls(spec, library=library, conventions=conventions)

    def with_arguments(self, **arguments: int | str) -> "Model":
        """The same model with some root arguments changed: sizes, 0/1 options, slot components."""
        model = object.__new__(Model)  # the conventions stay as they were checked: only the arguments are new
        model.spec = replace(self.spec, arguments=MappingProxyType(self._rebound_arguments(arguments)))
        model.library, model.vocabulary, model.accounting = self.library, self.vocabulary, self.accounting
        model.conventions, model.chosen = dict(self.conventions), self.chosen
        model._bind(like=self, resized=self._resized(arguments))
        return model

    def _rebound_arguments(self, arguments: Mapping[str, object]) -> dict[str, object]:
        """The spec's arguments with ``arguments`` in. A slot given another component sheds the sizes only its
        old one took (a vision tower's, which the model binds as its own: vision = "no_tower" leaves the text
        model); a size named in ``arguments`` itself is kept, for the root to refuse if nothing takes it."""
        merged = {**self.spec.arguments, **arguments}
        root = self.library[self.spec.root]
        if not any(name in root.arg_names and root.arg(name).is_slot for name in arguments):
            return merged
        component = root_component(self.library, self.spec.root, merged)
        kept = {name: value for name, value in merged.items() if name in component.arg_names or name in arguments}
        check_slot_sizes(self.library, self.spec.root, component, kept)  # every size the new component needs, named at once
        return kept

    def _resized(self, arguments: Mapping[str, object]) -> tuple[dict, dict] | None:
        """This model's sizes with some changed, where each was and stays above zero (the graph is the same:
        sizes are symbols there); None where anything else changes, for a split afresh."""
        sizes = self.vocabulary.architecture
        for name, value in arguments.items():
            symbol = self._arguments.get(name)
            if name not in sizes or symbol is None or symbol not in self._values or value == 0:
                return None
        if plain_values(arguments, self.vocabulary) is None:
            return None
        values = dict(self._values)
        values.update({self._arguments[name]: sympy.Integer(value) for name, value in arguments.items()})
        return values, self._arguments

    def with_conventions(self, **conventions: object) -> "Model":
        """The same model with some conventions set by the caller (a framework's defaults then yield to them)."""
        return self._reconvened(conventions, self.chosen | frozenset(conventions))

    def with_defaults(self, **conventions: object) -> "Model":
        """The same model with conventions that yield to the caller's own: each is set only where the caller set none."""
        return self._reconvened({k: v for k, v in conventions.items() if k not in self.chosen}, self.chosen)

    def _reconvened(self, conventions: Mapping[str, object], chosen: frozenset) -> "Model":
        merged = {s.name: v for s, v in self.conventions.items()} | dict(conventions)
        model = object.__new__(Model)  # the sizes stay as they were checked: only the requirements that read a changed convention are checked again
        model.spec, model.library, model.vocabulary, model.accounting = self.spec, self.library, self.vocabulary, self.accounting
        model.conventions, model.chosen = model._conventions(merged), chosen
        changed = frozenset(s for s, v in model.conventions.items() if self.conventions.get(s) != v)
        model._bind(resized=(dict(self._values), self._arguments), changed=changed)
        return model

    def with_accounting(self, name: str) -> "Model":
        """The same model under a named convention set (``"eager"``): its conventions replace the current ones."""
        return Model(self.spec, library=self.library, accounting=name)

    @property
    def name(self) -> str:
        return self.spec.name

    def derivation_key(self) -> tuple:
        """Everything a derivation given this model could read (engine/derivation): its declarations, its spec
        (every size and argument, the config, the checkpoint), its conventions and its accounting."""
        if self._key is None:
            self._key = (Identity(self.library), inputs_key(self.spec), inputs_key(self.conventions), self.accounting)
        return self._key

    @property
    def context_limit(self) -> ContextLimit | None:
        """The most tokens (cached and new) the model reads, as its config states it (a ``ContextLimit``:
        ``tokens``, the config ``field``, its RoPE scaling); None for architecture files and bare components."""
        return self.spec.context

    @property
    def values(self) -> dict[str, int]:
        """The architecture's sizes, by vocabulary name."""
        return dict(self._plain_values)  # a copy: analyses ask for it thousands of times in a plan

    def __repr__(self) -> str:
        return f"Model({self.name!r}, root={self.spec.root!r})"

    def _repr_html_(self) -> str:
        """In a notebook: parameters per top-level component, as numbers where the sizes are known and as formulas."""
        import html  # a notebook's alone

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

    @property
    def ratio_values(self) -> dict[str, sympy.Rational]:
        """The ratios assumption sets introduce (granularity G = d_ff/d_e), at the value that makes each
        assumption exact at this model's sizes: a derivation's error then comes from the other assumptions."""
        if self._ratios is None:
            ratios = frozenset(self.vocabulary.symbols("ratio"))
            self._ratios = {s.name: v for s, v in introduced_ratios(self.graph(), self._values, ratios).items()} if ratios else {}
        return dict(self._ratios)

    def leading_rewrites(self, *, assume: str | None = None) -> dict[sympy.Expr, sympy.Expr]:
        """What this model's leading-order forms write in place of an expression, as its components declare
        (a chunked scan's ceil(seq/chunk) chunks: seq/chunk)."""
        return self.graph(assume=assume).leading_rewrites()

    def assumption_sets(self) -> list[str]:
        found = {name for node in self.graph().graph.nodes.values() for name in node["component"].assumptions}
        return sorted(found)

    def expression(self, quantity: str, *, assume: str | None = None, conventions: bool = True) -> Formula:
        """The whole model's expression for a quantity, over the vocabulary's symbols."""
        quantity = normalise_quantity(quantity)
        # the graph's at these conventions: shared by every model of the same structure, whatever its sizes
        return _finished(self.graph(assume=assume), quantity, self.conventions if conventions else None, self.vocabulary)

    def breakdown(self, quantity: str, *, depth: int | None = 1, assume: str | None = None, conventions: bool = True) -> dict[str, Formula]:
        """Per-component expressions by slash path (``depth`` segments deep); they sum to the total."""
        quantity = normalise_quantity(quantity)
        if quantity not in QUANTITIES:
            raise EvaluationError(f"a breakdown is per declared quantity: {', '.join(QUANTITIES)}")
        if depth is not None and (type(depth) is not int or depth < 1):
            raise EvaluationError(f"a breakdown's depth is a whole number of path segments from 1, or None for every part; got {quoted(depth)}")
        parts = self.graph(assume=assume).breakdown(quantity, depth)
        return {path: self._finish(e, conventions) for path, e in parts.items()}

    def _finish(self, expr: sympy.Expr, conventions: bool) -> Formula:
        return _finish(expr, self.conventions if conventions else None, self.vocabulary)

    # -- numbers -------------------------------------------------------------------

    def bindings(self, **workload: object) -> dict[str, object]:
        """The model's own sizes plus the given workload values, by name."""
        return {**self.values, **workload}

    def evaluate(self, quantity: str, **workload: object) -> Number:
        """Exact value of a quantity at this model's sizes and the given workload (batch, seq, tokens, past).
        A size of the model's given again is the model resized (``with_arguments``), checked as such."""
        if not self._arguments.keys().isdisjoint(workload):
            model, workload = self._resized_by(workload)
            if model is not self:
                return model.evaluate(quantity, **workload)
        vocabulary = self.vocabulary
        # a model none of whose requirements waits for the workload skips the checks, unless the workload gives
        # settings (an image count): the model those make has checks of its own
        if self._workload_checks is not NO_CHECKS or not vocabulary.settings.isdisjoint(workload):
            self.check_workload(**workload)
        # the generated function answers where every value is plainly valid and the count is sound;
        # anything else takes sympy's route, which gives the same number or words the error
        if vocabulary.settings.isdisjoint(workload) and plain_values(workload, vocabulary) is not None:
            # a size given again in the workload overrides the model's: then only the shared function will do
            own = self._plain_values.keys().isdisjoint(workload)
            function = (self._evaluators if own else self._structure.evaluators).get(quantity) or self._evaluator(quantity, own)
            if function is not None:
                value = run_exact(function, {**self._plain_values, **workload})
                if value is not None and value >= 0 and (type(value) is int or quantity not in WHOLE_QUANTITIES):
                    return value
        model, workload = self._with_settings(workload)
        value = model.expression(quantity).evaluate(**model.bindings(**workload))
        _check_count(self.name, quantity, "", value)
        return value

    def check_workload(self, **workload: object) -> None:
        """ConfigError where a requirement that reads the workload fails at the values given (a sequence too short
        for its images' tokens): the model's own checks decide those only once an evaluation binds the workload.
        ``evaluate`` and the memory reports check; call it before evaluating an expression of the model yourself."""
        requirements.check_workload(self, **workload)

    def _known(self) -> dict[sympy.Symbol, sympy.Expr]:
        return {**self.conventions, **self._values}

    def _evaluator(self, quantity: str, own: bool):
        """The generated exact function for a quantity: over every symbol (shared by every model like this
        one) until this model has evaluated it a few times, then over the workload alone, with this
        model's sizes multiplied in (fewer terms, smaller numbers)."""
        shared = self._structure.evaluators
        if quantity not in shared:
            shared[quantity] = exact_evaluator(self.expression(quantity).expr, self.vocabulary)
        if shared[quantity] is None or not own:
            return shared[quantity]
        calls = self._evaluations[quantity] = self._evaluations.get(quantity, 0) + 1
        if calls < _CALLS_BEFORE_BINDING:
            return shared[quantity]
        try:
            bound = expand(self.expression(quantity).expr.xreplace(self._values), f"{self.name}'s {quantity}")
        except (ZeroDivisionError, SymformError):  # sympy's route words it, call by call
            bound = None
        specialised = exact_evaluator(bound, self.vocabulary) if bound is not None else None
        self._evaluators[quantity] = specialised or shared[quantity]
        return self._evaluators[quantity]

    def _resized_by(self, workload: dict[str, object]) -> tuple["Model", dict[str, object]]:
        """The model with the sizes the workload gives for its own arguments (checked as with_arguments checks
        them: heads that divide, ...), and the rest of the workload; itself where they are its own values."""
        sizes = {k: v for k, v in workload.items() if k in self._arguments}
        rest = {k: v for k, v in workload.items() if k not in sizes}
        own = self._plain_values
        if all(type(v) is int and own.get(k) == v for k, v in sizes.items()):
            return self, rest
        return self.with_arguments(**sizes), rest

    def _with_settings(self, workload: dict[str, object]) -> tuple["Model", dict[str, object]]:
        """Workload values that have defaults (past) are settings: they select the expression, not just a value."""
        settings = {k: v for k, v in workload.items() if k in self._settable and k not in self.vocabulary.names("convention", "dtype")}
        if not settings:
            return self, workload
        return self.with_conventions(**settings), {k: v for k, v in workload.items() if k not in settings}

    def compile(self, quantity: str, *names: str):
        """A vectorised float64 function of ``names``; the model's own sizes not named are bound. Sizes of the
        model's given to it as numbers or numpy arrays are checked as ``with_arguments`` checks them (heads that
        divide, ...), once per distinct combination, and refused with the same message; dask arrays stay lazy
        and unchecked here (``symform.sweep(zip=...)`` and ``lazy_sweep`` check them block by block)."""
        fixed = {k: v for k, v in self.values.items() if k not in names}
        function = self.expression(quantity).subs(**fixed).compile(*names)
        sizes = [i for i, name in enumerate(names) if name in self._arguments]
        if not sizes:
            return function

        def checked(*arrays):
            columns = {names[i]: arrays[i] for i in sizes if i < len(arrays)}
            if not any(hasattr(c, "__dask_graph__") for c in columns.values()):  # never computed to be checked
                self._check_size_columns(columns)
            return function(*arrays)

        return checked

    def _check_size_columns(self, columns: Mapping[str, object]) -> None:
        """Each distinct combination of the given sizes makes a model that passes its checks (ConfigError otherwise)."""
        import numpy

        shaped = numpy.broadcast_arrays(*(numpy.asarray(v) for v in columns.values()))
        rows = numpy.unique(numpy.stack([numpy.ravel(c) for c in shaped], axis=-1), axis=0) if shaped[0].size else []
        check_count(len(rows), COMPILED_CHECKS, "distinct combinations of sizes to check", "COMPILED_CHECKS", "evaluate fewer distinct sizes at once, or use symform.sweep, which checks each axis once")
        for row in rows:
            self.with_arguments(**{name: _as_size(value) for name, value in zip(columns, row)})

    def evaluate_breakdown(self, quantity: str, *, depth: int | None = 1, **workload: object) -> dict[str, Number]:
        if not self._arguments.keys().isdisjoint(workload):
            model, workload = self._resized_by(workload)
            if model is not self:
                return model.evaluate_breakdown(quantity, depth=depth, **workload)
        self.check_workload(**workload)
        model, workload = self._with_settings(workload)
        values = model.bindings(**workload)
        parts = {path: f.evaluate(**{k: v for k, v in values.items() if k in f.free}) for path, f in model.breakdown(quantity, depth=depth).items()}
        for path, value in parts.items():
            _check_count(self.name, quantity, path, value)
        return parts

    # -- internals ----------------------------------------------------------------

    @property
    def _settable(self) -> list[str]:
        """Names a user may set on the model: conventions, storage sizes, workload settings (past, source_seq)."""
        return self.vocabulary.settable()

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
        root = root_component(self.library, self.spec.root, self.spec.arguments)
        architecture = self.vocabulary.architecture
        declared = {a.name: a for a in root.args}
        values: dict[sympy.Symbol, sympy.Integer] = {}
        arguments: dict[str, object] = {}
        for arg in root.args:  # sizes left unset stay symbolic: every expression still derives and prints
            if arg.name not in self.spec.arguments and arg.default is None and arg.name in architecture:
                arguments[arg.name] = self.vocabulary[arg.name]
        for name, value in self.spec.arguments.items():
            if name not in declared:
                raise ConfigError(f"{self.name}: {root.name} has no argument {name!r}; it takes {', '.join(root.arg_names)}")
            if declared[name].is_slot:
                arguments[name] = value
            elif name in architecture:
                size = _checked_size(self.name, name, value, self.vocabulary)
                # a count of zero (no dense layers, no local layers) removes that structure outright
                arguments[name] = self.vocabulary[name] if size != 0 else size
                values[self.vocabulary[name]] = size
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"{self.name}: argument {name!r} is {quoted(value)}; it must be a non-negative integer")
                arguments[name] = sympy.Integer(value)
        return values, arguments

@derivation
def _finished(graph: ComponentGraph, quantity: str, conventions: Mapping[sympy.Symbol, sympy.Rational] | None, vocabulary) -> Formula:
    """A quantity's whole-model expression from a graph, at the given conventions (None: left symbolic)."""
    if quantity in QUANTITIES:
        total = graph.total(quantity)
    else:
        text = derived_quantities()[quantity].expression
        used = set(_IDENTIFIER.findall(text))  # the totals it names: each is a whole graph multiplied out
        names = {**{n: vocabulary[n] for n in vocabulary.names()}, **{q: graph.total(q) for q in QUANTITIES if q in used}}
        total = parse(text, names)
    return _finish(total, conventions, vocabulary)


def _finish(expr: sympy.Expr, conventions: Mapping[sympy.Symbol, sympy.Rational] | None, vocabulary) -> Formula:
    # multiplied out once: the conventions in, each convention's monomials gathered (sympy.expand's result)
    return Formula(multiplied_out(expr, conventions), vocabulary)


COMPILED_CHECKS = 100_000  # distinct size combinations a compiled function checks in one call (each a with_arguments)


def _as_size(value: object) -> object:
    """A size read from an array as the number it stands for: a whole float as an int, anything else as given
    (with_arguments words what is wrong with it)."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _Structure:
    """What every model with the same declarations, arguments and conventions shares, whatever its
    sizes: the graphs and the expressions (sizes stay symbols there; only their values differ)."""

    def __init__(self, library: Library, graphs: dict[str | None, ComponentGraph]):
        self.library = library  # held: the key names it by id
        self.graphs = graphs  # shared with the structures that differ only in conventions
        self.generated: dict[frozenset, GeneratedChecks | None] = {}  # bound sizes -> generated checks (None until a second model)
        self.passed: set[tuple] = set()  # (undecided check, the values it reads) that sympy passed
        self._checks: list[SizeCheck] | None = None
        self._workload_tests: tuple | None = None
        self.evaluators: dict[str, object] = {}  # quantity -> generated exact function (None: sympy's route)

    def workload_tests(self, model: "Model") -> tuple[tuple[frozenset[str], Callable], ...]:
        """Each requirement reading the workload as (the workload names it reads, a generated predicate over
        the sizes and the workload), the structure's conventions in: made once, for every model like this one."""
        if self._workload_tests is None:
            workload, reading = _reading_workload(model.graph(), model.vocabulary)
            tests = []
            for requirement, _symbols in reading:
                relation = requirement.relation.xreplace(model.conventions)
                tests.append((frozenset(s.name for s in relation.free_symbols & workload), exact_predicate([("{0}", (relation,))])))
            self._workload_tests = tuple(tests)
        return self._workload_tests

    def size_checks(self, graph: ComponentGraph) -> list[SizeCheck]:
        if self._checks is None:  # the graph's alone: shared with the structures that differ only in conventions
            self._checks = size_checks(graph)
        return self._checks


_STRUCTURES: "OrderedDict[tuple, _Structure]" = OrderedDict()
_GRAPHS: "OrderedDict[tuple, dict]" = OrderedDict()  # conventions enter expressions only as they are finished, so graphs ignore them
_STRUCTURES_KEPT = 64


def _recent(cache: OrderedDict, key: tuple, make: Callable[[], object]) -> object:
    """cache[key], made on first use; the least recently used entry is forgotten past _STRUCTURES_KEPT."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = make()
        if len(cache) > _STRUCTURES_KEPT:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return found


def _structure(library: Library, root: str, arguments: Mapping[str, object], conventions: Mapping[sympy.Symbol, sympy.Rational]) -> _Structure:
    shape = (id(library), root, frozenset(arguments.items()))
    graphs = _recent(_GRAPHS, shape, dict)
    return _recent(_STRUCTURES, (*shape, frozenset(conventions.items())), lambda: _Structure(library, graphs))


def forget_structures() -> None:
    """Forget every shared graph, expression, derivation and generated function: the next model builds from its
    declarations again (benchmarks measure that cold path; nothing else needs it)."""
    from ..store.derivation import forget_derivations
    from ..algebra.evaluate import _free
    from ..algebra.exact import exact_function, screened_maker
    from .graph import forget_instances

    forget_derivations()
    _STRUCTURES.clear()
    _GRAPHS.clear()
    forget_instances()
    _free.cache_clear()
    exact_function.cache_clear()
    screened_maker.cache_clear()


_CALLS_BEFORE_BINDING = 8  # evaluations of one quantity on one model before its sizes are multiplied in
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
    total = entry.extra.get("checkpoint_total_size_bytes")
    return replace(spec, checkpoint=checkpoint_facts(config, total_size=total), preset=name)


def _local_checkpoint(config: Mapping[str, Any], path: Path) -> Checkpoint:
    """A config.json's checkpoint facts, with the hf_quant_config.json, safetensors index and weights' headers beside it."""
    folder = path if path.is_dir() else path.parent
    extra = {}
    for key, filename in (("quant_file", hub.QUANT_CONFIG), ("index", hub.INDEX)):
        if (folder / filename).is_file():
            extra[key] = load_config_file(folder / filename)
    return checkpoint_facts(config, dtypes=hub.safetensors_dtypes(folder), **extra)


def _checked_size(model: str, name: str, value: object, vocabulary) -> sympy.Integer:
    if plain_values({name: value}, vocabulary) is not None:
        return sympy.Integer(value)
    try:
        return check_value(name, value, vocabulary)
    except SymformError as e:
        raise ConfigError(f"{model}: {e}") from None
