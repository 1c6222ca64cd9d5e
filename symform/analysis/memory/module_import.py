"""``symform import``: a transformers causal LM's module tree, with every size bound to its config's fields.

transformers builds the model on the meta device (shapes, no memory) from the config, then again from copies of
the config whose integer fields take other values. The fields are written as products of *atoms*, distinct primes
that keep the divisions transformers makes exact: the key/value heads K, the query heads K·G, the hidden size
K·G·D; every other integer field is an atom of its own. A field that changes the tree's structure (a count of
dense layers, a top-k) keeps the config's value. Each size of the tree (a dimension, a number of layers of a
kind) is then a polynomial in the atoms, linear in each: it is found by changing one atom at a time (which atoms
it depends on), then every combination of those (the corners that fix its coefficients), and checked at one more
set of values. Written back over the fields (K = key/value heads, G = heads / key/value heads, D = hidden /
heads), it is an expression of the config, such as ``d_model*n_kv_heads/n_heads`` for a key projection's width.

torch and transformers are the ``oracle`` extra, imported only here.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import sympy

from ...engine.budget import GRAPH_NODES
from ...engine.errors import ConfigError
from .module_tree import describe, flatten, refill

# the config fields that tie the attention's sizes together, each under the names transformers' configs use
HIDDEN = ("hidden_size", "n_embd", "d_model", "hidden_dim", "dim", "model_dim", "embed_dim")
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "kv_n_heads", "n_kv_heads")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
RETRIES = 6  # fits started afresh without the fields whose combination transformers refused
MAX_DEPENDENCE = 5  # atoms one size may depend on: its corners are 2**5 builds at most
_PRIMES = [p for p in range(11, 4000) if sympy.isprime(p)]
_LAYER_VALUES = (3, 2, 5)  # layer counts are atoms too, kept small: the model is built once per probe


class ImportRefused(ConfigError):
    """The model cannot be imported: transformers cannot build it, or one of its sizes follows no expression."""


@dataclass(frozen=True)
class Atoms:
    """How the config's integer fields are written as products of atoms."""

    fields: dict[str, dict[str, int]]  # field -> {atom: exponent}
    layers: frozenset[str]  # atoms that count layers (small values)

    @property
    def names(self) -> list[str]:
        return sorted({a for monomial in self.fields.values() for a in monomial})

    def values(self, chosen: Mapping[str, int]) -> dict[str, int]:
        """Each field's value for the atoms' values."""
        result = {}
        for field, monomial in self.fields.items():
            value = 1
            for atom, exponent in monomial.items():
                value *= chosen[atom] ** exponent
            result[field] = value
        return result

    def as_fields(self, atom: str) -> sympy.Expr:
        """An atom written over the fields (K = kv heads, G = heads/K, D = hidden/heads; others: their field)."""
        return _ATOM_FIELDS[atom](self) if atom in _ATOM_FIELDS else sympy.Symbol(atom)


def _first(atoms: Atoms, names: tuple[str, ...]) -> sympy.Symbol:
    return sympy.Symbol(next(f for f in names if f in atoms.fields))


_ATOM_FIELDS = {
    "@K": lambda a: _first(a, KV_HEADS),
    "@G": lambda a: _first(a, HEADS) / (_first(a, KV_HEADS) if any(f in a.fields for f in KV_HEADS) else 1),
    "@D": lambda a: _first(a, HIDDEN) / _first(a, HEADS),
}


@dataclass(frozen=True)
class Fitted:
    """The model's tree with each size as an expression over config fields, and what it was found from."""

    tree: tuple  # module_tree's description, sizes as sympy expressions over config field names
    model_class: str
    config: dict[str, Any]  # the full config (transformers' defaults filled in), as the declaration records it
    fields: dict[str, int]  # the fields the expressions read -> their values in the config
    parameters: int  # numel() summed over the model's parameters, from the module itself
    defaults: dict[str, Any]  # the config class's own defaults (what an absent field reads as)
    varied: list[str]  # every field the probes changed (a field that follows another, OPT's word_embed_proj_dim, too)
    builds: int  # how many times the model was built on the meta device


def oracle():
    from .oracle_check import _oracle

    return _oracle()


def full_config(transformers: Any, config: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """The config as transformers reads it, every default filled in, as plain JSON values."""
    model_type = config.get("model_type")
    known = transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    if not isinstance(model_type, str) or model_type not in known:
        raise ImportRefused(f"{origin}: model_type {str(model_type)[:60]!r} is not one transformers {transformers.__version__} knows; give the config.json of a transformers model")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = transformers.AutoConfig.for_model(**copy.deepcopy(dict(config)))
    except Exception as e:  # noqa: BLE001 - transformers' config classes raise anything on bad values
        raise ImportRefused(f"{origin}: transformers refuses this {model_type} config ({_reason(e)})") from None
    if type(hf) not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ImportRefused(f"{origin}: transformers has no causal-LM class for model_type {model_type!r}; symform import reads causal language models")
    return json.loads(json.dumps(hf.to_dict(), default=str))


def class_defaults(transformers: Any, model_type: str) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(transformers.AutoConfig.for_model(model_type).to_dict(), default=str))
    except Exception:  # noqa: BLE001 - a config class that needs arguments has no defaults to fall back on
        return {}


def _reason(error: Exception) -> str:
    """An error of transformers' in one line: its first, and the first of the error it was raised from (a config
    validator's)."""
    lines = [str(e).strip().splitlines()[0] for e in (error, error.__cause__) if e is not None and str(e).strip()]
    return f"{type(error).__name__}: {' '.join(lines)[:200] or type(error).__name__}"


class _Builder:
    """Builds the causal LM for configs on the meta device and describes its tree; counts the builds."""

    def __init__(self, torch: Any, transformers: Any, config: dict[str, Any]):
        self.torch, self.transformers, self.config, self.builds = torch, transformers, config, 0
        self.failure = ""  # why transformers refused the last probe it refused

    def model(self, changes: Mapping[str, int]):
        config = _with_token_ids_in_range({**copy.deepcopy(self.config), **changes})
        self.builds += 1
        with warnings.catch_warnings():  # transformers' advice on a probe's odd sizes is not the user's concern
            warnings.simplefilter("ignore")
            hf = self.transformers.AutoConfig.for_model(**config)
            with self.torch.device("meta"):
                return self.transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")

    def tree(self, changes: Mapping[str, int]) -> tuple | None:
        """The tree's skeleton, sizes and labels, or None where transformers cannot build the model so changed."""
        try:
            module = self.model(changes)
        except Exception as e:  # noqa: BLE001 - a probe transformers refuses is a probe not taken
            self.failure = _reason(e)
            return None
        return flatten(describe(module, self.torch, windows=cache_windows(self.transformers, module.config)))


def cache_windows(transformers: Any, config: Any) -> dict[int, int]:
    """The sliding window of each layer whose cache transformers keeps windowed (by layer index): the cache a
    causal LM's forward makes from its config."""
    try:
        cache = transformers.DynamicCache(config=config)
    except Exception:  # noqa: BLE001 - a model whose cache its config does not describe keeps no window here
        return {}
    windows = {}
    for index, layer in enumerate(getattr(cache, "layers", ()) or ()):
        window = getattr(layer, "sliding_window", None)
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            windows[index] = window
    return windows


def _with_token_ids_in_range(config: dict[str, Any]) -> dict[str, Any]:
    """Token ids past a probe's vocabulary (an embedding's padding row) are dropped, as a smaller model's would be."""
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int):
        return config
    for key, value in list(config.items()):
        if key.endswith(("_token_id", "_token_ids")) and (isinstance(value, int) and value >= vocab or isinstance(value, list)):
            config[key] = None
    return config


def candidate_fields(config: Mapping[str, Any]) -> list[str]:
    """The config's positive integer fields that may be sizes (token ids are not)."""
    return [k for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0 and not k.endswith(("_id", "_ids", "_index"))]


def _atom_groups(config: Mapping[str, Any]) -> list[dict[str, dict[str, int]]]:
    """The fields as atom monomials, in groups tried together: the attention's sizes first, then each field."""
    fields = candidate_fields(config)
    per_layer_lists = any(isinstance(v, list) and len(v) == config.get(n) for v in config.values() for n in LAYERS if isinstance(config.get(n), int))
    hidden = next((f for f in HIDDEN if f in fields), None)
    heads = next((f for f in HEADS if f in fields), None)
    kv = next((f for f in KV_HEADS if f in fields), None) if heads else None
    attention: dict[str, dict[str, int]] = {}
    if kv:
        attention[kv] = {"@K": 1}
    if heads:
        attention[heads] = {"@G": 1, **({"@K": 1} if kv else {})}
    if hidden and heads:
        attention[hidden] = {**attention[heads], "@D": 1}
    groups = [attention] if attention else []
    for field in fields:
        if field in attention or field in LAYERS and per_layer_lists:
            continue  # a per-layer list of kinds fixes the layer count
        groups.append({field: {field: 1}})
    return groups


def _assign(atoms: list[str], layers: frozenset[str], offset: int) -> dict[str, int]:
    """Distinct values for the atoms: primes (or small layer counts), a different set for each offset; a head's
    width is 8 times a prime, since rotary positions turn pairs of its dimensions (of a half or a quarter of it)."""
    values, primes = {}, iter(_PRIMES[offset * len(atoms) :])
    for atom in atoms:
        values[atom] = _LAYER_VALUES[offset] if atom in layers else next(primes) * (8 if _is_head_width(atom) else 1)
    return values


def _is_head_width(atom: str) -> bool:
    return atom == "@D" or any(word in atom for word in ("head_dim", "rotary_dim", "head_size", "kv_channels"))


def fit(config: Mapping[str, Any], origin: str) -> Fitted:
    """The causal LM of ``config``, with its sizes fitted over the config's fields (see the module's doc)."""
    torch, transformers = oracle()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return _fit(torch, transformers, full_config(transformers, config, origin), origin)
    finally:
        transformers.logging.set_verbosity(verbosity)


def meta_parameters(config: Mapping[str, Any]) -> int | None:
    """numel() summed over the causal LM transformers builds for ``config`` on the meta device; None where it cannot."""
    torch, transformers = oracle()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        module = _Builder(torch, transformers, dict(config)).model({})
    except Exception:  # noqa: BLE001 - a config transformers refuses has no count to compare with
        return None
    finally:
        transformers.logging.set_verbosity(verbosity)
    return sum(p.numel() for p in module.parameters())


def _within_budget(config: Mapping[str, Any], origin: str) -> None:
    """Layers and experts transformers would build one module each, dozens of times: within the budget of component
    instances, or refused before the first build (a config of 10⁶ layers would not finish)."""
    for field in candidate_fields(config):
        if ("layers" in field or "experts" in field or field in LAYERS) and config[field] > GRAPH_NODES:
            raise ImportRefused(f"{origin}: {field} is {config[field]:,}, past symform's budget of {GRAPH_NODES:,} component instances (symform.engine.budget.GRAPH_NODES); give a config with fewer")


def _fit(torch: Any, transformers: Any, config: dict[str, Any], origin: str) -> Fitted:
    _within_budget(config, origin)
    builder = _Builder(torch, transformers, config)
    try:
        module = builder.model({})
    except Exception as e:  # noqa: BLE001
        raise ImportRefused(f"{origin}: transformers cannot build its causal LM from this config ({_reason(e)})") from None
    parameters = sum(p.numel() for p in module.parameters())
    base_skeleton, base_numbers, labels = flatten(describe(module, torch, windows=cache_windows(transformers, module.config)))
    atoms = _accepted_atoms(builder, config, base_skeleton)
    last = ""
    for _ in range(RETRIES):
        try:
            expressions = _expressions(builder, atoms, base_skeleton, labels, origin)
            break
        except _CornerFailed as failed:  # fields that go together only at some values (an offset below a period)
            atoms, last = Atoms({f: m for f, m in atoms.fields.items() if not set(m) & failed.atoms}, atoms.layers), str(failed)
    else:
        raise ImportRefused(f"{origin}: {last}; symform import cannot bind its sizes")
    _verify(builder, atoms, atoms.names, base_skeleton, expressions, labels, origin)
    defaults = class_defaults(transformers, config["model_type"])
    return _fitted(atoms, config, module, base_skeleton, base_numbers, expressions, labels, parameters, defaults, builder.builds, origin)


class _CornerFailed(Exception):
    def __init__(self, message: str, atoms: frozenset[str]):
        super().__init__(message)
        self.atoms = atoms


def _expressions(builder: _Builder, atoms: Atoms, base_skeleton: tuple, labels: list[str], origin: str) -> list[sympy.Expr]:
    """Each size as a polynomial in the atoms, from the corners it needs."""
    names = atoms.names
    corners: dict[frozenset[str], list[int]] = {}
    low, high = _assign(names, atoms.layers, 0), _assign(names, atoms.layers, 1)

    def numbers_at(flipped: frozenset[str]) -> list[int]:
        if flipped not in corners:
            built = builder.tree(atoms.values({a: high[a] if a in flipped else low[a] for a in names}))
            if built is None or built[0] != base_skeleton:
                why = f"transformers refuses ({builder.failure})" if built is None else "the model's structure changes"
                raise _CornerFailed(f"when {', '.join(sorted(_field_names(atoms, flipped)))} change, {why}", flipped)
            corners[flipped] = built[1]
        return corners[flipped]

    base = numbers_at(frozenset())
    depends = [set() for _ in base]
    for atom in names:
        flipped = numbers_at(frozenset({atom}))
        for slot, (a, b) in enumerate(zip(base, flipped)):
            if a != b:
                depends[slot].add(atom)
    return [_interpolate(slot, depends[slot], names, atoms, numbers_at, labels, origin) for slot in range(len(base))]


def _accepted_atoms(builder: _Builder, config: dict[str, Any], skeleton: tuple) -> Atoms:
    """The atom groups whose values change sizes but not the tree's structure, taken one group at a time."""
    accepted: dict[str, dict[str, int]] = {}
    layers: set[str] = set()
    for group in _atom_groups(config):
        group = {f: m for f, m in group.items() if f not in accepted}
        # a field the config gives the same value as one of the group's may have to follow it (OPT's
        # word_embed_proj_dim, a projection between them where they differ): tried together second
        twins = {f: group[g] for f in candidate_fields(config) for g in group if f not in group and f not in accepted and config[f] == config[g]}
        trials = [group, *({**group, f: m} for f, m in twins.items()), *([{**group, **twins}] if len(twins) > 1 else [])]
        for trial_group in trials:
            trial = {**accepted, **trial_group}
            trial_layers = layers | {f for f in trial_group if f in LAYERS}
            candidate = Atoms(trial, frozenset(trial_layers))
            if all(_same_structure(builder, candidate, offset, skeleton) for offset in range(3)):
                accepted, layers = trial, trial_layers
                break
    return Atoms(accepted, frozenset(layers))


def _same_structure(builder: _Builder, atoms: Atoms, offset: int, skeleton: tuple) -> bool:
    """Whether the model built with the atoms' values of one set (each set the fit uses) has the config's structure."""
    built = builder.tree(atoms.values(_assign(atoms.names, atoms.layers, offset)))
    return built is not None and built[0] == skeleton


def _field_names(atoms: Atoms, flipped: frozenset[str]) -> set[str]:
    return {field for field, monomial in atoms.fields.items() if set(monomial) & flipped}


def _interpolate(slot: int, depends: set[str], names: list[str], atoms: Atoms, numbers_at, labels: list[str], origin: str) -> sympy.Expr:
    """The size as a polynomial linear in each atom it depends on, from its values at every corner."""
    if len(depends) > MAX_DEPENDENCE:
        raise ImportRefused(f"{origin}: {labels[slot]} depends on {len(depends)} config fields at once; symform import binds sizes of at most {MAX_DEPENDENCE}")
    low, high = _assign(names, atoms.layers, 0), _assign(names, atoms.layers, 1)
    ordered = sorted(depends)
    total = sympy.Integer(0)
    for size in range(len(ordered) + 1):
        for corner in combinations(ordered, size):
            value = numbers_at(frozenset(corner))[slot]
            term = sympy.Integer(value)
            for atom in ordered:
                x = sympy.Symbol(atom)
                at, other = (high[atom], low[atom]) if atom in corner else (low[atom], high[atom])
                term *= (x - other) / sympy.Integer(at - other)
            total += term
    return sympy.expand(total)


def _verify(builder: _Builder, atoms: Atoms, names: list[str], skeleton: tuple, expressions: list[sympy.Expr], labels: list[str], origin: str) -> None:
    """Every size at a third set of values, where a size the corners mistook (not linear in an atom) shows."""
    if not names:
        return
    chosen = _assign(names, atoms.layers, 2)
    built = builder.tree(atoms.values(chosen))
    if built is None or built[0] != skeleton:
        why = f"transformers refuses them: {builder.failure}" if built is None else "the model's structure changes with them"
        raise ImportRefused(f"{origin}: at a third set of sizes {why}; symform import cannot bind them")
    substitution = {sympy.Symbol(a): v for a, v in chosen.items()}
    for slot, (expression, actual) in enumerate(zip(expressions, built[1])):
        if expression.subs(substitution) != actual:
            raise ImportRefused(f"{origin}: {labels[slot]} follows no product of config fields (it is {actual} where they predict {expression.subs(substitution)}); symform import cannot bind it")


def _fitted(atoms: Atoms, config, module, skeleton, numbers, expressions, labels, parameters: int, defaults: dict, builds: int, origin: str) -> Fitted:
    """The expressions written over config fields and checked at the config's own values."""
    over_fields = {sympy.Symbol(a): atoms.as_fields(a) for a in atoms.names}
    written = [sympy.simplify(e.subs(over_fields)) if e.free_symbols else e for e in expressions]
    own = {sympy.Symbol(f): config[f] for f in atoms.fields}
    for slot, (expression, actual) in enumerate(zip(written, numbers)):
        if expression.subs(own) != actual:
            raise ImportRefused(f"{origin}: {labels[slot]} is {actual} in the config's model but {expression} = {expression.subs(own)}; symform import cannot bind it")
    used = sorted({str(s) for e in written for s in e.free_symbols})
    return Fitted(refill(skeleton, written), type(module).__name__, config, {f: config[f] for f in used}, parameters, defaults, sorted(atoms.fields), builds)


@dataclass(frozen=True)
class MetaRun:
    """One forward of the causal LM on the meta device (shapes only): what PyTorch counts and keeps."""

    batch: int
    seq: int
    flops: int  # FlopCounterMode's total: the matrix products (mm, addmm, bmm, baddbmm, attention, convolution)
    own_flops: dict[str, int]  # module class -> products in its own forward, outside its children's
    kv_cache: int | None  # bytes of the keys and values its cache keeps (float32); None: a cache without layers
    recurrent_state: int | None  # bytes of the recurrent layers' conv windows and states
    device: str = "meta"


def meta_forward(config: Mapping[str, Any], seq: int, batch: int = 2, device: str = "meta") -> MetaRun | str:
    """The forward's FLOPs and cache at ``batch`` × ``seq`` tokens, or why transformers' forward cannot run on
    the meta device (a router that picks experts by value, a kernel without a meta implementation); on the CPU
    (``device``) for a config small enough to hold."""
    from torch.utils.flop_counter import FlopCounterMode

    from .oracle_check import cache_bytes, counter_fixes

    torch, transformers = oracle()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = transformers.AutoConfig.for_model(**_with_token_ids_in_range(copy.deepcopy(dict(config))))
            torch.manual_seed(0)
            with torch.device(device):
                module = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager", experts_implementation="eager", dtype=torch.float32)
                module.eval()
                ids = torch.zeros(batch, seq, dtype=torch.long)
                with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=counter_fixes(torch)) as counter:
                    output = module(input_ids=ids, use_cache=True)
        kv, states = cache_bytes(torch, output)
    except Exception as e:  # noqa: BLE001 - a forward the meta device cannot run is named, not measured
        return _reason(e)
    finally:
        transformers.logging.set_verbosity(verbosity)
    return MetaRun(batch, seq, counter.get_total_flops(), _own_flops(module, counter.get_flop_counts()), kv, states, device)


def _own_flops(module: Any, counts: Mapping[str, Mapping[Any, int]]) -> dict[str, int]:
    """Each module class's products outside its children's (an attention's score and context products, a
    mixer's scan), summed over its instances; a Linear's own product is its own."""
    totals = {name.partition(".")[2]: sum(ops.values()) for name, ops in counts.items() if name != "Global" and "." in name}
    remaining = dict(totals)
    for name, total in totals.items():  # each counted module's products leave its nearest counted ancestor's own
        parent = name.rpartition(".")[0]
        while parent and parent not in totals:
            parent = parent.rpartition(".")[0]
        if parent:
            remaining[parent] -= total
    classes = {name: type(sub).__name__ for name, sub in module.named_modules()}
    own: dict[str, int] = {}
    for name, value in remaining.items():
        if value > 0:  # the counter names a module by the path it was called under, which may be no attribute path
            cls = classes.get(name, name.rpartition(".")[2])
            own[cls] = own.get(cls, 0) + value
    return own
