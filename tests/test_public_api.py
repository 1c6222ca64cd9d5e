"""symform's public API: the names ``symform/__init__.py`` exports, and every module under one name.

What the README, docs/*.md and the example notebooks show must run: each name they import or spell
as ``symform.a.b.c`` resolves, a name the top level exports is written ``symform.<name>`` (one
spelling), and no module answers to a second, shorter path (the flat ``symform.<module>`` that once named
``symform.analysis.memory.memory`` and every other module).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest

import symform

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "symform"
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "examples").glob("*.ipynb"), *(ROOT / "examples").glob("**/*")])
DOTTED = re.compile(r"(?<![\w./-])symform(?:\.[A-Za-z_]\w*)+")
FENCE = re.compile(r"^```(?:python|py|pycon)\s*\n(.*?)^```", re.M | re.S)


def _code_blocks(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return ["".join(cell["source"]) for cell in json.loads(text)["cells"] if cell["cell_type"] == "code"]
    if path.suffix == ".py":
        return [text]
    return [re.sub(r"^(>>> |\.\.\. )", "", block, flags=re.M) for block in FENCE.findall(text)]


def _prose(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
    return text


def _imports(block: str) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of each symform import in a code block; a block that does not parse is read line by line."""
    try:
        nodes = list(ast.walk(ast.parse(block)))
    except SyntaxError:
        nodes = []
        for line in block.splitlines():
            try:
                nodes += ast.parse(line.strip()).body
            except SyntaxError:
                continue
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "symform":
            found.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] == "symform"]
    return found


def _documented() -> list[tuple[str, str]]:
    """(where, dotted name) for every symform name the documents import or spell out."""
    names = []
    for path in DOCUMENTS:
        if not path.is_file() or path.suffix not in (".md", ".ipynb", ".py"):
            continue
        where = str(path.relative_to(ROOT))
        for block in _code_blocks(path):
            for module, imported in _imports(block):
                names.append((where, module))
                names += [(where, f"{module}.{name}") for name in imported]
        names += [(where, dotted) for dotted in DOTTED.findall(_prose(path))]
    return sorted(set(names))


def _resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest module prefix that imports, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def test_the_documents_name_symform_somewhere():
    """The scan below reads what it should: README's `symform.load` and an import from a doc page."""
    documented = {name for _, name in _documented()}
    assert {"symform.load", "symform.training_memory", "symform.Layout"} <= documented


@pytest.mark.parametrize("where, dotted", _documented())
def test_every_documented_name_is_importable(where, dotted):
    try:
        _resolve(dotted)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{where} names {dotted}, which does not import ({e}); write the module's full path or a name in symform.__all__")


def _module_path_imports() -> list[tuple[str, str, str]]:
    found = []
    for path in DOCUMENTS:
        if path.is_file() and path.suffix in (".md", ".ipynb", ".py"):
            for block in _code_blocks(path):
                found += [(str(path.relative_to(ROOT)), module, name) for module, names in _imports(block) if module != "symform" for name in names]
    return found


def test_a_public_name_has_one_spelling_in_the_documents():
    """``from symform import Layout``, never ``from symform.analysis.memory.memory import Layout`` beside it."""
    twice = sorted(
        f"{where}: from {module} import {name} (write `from symform import {name}`)"
        for where, module, name in _module_path_imports()
        if name in symform.__all__ and getattr(symform, name) is getattr(importlib.import_module(module), name, None)
    )
    assert twice == []


def test_the_public_api_is_small_and_every_name_loads():
    assert len(symform.__all__) <= 40
    assert len(set(symform.__all__)) == len(symform.__all__)
    assert all(getattr(symform, name) is not None for name in symform.__all__)


def _module_names() -> list[str]:
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__"))


@pytest.mark.parametrize("stem", sorted({name.rsplit(".", 1)[1] for name in _module_names()}))
def test_no_module_answers_to_a_flat_alias(stem):
    """`symform.<module>` was once a second name of every module (`symform.analysis.memory.memory`): no such alias is left."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"symform.{stem}")
    if stem in symform.__all__:  # `symform.derive` is the function, not its module
        assert not isinstance(getattr(symform, stem), types.ModuleType)
    else:
        with pytest.raises(AttributeError):
            getattr(symform, stem)


def test_every_loaded_module_is_known_by_its_own_path_only():
    """Import every module; sys.modules then holds each under the name it was defined with, and no other."""
    for name in _module_names():
        if name.endswith(("oracle_check", ".web")):  # torch, transformers, the web extra: their own tests
            continue
        importlib.import_module(name)
    aliased = sorted(key for key, module in sys.modules.items() if key.split(".")[0] == "symform" and module is not None and module.__name__ != key)
    assert aliased == []
