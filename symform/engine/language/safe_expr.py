"""A parser for expression strings that executes nothing.

Declaration files come from users and from the internet, so their expressions
are read with Python's ``ast`` parser (which only parses) and turned into sympy
objects node by node. Only numbers, names from a given namespace, arithmetic,
parentheses, a short list of functions and conditions (``a if c else b`` over
comparisons, 0/1 switches and named predicates joined by and, or, not) are
admitted; everything else
(attribute access, subscripts, lambdas, strings, keyword arguments, ...) is
refused with a one-line message. ``sympify``/``parse_expr`` are never used:
they call ``eval``.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from functools import cache
from typing import Any, Callable, Mapping

import sympy
from sympy.core.symbol import Str
from sympy.functions.elementary.piecewise import ExprCondPair

from ..store import disk_cache
from ..budget import check_constant, check_expansion, power_digits, quoted, CONSTANT_DIGITS, ROOT_LOG_DEPTH
from ..errors import ExpressionError
from ..budget import CONDITION_DEPTH
from .conditions import NamedCondition, PredicateDef, named
from .names import is_identifier  # re-exported: where it was first defined

MAX_LENGTH = 2000
MAX_NODES = 400
MAX_EXPONENT = 64
MAX_INTEGER_DIGITS = 40

FUNCTIONS: dict[str, tuple[Callable[..., sympy.Expr], int | None]] = {
    "min": (sympy.Min, None),
    "max": (sympy.Max, None),
    "ceil": (sympy.ceiling, 1),
    "floor": (sympy.floor, 1),
    "sqrt": (sympy.sqrt, 1),
    "log": (sympy.log, 1),
}

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Mod: lambda a, b: sympy.Mod(a, b),
}

_COMPARE = {
    ast.Eq: sympy.Eq,
    ast.NotEq: sympy.Ne,
    ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le,
    ast.Gt: sympy.Gt,
    ast.GtE: sympy.Ge,
}


def parse(text: object, names: Mapping[str, sympy.Basic], *, relation: bool = False) -> sympy.Basic:
    """Parse ``text`` into a sympy expression over ``names``.

    With ``relation=True`` the whole expression must be a condition: a
    comparison (``a % b == 0``), membership in a list-valued name
    (``i in mlp_only_layers``), or such conditions joined by and, or, not.
    Anywhere in an arithmetic expression, ``a if c else b`` picks by a condition
    c (compiled to a Piecewise); ``names`` may map a name to a
    :class:`~symform.engine.language.conditions.PredicateDef`, which c then uses by name.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ExpressionError(f"expected an expression string, got {type(text).__name__} {text!r}")
    source = str(text).strip()
    if not source:
        raise ExpressionError("empty expression; write a number or a formula such as 'd_model*d_ff'")
    if len(source) > MAX_LENGTH:
        raise ExpressionError(f"expression of {len(source)} characters is too long (limit {MAX_LENGTH})")
    if not source.isascii():
        # Python folds full-width and other compatibility letters to ASCII (ｄ_model is d_model): refuse them
        odd = next(c for c in source if not c.isascii())
        raise ExpressionError(f"non-ASCII character {odd!r} (U+{ord(odd):04X}) in {quoted(source)}; write names and operators in ASCII")
    key = _cache_key(source, names, relation)
    if key is not None:
        kept = _recall(key, names, relation)
        if kept is not None:
            return kept
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"cannot parse {source!r}: {e.msg}; use numbers, names, + - * / // % **, ( ), {', '.join(FUNCTIONS)} and a if condition else b") from None
    except (RecursionError, MemoryError):
        raise ExpressionError(f"expression {quoted(source)} nests too deeply to read; write it flatter") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExpressionError(f"expression {quoted(source)} is too complex (over {MAX_NODES} parts)")
    body = tree.body
    if relation != _is_condition(body, names):
        want = "a comparison such as 'n_heads % n_kv_heads == 0'" if relation else "an arithmetic expression, not a comparison"
        raise ExpressionError(f"{source!r}: expected {want}")
    converter = _Converter(source, names)
    result = converter.condition(body) if relation else converter.visit(body)
    if not relation:
        check_expansion(result, f"expression {quoted(source)}")
    if key is not None:
        _remember(key, result, names)
    return result


def _is_condition(node: ast.AST, names: Mapping[str, object]) -> bool:
    """Whether ``node`` is read as a truth value: a comparison, and/or/not, or a named predicate."""
    if isinstance(node, ast.Name):
        return isinstance(names.get(node.id), PredicateDef)
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))


_CONDITION_HELP = "a condition is a comparison (x > 0), a 0/1 switch, a named predicate, or such conditions joined by and, or, not"


class _Converter:
    def __init__(self, source: str, names: Mapping[str, sympy.Basic], expanding: tuple[str, ...] = (), read: list[int] | None = None):
        self.source = source
        self.names = names
        self.read = read if read is not None else [0]  # syntax nodes of the predicates read so far, shared with theirs
        self.roots_and_logs = 0  # sqrt and log calls around the node being read
        self.conditionals = 0  # a if c else b around the node being read
        self.expanding = expanding  # the named predicates being read, outermost first (a cycle is refused)

    def refuse(self, what: str) -> ExpressionError:
        return ExpressionError(f"{what} is not allowed in expressions ({self.source!r}); use numbers, names, arithmetic and {', '.join(FUNCTIONS)}")

    def visit(self, node: ast.AST) -> sympy.Basic:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise self.refuse(_describe(node))
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> sympy.Expr:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(f"the constant {value!r}")
        if isinstance(value, int):
            if len(str(abs(value))) > MAX_INTEGER_DIGITS:
                raise ExpressionError(f"integer with over {MAX_INTEGER_DIGITS} digits in {self.source!r}")
            return sympy.Integer(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ExpressionError(f"non-finite number in {self.source!r}")
        return sympy.Rational(repr(value))

    def visit_Name(self, node: ast.Name, *, allow_list: bool = False) -> sympy.Basic:
        try:
            value = self.names[node.id]
        except KeyError:
            known = ", ".join(sorted(self.names)) or "none"
            raise ExpressionError(f"unknown name {node.id!r} in {self.source!r}; known names: {known}") from None
        if isinstance(value, PredicateDef):
            raise ExpressionError(f"{node.id!r} is a condition, not a number, in {quoted(self.source)}; use it as 'a if {node.id} else b'")
        if isinstance(value, tuple) and not allow_list:
            raise ExpressionError(f"{node.id!r} is a list; use it only as 'i in {node.id}' in {self.source!r}")
        return value

    def operand(self, node: ast.AST) -> sympy.Expr:
        """A number-valued part of arithmetic: a comparison there (1 + (a > b)) is refused."""
        if _is_condition(node, self.names):
            raise ExpressionError(f"a comparison cannot be a number in {quoted(self.source)}; pick a number by it: 'a if condition else b'")
        return self.visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> sympy.Expr:
        if isinstance(node.op, ast.Not):
            return sympy.Not(self.condition(node.operand))
        operand = self.operand(node.operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        raise self.refuse(f"the operator {type(node.op).__name__}")

    def visit_BinOp(self, node: ast.BinOp) -> sympy.Expr:
        left, right = self.operand(node.left), self.operand(node.right)
        if isinstance(node.op, ast.Pow):
            return self.folded(self.power(left, right))
        try:
            combine = _BINARY[type(node.op)]
        except KeyError:
            raise self.refuse(f"the operator {type(node.op).__name__}") from None
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"division by zero in {self.source!r}")
        return self.folded(combine(left, right))

    def folded(self, value: sympy.Expr) -> sympy.Expr:
        if value.is_Number:
            check_constant(value, self.source)
        return value

    def power(self, base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
        if not exponent.is_Number:
            raise ExpressionError(f"exponents must be numbers in {self.source!r}; write d_model**2, not d_model**n")
        if abs(exponent) > MAX_EXPONENT:
            raise ExpressionError(f"exponent {exponent} is too large in {self.source!r} (limit {MAX_EXPONENT})")
        if base == 0 and exponent < 0:
            raise ExpressionError(f"division by zero in {self.source!r}")
        if power_digits(base, exponent) > CONSTANT_DIGITS:
            raise ExpressionError(f"{base}**{exponent} in {quoted(self.source)} has over {CONSTANT_DIGITS} digits, past symform's budget (symform.engine.budget.CONSTANT_DIGITS); write smaller numbers")
        return base**exponent

    def visit_Call(self, node: ast.Call) -> sympy.Expr:
        if not isinstance(node.func, ast.Name):
            raise self.refuse(f"calling {_describe(node.func)}")
        if node.func.id not in FUNCTIONS:
            name = node.func.id
            raise ExpressionError(f"unknown function {name!r} in {self.source!r}; allowed: {', '.join(FUNCTIONS)}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.refuse("keyword or starred arguments")
        function, arity = FUNCTIONS[node.func.id]
        if (arity is not None and len(node.args) != arity) or not node.args:
            want = f"{arity}" if arity is not None else "at least 1"
            raise ExpressionError(f"{node.func.id}() takes {want} argument(s), got {len(node.args)} in {self.source!r}")
        nests = node.func.id in ("sqrt", "log")
        self.roots_and_logs += nests
        try:
            if self.roots_and_logs > ROOT_LOG_DEPTH:
                raise ExpressionError(
                    f"sqrt and log nest over {ROOT_LOG_DEPTH} deep in {quoted(self.source)}, past symform's budget "
                    "(symform.engine.budget.ROOT_LOG_DEPTH): each level multiplies the work of evaluating them; write fewer nested calls"
                )
            arguments = [self.operand(a) for a in node.args]
            try:
                return self.folded(function(*arguments))
            except (TypeError, ValueError):  # sympy cannot order or apply it: an argument with no finite value (log(0))
                raise ExpressionError(f"{node.func.id}() of {', '.join(map(str, arguments))} has no value in {quoted(self.source)}; give arguments with a finite value") from None
        finally:
            self.roots_and_logs -= nests

    def condition(self, node: ast.AST) -> sympy.Basic:
        """A truth value: a comparison, and/or/not, a named predicate, or a 0/1 switch (true where it is not 0)."""
        if isinstance(node, ast.Name):
            value = self.names.get(node.id)
            if isinstance(value, PredicateDef):
                return self.predicate(value)
            if isinstance(value, sympy.Symbol) and value.is_integer and value.is_nonnegative and not value.is_positive:
                return sympy.Ne(value, 0)
            if node.id in self.names:
                raise ExpressionError(f"{node.id!r} is no condition in {quoted(self.source)} (it is never 0, or not a whole number); {_CONDITION_HELP}")
            return self.visit(node)  # the unknown name's message
        if not _is_condition(node, self.names):
            if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Call, ast.IfExp)):
                raise self.refuse(_describe(node))
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
                self.visit_Call(node)  # refuses the call, naming it
            raise ExpressionError(f"{quoted(ast.unparse(node))} is a number, not a condition, in {quoted(self.source)}; {_CONDITION_HELP}")
        return self.visit(node)

    def predicate(self, definition: PredicateDef) -> sympy.Basic:
        """A named predicate read over the names in force here, kept under its name."""
        if definition.name in self.expanding:
            cycle = " -> ".join((*self.expanding[self.expanding.index(definition.name):], definition.name))
            raise ExpressionError(f"predicate {definition.name!r} is defined in terms of itself ({cycle}); define it from comparisons")
        source = definition.when
        try:
            tree = ast.parse(source, mode="eval") if isinstance(source, str) and source.isascii() and len(source) <= MAX_LENGTH else None
        except (SyntaxError, RecursionError, MemoryError):
            tree = None
        if tree is None or sum(1 for _ in ast.walk(tree)) > MAX_NODES:
            raise ExpressionError(f"predicate {definition.name!r}: cannot read its condition {quoted(source)}; write a short comparison such as 'batch == 1'")
        self.read[0] += sum(1 for _ in ast.walk(tree))
        if self.read[0] > MAX_NODES:  # predicates that each use others twice would grow without this
            raise ExpressionError(f"the predicates {quoted(self.source)} uses read over {MAX_NODES} parts in all; define them more simply")
        inner = _Converter(source, self.names, (*self.expanding, definition.name), self.read)
        try:
            return named(definition.name, inner.condition(tree.body))
        except ExpressionError as e:
            if self.expanding:  # the innermost predicate names itself
                raise
            raise ExpressionError(f"predicate {definition.name!r}, used in {quoted(self.source)}: {e}") from None

    def visit_IfExp(self, node: ast.IfExp) -> sympy.Expr:
        self.conditionals += 1
        try:
            if self.conditionals > CONDITION_DEPTH:
                raise ExpressionError(
                    f"conditionals nest over {CONDITION_DEPTH} deep in {quoted(self.source)}, past symform's budget "
                    "(symform.engine.budget.CONDITION_DEPTH); join the conditions with and/or instead"
                )
            condition = self.condition(node.test)
            chosen, other = self.operand(node.body), self.operand(node.orelse)
            return sympy.Piecewise((chosen, condition), (other, True))
        finally:
            self.conditionals -= 1

    def visit_BoolOp(self, node: ast.BoolOp) -> sympy.Basic:
        join = sympy.And if isinstance(node.op, ast.And) else sympy.Or
        return join(*(self.condition(v) for v in node.values))

    def visit_Compare(self, node: ast.Compare) -> sympy.Basic:
        if len(node.ops) != 1:
            raise ExpressionError(f"chained comparisons are not allowed in {self.source!r}; write one comparison")
        op, right = node.ops[0], node.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)):
            return self.membership(node.left, right, negate=isinstance(op, ast.NotIn))
        make = _COMPARE.get(type(op))
        if make is None:
            raise self.refuse(f"the comparison {type(op).__name__}")
        # inside a conditional a comparison sympy settles (n_kv_heads == 1 at a bound n_kv_heads) picks its branch now
        return make(self.operand(node.left), self.operand(right), evaluate=self.conditionals > 0 or bool(self.expanding))

    def membership(self, left: ast.AST, right: ast.AST, *, negate: bool) -> sympy.Basic:
        if not isinstance(right, ast.Name):
            raise ExpressionError(f"'in' needs a list-valued name on its right in {self.source!r}")
        items = self.visit_Name(right, allow_list=True)
        value = self.visit(left)
        if not isinstance(items, tuple) or not value.is_Number:
            raise ExpressionError(f"'in' compares a number with a list in {self.source!r}")
        found = any(value == item for item in items)
        return sympy.true if found != negate else sympy.false


def _describe(node: ast.AST) -> str:
    return {
        "Attribute": "attribute access",
        "Subscript": "subscripting",
        "Lambda": "a lambda",
        "Call": "a call",
        "BoolOp": "and/or",
        "JoinedStr": "an f-string",
        "List": "a list",
        "Tuple": "a tuple",
        "Dict": "a dict",
        "Set": "a set",
        "NamedExpr": "assignment",
        "Starred": "starred arguments",
        "Await": "await",
        "GeneratorExp": "a generator",
        "ListComp": "a comprehension",
    }.get(type(node).__name__, f"the construct {type(node).__name__}")


# --- parsed expressions kept between runs -------------------------------------------------------------
# Building sympy expressions is most of what loading a model costs. An expression that parsed is kept
# in the user's cache (disk_cache) as a tree of plain JSON, keyed by its text and by what each name in
# it stood for, and rebuilt from the tree node by node with sympy's constructors told not to evaluate
# (the tree is already what evaluating gave). Only trees that rebuild equal to the parsed expression
# are kept; the budget checks passed when it was parsed and give the same answer for the same input.

_IDENTIFIERS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NODES: dict[str, Callable[..., sympy.Basic]] = {
    "Add": lambda *a: sympy.Add._from_args(a),
    "Mul": lambda *a: sympy.Mul._from_args(a),
    "Pow": lambda b, e: sympy.Pow(*_kept_power(b, e), evaluate=False),
    **{c.__name__: (lambda c: lambda *a: c(*a, evaluate=False))(c) for c in (sympy.Max, sympy.Min, sympy.floor, sympy.ceiling, sympy.Mod, sympy.log)},
    **{type(c(1, 2, evaluate=False)).__name__: (lambda c: lambda a, b: c(a, b, evaluate=False))(c) for c in _COMPARE.values()},
    **{c.__name__: (lambda c: lambda *a: c(*a))(c) for c in (sympy.And, sympy.Or, sympy.Not)},
    "Piecewise": lambda *a: sympy.Piecewise(*a, evaluate=False),
    "ExprCondPair": lambda e, c: ExprCondPair(e, c),
    "NamedCondition": lambda n, c: NamedCondition(n, c),
}
_SYMBOLS: dict[sympy.Symbol, str] = {}


def _kept_power(base: sympy.Expr, exponent: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """A kept power held to the budgets parsing holds a written one to (a number for exponent, within
    MAX_EXPONENT, a constant within CONSTANT_DIGITS): an edited cache cannot ask for 10**(10**99)."""
    if not exponent.is_Number or abs(exponent) > MAX_EXPONENT or power_digits(base, exponent) > CONSTANT_DIGITS:
        raise ValueError("a kept power past the budget")
    return base, exponent


MAX_TREE_NODES = 8 * MAX_NODES  # sympy's tree of a parsed text is of the order of its syntax tree


@cache
def _store() -> disk_cache.Store:
    return disk_cache.Store("expressions")


def _cache_key(source: str, names: Mapping[str, sympy.Basic], relation: bool) -> str | None:
    """What the parse depends on: the text, and what each name in it is (a symbol with its assumptions,
    or a list); None where a name stands for an expression or is unknown (not worth keeping)."""
    if not disk_cache.enabled():
        return None
    parts = [source, "relation" if relation else "value"]
    found = set(_IDENTIFIERS.findall(source))
    pending = sorted(found)
    while pending:  # a named predicate brings the names its condition reads
        name = pending.pop()
        value = names.get(name)
        if isinstance(value, PredicateDef):
            parts.append(f"{name}=predicate:{value.when}")
            more = set(_IDENTIFIERS.findall(value.when)) - found
            found |= more
            pending.extend(sorted(more))
        elif isinstance(value, sympy.Symbol):
            parts.append(f"{name}={value.name}:{symbol_description(value)}")
        elif isinstance(value, tuple) and all(isinstance(v, sympy.Integer) for v in value):
            parts.append(f"{name}={[int(v) for v in value]}")
        elif value is None and (name in FUNCTIONS or keyword.iskeyword(name)):
            parts.append(name)
        else:
            return None
    try:
        return disk_cache.Store.key("parse", *parts)
    except UnicodeEncodeError:
        return None


def _remember(key: str, result: sympy.Basic, names: Mapping[str, sympy.Basic]) -> None:
    _keep(key, result, {v: k for k, v in names.items() if isinstance(v, sympy.Symbol)}, names)


def _keep(key: str, result: sympy.Basic, symbols: Mapping[sympy.Symbol, str], names: Mapping[str, sympy.Basic]) -> None:
    """Keep ``result``'s tree under ``key`` where it rebuilds node for node (``symbols`` names each symbol in it,
    ``names`` gives them back)."""
    try:
        tree = _encode(result, symbols)
        if tree is not None and same_tree(_decode(tree, names, [MAX_TREE_NODES]), result):
            _store().put(key, tree)
    except Exception:  # noqa: BLE001: keeping is optional; what was worked out stands
        return


def _recall(key: str, names: Mapping[str, sympy.Basic], relation: bool) -> sympy.Basic | None:
    """The kept expression, held to the budgets its text was parsed within: a tree that does not rebuild
    or that breaks a budget (only a damaged or edited cache has one) is parsed again from its text."""
    try:
        tree = _store().get(key)
        if tree is None:
            return None
        result = _decode(tree, names, [MAX_TREE_NODES])
        if not relation:
            check_expansion(result, "a kept expression")
        return result
    except Exception:  # noqa: BLE001: parsing the text again is always right
        return None


def substituted(expr: sympy.Basic, values: Mapping[sympy.Symbol, sympy.Basic]) -> sympy.Basic:
    """``expr.xreplace(values)``, kept between runs where it rebuilds a Min or Max: sympy evaluates each one
    anew, comparing its arguments under their symbols' assumptions (a model's graph binds attention's
    Min and Max of conventions in every layer kind, the costliest step of building it)."""
    if not values or values.keys().isdisjoint(expr.free_symbols) or not expr.has(sympy.Min, sympy.Max) or not disk_cache.enabled():
        return expr.xreplace(values)
    return _kept(expr, values)


def _kept(expr: sympy.Basic, values: Mapping[sympy.Symbol, sympy.Basic]) -> sympy.Basic:
    """The substitution from the cache, keyed by both trees and every symbol's assumptions; else worked out and
    kept where its tree rebuilds node for node (as a parsed expression is)."""
    names = _symbol_names(expr, values)
    used = sorted((names[k], _encode(v, names)) for k, v in values.items() if k in expr.free_symbols)
    given = _encode(expr, names)
    if given is None or any(tree is None for _, tree in used):
        return expr.xreplace(values)
    described = sorted(f"{name}:{symbol_description(symbol)}" for symbol, name in names.items())
    key = disk_cache.Store.key("xreplace", json.dumps([given, used, described]))
    by_name = {name: symbol for symbol, name in names.items()}
    try:
        tree = _store().get(key)
        if tree is not None:
            return _decode(tree, by_name, [MAX_TREE_NODES])
    except Exception:  # noqa: BLE001: substituting again is always right
        pass
    result = expr.xreplace(values)
    _keep(key, result, names, by_name)
    return result


def _symbol_names(expr: sympy.Basic, values: Mapping[sympy.Symbol, sympy.Basic]) -> dict[sympy.Symbol, str]:
    """Every symbol of the substitution by a name of its own: its name, or its name and a number where two
    symbols share one (their assumptions differ)."""
    symbols = set(expr.free_symbols)
    for v in values.values():
        symbols |= getattr(v, "free_symbols", set())
    names: dict[sympy.Symbol, str] = {}
    taken: set[str] = set()
    for symbol in sorted(symbols, key=lambda s: (s.name, symbol_description(s))):
        name, i = symbol.name, 0
        while name in taken:
            i += 1
            name = f"{symbol.name}#{i}"
        names[symbol] = name
        taken.add(name)
    return names


def symbol_description(symbol: sympy.Symbol) -> str:
    """A symbol's assumptions as text, worked out once per symbol (part of every cache key that names it)."""
    described = _SYMBOLS.get(symbol)
    if described is None:
        described = _SYMBOLS[symbol] = repr(sorted(symbol.assumptions0.items()))
    return described


def same_tree(a: sympy.Basic, b: sympy.Basic) -> bool:
    """Equal node for node, types included (sympy's == calls 2 and 2.0 equal)."""
    return type(a) is type(b) and a == b and a.args == b.args and all(same_tree(x, y) for x, y in zip(a.args, b.args))


def _encode(expr: sympy.Basic, symbols: Mapping[sympy.Symbol, str]) -> Any:
    if isinstance(expr, sympy.Symbol):
        return ["n", symbols[expr]] if expr in symbols else None
    leaf = kept_leaf(expr)
    if leaf is not None:
        return leaf
    name = kept_node_name(expr)
    if name is None:
        return None
    args = [_encode(a, symbols) for a in expr.args]
    return None if any(a is None for a in args) else ["f", name, args]


def _decode(tree: Any, names: Mapping[str, sympy.Basic], left: list[int]) -> sympy.Basic:
    """The expression a kept tree describes; ``left`` counts down the nodes it may still have."""
    left[0] -= 1
    if left[0] < 0:
        raise ValueError("too many nodes")
    kind = tree[0]
    if kind == "n":
        value = names[tree[1]]
        if not isinstance(value, sympy.Symbol):
            raise ValueError(tree[1])
        return value
    if kind == "f":
        return kept_node(tree[1], [_decode(a, names, left) for a in tree[2]])
    return kept_leaf_value(tree)


# --- the node types a kept tree may name: an allow-list, built unevaluated --


def kept_leaf(expr: sympy.Basic) -> list[Any] | None:
    """A number or truth value as a kept entry; None for anything else."""
    if isinstance(expr, sympy.Integer):
        return ["i", str(int(expr))]
    if isinstance(expr, sympy.Rational):
        return ["q", str(int(expr.p)), str(int(expr.q))]
    if expr is sympy.true or expr is sympy.false:
        return ["b", bool(expr)]
    if isinstance(expr, Str):
        return ["s", expr.name]
    return None


def kept_leaf_value(entry: Any) -> sympy.Basic:
    """The number or truth value a kept entry gives, held to the constant budget; ValueError for any other entry."""
    kind = entry[0]
    if kind in ("i", "q"):
        number = sympy.Integer(int(entry[1])) if kind == "i" else sympy.Rational(int(entry[1]), int(entry[2]))
        check_constant(number, "a kept expression")
        return number
    if kind == "b" and type(entry[1]) is bool:
        return sympy.true if entry[1] else sympy.false
    if kind == "s" and is_identifier(entry[1]):
        return Str(entry[1])
    raise ValueError(kind)


def kept_node_name(expr: sympy.Basic) -> str | None:
    """The name a kept tree gives ``expr``'s type, where the allow-list has it."""
    name = type(expr).__name__
    return name if name in _NODES else None


def kept_node(name: str, args: list[sympy.Basic]) -> sympy.Basic:
    """The node of type ``name`` (KeyError off the allow-list) over ``args``, built without evaluating."""
    return _NODES[name](*args)
