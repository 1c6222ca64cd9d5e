"""Architectures declared by users in a TOML file of their own.

A file may add symbols to the vocabulary, declare components (primitives and
composites, exactly as symform's own ``formulas/components``) and name the
root component with default sizes::

    [model]
    root = "my_lm"
    arguments = { d_model = 4096, n_layers = 32 }

    [symbols.d_state]
    latex = "d_s"
    kind = "architecture"
    description = "state size of the mixer"

    [components.my_lm]
    ...

Everything goes through the same validation as the bundled declarations and
the same safe expression parser: nothing in the file is ever executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import sympy

from ..store.data import read_toml
from .declarations import Library, Scalar, default_library, parse_components
from ..errors import ConfigError, DeclarationError, describe_validation
from .families import ModelSpec
from .safe_expr import parse
from .vocabulary import Vocabulary, vocabulary_from_table
from .schema import SchemaError, build


@dataclass(frozen=True, kw_only=True)
class ModelDecl:
    root: str
    name: str | None = None
    doc: str = ""
    arguments: dict[str, Scalar] = field(default_factory=dict)
    transformers: dict[str, Any] | None = None  # the config.json of the transformers model this declares, for symform check
    # root arguments as expressions over [model.transformers]'s fields (a family's [bind]): what `symform import` writes
    bind: dict[str, str] = field(default_factory=dict)
    # quantity -> why it is not exact (what symform import could not map); symform check names them
    not_exact: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DeclarationFile:
    model: ModelDecl
    symbols: dict[str, dict[str, Any]] = field(default_factory=dict)
    components: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_declaration_file(path: Path, config: dict[str, Any] | None = None) -> tuple[ModelSpec, Library]:
    """The file's root and library; ``config`` in place of its ``[model.transformers]`` (another model's sizes,
    read through its ``[model.bind]``)."""
    raw = read_toml(path)
    try:
        decl = build(DeclarationFile, raw)
    except SchemaError as e:
        raise ConfigError(f"{path}: {describe_validation(e)}; see docs/declaring-architectures.md") from None
    if config is not None:
        decl = replace(decl, model=replace(decl.model, transformers=dict(config)))
    base = default_library()
    vocabulary = _extended(base.vocabulary, decl.symbols, path)
    try:
        components = parse_components(decl.components, vocabulary, str(path), existing=base.components)
        library = Library(base.components, vocabulary).merged(components)
        library[decl.model.root]
    except DeclarationError as e:
        raise ConfigError(f"{path}: {e}") from None
    arguments = {**_bound(decl.model, path), **decl.model.arguments}
    spec = ModelSpec(name=decl.model.name or path.stem, root=decl.model.root, arguments=MappingProxyType(arguments), source=str(path), config=decl.model.transformers, not_exact=MappingProxyType(dict(decl.model.not_exact)))
    return spec, library


def _extended(vocabulary: Vocabulary, table: dict[str, dict[str, Any]], path: Path) -> Vocabulary:
    clash = sorted(set(table) & set(vocabulary.entries))
    if clash:
        raise ConfigError(f"{path}: symbol {clash[0]!r} is already in symform's vocabulary; use it without redeclaring it, or pick another name")
    try:
        added = vocabulary_from_table(table)
    except DeclarationError as e:
        raise ConfigError(f"{path}: {e}") from None
    return Vocabulary(MappingProxyType({**vocabulary.entries, **added.entries}))


def _bound(model: ModelDecl, path: Path) -> dict[str, int]:
    """The arguments ``[model.bind]`` reads from the config's top-level numbers (true and false as 1 and 0)."""
    if not model.bind:
        return {}
    if model.transformers is None:
        raise ConfigError(f"{path}: [model.bind] reads the config's fields, but the file has no [model.transformers] table; add the config or give [model] arguments")
    numbers = {k: sympy.Integer(int(v)) for k, v in model.transformers.items() if isinstance(v, int)}
    result = {}
    for name, text in model.bind.items():
        missing = sorted(set(re.findall(r"[A-Za-z_]\w*", text)) - set(numbers))
        if missing:
            raise ConfigError(f"{path}: [model.bind] {name} = {text[:80]!r} reads {missing[0]!r}, which [model.transformers] does not give as a number; add it to the config")
        value = parse(text, numbers)
        if not value.is_Integer:
            raise ConfigError(f"{path}: [model.bind] {name} = {text[:80]!r} is {value}, not a whole number; check the config's values")
        result[name] = int(value)
    return result
