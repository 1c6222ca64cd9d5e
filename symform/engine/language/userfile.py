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

from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..store.data import read_toml
from .declarations import Library, Scalar, default_library, parse_components
from ..errors import ConfigError, DeclarationError, describe_validation
from .families import ModelSpec
from .vocabulary import Vocabulary, vocabulary_from_table


# Built on first validation (defer_build): a bundled model never reads a declaration file.
class ModelDecl(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    root: str
    name: str | None = None
    doc: str = ""
    arguments: dict[str, Scalar] = Field(default_factory=dict)
    transformers: dict[str, Any] | None = None  # the config.json of the transformers model this declares, for symform check


class DeclarationFile(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    model: ModelDecl
    symbols: dict[str, dict[str, Any]] = Field(default_factory=dict)
    components: dict[str, dict[str, Any]] = Field(default_factory=dict)


def load_declaration_file(path: Path) -> tuple[ModelSpec, Library]:
    raw = read_toml(path)
    try:
        decl = DeclarationFile.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {describe_validation(e)}; see docs/declaring-architectures.md") from None
    base = default_library()
    vocabulary = _extended(base.vocabulary, decl.symbols, path)
    try:
        components = parse_components(decl.components, vocabulary, str(path), existing=base.components)
        library = Library(base.components, vocabulary).merged(components)
        library[decl.model.root]
    except DeclarationError as e:
        raise ConfigError(f"{path}: {e}") from None
    spec = ModelSpec(name=decl.model.name or path.stem, root=decl.model.root, arguments=MappingProxyType(decl.model.arguments), source=str(path), config=decl.model.transformers)
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
