"""A transformers module tree as symform parts: each leaf module mapped to a primitive, repeated layers grouped.

A tree is described as nested tuples, hashable so that equal layers of a ModuleList group into one kind with a
count:

- ``("leaf", primitive, flags, dims)``: a module symform has a primitive for (a linear layer, an embedding, a
  norm, a depthwise convolution) or a bare learned tensor; ``flags`` are its 0/1 options (a bias), ``dims`` its
  sizes;
- ``("module", class name, parts)``: any other module, ``parts`` its own tensors and children by name;
- ``("group", kinds)``: a ModuleList, ``kinds`` one ``(count, description)`` per distinct kind of element;
- ``("leaf", "attention", (windowed,), (n_heads, n_kv_heads, d_qk, d_v[, window]))``: the part ``@attention`` of a
  self-attention module (its query, key and value projections, or one fused): the heads its score and context
  products run over, read from the module (its head size and head counts, else its projections' widths), and the
  window transformers' cache keeps for its layer (``windowed`` 1: the last window - 1 tokens).

Every size (a dimension, a count) is a *slot*; :func:`flatten` lists them in a fixed order beside a skeleton
without them, so that trees of one model built at other sizes line up slot by slot. What no primitive
describes (an LSTM, a 2-D convolution, a module of another library with tensors of its own) is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...engine.errors import ConfigError

# torch.nn modules with tensors of their own that symform has no primitive for: refused by name
_NORM_SUFFIXES = ("norm", "layernorm", "rmsnorm")


class Unmappable(ConfigError):
    """A module or tensor of the model that no symform primitive describes."""


def describe(module: Any, torch: Any, path: str = "", seen: set[int] | None = None, windows: Mapping[int, int] | None = None) -> tuple:
    """The module's description; ``seen`` holds the tensors counted already (a tied head's weight is the
    embedding's), in the order ``parameters()`` yields them: a module's own tensors, then its children's;
    ``windows`` the sliding window of each layer whose cache keeps one (by layer index)."""
    seen = set() if seen is None else seen
    windows = {} if windows is None else windows
    leaf = _leaf(module, torch, path, seen)
    if leaf is not None:
        # a subclass may hold tensors of its own beside the weight and bias (a head's per-token logit scale), or
        # modules (an embedding's norm)
        extra = [(f"p_{n}", _bare(module, n, t, path, seen)) for n, t in module._parameters.items() if t is not None and n not in ("weight", "bias")]
        extra += [(n, describe(child, torch, _join(path, n), seen)) for n, child in module._modules.items() if child is not None and _has_parameters(child)]
        return leaf if not extra else ("module", type(module).__name__, (("main", leaf), *extra))
    parts: list[tuple[str, tuple]] = []
    for name, tensor in module._parameters.items():
        if tensor is not None:
            parts.append((f"p_{name}", _bare(module, name, tensor, path, seen)))
    if isinstance(module, torch.nn.ModuleList):
        return ("group", _kinds([describe(child, torch, _join(path, name), seen, windows) for name, child in module._modules.items() if child is not None]))
    for name, child in module._modules.items():
        if child is None or not _has_parameters(child):
            continue
        parts.append((name, describe(child, torch, _join(path, name), seen, windows)))
    heads = attention_heads(module, torch, windows)
    if heads is not None:
        parts.append(("@attention", heads))
    routed = routed_experts(module)
    if routed is not None:
        parts.append(("@routed", routed))
    return ("module", type(module).__name__, tuple(parts))


# the names transformers gives a self-attention's projections: query, key, value, or the three fused
QKV = (("q_proj", "q", "query", "wq", "q_lin", "q_attn", "Wq", "project_q"), ("k_proj", "k", "key", "wk", "k_lin", "Wk", "project_k"), ("v_proj", "v", "value", "wv", "v_lin", "Wv", "project_v"))
FUSED = ("qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv", "W_pack", "wqkv", "att_proj")
_HEAD_SIZE = ("head_dim", "attention_head_size", "head_size", "dim_head", "d_head")
_HEAD_COUNT = ("num_heads", "num_attention_heads", "n_head", "n_heads", "num_attn_heads")
_KV_COUNT = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv")


def attention_heads(module: Any, torch: Any, windows: Mapping[int, int]) -> tuple | None:
    """A self-attention module's heads as the ``attention`` leaf, or None where the module is not one or its
    projections' widths do not split into the heads it names (its score and context products are then not
    declared, and the import says its FLOPs are not exact)."""
    if "cross" in type(module).__name__.lower() or getattr(module, "is_cross_attention", False):
        return None
    widths = {name: _out_width(child, torch) for name, child in module._modules.items() if child is not None}
    q, k, v = (next((widths[n] for n in names if widths.get(n)), None) for names in QKV)
    fused = next((widths[n] for n in FUSED if widths.get(n)), None)
    if not (q and k and v) and not fused:
        return None
    config = getattr(module, "config", None)  # what the module does not hold itself, its config may
    d = _int_attribute(module, _HEAD_SIZE)
    heads = _int_attribute(module, _HEAD_COUNT) or (q // d if q and d else _int_attribute(config, _HEAD_COUNT + ("attention_heads",)))
    kv = _int_attribute(module, _KV_COUNT)
    groups = _int_attribute(module, ("num_key_value_groups",))
    if kv is None and groups and heads:
        kv = heads // groups
    if kv is None and fused and not (q and k and v):
        # neither the module nor its config names key/value heads: as many as query heads
        kv = _int_attribute(config, _KV_COUNT + ("multi_query_group_num", "kv_n_heads")) or heads
    if q and k and v:
        d = d or (q // heads if heads else None)
        kv = kv or (k // d if d else None)
        if not (d and heads and kv) or q != heads * d or k != kv * d or v % kv:
            return None
        d_v = v // kv
    else:
        if heads and not d and kv:
            d = fused // (heads + 2 * kv)
        if d and heads and not kv:
            kv = (fused - heads * d) // (2 * d)
        if not (d and heads and kv) or fused != (heads + 2 * kv) * d:
            return None
        d_v = d
    window = windows.get(getattr(module, "layer_idx", None))
    return ("leaf", "attention", (int(window is not None),), (heads, kv, d, d_v, *([window] if window is not None else [])))


def routed_experts(module: Any) -> tuple | None:
    """The products of a block that routes each token to top_k of its experts, as the ``routed`` leaf
    ``(top_k, n_experts, router_width, then each expert weight's two sizes)``: a router child holding its own
    [n_experts, width] weight and a ``top_k``, beside an experts child holding [n_experts, a, b] weights. Eager
    experts run each token through its top_k experts only, so each weight costs top_k products a token; a
    router that is a Linear of its own counts as one (router_width 0 here). None for any other module."""
    children = [c for c in module._modules.values() if c is not None]
    router = next((c for c in children if _int_attribute(c, ("top_k",)) and "router" in type(c).__name__.lower()), None)
    experts = next((c for c in children if type(c).__name__.endswith("Experts")), None)
    if router is None or experts is None:
        return None
    weights = [tuple(int(d) for d in t.shape) for t in experts._parameters.values() if t is not None and t.dim() == 3]
    if not weights or len({w[0] for w in weights}) != 1 or any(_has_parameters(c) for c in experts._modules.values() if c is not None):
        return None
    own = router._parameters.get("weight")
    width = int(own.shape[1]) if own is not None and own.dim() == 2 and int(own.shape[0]) == weights[0][0] else 0
    if own is None and _has_parameters(router):
        return None  # a router whose weight lives in a child of a kind not read here
    return ("leaf", "routed", (int(width > 0),), (_int_attribute(router, ("top_k",)), weights[0][0], *([width] if width else []), *(d for w in weights for d in w[1:])))


def _out_width(module: Any, torch: Any) -> int | None:
    weight = getattr(module, "weight", None)
    if isinstance(module, torch.nn.Linear):
        return int(weight.shape[0])
    if _is_conv1d_projection(module):
        return int(weight.shape[1])
    return None


def _int_attribute(module: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def _kinds(elements: list[tuple]) -> tuple:
    """Equal elements as one kind with a count, in the order each kind first appears."""
    counts: dict[tuple, int] = {}
    for element in elements:
        counts[element] = counts.get(element, 0) + 1
    return tuple((count, element) for element, count in counts.items())


def _owned(tensor: Any, seen: set[int]) -> int:
    """1 for a tensor counted here, 0 for one counted already where it is first yielded (a tied weight)."""
    if id(tensor) in seen:
        return 0
    seen.add(id(tensor))
    return 1


def _bare(module: Any, name: str, tensor: Any, path: str, seen: set[int]) -> tuple:
    """A learned tensor a module of transformers' own holds directly (a scale, attention sinks, fused expert
    weights): parameters only. A tensor of a module from another library is refused: its use is unknown."""
    origin = type(module).__module__
    if not origin.startswith("transformers."):
        raise Unmappable(f"{_join(path, name)}: a tensor of {origin}.{type(module).__name__}, which symform cannot read; symform import maps transformers' and torch.nn's modules only")
    return ("leaf", "parameters", (_owned(tensor, seen),), tuple(int(d) for d in tensor.shape))


def _leaf(module: Any, torch: Any, path: str, seen: set[int]) -> tuple | None:
    """A module symform has a primitive for, described; None for a module to look inside."""
    nn = torch.nn
    tensors = {name: t for name, t in module._parameters.items() if t is not None}
    bias = "bias" in tensors
    if isinstance(module, nn.Linear) or _is_conv1d_projection(module):
        weight = tensors["weight"]
        d_out, d_in = (weight.shape if isinstance(module, nn.Linear) else weight.shape[::-1])
        return ("leaf", "linear", (_owned(weight, seen), _owned(tensors["bias"], seen) if bias else 0, int(bias)), (int(d_in), int(d_out)))
    if isinstance(module, nn.Embedding):
        weight = tensors["weight"]
        return ("leaf", "embedding", (_owned(weight, seen),), (int(weight.shape[0]), int(weight.shape[1])))
    if isinstance(module, nn.Conv1d):
        return _conv1d(module, tensors, path, seen)
    if _is_norm(module, tensors):
        weight = tensors["weight"]
        kind = "rms_norm" if "rms" in type(module).__name__.lower() and not bias else "layer_norm"
        return ("leaf", kind, (_owned(weight, seen), _owned(tensors["bias"], seen) if bias else 0, int(bias)), (int(weight.shape[0]),))
    if tensors and module._modules and any(_has_parameters(m) for m in module._modules.values()):
        return None  # tensors of its own beside children: looked inside, its tensors bare
    if tensors and type(module).__module__.startswith("torch."):
        raise Unmappable(f"{path or 'the model'}: torch.nn.{type(module).__name__} has no symform primitive; symform import maps Linear, Embedding, LayerNorm/RMSNorm-like norms and depthwise Conv1d")
    return None


def _is_conv1d_projection(module: Any) -> bool:
    """transformers' Conv1D (GPT-2's projections): a linear layer whose weight is stored [d_in, d_out]."""
    cls = type(module)
    return cls.__name__ == "Conv1D" and cls.__module__ == "transformers.pytorch_utils"


def _is_norm(module: Any, tensors: dict[str, Any]) -> bool:
    """A norm over the last axis: a class named *Norm whose tensors are a 1-D weight and maybe a bias of its size."""
    name = type(module).__name__.lower()
    if not name.endswith(_NORM_SUFFIXES) or set(tensors) - {"weight", "bias"} or "weight" not in tensors:
        return False
    if any(_has_parameters(m) for m in module._modules.values()):
        return False
    shapes = {tuple(t.shape) for t in tensors.values()}
    return len(shapes) == 1 and len(next(iter(shapes))) == 1


def _conv1d(module: Any, tensors: dict[str, Any], path: str, seen: set[int]) -> tuple:
    weight = tensors["weight"]
    channels, per_group, kernel = (int(d) for d in weight.shape)
    if per_group != 1 or module.groups != channels:
        raise Unmappable(f"{path}: a Conv1d that is not depthwise ({channels} outputs, groups {module.groups}) has no symform primitive; symform maps the depthwise causal convolution of Mamba-style mixers")
    bias = "bias" in tensors
    return ("leaf", "causal_conv1d", (_owned(weight, seen), _owned(tensors["bias"], seen) if bias else 0, int(bias)), (channels, kernel))


# --- slots: a tree's sizes, in a fixed order ---------------------------------------------------------


def flatten(tree: tuple, path: str = "") -> tuple[tuple, list[int], list[str]]:
    """The skeleton (the tree with every size replaced by None), its sizes in order and a label for each."""
    kind = tree[0]
    if kind == "leaf":
        _, primitive, flags, dims = tree
        labels = [f"{path} ({primitive}, size {i + 1} of {len(dims)})" for i in range(len(dims))]
        return ("leaf", primitive, flags, (None,) * len(dims)), list(dims), labels
    if kind == "group":
        skeleton, numbers, labels = [], [], []
        for index, (count, element) in enumerate(tree[1]):
            inner = f"{path}.<kind {index}>" if len(tree[1]) > 1 else f"{path}.*"
            shape, values, names = flatten(element, inner)
            skeleton.append((None, shape))
            numbers += [count, *values]
            labels += [f"{path} (count of kind {index})", *names]
        return ("group", tuple(skeleton)), numbers, labels
    _, cls, parts = tree
    skeleton, numbers, labels = [], [], []
    for name, part in parts:
        shape, values, names = flatten(part, _join(path, name.removeprefix("p_")))
        skeleton.append((name, shape))
        numbers += values
        labels += names
    return ("module", cls, tuple(skeleton)), numbers, labels


def refill(skeleton: tuple, values: list) -> tuple:
    """The skeleton with its slots filled in order from ``values`` (expressions, once fitted)."""
    queue = list(values)

    def fill(node: tuple) -> tuple:
        if node[0] == "leaf":
            return (*node[:3], tuple(queue.pop(0) for _ in node[3]))
        if node[0] == "group":
            filled = []
            for _, element in node[1]:
                count = queue.pop(0)
                filled.append((count, fill(element)))
            return ("group", tuple(filled))
        return ("module", node[1], tuple((name, fill(part)) for name, part in node[2]))

    return fill(skeleton)
