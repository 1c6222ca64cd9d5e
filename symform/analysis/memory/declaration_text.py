"""An imported module tree written as a declaration file in symform's own language (docs/declaring-architectures.md).

Each distinct module becomes a component whose parts are its children; a leaf is one of symform's primitives
(``linear``, ``tied_linear``, ``embedding``, ``layer_norm``, ``rms_norm``, ``causal_conv1d``, ``parameters``) with
its sizes as expressions over the root's arguments; a ModuleList is one part per kind of layer, repeated. The
root's arguments are symform's names for the config fields where a bundled family binds the field to one
(``hidden_size`` is ``d_model``), else a symbol of the field's own name declared in the file; ``[model.bind]``
reads each from ``[model.transformers]``, the config, so that a config of other sizes gives other arguments.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from functools import cache
from typing import Any

import sympy

from ...engine.language.declarations import default_library
from ...engine.language.families import all_families
from .module_import import Fitted

_ZERO_PARAMS = '{ default = "1", params = "0", active_params = "0" }'  # a tensor counted where it is first owned


@cache
def field_symbols() -> Mapping[str, str]:
    """Config field -> symform's architecture symbol, as the bundled families bind a bare field most often."""
    vocabulary = default_library().vocabulary
    votes: dict[str, Counter] = {}
    for family in all_families().values():
        spec = family.spec
        if spec.fields_in:
            continue
        for symbol, text in spec.bind.items():
            field = spec.fields.get(text)
            if field is None or field.in_ or symbol not in vocabulary.architecture:
                continue
            for key in (field.key or text, *(a for a in field.aliases if "." not in a)):
                votes.setdefault(key, Counter())[symbol] += 1
    return {key: counter.most_common(1)[0][0] for key, counter in votes.items()}


def symbols_for(fields: list[str]) -> dict[str, str]:
    """Each field's symbol in the declaration: symform's where a family binds it (and no other field took it),
    else the field's own name (``cfg_`` before it where that name is taken by symform's vocabulary)."""
    taken = set(default_library().vocabulary.entries)
    known, result = field_symbols(), {}
    for field in fields:
        symbol = known.get(field)
        if symbol is None or symbol in result.values():
            symbol = field if field not in taken and re.fullmatch(r"[a-z][a-z0-9_]*", field) else "cfg_" + re.sub(r"\W", "_", field.lower())
        result[field] = symbol
    return result


def declaration_text(fitted: Fitted, name: str, origin: str, caches: bool = True, not_exact: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
    """The declaration file's text and the config fields its [model.bind] reads; ``caches`` False where the
    model's forward keeps no keys and values (its attention declares no cache); ``not_exact`` the quantities
    it does not count as PyTorch does, each with why (written under [model.not_exact])."""
    symbols = symbols_for(sorted(fitted.fields))
    writer = _Writer(name, {sympy.Symbol(f): sympy.Symbol(s) for f, s in symbols.items()}, caches)
    root = writer.component(fitted.tree, fitted.model_class)
    used = writer.used(fitted.tree)
    bound = sorted(f for f in symbols if symbols[f] in used)
    vocabulary = default_library().vocabulary
    lines = [
        f"# {fitted.model_class} as symform import read it from {origin} (transformers' module tree on the meta device).",
        "# Every size is an expression over the config's fields; [model.bind] reads them from [model.transformers].",
        f"# PyTorch's numel(): {fitted.parameters:,} parameters. `symform check` sets it beside the real module.",
        "",
        "[model]",
        f"root = {_string(root)}",
        f"name = {_string(name)}",
        f"doc = {_string(f'transformers {fitted.model_class}, imported')}",
        "",
        "[model.bind]  # each argument of the root from the config's fields",
        *(f"{symbols[f]} = {_string(f)}" for f in bound),
        "",
    ]
    if not_exact:
        lines += ["[model.not_exact]  # what the declaration does not count as PyTorch does: symform check names it", *(f"{q} = {_string(why)}" for q, why in not_exact.items()), ""]
    for field in bound:
        symbol = symbols[field]
        if symbol not in vocabulary.entries:
            lines += [f"[symbols.{symbol}]", f"latex = {_string(_latex(field))}", 'kind = "architecture"', f"description = {_string(f'the config field {field}')}", ""]
    lines += writer.lines
    lines += ["", "[model.transformers]  # the config: symform check builds transformers' model from it", *_table(_plain(_token_ids_kept(fitted.config, fitted.defaults)))]
    return "\n".join(lines) + "\n", bound


def _latex(field: str) -> str:
    return "\\mathrm{" + field.replace("_", "\\_") + "}"


class _Writer:
    """Components for a tree's modules: one per distinct module, named after its class."""

    def __init__(self, prefix: str, symbols: dict[sympy.Symbol, sympy.Symbol], caches: bool = True):
        self.prefix = _snake(prefix)
        self.symbols = symbols
        self.caches = caches
        self.names: dict[tuple, str] = {}
        self.taken = set(default_library().components)
        self.lines: list[str] = []

    def expression(self, value: sympy.Expr) -> str:
        return str(sympy.sympify(value).subs(self.symbols))

    def used(self, tree: tuple) -> set[str]:
        if tree[0] == "leaf":
            return {str(s.subs(self.symbols)) for d in tree[3] for s in sympy.sympify(d).free_symbols}
        if tree[0] == "group":
            return {str(s.subs(self.symbols)) for count, _ in tree[1] for s in sympy.sympify(count).free_symbols} | {n for _, e in tree[1] for n in self.used(e)}
        return {n for _, part in tree[2] for n in self.used(part)}

    def component(self, tree: tuple, cls: str) -> str:
        if tree in self.names:
            return self.names[tree]
        own = _snake(cls)
        name = self._fresh(own if own.startswith(self.prefix) else f"{self.prefix}_{own}")
        self.names[tree] = name
        parts: list[list[str]] = []
        for part, child in tree[2]:
            parts += self._parts(_identifier(part), child)
        args = sorted(self.used(tree))
        block = [f"[components.{name}]", f"doc = {_string(f'transformers {cls} (imported)')}", f"args = {json.dumps(args)}"]
        for part in parts:
            block += ["", f"[[components.{name}.parts]]", *part]
        self.lines += [*block, ""]
        return name

    def _parts(self, name: str, tree: tuple, repeat: str | None = None) -> list[list[str]]:
        if tree[0] == "group":
            kinds = tree[1]
            result = []
            for index, (count, element) in enumerate(kinds):
                label = name if len(kinds) == 1 else f"{name}_{index}"
                result += self._parts(label, element, self.expression(count))
            return result
        if tree[0] == "module":
            use = self.component(tree, tree[1])
            return [[f"name = {_string(name)}", f"use = {_string(use)}", "pass = true", *_repeat(repeat)]]
        return self._leaf(name, tree, repeat)

    def _leaf(self, name: str, tree: tuple, repeat: str | None) -> list[list[str]]:
        _, primitive, flags, dims = tree
        sizes = [self.expression(d) for d in dims]
        if primitive == "attention":
            return self._attention(flags, sizes, repeat)
        if primitive == "routed":
            return self._routed(flags, sizes, repeat)
        if primitive == "parameters":
            if not flags[0]:
                return []  # counted where it is first owned, and a bare tensor has no FLOPs of its own
            count = "*".join(f"({s})" if not re.fullmatch(r"\w+", s) else s for s in sizes) or "1"
            return [[f"name = {_string(name)}", 'use = "parameters"', f"with = {_inline({'count': count})}", *_repeat(repeat)]]
        if primitive == "linear":
            owned, bias_owned, _ = flags
            d_in, d_out = sizes
            if owned:  # a bias registered first elsewhere (a masked-LM head's, shared with its decoder) is counted there
                return [[f"name = {_string(name)}", 'use = "linear"', f"with = {_inline({'d_in': d_in, 'd_out': d_out, 'bias': str(bias_owned)})}", *_repeat(repeat)]]
            tied = [[f"name = {_string(name)}", 'use = "tied_linear"', f"with = {_inline({'d_in': d_in, 'd_out': d_out})}", *_repeat(repeat)]]
            return tied + ([[f"name = {_string(name + '_bias')}", 'use = "parameters"', f"with = {_inline({'count': d_out})}", *_repeat(repeat)]] if bias_owned else [])
        arguments = {
            "embedding": lambda: {"entries": sizes[0], "width": sizes[1]},
            "layer_norm": lambda: {"width": sizes[0], "bias": str(flags[2])},
            "rms_norm": lambda: {"width": sizes[0]},
            "causal_conv1d": lambda: {"channels": sizes[0], "kernel": sizes[1], "conv_bias": str(flags[2])},
        }[primitive]()
        lines = [f"name = {_string(name)}", f"use = {_string(primitive)}", f"with = {_inline(arguments)}"]
        if not flags[0]:
            return [[*lines, f"repeat = {_ZERO_PARAMS}" if repeat is None else f'repeat = {{ default = {_string(repeat)}, params = "0", active_params = "0" }}']]
        return [[*lines, *_repeat(repeat)]]

    def _attention(self, flags: tuple, sizes: list[str], repeat: str | None) -> list[list[str]]:
        """A self-attention's score and context products over every key (eager attention multiplies the whole
        masked score matrix, a sliding window's too) and the keys and values transformers' cache keeps: every
        token's, or the last window - 1 of a windowed layer's."""
        heads, kv, d_qk, d_v, *window = sizes
        core = {"n_heads": heads, "d_qk": d_qk, "d_v": d_v, "n_kv_heads": kv}
        if flags[0]:
            core["span"] = f"past + seq - windowed*(past + seq - min(past + seq, {window[0]}))"
        width = sympy.simplify(sympy.sympify(f"({kv})*(({d_qk}) + ({d_v}))"))
        cache = {"width": str(width), **({"cached": f"min(past + seq, {window[0]} - 1)"} if flags[0] else {})}
        parts = [[f"name = {_string('core')}", 'use = "attention_core"', f"with = {_inline(core)}", *_repeat(repeat)]]
        return parts + ([[f"name = {_string('kv_cache')}", 'use = "kv_cache"', f"with = {_inline(cache)}", *_repeat(repeat)]] if self.caches else [])

    def _routed(self, flags: tuple, sizes: list[str], repeat: str | None) -> list[list[str]]:
        """A routed block's products: its router's scores of every token against every expert, and each expert
        weight once for each of a token's top_k experts (eager experts run a token through those only). Their
        parameters are the bare tensors, counted where they are held."""
        top_k, _, *rest = sizes
        width, weights = (rest[0], rest[1:]) if flags[0] else (None, rest)
        none = 'repeat = { default = "1", params = "0", active_params = "0" }' if repeat is None else f'repeat = {{ default = {_string(repeat)}, params = "0", active_params = "0" }}'
        parts = [] if width is None else [[f"name = {_string('router_scores')}", 'use = "linear"', f"with = {_inline({'d_in': width, 'd_out': sizes[1]})}", none]]
        for index in range(0, len(weights), 2):
            a, b = weights[index : index + 2]
            rows = f"batch*seq*{top_k}" if re.fullmatch(r"\w+", top_k) else f"batch*seq*({top_k})"
            parts.append([f"name = {_string(f'expert_products_{index // 2}')}", 'use = "linear"', f"with = {_inline({'d_in': b, 'd_out': a, 'rows': rows})}", none])
        return parts

    def _fresh(self, name: str) -> str:
        candidate, n = name, 2
        while candidate in self.taken:
            candidate, n = f"{name}_{n}", n + 1
        self.taken.add(candidate)
        return candidate


def _repeat(repeat: str | None) -> list[str]:
    return [] if repeat in (None, "1") else [f"repeat = {_string(repeat)}"]


def _snake(name: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    text = re.sub(r"\W+", "_", text).strip("_")
    return text if re.match(r"[a-z]", text) else f"m_{text}"


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", name)
    return text if re.match(r"[A-Za-z_]", text) else f"m{text}"


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _inline(table: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {_string(v)}" for k, v in table.items()) + " }"


def _token_ids_kept(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """TOML has no null, and an absent field is the config class's default: a null token id whose default is a
    token (past a small vocabulary, where an embedding's padding row cannot be) is written as token 0, which
    changes no size."""
    return {k: 0 if v is None and k.endswith(("_token_id", "_token_ids")) and defaults.get(k) is not None else v for k, v in config.items()}


def _plain(value: Any) -> Any:
    """A JSON value TOML can hold: nulls dropped (transformers reads an absent field as its default)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value if v is not None]
    return value


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("nan" if math.isnan(value) else "inf" if value > 0 else "-inf") if not math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_string(k)} = {_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    return _string(str(value))


def _table(config: Mapping[str, Any]) -> list[str]:
    return [f"{_string(k)} = {_value(v)}" for k, v in config.items()]
