"""Full recomputation of some layers only: Megatron-Core's block method.

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
from collections.abc import Callable
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
