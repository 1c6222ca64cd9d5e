"""A small directed graph: the part of networkx's interface that symform's component graph uses.

networkx is a large library whose import alone takes some 0.2 s (it scans the installed
distributions for backends and wraps every algorithm), a third of ``import sympy``; symform
needs nodes and edges with attributes, successors in insertion order, a topological order and
a cycle check. This module gives those under networkx's names, in networkx's orders, so that
the component graph behaves the same either way (tests/test_digraph.py checks it against networkx).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from types import MappingProxyType
from typing import Any


class NetworkXNoCycle(Exception):
    """No cycle in the graph (networkx's name for it)."""


class NetworkXUnfeasible(Exception):
    """A topological order asked of a graph with a cycle (networkx's name for it)."""


class DiGraph:
    """Nodes and directed edges, each with a dict of attributes; both kept in the order they were added."""

    def __init__(self) -> None:
        self._node: dict[Hashable, dict[str, Any]] = {}
        self._succ: dict[Hashable, dict[Hashable, dict[str, Any]]] = {}
        self._in_degree: dict[Hashable, int] = {}

    def add_node(self, node: Hashable, **attributes: Any) -> None:
        if node not in self._node:
            self._node[node] = {}
            self._succ[node] = {}
            self._in_degree[node] = 0
        self._node[node].update(attributes)

    def add_edge(self, tail: Hashable, head: Hashable, **attributes: Any) -> None:
        for node in (tail, head):
            if node not in self._node:
                self.add_node(node)
        if head not in self._succ[tail]:
            self._succ[tail][head] = {}
            self._in_degree[head] += 1
        self._succ[tail][head].update(attributes)

    @property
    def nodes(self) -> MappingProxyType:
        """node -> its attributes (the dict itself: attributes can be changed through it)."""
        return MappingProxyType(self._node)

    @property
    def edges(self) -> _Edges:
        """``edges[tail, head]``: an edge's attributes; ``edges(data=True)``: (tail, head, attributes) for every edge."""
        return _Edges(self._succ)

    def successors(self, node: Hashable) -> Iterator[Hashable]:
        return iter(self._succ[node])

    def number_of_nodes(self) -> int:
        return len(self._node)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._node)

    def __contains__(self, node: object) -> bool:
        try:
            return node in self._node
        except TypeError:
            return False

    def __len__(self) -> int:
        return len(self._node)


class _Edges:
    def __init__(self, succ: dict[Hashable, dict[Hashable, dict[str, Any]]]):
        self._succ = succ

    def __getitem__(self, edge: tuple[Hashable, Hashable]) -> dict[str, Any]:
        tail, head = edge
        return self._succ[tail][head]

    def __call__(self, data: bool = False) -> Iterator[tuple]:
        for tail, heads in self._succ.items():
            for head, attributes in heads.items():
                yield (tail, head, attributes) if data else (tail, head)

    def __iter__(self) -> Iterator[tuple]:
        return self()

    def __len__(self) -> int:
        return sum(len(heads) for heads in self._succ.values())


def topological_sort(graph: DiGraph) -> Iterator[Hashable]:
    """Every node after all the nodes with an edge to it: generation by generation, as networkx orders them
    (the nodes with no edge in, in the order added; then the nodes whose last edge in came from those, ...)."""
    waiting = {node: count for node, count in graph._in_degree.items() if count > 0}
    generation = [node for node, count in graph._in_degree.items() if count == 0]
    while generation:
        following = []
        for node in generation:
            for head in graph._succ[node]:
                waiting[head] -= 1
                if waiting[head] == 0:
                    following.append(head)
                    del waiting[head]
        yield from generation
        generation = following
    if waiting:
        raise NetworkXUnfeasible("the graph has a cycle: it has no topological order")


_DONE = object()


def find_cycle(graph: DiGraph) -> list[tuple[Hashable, Hashable]]:
    """The edges of one cycle, in order, the first found by a depth-first search from each node in the
    order added, following edges in the order added; NetworkXNoCycle where there is none."""
    finished: set[Hashable] = set()
    for start in graph._node:
        if start in finished:
            continue
        path = [start]  # the nodes on the active path, and for each an iterator over its successors
        on_path = {start: 0}
        pending = [iter(graph._succ[start])]
        while pending:
            head = next(pending[-1], _DONE)
            if head is _DONE:  # every edge out of the path's last node followed: no cycle through it
                done = path.pop()
                del on_path[done]
                finished.add(done)
                pending.pop()
                continue
            if head in on_path:
                cycle = path[on_path[head] :]
                return list(zip(cycle, cycle[1:] + [head]))
            if head in finished:
                continue
            on_path[head] = len(path)
            path.append(head)
            pending.append(iter(graph._succ[head]))
    raise NetworkXNoCycle("no cycle found")
