"""symform's own component-graph structure against networkx, which it stands in for on the way to a number."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from symform.engine.digraph import DiGraph

NAMES = [f"c{i}" for i in range(7)]
edges_lists = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), max_size=14)


def _both(nodes: list[str], edges: list[tuple[str, str]]) -> tuple[DiGraph, nx.DiGraph]:
    mine, theirs = DiGraph(), nx.DiGraph()
    for graph in (mine, theirs):
        for node in nodes:
            graph.add_node(node, name=node)
        for number, (u, v) in enumerate(edges):
            graph.add_edge(u, v, number=number)
    return mine, theirs


@settings(max_examples=300, deadline=None)
@given(st.permutations(NAMES), edges_lists)
def test_the_cycle_found_is_networkx_find_cycle(nodes, edges):
    mine, theirs = _both(list(nodes), edges)
    try:
        expected = [edge[0] for edge in nx.find_cycle(theirs)]
    except nx.NetworkXNoCycle:
        expected = None
    assert mine.first_cycle() == expected


@settings(max_examples=300, deadline=None)
@given(st.permutations(NAMES), edges_lists)
def test_nodes_edges_and_order_read_as_networkx_reads_them(nodes, edges):
    mine, theirs = _both(list(nodes), edges)
    assert list(mine) == list(theirs) and list(mine.nodes.items()) == list(theirs.nodes.items())
    assert list(mine.edges(data=True)) == list(theirs.edges(data=True)) and len(mine.edges) == theirs.number_of_edges()
    for u in NAMES:
        assert list(mine.successors(u)) == list(theirs.successors(u)) and list(mine.predecessors(u)) == list(theirs.predecessors(u))
        for v in NAMES:
            assert mine.get_edge_data(u, v) == theirs.get_edge_data(u, v) == mine.edges.get((u, v))
            assert mine.has_edge(u, v) == theirs.has_edge(u, v) == ((u, v) in mine.edges) == ((u, v) in theirs.edges)
    if nx.is_directed_acyclic_graph(theirs):
        assert mine.topological_order() == list(nx.topological_sort(theirs))
    converted = mine.to_networkx()
    assert nx.utils.graphs_equal(converted, theirs)


def test_a_graph_with_a_cycle_has_no_topological_order():
    graph = DiGraph()
    graph.add_edge("a", "b")
    graph.add_edge("b", "a")
    try:
        graph.topological_order()
    except ValueError as e:
        assert "cycle" in str(e)
    else:
        raise AssertionError("a cyclic graph was given a topological order")
