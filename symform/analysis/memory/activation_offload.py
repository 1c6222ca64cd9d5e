"""Activation offload: layers whose saved activations wait in host memory between their forward and their backward.

Megatron-Core's CPU offloading (``cpu_offloading``, ``cpu_offloading_num_layers``) wraps each transformer
layer's forward in Transformer Engine's offload context (``get_cpu_offload_context``): the tensors the first
N layers save for backward are copied to pinned host memory on a side stream after the layer's forward and
copied back before its backward. Before Transformer Engine 2.10 (the handler now kept as ``cpu_offload_v1``:
``AsyncDoubleBufferGroupOffloadHandler``), the device copy of offloaded layer i is freed only when the copy has
finished at a later layer (its ``layer_window_map`` spreads the N copies over all the layers' forwards), so the
last offloaded layer is still on the device when the last layer's forward ends; on the way back, a reloaded
layer lands while the layer above it runs its backward. Transformer Engine 2.10's handler bounds the device to
(layers - N) layers' activations, stalling to keep it. symform counts the device's share as the layers not
offloaded plus one offloaded layer in flight (``offload_buffer``): the older handler's peak, an upper bound for
the newer one.

Each offloaded layer's saved bytes are those of the average layer: the top-level components that hold the layers
(repeated once per layer, or a group of stacks whose repeats add up to the layers) divided by the layers they hold. The bytes cross the host link twice
per micro-batch (device to host in forward, host to device in backward): symform.analysis.time.timing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping, TypeVar

import sympy

from ...engine.errors import ConfigError, EvaluationError
from ...engine.graph.model import Model
from .settings import Layout

IN_FLIGHT = 1  # offloaded layers whose activations are on the device at the peak besides the layers kept there

X = TypeVar("X")
R = TypeVar("R", bound=Any)  # a MemoryReport (symform.analysis.memory.memory imports this module)


def layer_stacks(model: Model) -> dict[str, int]:
    """The top-level components that hold the layers, and how many layers each holds (at the model's sizes): those
    repeated a number of times that grows with ``n_layers`` (a stack: ``n_layers``, ``n_layers - n_dense``), and a group
    that is not repeated whose parts are such stacks adding up to ``n_layers`` (a family that declares its layers as
    stacks of several kinds, or as one stack of a kind, under one component). A part present once or not at all as
    ``n_layers`` decides (a second cos/sin pair) is no layer, nor a group of parts each present once (a head of a norm
    and a projection), whatever the count."""
    graph = model.graph().graph
    if "n_layers" not in model.vocabulary or not isinstance(model.values.get("n_layers"), int):
        return {}
    layers, count, found = model.vocabulary["n_layers"], model.values["n_layers"], {}
    for child in graph.successors(""):
        repeat = _repeat(graph, "", child)
        if _stack(repeat, layers):
            found[child] = int(_at_sizes(model, repeat))
        elif repeat == 1:
            parts = [_repeat(graph, child, part) for part in graph.successors(child)]
            total = sum(parts, sympy.Integer(0))
            # the stacks' own counts add up to n_layers as declared, or at the sizes where a config counts each kind
            if parts and (sympy.expand(total - layers) == 0 or all(p.free_symbols for p in parts)) and _at_sizes(model, total) == count:
                found[child] = count
    return found


def _stack(repeat: sympy.Expr, layers: sympy.Symbol) -> bool:
    """A repeat that grows with the layers: linear in ``n_layers`` (not a 0-or-1 switch that reads it)."""
    return layers in repeat.free_symbols and repeat.is_polynomial(layers) and sympy.degree(repeat, layers) == 1


def _repeat(graph: Any, parent: str, child: str) -> sympy.Expr:
    return sympy.sympify(graph.edges[parent, child]["repeat"]["saved_activations"])


def _at_sizes(model: Model, expr: sympy.Expr) -> sympy.Expr:
    return expr.xreplace({s: sympy.Integer(model.values[s.name]) for s in expr.free_symbols if isinstance(model.values.get(s.name), int)})


def check_offload(model: Model, layers: object, layout: Layout) -> int:
    """The offloaded layer count, checked: a whole number from 0 to the layers the model repeats, and no pipeline
    (Megatron-Core refuses CPU offloading with pipeline parallelism, transformer_config.py)."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
        raise EvaluationError(f"offloaded layers is {layers!r}; give a whole number of 0 or more")
    if layers == 0:
        return 0
    total = sum(layer_stacks(model).values())
    if not total:
        raise ConfigError(
            f"{model.name} declares no stack of its n_layers layers at its top level (an encoder-decoder's two stacks, a layer's "
            "part declared beside the layers), so activation offload cannot count its layers: drop --offload-layers"
        )
    if layers > total:
        raise EvaluationError(f"{layers} offloaded layers for {model.name}'s {total} layers; give at most {total}")
    if layout.pipeline > 1:
        raise ConfigError("activation offload with a pipeline is not modelled (Megatron-Core refuses CPU offloading with pipeline parallelism); give --pp 1 or drop --offload-layers")
    return layers


def per_layer(model: Model, components: Mapping[str, X]) -> X:
    """The average layer's saved activations per device, from the activations by top-level component."""
    stacks = layer_stacks(model)
    total = sum(stacks.values())
    kept = sum((components.get(name, 0) for name in stacks), sympy.Integer(0))
    return kept * sympy.Rational(1, total) if isinstance(kept, sympy.Basic) else kept / total


def host_bytes(model: Model, components: Mapping[str, X], layers: int) -> X:
    """The bytes ``layers`` offloaded layers keep in host memory for one micro-batch (each crosses the host link twice)."""
    return layers * per_layer(model, components) if layers else 0


def with_host_bytes(model: Model, report: R, layers: int) -> R:
    """The training ``report`` with the bytes its offloaded layers keep in host memory per micro-batch among its
    assumptions (``activation_offload_host_bytes``), from its activations by component; unchanged with none."""
    if layers:
        report.assumptions["activation_offload_host_bytes"] = math.ceil(Fraction(host_bytes(model, report.activations_by_component, layers)))
    return report


def device_lines(model: Model, lines: dict[str, sympy.Expr], components: Mapping[str, sympy.Expr], layers: int) -> dict[str, sympy.Expr]:
    """The training report's activation lines with ``layers`` offloaded: the activations less the offloaded layers',
    and one offloaded layer in flight (``offload_buffer``) right after them."""
    if not layers:
        return lines
    layer = per_layer(model, components)
    found = {}
    for name, value in lines.items():
        found[name] = value - layers * layer if name == "activations" else value
        if name == "activations":
            found["offload_buffer"] = IN_FLIGHT * layer
    return found


def assumptions(model: Model, layers: int) -> dict[str, object]:
    """What the report assumes about offloaded activations (nothing when none are offloaded)."""
    if not layers:
        return {}
    total = sum(layer_stacks(model).values())
    return {
        "offload_layers": layers,
        "activation_offload": f"{layers} of {total} layers' saved activations in host memory between their forward and backward (Megatron-Core's cpu_offloading_num_layers), "
        f"each the average layer's; offload_buffer: {IN_FLIGHT} offloaded layer in flight on the device (Transformer Engine's offload handler frees a layer's device copy only once its copy to the host has finished)",
    }
