"""symform's small directed graph against networkx, the library it stands in for: the same nodes, edges,
attributes and orders, and a cycle exactly where networkx finds one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symform.engine import digraph

nx = pytest.importorskip("networkx")

# edges over a few nodes, self-loops and repeats included; a node list first fixes the order nodes are added in
_NODES = st.lists(st.integers(0, 7), unique=True, max_size=8)
_EDGES = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 3)), max_size=20)


def _both(nodes, edges):
    ours, theirs = digraph.DiGraph(), nx.DiGraph()
    for g in (ours, theirs):
        for n in nodes:
            g.add_node(n, label=f"n{n}")
        for tail, head, weight in edges:
            g.add_edge(tail, head, weight=weight)
    return ours, theirs


def _acyclic(edges):
    return [(min(t, h), max(t, h), w) for t, h, w in edges if t != h]


@settings(max_examples=100, deadline=None)
@given(_NODES, _EDGES)
def test_nodes_edges_and_successors_as_networkx_keeps_them(nodes, edges):
    ours, theirs = _both(nodes, edges)
    assert list(ours) == list(theirs) and len(ours) == ours.number_of_nodes() == theirs.number_of_nodes()
    assert dict(ours.nodes.items()) == dict(theirs.nodes.items()) and list(ours.nodes.values()) == list(theirs.nodes.values())
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True)) and list(ours.edges) == list(theirs.edges)
    for node in ours:
        assert list(ours.successors(node)) == list(theirs.successors(node))
        assert ours.nodes.get(node) == theirs.nodes.get(node) and node in ours
    for tail, head, _ in edges:
        assert ours.edges[tail, head] == theirs.edges[tail, head]
    assert ours.nodes.get(99) is None and 99 not in ours


@settings(max_examples=100, deadline=None)
@given(_NODES, _EDGES)
def test_a_topological_order_in_networkx_order(nodes, edges):
    ours, theirs = _both(nodes, _acyclic(edges))
    assert list(digraph.topological_sort(ours)) == list(nx.topological_sort(theirs))


@settings(max_examples=150, deadline=None)
@given(_NODES, _EDGES)
def test_the_cycle_networkx_finds_and_none_where_it_finds_none(nodes, edges):
    ours, theirs = _both(nodes, edges)
    try:
        expected = nx.find_cycle(theirs)
    except nx.NetworkXNoCycle:
        with pytest.raises(digraph.NetworkXNoCycle):
            digraph.find_cycle(ours)
        assert list(digraph.topological_sort(ours)) == list(nx.topological_sort(theirs))
        return
    assert digraph.find_cycle(ours) == expected  # the same edges in the same order: the same error message
    with pytest.raises(digraph.NetworkXUnfeasible):
        list(digraph.topological_sort(ours))


def test_attributes_change_in_place_as_networkx_lets_them():
    g = digraph.DiGraph()
    g.add_node("", kind="root")
    g.add_edge("", "a", repeat=2)
    g.nodes["a"]["quantities"] = {"params": 3}
    g.add_node("a", kind="leaf")  # added again: its attributes updated, not replaced
    g.add_edge("", "a", shard=None)
    assert g.nodes["a"] == {"quantities": {"params": 3}, "kind": "leaf"} and g.edges["", "a"] == {"repeat": 2, "shard": None}
    assert list(g.edges(data=True)) == [("", "a", {"repeat": 2, "shard": None})] and len(g.edges) == 1
