"""The symbol table: the only place symform creates sympy symbols."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property
from types import MappingProxyType
from typing import Annotated, Literal, Mapping

import sympy

from ..store.derivation import Identity
from ..store.data import formulas_dir, read_toml
from ..budget import number_from_text
from ..errors import DeclarationError, describe_validation
from .latex_fragment import latex_problem
from .names import is_identifier
from .schema import After, SchemaError, build

Kind = Literal["architecture", "workload", "convention", "dtype", "derived", "ratio"]
Domain = Literal["positive_integer", "nonnegative_integer", "positive_rational"]

_ASSUMPTIONS: dict[str, dict[str, bool]] = {
    "positive_integer": {"integer": True, "positive": True},
    "nonnegative_integer": {"integer": True, "nonnegative": True},
    "positive_rational": {"rational": True, "positive": True},
}


def _safe_latex(text: str) -> str:
    problem = latex_problem(text)
    if problem:
        raise ValueError(f"latex {text[:40]!r} is refused: {problem}")
    return text


@dataclass(frozen=True, kw_only=True)
class SymbolSpec:
    latex: Annotated[str, After(_safe_latex)]
    kind: Kind
    description: str
    domain: Domain = "positive_integer"
    large: bool = False
    default: str | None = None
    tensor_parallel: bool = False  # Megatron-style tensor parallelism splits this size among the ranks
    most: int | None = None  # the greatest value: 1 for a switch (0 or 1)
    setting: bool = False  # a workload size a model carries for every command (with_conventions), without a default

    def __post_init__(self) -> None:
        if self.most is not None and (self.domain != "nonnegative_integer" or self.most < 1):
            raise ValueError(f"most = {self.most} needs the nonnegative_integer domain and a value of 1 or more")
        if self.default is not None:
            value = number_from_text(self.default, "default")  # ValueError names the problem
            if "integer" in self.domain and value.denominator != 1:
                raise ValueError(f"default {self.default!r} must be a whole number ({self.domain})")
            if value < 0 or (value == 0 and self.domain != "nonnegative_integer"):
                raise ValueError(f"default {self.default!r} is outside the domain {self.domain}")
            if self.most is not None and value > self.most:
                raise ValueError(f"default {self.default!r} is above most = {self.most}")


def make_symbol(name: str, domain: Domain) -> sympy.Symbol:
    return sympy.Symbol(name, **_ASSUMPTIONS[domain])


@dataclass(frozen=True)
class Entry:
    name: str
    symbol: sympy.Symbol
    spec: SymbolSpec

    @property
    def latex(self) -> str:
        return self.spec.latex


@dataclass(frozen=True)
class Vocabulary:
    entries: Mapping[str, Entry] = field(default_factory=dict)

    def derivation_key(self) -> Identity:  # built once per set of files: by identity (engine/derivation)
        return Identity(self)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> sympy.Symbol:
        try:
            return self.entries[name].symbol
        except KeyError:
            raise DeclarationError(f"unknown symbol {name!r}; known symbols: {', '.join(self.entries)}") from None

    def entry(self, name: str) -> Entry:
        self[name]
        return self.entries[name]

    def names(self, *kinds: str) -> list[str]:
        return [n for n, e in self.entries.items() if not kinds or e.spec.kind in kinds]

    def symbols(self, *kinds: str) -> list[sympy.Symbol]:
        return [self.entries[n].symbol for n in self.names(*kinds)]

    @property
    def tensor_parallel(self) -> list[sympy.Symbol]:
        return [e.symbol for e in self.entries.values() if e.spec.tensor_parallel]

    @property
    def large(self) -> frozenset[sympy.Symbol]:
        return frozenset(e.symbol for e in self.entries.values() if e.spec.large)

    def settable(self) -> list[str]:
        """Names a model may carry a value of (with_conventions): those with a default, and the workload sizes
        declared settings, which have none (a command that reads one asks for it)."""
        return [n for n, e in self.entries.items() if e.spec.default is not None or e.spec.setting]

    def defaults(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Default values of conventions and storage sizes, as exact sympy numbers."""
        return dict(self._defaults)

    @cached_property
    def _defaults(self) -> Mapping[sympy.Symbol, sympy.Expr]:
        return MappingProxyType({e.symbol: sympy.Rational(number_from_text(e.spec.default, e.name)) for e in self.entries.values() if e.spec.default is not None})

    def by_symbol(self, symbol: sympy.Symbol) -> Entry:
        return self.entries[symbol.name]

    @cached_property
    def domains(self) -> Mapping[str, str]:
        """Each name's domain, looked up on every exact evaluation."""
        return MappingProxyType({n: e.spec.domain for n, e in self.entries.items()})

    @cached_property
    def greatest(self) -> Mapping[str, int]:
        """The names with a greatest value (a switch's 1), by name."""
        return MappingProxyType({n: e.spec.most for n, e in self.entries.items() if e.spec.most is not None})

    @cached_property
    def least_ints(self) -> dict[str, int]:
        """Each name's least int value (0 where the domain is nonnegative, else 1), read on every exact evaluation."""
        return {n: 0 if domain == "nonnegative_integer" else 1 for n, domain in self.domains.items()}

    @cached_property
    def architecture(self) -> frozenset[str]:
        return frozenset(self.names("architecture"))

    @cached_property
    def symbol_set(self) -> frozenset[sympy.Symbol]:
        return frozenset(e.symbol for e in self.entries.values())

    @cached_property
    def settings(self) -> frozenset[str]:
        """Names with a default that select an expression rather than a value (past): not conventions or storage sizes."""
        return frozenset(e.name for e in self.entries.values() if e.spec.default is not None and e.spec.kind not in ("convention", "dtype"))


def vocabulary_from_table(table: Mapping[str, object]) -> Vocabulary:
    entries = {}
    for name, raw in table.items():
        if not is_identifier(name):
            raise DeclarationError(f"symbol name {name!r} is not an identifier; use letters, digits and _")
        try:
            spec = build(SymbolSpec, raw)
        except SchemaError as e:
            raise DeclarationError(f"symbol {name!r}: {describe_validation(e)}") from None
        entries[name] = Entry(name, make_symbol(name, spec.domain), spec)
    return Vocabulary(MappingProxyType(entries))


@cache
def default_vocabulary() -> Vocabulary:
    return vocabulary_from_table(read_toml(formulas_dir() / "symbols.toml"))
