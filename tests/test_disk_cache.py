"""The cache of parsed files and expressions kept between runs: what it gives back is what parsing gives,
node for node, and a missing, corrupt or unwritable cache only costs time."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
import sympy

from symform.engine.store import data, disk_cache
from symform.engine.language import safe_expr
from symform.engine.language.declarations import component_files, parse_components
from symform.engine.language.vocabulary import default_vocabulary


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory, and no store already read in this process."""
    monkeypatch.setenv("SYMFORM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SYMFORM_CACHE", raising=False)
    monkeypatch.setattr(data, "_TABLES", disk_cache.Store("tables"))
    safe_expr._store.cache_clear()
    yield tmp_path
    safe_expr._store.cache_clear()


def _start_again() -> None:
    """As a new process would: the stores read from disk again."""
    safe_expr._store().save()
    data._TABLES.save()
    safe_expr._store.cache_clear()
    data._TABLES = disk_cache.Store("tables")


def _expressions(value):
    """Every sympy object in a parsed component, in a fixed order, as sympy's exact repr (structure and assumptions)."""
    if isinstance(value, sympy.Basic):
        yield sympy.srepr(value)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield f.name
            yield from _expressions(getattr(value, f.name))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield repr(k)
            yield from _expressions(v)
    elif isinstance(value, (tuple, list, frozenset)):
        for v in sorted(value) if isinstance(value, frozenset) else value:
            yield from _expressions(v)
    else:
        yield repr(value)


def _bundled():
    tables = {}
    for path in component_files():
        tables.update(data.read_toml(path))
    return parse_components(tables, default_vocabulary(), "formulas/components")


def test_every_bundled_component_rebuilds_from_the_cache_node_for_node(fresh_cache):
    parsed = _bundled()  # nothing kept yet: parsed, and kept
    _start_again()
    assert list(fresh_cache.glob("expressions-*.json")) and list(fresh_cache.glob("tables-*.json"))
    recalled = {"hits": 0}
    recall = safe_expr._recall

    def counting(key, names, relation):
        found = recall(key, names, relation)
        recalled["hits"] += found is not None
        return found

    with pytest.MonkeyPatch.context() as m:
        m.setattr(safe_expr, "_recall", counting)
        cached = _bundled()
    assert recalled["hits"] > 100  # the cache was used, not parsed around
    assert list(cached) == list(parsed)
    for name in parsed:
        assert list(_expressions(cached[name])) == list(_expressions(parsed[name])), name


def test_a_corrupt_cache_is_not_read(fresh_cache):
    first = safe_expr.parse("2*d + max(d, 3)", {"d": sympy.Symbol("d", integer=True, positive=True)})
    _start_again()
    (store,) = fresh_cache.glob("expressions-*.json")
    check, _, body = store.read_text().partition("\n")
    store.write_text(check + "\n" + body.replace('"i","2"', '"i","7"'))  # a changed entry no longer matches its hash
    again = safe_expr.parse("2*d + max(d, 3)", {"d": sympy.Symbol("d", integer=True, positive=True)})
    assert sympy.srepr(again) == sympy.srepr(first)
    store.write_text("not json")
    safe_expr._store.cache_clear()
    assert sympy.srepr(safe_expr.parse("2*d + max(d, 3)", {"d": sympy.Symbol("d", integer=True, positive=True)})) == sympy.srepr(first)


def test_an_entry_that_does_not_rebuild_is_parsed_again(fresh_cache):
    d = sympy.Symbol("d", integer=True, positive=True)
    first = safe_expr.parse("d*(d + 1)", {"d": d})
    store = safe_expr._store()
    for key in list(store._load()):
        store._load()[key] = ["f", "NoSuchNode", []]
    assert sympy.srepr(safe_expr.parse("d*(d + 1)", {"d": d})) == sympy.srepr(first)


def test_the_same_text_over_other_symbols_is_another_entry(fresh_cache):
    positive = safe_expr.parse("d - 1", {"d": sympy.Symbol("d", integer=True, positive=True)})
    anything = safe_expr.parse("d - 1", {"d": sympy.Symbol("d")})
    assert positive.free_symbols != anything.free_symbols
    _start_again()
    assert safe_expr.parse("d - 1", {"d": sympy.Symbol("d")}) == anything


def test_an_unwritable_or_disabled_cache_only_costs_time(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("SYMFORM_CACHE_DIR", str(blocked / "below"))  # a directory that cannot be made
    safe_expr._store.cache_clear()
    d = sympy.Symbol("d", integer=True, positive=True)
    assert safe_expr.parse("d**2", {"d": d}) == d**2
    safe_expr._store().save()  # silently nothing
    monkeypatch.setenv("SYMFORM_CACHE", "off")
    assert disk_cache.cache_dir() is None
    assert safe_expr.parse("d**2", {"d": d}) == d**2
    safe_expr._store.cache_clear()


def test_the_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("SYMFORM_CACHE", raising=False)
    monkeypatch.delenv("SYMFORM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_dir() == tmp_path / "symform"
    monkeypatch.setenv("SYMFORM_CACHE_DIR", str(tmp_path / "mine"))
    assert disk_cache.cache_dir() == tmp_path / "mine"


def test_a_relative_cache_directory_is_never_made_where_the_command_runs(tmp_path, monkeypatch):
    """XDG's rule: a relative XDG_CACHE_HOME is ignored; a relative SYMFORM_CACHE_DIR turns the cache off, and
    ~ means the home directory, not a folder named ~ wherever the command happens to run."""
    monkeypatch.delenv("SYMFORM_CACHE", raising=False)
    monkeypatch.delenv("SYMFORM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert disk_cache.cache_dir() == tmp_path / "home" / ".cache" / "symform"
    monkeypatch.setenv("SYMFORM_CACHE_DIR", "~/x")
    assert disk_cache.cache_dir() == tmp_path / "home" / "x"
    monkeypatch.setenv("SYMFORM_CACHE_DIR", "x")
    assert disk_cache.cache_dir() is None
    assert "not an absolute path" in disk_cache.info()["chosen_by"]


def test_a_link_planted_in_the_cache_directory_is_never_written_through(fresh_cache):
    """A shared cache directory may hold links another user planted: where symform once wrote its temporary
    file (.NAME.PID.tmp), and in place of the store itself. Neither target is ever written."""
    import os

    outside = fresh_cache.parent / "outside.txt"
    outside.write_text("precious")
    store = disk_cache.Store("planted")
    (fresh_cache / f".{store.name}.{os.getpid()}.tmp").symlink_to(outside)
    (fresh_cache / store.name).symlink_to(outside)
    store.put("a", "x")
    store.save()
    assert outside.read_text() == "precious"
    assert not (fresh_cache / store.name).is_symlink() and disk_cache.Store("planted").get("a") == "x"


def test_cache_clear_removes_only_symforms_own_store_files(fresh_cache, capsys):
    from symform.interface.cli.cli import main

    store = disk_cache.Store("tables")
    store.put("a", "x")
    store.save()
    (fresh_cache / "notes.txt").write_text("mine")
    (fresh_cache / "tables-0123456789abcdef.json").symlink_to(fresh_cache / "notes.txt")  # a store's name, but a link
    assert main(["cache", "info", "--json"]) == 0
    import json

    found = json.loads(capsys.readouterr().out)
    assert found["directory"] == str(fresh_cache)
    assert [(f["file"], f["entries"], f["current"]) for f in found["files"]] == [(store.name, 1, True)]
    assert main(["cache", "clear"]) == 0
    assert "removed 1 file" in capsys.readouterr().out
    assert sorted(p.name for p in fresh_cache.iterdir()) == ["notes.txt", "tables-0123456789abcdef.json"]
    assert (fresh_cache / "notes.txt").read_text() == "mine"


def test_a_table_with_what_json_cannot_hold_is_not_kept(fresh_cache):
    assert disk_cache.plain_json({"a": [1, 2.5, "x", True, None, {"b": 3}]})
    assert not disk_cache.plain_json({"a": float("nan")})
    assert not disk_cache.plain_json({"a": (1, 2)})
    assert not disk_cache.plain_json({"a": 1.0, "b": sympy.Integer(1)})


def _rewrite(store, change) -> None:
    """Edit a store's entries and write it back with a matching hash, as a hand edit or another program could."""
    import json

    entries = json.loads(store.read_text().partition("\n")[2])
    body = json.dumps(change(entries), separators=(",", ":"))
    store.write_text(f"{disk_cache.digest(body)}\n{body}")
    store.chmod(0o600)
    safe_expr._store.cache_clear()


@pytest.mark.parametrize(
    "tree",
    [
        ["i", "9" * 200],  # past CONSTANT_DIGITS
        ["f", "Pow", [["f", "Add", [["n", "d"], ["i", "1"]]], ["i", "100000"]]],  # past the expansion budget
        ["f", "Add", [["i", "1"]] * 5000],  # more nodes than any parsed text gives
        ["f", "__import__", [["i", "1"]]],  # no such node: nothing is called by its name from the file
        ["f", "Pow", [["i", "10"], ["i", str(10**99 - 1)]]],  # a constant no parse would fold: evaluating it would never end
        ["f", "Pow", [["n", "d"], ["i", "65"]]],  # an exponent past MAX_EXPONENT
    ],
)
def test_an_edited_entry_past_a_budget_is_parsed_again(fresh_cache, tree):
    d = sympy.Symbol("d", integer=True, positive=True)
    first = safe_expr.parse("d + 1", {"d": d})
    _start_again()
    (store,) = fresh_cache.glob("expressions-*.json")
    _rewrite(store, lambda entries: {key: tree for key in entries})
    assert sympy.srepr(safe_expr.parse("d + 1", {"d": d})) == sympy.srepr(first)


@pytest.mark.skipif(not hasattr(__import__("os"), "getuid"), reason="file ownership is POSIX")
def test_a_store_others_could_write_is_not_read(fresh_cache):
    d = sympy.Symbol("d", integer=True, positive=True)
    first = safe_expr.parse("d + 1", {"d": d})
    _start_again()
    (store,) = fresh_cache.glob("expressions-*.json")
    assert store.stat().st_mode & 0o077 == 0  # written for this user only
    _rewrite(store, lambda entries: {key: ["f", "Add", [["n", "d"], ["i", "2"]]] for key in entries})
    assert safe_expr.parse("d + 1", {"d": d}).subs(d, 1) == 3  # this user's own edit is read: trusted as their files are
    store.chmod(0o666)
    safe_expr._store.cache_clear()
    assert safe_expr.parse("d + 1", {"d": d}) == first


def test_a_store_past_its_size_bound_is_not_read(fresh_cache, monkeypatch):
    d = sympy.Symbol("d", integer=True, positive=True)
    first = safe_expr.parse("d + 1", {"d": d})
    _start_again()
    (store,) = fresh_cache.glob("expressions-*.json")
    _rewrite(store, lambda entries: {key: ["f", "Add", [["n", "d"], ["i", "2"]]] for key in entries})
    monkeypatch.setattr(disk_cache, "MAX_BYTES", 10)
    assert safe_expr.parse("d + 1", {"d": d}) == first


def test_a_store_that_would_grow_past_its_bound_keeps_only_what_its_run_added(fresh_cache):
    """Every run reads a whole store: one bounded by max_bytes starts afresh rather than grow past it."""
    first = disk_cache.Store("bounded", max_bytes=200)
    first.put("a", "x" * 120)
    first.save()
    second = disk_cache.Store("bounded", max_bytes=200)
    assert second.get("a") == "x" * 120
    second.put("b", "y" * 120)  # both would make a file past 200 bytes
    second.save()
    third = disk_cache.Store("bounded", max_bytes=200)
    assert third.get("a") is None and third.get("b") == "y" * 120


def _kept_substitution(expr, values):
    """``safe_expr.substituted`` worked out once (and kept), then recalled as a new process would."""
    first = safe_expr.substituted(expr, values)
    _start_again()
    recalled = {"hits": 0}
    get = safe_expr._store().get

    def counting(key):
        found = get(key)
        recalled["hits"] += found is not None
        return found

    with pytest.MonkeyPatch.context() as m:
        m.setattr(safe_expr._store(), "get", counting)
        again = safe_expr.substituted(expr, values)
    return first, again, recalled["hits"]


def test_a_kept_substitution_of_a_min_or_max_is_xreplace_node_for_node(fresh_cache):
    dropout, upcast = sympy.Symbol("dropout", integer=True, nonnegative=True), sympy.Symbol("upcast", integer=True, nonnegative=True)
    act, probs, soft = (sympy.Symbol(n, integer=True, positive=True) for n in ("act_bytes", "drops_probs", "softmax_upcast"))
    expr = sympy.Max(dropout * probs, sympy.Min(1, soft * upcast * (4 - act)))
    values = {probs: sympy.Integer(1), soft: sympy.Integer(1)}
    first, again, hits = _kept_substitution(expr, values)
    assert hits == 1
    assert sympy.srepr(first) == sympy.srepr(again) == sympy.srepr(expr.xreplace(values))


def test_a_kept_substitution_tells_apart_symbols_of_one_name(fresh_cache):
    positive, anything = sympy.Symbol("d", integer=True, positive=True), sympy.Symbol("d")
    n = sympy.Symbol("n", integer=True, positive=True)
    expr = sympy.Max(0, 3 - n - positive)
    first, again, _ = _kept_substitution(expr, {n: anything})
    assert sympy.srepr(first) == sympy.srepr(again) == sympy.srepr(expr.xreplace({n: anything}))
    assert safe_expr.substituted(sympy.Max(0, 3 - n - anything), {n: positive}) == sympy.Max(0, 3 - positive - anything)


def test_a_substitution_without_min_or_max_is_not_kept(fresh_cache):
    d = sympy.Symbol("d", integer=True, positive=True)
    assert safe_expr.substituted(2 * d + 1, {d: sympy.Integer(3)}) == 7
    assert not safe_expr._store()._added
