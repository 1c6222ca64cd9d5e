"""The floors and rooms of symform's package (docs/architecture.md).

Three floors, engine ← analysis ← interface; on each floor, rooms (subpackages) in the order of
ROOMS, lowest first, the floor's own modules ("") below them all. A module may import its own room,
the rooms listed before its room on its floor, and anything on a lower floor; nothing else. No two
modules import each other, directly or around a circle.

Each module's imports are read from its source, the ones inside functions included (a lazy import
is still a dependency: it cannot hide one that points the wrong way, nor a circle).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import symform

PACKAGE = Path(symform.__file__).parent
FLOORS = ("engine", "analysis", "interface")  # lowest first: each may import only its own floor and those before it
ROOMS = {  # lowest first: a room may import the rooms before it on its floor ("" is the floor's own modules)
    "engine": ("", "store", "language", "algebra", "graph"),
    "analysis": ("devices", "parallel", "memory", "time", "serving", "plans", "sweeps"),
    "interface": ("options", "papers", "reports", "cli"),
}
MOST_MODULES_IN_A_FOLDER = 15
MOST_LINES_IN_A_MODULE = 800


def _modules() -> dict[str, Path]:
    """Every module, by its dotted name under symform (``analysis.memory.memory``)."""
    return {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
        for floor in FLOORS
        for p in sorted((PACKAGE / floor).rglob("*.py"))
        if p.stem != "__init__"
    }


def _package_of(path: Path, default: str) -> list[str]:
    return list(path.relative_to(PACKAGE).parent.parts) if path.is_relative_to(PACKAGE) else default.split(".")


def _imported_symform_modules(path: Path, package: str = "engine") -> set[str]:
    """Dotted names under symform (``analysis.memory.memory``) that the file imports, absolute or
    relative, at module level or inside functions; ``package`` places a file outside symform."""
    here = _package_of(path, package)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").split(".")[0] != "symform":
                    continue
                parts = node.module.split(".")[1:]
            else:
                parts = here[: max(0, len(here) + 1 - node.level)] + (node.module.split(".") if node.module else [])
            found.add(".".join(parts))
            found.update(".".join([*parts, alias.name]) for alias in node.names)  # from ..analysis.time import timing
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("symform."))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                name = node.args[0].value
                found.add(name.split(".", 1)[1] if name.startswith("symform.") else name.lstrip("."))
    return {name for name in found if name in _modules() or (PACKAGE / name.replace(".", "/")).is_dir()}


def _place(dotted: str) -> tuple[str, str] | None:
    """(floor, room) of a module or package under symform; None for the top level."""
    parts = dotted.split(".")
    if parts[0] not in FLOORS:
        return None
    room = parts[1] if len(parts) > 2 else ""
    if len(parts) == 2 and (PACKAGE / parts[0] / parts[1]).is_dir():
        room = parts[1]  # the room's package itself
    return parts[0], room


def _allowed(importer: str, imported: str) -> bool:
    (floor, room), place = _place(importer), _place(imported)
    if place is None:
        return False
    other_floor, other_room = place
    if other_floor != floor:
        return FLOORS.index(other_floor) < FLOORS.index(floor)
    return ROOMS[floor].index(other_room) <= ROOMS[floor].index(room)


def test_every_module_sits_on_a_floor():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules outside the floors: {loose}; move each to symform/engine, analysis or interface"


def test_every_room_is_declared():
    rooms = {(p.parent.name, p.name) for floor in FLOORS for p in (PACKAGE / floor).iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    declared = {(floor, room) for floor, rooms in ROOMS.items() for room in rooms if room}
    assert rooms == declared, "a new room gets its place in ROOMS (and in docs/architecture.md)"


def test_module_names_are_unique():
    stems = [name.split(".")[-1] for name in _modules()]
    assert sorted({s for s in stems if stems.count(s) > 1}) == [], "a module's name says what it holds, once"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_imports_a_higher_floor_or_room(name):
    wrong = sorted(d for d in _imported_symform_modules(_modules()[name]) if not _allowed(name, d))
    assert wrong == [], f"symform/{name.replace('.', '/')}.py imports {wrong}, above its room {_place(name)} (ROOMS)"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The parser behind the test above finds relative, absolute and lazy imports."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from ...interface.papers.notebook import breakdown\n"
        "import symform.interface.reports.plots\n"
        "def f():\n    from symform.analysis.time import timing\n    importlib.import_module('symform.interface.papers.latex')\n"
    )
    found = _imported_symform_modules(source, "engine.algebra")
    assert found == {"interface.papers.notebook", "interface.reports.plots", "analysis.time", "analysis.time.timing", "interface.papers.latex"}
    assert not any(_allowed("engine.algebra.probe", name) for name in found)
    assert _allowed("analysis.time.probe", "analysis.memory.memory") and not _allowed("analysis.memory.probe", "analysis.time.timing")
    assert _allowed("engine.graph.probe", "engine.errors") and not _allowed("engine.budget", "engine.algebra.multiplied")


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {d for d in _imported_symform_modules(path) if d in modules and d != name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    """Imports inside functions count: a lazy import that closes a circle still ties the modules together."""
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_folder_holds_too_many_modules():
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    crowded = {str(f.relative_to(PACKAGE)): n for f in folders if (n := len([p for p in f.glob("*.py") if p.stem != "__init__"])) > MOST_MODULES_IN_A_FOLDER}
    assert crowded == {}, f"split these folders into rooms: {crowded}"


def test_no_module_is_too_long():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MOST_LINES_IN_A_MODULE}
    assert long == {}, f"split these modules (over {MOST_LINES_IN_A_MODULE} lines): {long}"


def test_derive_stays_the_function():
    importlib.import_module("symform.engine.graph.derive")
    assert callable(symform.derive) and symform.derive.__name__ == "derive"


def test_docs_architecture_names_every_module():
    """docs/architecture.md is the map of the code: every module and every room is named there (in backticks),
    so a new one gets its line when it is added."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = sorted(p.stem for p in (root / "symform").rglob("*.py") if not p.stem.startswith("__"))
    assert [m for m in modules if f"`{m}`" not in text] == []
    rooms = sorted(f"{floor}/{room}" for floor, names in ROOMS.items() for room in names if room)
    assert [r for r in rooms if r not in text] == []
