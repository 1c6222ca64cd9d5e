"""Conditions in declarations: named predicates, declared once in formulas/predicates.toml.

A declaration says ``a if fp32_copy else b`` rather than encoding the flag as
arithmetic that happens to give 0 or 1. The parser (:mod:`.safe_expr`) reads a
predicate's text where it is used, over the names in force there (a component's
own ``n_kv_heads``), and wraps the condition it gives in :class:`NamedCondition`:
evaluation sees the condition, LaTeX and derivations see the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Mapping

import sympy
from sympy.core.symbol import Str
from sympy.logic.boolalg import BooleanFunction

from ..store.data import formulas_dir, read_toml
from ..errors import DeclarationError
from .names import is_identifier


@dataclass(frozen=True)
class PredicateDef:
    """A named condition as declared: its name, its text (parsed where it is used) and what it means."""

    name: str
    when: str
    doc: str


class NamedCondition(BooleanFunction):
    """``NamedCondition(Str(name), condition)``: the condition, printed by its name.

    Substituting values into it substitutes them into the condition; once the condition is
    settled (true or false) the name goes and the truth value stays.
    """

    @classmethod
    def eval(cls, name, condition):
        if condition is sympy.true or condition is sympy.false:
            return condition
        return None

    @property
    def name(self) -> str:
        return self.args[0].name

    @property
    def condition(self) -> sympy.Basic:
        return self.args[1]

    def _sympystr(self, printer) -> str:
        return self.name

    def _latex(self, printer) -> str:
        return r"\mathrm{" + self.name.replace("_", r"\_") + "}"

    def _numpycode(self, printer) -> str:  # numpy and plain Python compute the condition itself
        return printer._print(self.condition)

    _pythoncode = _numpycode

    def _eval_simplify(self, **kwargs):
        return self


def named(name: str, condition: sympy.Basic) -> sympy.Basic:
    """``condition`` printed as ``name`` (a truth value stays a truth value)."""
    return NamedCondition(Str(name), condition)


def unnamed(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` with every named condition replaced by the condition it stands for."""
    if not expr.has(NamedCondition):
        return expr
    return expr.replace(lambda e: isinstance(e, NamedCondition), lambda e: unnamed(e.condition))


@cache
def predicates() -> Mapping[str, PredicateDef]:
    """The bundled named predicates (formulas/predicates.toml): name -> definition."""
    path = formulas_dir() / "predicates.toml"
    table = read_toml(path)
    out = {}
    for name, entry in table.items():
        if not is_identifier(name):
            raise DeclarationError(f"{path.name}: predicate name {name!r} is not an identifier; use letters, digits and _")
        if not isinstance(entry, dict) or set(entry) - {"when", "doc"} or not isinstance(entry.get("when"), str) or not isinstance(entry.get("doc"), str):
            raise DeclarationError(f"{path.name}: predicate {name!r} needs exactly when = \"condition\" and doc = \"what it means\"")
        out[name] = PredicateDef(name, entry["when"], entry["doc"])
    return MappingProxyType(out)
