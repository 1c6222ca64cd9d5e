"""How a checkpoint stores its weights: formats, the leaves they cover, and their bytes.

A weight format (``formulas/memory.toml``) gives the bytes of one stored weight
matrix of ``d_out`` rows and ``d_in`` columns, scales and zero points included,
as an expression (``stored``), or as bits per weight plus a scale and zero
point per group. A checkpoint's ``quantization_config`` (in its config.json) or
``hf_quant_config.json`` names the format and its parameters (block and group
sizes) and the modules left unquantised; :func:`checkpoint_format` reads them.
The module names of a checkpoint (``model.layers.*.self_attn``) are matched to
symform's component paths (``layers/attn``) through the aliases in
``formulas/checkpoints.toml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Annotated, Any, Mapping

import sympy

from ...engine.budget import quoted
from ...engine.store.data import formulas_dir, read_toml
from ...engine.errors import ConfigError, DeclarationError, describe_validation
from ...engine.language.families import Checkpoint
from ...engine.language.schema import SchemaError, above, at_least, build
from ...engine.graph.model import Model
from ...engine.language.safe_expr import parse



@dataclass(frozen=True, kw_only=True)
class WeightFormat:
    doc: str
    source: str = ""
    bits: Annotated[int, above(0)]
    group: Annotated[int, at_least(0)] = 0
    scale_bytes: int | str = 0
    zero_bytes: int | str = 0
    quantises: list[str] = field(default_factory=list)  # primitives whose parameters take the format; [] = all
    other_bits: int = 16
    stored: str | None = None  # bytes of one [d_out, d_in] matrix with its scales, over d_in, d_out, group, block_out, block_in
    block_out: Annotated[int, at_least(0)] = 0
    block_in: Annotated[int, at_least(0)] = 0
    flops_dtype: str | None = None  # the device rate its matrix products run at, where the device lists one


@dataclass(frozen=True, kw_only=True)
class Aliases:
    module_aliases: dict[str, str]  # a checkpoint's module name → symform's path segment
    skip: list[str]  # name segments that say nothing about which component (model, layers, indices)
    roles: dict[str, list[str]]  # symform check: the part of a model a module's name or path belongs to


@cache
def aliases() -> Aliases:
    try:
        return build(Aliases, read_toml(formulas_dir() / "checkpoints.toml"))
    except SchemaError as e:
        raise DeclarationError(f"checkpoints.toml: {describe_validation(e)}") from None


def _rational(text: int | str) -> sympy.Rational:
    return sympy.Rational(parse(str(text), {}))


def bytes_per_weight(fmt: WeightFormat) -> sympy.Rational:
    """Stored bytes per quantised weight: its bits plus its share of the group's scale and zero point."""
    per_group = (_rational(fmt.scale_bytes) + _rational(fmt.zero_bytes)) / fmt.group if fmt.group else 0
    return sympy.Rational(fmt.bits, 8) + per_group


# --- which leaves a format covers ---------------------------------------------------------


def module_segments(name: str) -> tuple[str, ...]:
    """A checkpoint's module name or pattern (``model.layers.*.self_attn``, ``re:.*mlp.gate$``) as symform segments."""
    table = aliases()
    text = name.removeprefix("re:")
    words = [w for w in re.split(r"[^A-Za-z0-9_]+", text) if w]
    return tuple(table.module_aliases.get(w, w) for w in words if w not in table.skip and not w.isdigit())


def kept(path: str, keep: tuple[str, ...]) -> bool:
    """Whether a leaf's path falls under one of the modules the checkpoint keeps unquantised."""
    segments = tuple(s for s in path.split("/") if s not in aliases().skip)
    for name in keep:
        wanted = module_segments(name)
        n = len(wanted)
        if n and any(segments[i : i + n] == wanted for i in range(len(segments) - n + 1)):
            return True
    return False


def _covers(fmt: WeightFormat, component: str, path: str, keep: tuple[str, ...]) -> bool:
    return (not fmt.quantises or component in fmt.quantises) and not kept(path, keep)


def stored_bytes(fmt: WeightFormat, node: Mapping[str, Any], path: str, keep: tuple[str, ...] = ()) -> sympy.Expr:
    """Bytes of one instance of a leaf's parameters as stored: a quantised matrix with its scales and
    its bias at other_bits, or every parameter at other_bits when the format does not cover it."""
    other = sympy.Rational(fmt.other_bits, 8)
    params = node["quantities"]["params"]
    if not _covers(fmt, node["component"].name, path, keep):
        return other * params
    if fmt.stored is None:
        return bytes_per_weight(fmt) * params
    args = node["args"]
    names = {"d_in": args["d_in"], "d_out": args["d_out"], "group": fmt.group or args["d_in"], "block_out": fmt.block_out, "block_in": fmt.block_in, "scale_bytes": _rational(fmt.scale_bytes)}
    matrix = parse(fmt.stored, {k: sympy.sympify(v) for k, v in names.items()})
    return matrix + other * sympy.sympify(args.get("bias", 0)) * args["d_out"]


def weight_bytes_by_leaf(model: Model, fmt: WeightFormat, keep: tuple[str, ...] = ()) -> dict[str, sympy.Expr]:
    """Each leaf's stored bytes per parameter (the ``weight_bytes`` its traffic is read at)."""
    graph = model.graph().graph
    ratios = {}
    for path, node in graph.nodes.items():
        if not node["component"].is_primitive:
            continue
        params = node["quantities"]["params"]
        ratios[path] = sympy.Integer(0) if params == 0 else sympy.simplify(stored_bytes(fmt, node, path, keep) / params)
    return ratios


# --- what a checkpoint says --------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFormat:
    """A checkpoint's weight format: the recipe with the checkpoint's parameters, what it keeps unquantised, what was read."""

    name: str
    format: WeightFormat
    keep: tuple[str, ...] = ()
    read: str = ""
    notes: tuple[str, ...] = field(default=())


def checkpoint_format(checkpoint: Checkpoint | None, formats: Mapping[str, WeightFormat]) -> StoredFormat | None:
    """The format a checkpoint's quantisation config names, or None for an unquantised checkpoint."""
    if checkpoint is None or not checkpoint.quantised:
        return None
    if checkpoint.quant_file is not None:
        return _modelopt(checkpoint.quant_file, formats)
    config = checkpoint.quantization or {}
    method = str(config.get("quant_method", "")).lower()
    reader = _READERS.get(method)
    if reader is None:
        raise ConfigError(
            f"the checkpoint's quantization_config names quant_method {config.get('quant_method')!r}, which symform does not read;"
            f" give --weight-format ({', '.join(formats)}) to say how its weights are stored"
        )
    return reader(config, formats)


def _keep(config: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    """Modules kept unquantised: the config's lists, and the output head (transformers never quantises it)."""
    names: list[str] = []
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"the checkpoint's quantization_config has {key} = {quoted(value)}; it must be a list of module names")
        for name in value:
            _check_whole_layers(key, name)
        names += value
    return tuple(dict.fromkeys([*names, "lm_head"]))


def _check_whole_layers(key: str, name: str) -> None:
    """A kept module with a layer or expert index (``model.layers.0.mlp``) is kept in that one layer only, as
    transformers matches module names; symform counts every layer of a kind alike, so it cannot keep it apart."""
    if not name.startswith("re:") and any(w.isdigit() for w in name.split(".")):
        raise ConfigError(
            f"the checkpoint's quantization_config keeps {quoted(name)} unquantised ({key}), a module of one numbered layer or expert; "
            "symform counts every layer alike and would keep it in all of them: give --weight-format to say how the weights are stored"
        )


def _with(formats: Mapping[str, WeightFormat], name: str, **changes: Any) -> WeightFormat:
    return replace(formats[name], **changes)


def _positive(config: Mapping[str, Any], key: str, default: int, what: str) -> int:
    value = config.get(key, default)
    if value in (None, -1):
        return 0  # one group over the whole input (GPTQ's group_size -1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"the checkpoint's quantization_config has {key} = {value!r}; {what} must be a positive integer")
    return value


def _fp8(config: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    keep = _keep(config, "modules_to_not_convert", "ignored_layers")
    block = config.get("weight_block_size")
    if block is None:
        return StoredFormat("fp8", formats["fp8"], keep, "quantization_config: fp8, one scale per tensor")
    _check_block(block, "weight_block_size")
    fmt = _with(formats, "fp8-block", block_out=block[0], block_in=block[1])
    return StoredFormat("fp8-block", fmt, keep, f"quantization_config: fp8 ({config.get('fmt', 'e4m3')}) in blocks of {block[0]}×{block[1]} with a float32 scale each")


def _check_block(block: Any, key: str) -> None:
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ConfigError(f"the checkpoint's {key} is {quoted(block)}; expected two positive integers [rows, columns]")


def _mxfp4(config: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    keep = _keep(config, "modules_to_not_convert")
    return StoredFormat("mxfp4", formats["mxfp4"], keep, "quantization_config: mxfp4 (E2M1 values, one E8M0 scale per 32)")


def _int4(kind: str, config: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    bits = config.get("bits", config.get("w_bit", 4))
    if bits != 4:
        raise ConfigError(f"the checkpoint is {kind} with {bits} bits; symform reads 4-bit {kind} (give --weight-format for others)")
    key = "q_group_size" if "q_group_size" in config and "group_size" not in config else "group_size"  # AutoAWQ's own files say q_group_size
    group = _positive(config, key, 128, key)
    keep = _keep(config, "modules_to_not_convert")
    name = f"{kind}-int4"
    read = f"quantization_config: {kind} int4 in groups of {group or 'the whole input'} with an fp16 scale and a 4-bit zero point each"
    return StoredFormat(name, _with(formats, name, group=group), keep, read)


def _bitsandbytes(config: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    keep = _keep(config, "llm_int8_skip_modules")
    if config.get("load_in_4bit") and config.get("load_in_8bit"):
        raise ConfigError("the checkpoint's bitsandbytes config loads in both 4 and 8 bits (transformers refuses it); keep one of load_in_4bit and load_in_8bit")
    if config.get("load_in_4bit"):
        kind = str(config.get("bnb_4bit_quant_type", "fp4"))
        notes = ("bitsandbytes also stores each quantised tensor's quant_state as a small JSON tensor, not counted",)
        if config.get("bnb_4bit_use_double_quant"):
            return StoredFormat("nf4-double", formats["nf4-double"], keep, f"quantization_config: bitsandbytes {kind} with double quantisation", notes)
        return StoredFormat("nf4", formats["nf4"], keep, f"quantization_config: bitsandbytes {kind}", notes)
    if config.get("load_in_8bit"):
        return StoredFormat("int8-rowwise", formats["int8-rowwise"], keep, "quantization_config: bitsandbytes int8 (LLM.int8, one float32 scale per row)")
    raise ConfigError("the checkpoint's bitsandbytes config loads neither in 4 nor in 8 bits; give --weight-format")


def _compressed_tensors(config: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    groups = config.get("config_groups") or {}
    if not isinstance(groups, Mapping):
        raise ConfigError(f"the checkpoint's compressed-tensors config_groups is {quoted(groups)}; it must be a JSON object of schemes")
    schemes = [g.get("weights") for g in groups.values() if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)]
    if len(schemes) != 1:
        raise ConfigError(f"the checkpoint's compressed-tensors config has {len(schemes)} weight schemes; symform reads one (give --weight-format)")
    weights = schemes[0]
    keep = _keep(config, "ignore")
    bits, kind, strategy = weights.get("num_bits"), weights.get("type"), weights.get("strategy")
    fmt_name = str(config.get("format", ""))
    if kind == "float" and bits == 8:
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            _check_block(block, "block_structure")
            return StoredFormat("fp8-block", _with(formats, "fp8-block", block_out=block[0], block_in=block[1]), keep, f"compressed-tensors: fp8 in blocks of {block[0]}×{block[1]}")
        return StoredFormat("fp8-channel", formats["fp8-channel"], keep, f"compressed-tensors: fp8 with one bf16 scale per {strategy or 'channel'}")
    if kind == "float" and bits == 4 and weights.get("group_size") == 16:
        return StoredFormat("nvfp4", formats["nvfp4"], keep, "compressed-tensors: nvfp4 (E2M1, an FP8 scale per 16 and a global scale)")
    if kind == "int" and bits == 4:
        group = _positive(weights, "group_size", 128, "group_size")
        symmetric = weights.get("symmetric", True)
        if not isinstance(symmetric, bool):  # "false" as text would read as true
            raise ConfigError(f"the checkpoint's compressed-tensors scheme has symmetric = {quoted(symmetric)}; it must be true or false (JSON booleans)")
        name = "int4-packed" if symmetric else "int4-packed-zero"
        return StoredFormat(name, _with(formats, name, group=group), keep, f"compressed-tensors ({fmt_name}): int4 in groups of {group}, {'symmetric' if symmetric else 'with zero points'}")
    raise ConfigError(f"the checkpoint's compressed-tensors scheme ({kind} {bits} bits, {strategy}) is not one symform reads; give --weight-format")


def _modelopt(quant_file: Mapping[str, Any], formats: Mapping[str, WeightFormat]) -> StoredFormat:
    quantization = quant_file.get("quantization") if isinstance(quant_file.get("quantization"), Mapping) else quant_file
    algo = str(quantization.get("quant_algo", "")).upper()
    keep = _keep(quantization, "exclude_modules")
    if algo == "NVFP4":
        return StoredFormat("nvfp4", formats["nvfp4"], keep, "hf_quant_config.json: NVFP4 (E2M1, an FP8 scale per 16, a float32 scale per tensor)")
    if algo == "FP8":
        return StoredFormat("fp8", formats["fp8"], keep, "hf_quant_config.json: FP8, one scale per tensor")
    raise ConfigError(f"hf_quant_config.json names quant_algo {quantization.get('quant_algo')!r}, which symform does not read; give --weight-format")


_READERS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "gptq": lambda c, f: _int4("gptq", c, f),
    "awq": lambda c, f: _int4("awq", c, f),
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed_tensors,
    "modelopt": lambda c, f: _modelopt(c, f),
}
