"""Component graphs built from the bundled declarations, kept between runs.

Once its declarations are parsed (and those are kept: safe_expr), building a model's graph is most of what
loading it costs: every part's expressions have its arguments substituted in, and sympy evaluates every
sum, product, Min and Max again as it does (30-180 ms for the bundled presets on these machines, reading
one back 3-16 ms; benchmarks/README.md). A graph built from
symform's own declarations follows from its code, its bundled files, sympy's release, the root component,
the root's bindings and the assumption set alone, so it is kept (disk_cache: plain JSON, never code) under a
hash of those, and rebuilt from it node by node with sympy's constructors told not to evaluate (what was
kept is already what evaluating gave).

Every distinct sub-expression of a graph is written once, in a table whose entries name earlier entries
only: the layers of a model share most of their expressions, and the table is read front to back without
recursion. A graph is kept only where it rebuilds equal, node for node and tree for tree, to the one built;
what is read back is held to the budgets a build obeys, and anything amiss (a damaged, edited or foreign
entry, an unknown component or node type) is built again from the declarations: the cache only saves time.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Mapping

import networkx as nx
import sympy

from . import disk_cache
from .budget import GRAPH_NODES, NESTING_DEPTH
from .data import bundled_fingerprint
from .declarations import Component, Library, default_library
from .graph import Binding, BoundRequirement, ComponentGraph, build_graph
from .safe_expr import MAX_TREE_NODES, kept_leaf, kept_leaf_value, kept_node, kept_node_name, same_tree

FORMAT = 2
_MAX_ENTRIES = 64 * GRAPH_NODES  # distinct sub-expressions of one graph: the bundled presets have 300-900
_MAX_STORE_BYTES = 4 * 2**20
_MAP_DEPTH = 1  # a node's or edge's attribute is an expression, a name or a mapping of them: never mappings nested


def kept_graph(library: Library, root: str, bindings: Mapping[str, Binding], *, assume: str | None = None) -> ComponentGraph:
    """``build_graph(library, root, bindings, assume=assume)``, from the cache where an earlier run kept it."""
    key = _key(library, root, bindings, assume)
    if key is not None:
        graph = _recalled(key, library)
        if graph is not None:
            return graph
    graph = build_graph(library, root, bindings, assume=assume)
    if key is not None:
        _keep(key, graph, library)
    return graph


@cache
def _store() -> disk_cache.Store:
    # a graph takes 25-135 KB: some thirty structures fit, and reading the file stays a few milliseconds
    return disk_cache.Store("graphs", disk_cache.digest(str(FORMAT), bundled_fingerprint()), max_bytes=_MAX_STORE_BYTES)


def _key(library: Library, root: str, bindings: Mapping[str, Binding], assume: str | None) -> str | None:
    """What the build depends on besides the bundled files; None where it is not worth keeping (a user's own
    declarations, a binding that is not a plain expression over the vocabulary's symbols)."""
    if not disk_cache.enabled() or library is not default_library():
        return None
    writer = _Writer(library)
    try:
        given = sorted((name, value if isinstance(value, str) else writer.put(value)) for name, value in bindings.items())
    except _NotKept:
        return None
    return disk_cache.digest(json.dumps([root, assume, given, writer.table]))


class _NotKept(Exception):
    """An expression with something a kept table cannot hold (a symbol of no vocabulary name, a Float)."""


class _Writer:
    """Sub-expressions into one table, each distinct one once, after its arguments."""

    def __init__(self, library: Library):
        self.vocabulary = library.vocabulary
        self.table: list[list[Any]] = []
        self._index: dict[tuple[type, sympy.Basic], int] = {}

    def put(self, expr: object) -> int:
        if not isinstance(expr, sympy.Basic):
            raise _NotKept(type(expr).__name__)
        key = (type(expr), expr)
        found = self._index.get(key)
        if found is None:
            entry = self._entry(expr)
            found = self._index[key] = len(self.table)
            self.table.append(entry)
        return found

    def _entry(self, expr: sympy.Basic) -> list[Any]:
        if isinstance(expr, sympy.Symbol):
            entry = self.vocabulary.entries.get(expr.name)
            if entry is None or entry.symbol != expr:
                raise _NotKept(expr.name)
            return ["n", expr.name]
        leaf = kept_leaf(expr)
        if leaf is not None:
            return leaf
        name = kept_node_name(expr)
        if name is None:
            raise _NotKept(type(expr).__name__)
        return ["f", name, [self.put(a) for a in expr.args]]


# --- a graph as plain JSON ---------------------------------------------------------------------------


def _written(graph: ComponentGraph, writer: _Writer) -> dict[str, Any]:
    """Every node's and edge's attributes as the build set them, whatever they are: a component by name, text,
    None or a truth value as itself, a mapping by its entries, an expression by its table entry."""

    def value(v: Any) -> Any:
        if isinstance(v, Component):
            return ["component", v.name]
        if isinstance(v, str):
            return ["text", v]
        if v is None or isinstance(v, bool):
            return ["plain", v]
        if isinstance(v, Mapping):
            if not all(isinstance(k, str) for k in v):
                raise _NotKept("a mapping keyed by other than names")
            return ["map", {k: value(x) for k, x in v.items()}]
        return writer.put(v)  # an expression; _NotKept for anything else

    nodes = [[path, {k: value(v) for k, v in data.items()}] for path, data in graph.graph.nodes(data=True)]
    edges = [[a, b, {k: value(v) for k, v in data.items()}] for a, b, data in graph.graph.edges(data=True)]
    requirements = []
    for bound in graph.requirements:
        declared = graph.graph.nodes[bound.path]["component"].requirements
        index = next(i for i, r in enumerate(declared) if r is bound.requirement)
        requirements.append([bound.path, index, writer.put(bound.relation)])
    return {"table": writer.table, "nodes": nodes, "edges": edges, "requirements": requirements}


def _rebuilt_table(table: Any) -> list[sympy.Basic]:
    """Every entry's expression, front to back: an entry names only entries before it. Each is held to the
    bounds a parsed expression's kept tree is (its size as a tree, shared entries counted each time they
    occur, and its depth), so that no entry makes a tree that walking would take exponential time over."""
    if not isinstance(table, list) or len(table) > _MAX_ENTRIES:
        raise ValueError("table")
    vocabulary = default_library().vocabulary
    done: list[sympy.Basic] = []
    sizes: list[tuple[int, int]] = []  # (nodes as a tree, depth) of each entry
    for entry in table:
        kind = entry[0]
        if kind == "f":
            indices = entry[2]
            if not all(type(i) is int and 0 <= i < len(done) for i in indices):
                raise ValueError("an entry names one not yet read")
            size = (1 + sum(sizes[i][0] for i in indices), 1 + max((sizes[i][1] for i in indices), default=0))
            if size[0] > MAX_TREE_NODES or size[1] > NESTING_DEPTH:
                raise ValueError("an entry past the budget")
            done.append(kept_node(entry[1], [done[i] for i in indices]))
        else:
            size = (1, 1)
            done.append(vocabulary[entry[1]] if kind == "n" else kept_leaf_value(entry))
        sizes.append(size)
    return done


def _read(document: Any, library: Library) -> ComponentGraph:
    """The graph a kept document describes; ValueError, KeyError, TypeError or a SymformError where it is amiss."""
    table = _rebuilt_table(document["table"])

    def value(v: Any, depth: int = 0) -> Any:
        if type(v) is int:
            if not 0 <= v < len(table):
                raise ValueError("no such entry")
            return table[v]
        kind, content = v
        if kind == "component":
            return library[_text(content)]
        if kind == "text":
            return _text(content)
        if kind == "plain" and (content is None or type(content) is bool):
            return content
        if kind == "map" and isinstance(content, dict) and depth < _MAP_DEPTH:
            return {_text(k): value(x, depth + 1) for k, x in content.items()}
        raise ValueError("not a kept value")

    def attributes(kept: Any) -> dict[str, Any]:
        return {_text(k): value(v) for k, v in kept.items()}

    nodes, edges = document["nodes"], document["edges"]
    if len(nodes) > GRAPH_NODES or len(edges) > len(nodes):
        raise ValueError("too many nodes")
    result = ComponentGraph(nx.DiGraph())
    for path, kept in nodes:
        data = attributes(kept)
        if not isinstance(data.get("component"), Component):
            raise ValueError("a node without its component")
        result.graph.add_node(_text(path), **data)
    for parent, child, kept in edges:
        if parent not in result.graph or child not in result.graph:
            raise ValueError("an edge between nodes not kept")
        result.graph.add_edge(parent, child, **attributes(kept))
    for path, index, relation in document["requirements"]:
        component = result.graph.nodes[path]["component"]
        if type(index) is not int or not 0 <= index < len(component.requirements):
            raise ValueError("no such requirement")
        result.requirements.append(BoundRequirement(path, component.name, component.requirements[index], value(relation)))
    return result


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a kept name is text")
    return value


def _recalled(key: str, library: Library) -> ComponentGraph | None:
    try:
        document = _store().get(key)
        return _read(document, library) if document is not None else None
    except Exception:  # noqa: BLE001: building the graph again is always right
        return None


def _keep(key: str, graph: ComponentGraph, library: Library) -> None:
    """Keep ``graph`` where its document rebuilds it equal, node for node and tree for tree."""
    try:
        document = _written(graph, _Writer(library))
        if _same_graph(_read(json.loads(json.dumps(document)), library), graph):
            _store().put(key, document)
    except Exception:  # noqa: BLE001: keeping is optional; the graph built stands
        return


def _same_graph(a: ComponentGraph, b: ComponentGraph) -> bool:
    if list(a.graph.nodes) != list(b.graph.nodes) or list(a.graph.edges) != list(b.graph.edges) or len(a.requirements) != len(b.requirements):
        return False
    pairs = [(a.graph.nodes[n], b.graph.nodes[n]) for n in a.graph.nodes] + [(a.graph.edges[e], b.graph.edges[e]) for e in a.graph.edges]
    pairs += [(vars(x), vars(y)) for x, y in zip(a.requirements, b.requirements)]
    return all(x.keys() == y.keys() and all(_same_value(x[k], y[k]) for k in x) for x, y in pairs)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, sympy.Basic):
        return isinstance(b, sympy.Basic) and same_tree(a, b)
    return type(a) is type(b) and (a is b or a == b)
