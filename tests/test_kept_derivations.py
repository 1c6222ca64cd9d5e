"""What analyses derive from a kept graph is kept beside it (engine/kept_derivations): read back, it gives
the numbers deriving it gives; a damaged or edited entry, or a memo of the run's own, is derived again."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
from cached_runs import two_runs

from symform.analysis import roofline
from symform.analysis.memory import Layout, Training, training_memory
from symform.analysis.planner import plan
from symform.analysis.roofline import phase_work
from symform.analysis.timing import training_time
from symform.engine import kept_derivations, kept_graphs, kept_tables
from symform.engine.errors import ConfigError
from symform.engine.model import Model, forget_structures, quantity_names

# dense; MLA + MoE; hybrid linear attention + MoE; Mamba-2 hybrid; sliding window + soft-capping; a vision tower
PRESETS = ["qwen3-0.6b", "deepseek-v3", "qwen3-next-80b-a3b", "nemotron-h-8b", "gemma-2-2b", "qwen3-vl-8b"]


def _next_run() -> None:
    """As a run ends and the next one starts: what was derived is written, every store read again from its file."""
    kept_derivations.keep_pending()
    kept_graphs._store().save()
    kept_graphs._store.cache_clear()
    kept_derivations._store.cache_clear()
    forget_structures()


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty cache directory that no run has written."""
    monkeypatch.setenv("SYMFORM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SYMFORM_CACHE", raising=False)
    kept_derivations._pending().clear()
    kept_graphs._store.cache_clear()
    kept_derivations._store.cache_clear()
    forget_structures()
    yield tmp_path
    kept_derivations._pending().clear()
    kept_graphs._store.cache_clear()
    kept_derivations._store.cache_clear()
    forget_structures()


@pytest.fixture
def phases(monkeypatch) -> list:
    """One entry per phase's work derived from a graph rather than read back."""
    derived: list = []
    original = roofline._phase_work
    monkeypatch.setattr(roofline, "_phase_work", lambda *a, **k: derived.append(a[1]) or original(*a, **k))
    return derived


def _entries() -> dict:
    kept_derivations._store().get("")  # read the file, if any
    return kept_derivations._store()._entries


def _analyses(name: str) -> dict:
    """What a memory budget, a roofline and a step time of one layout print, as plain data."""
    model = Model.load(name)
    layout = Layout(data=2, tensor=2)
    setup = Training(precision="mixed", optimizer="adamw", recompute="selective", flash=True, layout=layout)
    work = {p: phase_work(model, p, flash=True) for p in ("train", "prefill", "decode")}
    return {
        "numbers": {q: model.evaluate(q, **_workload(model, q)) for q in quantity_names()},
        "expressions": {q: str(model.expression(q).expr) for q in quantity_names()},
        "memory": training_memory(model, batch=2, seq=256, setup=setup).as_dict(),
        "work": {p: {k: (str(v.flops), str(v.bytes)) for k, v in w.components.items()} for p, w in work.items()},
        "totals": {p: (w.total.flops, w.total.bytes) for p, w in work.items()},
        "time": training_time(model, "h100-sxm", global_batch=16, micro_batch=2, seq=256, layout=layout, recompute="selective", flash=True).as_dict(),
    }


def _workload(model: Model, quantity: str) -> dict[str, int]:
    """8 for every symbol a quantity reads besides the model's sizes (batch, seq, tokens, tp, ...)."""
    return {s.name: 8 for s in model.expression(quantity).expr.free_symbols if s.name not in model.values}


@pytest.mark.parametrize("name", PRESETS)
def test_kept_derivations_read_back_give_the_numbers_derived(store, phases, name):
    derived = _analyses(name)
    assert {"train", "prefill", "decode"} <= set(phases)
    _next_run()
    assert _entries(), "nothing was kept"
    phases.clear()
    assert _analyses(name) == derived
    assert phases == []  # every phase's work was read back, not derived


def test_a_plan_from_kept_derivations_is_the_plan_derived(store):
    def planned() -> dict:
        found = plan(Model.load("deepseek-v3"), "h100-sxm", devices=256, global_batch=512, seq=4096, flash=True).as_dict()
        return {k: v for k, v in found.items() if k != "screen_seconds"}

    derived = planned()
    _next_run()
    assert planned() == derived


def test_each_graph_and_key_is_kept_apart(store, phases):
    train = phase_work(Model.load("qwen3-0.6b"), "train")
    prefill = phase_work(Model.load("qwen3-0.6b"), "prefill")
    other = phase_work(Model.load("gemma-2-2b"), "train")
    _next_run()
    phases.clear()
    assert phase_work(Model.load("gemma-2-2b"), "train").total == other.total
    assert phase_work(Model.load("qwen3-0.6b"), "prefill").total == prefill.total
    assert phase_work(Model.load("qwen3-0.6b"), "train").total == train.total
    assert phases == []
    assert len({train.total, prefill.total, other.total}) == 3


def test_a_run_keeps_its_derivations_in_the_order_derived_up_to_its_byte_budget(store, monkeypatch):
    model = Model.load("qwen3-0.6b")
    phase_work(model, "prefill")
    phase_work(model, "train")
    pending = list(kept_derivations._pending())
    sizes = [kept_derivations._written(value)[1] for _, value in pending]
    first = next(i for i, size in enumerate(sizes) if size)
    assert sum(1 for size in sizes if size) > 1
    monkeypatch.setattr(kept_derivations, "_MAX_RUN_BYTES", sizes[first])
    kept_derivations.keep_pending()
    assert list(_entries()) == [pending[first][0]]


@pytest.fixture
def sympy_checks(monkeypatch) -> list:
    """One entry per size check sympy decides (a model's first at its structure, unless a run kept its verdict)."""
    done: list = []
    original = Model._check
    monkeypatch.setattr(Model, "_check", lambda self, graph, check: done.append(check.kind) or original(self, graph, check))
    return done


IMAGES = {"images": 1, "image_height": 448, "image_width": 448}  # 196 tokens in Qwen3-VL-8B's sequence


def test_sizes_checked_in_an_earlier_run_are_not_checked_again(store, sympy_checks):
    Model.load("deepseek-v3")
    Model.load("qwen3-vl-8b", conventions=IMAGES)
    assert sympy_checks
    _next_run()
    sympy_checks.clear()
    model = Model.load("qwen3-vl-8b", conventions=IMAGES)
    Model.load("deepseek-v3")
    assert sympy_checks == []
    # what the requirements reading the workload leave was kept with the verdict: the sequence must hold the image
    assert model.evaluate("forward_flops", batch=1, seq=196) > 0
    with pytest.raises(ConfigError, match="give --seq at least"):
        model.evaluate("forward_flops", batch=1, seq=195)


def test_other_sizes_are_checked_and_sizes_that_fail_refused_every_run(store, sympy_checks):
    config = json.loads((Path(__file__).parents[1] / "formulas" / "presets" / "qwen3-0.6b.json").read_text())
    Model.load("qwen3-0.6b")
    for _ in range(2):
        with pytest.raises(ConfigError, match="n_heads % n_kv_heads == 0 does not hold"):
            Model.from_config({**config, "num_attention_heads": 15})
        _next_run()
    sympy_checks.clear()
    Model.load("qwen3-1.7b")  # the structure of qwen3-0.6b, at other sizes
    assert sympy_checks


def test_a_memo_the_run_changes_is_never_kept(store):
    """The workload requirements a model substitutes are a memo its callers fill: this run's alone."""
    model = Model.load("qwen3-vl-8b")
    model.check_workload(seq=4096)
    graph = model.graph()
    assert "workload relations" in graph._derived
    assert all(key != "workload relations" for key, _ in _keys(graph))


def _keys(graph) -> list:
    """The keys the graph's keeper was given this run, with their store entries."""
    pending = {entry for entry, _ in kept_derivations._pending()}
    return [(key, graph.keeper._entry(key)) for key in graph._derived if graph.keeper._entry(key) in pending]


def test_nothing_is_kept_with_the_cache_off(store, monkeypatch):
    monkeypatch.setenv("SYMFORM_CACHE", "off")
    phase_work(Model.load("qwen3-0.6b"), "train")
    assert Model.load("qwen3-0.6b").graph().keeper is None
    kept_derivations.keep_pending()
    monkeypatch.delenv("SYMFORM_CACHE")
    assert _entries() == {}


def _kept_phase_document() -> tuple[str, dict, roofline.PhaseWork]:
    work = phase_work(Model.load("qwen3-0.6b"), "prefill")
    kept_derivations.keep_pending()
    (entry,) = [k for k, d in _entries().items() if _is_phase(d)]
    return entry, _entries()[entry], work


def _is_phase(document: dict) -> bool:
    value = document["value"]
    return isinstance(value, list) and value[:2] == ["object", "symform.analysis.roofline.PhaseWork"]


def _damaged(document: dict) -> dict[str, dict]:
    """One edit per way a kept derivation can be amiss: each must be refused and the value derived again."""
    table = document["table"]
    f = next(i for i, e in enumerate(table) if e[0] == "f")
    fields = document["value"][2]
    edits = {
        "a class never declared keepable": lambda d: d["value"].__setitem__(1, "subprocess.Popen"),
        "a class by another module's name": lambda d: d["value"].__setitem__(1, "os.PathLike"),
        "a field missing": lambda d: d["value"][2].pop("components"),
        "a field the class does not have": lambda d: d["value"][2].__setitem__("__class__", ["text", "x"]),
        "an unknown kind of value": lambda d: d["value"][2].__setitem__("notes", ["pickle", "gASV"]),
        "an entry past the table": lambda d: d["value"][2].__setitem__("phase", len(table) + 3),
        "a negative entry": lambda d: d["value"][2].__setitem__("phase", -1),
        "a node type off the allow-list": lambda d: d["table"][f].__setitem__(1, "Function"),
        "a symbol named by Python code": lambda d: d["table"].__setitem__(f, ["s", "__import__('os')", {}]),
        "a symbol with an assumption sympy has not": lambda d: d["table"].__setitem__(f, ["s", "x", {"evaluate": True}]),
        "a number past the digit budget": lambda d: d["value"][2].__setitem__("notes", ["tuple", [["int", "9" * 5000]]]),
        "a float that is not finite": lambda d: d["value"][2].__setitem__("notes", ["tuple", [["float", "nan"]]]),
        "values nested past the depth budget": lambda d: d["value"][2].__setitem__("notes", _nested(40)),
        "more values than the budget": lambda d: d["value"][2].__setitem__("notes", ["tuple", [["plain", None]] * (kept_tables.MAX_ITEMS + 1)]),
        "a mapping that is not a list of pairs": lambda d: d["value"][2].__setitem__("components", ["dict", {"a": 1}]),
        "no value at all": lambda d: d.pop("value"),
    }
    assert fields.keys() >= {"components", "notes", "phase"}
    damaged = {}
    for what, edit in edits.items():
        copied = copy.deepcopy(document)
        edit(copied)
        damaged[what] = copied
    return damaged


def _nested(depth: int) -> list:
    value: list = ["plain", None]
    for _ in range(depth):
        value = ["tuple", [value]]
    return value


def test_a_damaged_or_edited_entry_is_derived_again(store, phases):
    entry, document, work = _kept_phase_document()
    for what, damaged in _damaged(document).items():
        _entries()[entry] = damaged
        forget_structures()
        phases.clear()
        again = phase_work(Model.load("qwen3-0.6b"), "prefill")
        assert phases == ["prefill"], what
        assert again.components == work.components and again.total == work.total, what
    _entries()[entry] = document
    forget_structures()
    phases.clear()
    assert phase_work(Model.load("qwen3-0.6b"), "prefill").components == work.components
    assert phases == []  # the entry as written is read back


def test_a_value_that_does_not_read_back_equal_is_not_kept(store, monkeypatch):
    """Should a kept table rebuild otherwise (here: every entry read as 1), nothing derived is kept."""
    monkeypatch.setattr(kept_derivations, "rebuilt_table", lambda table: [sympy.Integer(1)] * len(table))
    phase_work(Model.load("qwen3-0.6b"), "prefill")
    kept_derivations.keep_pending()
    assert not any(_is_phase(d) for d in _entries().values())


def test_keys_are_written_the_same_in_every_run(tmp_path):
    """A key's text may not follow the order Python hashes sets in, which changes from run to run."""
    code = (
        "import sympy\n"
        "from symform.engine.kept_tables import key_text\n"
        "x, y, z = sympy.symbols('x y z', positive=True)\n"
        "print(key_text(('k', frozenset({(x, 1), (y, sympy.Rational(1, 3)), (z, x + 2 * y)}), frozenset({'a', 'b', 'c', 'd'}))))\n"
    )
    texts = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True, check=True).stdout for seed in range(6)}
    assert len(texts) == 1


def test_keys_that_differ_are_written_apart():
    x, whole = sympy.Symbol("x", positive=True), sympy.Symbol("x", integer=True)
    keys = [x, whole, x + 1, x + 2, 2 * x, x**2, x / 2, sympy.Integer(2), sympy.Float(2), sympy.Rational(1, 2), sympy.Max(x, 1),
            (x, 1), (x, "1"), (x, True), (x, None), frozenset({x}), frozenset({x, whole}), ("a", "b"), ("a,b",), ["a", "b"], Layout(tensor=2), Layout(data=2)]
    texts = [kept_tables.key_text(k) for k in keys]
    assert len(set(texts)) == len(keys)


def test_a_key_holding_what_no_document_can_is_not_kept(store):
    with pytest.raises(kept_tables.NotKept):
        kept_tables.key_text(("k", object()))
    graph = Model.load("qwen3-0.6b").graph()
    assert graph.keeper._entry(("k", object())) is None
    assert graph.keeper._entry(("k", sympy.Dummy("d"))) is None  # told apart from another Dummy "d" by this run's counter
    assert graph.derived(("k", sympy.Dummy("d")), lambda: 1) == 1


def test_a_second_run_of_a_command_derives_nothing_and_prints_the_same(tmp_path):
    argv = ["time", "qwen3-0.6b", "--train", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "1024", "--flash"]
    first, second = two_runs(tmp_path, "symform.analysis.roofline:_phase_work", argv)
    assert first["status"] == second["status"] == 0
    assert first["calls"] and second["calls"] == []  # every phase's work read back
    assert first["printed"] == second["printed"] and "step" in first["printed"]
