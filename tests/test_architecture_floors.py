"""The three floors of symform's package (docs/architecture.md): engine ← analysis ← interface.

Each module's imports are read from its source, the ones inside functions included, so
a lazy import cannot hide a dependency that points the wrong way.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import symform

PACKAGE = Path(symform.__file__).parent
FLOORS = ("engine", "analysis", "interface")  # lowest first: each may import only its own floor and those before it


def _modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
        for floor in FLOORS
        for p in sorted((PACKAGE / floor).rglob("*.py"))
        if p.stem != "__init__"
    }


def _imported_symform_modules(path: Path, floor: str) -> set[str]:
    """Dotted names under symform (``analysis.memory``) that the file imports, absolute or relative."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
                if not base.startswith("symform"):
                    continue
                parts = base.split(".")[1:]
            else:
                package = list(path.relative_to(PACKAGE).parent.parts) if path.is_relative_to(PACKAGE) else [floor]
                parts = package[: max(0, len(package) + 1 - node.level)] + (node.module.split(".") if node.module else [])
            if parts:
                found.add(".".join(parts))
            else:  # from .. import analysis
                found.update(alias.name for alias in node.names)
            if len(parts) == 1 and parts[0] in FLOORS:  # from ..analysis import flash_attention
                found.update(f"{parts[0]}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("symform."))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.add(node.args[0].value.lstrip("."))
    return found


def _floor(dotted: str) -> str | None:
    head = dotted.split(".")[0]
    if head in FLOORS:
        return head
    return None


def test_every_module_sits_on_a_floor():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules outside the floors: {loose}; move each to symform/engine, analysis or interface"


def test_module_names_are_unique_across_floors():
    stems = [name.split(".")[-1] for name in _modules()]
    assert len(stems) == len(set(stems)), "symform.<module> must name one module"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_imports_a_higher_floor(name):
    floor = name.split(".")[0]
    level = FLOORS.index(floor)
    upward = sorted(d for d in _imported_symform_modules(_modules()[name], floor) if (f := _floor(d)) and FLOORS.index(f) > level)
    assert upward == [], f"symform/{name.replace('.', '/')}.py ({floor}) imports {upward} from a higher floor"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The parser behind the test above finds relative, absolute and lazy imports."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from ..interface.papers.notebook import breakdown\n"
        "import symform.interface.reports.plots\n"
        "def f():\n    from symform.analysis import memory\n    importlib.import_module('symform.interface.papers.latex')\n"
    )
    found = _imported_symform_modules(source, "engine")
    assert {"interface.papers.notebook", "interface.reports.plots", "analysis", "analysis.memory", "symform.interface.papers.latex"} <= found
    assert {_floor(d) for d in found} >= {"interface", "analysis"}


def test_derive_stays_the_function():
    importlib.import_module("symform.engine.graph.derive")
    assert callable(symform.derive) and symform.derive.__name__ == "derive"


def test_docs_architecture_names_every_module():
    """docs/architecture.md is the map of the code: every module is named there (in backticks), so a new one
    gets its line when it is added."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = sorted(p.stem for p in (root / "symform").rglob("*.py") if not p.stem.startswith("__"))
    assert [m for m in modules if f"`{m}`" not in text] == []
