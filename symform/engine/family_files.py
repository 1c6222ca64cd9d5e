"""Family files that inherit: a family file may ``extend`` another and write only what differs.

``extends = "qwen3"`` starts from the table of ``qwen3.toml`` (in the same folder, else among symform's own
families), itself resolved first. Then the file's own keys apply:

- a value at the top level (``root``, ``source``, ``fields_in``) replaces the base's;
- a list of tables (``[[refuse]]``) adds to the base's (``drop = ["refuse"]`` first to replace them);
- a table (``fields``, ``bind``, ``counts``, ``choose``, ``conventions``, ``context``, ``per_layer``) merges key
  by key, and each of its entries replaces the base's entry of that name whole (a field's spec, a count, a choice);
- ``drop = ["bind.audio_tower", "per_layer"]`` removes inherited entries (``table.key``) or top-level keys.

A table keeps the base's order; an entry the base lacks goes right after the entry written above it in this
file (first where none is), so ``bind``'s order, which is the order a model's sizes are reported in, is
the order a reader of both files expects.

What names a file's own reader is never inherited: ``model_types``, ``when_present`` and
``section_model_types`` (two files reading one model type would clash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .data import formulas_dir, read_toml
from .errors import DeclarationError
from .names import is_identifier

OWN_KEYS = ("model_types", "when_present", "section_model_types")
_INHERITANCE_KEYS = ("extends", "drop")
_MAX_DEPTH = 16  # a chain of bases longer than this is a mistake, not a design


def family_table(path: Path) -> dict[str, Any]:
    """The family file's table with its bases applied: what FamilySpec validates."""
    return _resolved(Path(path), ())


def _resolved(path: Path, chain: tuple[str, ...]) -> dict[str, Any]:
    table = read_toml(path)
    base_name = table.get("extends")
    if base_name is None:
        if "drop" in table:
            raise DeclarationError(f"{path.name}: 'drop' removes inherited entries; it needs 'extends'")
        return table
    if not isinstance(base_name, str) or not is_identifier(base_name):
        raise DeclarationError(f"{path.name}: extends = {str(base_name)[:40]!r}; name another family file without '.toml' (extends = \"qwen3\")")
    here = (*chain, path.stem)
    if base_name in here:
        raise DeclarationError(f"{path.name}: extends {base_name!r}, which extends it back ({' -> '.join((*here, base_name))}); break the cycle")
    if len(here) > _MAX_DEPTH:
        raise DeclarationError(f"{path.name}: extends families {len(here)} deep; extend a family nearer the root")
    base = _resolved(_base_path(path, base_name), here)
    return inherit(base, table, path.name)


def _base_path(path: Path, name: str) -> Path:
    for folder in (path.parent, formulas_dir() / "families"):
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    raise DeclarationError(f"{path.name}: extends {name!r}, but there is no family file {name}.toml beside it or among symform's families")


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
            merged[key] = _merged_table(merged[key], value)
        elif _is_table_list(value) and _is_table_list(merged.get(key)):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _drop(table: dict[str, Any], entry: str, origin: str) -> None:
    head, _, rest = entry.partition(".")
    if rest:
        inner = table.get(head)
        if not isinstance(inner, dict) or rest not in inner:
            raise DeclarationError(f"{origin}: drop names {entry!r}, which the base family does not have; remove it from drop")
        table[head] = {k: v for k, v in inner.items() if k != rest}
    elif head in table:
        del table[head]
    else:
        raise DeclarationError(f"{origin}: drop names {entry!r}, which the base family does not have; remove it from drop")


def _merged_table(base: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The base's entries in their order, own's replacing them in place; a new entry right after the one written
    above it in ``own`` (first where none is)."""
    keys = list(base)
    cursor: int | None = None
    for key in own:
        if key in base:
            cursor = keys.index(key)
        elif cursor is None:
            keys.insert(0, key)
            cursor = 0
        else:
            cursor += 1
            keys.insert(cursor, key)
    return {k: own[k] if k in own else base[k] for k in keys}
