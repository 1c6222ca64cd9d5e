"""The component graph's structure: nodes and edges with attribute dicts, in the order they were added.

It offers the part of networkx's ``DiGraph`` interface symform uses (``nodes[n]``, ``edges[u, v]``,
``edges(data=True)``, ``successors``, ``has_edge``, ``get_edge_data``), so that building and summing a model imports no
networkx: importing networkx costs about a third of ``import sympy``, on every command that builds a model.
``to_networkx()`` gives the same graph as a networkx ``DiGraph`` for the graph algorithms symform does not need.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterator


class EdgeView:
    """``edges[u, v]``: an edge's attributes; ``edges(data=True)``: (u, v, attributes) for every edge."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict[Hashable, dict[Hashable, dict[str, Any]]]):
        self._succ = succ

    def __getitem__(self, edge: tuple[Hashable, Hashable]) -> dict[str, Any]:
        u, v = edge
        return self._succ[u][v]

    def get(self, edge: tuple[Hashable, Hashable], default: Any = None) -> dict[str, Any] | Any:
        u, v = edge
        return self._succ.get(u, {}).get(v, default)

    def __contains__(self, edge: object) -> bool:
        return isinstance(edge, tuple) and len(edge) == 2 and edge[1] in self._succ.get(edge[0], {})

    def __call__(self, data: bool = False) -> Iterator[tuple]:
        for u, children in self._succ.items():
            for v, attributes in children.items():
                yield (u, v, attributes) if data else (u, v)

    def __iter__(self) -> Iterator[tuple[Hashable, Hashable]]:
        return self()

    def __len__(self) -> int:
        return sum(len(children) for children in self._succ.values())


class DiGraph:
    """A directed graph whose nodes and edges carry attribute dicts (networkx's ``DiGraph`` semantics)."""

    def __init__(self) -> None:
        self._node: dict[Hashable, dict[str, Any]] = {}
        self._succ: dict[Hashable, dict[Hashable, dict[str, Any]]] = {}
        self._pred: dict[Hashable, dict[Hashable, dict[str, Any]]] = {}

    @property
    def nodes(self) -> dict[Hashable, dict[str, Any]]:
        """Each node's attributes, by node, in the order the nodes were added."""
        return self._node

    @property
    def edges(self) -> EdgeView:
        return EdgeView(self._succ)

    def add_node(self, node: Hashable, **attributes: Any) -> None:
        if node not in self._node:
            self._node[node], self._succ[node], self._pred[node] = {}, {}, {}
        self._node[node].update(attributes)

    def add_edge(self, u: Hashable, v: Hashable, **attributes: Any) -> None:
        for node in (u, v):
            if node not in self._node:
                self.add_node(node)
        found = self._succ[u].get(v)
        if found is None:
            found = self._succ[u][v] = self._pred[v][u] = {}
        found.update(attributes)

    def successors(self, node: Hashable) -> Iterator[Hashable]:
        return iter(self._succ[node])

    def predecessors(self, node: Hashable) -> Iterator[Hashable]:
        return iter(self._pred[node])

    def get_edge_data(self, u: Hashable, v: Hashable, default: Any = None) -> dict[str, Any] | Any:
        return self._succ.get(u, {}).get(v, default)

    def has_edge(self, u: Hashable, v: Hashable) -> bool:
        return v in self._succ.get(u, {})

    def has_node(self, node: Hashable) -> bool:
        return node in self._node

    def number_of_nodes(self) -> int:
        return len(self._node)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, node: Hashable) -> bool:
        return node in self._node

    def topological_order(self) -> list[Hashable]:
        """Every node after all of its predecessors, generation by generation as networkx's topological_sort
        gives them (the nodes no edge reaches first, in the order they were added)."""
        waiting = {node: len(parents) for node, parents in self._pred.items() if parents}
        generation = [node for node, parents in self._pred.items() if not parents]
        order: list[Hashable] = []
        while generation:
            order += generation
            following = []
            for node in generation:
                for child in self._succ[node]:
                    waiting[child] -= 1
                    if waiting[child] == 0:
                        following.append(child)
                        del waiting[child]
            generation = following
        if waiting:
            raise ValueError("the graph has a cycle: it has no topological order")
        return order

    def first_cycle(self) -> list[Hashable] | None:
        """The nodes of a cycle, each using the next and the last the first (None when there is none)."""
        state: dict[Hashable, int] = {}  # 1: on the current path, 2: finished
        for start in self._node:
            if start in state:
                continue
            path, stack = [start], [iter(self._succ[start])]
            state[start] = 1
            while stack:
                child = next(stack[-1], None)
                if child is None:
                    state[path.pop()] = 2
                    stack.pop()
                elif state.get(child) == 1:
                    return path[path.index(child) :]
                elif child not in state:
                    state[child] = 1
                    path.append(child)
                    stack.append(iter(self._succ[child]))
        return None

    def to_networkx(self):
        """The same graph as a networkx ``DiGraph`` (imports networkx)."""
        import networkx as nx

        graph = nx.DiGraph()
        for node, attributes in self._node.items():
            graph.add_node(node, **attributes)
        for u, v, attributes in self.edges(data=True):
            graph.add_edge(u, v, **attributes)
        return graph
