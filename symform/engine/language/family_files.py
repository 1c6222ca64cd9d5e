"""Family files that inherit: a family file may ``extend`` another and write only what differs.

``extends = "qwen3"`` starts from the table of ``qwen3.toml`` (in the same folder, else among symform's own
families), itself resolved first; ``extends = ["qwen3_5", "qwen3_vision"]`` applies each in turn, the later over
the earlier, where a partial file in ``bases/`` (a vision tower's fields, a router's settings) holds what several
families share. Then the file's own keys apply:

- a value at the top level (``root``, ``source``, ``fields_in``) replaces the base's;
- a list of tables (``[[refuse]]``) adds to the base's (``drop = ["refuse"]`` first to replace them);
- a table (``fields``, ``bind``, ``counts``, ``choose``, ``conventions``, ``context``, ``per_layer``) merges key
  by key; a field's spec replaces the base's whole (it is read as one), while a count or a choice merges key by
  key again (``counts.n_local_layers.when`` alone changes which layers a count takes; ``cases`` replaces whole);
- ``drop = ["bind.audio_tower", "per_layer", "counts.n_local_layers.when"]`` removes inherited entries (a dotted
  path) or top-level keys.

A table keeps the base's order; an entry the base lacks goes right after the entry written above it in this
file (at the end where none is), so ``bind``'s order, which is the order a model's sizes are reported in, is
the order a reader of both files expects.

What names a file's own reader is never inherited: ``model_types``, ``when_present`` and
``section_model_types`` (two files reading one model type would clash).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from ..store.data import formulas_dir, read_toml
from ..errors import DeclarationError
from .names import is_identifier

OWN_KEYS = ("model_types", "when_present", "section_model_types")
_INHERITANCE_KEYS = ("extends", "drop")
BASES = "bases"  # the folder of partial family files: what several families share, never read as a family alone
_MAX_DEPTH = 16
WHOLE_ENTRIES = ("fields",)  # tables whose entries replace the base's whole  # a chain of bases longer than this is a mistake, not a design


def family_table(path: Path) -> dict[str, Any]:
    """The family file's table with its bases applied: what FamilySpec validates (and never changes)."""
    path = Path(path)
    return _bundled(path) if _is_bundled(path) else _resolved(path, ())


def _is_bundled(path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(formulas_dir().resolve())
    except (OSError, ValueError):
        return False


_RESOLVING: set[Path] = set()


@cache
def _bundled(path: Path) -> dict[str, Any]:
    """A bundled family file resolved once per process: every family's reader is built when one config is read,
    and most extend the same few files."""
    if path in _RESOLVING:
        raise DeclarationError(f"{path.name}: extends a family that extends it back; break the cycle")
    _RESOLVING.add(path)
    try:
        return _resolved(path, ())
    finally:
        _RESOLVING.discard(path)


def _resolved(path: Path, chain: tuple[str, ...]) -> dict[str, Any]:
    table = read_toml(path)
    bases = table.get("extends")
    if bases is None:
        if "drop" in table:
            raise DeclarationError(f"{path.name}: 'drop' removes inherited entries; it needs 'extends'")
        return table
    names = [bases] if isinstance(bases, str) else bases
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and is_identifier(n) for n in names):
        raise DeclarationError(f"{path.name}: extends = {str(bases)[:60]}; name a family file without '.toml' (extends = \"qwen3\"), or a list of them")
    here = (*chain, path.stem)
    if len(here) > _MAX_DEPTH:
        raise DeclarationError(f"{path.name}: extends families {len(here)} deep; extend a family nearer the root")
    merged: dict[str, Any] | None = None
    for name in names:
        if name in here:
            raise DeclarationError(f"{path.name}: extends {name!r}, which extends it back ({' -> '.join((*here, name))}); break the cycle")
        where = _base_path(path, name)
        base = _bundled(where) if _is_bundled(where) else _resolved(where, here)
        merged = base if merged is None else inherit(merged, base, path.name)
    return inherit(merged, table, path.name)


def _base_path(path: Path, name: str) -> Path:
    """A family file beside this one, or a partial one (a tower, a router's settings) in the bases/ folder there;
    then symform's own."""
    bundled = formulas_dir() / "families"
    for folder in (path.parent, path.parent / BASES, bundled, bundled / BASES):
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    raise DeclarationError(f"{path.name}: extends {name!r}, but there is no family file {name}.toml beside it, in {BASES}/ there or among symform's families")


def inherit(base: Mapping[str, Any], own: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """``own`` applied over ``base`` (both plain tables as read from TOML)."""
    merged = {k: v for k, v in base.items() if k not in OWN_KEYS and k not in _INHERITANCE_KEYS}
    drop = own.get("drop", [])
    if not isinstance(drop, list) or not all(isinstance(d, str) for d in drop):
        raise DeclarationError(f"{origin}: drop must be a list of inherited entries (\"bind.audio_tower\", \"per_layer\")")
    for entry in drop:
        _drop(merged, entry, origin)
    for key, value in own.items():
        if key in _INHERITANCE_KEYS:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged_table(merged[key], value, whole=key in WHOLE_ENTRIES)
        elif _is_table_list(value) and _is_table_list(merged.get(key)):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _drop(table: dict[str, Any], entry: str, origin: str) -> None:
    """Remove a dotted path from ``table``, copying the tables along it (the base's own stay as read)."""
    *path, last = entry.split(".")
    inner: Any = table
    for step in path:
        if not isinstance(inner, dict) or not isinstance(inner.get(step), dict):
            inner = None
            break
        inner[step] = dict(inner[step])
        inner = inner[step]
    if not isinstance(inner, dict) or last not in inner:
        raise DeclarationError(f"{origin}: drop names {entry!r}, which the base family does not have; remove it from drop")
    del inner[last]


def _merged_table(base: Mapping[str, Any], own: Mapping[str, Any], *, whole: bool) -> dict[str, Any]:
    """The base's entries in their order, own's replacing them in place (an entry that is a table merging key by
    key, unless ``whole``); a new entry right after the one written above it in ``own`` (at the end where none is)."""
    keys = list(base)
    cursor: int | None = None
    for key in own:
        if key in base:
            cursor = keys.index(key)
        elif cursor is None:
            keys.append(key)
            cursor = len(keys) - 1
        else:
            cursor += 1
            keys.insert(cursor, key)
    return {k: _entry(base.get(k), own[k], whole) if k in own else base[k] for k in keys}


def _entry(base: Any, own: Any, whole: bool) -> Any:
    if whole or not isinstance(base, dict) or not isinstance(own, dict):
        return own
    return {**base, **own}


def reading_order(specs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The fields in declaration order, except that a field whose default (or value for null) names another field
    comes after that one: a family that extends another may add a field its base's defaults read."""
    names = set(specs)
    order: dict[str, Any] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise DeclarationError(f"the defaults of fields {', '.join(visiting[visiting.index(name):])} name each other in a cycle; give one a number")
        visiting.append(name)
        spec = specs[name]
        if spec.type not in ("str", "pattern"):  # a text field's default is the text itself
            for text in (spec.default, spec.if_null):
                if isinstance(text, str):
                    for other in re.findall(r"[A-Za-z_]\w*", text):
                        if other in names and other != name:
                            visit(other)
        visiting.pop()
        order[name] = spec

    for name in specs:
        visit(name)
    return list(order.items())
