"""Requirement checking: a model's sizes against its declarations' requirements (heads that divide, counts not
below zero, whole repeats), by generated predicates where they decide and sympy where not; and the requirements
that wait for the workload (a sequence long enough for its images' tokens), checked when an evaluation binds it.
Model calls these; composition and evaluation stay in ``model``."""

from __future__ import annotations

from typing import Mapping

import sympy

from ..errors import ConfigError
from ..budget import check_roots_and_logs
from ..algebra.evaluate import check_value, plain_values
from ..store.derivation import derivation
from .graph import BoundRequirement, ComponentGraph
from .size_checks import SizeCheck, generate_checks

NO_CHECKS: tuple = ()  # a model none of whose requirements waits for the workload
PASSED_KEPT = 4096  # undecided checks remembered as passed, per structure, before forgetting them all


def check_workload(model, **workload: object) -> None:
    """``Model.check_workload``: the requirements that read the workload, at the values given."""
    if plain_values(workload, model.vocabulary) is None:  # batch=-1, nan or '2': refused, never counted
        for name, value in workload.items():
            if name in model.vocabulary:
                check_value(name, value, model.vocabulary)
    if not model.vocabulary.settings.isdisjoint(workload):  # an image count given here: the model it makes checks
        model, rest = model._with_settings(workload)
        return model.check_workload(**rest)
    if model._workload_checks is None and passes_generated_workload_checks(model, workload):
        return  # a resized model: no sympy substitution per model (the checks that fail take the path below)
    if model._workload_checks is None:
        model._workload_checks = find_workload_checks(model)
    if not model._workload_checks:
        return
    read = {s for relation, _ in model._workload_checks for s in relation.free_symbols if s.name in workload}
    values = {s: check_value(s.name, workload[s.name], model.vocabulary) for s in sorted(read, key=lambda s: s.name)}
    for relation, requirement in model._workload_checks:
        if relation.free_symbols <= values.keys() and relation.xreplace(values) != sympy.true:
            raise ConfigError(failed_requirement(model.name, requirement, {**model._known(), **values}, model.graph().graph.nodes[requirement.path]["args"]))


def passes_generated_workload_checks(model, workload: Mapping[str, object]) -> bool:
    """Whether each requirement reading the workload that the workload settles holds, by the structure's
    generated predicates over plain numbers; False where any fails or cannot be decided that way."""
    if plain_values(workload, model.vocabulary) is None:
        return False
    values = None
    for names, test in model._structure.workload_tests(model):
        if names <= workload.keys():
            values = values or {**model._plain_values, **workload}
            try:
                if test(values) is not True:
                    return False
            except Exception:  # noqa: BLE001: a size left symbolic, a division by zero: sympy decides and words it
                return False
    return True


def find_workload_checks(model) -> tuple[tuple[sympy.Basic, BoundRequirement], ...]:
    """Each requirement left over the workload alone once this model's sizes and conventions are in."""
    return workload_checks_of(model, workload_relations(model))


def workload_relations(model) -> tuple[tuple[int, sympy.Basic], ...]:
    """(index among the graph's requirements that read the workload, the relation left once this model's
    sizes and conventions are in) of each that the sizes do not settle."""
    graph = model.graph()
    workload, reading = _reading_workload(graph, model.vocabulary)
    if not reading:  # most models: found once per graph, so a resized model pays a lookup
        return ()
    # what a requirement leaves depends on the values of its own symbols alone: models of one graph that differ
    # in other sizes (with_arguments) share the substitution
    known = model._known()
    found = []
    for i, (requirement, symbols) in enumerate(reading):
        left = _left_over(requirement.relation, tuple((s, known[s]) for s in symbols if s in known), workload)
        if left is not None:
            found.append((i, left))
    return tuple(found)


def workload_checks_of(model, relations: tuple[tuple[int, sympy.Basic], ...]) -> tuple[tuple[sympy.Basic, BoundRequirement], ...]:
    if not relations:
        return NO_CHECKS
    _, reading = _reading_workload(model.graph(), model.vocabulary)
    return tuple((relation, reading[i][0]) for i, relation in relations)


def check_requirements(model) -> None:
    """No part's count below zero, every repeat whole, every requirement holding, where the sizes decide it."""
    graph = model.graph()
    checks = model._structure.size_checks(graph)
    to_run = _checks_to_run(model, checks)
    if checks and len(to_run) == len(checks):
        # every check by sympy (the first model of its structure): what the requirements reading the
        # workload leave is found on the way
        _run_checks(model, graph, checks, to_run)
        model._workload_checks = workload_checks_of(model, workload_relations(model))
    else:
        _run_checks(model, graph, checks, to_run)


def _run_checks(model, graph: ComponentGraph, checks: list[SizeCheck], to_run: list[int]) -> None:
    passed: set[tuple[str, sympy.Basic]] = set()
    for i in to_run:
        # a check's verdict is its expression's at these sizes: where many parts share one, the first words a failure
        key = (checks[i].kind, checks[i].expr)
        if key not in passed:
            _check(model, graph, checks[i])
            passed.add(key)


def check_changed_conventions(model, changed: frozenset) -> None:
    """The requirements that read a convention in ``changed``: the rest passed on the model this one was made from."""
    if not changed:
        return
    graph = model.graph()
    for check in model._structure.size_checks(graph):
        if check.kind == "requirement" and not changed.isdisjoint(check.expr.free_symbols):
            _check(model, graph, check)


def _checks_to_run(model, checks: list[SizeCheck]) -> list[int]:
    """All of them, unless the generated checks pass: then those they leave undecided and sympy has
    not yet passed at the values they read. Generated once a second model shares the graph."""
    structure = model._structure
    bound = model._bound
    generated = structure.generated.get(bound, False)
    if generated is False:
        structure.generated[bound] = None  # the first model: sympy checks it
    elif generated is None:
        generated = structure.generated[bound] = generate_checks(checks, bound)
    everything = range(len(checks))
    if not generated:
        return list(everything)
    try:
        if generated.passes(model._plain_values) is not True:
            return list(everything)
    except Exception:  # a division by zero, say: sympy words it
        return list(everything)
    if len(structure.passed) > PASSED_KEPT:
        structure.passed.clear()
    for i, names in generated.undecided:
        key = (i, names, tuple(model._plain_values[n] for n in names))
        if key not in structure.passed:
            _check(model, model.graph(), checks[i])  # raises where it fails
            structure.passed.add(key)
    return []


def _check(model, graph: ComponentGraph, check: SizeCheck) -> None:
    """One check at this model's sizes; ConfigError naming the part, repeat or requirement that fails."""
    if check.kind == "part":
        path, quantity = check.path, check.quantity
        value = _substituted(check.expr, model._values, f"{model.name}: {quantity} of {path or 'the root'}")
        if value.is_Number and value < 0:
            raise ConfigError(f"{model.name}: {quantity} of {path or 'the root'} ({graph.graph.nodes[path]['component'].name}) is {value}, below zero; a count cannot be negative: check its declaration")
    elif check.kind == "repeat":
        count = _substituted(check.expr, model._values, f"{model.name}: the repeat of {check.path}")
        if count.is_Number and (not count.is_Integer or count < 0):
            raise ConfigError(f"{model.name}: {check.path} repeats {count} times at these sizes; a repeat is a whole number of 0 or more")
    else:
        bound = check.requirement
        # workload settings (an image's size) are known here too: a requirement on them is checked with the sizes
        known = model._known()
        holds = _substituted(bound.relation, known, f"{model.name}: {bound.requirement.text} in {bound.path or bound.component}")
        if holds.free_symbols:
            return  # stays symbolic: checked when an evaluation binds the workload (check_workload)
        if holds != sympy.true:
            raise ConfigError(failed_requirement(model.name, bound, known, graph.graph.nodes[bound.path]["args"]))


@derivation
def _reading_workload(graph: ComponentGraph, vocabulary) -> tuple[frozenset[sympy.Symbol], list[tuple[BoundRequirement, tuple[sympy.Symbol, ...]]]]:
    """The workload's symbols, and the graph's requirements that read any of them, each with its symbols."""
    workload = frozenset(vocabulary.symbols("workload"))
    return workload, [(r, tuple(sorted(r.relation.free_symbols, key=lambda s: s.name))) for r in graph.requirements if not workload.isdisjoint(r.relation.free_symbols)]


@derivation
def _left_over(relation: sympy.Basic, values: tuple[tuple[sympy.Symbol, sympy.Expr], ...], workload: frozenset[sympy.Symbol]) -> sympy.Basic | None:
    """What a requirement reading the workload leaves once the values of its other symbols are in; None where
    they settle it (or it reads more than the workload)."""
    left = relation.xreplace(dict(values))
    return left if left.free_symbols and left.free_symbols <= workload else None


def failed_requirement(name: str, bound: BoundRequirement, known: Mapping[sympy.Symbol, object], args: Mapping[str, object]) -> str:
    """The requirement as declared, with the value of each name in it: a size of the model's, or the number
    an argument is bound to (``n_groups`` where the requirement reads ``n_experts % n_groups``)."""
    values = {s.name: known[s] for s in bound.relation.free_symbols if s in known}
    for symbol in bound.requirement.relation.free_symbols:
        value = args.get(symbol.name)
        if symbol.name not in values and isinstance(value, sympy.Basic) and value.is_Number:
            values[symbol.name] = value
    got = f" ({', '.join(f'{k}={v}' for k, v in sorted(values.items()))})" if values else ""
    return f"{name}: {bound.requirement.text} does not hold{got} in {bound.path or bound.component}: {bound.requirement.why}"


def _substituted(expr: sympy.Basic, values: Mapping[sympy.Symbol, sympy.Expr], where: str) -> sympy.Basic:
    check_roots_and_logs(expr, where)  # sympy evaluates each nested log at the sizes: work that doubles per level
    try:
        return expr.xreplace(values)
    except ZeroDivisionError:
        raise ConfigError(f"{where}: division by zero at these sizes; give sizes that keep every divisor positive") from None
