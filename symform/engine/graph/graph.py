"""Instantiate declarations into a graph of component instances and sum it.

Nodes are slash paths (``layers/attn/q_proj``; the root is ``""``), edges carry
one multiplicity expression per quantity. A quantity's total is the sum over
leaves of the leaf's expression times the product of multiplicities on its
path; a breakdown groups the same sum by path prefix, so it always adds up to
the total.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import sympy

from ..language.declarations import QUANTITIES, SLOT, Arg, Component, Library, Requirement
from ..digraph import DiGraph
from ..budget import GRAPH_DEPTH, GRAPH_NODES, check_expansion
from ..algebra.multiplied import expand
from ..errors import BudgetError, DeclarationError
from ..algebra.multiplied import Polynomial, from_polynomial, polynomial, summed
from ..store.derivation import Identity, derivation
from ..language.safe_expr import substituted

Binding = sympy.Expr | str  # an expression, or a component name for a slot


@dataclass(frozen=True)
class BoundRequirement:
    path: str
    component: str
    requirement: Requirement
    relation: sympy.Basic


@dataclass
class ComponentGraph:
    graph: DiGraph
    requirements: list[BoundRequirement] = field(default_factory=list)

    def derivation_key(self) -> Identity:
        # a built graph does not change: what is derived from it (derivation) is keyed by the graph itself
        return Identity(self)

    def leaves(self) -> list[str]:
        return list(self._leaves())

    @derivation
    def _leaves(self) -> list[str]:
        return [n for n in self.graph if self.graph.nodes[n]["component"].is_primitive]

    def multiplicities(self, quantity: str, shards: Mapping[str, sympy.Expr] | None = None) -> dict[str, sympy.Expr]:
        """Each node's repeat count from the root; a part sharded over a parallel dimension
        (``shards[name]`` ranks) counts its share on one rank."""
        return dict(self._multiplicities(quantity, dict(shards or {})))

    @derivation
    def _order(self) -> list[str]:
        return self.graph.topological_order()

    @derivation
    def _multiplicities(self, quantity: str, shards: Mapping[str, sympy.Expr]) -> dict[str, sympy.Expr]:
        weight = {"": sympy.Integer(1)}
        for node in self._order():
            for child in self.graph.successors(node):
                edge = self.graph.edges[node, child]
                split = shards.get(edge["shard"], 1) if edge["shard"] else 1
                weight[child] = weight[node] * edge["repeat"][quantity] / split
        return weight

    def leaf_terms(self, quantity: str) -> dict[str, sympy.Expr]:
        """Each leaf's contribution to the whole model: multiplicity × own expression."""
        return dict(self._leaf_terms(quantity))

    @derivation
    def _leaf_terms(self, quantity: str) -> dict[str, sympy.Expr]:
        weight = self.multiplicities(quantity)
        # a part repeated zero times for this quantity (the loss for params) is not part of its breakdown
        return {n: weight[n] * self.graph.nodes[n]["quantities"][quantity] for n in self.leaves() if weight[n] != 0}

    def leading_rewrites(self) -> dict[sympy.Expr, sympy.Expr]:
        """What leading-order forms write in place of an expression, as the components declare it
        (``leading``), in the model's symbols: ceil(seq/chunk) → seq/chunk."""
        return dict(self._leading_rewrites())

    @derivation
    def _leading_rewrites(self) -> dict[sympy.Expr, sympy.Expr]:
        found: dict[sympy.Expr, sympy.Expr] = {}
        for node in self.graph.nodes.values():
            component = node["component"]
            if component.leading:
                local = {component.arg(k).symbol: v for k, v in node["args"].items() if not component.arg(k).is_slot}
                found.update({k.xreplace(local): v.xreplace(local) for k, v in component.leading.items()})
        return found

    @derivation
    def total(self, quantity: str) -> sympy.Expr:
        return _multiplied_sum(self.leaf_terms(quantity).values(), f"the model's {quantity}")

    def breakdown(self, quantity: str, depth: int | None = None) -> dict[str, sympy.Expr]:
        """Sums by path prefix of at most ``depth`` segments (all the way down when None)."""
        return dict(self._breakdown(quantity, depth))

    @derivation
    def _breakdown(self, quantity: str, depth: int | None) -> dict[str, sympy.Expr]:
        groups: dict[str, list[sympy.Expr]] = {}
        for path, term in self.leaf_terms(quantity).items():
            key = path if depth is None else "/".join(path.split("/")[:depth])
            groups.setdefault(key, []).append(term)
        return {k: _multiplied_sum(v, f"{k or 'the model'}'s {quantity}") for k, v in groups.items()}


def build_graph(
    library: Library,
    root: str,
    bindings: Mapping[str, Binding],
    *,
    assume: str | None = None,
) -> ComponentGraph:
    """Instantiate ``root`` with its arguments bound, applying an assumption set if named."""
    result = ComponentGraph(DiGraph())
    component = root_component(library, root, bindings)
    check_slot_sizes(library, root, component, bindings)
    args = bind_arguments(library, component, dict(bindings), where=f"model ({root})")
    _instantiate(library, component, "", args, assume, result, ())
    return result


def root_component(library: Library, root: str, given: Mapping[str, object]) -> Component:
    """The root as a model instantiates it: its own arguments, then those of the component each of its slots
    holds, where a part hands that slot the root's arguments (pass = true), that the root lacks and the part
    does not bind: the ones without a default, and the others ``given`` sets. A language model's optional
    tower is such a slot: the family that puts a tower there binds the tower's sizes as the model's own."""
    component = library[root]
    own = set(component.arg_names)
    added: dict[str, Arg] = {}
    for part in component.parts:
        if not (part.passes and part.use.startswith(SLOT)):
            continue
        chosen = given.get(part.use[1:], component.arg(part.use[1:]).default)
        if not isinstance(chosen, str):
            continue  # not a component's name: bind_arguments says so
        for arg in library[chosen.removeprefix(SLOT)].args:
            if arg.name not in own and arg.name not in part.bindings and (arg.default is None or arg.name in given):
                added.setdefault(arg.name, arg)
    return replace(component, args=component.args + tuple(added.values())) if added else component


def check_slot_sizes(library: Library, root: str, component: Component, given: Mapping[str, object]) -> None:
    """A size the root takes for a slot's component (a tower's width) and nothing binds: name the slot that asks."""
    own = set(library[root].arg_names)
    missing = [a.name for a in component.args if a.name not in own and a.name not in given and a.default is None]
    if missing:
        slots = [p.use[1:] for p in component.parts if p.passes and p.use.startswith(SLOT)]
        chosen = {s: given.get(s, component.arg(s).default) for s in slots}
        asking = next((f"{s} = {c}" for s, c in chosen.items() if isinstance(c, str) and missing[0] in library[c.removeprefix(SLOT)].arg_names), "a slot's component")
        raise DeclarationError(
            f"model ({root}): {asking} needs {', '.join(missing)}, which this model does not bind; give "
            f"{'a value for it' if len(missing) == 1 else 'values for them'} too, or leave the slot as it was"
        )


def bind_arguments(library: Library, component: Component, given: dict[str, Binding], *, where: str) -> dict[str, Binding]:
    extra = sorted(set(given) - set(component.arg_names))
    if extra:
        raise DeclarationError(f"{where}: {component.name} has no argument {extra[0]!r}; it takes {', '.join(component.arg_names)}")
    args: dict[str, Binding] = {}
    for arg in component.args:
        if arg.name in given:
            value = given[arg.name]
        elif arg.default is None:
            raise DeclarationError(f"{where}: missing argument {arg.name!r} of {component.name}; give a value for it")
        else:
            value = arg.default
        if arg.is_slot:
            if not isinstance(value, str):
                raise DeclarationError(f"{where}: argument {arg.name!r} of {component.name} takes a component name")
            value = value.removeprefix(SLOT)
            _check_kind(library, component, arg.name, arg.default, library[value], where)
        elif isinstance(value, str):
            raise DeclarationError(f"{where}: argument {arg.name!r} of {component.name} takes an expression, not the component {value!r}")
        args[arg.name] = value
    return _resolve_defaults(component, args, given, where)


def _check_kind(library: Library, component: Component, slot: str, default: str | None, chosen: Component, where: str) -> None:
    """A slot holds a component of its default's kind: an MLP cannot stand where attention goes. A default
    that declares no kind makes a general slot (a residual block's mixer: Mamba-2, attention or an MLP)."""
    if default is None or default == chosen.name:
        return
    expected = library[default].kind
    if expected is not None and chosen.kind != expected:
        raise DeclarationError(
            f"{where}: slot {slot!r} of {component.name} takes a component of kind {expected} (like {default}); "
            f"{chosen.name} is of kind {chosen.kind or 'none'}"
        )


def _check_switches(component: Component, args: Mapping[str, Binding], path: str) -> None:
    for name in component.switches:
        value = args.get(name)
        if isinstance(value, sympy.Basic) and value.is_Number and value not in (0, 1):
            raise DeclarationError(f"{path or 'model'} ({component.name}): {name} is {value}, but it is a switch: give 0 or 1")


def _check_repeat(part_name: str, repeat: Mapping[str, sympy.Expr], path: str) -> None:
    for count in repeat.values():
        if count.is_Number and (not count.is_Integer or count < 0):
            raise DeclarationError(f"{path or 'model'}: part {part_name!r} repeats {count} times at these sizes; a repeat is a whole number of 0 or more")


def _resolve_defaults(component: Component, args: dict[str, Binding], given: Mapping[str, Binding], where: str) -> dict[str, Binding]:
    """Defaults may use other arguments (span = min(seq, window)): each is substituted once, in dependency order."""
    names = {a.symbol: a.name for a in component.args if not a.is_slot}
    resolved: dict[str, Binding] = {n: v for n, v in args.items() if n in given or component.arg(n).is_slot}

    def resolve(name: str, stack: tuple[str, ...]) -> Binding:
        if name not in resolved:
            if name in stack:
                raise DeclarationError(f"{where}: the defaults of {component.name}'s arguments refer to each other in a cycle; give one of them a value")
            default = args[name]
            uses = {s: resolve(names[s], stack + (name,)) for s in default.free_symbols if s in names}
            resolved[name] = default.xreplace(uses)
        return resolved[name]

    return {name: resolve(name, ()) for name in args}


def _instantiate(
    library: Library,
    component: Component,
    path: str,
    args: dict[str, Binding],
    assume: str | None,
    out: ComponentGraph,
    stack: tuple[str, ...],
    rebind: Mapping[sympy.Symbol, sympy.Expr] | None = None,
) -> None:
    if component.name in stack:
        chain = " -> ".join(stack[stack.index(component.name) :] + (component.name,))
        raise DeclarationError(f"components use each other in a cycle ({chain}); a component cannot contain itself")
    if len(stack) >= GRAPH_DEPTH:
        raise BudgetError(
            f"components nest over {GRAPH_DEPTH} levels deep at {path}, past symform's budget (symform.engine.budget.GRAPH_DEPTH); flatten the declarations"
        )
    if out.graph.number_of_nodes() >= GRAPH_NODES:
        raise BudgetError(
            f"the model has over {GRAPH_NODES:,} component instances, past symform's budget (symform.engine.budget.GRAPH_NODES); "
            "repeat a part (repeat = \"n\") instead of declaring many copies"
        )
    local = {component.arg(name).symbol: value for name, value in args.items() if not component.arg(name).is_slot}
    assumed = assumed_sizes(component, local, assume)
    local.update({component.arg(k).symbol: v for k, v in assumed.items()})
    args = {**args, **{s.name: v for s, v in local.items()}}
    _check_switches(component, args, path)
    moved = _rebound(rebind)
    out.graph.add_node(path, component=component, args={k: moved(v) for k, v in args.items()}, quantities={}, assumed=assumed, workload=dict(rebind or {}))
    own = _bound_declaration(component, args, local)
    for req, relation in zip(component.requirements, own.requirements):
        out.requirements.append(BoundRequirement(path, component.name, req, moved(relation)))
    out.graph.nodes[path]["saved_when"] = {k: moved(v) for k, v in own.saved_when.items()}
    if component.tensor_reductions is not None:  # a layer's whole number, no argument in it
        out.graph.nodes[path]["tensor_reductions"] = component.tensor_reductions
    if component.is_primitive:
        out.graph.nodes[path]["quantities"] = {k: moved(v) for k, v in own.quantities.items()}
        out.graph.nodes[path]["frozen"] = {k: moved(v) for k, v in own.frozen.items()}
        out.graph.nodes[path]["gemm"] = {k: moved(v) for k, v in own.gemm.items()}
        out.graph.nodes[path]["backward_peak"] = moved(own.backward_peak)
        return
    for i, part in enumerate(component.parts):
        repeat = {k: moved(v) for k, v in own.repeat(i).items()}
        _check_repeat(part.name, repeat, path)
        if all(r == 0 for r in repeat.values()):
            continue
        child_path = f"{path}/{part.name}" if path else part.name
        callee = library[_resolve(part.use, args)]
        given = own.bindings(i)
        if part.passes:
            given.update({a.name: args[a.name] for a in callee.args if a.name not in given and a.name in args})
        child_args = bind_arguments(library, callee, given, where=f"{child_path or 'model'}")
        out.graph.add_edge(path, child_path, repeat=repeat, shard=part.shard, shares_input=part.shares_input)
        _instantiate(library, callee, child_path, child_args, assume, out, stack + (component.name,), _composed(rebind, part.workload, local))


def _composed(outer: Mapping[sympy.Symbol, sympy.Expr] | None, inner: Mapping[sympy.Symbol, sympy.Expr], local: Mapping[sympy.Symbol, Binding]) -> Mapping[sympy.Symbol, sympy.Expr] | None:
    """What a part's subtree reads for each workload setting: the part's own `workload` table (in the caller's
    names, so under the caller's rebinding too), over the caller's."""
    if not inner:
        return outer
    moved = _rebound(outer)
    return {**(outer or {}), **{k: moved(substituted(v, local)) for k, v in inner.items()}}


def _rebound(rebind: Mapping[sympy.Symbol, sympy.Expr] | None):
    """A substitution of the rebound workload settings (the identity where there are none)."""
    if not rebind:
        return lambda value: value
    return lambda value: value.xreplace(rebind) if isinstance(value, sympy.Basic) else value


class _BoundDeclaration:
    """A component's own expressions with its arguments in: what an instance adds to the graph besides its
    parts' instances. A part's repeat and bindings are worked out when an instance first reaches that part."""

    def __init__(self, component: Component, args: Mapping[str, Binding], local: Mapping[sympy.Symbol, Binding]):
        # a size bound to itself needs no substitution: substituting it would rebuild (and compare the
        # arguments of) every Min and Max around it again
        local = {s: v for s, v in local.items() if s != v}
        self.component, self._args, self._local = component, args, local  # component held: the memo's key names it by id
        self.requirements = tuple(req.relation.xreplace(local) for req in component.requirements)
        self.saved_when = {m: substituted(e, local) for m, e in component.saved_when.items()}
        if component.is_primitive:
            self.quantities = {q: substituted(e, local) for q, e in component.quantities.items()}
            self.frozen = {q: substituted(e, local) for q, e in component.frozen.items()}
            self.gemm = {s: substituted(e, local) for s, e in component.gemm.items()}
            self.backward_peak = substituted(component.backward_peak, local)
        self._repeats: dict[int, dict[str, sympy.Expr]] = {}
        self._bindings: dict[int, dict[str, Binding]] = {}

    def repeat(self, i: int) -> dict[str, sympy.Expr]:
        if i not in self._repeats:
            self._repeats[i] = _repeats(self.component.parts[i], self._local)
        return dict(self._repeats[i])

    def bindings(self, i: int) -> dict[str, Binding]:
        if i not in self._bindings:
            args, local = self._args, self._local
            self._bindings[i] = {k: (_resolve(v, args) if isinstance(v, str) else substituted(v, local)) for k, v in self.component.parts[i].bindings.items()}
        return dict(self._bindings[i])


# A component bound to the same arguments gives the same expressions wherever it sits (a model's dense and
# expert layers share their attention; a model and its assumed form share every part no assumption touches;
# models of one family differ in sizes, which are symbols here): substituting again would rebuild every Min
# and Max in them, comparing their arguments each time. forget_instances() clears it.
_BOUND: dict[tuple, _BoundDeclaration] = {}
_BOUND_KEPT = 8192


def forget_instances() -> None:
    _BOUND.clear()
    _TERMS.clear()


# A leaf's term (its multiplicity times its expression) multiplied out, as monomials: the same in a model's
# totals and breakdowns, in its assumed form where no assumption reaches the leaf, and in every model of its family.
_TERMS: dict[sympy.Expr, Polynomial | None] = {}


def _multiplied_sum(terms: Iterable[sympy.Expr], what: str) -> sympy.Expr:
    """sympy.expand of the sum of ``terms`` (within the budget), each term's monomials found once."""
    terms = list(terms)
    whole = sympy.Add(*terms)
    check_expansion(whole, what)
    polys = [_term_polynomial(t) for t in terms]
    if any(p is None for p in polys):
        return expand(whole, what)
    return from_polynomial(summed(polys))


def _term_polynomial(term: sympy.Expr) -> Polynomial | None:
    if term not in _TERMS:
        if len(_TERMS) >= _BOUND_KEPT:
            _TERMS.clear()
        _TERMS[term] = polynomial(term)
    return _TERMS[term]


def _bound_declaration(component: Component, args: Mapping[str, Binding], local: Mapping[sympy.Symbol, Binding]) -> _BoundDeclaration:
    key = (id(component), frozenset(args.items()), frozenset(local.items()))
    found = _BOUND.get(key)
    if found is None or found.component is not component:
        found = _BoundDeclaration(component, args, local)
        if len(_BOUND) >= _BOUND_KEPT:
            _BOUND.clear()
        _BOUND[key] = found
    return found


def _repeats(part, local: Mapping[sympy.Symbol, Binding]) -> dict[str, sympy.Expr]:
    """A part's repeat per quantity with the enclosing arguments in, multiplied out once per distinct count
    (most parts repeat the same count for every quantity)."""
    done: dict[sympy.Expr, sympy.Expr] = {}
    for count in set(part.repeat.values()):
        done[count] = expand(count.xreplace(local), f"the repeat of {part.name}")
    return {q: done[part.repeat[q]] for q in QUANTITIES}


def assumption_names(assume: str | None) -> list[str]:
    """``"grouped,standard"``: several sets, the first one a component declares applying to it."""
    return [a.strip() for a in (assume or "").split(",") if a.strip()]


def assumed_sizes(component: Component, local: Mapping[sympy.Symbol, Binding], assume: str | None) -> dict[str, sympy.Expr]:
    """What the first named set this component declares puts in place of its sizes. An assumption is about a
    model's size (d_ff = 8/3·d_model), so it applies only where the argument is that size itself: an expert
    whose d_ff is bound to d_ff_expert keeps its own width."""
    chosen = next((component.assumptions[a] for a in assumption_names(assume) if a in component.assumptions), {})
    applies = {k: v for k, v in chosen.items() if getattr(local.get(component.arg(k).symbol), "name", None) == k}
    return {k: v.xreplace(local) for k, v in applies.items()}


def introduced_ratios(graph: "ComponentGraph", values: Mapping[sympy.Symbol, sympy.Expr], ratios: frozenset[sympy.Symbol]) -> dict[sympy.Symbol, sympy.Rational]:
    """The ratios assumption sets introduce (G in d_ff_expert = d_ff/G), each at the value that makes its
    assumption exact at the sizes ``values``, found where a set would apply in the unassumed ``graph``; a
    ratio whose sizes have no value stays without one."""
    found: dict[sympy.Symbol, sympy.Rational] = {}
    for node in graph.graph.nodes.values():
        component = node["component"]
        local = {component.arg(k).symbol: v for k, v in node["args"].items() if not component.arg(k).is_slot}
        for subs in component.assumptions.values():
            for name, expr in subs.items():
                unknown = (expr.free_symbols & ratios) - set(found)
                size = local.get(component.arg(name).symbol)
                if len(unknown) != 1 or getattr(size, "name", None) != name or size not in values:
                    continue
                (ratio,) = unknown
                at = expr.xreplace(local).xreplace(values)
                solved = _solved_simply(at, values[size], ratio)
                if solved is None:
                    solved = [r for r in sympy.solve(sympy.Eq(at, values[size]), ratio) if r.is_Rational and r > 0]
                if len(solved) == 1:
                    found[ratio] = solved[0]
    return found


def _solved_simply(at: sympy.Expr, value: sympy.Expr, ratio: sympy.Symbol) -> list[sympy.Rational] | None:
    """The positive rational solutions of at = value for the ratio where ``at`` is c·ratio or c/ratio (an
    assumption's d_ff/G), as sympy.solve finds them; None for any other form (sympy.solve's to find)."""
    poly = polynomial(at)
    if poly is None or len(poly) != 1 or not value.is_Rational:
        return None
    ((monomial, c),) = poly.items()
    if monomial not in (frozenset({(ratio, 1)}), frozenset({(ratio, -1)})):
        return None
    if next(iter(monomial))[1] == 1:
        r = sympy.Rational(value) / sympy.Rational(c.numerator, c.denominator)
    elif value == 0:
        return []
    else:
        r = sympy.Rational(c.numerator, c.denominator) / sympy.Rational(value)
    return [r] if r > 0 else []


def _resolve(use: str, args: Mapping[str, Binding]) -> str:
    """A part's component: a name, ``@slot`` of the enclosing component, or ``@name`` of a component."""
    if use.startswith(SLOT):
        value = args.get(use[1:])
        if isinstance(value, str):
            return value
        return use[1:]
    return use
