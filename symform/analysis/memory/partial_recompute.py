"""Recomputation of part of a step's work: some layers only (Megatron-Core's block method), and inside a
checkpointed layer the ops a per-op policy does not save (saved_op_outputs).

With ``--recompute-granularity full --recompute-method block --recompute-num-layers N`` Megatron-Core checkpoints
the first N transformer layers of each pipeline stage (of each virtual chunk with a virtual pipeline) and keeps
every activation of the others (megatron/core/transformer/transformer_block.py ``_checkpointed_forward``: with
recompute_method 'block', 'checkpoint the input activations of only a set number of individual Transformer layers
and skip the rest'). symform counts such a step as the share N / (layers per chunk) of the layers recomputed in
full and the rest kept: the saved activations, the recomputed forward and its collectives each that share of
full recomputation's above none's (balanced stages and chunks, as everywhere; the recompute buffer is full
recomputation's, one checkpointed layer rebuilt).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

from ...engine.errors import EvaluationError
from ...engine.graph.model import Model
from .settings import Layout


def recomputed_share(model: Model, layers: object, recompute: str, layout: Layout) -> Fraction | None:
    """The share of the layers recomputed in full with ``layers`` of each pipeline chunk recomputed (None: all of them
    or none, as ``recompute`` says), checked: a whole number from 1 to the layers a chunk holds, under full
    recomputation."""
    if layers is None:
        return None
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise EvaluationError(f"recomputed layers is {layers!r}; give a whole number of 1 or more (layers of each pipeline stage recomputed in full)")
    if recompute != "full":
        raise EvaluationError(f"recomputed layers need full recomputation (recompute is {recompute!r}); add --recompute full, or drop --recompute-layers")
    total = model.values.get("n_layers")
    if not isinstance(total, int):
        raise EvaluationError(f"{model.name} declares no n_layers; --recompute-layers counts a stage's transformer layers")
    per_chunk = Fraction(total, layout.pipeline * layout.chunks)
    most = math.ceil(per_chunk)  # uneven splits: the fuller chunks hold this many
    if layers > most:
        raise EvaluationError(f"{layers} recomputed layers of a stage chunk holding {float(per_chunk):g} of {model.name}'s {total} layers; give at most {most}, or --recompute full alone for all of them")
    return min(Fraction(layers), per_chunk) / per_chunk


def blended(saved_at: Callable[[str], tuple[sympy.Expr, sympy.Expr, dict[str, sympy.Expr]]], recompute: str, share: Fraction | None) -> tuple[sympy.Expr, sympy.Expr, dict[str, sympy.Expr]]:
    """saved_activations' kept bytes, transient peak and kept bytes by component, at ``recompute`` (``saved_at``
    gives them for one mode), or with ``share`` of the layers recomputed in full and the rest keeping everything."""
    if share is None:
        return saved_at(recompute)
    kept, _, parts = saved_at("none")
    rebuilt, transient, rebuilt_parts = saved_at(recompute)
    mix = sympy.Rational(share)
    blend = {name: parts.get(name, sympy.Integer(0)) + mix * (rebuilt_parts.get(name, sympy.Integer(0)) - parts.get(name, sympy.Integer(0))) for name in {**parts, **rebuilt_parts}}
    return sympy.expand(kept + mix * (rebuilt - kept)), transient, {k: sympy.expand(v) for k, v in blend.items() if v != 0}


def saved_op_outputs(graph, unit: str, flash: bool, every: int = 2, biased: bool = False, kernel_outputs: bool = True, branch_ends: bool = True, conventions: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> sympy.Expr:
    """What a per-op checkpointing policy (settings.PER_OP) saves inside one checkpointed layer beyond its input
    (saved_ops), in bytes."""
    return sympy.Add(*(term for _, term in saved_ops(graph, unit, flash, every, biased, kernel_outputs, branch_ends, conventions)))


def saved_ops(graph, unit: str, flash: bool, every: int = 2, biased: bool = False, kernel_outputs: bool = True, branch_ends: bool = True, conventions: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> list[tuple[str, sympy.Expr]]:
    """The ops whose results a per-op checkpointing policy (settings.PER_OP) saves inside one checkpointed layer, each
    with the bytes it keeps: the result of every ``every``-th matrix product in forward order, the 1st first
    (torchtitan's aten.mm, every second; JAX's checkpoint_dots_with_no_batch_dims, each), a linear with a bias among
    them where ``biased`` (torchtitan's addmm is neither saved nor counted), and, under FlashAttention with
    ``kernel_outputs``, the attention kernel's results (its declared ``kernel_output``). Without ``branch_ends``, the
    last product of each of the layer's parts (the attention's output projection, the MLP's down projection) is not
    kept: its output only enters the residual sum, whose backward never reads it, and JAX's policies choose among the
    values backward reads. Parts sharded over experts run as grouped GEMMs (batched products), which neither policy
    saves. Backward runs again every other op of the layer (symform.analysis.time.step_model.recomputed_leaves).
    ``conventions``: the model's, which decide whether a part a convention switches runs at all (and so counts)."""
    products = 0
    saved: list[tuple[str, sympy.Expr]] = []
    last: int | None = None  # where the part being walked has its last product in ``saved`` (None: not saved)

    def walk(node: str, repeat: sympy.Expr) -> None:
        nonlocal products, last
        data = graph.nodes[node]
        if flash and "kernel_output" in data["saved_when"]:
            if kernel_outputs:
                saved.append((node, repeat * data["saved_when"]["kernel_output"]))
            return
        if "output" in data["saved_when"]:
            if biased or data["args"].get("bias", 0) == 0:
                products += 1
                last = None
                if (products - 1) % every == 0:
                    saved.append((node, repeat * data["saved_when"]["output"]))
                    last = len(saved) - 1
            return
        for child in _run_parts(graph, node, conventions):
            walk(child, repeat * graph.edges[node, child]["repeat"]["forward_flops"])

    own = graph.nodes[unit]["saved_when"]
    # a unit that is one product (or kernel) itself is its own only part
    parts = [(unit, sympy.Integer(1))] if "output" in own or "kernel_output" in own else [(p, graph.edges[unit, p]["repeat"]["forward_flops"]) for p in _run_parts(graph, unit, conventions)]
    ends = set()
    for part, repeat in parts:
        last = None
        walk(part, repeat)
        ends |= {last} - {None}
    return [entry for i, entry in enumerate(saved) if branch_ends or i not in ends]


def _run_parts(graph, node: str, conventions: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> list[str]:
    """The parts of ``node`` that run in forward under the model's ``conventions`` (a part sharing another's kept input
    keeps nothing of its own), but those sharded over experts."""
    def runs(child: str) -> bool:
        repeat = graph.edges[node, child]["repeat"]["forward_flops"]
        return (sympy.sympify(repeat).xreplace(conventions) if conventions else repeat) != 0

    return [c for c in graph.successors(node) if runs(c) and graph.edges[node, c]["shard"] != "expert"]
