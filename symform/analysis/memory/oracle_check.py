"""``symform check``: a model's declaration against a tiny instance of the real PyTorch module.

The config (a preset's, a Hub checkpoint's, a file's, or the ``[model.transformers]``
table of a user's declaration) is shrunk to tiny sizes (``formulas/check.toml``),
built with transformers in float32 with eager attention and eager experts, and run
on the CPU: parameters per module, forward FLOPs per module and backward FLOPs
(PyTorch's FlopCounterMode), the KV cache it keeps, and the bytes autograd saves
for backward are set beside symform's numbers for the same tiny model. torch and
transformers (the ``oracle`` extra) are imported only here, only when asked.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import re
import weakref
from dataclasses import dataclass, field as dataclass_field
from functools import cache
from typing import Any, Mapping

from ...engine.store.data import formulas_dir, read_toml
from ...engine.language.families import FamilySpec, read_fields, reading_spec, sub_config
from ...engine.language.layer_counts import count_layers, layers_in
from ...engine.errors import ConfigError, SymformError
from ...engine.graph.model import Model
from .memory import dropout_origin
from .quantization import aliases

BATCH, SEQ = 2, 8  # two sequences: transformers' loss pads a single sequence's labels by one token
SOURCE_SEQ = 11  # an encoder-decoder's encoder tokens: another length than the decoder's, so that neither stands for the other
MAX_PARAMS = 10**8  # the module is built in float32 and trained one step on the CPU: 10⁸ parameters is ~1.6 GB with gradients
DROPPED = ("rope_scaling", "quantization_config")  # per-head rotary factors do not survive new sizes; FLOPs and parameters do not depend on them


class OracleMissing(SymformError):
    """torch or transformers is not installed."""


class OracleFails(ConfigError):
    """transformers cannot build or run its own module for the config: there is nothing to compare with."""


@dataclass(frozen=True)
class Row:
    quantity: str
    part: str
    symform: int | None
    pytorch: int | None

    @property
    def agrees(self) -> bool:
        return self.symform == self.pytorch


@dataclass(frozen=True)
class CheckReport:
    model: str
    transformers_class: str
    tiny_config: dict[str, Any]
    rows: list[Row]
    sizes_in: str = ""  # the sub-config the model's sizes live in (text_config), "" for the top level
    dropout: str = ""  # the dropout convention symform counted with, and where it came from
    not_exact: Mapping[str, str] = dataclass_field(default_factory=dict)  # what the declaration says it does not count as PyTorch does

    @property
    def sizes(self) -> dict[str, Any]:
        return dict(sub_config(self.tiny_config, self.sizes_in, "config")) if self.sizes_in else dict(self.tiny_config)

    @property
    def differences(self) -> list[Row]:
        return [r for r in self.rows if not r.agrees]

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "transformers_class": self.transformers_class,
            "batch": BATCH,
            "seq": SEQ,
            "agree": not self.differences,
            "rows": [{"quantity": r.quantity, "part": r.part, "symform": r.symform, "pytorch": r.pytorch, "agree": r.agrees} for r in self.rows],
            "tiny_config": self.tiny_config,
            "dropout": self.dropout,
            "not_exact": dict(self.not_exact),
        }


@dataclass(frozen=True)
class _Tables:
    tiny: dict[str, Any]  # config field -> tiny value
    sub_configs: dict[str, dict[str, Any]]  # a sub-config beside the language model's (vision_config) -> its tiny values
    per_layer: list[str]  # fields with one entry per layer
    layer_indices: list[str]  # fields listing layer indices
    renames: dict[tuple[str, ...], list[str]]  # a transformers module name's segments -> symform's
    classes: dict[str, list[str]]  # a transformers module class -> the symform segments its module name becomes
    roles: dict[tuple[str, ...], str]  # segments (one or more, consecutive) -> the role they mark
    towers: dict[str, str]  # a segment -> the tower it is, one role for everything under it
    skip: list[str]
    by_model_type: dict[str, dict[str, Any]] = None  # a model type -> tiny values its language model's sub-config takes


@cache
def _tables() -> _Tables:
    names, table = aliases(), read_toml(formulas_dir() / "check.toml")
    return _Tables(
        tiny=table["tiny"],
        sub_configs=table.get("sub_configs", {}),
        per_layer=table["per_layer"]["lists"],
        layer_indices=table["per_layer"]["indices"],
        renames={tuple(k.split(".")): v.split(".") for k, v in table["module_names"].items()},
        classes={k: v.split(".") for k, v in table["module_classes"].items()},
        roles={tuple(alias.split(".")): role for role, found in names.roles.items() for alias in found},
        skip=names.skip,
        towers={name: tower for tower, names in table.get("towers", {}).items() for name in names},
        by_model_type=table.get("by_model_type", {}),
    )


def _oracle():
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise OracleMissing("symform check builds the real PyTorch module: pip install 'symform[oracle]' (torch and transformers)") from None
    return torch, transformers


def tiny_config(config: Mapping[str, Any], family: str | None = None) -> dict[str, Any]:
    """The config with every size in check.toml's table shrunk (in the family's own sub-config too, such as
    text_config) and per-layer lists cut to the layer count. For a family whose layers come in kinds (a
    hybrid's linear and full attention, Mamba, MLP and expert layers), the layer count is the smallest, from
    the table's up, at which every kind the full model has is still there."""
    spec = reading_spec(family, config) if family is not None else None
    where = spec.fields_in if spec is not None else ""
    result = _shrunk(config, set() if where else _read_in(spec, None))
    if where:
        result = _replaced(result, where, _shrunk(sub_config(config, where, "config"), _read_in(spec, None)))
    own = _tables().by_model_type.get(config.get("model_type"), {})
    if own:  # sizes the tiny heads need that transformers' defaults for the type do not fit (M-RoPE's sections)
        result = _replaced(result, where, {**sub_config(result, where, "config"), **copy.deepcopy(own)}) if where else {**result, **copy.deepcopy(own)}
    for name, sizes in _tables().sub_configs.items():
        given = config.get(name) if isinstance(config.get(name), Mapping) else {}
        read = _read_in(spec, name)
        if given or read:
            result[name] = {**given, **{k: copy.deepcopy(v) for k, v in sizes.items() if k in given or k in read}}
    layers = sub_config(result, where, "config").get("num_hidden_layers")
    if spec is None or not spec.counts or not isinstance(layers, int):
        return _cut(result, where, layers)
    full = _kinds(spec, config)
    # the full model's layer count, its family's default where the config gives none
    most = sub_config(config, where, "config").get("num_hidden_layers")
    if not isinstance(most, int):
        most = read_fields(spec.fields, config, "config", fields_in=where).get("num_hidden_layers", layers)
    for count in range(layers, max(layers, most) + 1):
        candidate = _cut(result, where, count)
        if _kinds(spec, candidate) == full:
            return candidate
    return _cut(result, where, layers)


def _read_in(spec: FamilySpec | None, where: str | None) -> set[str]:
    """The keys the family reads in a sub-config (None: its `fields_in`). A sub-config the config leaves out is
    transformers' defaults, full-sized: those keys are given their tiny values too."""
    return {f.key or name for name, f in spec.fields.items() if f.in_ == where} if spec is not None else set()


def _shrunk(config: Mapping[str, Any], read: set[str] = frozenset()) -> dict[str, Any]:
    tiny = _tables().tiny
    result = {k: copy.deepcopy(v) for k, v in config.items() if k not in DROPPED}
    for field, value in tiny.items():
        if result.get(field) is not None or field in read and field not in result:
            result[field] = value
    if config.get("num_key_value_heads") is not None and config.get("num_key_value_heads") == config.get("num_attention_heads"):
        result["num_key_value_heads"] = result["num_attention_heads"]  # multi-head attention stays multi-head (MLA needs it)
    vocab = result.get("vocab_size")
    for field in ("bos_token_id", "eos_token_id", "pad_token_id"):  # token ids past the tiny vocabulary: none
        ids = result.get(field)
        if isinstance(vocab, int) and (isinstance(ids, int) and ids >= vocab or isinstance(ids, list) and any(isinstance(i, int) and i >= vocab for i in ids)):
            result[field] = None
    return result


def _replaced(config: dict[str, Any], where: str, section: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the sub-config at the dotted path ``where`` replaced by ``section``."""
    head, _, rest = where.partition(".")
    inner = section if not rest else _replaced(dict(config.get(head) or {}), rest, section)
    return {**config, head: inner}


def _cut(config: dict[str, Any], where: str, layers: int | None) -> dict[str, Any]:
    """The config with ``layers`` layers: per-layer lists cut to them, layer indices past them dropped."""
    if layers is None:
        return config
    per_layer, indices = _tables().per_layer, _tables().layer_indices
    section = dict(sub_config(config, where, "config"))
    section["num_hidden_layers"] = layers
    for field in per_layer:
        if isinstance(section.get(field), (list, str)):
            section[field] = section[field][:layers]
    for field in indices:
        if isinstance(section.get(field), list):
            section[field] = [v for v in section[field] if not isinstance(v, int) or v < layers]
    return _replaced(config, where, section) if where else section


def _kinds(spec, config: Mapping[str, Any]) -> dict[str, tuple[bool, bool]]:
    """For each of the family's counts of layers: whether some layers are of its kind, and whether some are not."""
    fields = read_fields(spec.fields, config, "config", fields_in=spec.fields_in)
    kinds = {}
    for name, count in spec.counts.items():
        of_kind = int(count_layers(name, count, fields, "config"))
        kinds[name] = (of_kind > 0, of_kind < layers_in(count, fields))
    return kinds


def _rederived(transformers, config: dict[str, Any]) -> dict[str, Any]:
    """The config with every size its transformers config class derives from its own fields (DeepSeek-V3's
    head_dim and qk_head_dim from the rotary and non-rotary head sizes) derived again from the tiny fields. A
    saved config holds the derived sizes beside the fields; shrunk apart, they no longer agree, and transformers
    takes the saved value over the one it derives."""
    import dataclasses

    mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING
    config_class = mapping[config["model_type"]] if config.get("model_type") in mapping else None
    if config_class is None or not dataclasses.is_dataclass(config_class):
        return config
    declared = {f.name for f in dataclasses.fields(config_class)}
    derived = [k for k, v in config.items() if k not in declared and isinstance(v, int) and not isinstance(v, bool)]
    if not derived:
        return config
    try:
        fresh = config_class(**{k: copy.deepcopy(v) for k, v in config.items() if k in declared})
    except Exception:  # noqa: BLE001 - transformers' own refusal of the config is reported where the module is built
        return config
    return {**config, **{k: getattr(fresh, k) for k in derived if isinstance(getattr(fresh, k, None), int)}}


def check(model: Model) -> CheckReport:
    """Compare ``model`` with transformers' module for the same config: a config's family at tiny sizes, or a
    user's declaration at its own sizes against its ``[model.transformers]`` config as given."""
    config = model.spec.config
    if config is None:
        raise ConfigError(f"{model.name}: symform check needs the transformers config this model declares; add a [model.transformers] table (see docs/declaring-architectures.md)")
    if not isinstance(config.get("model_type"), str):
        raise ConfigError(f"{model.name}: the config names no model_type; transformers cannot build a model without one")
    torch, transformers = _oracle()
    if model.spec.family is None:
        ours, config = model, dict(config)
    else:
        config = _rederived(transformers, tiny_config(config, model.spec.family))
        ours = Model.from_config(config, name=model.name)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the report is the table: transformers' own advice stays out of it
    try:
        module = _build(torch, transformers, config, model.name, _checkpoint_class(transformers, model.spec.family, config))
        # float32 tensors, counted as eager PyTorch on the CPU keeps them (the whole masked score matrix, views at their storage)
        ours = ours.with_accounting("eager").with_conventions(act_bytes=4, kv_bytes=4, cpu_kernels=1)
        rows = [*_param_rows(ours, module), *_flop_rows(torch, ours, module, config), *_cache_rows(torch, ours, module, config), _saved_row(torch, ours, module, config)]
    finally:
        transformers.logging.set_verbosity(verbosity)
    sizes_in = reading_spec(model.spec.family, config).fields_in if model.spec.family is not None else ""
    return CheckReport(model.name, type(module).__name__, config, rows, sizes_in, dropout_origin(ours), dict(model.spec.not_exact))


def transformers_refusal(config: Mapping[str, Any], name: str) -> str | None:
    """Why transformers cannot build or run its own module for ``config`` at tiny sizes (a field its config class
    leaves null that its module needs), or None where it can: a config symform refuses is then no model at all."""
    torch, transformers = _oracle()
    config = _rederived(transformers, tiny_config(config))
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        module = _build(torch, transformers, config, name, None)
        with torch.no_grad():
            _forward(module, **_inputs(torch, module, config))
    except OracleFails as e:
        return str(e)
    except SymformError:  # too large to build even when shrunk: whether it runs is not known
        return None
    finally:
        transformers.logging.set_verbosity(verbosity)
    return None


def _checkpoint_class(transformers, family: str | None, config: Mapping[str, Any]) -> str | None:
    """The class `architectures` names, for a family whose parts that class chooses (an encoder's heads); the
    family's own class where transformers' causal LM for the config is another (the whole class of a
    vision-language checkpoint: tower and language model); None for the others, transformers' causal LM."""
    if family is None:
        return None
    spec = reading_spec(family, config)
    if any(choice.field == "architectures" for choice in spec.choose.values()):
        names = sub_config(config, spec.fields_in, "config").get("architectures")
        return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    causal = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.get("model_type"))
    return None if causal == spec.transformers_class else spec.transformers_class


def _named_class(config: Mapping[str, Any]) -> str | None:
    names = config.get("architectures")
    return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None


def _build(torch, transformers, config: Mapping[str, Any], name: str, class_name: str | None):
    options = {"attn_implementation": "eager", "experts_implementation": "eager", "dtype": torch.float32}
    try:
        hf_config = transformers.AutoConfig.for_model(**copy.deepcopy(dict(config)))
        torch.manual_seed(0)
        if class_name is None and type(hf_config) not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
            class_name = _named_class(config)  # a vision-language checkpoint with no causal LM of its own (Qwen3-VL)
        construct = (lambda: transformers.AutoModelForCausalLM.from_config(hf_config, **options)) if class_name is None else (lambda: getattr(transformers, class_name)._from_config(hf_config, **options))
        _within_budget(torch, construct, name)
        module = construct()
    except (ValueError, KeyError, TypeError, AttributeError, AssertionError) as e:  # torch asserts an embedding's padding row
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise OracleFails(f"{name}: transformers cannot build {class_name or 'a causal LM'} from this config ({reason[:200]})") from None
    return module


def _within_budget(torch, construct, name: str) -> None:
    """Count the module's parameters on the meta device (nothing allocated) before it is built for real: a
    config whose sizes the tiny table does not reach (a user's declaration at its own sizes, a field transformers
    defaults to full size) is refused instead of filling the machine's memory."""
    with torch.device("meta"):
        count = sum(p.numel() for p in construct().parameters())
    if count > MAX_PARAMS:
        raise ConfigError(f"{name}: the module symform check would build has {count:,} parameters, more than its budget of {MAX_PARAMS:,}; give the config small sizes (check shrinks only the sizes formulas/check.toml names)")


# --- roles: which part of the model a module or path is ------------------------------------------


def _role(segments: list[str]) -> str:
    """The role the segments nearest the leaf mark (the longest run of segments that names one, at each step up);
    layer and module-list indices do not break a run (deepstack_merger_list.2.norm is the run deepstack_merger_list.norm)."""
    tables = _tables()
    tower = next((tables.towers[s] for s in segments if s in tables.towers), None)
    if tower is not None:
        return tower
    segments = [s for s in segments if not s.isdigit()]
    longest = max(map(len, tables.roles))
    for end in range(len(segments), 0, -1):
        for size in range(min(longest, end), 0, -1):
            role = tables.roles.get(tuple(segments[end - size : end]))
            if role is not None:
                return role
    inner = [s for s in segments if s not in tables.skip and not s.isdigit()]
    if "layers" in segments or "h" in segments:
        return "layers (other)"
    return inner[0] if inner else "other"


def _hf_segments(name: str, classes: Mapping[str, str]) -> list[str]:
    """A transformers module or parameter name as symform's segments: a module whose class check.toml names
    becomes that class's segments (a hybrid's `mixer` its kind of mixer), then runs of segments are renamed."""
    parts = name.split(".")
    segments: list[str] = []
    for i, part in enumerate(parts):
        kind = _tables().classes.get(classes.get(".".join(parts[: i + 1]), ""))
        segments.extend(kind if kind is not None else [part])
    return _renamed([s for s in segments if s not in ("weight", "bias")])


def _renamed(segments: list[str]) -> list[str]:
    renames = _tables().renames
    longest = max(map(len, renames), default=0)
    result: list[str] = []
    i = 0
    while i < len(segments):
        for size in range(min(longest, len(segments) - i), 0, -1):
            new = renames.get(tuple(segments[i : i + size]))
            if new is not None:
                result.extend(new)
                i += size
                break
        else:
            result.append(segments[i])
            i += 1
    return result


def _module_classes(module) -> dict[str, str]:
    return {name: type(sub).__name__ for name, sub in module.named_modules() if name}


def _symform_roles(model: Model, quantity: str, **workload: int) -> dict[str, int]:
    totals: dict[str, int] = {}
    for path, value in model.evaluate_breakdown(quantity, depth=None, **workload).items():
        # a declaration's parts may bear transformers' module names (symform import writes them): renamed alike
        # (and a kind of layer its own part, layers_0 and layers_1 where a list holds two kinds)
        role = _role(path.split("/") if model.spec.family is not None else _renamed([re.sub(r"_\d+$", "", s) for s in path.split("/")]))
        totals[role] = totals.get(role, 0) + int(value)
    return totals


def _rows(quantity: str, ours: Mapping[str, int], theirs: Mapping[str, int]) -> list[Row]:
    parts = [p for p in dict.fromkeys([*theirs, *ours]) if ours.get(p, 0) or theirs.get(p, 0)]
    rows = [Row(quantity, p, ours.get(p, 0), theirs.get(p, 0)) for p in parts]
    return [*rows, Row(quantity, "total", sum(ours.values()), sum(theirs.values()))]


def _param_rows(model: Model, module) -> list[Row]:
    theirs: dict[str, int] = {}
    classes = _module_classes(module)
    for name, parameter in _parameters_once(module):
        role = _role(_hf_segments(name, classes))
        theirs[role] = theirs.get(role, 0) + parameter.numel()
    return _rows("params", _symform_roles(model, "params"), theirs)


def _parameters_once(module):
    """Every parameter once, as symform counts a tied weight, under the name it is tied to: named_parameters()
    yields it under whichever name comes first in module order (XLM-RoBERTa builds its head before its encoder,
    which would put the token embedding among the heads)."""
    ties = getattr(module, "_tied_weights_keys", None)
    sources = set(ties.values()) if isinstance(ties, Mapping) else set()
    names: dict[int, list[str]] = {}
    tensors = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
        tensors[id(parameter)] = parameter
    for key, found in names.items():
        yield next((n for n in found if n in sources), found[0]), tensors[key]


def _flop_rows(torch, model: Model, module, config: Mapping[str, Any]) -> list[Row]:
    from torch.utils.flop_counter import FlopCounterMode

    inputs = _inputs(torch, module, config)
    module.eval()
    fixes = counter_fixes(torch)
    try:
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=fixes) as forward:
            _forward(module, **inputs)
    except AssertionError:  # the counter's module tracker cannot hook a view of a weight handed to a submodule (DbrxExperts) under no_grad
        with FlopCounterMode(display=False, custom_mapping=fixes) as forward:
            _forward(module, **inputs)
    counts = forward.get_flop_counts()
    theirs: dict[str, int] = {}
    classes = _module_classes(module)
    for name, ops in counts.items():
        inner = name.partition(".")[2]  # the first segment is the model's class
        if not inner or name == "Global":
            continue
        segments = _hf_segments(inner, classes)
        role = _role(segments)
        parent_name = inner.rpartition(".")[0]
        parent = _role(_hf_segments(parent_name, classes)) if parent_name else None
        if role != parent and role in ("embed", "attn", "mlp", "final_norm", "lm_head"):  # the outermost module of its role
            theirs[role] = theirs.get(role, 0) + sum(ops.values())
    rest = forward.get_total_flops() - sum(theirs.values())
    if rest:
        theirs["other"] = rest
    ours = _symform_roles(model.with_conventions(training=0), "forward_flops", **_sizes(module))
    ours = {**{k: v for k, v in ours.items() if k in theirs or k in ("embed", "attn", "mlp", "final_norm", "lm_head")}, "other": sum(v for k, v in ours.items() if k not in ("embed", "attn", "mlp", "final_norm", "lm_head"))}
    module.train()
    module.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False, custom_mapping=fixes) as both:
        _backward_scalar(_forward(module, **inputs)).backward()
    backward = both.get_total_flops() - forward.get_total_flops()
    ours_backward = int(model.with_conventions(training=0).evaluate("backward_flops", **_sizes(module)))
    return [*_rows("forward_flops", ours, theirs), Row("backward_flops", "total", ours_backward, backward)]


def counter_fixes(torch) -> dict[Any, Any]:
    """What PyTorch's FlopCounterMode gets wrong, put right. It has no formula for a triangular solve (Gated
    DeltaNet's chunked scan solves two unit-triangular systems per chunk), so it counts none: here an n×n
    solve costs n·(n − 1) FLOPs per right-hand column (one multiply-add per off-diagonal entry), and n more
    when the diagonal is not unit. Its convolution backward counts the weight gradient as if a grouped
    (depthwise) convolution were dense, `groups` times over: here each gradient of a convolution costs what
    its forward does."""
    from torch.utils.flop_counter import conv_flop_count

    def solve_triangular(a_shape, b_shape, *args, out_shape=None, unitriangular=False, **kwargs) -> int:
        n = a_shape[-1]
        columns = math.prod(out_shape) // n if n else 0
        return columns * (n * (n - 1) + (0 if unitriangular else n))

    def convolution_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed, _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
        forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
        return forward * (int(output_mask[0]) + int(output_mask[1]))

    aten = torch.ops.aten
    return {aten.linalg_solve_triangular: solve_triangular, aten.convolution_backward: convolution_backward}


def _cache_rows(torch, model: Model, module, config: Mapping[str, Any]) -> list[Row]:
    """The bytes of the keys and values (and a sparse-attention indexer's keys) transformers' cache keeps after one forward, and of the recurrent
    state (conv windows and state matrices) where the model has recurrent layers."""
    module.eval()
    with torch.no_grad():
        output = _forward(module, **_inputs(torch, module, config), use_cache=True)
    keys_values, states = cache_bytes(torch, output)
    rows = [Row("kv_cache", "total", int(model.evaluate("kv_cache", **_sizes(module))), keys_values)]
    ours_state = int(model.evaluate("recurrent_state", **_sizes(module)))
    if ours_state or states:
        rows.append(Row("recurrent_state", "total", ours_state, states))
    return rows


def cache_bytes(torch, output) -> tuple[int | None, int | None]:
    """The bytes of keys and values, and of recurrent state, in the cache a forward returned (0 and 0 where it
    returned none; None and None for a cache of another kind, which has no layers to read)."""
    cache = output.get("cache", output.get("past_key_values"))
    layers = getattr(cache, "layers", None)
    if hasattr(cache, "cross_attention_cache"):  # an encoder-decoder's: the decoder's own keys and values and the encoder output's
        layers = [*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers]
    if cache is None:
        keys_values, states = 0, 0  # an encoder keeps nothing
    elif layers is None:
        keys_values, states = None, None
    else:
        keys_values = _bytes(torch, (getattr(layer, name, None) for layer in layers for name in ("keys", "values", "indexer_keys")))
        states = _bytes(torch, (t for layer in layers for name in ("conv_states", "recurrent_states") for t in (getattr(layer, name, None) or {}).values()))
    return keys_values, states


def _bytes(torch, tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _saved_row(torch, model: Model, module, config: Mapping[str, Any]) -> Row:
    """Bytes of the distinct storages autograd still holds after one training forward (loss included),
    parameters left out. Tensors packed by a graph that the forward builds and drops (a router's mask) are
    freed with it, and the allocator may reuse their address, so only tensors still alive count."""
    module.train()
    parameters = {p.untyped_storage().data_ptr() for p in module.parameters()}
    packed: list[tuple[weakref.ref, int, int]] = []

    def pack(tensor):
        # a detached alias: a node that saves its own output (exp, sigmoid) would otherwise hold that output, whose
        # grad_fn is the node, a cycle nothing frees, and a graph the forward drops would still look kept
        alias = tensor.detach()
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            packed.append((weakref.ref(alias), storage.data_ptr(), storage.nbytes()))
        return alias

    inputs = _inputs(torch, module, config)
    ids = inputs.get("decoder_input_ids", inputs["input_ids"])
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        # labels of their own, as a masked LM's are (its inputs carry mask tokens): a masked-LM loss keeps a view of them;
        # an encoder without a head (BertModel, ModernBertModel) takes none and computes no loss
        output = _forward(module, **inputs, **_labels(torch, module, ids))
    # the cache a forward returns holds each recurrent layer's final state, and with it the graph that only the
    # state needs: training drops it (as tests/oracle.py does), so the count leaves it out
    output = {key: value for key, value in output.items() if key not in ("cache", "past_key_values")}
    kept = sum({ptr: size for alive, ptr, size in packed if alive() is not None}.values())
    del output
    return Row("saved_activations", "total", int(model.evaluate("saved_activations", **_sizes(module))), kept)


def _forward(module, **inputs):
    """The module's output; a forward that fails inside transformers (a bug of the installed version) refused in
    one line, since there is nothing to compare with."""
    try:
        return module(**inputs)
    except (AttributeError, IndexError, KeyError, RuntimeError, TypeError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else ""
        raise OracleFails(
            f"transformers' {type(module).__name__} fails in its own forward ({type(e).__name__}: {reason[:200]}); symform check needs a module that runs: use a transformers version whose forward works"
        ) from None


def _backward_scalar(output):
    """The sum of the logits, or for an encoder without a head of every output it trains: its last hidden state
    and, where it has a pooler, the pooled output (whose projection's gradients symform counts)."""
    logits = output.get("logits")
    if logits is not None:
        return logits.sum()
    pooled = output.get("pooler_output")
    return output["last_hidden_state"].sum() + (0 if pooled is None else pooled.sum())


def _takes_labels(module) -> bool:
    return "labels" in inspect.signature(module.forward).parameters


def _labels(torch, module, ids) -> dict:
    """A training forward's labels: none for an encoder without a head; the tokens for a language-model head;
    with a next-sentence head also one sentence label per sequence (it computes its losses only given both)."""
    if not _takes_labels(module):
        return {}
    labels = {"labels": ids.clone()}
    if "next_sentence_label" in inspect.signature(module.forward).parameters:
        labels["next_sentence_label"] = torch.zeros(ids.shape[0], dtype=torch.long)
    return labels


def _ids(torch, config: Mapping[str, Any], seq: int = SEQ):
    generator = torch.Generator().manual_seed(0 if seq == SEQ else seq)  # the ids every check has run on
    vocab = config.get("vocab_size") or 101
    return torch.randint(0, vocab, (BATCH, seq), generator=generator)


def _encoder_decoder(module) -> bool:
    return bool(getattr(module.config, "is_encoder_decoder", False))


def _inputs(torch, module, config: Mapping[str, Any]) -> dict:
    """The token ids of one forward: SEQ of them per sequence, or for an encoder-decoder SOURCE_SEQ for the
    encoder and SEQ for the decoder."""
    if _encoder_decoder(module):
        return {"input_ids": _ids(torch, config, SOURCE_SEQ), "decoder_input_ids": _ids(torch, config)}
    return {"input_ids": _ids(torch, config)}


def _sizes(module) -> dict[str, int]:
    """The workload symform evaluates at, the same as _inputs hands the module."""
    return {"batch": BATCH, "seq": SEQ, **({"source_seq": SOURCE_SEQ} if _encoder_decoder(module) else {})}
