"""Closed forms grouped the way the model is built: one block per layer kind, each a repeat times one instance.

The graph already knows how a model is put together: a stack repeats its dense
layers ``n_dense_layers`` times and its expert layers ``n_layers -
n_dense_layers`` times. Expanding the whole sum cancels those repeats against
each other (``n·x − n_dense·x``); here each block keeps its repeat as a factor,
``(n − n_dense)·(…)``, and lists its parts (attention, MLP, norms) inside.

Blocks are found generically: from the root down, a part that is used once and
whose own parts repeat by an expression (a stack) is looked through; any other
part is a block. Encoding artefacts go: a part made optional by ``min(count,
1)`` is present whenever the count is (a zero count removes the part outright),
so ``Min(1, n_shared_experts)`` is 1 at any model that has that symbol.

The leading order of a structure keeps, in every block, the terms of the
highest degree in the large symbols, the vocabulary and the sequence counting
as ones (an embedding is a V×d matrix; attention's s²·d stands next to the
projections' s·d²); blocks with none are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

import sympy

from ..language.declarations import QUANTITIES
from .model import _IDENTIFIER, Model, derived_quantities, normalise_quantity
from ..store.derivation import derivation
from ..algebra.multiplied import degree_in, from_polynomial, polynomial
from ..language.safe_expr import parse


@dataclass(frozen=True)
class Block:
    """``repeat`` instances of ``expr``; ``parts`` (one level down) sum to ``expr``."""

    name: str
    repeat: sympy.Expr
    expr: sympy.Expr
    parts: tuple["Block", ...] = ()

    @property
    def total(self) -> sympy.Expr:
        return self.repeat * self.expr


@dataclass(frozen=True)
class Structure:
    quantity: str
    model: str
    assumptions: str | None
    leading: bool
    large: tuple[str, ...]
    blocks: tuple[Block, ...]

    @property
    def expr(self) -> sympy.Expr:
        return sympy.Add(*(b.total for b in self.blocks))


def without_flags(expr: sympy.Expr, values: Mapping[str, int]) -> sympy.Expr:
    """``Min(1, c)`` → 1 for a count c the model has: how an optional part is encoded, not a formula. A count
    bound to 0 is no symbol any more (the model removes the part), so a count left a symbol, with a value or
    without one, is taken as present: the form is that of the models that have the part. ``Min(1, e)`` of an
    expression e whose every symbol has a value is 1 where e is at least 1 (a windowed layer's Min(seq, w − 1)
    cached tokens, at one token)."""

    def is_flag(e: sympy.Basic) -> bool:
        if not isinstance(e, sympy.Min) or len(e.args) != 2 or sympy.S.One not in e.args:
            return False
        other = next(a for a in e.args if a != 1)
        if isinstance(other, sympy.Symbol):
            return values.get(other.name, 1) >= 1
        at = other.xreplace({s: values[s.name] for s in other.free_symbols if s.name in values})
        return bool(other.free_symbols) and not at.free_symbols and bool(at >= 1)

    at = {s: sympy.sympify(values[s.name]) for s in expr.free_symbols if s.name in values}
    return branches_in_force(expr.replace(is_flag, lambda e: sympy.S.One), at)


def branches_in_force(expr: sympy.Expr, at: Mapping[sympy.Symbol, object]) -> sympy.Expr:
    """Each conditional (``a if c else b``) whose condition the values ``at`` settle written as the branch in
    force there (an optional layer kind the model has, the flags of its own sizes); the others as they are."""
    if not at or not expr.has(sympy.Piecewise):
        return expr

    def in_force(e: sympy.Piecewise) -> sympy.Expr:
        for branch, condition in e.args:
            settled = condition.xreplace(at) if condition.free_symbols & at.keys() else condition
            if settled is sympy.true:
                return branch
            if settled is not sympy.false:
                return e
        return e

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), in_force)


def structure(model: Model, quantity: str, *, assume: str | None = None, leading: bool = False, large: Iterable[str] | None = None, parts: bool = True) -> Structure:
    """The quantity as a sum of blocks, each ``repeat · (one instance)``, optionally to leading order; with
    ``parts=False``, the blocks without their parts (a sum of blocks reads none, and each part's own repeat and
    instance is much of the work)."""
    return _structure(model, normalise_quantity(quantity), assume, leading, tuple(large) if large is not None else None, parts)


@derivation  # a derivation, its block forms and its N_active form ask for the same structures again and again
def _structure(model: Model, quantity: str, assume: str | None, leading: bool, large: tuple[str, ...] | None, parts: bool) -> Structure:
    blocks = list(_exact_blocks(model, quantity, assume, parts))
    vocabulary = model.vocabulary
    large_symbols = [vocabulary[n] for n in large] if large is not None else block_large(model, within=sympy.Add(*(b.total for b in blocks)))
    if leading:
        rewrites = model.leading_rewrites(assume=assume)
        if any(b.expr.has(k) for b in blocks for k in rewrites):  # chunks scale with the sequence (derive's _in_chunks)
            blocks = leading_blocks(blocks, block_large(model), rewrites)
        blocks = leading_blocks(blocks, large_symbols, rewrites)
    return Structure(quantity, model.name, assume, leading, tuple(s.name for s in large_symbols), tuple(blocks))


@derivation  # shared by the exact structure and every leading order of it
def _exact_blocks(model: Model, quantity: str, assume: str | None, parts: bool) -> tuple[Block, ...]:
    graph = model.graph(assume=assume)
    finish = _finisher(model)
    found = (_block(graph, model, node, quantity, finish, with_parts=parts) for node in _block_nodes(graph))
    return tuple(merged([b for b in found if b.expr != 0 and not _none_here(b.repeat, model)]))


def part_block(model: Model, quantity: str, path: str, *, assume: str | None = None) -> Block:
    """The component at ``path`` (``layers/moe/attn``) as a block: its repeat in the model, one instance, and
    that instance's parts one level down (an attention's projections, each its own matrix)."""
    from ..errors import EvaluationError

    graph = model.graph(assume=assume)
    if path not in graph.graph.nodes or path == "":
        tops = ", ".join(b for b in _block_nodes(graph))
        raise EvaluationError(f"{model.name} has no part {path!r}; its blocks are {tops} (add /NAME for a part inside one)")
    return _block(graph, model, path, normalise_quantity(quantity), _finisher(model), with_parts=True)


def block_large(model: Model, *, within: sympy.Expr | None = None) -> list[sympy.Symbol]:
    """The widths, the vocabulary (an embedding is a V×d matrix), the sequence (attention's s² next to the
    projections' s·d²) and its chunks: what a block form keeps at leading order; with ``within``, only those it holds
    (the others change no degree, and a reader looks for the symbols of this model)."""
    v = model.vocabulary
    # where the sequence is large so is what a declared leading form divides it into (seq/chunk chunks: a
    # chunk of 64 to 256 tokens is a head's width, and the sequence many chunks)
    tiles = {s for stand_in in model.leading_rewrites().values() for s in stand_in.free_symbols}
    # an encoder-decoder's encoder reads the source's length as its decoder reads seq
    lengths = {v[name] for name in ("seq", "source_seq") if name in v}
    candidates = v.large | {v["vocab"]} | lengths | tiles
    if within is not None:
        candidates &= within.free_symbols
    return sorted(candidates, key=lambda s: s.name)


def _none_here(repeat: sympy.Expr, model: Model) -> bool:
    """A layer kind this model has none of (global layers when every layer is local): not one of its blocks."""
    values = {model.vocabulary[k]: v for k, v in model.values.items()}
    return repeat.free_symbols <= set(values) and repeat.xreplace(values) == 0


# --- which nodes are blocks ----------------------------------------------------------------


def _block_nodes(graph) -> list[str]:
    """Top-level parts, looking through parts used once whose own parts repeat by an expression (stacks)."""
    g = graph.graph
    found: list[str] = []

    def visit(node: str) -> None:
        for child in g.successors(node):
            repeats = set(g.edges[node, child]["repeat"].values()) - {sympy.S.Zero}
            is_stack = repeats == {sympy.S.One} and any(
                any(r.free_symbols for r in g.edges[child, c]["repeat"].values()) for c in g.successors(child)
            )
            visit(child) if is_stack else found.append(child)

    visit("")
    return found


# --- one block -------------------------------------------------------------------------------


@derivation  # a derived quantity's blocks (training FLOPs) read the declared ones' totals that their own blocks read
def _relative_total(graph, node: str, quantity: str) -> sympy.Expr:
    """A node's quantity for one instance of it: its leaves times the repeats below it."""
    g = graph.graph
    total, stack = sympy.S.Zero, [(node, sympy.S.One)]
    while stack:
        here, weight = stack.pop()
        if g.nodes[here]["component"].is_primitive:
            total += weight * g.nodes[here]["quantities"][quantity]
            continue
        stack += [(c, weight * g.edges[here, c]["repeat"][quantity]) for c in g.successors(here)]
    return total


def _combined(graph, node: str, quantity: str, weights: Mapping[str, sympy.Expr], vocabulary) -> sympy.Expr:
    """The quantity of a node with ``weights[q]`` instances counted for each declared quantity q
    (a derived quantity is linear in the declared ones, so it splits over blocks too)."""
    if quantity in QUANTITIES:
        return weights[quantity] * _relative_total(graph, node, quantity)
    text = derived_quantities()[quantity].expression
    used = set(_IDENTIFIER.findall(text))
    names = {q: weights[q] * _relative_total(graph, node, q) for q in QUANTITIES if q in used}
    symbols = {n: vocabulary[n] for n in vocabulary.names()}
    return parse(text, {**symbols, **names})


def _block(graph, model: Model, node: str, quantity: str, finish, *, with_parts: bool, parent: str | None = None) -> Block:
    g = graph.graph
    if parent is None:
        weights = _weights(graph, node)
        name = node
    else:
        weights = {q: g.edges[parent, node]["repeat"][q] for q in QUANTITIES}
        name = node.rsplit("/", 1)[-1]
    total = finish(_combined(graph, node, quantity, weights, model.vocabulary), expand=False)
    repeat = _common_repeat(weights, total, finish)
    inner = finish(_cancelled(total / repeat)) if repeat != 1 else finish(total)
    parts: tuple[Block, ...] = ()
    if with_parts and not g.nodes[node]["component"].is_primitive:
        found = [_block(graph, model, child, quantity, finish, with_parts=False, parent=node) for child in g.successors(node)]
        parts = tuple(p for p in found if p.expr != 0)
    return Block(name, repeat, inner, parts)


def _weights(graph, node: str) -> dict[str, sympy.Expr]:
    return {q: repeats[node] for q, repeats in _repeats(graph).items()}


@derivation  # read for every block of every structure of the graph: not a copy of every node's repeat each time
def _repeats(graph) -> dict[str, dict[str, sympy.Expr]]:
    """Each declared quantity's repeat of every node from the root."""
    return {q: graph.multiplicities(q) for q in QUANTITIES}


def _common_repeat(weights: Mapping[str, sympy.Expr], total: sympy.Expr, finish) -> sympy.Expr:
    """The repeat every quantity shares (a layer kind's count), when it divides the total; 1 otherwise."""
    candidates = {finish(w) for w in set(weights.values())} - {sympy.S.Zero}
    if len(candidates) != 1:
        return sympy.S.One
    (repeat,) = candidates
    if repeat == 1 or not repeat.free_symbols or total == 0:
        return sympy.S.One
    _, denominator = sympy.fraction(_cancelled(total / repeat))
    return sympy.factor(repeat) if not (denominator.free_symbols & repeat.free_symbols) else sympy.S.One


@derivation  # a block's repeat is found by the quotient that then gives its one instance
def _cancelled(expr: sympy.Expr) -> sympy.Expr:
    return sympy.cancel(expr)


def _finisher(model: Model):
    conventions, values = model.conventions, model.values

    def finish(expr: sympy.Expr, expand: bool = True) -> sympy.Expr:
        expr = without_flags(sympy.sympify(expr).xreplace(conventions), values)
        return sympy.expand(expr) if expand else expr

    return finish


# --- leading order -----------------------------------------------------------------------------


def _degree_terms(expr: sympy.Expr, large: list[sympy.Symbol]) -> dict[sympy.Expr, sympy.Expr]:
    """``expr``'s terms grouped by their total degree in ``large``."""
    return dict(_by_degree(expr, tuple(large)))


@derivation  # a leading order asks it of every block twice, and each structure of a model of the same blocks
def _by_degree(expr: sympy.Expr, large: tuple[sympy.Symbol, ...]) -> dict[sympy.Expr, sympy.Expr]:
    fast = _monomials_by_degree(expr, frozenset(large))
    if fast is not None:
        return fast
    scale = sympy.Dummy("lambda", positive=True)
    out: dict[sympy.Expr, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(expr.xreplace({s: scale * s for s in large}))):
        _, power = term.as_coeff_exponent(scale)
        out[power] = out.get(power, sympy.S.Zero) + term.xreplace({scale: 1})
    return out


def _monomials_by_degree(expr: sympy.Expr, large: frozenset[sympy.Symbol]) -> dict[sympy.Expr, sympy.Expr] | None:
    """_by_degree's result read off the monomials (sympy.expand's terms, multiplied.py), where each is a product
    of powers of symbols and of functions free of the large symbols; None elsewhere (and for 0)."""
    poly = polynomial(expr)
    if not poly:
        return None
    groups: dict[int, dict] = {}
    for monomial, coefficient in poly.items():
        degree = degree_in(monomial, large)
        if degree is None:
            return None
        groups.setdefault(degree, {})[monomial] = coefficient
    return {sympy.Integer(d): from_polynomial(terms) for d, terms in groups.items()}


def merged(blocks: list[Block]) -> list[Block]:
    """Blocks whose one instance is the same expression (local and global layers' parameters) as one block
    with the repeats added: n·(…) rather than n_local·(…) + (n − n_local)·(…)."""
    out: list[Block] = []
    for block in blocks:
        same = next((i for i, b in enumerate(out) if b.expr == block.expr and block.expr.free_symbols), None)
        if same is None:
            out.append(block)
        else:
            first = out[same]
            out[same] = replace(first, name=f"{first.name}, {block.name}", repeat=sympy.factor(first.repeat + block.repeat))
    return out


def by_layer_kind(blocks: Iterable[Block]) -> list[Block]:
    """Blocks with a repeat in symbols (a layer kind, n or n − n_dense of them) kept apart, the blocks used a fixed
    number of times (embedding, head, norms; a bare component's parts) added into one: a sum to print."""
    out: list[Block] = []
    fixed: int | None = None
    for block in blocks:
        if block.repeat.free_symbols:
            out.append(block)
        elif fixed is None:
            fixed = len(out)
            out.append(Block(block.name, sympy.S.One, sympy.expand(block.total)))
        else:
            first = out[fixed]
            out[fixed] = Block(f"{first.name}, {block.name}", sympy.S.One, sympy.expand(first.expr + block.total))
    return out


def leading_blocks(blocks: list[Block], large: list[sympy.Symbol], rewrites: Mapping[sympy.Expr, sympy.Expr] | None = None) -> list[Block]:
    """Every block's terms of the highest degree in ``large`` over all blocks, after the ``rewrites`` the
    components declare for leading order (``Model.leading_rewrites``); blocks with none left out."""
    if rewrites:
        blocks = [rewritten(b, rewrites) for b in blocks]
    degrees = [p for b in blocks for p in _degree_terms(b.expr, large) if b.expr != 0]
    if not degrees:
        return blocks
    top = max(degrees, key=lambda p: sympy.N(p))

    def keep(b: Block) -> Block:
        return replace(b, expr=_degree_terms(b.expr, large).get(top, sympy.S.Zero), parts=tuple(p for p in map(keep, b.parts) if p.expr != 0))

    return merged([k for k in map(keep, blocks) if k.expr != 0])


def rewritten(block: Block, rewrites: Mapping[sympy.Expr, sympy.Expr]) -> Block:
    """``block`` with its parts written as leading-order forms write them (ceil(seq/chunk) → seq/chunk)."""
    return replace(block, expr=in_stand_ins(block.expr, rewrites), parts=tuple(rewritten(p, rewrites) for p in block.parts))


def in_stand_ins(expr: sympy.Expr, rewrites: Mapping[sympy.Expr, sympy.Expr]) -> sympy.Expr:
    """``expr`` as leading-order forms write it: the ``rewrites`` made (ceil(seq/chunk) → seq/chunk), and, since a
    stand-in that is a ratio declares that ratio large (a sequence is many chunks), without the terms that are
    another term times a negative power of it (a cost once per sequence next to the same cost once per chunk: the
    first chunk's state that needs no gradient, -C·d_k·d_v per sequence beside 2·s·d_k·d_v)."""
    if not rewrites:
        return expr
    expr = sympy.expand(expr.xreplace(dict(rewrites)))
    for stand_in in rewrites.values():
        many, few = sympy.fraction(sympy.together(stand_in))
        if many.free_symbols and few.free_symbols and not many.free_symbols & few.free_symbols:
            expr = _without_fewer(expr, many.free_symbols, few.free_symbols)
    return expr


def _without_fewer(expr: sympy.Expr, many: set[sympy.Symbol], few: set[sympy.Symbol]) -> sympy.Expr:
    """The terms of ``expr`` less those that are another's times (few/many)^k, k > 0 (many/few is large)."""
    ratio, scale = sympy.Dummy("mu", positive=True), sympy.Dummy("lambda", positive=True)
    groups: dict[tuple, list[tuple[sympy.Expr, sympy.Expr]]] = {}
    for term in sympy.Add.make_args(expr):
        rest, own = term.as_independent(*many, *few, as_Add=False)
        if not all(_is_power_of_symbol(f) for f in sympy.Mul.make_args(own)):  # Min(seq, window): no monomial
            groups[(term,)] = [(sympy.S.Zero, term)]
            continue
        scaled = own.xreplace({s: ratio * scale * s for s in many} | {s: scale * s for s in few})
        power = scaled.as_coeff_exponent(ratio)[1]
        degree = scaled.xreplace({ratio: 1}).as_coeff_exponent(scale)[1]
        groups.setdefault((rest.as_coeff_Mul()[1], degree), []).append((power, term))
    kept = []
    for members in groups.values():
        top = max(p for p, _ in members)
        kept += [t for p, t in members if p == top]
    return sympy.Add(*kept)


def _is_power_of_symbol(factor: sympy.Expr) -> bool:
    base, exponent = factor.as_base_exp()
    return factor == 1 or (base.is_Symbol and exponent.is_Rational)


# --- in terms of N_active ------------------------------------------------------------------------


@dataclass(frozen=True)
class ActiveForm:
    """``quantity ≈ multiple·N_active + difference + attention``, every part at leading order in the widths.

    ``difference`` is what the multiple of N_active counts that the quantity does not (embedding lookups cost
    no FLOPs, so an untied model's forward FLOPs are 2·b·s·(N_active − V·d)); ``attention`` is the part that
    grows with the sequence (12·n·s·d per token for standard attention)."""

    quantity: str
    multiple: sympy.Expr
    active: sympy.Expr  # N_active (or N, see base) to leading order
    difference: sympy.Expr
    attention: sympy.Expr
    base: str = "active_params"  # params where the quantity holds every parameter (weights in memory)
    active_blocks: tuple[Block, ...] = ()  # ``active`` block by block, each repeat a factor
    # difference + attention by layer kind, each repeat a factor ((n − n_lin)·s²·…, not n·s²·… − n_lin·s²·…);
    # empty where the layer kinds' repeats cannot write it so
    rest_blocks: tuple[Block, ...] = ()

    @property
    def expr(self) -> sympy.Expr:
        return self.multiple * self.active + self.difference + self.attention

    @property
    def symbol_name(self) -> str:
        return "n_active_params" if self.base == "active_params" else "n_params"

    def with_symbol(self, n_active: sympy.Symbol) -> sympy.Expr:
        return self.multiple * n_active + self.difference + self.attention


def active_form(model: Model, quantity: str, *, assume: str | None = None, large: Iterable[str] | None = None) -> ActiveForm | None:
    """A FLOP quantity as a multiple of the active parameters plus the sequence-dependent attention term;
    None when the quantity is no such multiple (memory, traffic)."""
    quantity = normalise_quantity(quantity)
    v = model.vocabulary
    widths = [v[n] for n in large] if large is not None else sorted(v.large | {v["vocab"]}, key=lambda s: s.name)
    rewrites = model.leading_rewrites(assume=assume)
    exact = in_stand_ins(without_flags(model.expression(quantity, assume=assume).expr, model.values), rewrites)
    if rewrites:  # the sequence in chunks: those scale with it, and what is of lower degree then goes first
        exact = _leading_of(exact, block_large(model))  # (Mamba-2's pass between chunks, (s/C)²·P·N per head)
    seq = v["seq"]
    by_degree = _degree_terms(exact, [seq])  # a windowed span, Min(seq, window), counts as degree 0 in seq
    top = max(by_degree, key=lambda p: sympy.N(p))
    attention = _leading_of(by_degree.pop(top), widths) if len(by_degree) else sympy.S.Zero
    if not by_degree:
        return None
    linear = _leading_of(sympy.Add(*by_degree.values()), widths)
    values = {v[k]: x for k, x in {**model.values, **model.ratio_values}.items()}
    forms = []
    for base in ("active_params", "params"):  # FLOPs follow the active parameters, stored bytes all of them
        blocks = structure(model, base, assume=assume, leading=True, large=[s.name for s in widths], parts=False).blocks
        active = sympy.Add(*(b.total for b in blocks))
        multiple = _common_ratio(linear, sympy.expand(active), set(v.symbols("workload", "convention", "dtype")), values)
        if multiple is not None:
            forms.append(ActiveForm(quantity, multiple, active, sympy.expand(linear - multiple * active), attention, base, blocks))
    if not forms:
        return None
    form = min(forms, key=lambda f: len(sympy.Add.make_args(f.difference)) if f.difference != 0 else 0)
    kinds = structure(model, quantity, assume=assume, parts=False).blocks
    return replace(form, rest_blocks=tuple(merged(per_repeat(form.difference + form.attention, kinds) or [])))


def per_repeat(expr: sympy.Expr, blocks: Iterable[Block]) -> list[Block] | None:
    """``expr`` written with the ``blocks``' repeats as factors, Σ r_i·F_i + F_0 (a term n·x − n_lin·x is
    (n − n_lin)·x under repeats n_lin and n − n_lin), each F_i named after its block; None where ``expr`` is
    not linear in the repeats' counts or the repeats are no basis of them."""
    kinds: dict[sympy.Expr, str] = {}
    for b in blocks:
        if b.repeat.free_symbols:
            kinds.setdefault(b.repeat, b.name)
    repeats = list(kinds)
    counts = sorted(set().union(*(r.free_symbols for r in repeats)), key=lambda c: c.name) if repeats else []
    expr = sympy.expand(expr)
    if not repeats or len(counts) != len(repeats) or not all(_linear_in(t, counts) for t in [expr, *repeats]):
        return None
    if any(r.xreplace({c: 0 for c in counts}) != 0 for r in repeats):
        return None
    matrix = sympy.Matrix([[sympy.diff(r, c) for c in counts] for r in repeats])  # r_i = Σ_c a_ic·c
    if matrix.det() == 0:
        return None
    per_count = sympy.Matrix([sympy.diff(expr, c) for c in counts])  # expr's coefficient of each count c
    inner = matrix.T.solve(per_count)  # Σ_i a_ic·F_i = expr's coefficient of c
    out = [Block(kinds[r], r, sympy.expand(f)) for r, f in zip(repeats, inner) if sympy.expand(f) != 0]
    fixed = sympy.expand(expr.xreplace({c: 0 for c in counts}))
    return out + ([Block("", sympy.S.One, fixed)] if fixed != 0 else [])


def _linear_in(expr: sympy.Expr, counts: list[sympy.Symbol]) -> bool:
    try:
        return sympy.Poly(expr, *counts).total_degree() <= 1
    except sympy.PolynomialError:  # a count inside Min(·) or ceil(·)
        return False


def _leading_of(expr: sympy.Expr, large: list[sympy.Symbol]) -> sympy.Expr:
    terms = _degree_terms(expr, large)
    return terms[max(terms, key=lambda p: sympy.N(p))] if terms else sympy.S.Zero


def _common_ratio(expr: sympy.Expr, base: sympy.Expr, workload: set[sympy.Symbol], values: Mapping[sympy.Symbol, object]) -> sympy.Expr | None:
    """The workload-only factor that turns ``base``'s terms into ``expr``'s (2·b·s for forward FLOPs), chosen
    by the largest share of ``base`` at the model's sizes it holds for (the layers, not the embedding)."""
    own = {term.as_independent(*workload, as_Add=False)[0].as_coeff_Mul()[1]: term for term in sympy.Add.make_args(expr)}
    votes: dict[sympy.Expr, float] = {}
    for term in sympy.Add.make_args(base):
        key = term.as_coeff_Mul()[1]
        if key in own:
            ratio = sympy.cancel(own[key] / term)
            if ratio.free_symbols <= workload:
                size = term.xreplace(values)
                votes[ratio] = votes.get(ratio, 0.0) + (abs(float(size)) if not size.free_symbols else 1.0)
    return max(votes, key=votes.get) if votes else None


def default_assumptions(model: Model) -> str | None:
    """The family's declared default sets, where this model's components declare them; None for none."""
    names = [a.strip() for a in model.spec.assume.split(",") if a.strip()]
    return ",".join(names) if names and all(a in model.assumption_sets() for a in names) else None


def error_at(model: Model, quantity: str, expr: sympy.Expr, **workload: object) -> float | None:
    """``expr`` against the exact quantity at the model's sizes and the workload; None while symbols remain."""
    values = {model.vocabulary[k]: sympy.nsimplify(v) for k, v in {**model.values, **model.ratio_values, **workload}.items()}
    at = expr.xreplace(values)
    exact = model.expression(quantity).expr.xreplace(values)
    if at.free_symbols or exact.free_symbols or exact == 0:
        return None
    return float(sympy.Rational(at) / sympy.Rational(exact) - 1)
