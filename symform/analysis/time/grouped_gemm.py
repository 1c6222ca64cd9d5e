"""Routed experts' GEMMs as the grouped GEMMs MoE frameworks run, for symform's point estimates.

A mixture-of-experts layer's expert projections are declared per token (each token's top_k
experts), so a device's kernel holds all its routed tokens: rows × top_k token-expert pairs.
Frameworks run them as one grouped GEMM per projection and pass (Transformer Engine's
GroupedLinear, CUTLASS grouped GEMM, torchtitan's and Automodel's grouped kernels) over the
experts this device holds, n_experts / expert-parallel degree, each a GEMM of its own tokens:
under balanced routing ``tokens per expert = rows · top_k · expert degree / n_experts``.
So each expert's rows pad to whole tiles on their own (and run as skinny kernels below one
tile), the experts' output tiles share the SMs' waves, and each local expert adds a fixed
time to every grouped GEMM call under FP8 (``expert_s``): Transformer Engine's GroupedLinear
quantises each expert's weight in a call of its own and each expert's rows apart
(transformer_engine/pytorch/module/grouped_linear.py: a loop over the GEMMs calling
``get_weight_workspace``, ``fused_multi_quantize`` over the splits), where a BF16 grouped GEMM
uses the weights as they are (:func:`at_precision`). A narrow expert with few tokens does little
work against that time, so it runs further below the dense GEMM's rate. ``expert_s`` is data:
``[moe]`` in the device's file of hardware/efficiency/, fitted on FP8 training runs (the BF16
ones, NeMo Automodel's, are faster than estimated even without it); so a training step's kernels take the grouped model
(:func:`at_expert_degree`), while a serving engine's fused MoE kernels, of which no measured run
is to hand, keep their routed GEMMs as one GEMM of all the tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import sympy

from ...engine.graph.model import Model

if TYPE_CHECKING:
    from .efficiencies import Efficiency
    from .kernel_work import Kernel


def routed_experts(model: Model, path: str) -> tuple[float, float] | None:
    """(experts, experts per token) of the expert-sharded part holding leaf ``path``, as its declaration repeats
    it (``shard = "expert"``: params n_experts times, the work top_k times); None outside routed experts."""
    graph = model.graph().graph
    parts = path.split("/")
    for end in range(len(parts), 0, -1):
        child, parent = "/".join(parts[:end]), "/".join(parts[: end - 1])
        edge = graph.edges.get((parent, child)) if graph.has_edge(parent, child) else None
        if edge and edge.get("shard") == "expert":
            repeat = edge["repeat"]
            return float(_bound(model, repeat["params"])), float(_bound(model, repeat["forward_flops"]))
    return None


def _bound(model: Model, expr) -> float:
    """The edge's repeat at the model's sizes and conventions (a repeat may read one: every_expert)."""
    from .step_model import _bind

    return _bind(model, sympy.sympify(expr).xreplace(model.conventions))


def at_expert_degree(work: Sequence[Kernel], expert: int) -> list[Kernel]:
    """The kernels of a device in an expert-parallel group of ``expert`` ranks (its routed GEMMs' experts split
    over the ranks, its tokens joined by theirs)."""
    return [replace(k, expert_degree=expert) if k.routed and k.expert_degree != expert else k for k in work]


def _grouped(kernel: Kernel) -> bool:
    return bool(kernel.routed and kernel.expert_degree)


def local_experts(kernel: Kernel) -> float:
    experts, _ = kernel.routed
    return experts / kernel.expert_degree


def tokens_per_expert(kernel: Kernel) -> float:
    """Each local expert's rows under balanced routing: the group's rows · top_k spread over n_experts."""
    experts, top_k = kernel.routed
    return kernel.rows * top_k * kernel.expert_degree / experts


def gemm_rate(eff: Efficiency, kernel: Kernel) -> float:
    """Fraction of the peak a GEMM kernel sustains: a training step's routed experts' as a grouped GEMM, any other as
    the device's GEMM model."""
    if _grouped(kernel):
        return grouped_fraction(eff, kernel)
    return eff.gemm_fraction(kernel.rows, kernel.flops / kernel.calls, kernel.products, kernel.product_weights)


def grouped_fraction(eff: Efficiency, kernel: Kernel) -> float:
    """Fraction of the peak the grouped GEMM of ``kernel`` (a routed-expert projection) sustains: each local
    expert's rows and output tiles on their own, the group's fixed cost (``half_flops``) once per call."""
    rows = tokens_per_expert(kernel)
    # the products' output grids: each local expert's, of its own tokens
    grouped = replace(kernel, shape=(kernel.shape[0] * local_experts(kernel), rows, *kernel.shape[2:])) if kernel.shape else kernel
    return eff.gemm_fraction(rows, kernel.flops / kernel.calls, grouped.products, grouped.product_weights)


#: The dtypes whose recipes quantise each expert's weight and rows apart (Transformer Engine's FP8 and FP4 recipes).
QUANTISED = ("fp8", "fp4")


def at_precision(eff: Efficiency, dtype: str | None) -> Efficiency:
    """The device's factors for a training step's grouped GEMMs at ``dtype``: the time per local expert is the
    per-expert quantisation of a quantised recipe (fitted on FP8 runs), so a step at any other dtype pays none of it."""
    if dtype in QUANTISED or not eff.expert_s:
        return eff
    sources = {**eff.sources, "moe": f"0 at {dtype}: the file's {eff.expert_s:g} s is a quantised recipe's per-expert time ({', '.join(QUANTISED)}); {eff.sources.get('moe', '')}"}
    return replace(eff, expert_s=0.0, sources=sources)


def expert_seconds(eff: Efficiency, kernel: Kernel) -> float:
    """The time the local experts add to the kernel's grouped GEMM calls (none for any other kernel)."""
    return eff.expert_s * local_experts(kernel) * kernel.calls if _grouped(kernel) else 0.0
