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
from dataclasses import dataclass
from functools import cache
from typing import Any, Mapping

from ..engine.data import formulas_dir, read_toml
from ..engine.errors import ConfigError, SymformError
from ..engine.model import Model
from .quantization import aliases

BATCH, SEQ = 2, 8  # two sequences: transformers' loss pads a single sequence's labels by one token
PER_LAYER_LISTS = ("layer_types", "mlp_only_layers")
DROPPED = ("rope_scaling", "quantization_config")  # per-head rotary factors do not survive new sizes; FLOPs and parameters do not depend on them


class OracleMissing(SymformError):
    """torch or transformers is not installed."""


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
        }


@cache
def _tables() -> tuple[dict[str, Any], dict[str, list[str]], list[str]]:
    names = aliases()
    return read_toml(formulas_dir() / "check.toml")["tiny"], names.roles, names.skip


def _oracle():
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise OracleMissing("symform check builds the real PyTorch module: pip install 'symform[oracle]' (torch and transformers)") from None
    return torch, transformers


def tiny_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with every size in check.toml's table shrunk, per-layer lists cut to the layer count."""
    tiny, _, _ = _tables()
    result = {k: copy.deepcopy(v) for k, v in config.items() if k not in DROPPED}
    for field, value in tiny.items():
        if result.get(field) is not None:
            result[field] = value
    if config.get("num_key_value_heads") is not None and config.get("num_key_value_heads") == config.get("num_attention_heads"):
        result["num_key_value_heads"] = result["num_attention_heads"]  # multi-head attention stays multi-head (MLA needs it)
    vocab = result.get("vocab_size")
    for field in ("bos_token_id", "eos_token_id", "pad_token_id"):  # token ids past the tiny vocabulary: none
        ids = result.get(field)
        if isinstance(vocab, int) and (isinstance(ids, int) and ids >= vocab or isinstance(ids, list) and any(isinstance(i, int) and i >= vocab for i in ids)):
            result[field] = None
    layers = result.get("num_hidden_layers")
    for field in PER_LAYER_LISTS:
        if isinstance(result.get(field), list) and layers is not None:
            result[field] = [v for v in result[field] if not isinstance(v, int) or v < layers][:layers] if field == "mlp_only_layers" else result[field][:layers]
    return result


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
        config = tiny_config(config)
        ours = Model.from_config(config, name=model.name)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the report is the table: transformers' own advice stays out of it
    try:
        module = _build(torch, transformers, config, model.name)
        ours = ours.with_conventions(act_bytes=4, kv_bytes=4, windowed=0)  # float32 tensors; eager attention masks the full score matrix
        rows = [*_param_rows(ours, module), *_flop_rows(torch, ours, module, config), _cache_row(torch, ours, module, config), _saved_row(torch, ours, module, config)]
    finally:
        transformers.logging.set_verbosity(verbosity)
    return CheckReport(model.name, type(module).__name__, config, rows)


def _build(torch, transformers, config: Mapping[str, Any], name: str):
    try:
        hf_config = transformers.AutoConfig.for_model(**copy.deepcopy(dict(config)))
        torch.manual_seed(0)
        module = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager", experts_implementation="eager", dtype=torch.float32)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{name}: transformers cannot build a causal LM from this config ({reason[:200]})") from None
    return module


# --- roles: which part of the model a module or path is ------------------------------------------


def _role(segments: list[str]) -> str:
    _, roles, skip = _tables()
    lookup = {alias: role for role, aliases in roles.items() for alias in aliases}
    for segment in reversed(segments):
        if segment in lookup:
            return lookup[segment]
    inner = [s for s in segments if s not in skip and not s.isdigit()]
    if "layers" in segments or "h" in segments:
        return "layers (other)"
    return inner[0] if inner else "other"


def _hf_segments(name: str) -> list[str]:
    return [s for s in name.split(".") if s not in ("weight", "bias")]


def _symform_roles(model: Model, quantity: str, **workload: int) -> dict[str, int]:
    totals: dict[str, int] = {}
    for path, value in model.evaluate_breakdown(quantity, depth=None, **workload).items():
        role = _role(path.split("/"))
        totals[role] = totals.get(role, 0) + int(value)
    return totals


def _rows(quantity: str, ours: Mapping[str, int], theirs: Mapping[str, int]) -> list[Row]:
    parts = [p for p in dict.fromkeys([*theirs, *ours]) if ours.get(p, 0) or theirs.get(p, 0)]
    rows = [Row(quantity, p, ours.get(p, 0), theirs.get(p, 0)) for p in parts]
    return [*rows, Row(quantity, "total", sum(ours.values()), sum(theirs.values()))]


def _param_rows(model: Model, module) -> list[Row]:
    theirs: dict[str, int] = {}
    for name, parameter in module.named_parameters():  # a tied weight is yielded once, as symform counts it
        role = _role(_hf_segments(name))
        theirs[role] = theirs.get(role, 0) + parameter.numel()
    return _rows("params", _symform_roles(model, "params"), theirs)


def _flop_rows(torch, model: Model, module, config: Mapping[str, Any]) -> list[Row]:
    from torch.utils.flop_counter import FlopCounterMode

    ids = _ids(torch, config)
    module.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        module(input_ids=ids)
    counts = forward.get_flop_counts()
    theirs: dict[str, int] = {}
    for name, ops in counts.items():
        segments = name.split(".")[1:]  # the first is the model's class
        if not segments or name == "Global":
            continue
        role = _role(segments)
        parent = _role(segments[:-1]) if len(segments) > 1 else None
        if role != parent and role in ("embed", "attn", "mlp", "final_norm", "lm_head"):  # the outermost module of its role
            theirs[role] = theirs.get(role, 0) + sum(ops.values())
    rest = forward.get_total_flops() - sum(theirs.values())
    if rest:
        theirs["other"] = rest
    ours = _symform_roles(model.with_conventions(training=0), "forward_flops", batch=BATCH, seq=SEQ)
    ours = {**{k: v for k, v in ours.items() if k in theirs or k in ("embed", "attn", "mlp", "final_norm", "lm_head")}, "other": sum(v for k, v in ours.items() if k not in ("embed", "attn", "mlp", "final_norm", "lm_head"))}
    module.train()
    module.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as both:
        module(input_ids=ids).logits.sum().backward()
    backward = both.get_total_flops() - forward.get_total_flops()
    ours_backward = int(model.with_conventions(training=0).evaluate("backward_flops", batch=BATCH, seq=SEQ))
    return [*_rows("forward_flops", ours, theirs), Row("backward_flops", "total", ours_backward, backward)]


def _cache_row(torch, model: Model, module, config: Mapping[str, Any]) -> Row:
    module.eval()
    with torch.no_grad():
        output = module(input_ids=_ids(torch, config), use_cache=True)
    cache = output.get("cache", output.get("past_key_values"))
    layers = getattr(cache, "layers", None)
    if layers is None:
        theirs = None
    else:
        theirs = sum(t.numel() * t.element_size() for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if t is not None and hasattr(t, "numel"))
    return Row("kv_cache", "total", int(model.evaluate("kv_cache", batch=BATCH, seq=SEQ)), theirs)


def _saved_row(torch, model: Model, module, config: Mapping[str, Any]) -> Row:
    """Bytes of the distinct storages autograd keeps in one training forward (loss included), parameters left out."""
    module.train()
    parameters = {p.untyped_storage().data_ptr() for p in module.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = _ids(torch, config)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(input_ids=ids, labels=ids)
    return Row("saved_activations", "total", int(model.evaluate("saved_activations", batch=BATCH, seq=SEQ)), sum(kept.values()))


def _ids(torch, config: Mapping[str, Any]):
    generator = torch.Generator().manual_seed(0)
    vocab = config.get("vocab_size") or 101
    return torch.randint(0, vocab, (BATCH, SEQ), generator=generator)
