"""Component graphs kept between runs: a graph read back is the graph the declarations build, node for node
and total for total, and a damaged, edited or foreign entry is built again, never read as a wrong graph."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import sympy
from cached_runs import two_runs

import symform
from symform.engine import kept_graphs, kept_tables
from symform.engine.declarations import QUANTITIES, default_library
from symform.engine.graph import ComponentGraph, build_graph
from symform.engine.model import Model, forget_structures
from symform.engine.userfile import load_declaration_file

# dense, MLA + MoE, hybrid linear attention + MoE, Mamba-2 hybrid, sliding window + soft-capping, two vision towers
PRESETS = ["qwen3-0.6b", "deepseek-v3", "qwen3-next-80b-a3b", "nemotron-h-8b", "gemma-2-2b", "qwen3-vl-8b", "gemma-4-31b-it"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty cache directory whose graph store no process has read yet."""
    monkeypatch.setenv("SYMFORM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SYMFORM_CACHE", raising=False)
    kept_graphs._store.cache_clear()
    forget_structures()
    yield tmp_path
    kept_graphs._store.cache_clear()
    forget_structures()


@pytest.fixture
def builds(monkeypatch) -> list:
    """One entry per graph built from the declarations rather than read back."""
    built: list = []
    monkeypatch.setattr(kept_graphs, "build_graph", lambda *a, **k: built.append(a[1]) or build_graph(*a, **k))
    return built


def _entries() -> dict:
    kept_graphs._store().get("")  # read the file, if any
    return kept_graphs._store()._entries


def _arguments(name: str):
    """A preset's root and bindings; loading it kept its graph, which is forgotten here (a store no process saved)."""
    model = symform.load(name)
    kept_graphs._store.cache_clear()
    forget_structures()
    return model.library, model.spec.root, model._arguments


def _assert_same(read: ComponentGraph, built: ComponentGraph) -> None:
    """Compared through what the engine reads off a graph, against a graph built from the declarations."""
    assert list(read.graph.nodes) == list(built.graph.nodes)
    assert list(read.graph.edges) == list(built.graph.edges)
    for path in built.graph.nodes:
        a, b = read.graph.nodes[path], built.graph.nodes[path]
        assert a["component"] is b["component"]
        assert a.keys() == b.keys()
        for field in a.keys() - {"component"}:
            assert a[field] == b[field], (path, field)
    for edge in built.graph.edges:
        assert read.graph.edges[edge] == built.graph.edges[edge]
    assert [(r.path, r.component, r.requirement, r.relation) for r in read.requirements] == [(r.path, r.component, r.requirement, r.relation) for r in built.requirements]
    for quantity in QUANTITIES:
        assert sympy.expand(read.total(quantity) - built.total(quantity)) == 0, quantity


@pytest.mark.parametrize("name", PRESETS)
def test_a_kept_graph_reads_back_as_the_graph_built(store, builds, name):
    library, root, arguments = _arguments(name)
    builds.clear()
    kept_graphs.kept_graph(library, root, arguments)  # built and kept
    assert len(_entries()) == 1 and len(builds) == 1
    kept_graphs._store().save()
    kept_graphs._store.cache_clear()  # as the next process: the store read from its file
    forget_structures()
    read = kept_graphs.kept_graph(library, root, arguments)
    assert len(builds) == 1  # read back, not built
    _assert_same(read, build_graph(library, root, arguments))


def test_each_assumption_set_and_each_structure_is_kept_apart(store):
    library, root, arguments = _arguments("qwen3-0.6b")
    plain = kept_graphs.kept_graph(library, root, arguments)
    assumed = kept_graphs.kept_graph(library, root, arguments, assume="standard")
    without_qk_norm = kept_graphs.kept_graph(library, root, {**arguments, "qk_norm": sympy.Integer(0)})
    untied = kept_graphs.kept_graph(library, root, {**arguments, "head": "linear"})
    assert len(_entries()) == 4
    _assert_same(kept_graphs.kept_graph(library, root, arguments, assume="standard"), assumed)
    _assert_same(kept_graphs.kept_graph(library, root, arguments), plain)
    assert len({plain.total("params"), without_qk_norm.total("params"), untied.total("params")}) == 3


def test_a_model_from_a_kept_graph_gives_the_same_numbers(store, builds):
    first = Model.load("deepseek-v3")
    expected = {q: first.evaluate(q, batch=2, seq=512) for q in ("params", "active_params", "forward_flops", "backward_flops")}
    breakdown = first.evaluate_breakdown("params", depth=None)
    kept_graphs._store().save()
    kept_graphs._store.cache_clear()
    forget_structures()
    count = len(builds)
    again = Model.load("deepseek-v3")
    assert {q: again.evaluate(q, batch=2, seq=512) for q in expected} == expected
    assert len(builds) == count  # every graph the second model asked for was read back
    assert again.evaluate_breakdown("params", depth=None) == breakdown


def test_user_declarations_are_never_kept(store):
    spec, library = load_declaration_file(Path(__file__).parent / "data" / "check" / "right_ffn.toml")
    assert library is not default_library()
    Model(spec, library=library).evaluate("params")
    assert _entries() == {}


def test_no_graph_is_kept_with_the_cache_off(store, monkeypatch):
    monkeypatch.setenv("SYMFORM_CACHE", "off")
    Model.load("qwen3-0.6b").evaluate("params")
    monkeypatch.delenv("SYMFORM_CACHE")
    assert _entries() == {}


def _kept_document(name: str):
    library, root, arguments = _arguments(name)
    built = kept_graphs.kept_graph(library, root, arguments)
    ((key, document),) = _entries().items()
    return library, root, arguments, built, key, document


def _damaged(document: dict) -> list[tuple[str, dict]]:
    """One edit per way a kept graph can be amiss: each must be refused and the graph built again."""
    table = document["table"]
    f = next(i for i, e in enumerate(table) if e[0] == "f")
    n = next(i for i, e in enumerate(table) if e[0] == "n")
    edits = {
        "a node type off the allow-list": lambda d: d["table"][f].__setitem__(1, "Function"),
        "an eval of Python text": lambda d: d["table"].__setitem__(f, ["f", "eval", []]),
        "a forward reference": lambda d: d["table"][f].__setitem__(2, [len(table) + 5]),
        "a negative reference": lambda d: d["table"][f].__setitem__(2, [-1]),
        "a symbol not in the vocabulary": lambda d: d["table"].__setitem__(n, ["n", "__import__"]),
        "a constant past the digit budget": lambda d: d["table"].__setitem__(n, ["i", "9" * 5000]),
        "a truth value that is not one": lambda d: d["table"].__setitem__(n, ["b", "yes"]),
        "an unknown component": lambda d: d["nodes"][0][1].__setitem__("component", ["component", "no_such_component"]),
        "a requirement counted from the end": lambda d: d["requirements"][0].__setitem__(1, -1),
        "a requirement past the declared ones": lambda d: d["requirements"][0].__setitem__(1, 10_000),
        "an edge to a node not kept": lambda d: d["edges"][0].__setitem__(1, "nowhere"),
        "a table past the entry budget": lambda d: d.__setitem__("table", table + [["i", "1"]] * (kept_tables.MAX_ENTRIES + 1)),
        "a node that is not a list": lambda d: d["nodes"].__setitem__(0, "node"),
        "an argument that is neither slot nor entry": lambda d: d["nodes"][0][1]["args"][1].__setitem__(next(iter(d["nodes"][0][1]["args"][1])), {"slot": 1}),
        "no table at all": lambda d: d.pop("table"),
        # entries that share their arguments: 60 doublings make a tree of 2**60 nodes that any walk over it visits
        "a tree of exponential size": lambda d: d["table"].extend([["f", "Add", [len(table) + i - 1, len(table) + i - 1]] for i in range(60)])
        or d["nodes"][-1][1]["quantities"][1].__setitem__("params", len(table) + 59),
        "a chain nested past the depth budget": lambda d: d["table"].extend([["f", "Mul", [n, len(table) + i - 1]] for i in range(100)])
        or d["nodes"][-1][1]["quantities"][1].__setitem__("params", len(table) + 99),
    }
    damaged = []
    for what, edit in edits.items():
        copied = copy.deepcopy(document)
        edit(copied)
        damaged.append((what, copied))
    return damaged


def test_a_damaged_or_edited_entry_is_built_again(store, monkeypatch):
    library, root, arguments, built, key, document = _kept_document("qwen3-0.6b")
    builds = []
    monkeypatch.setattr(kept_graphs, "build_graph", lambda *a, **k: builds.append(1) or build_graph(*a, **k))
    for what, damaged in _damaged(document):
        _entries()[key] = damaged
        graph = kept_graphs.kept_graph(library, root, arguments)
        assert len(builds) == 1, what
        builds.clear()
        _assert_same(graph, built)


def test_a_graph_that_does_not_rebuild_equal_is_not_kept(store, monkeypatch):
    """Should a tree not rebuild node for node (here: every table entry read as 1), the graph is not kept."""
    library, root, arguments = _arguments("qwen3-0.6b")
    monkeypatch.setattr(kept_graphs, "rebuilt_table", lambda table: [sympy.Integer(1)] * len(table))
    kept_graphs.kept_graph(library, root, arguments)
    assert _entries() == {}


def test_a_fresh_process_reads_the_kept_graph(tmp_path):
    """Two runs of one command: the second reads the graph the first kept and prints the same numbers."""
    first, second = two_runs(tmp_path, "symform.engine.kept_graphs:build_graph", ["params", "qwen3-0.6b", "--json"])
    assert first["status"] == second["status"] == 0
    assert first["printed"] == second["printed"]
    assert json.loads(first["printed"])["total"] == 596_049_920  # Qwen3-0.6B's numel, tied embeddings (test_oracle_params)
    assert (len(first["calls"]), len(second["calls"])) == (1, 0)
    assert list(tmp_path.glob("graphs-*.json"))

