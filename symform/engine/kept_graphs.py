"""Component graphs built from the bundled declarations, kept between runs.

Once its declarations are parsed (and those are kept: safe_expr), building a model's graph is most of what
loading it costs: every part's expressions have its arguments substituted in, and sympy evaluates every
sum, product, Min and Max again as it does (30-180 ms for the bundled presets on these machines, reading
one back 3-16 ms; benchmarks/README.md). A graph built from
symform's own declarations follows from its code, its bundled files, sympy's release, the root component,
the root's bindings and the assumption set alone, so it is kept (disk_cache: plain JSON, never code) under a
hash of those, and rebuilt from it node by node with sympy's constructors told not to evaluate (what was
kept is already what evaluating gave).

Its expressions are written as a table in which every distinct sub-expression appears once (kept_tables).
A graph is kept only where it rebuilds equal, node for node and tree for tree, to the one built;
what is read back is held to the budgets a build obeys, and anything amiss (a damaged, edited or foreign
entry, an unknown component or node type) is built again from the declarations: the cache only saves time.
A graph with a key keeps what analyses derive from it too (kept_derivations).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Mapping

import networkx as nx

from . import disk_cache
from .budget import GRAPH_NODES
from .data import bundled_fingerprint
from .declarations import Component, Library, default_library
from .graph import Binding, BoundRequirement, ComponentGraph, build_graph
from .kept_derivations import Derivations
from .kept_tables import NotKept, Reader, Writer, rebuilt_table, same_value, text

FORMAT = 2
_MAX_STORE_BYTES = 4 * 2**20


def kept_graph(library: Library, root: str, bindings: Mapping[str, Binding], *, assume: str | None = None) -> ComponentGraph:
    """``build_graph(library, root, bindings, assume=assume)``, from the cache where an earlier run kept it."""
    key = _key(library, root, bindings, assume)
    graph = _recalled(key, library) if key is not None else None
    if graph is None:
        graph = build_graph(library, root, bindings, assume=assume)
        if key is not None:
            _keep(key, graph, library)
    if key is not None:
        graph.keeper = Derivations(key)
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
    writer = Writer(library)
    try:
        given = sorted((name, value if isinstance(value, str) else writer.put(value)) for name, value in bindings.items())
    except NotKept:
        return None
    return disk_cache.digest(json.dumps([root, assume, given, writer.table]))


# --- a graph as plain JSON ---------------------------------------------------------------------------


def _written(graph: ComponentGraph, writer: Writer) -> dict[str, Any]:
    """Every node's and edge's attributes as the build set them, whatever they are (``Writer.value``: a
    component by name, text, a mapping by its entries, an expression by its table entry, ...)."""

    def attributes(data: Mapping[str, Any]) -> dict[str, Any]:
        return {k: writer.value(v) for k, v in data.items()}

    nodes = [[path, attributes(data)] for path, data in graph.graph.nodes(data=True)]
    edges = [[a, b, attributes(data)] for a, b, data in graph.graph.edges(data=True)]
    requirements = []
    for bound in graph.requirements:
        declared = graph.graph.nodes[bound.path]["component"].requirements
        index = next(i for i, r in enumerate(declared) if r is bound.requirement)
        requirements.append([bound.path, index, writer.put(bound.relation)])
    return {"table": writer.table, "nodes": nodes, "edges": edges, "requirements": requirements}


def _read(document: Any, library: Library) -> ComponentGraph:
    """The graph a kept document describes; ValueError, KeyError, TypeError or a SymformError where it is amiss."""
    reader = Reader(rebuilt_table(document["table"]), library)

    def attributes(kept: Any) -> dict[str, Any]:
        if not isinstance(kept, dict):
            raise TypeError("a node's or edge's attributes are a JSON object")
        return {text(k): reader.value(v) for k, v in kept.items()}

    nodes, edges = document["nodes"], document["edges"]
    if len(nodes) > GRAPH_NODES or len(edges) > len(nodes):
        raise ValueError("too many nodes")
    result = ComponentGraph(nx.DiGraph())
    for path, kept in nodes:
        data = attributes(kept)
        if not isinstance(data.get("component"), Component):
            raise ValueError("a node without its component")
        result.graph.add_node(text(path), **data)
    for parent, child, kept in edges:
        if parent not in result.graph or child not in result.graph:
            raise ValueError("an edge between nodes not kept")
        result.graph.add_edge(parent, child, **attributes(kept))
    for path, index, relation in document["requirements"]:
        component = result.graph.nodes[path]["component"]
        if type(index) is not int or not 0 <= index < len(component.requirements):
            raise ValueError("no such requirement")
        result.requirements.append(BoundRequirement(path, component.name, component.requirements[index], reader.value(relation)))
    return result


def _recalled(key: str, library: Library) -> ComponentGraph | None:
    try:
        document = _store().get(key)
        return _read(document, library) if document is not None else None
    except Exception:  # noqa: BLE001: building the graph again is always right
        return None


def _keep(key: str, graph: ComponentGraph, library: Library) -> None:
    """Keep ``graph`` where its document rebuilds it equal, node for node and tree for tree."""
    try:
        document = _written(graph, Writer(library))
        if _same_graph(_read(json.loads(json.dumps(document)), library), graph):
            _store().put(key, document)
    except Exception:  # noqa: BLE001: keeping is optional; the graph built stands
        return


def _same_graph(a: ComponentGraph, b: ComponentGraph) -> bool:
    if list(a.graph.nodes) != list(b.graph.nodes) or list(a.graph.edges) != list(b.graph.edges) or len(a.requirements) != len(b.requirements):
        return False
    pairs = [(a.graph.nodes[n], b.graph.nodes[n]) for n in a.graph.nodes] + [(a.graph.edges[e], b.graph.edges[e]) for e in a.graph.edges]
    pairs += [(vars(x), vars(y)) for x, y in zip(a.requirements, b.requirements)]
    return all(same_value(dict(x), dict(y)) for x, y in pairs)
