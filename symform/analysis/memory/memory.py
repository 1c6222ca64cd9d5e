"""Memory on one device: training and inference budgets from the declared expressions.

Every category is a sympy expression built from the model's own declarations:
weights, gradients and optimizer states from ``params`` (per rank under the
parallel layout), activations from what each component keeps for backward
(``saved_activations``, or what it keeps instead when recomputed or fused), the
KV cache from ``kv_cache`` and the recurrent mixers' state from ``recurrent_state``. Precision recipes, optimizers and weight formats
are data (formulas/memory.toml). Nothing here knows an architecture by name.
"""

from __future__ import annotations

import html
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, Mapping

import sympy

from ...engine.graph import html_table
from ...engine.store.derivation import derivation
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.evaluate import Number, exact_value, fast_exact, plain_values
from ...engine.algebra.formula import Formula
from ...engine.graph.model import Model
from ...engine.algebra.multiplied import fraction_at, from_polynomial, multiplied_out, polynomial
from ...engine.budget import check_result
from ...engine.language.vocabulary import Vocabulary
from ...engine.language.declarations import PARTS
from .maxima import max_of
from .quantization import StoredFormat, WeightFormat, _rational, bytes_per_weight, checkpoint_format, stored_bytes, weight_bytes_by_leaf
from . import activation_offload, frameworks, partial_recompute
from .settings import GENERATING, PER_OP, REBUILDING, RECOMPUTE, Degree, Layout, Optimizer, Precision, _pick, check_degree, recipes


RULE_OF_THUMB = sympy.Rational(2, 5)  # inference activations ≈ 0.4 × parameter count in bytes (the notes, batch 1)


# --- reports ----------------------------------------------------------------------------


@dataclass
class MemoryReport:
    """Bytes on one device, per category, as expressions and numbers, with every assumption named."""

    model: str
    phase: str
    expressions: dict[str, Formula]
    values: dict[str, Number]
    assumptions: dict[str, object]
    activations_by_component: dict[str, Number] = field(default_factory=dict)

    @property
    def total(self) -> Number:
        return sum(self.values.values())

    def expression(self) -> Formula:
        first = next(iter(self.expressions.values()))
        return Formula(sympy.Add(*(f.expr for f in self.expressions.values())), first.vocabulary)

    def _repr_html_(self) -> str:
        """In a notebook: the categories as a table (bytes, GB, GiB, share, expression)."""
        total = self.total
        rows = []
        for name, value in [*self.values.items(), ("total", total)]:
            formula = self.expressions[name] if name in self.expressions else self.expression()
            share = f"{float(Fraction(value) / Fraction(total)):.1%}" if total else ""
            gb, gib = float(value) / 1e9, float(value) / 2**30
            cells = [html.escape(name.replace("_", " ")), html_table.count(value), f"{gb:,.3f}", f"{gib:,.3f}", share, html_table.formula_cell(formula.latex())]
            rows.append(html_table.row(cells, right=(1, 2, 3, 4), bold=name == "total"))
        workload = ", ".join(f"{k} {v:,}" for k, v in self.assumptions.get("workload", {}).items())
        phase = "training" if self.phase == "train" else "inference"
        head = f"<b>{html.escape(self.model)}</b>: {phase} memory per device ({html.escape(workload)})"
        return html_table.table(head, ("category", "bytes", "GB", "GiB", "share", "expression"), rows)

    def _repr_latex_(self) -> str:
        """The total's expression over the sizes and the workload."""
        return self.expression()._repr_latex_()

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "phase": self.phase,
            "total": whole_bytes(self.total),
            "components": {k: whole_bytes(v) for k, v in self.values.items()},
            "activations_by_component": {k: whole_bytes(v) for k, v in self.activations_by_component.items()},
            "expressions": {k: str(f) for k, f in self.expressions.items()},
            "assumptions": self.assumptions,
        }


def whole_bytes(value: Number) -> int:
    """Bytes as a device allocates them: a fraction of a byte (an average over ranks or tokens) still takes one."""
    return math.ceil(Fraction(value))


# --- parameters per device ------------------------------------------------------------


def tensor_split(model: Model, tensor: int | sympy.Expr) -> dict[sympy.Symbol, sympy.Expr]:
    """Per-rank sizes under tensor parallelism: heads, inner widths and the vocabulary divide by the degree
    (a number, checked to divide them, or a symbol)."""
    if tensor == 1:
        return {}
    for symbol in model.vocabulary.tensor_parallel:
        value = model.values.get(symbol.name)
        if value is not None and isinstance(tensor, int) and value % tensor:
            raise EvaluationError(f"{symbol.name}={value} does not divide among {tensor} tensor-parallel ranks; choose a degree dividing it")
    return {s: s / tensor for s in model.vocabulary.tensor_parallel}


def check_pipeline(model: Model, pipeline: Degree, chunks: int = 1) -> None:
    """A pipeline of no more stages than the model has layers: a stage holds at least one layer, and each of a virtual
    pipeline's chunks at least one (chunks that do not split the layers evenly are balanced like stages)."""
    layers = model.values.get("n_layers")
    if not isinstance(pipeline, int) or layers is None:
        return
    if pipeline > layers:
        raise EvaluationError(f"{pipeline} pipeline stages for {model.name}'s {layers} layers: a stage holds at least one layer; choose a pipeline degree of at most {layers}")
    if pipeline * chunks > layers:
        raise ConfigError(f"{pipeline} stages × {chunks} chunks for {model.name}'s {layers} layers: a chunk holds at least one layer; give pipeline × chunks of at most {layers}")


def _check_degrees(model: Model, tensor: Degree, pipeline: Degree) -> None:
    """Before any cached expression: the tensor degree divides every size it splits, the pipeline has no more
    stages than layers (numeric degrees go into one expression over symbolic ones, which checks neither)."""
    tensor_split(model, tensor)
    check_pipeline(model, pipeline)


def _param_terms(model: Model, tensor: Degree, pipeline: Degree, expert: Degree) -> dict[str, sympy.Expr]:
    """Each leaf's parameters on one rank: expert-sharded parts split over expert ranks, then the tensor split."""
    graph = model.graph()
    weight = graph.multiplicities("params", shards={"expert": sympy.sympify(expert)})
    split = tensor_split(model, tensor)
    terms = {}
    for leaf in graph.leaves():
        if weight[leaf] != 0:
            terms[leaf] = (weight[leaf] * graph.graph.nodes[leaf]["quantities"]["params"]).xreplace(split) / pipeline
    return terms


def params_per_device(model: Model, layout: Layout = Layout()) -> sympy.Expr:
    params = params_expression(model, layout.tensor, layout.pipeline, layout.expert)
    if not layout.folded:
        return params
    # the routed experts split by their own tensor degree, the rest by the attention's
    return multiplied_out(params - routed_params(model, layout.tensor, layout) + routed_params(model, layout.etp, layout))


def params_on_rank(model: Model, layout: Layout = Layout()) -> Number:
    """params_per_device at the model's sizes, exactly: one expression over symbolic degrees, valued at the layout's
    (a plan asks it of every layout it times, where multiplying each layout's expression out costs more)."""
    if layout.folded:
        expr, point = params_per_device(model, layout), dict(model.values)
    else:
        _check_degrees(model, layout.tensor, layout.pipeline)
        expr = _params_per_rank(model, *_RANK_DEGREES)
        point = {**model.values, **{d.name: v for d, v in zip(_RANK_DEGREES, (layout.tensor, layout.pipeline, layout.expert))}}
    found = fraction_at(expr, point)
    if found is None:  # a size the model does not give, say: exact_value words it
        expr = params_per_device(model, layout)
        return exact_value(expr, {s: sympy.Rational(model.values[s.name]) for s in expr.free_symbols if s.name in model.values})
    check_result(found, "the result")
    return int(found) if found.denominator == 1 else found


def routed_params(model: Model, tensor: Degree, layout: Layout) -> sympy.Expr:
    """The routed experts' parameters on one rank of ``layout``'s pipeline and expert degrees, split ``tensor`` ways."""
    return expert_params_expression(model, tensor, layout.pipeline, layout.expert)


def expert_params_per_device(model: Model, layout: Layout) -> sympy.Expr:
    """The routed experts' part of params_per_device: split over the expert ranks and by the expert tensor degree."""
    _check_degrees(model, layout.etp, layout.pipeline)
    return routed_params(model, layout.etp, layout)


_DEGREES = sympy.symbols("tensor pipeline expert", positive=True)
# the same degrees under names no declaration can give a size (not identifiers): a point of values by name holds a
# model's own sizes and these side by side (fraction_at)
_RANK_DEGREES = sympy.symbols("tensor' pipeline' expert'", positive=True)


def params_expression(model: Model, tensor: Degree = 1, pipeline: Degree = 1, expert: Degree = 1) -> sympy.Expr:
    """Parameters on one rank, the degrees given as numbers or as symbols (for vectorised layouts)."""
    _check_degrees(model, tensor, pipeline)
    return _params_per_rank(model, *(sympy.sympify(d) for d in (tensor, pipeline, expert)))


@derivation
def _params_per_rank(model: Model, tensor: sympy.Expr, pipeline: sympy.Expr, expert: sympy.Expr) -> sympy.Expr:
    if all(d.is_Integer for d in (tensor, pipeline, expert)):  # one multiplying-out over symbolic degrees serves every layout: numbers go in after
        return multiplied_out(_params_per_rank(model, *_DEGREES), dict(zip(_DEGREES, (tensor, pipeline, expert))))
    return multiplied_out(sympy.Add(*_param_terms(model, tensor, pipeline, expert).values()))


def expert_params_expression(model: Model, tensor: Degree = 1, pipeline: Degree = 1, expert: Degree = 1) -> sympy.Expr:
    """The routed experts' part of params_expression: its terms divided by the expert degree (written e, the
    part is B/e in A + B/e, and -e·d/de of the sum gives it exactly)."""
    experts = routed_part(params_expression(model, *_DEGREES))
    return multiplied_out(experts, dict(zip(_DEGREES, (sympy.sympify(d) for d in (tensor, pipeline, expert)))))


def routed_part(params: sympy.Expr) -> sympy.Expr:
    """Of parameters per rank over a symbolic expert degree e (A + B/e), the part the expert ranks split: B/e."""
    return multiplied_out(-_DEGREES[2] * sympy.diff(params, _DEGREES[2]))


def params_at_sizes(model: Model, tensor: Degree = 1, pipeline: Degree = 1, expert: Degree = 1) -> sympy.Expr:
    """params_expression with the model's sizes put into each leaf's term before the sum is multiplied out:
    the same polynomial in the degrees left symbolic, in far fewer steps (the planner's screen)."""
    _check_degrees(model, tensor, pipeline)
    return _params_at_sizes(model, *(sympy.sympify(d) for d in (tensor, pipeline, expert)))


@derivation
def _params_at_sizes(model: Model, tensor: sympy.Expr, pipeline: sympy.Expr, expert: sympy.Expr) -> sympy.Expr:
    values = model.values

    def sized(term: sympy.Expr) -> sympy.Expr:
        return multiplied_out(term, {s: sympy.Integer(values[s.name]) for s in term.free_symbols if s.name in values})

    return multiplied_out(sympy.Add(*map(sized, _param_terms(model, tensor, pipeline, expert).values())))


def weight_bytes_per_device(model: Model, fmt: WeightFormat, layout: Layout = Layout(), keep: tuple[str, ...] = ()) -> sympy.Expr:
    """Stored weights: leaves the format covers at its stored bytes (scales included), the others and the
    modules in ``keep`` (a checkpoint's unquantised modules) at other_bits."""
    graph = model.graph()
    weight = graph.multiplicities("params", shards={"expert": sympy.sympify(layout.expert)})
    split = tensor_split(model, layout.tensor)
    total = sympy.Integer(0)
    for leaf in graph.leaves():
        if weight[leaf] != 0:
            total += weight[leaf] * stored_bytes(fmt, graph.graph.nodes[leaf], leaf, keep).xreplace(split) / layout.pipeline
    return sympy.expand(total)


def weight_format_for(model: Model, name: str | None) -> StoredFormat:
    """The weight format a user named, or (name None) the one the model's checkpoint stores, bf16 when unquantised."""
    formats = recipes().weight_format
    if name is None:
        found = checkpoint_format(model.spec.checkpoint, formats)
        if found is not None:
            return found
        name = "bf16"
    return StoredFormat(name, weight_format(name), read=f"weight format {name} (given)" if name != "bf16" else "bf16 (the checkpoint names no quantisation)")


def stored_weights(model: Model, name: str | None, *, conventions: Mapping[str, object] = {}) -> tuple[StoredFormat | None, dict[str, sympy.Expr] | None]:
    """For rooflines and times: the weights' stored format and bytes per parameter by leaf, when the checkpoint or
    the user (``name``) names a format and no ``weight_bytes`` convention overrides it; else (None, None)."""
    if "weight_bytes" in conventions:
        return None, None
    if name is None and not (model.spec.checkpoint and model.spec.checkpoint.quantised):
        return None, None
    stored = weight_format_for(model, name)
    return stored, weight_bytes_by_leaf(model, stored.format, stored.keep)


def matmul_rate(stored: StoredFormat | None, rates: Mapping[str, object], given: str | None) -> str:
    """The dtype whose peak the matrix products run at: the user's, else the stored format's where the device has it, else bf16."""
    if given is not None:
        return given
    rate = stored.format.flops_dtype if stored is not None else None
    return rate if rate in rates else "bf16"


# --- activations ------------------------------------------------------------------------


def _modes(recompute: str, flash: bool, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The declared modes in force: the recomputation's, ``also`` (a framework's per-module recomputation), flash."""
    if recompute not in RECOMPUTE and recompute not in REBUILDING:
        raise EvaluationError(f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    return tuple(m for m in ((recompute if recompute != "none" else None), *also, ("flash" if flash else None)) if m)


def saved_activations(model: Model, *, recompute: str = "none", flash: bool = False, kept_by: Callable[[str, sympy.Expr], sympy.Expr] | None = None, also: tuple[str, ...] = ()) -> tuple[sympy.Expr, sympy.Expr, dict[str, sympy.Expr]]:
    """What one forward keeps for backward, with recomputation and fused attention applied top-down.

    Returns the kept bytes, the transient peak of recomputing one checkpointed
    unit during backward (its full saved activations), and the kept bytes by
    top-level component. Expressions use the model's conventions. ``kept_by``
    (node path, what the node keeps as declared) → what it keeps instead, for
    every primitive and recomputed or fused unit: fine-tuning's frozen weights.
    """
    modes = _modes(recompute, flash, also)
    if kept_by is not None:  # fine-tuning's own accounting: not shared with other callers
        return _saved_activations.uncached(model, modes, kept_by)
    total, transient, by_component = _saved_activations(model, modes, _as_declared)  # the planner asks for each layout it reworks
    return total, transient, dict(by_component)


def saved_activations_at_sizes(model: Model, values: Mapping[sympy.Symbol, sympy.Expr], *, recompute: str = "none", flash: bool = False) -> tuple[sympy.Expr, sympy.Expr, dict[str, sympy.Expr]]:
    """saved_activations with ``values`` (sizes, a tensor-parallel share, seq) put into every part before it is
    multiplied out: the same expressions as substituting them afterwards, in far fewer terms (the planner's screen)."""
    total, transient, by_component = _saved_activations(model, _modes(recompute, flash), _as_declared, dict(values))
    return total, transient, dict(by_component)


def _as_declared(node: str, expr: sympy.Expr) -> sympy.Expr:
    """What a node keeps, as its declaration says (the accounting of every caller but fine-tuning's)."""
    return expr


@derivation
def _saved_activations(
    model: Model, modes: tuple[str, ...], kept_by: Callable[[str, sympy.Expr], sympy.Expr], values: Mapping[sympy.Symbol, sympy.Expr] | None = None
) -> tuple[sympy.Expr, sympy.Expr, dict[str, sympy.Expr]]:
    graph = model.graph().graph
    transients: list[sympy.Expr] = []

    def kept(node: str, modes: tuple[str, ...]) -> sympy.Expr:
        data = graph.nodes[node]
        per_op = next((m for m in modes if m in PER_OP), None)
        if per_op is not None and "full" in data["saved_when"]:  # a checkpointed layer under a per-op policy
            rest = tuple(m for m in modes if m not in REBUILDING)
            transients.append(kept(node, rest))
            return kept_by(node, data["saved_when"]["full"] + partial_recompute.saved_op_outputs(graph, node, "flash" in modes, **PER_OP[per_op], conventions=model.conventions))
        for mode in modes:
            if mode in data["saved_when"]:
                if PARTS in data["saved_when"][mode].free_symbols:  # the parts' sum less what this mode recomputes
                    rest = tuple(m for m in modes if m != mode)
                    return data["saved_when"][mode].xreplace({PARTS: kept(node, rest)})
                if mode in REBUILDING:  # backward rebuilds the unit's activations (fused kernels still fused)
                    transients.append(kept(node, tuple(m for m in modes if m not in REBUILDING)))
                return kept_by(node, data["saved_when"][mode])
        if data["component"].is_primitive:
            return kept_by(node, data["quantities"]["saved_activations"])
        return sympy.Add(*(graph.edges[node, c]["repeat"]["saved_activations"] * kept(c, modes) for c in graph.successors(node)))

    # the values and conventions go in as each monomial is multiplied out, never into the whole tree first
    # (substituting into it would rebuild every product and sum of it): the same polynomials
    known = {**model.conventions, **(values or {})}
    by_component = {c: multiplied_out(graph.edges["", c]["repeat"]["saved_activations"] * kept(c, modes), known) for c in graph.successors("")}
    total = multiplied_out(sympy.Add(*by_component.values()))
    distinct = {multiplied_out(t, known) for t in transients}
    transient = max_of(*distinct) if distinct else sympy.Integer(0)
    return total, transient, {k: v for k, v in by_component.items() if v != 0}


def optimizer_state_bytes(precision: Precision, optimizer: Optimizer) -> sympy.Rational:
    """Bytes of each optimizer state value: the optimizer's own (8-bit states) or the precision's."""
    return _rational(optimizer.state_bytes) if optimizer.state_bytes else sympy.Integer(precision.state)


def static_bytes(params, precision: Precision, optimizer: Optimizer, *, weight_shards=1, gradient_shards=1, optimizer_shards=1) -> dict[str, object]:
    """Weights, master weights, gradients and optimizer states of ``params`` parameters, each divided over
    the ranks that shard it (ZeRO); numbers, sympy expressions or numpy arrays alike."""
    state_bytes = optimizer_state_bytes(precision, optimizer)
    if hasattr(params, "dtype"):
        state_bytes = float(state_bytes)  # numpy arrays take plain floats
    return {
        "weights": params * precision.weights / weight_shards,
        "master_weights": params * precision.master / optimizer_shards,
        "gradients": params * precision.grads / gradient_shards,
        "optimizer": params * optimizer.states * state_bytes / optimizer_shards,
    }


@derivation  # the top layouts of a plan share them
def _activations_per_device(expr: sympy.Expr, model: Model, layout: Layout) -> sympy.Expr:
    """Tensor parallelism shards the head and inner-width activations (and with sequence parallelism
    all of them); context parallelism splits the sequence; a pipeline stage holds its share of the
    layers for each micro-batch in flight (stages balanced)."""
    per_rank = expr / layout.context / layout.pipeline * layout.in_flight
    if layout.sequence:
        return multiplied_out(per_rank / layout.tensor)
    return multiplied_out(per_rank, tensor_split(model, layout.tensor))  # the split put in as it multiplies out


def backward_peak(model: Model, layout: Layout = Layout()) -> sympy.Expr:
    """The most bytes one primitive's backward holds at once besides what the forward kept (its declared
    ``backward_peak``: the loss's logits gradients), per device: the vocabulary split over the tensor-parallel
    ranks, the tokens over the context-parallel ones. Expressions use the model's conventions."""
    return _backward_peak(model, sympy.sympify(layout.tensor), sympy.sympify(layout.context))


@derivation
def _backward_peak(model: Model, tensor: sympy.Expr, context: sympy.Expr) -> sympy.Expr:
    return multiplied_out(_largest_backward_peak(model).xreplace(tensor_split(model, tensor)) / context)


def _largest_backward_peak(model: Model) -> sympy.Expr:
    graph = model.graph()
    conventions = model.conventions
    runs = graph.multiplicities("saved_activations")  # parts absent from training (training = 0) have no backward
    peaks = set()
    for node, data in graph.graph.nodes.items():
        peak = data.get("backward_peak", 0)
        if peak != 0 and runs[node].xreplace(conventions) != 0:
            peaks.add(multiplied_out(peak, conventions))
    return max_of(*peaks) if peaks else sympy.Integer(0)


def backward_categories(model: Model, transient: sympy.Expr, layout: Layout, freed: sympy.Expr = sympy.Integer(0)) -> dict[str, sympy.Expr]:
    """What backward alone holds, as two lines that add up to its peak: the recompute buffer (one checkpointed unit
    rebuilt, less ``freed``: the kept bytes per device that are free by then, frameworks.finished_parts) and the backward peak
    beyond it. The loss's backward runs first and frees its gradients before any unit is rebuilt, so the two never
    coexist: the peak is the larger, not the sum."""
    split = Layout(tensor=layout.tensor, sequence=layout.sequence, context=layout.context)  # all that these lines depend on
    return dict(_backward_categories(model, transient, split, sympy.sympify(freed)))  # the planner reworks layouts sharing them


@derivation
def _backward_categories(model: Model, transient: sympy.Expr, layout: Layout, freed: sympy.Expr) -> dict[str, sympy.Expr]:
    rebuilt = _activations_per_device(transient, model, layout)
    if rebuilt != 0 and freed != 0:
        rebuilt = max_of(0, rebuilt - freed)
    peak = backward_peak(model, layout)
    beyond = peak if rebuilt == 0 or peak == 0 else max_of(0, peak - rebuilt)
    return {"recompute_buffer": rebuilt, "backward_peak": beyond}


BACKWARD_PEAK = (
    "the loss's logits gradients, alive only during its backward: PyTorch's two batch·seq·vocab tensors in the log-probabilities' dtype "
    "(fp32 where the loss upcasts the logits), one in the logits' dtype where the backward is fused (fused_loss) or one chunk's where "
    "it is chunked (loss_chunks); with recomputation, only the part above the recompute buffer, which never coexists with them"
)


def backward_peak_assumptions(layout: Layout) -> dict[str, str]:
    """What the backward peak line is, and, with pipeline stages, where it is counted."""
    found = {"backward_peak": BACKWARD_PEAK}
    if layout.pipeline > 1:  # the first stage holds the most activations, the last one the loss
        found["backward_peak_stage"] = "the loss runs on the last pipeline stage: counted here beside the first stage's activations, an upper bound"
    return found


def attention_accounting(flash: bool) -> str:
    """Which attention the activations assume, in the words every memory report uses."""
    return "sdpa (FlashAttention kernels: no score matrices kept)" if flash else "eager (score and probability matrices kept)"


# --- training -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Training:
    precision: str = "mixed"
    optimizer: str = "adamw"
    recompute: str = "none"
    flash: bool = True  # FlashAttention/SDPA, as time, roofline and plan assume; False: eager attention
    layout: Layout = Layout()
    framework: str | None = None  # formulas/frameworks: its selective policy, buffers and overheads; None: the declared tensors alone
    recompute_modules: tuple[str, ...] = ()  # the framework's per-module recomputation (Megatron-Core's recompute_modules)
    grad_reduce_fp32: bool | None = None  # the framework's main_grad buffers in fp32 (Megatron-Core's grad_reduce_in_fp32); None: its default
    offload_layers: int = 0  # layers whose saved activations wait in host memory (Megatron-Core's cpu_offloading_num_layers)
    recompute_layers: int | None = None  # with full recomputation, those of each stage chunk alone (Megatron-Core's block method)


def training_expressions(model: Model, setup: Training = Training()) -> tuple[dict[str, sympy.Expr], dict[str, sympy.Expr], dict[str, object]]:
    """Per-device bytes by category (expressions over sizes, batch and seq), the activations by
    component, and the assumptions in force."""
    precision = _pick(recipes().precision, setup.precision, "precision")
    optimizer = _pick(recipes().optimizer, setup.optimizer, "optimizer")
    layout = setup.layout
    check_pipeline(model, layout.pipeline, layout.chunks)
    if layout.folded:
        layout.check_experts()
    fw = frameworks.framework(setup.framework)
    model = frameworks.under(model, fw, precision.act, setup.precision)
    state_bytes = optimizer_state_bytes(precision, optimizer)
    recompute = fw.recompute_mode(setup.recompute) if fw else setup.recompute
    if setup.recompute not in RECOMPUTE:
        raise EvaluationError(f"unknown recomputation {setup.recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    recompute, also = frameworks.module_modes(fw, setup.recompute_modules, recompute)
    share = partial_recompute.recomputed_share(model, setup.recompute_layers, setup.recompute, layout)
    kept, transient, by_component = partial_recompute.blended(lambda mode: saved_activations(model, recompute=mode, flash=setup.flash, also=also), recompute, share)
    static = _layout_static_lines(model, layout, precision, optimizer)
    components = {k: _activations_per_device(v, model, layout) for k, v in by_component.items()}
    freed = sympy.Add(*(components.get(p, 0) for p in frameworks.finished_parts(model, fw, layout, (recompute, *also))))
    others = {"activations": _activations_per_device(kept, model, layout), **backward_categories(model, transient, layout, freed)}
    others = activation_offload.device_lines(model, others, components, activation_offload.check_offload(model, setup.offload_layers, layout))
    settings = fw.settings(precision.grads, grad_reduce_fp32=setup.grad_reduce_fp32) if fw else {}
    others |= framework_overheads(model, fw, layout, precision, sympy.Add(*static.values(), *others.values()), settings)
    assumptions = {
        "precision": setup.precision,
        "bytes_per_param": {"weights": precision.weights, "master": precision.master, "grads": precision.grads, "optimizer_state": _json(state_bytes)},
        "optimizer": setup.optimizer,
        "optimizer_states": optimizer.states,
        "act_bytes": precision.act,
        "recompute": setup.recompute, **({"recompute_layers": setup.recompute_layers} if share is not None else {}),
        **({"recompute_modules": list(setup.recompute_modules)} if setup.recompute_modules else {}),
        **activation_offload.assumptions(model, setup.offload_layers),
        "flash_attention": setup.flash,
        "attention": attention_accounting(setup.flash),
        **backward_peak_assumptions(layout),
        "layout": layout.described(),
        "pipeline_in_flight_microbatches": _json(layout.in_flight),
        "accounting": model.accounting or "default",
        "dropout": dropout_origin(model),
        "conventions": {s.name: _json(v) for s, v in model.conventions.items()},
        "stages_balanced": layout.pipeline > 1,
        "framework": fw.describe(settings) if fw else "none: the declared tensors alone (no buffers, CUDA context or allocator reserve)",
    }
    return static | {k: _expanded(model, v) for k, v in others.items()}, components, assumptions


def framework_overheads(model: Model, fw: frameworks.Framework | None, layout: Layout, precision: Precision, held: sympy.Expr, settings: Mapping[str, bool] | None = None) -> dict[str, sympy.Expr]:
    """The framework's buffers and overheads on one device (formulas/frameworks): each byte-valued one at this ZeRO
    stage and under ``settings`` (None: the framework's defaults), then the allocator's reserve as its share of
    everything else (``held`` and those buffers)."""
    if fw is None:
        return {}
    unit = frameworks.unit_params(model, layout.tensor, layout.expert, layout.etp)
    params = params_per_device(model, layout)
    found = frameworks.overhead_bytes(fw, zero=layout.zero, unit=unit, params=params, weight_bytes=precision.weights, grad_bytes=precision.grads, data=layout.shard_data, settings=settings)
    reserve = frameworks.reserve_fraction(fw)
    if reserve:
        inside = sympy.Add(*(v for k, v in found.items() if k not in fw.outside_allocator()))
        found["allocator_reserve"] = sympy.Rational(reserve.numerator, reserve.denominator) * (held + inside)
    return found


def _layout_static_lines(model: Model, layout: Layout, precision: Precision, optimizer: Optimizer) -> dict[str, sympy.Expr]:
    """static_bytes per device: the dense parameters sharded over the data-parallel ranks, the routed experts'
    over the expert-data-parallel group (Layout.static_shards)."""
    params = params_per_device(model, layout)
    shards, expert_shards = layout.static_shards(), layout.static_shards(experts=True)
    if shards == expert_shards:
        return _static_lines(model, params, precision, optimizer, shards)
    experts = expert_params_per_device(model, layout)
    dense = _static_lines(model, multiplied_out(params - experts), precision, optimizer, shards)
    routed = _static_lines(model, experts, precision, optimizer, expert_shards)
    return {k: multiplied_out(dense[k] + routed[k]) for k in dense}


def _static_lines(model: Model, params: sympy.Expr, precision: Precision, optimizer: Optimizer, shards: Mapping[str, int]) -> dict[str, sympy.Expr]:
    """static_bytes of ``params``, each line multiplied out: where the parameters multiply out to a polynomial, its
    coefficients times the line's factor (static_bytes of one parameter); sympy would spread each factor over the
    sum and then multiply the line out again."""
    lines = static_bytes(sympy.Integer(1), precision, optimizer, **shards)
    if not all(isinstance(f, sympy.Rational) for f in lines.values()):
        return {k: _expanded(model, v) for k, v in static_bytes(params, precision, optimizer, **shards).items()}
    terms = _polynomial(params)  # a plan's top layouts share it
    if terms is None:
        return {k: _expanded(model, v) for k, v in static_bytes(params, precision, optimizer, **shards).items()}
    return {k: from_polynomial({m: c * Fraction(int(f.p), int(f.q)) for m, c in terms.items()} if f else {}) for k, f in lines.items()}


def _expanded(model: Model, expr: sympy.Expr) -> sympy.Expr:
    """sympy.expand, once per expression: a plan's top layouts share most of their lines."""
    return _multiplied_out(expr)


_multiplied_out = derivation(multiplied_out)
_polynomial = derivation(polynomial)


def training_memory(model: Model, *, batch: int, seq: int, setup: Training = Training()) -> MemoryReport:
    """Bytes on one device for one training step of ``batch`` sequences (the micro-batch) of ``seq`` tokens."""
    setup.layout.check_sequence(seq)
    categories, components, assumptions = training_expressions(model, setup)
    return activation_offload.with_host_bytes(model, _report(model, "train", categories, components, assumptions, batch=batch, seq=seq), setup.offload_layers)


# --- inference -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inference:
    """A serving setup. ``weight_format``: None for the checkpoint's own format, a name in ``formulas/memory.toml`` or ``"<N>bit"`` (N bits per
    linear weight, no group scales). ``kv_bytes``, ``kv_block``, ``act_bytes``: None keeps the model's
    convention (2, 1 and 2 bytes by default, or what ``with_conventions`` set); any positive number, such
    as ``Fraction(6, 8)`` for a 6-bit cache, replaces it."""

    weight_format: str | None = None  # None: as the checkpoint stores them (bf16 when it names no quantisation)
    kv_bytes: Number | None = None
    kv_block: int | None = None  # paged attention: the cache grows in blocks of this many tokens
    act_bytes: Number | None = None
    tensor: int = 1
    flash: bool = True

    def __post_init__(self) -> None:
        check_degree("tensor", self.tensor)


BIT_WIDTH = re.compile(r"([1-9][0-9]?)bit")  # "6bit": any whole bit width up to 99


def bit_width(name: str) -> int | None:
    """The N of ``"<N>bit"``, or None for any other name."""
    match = BIT_WIDTH.fullmatch(name)
    return int(match.group(1)) if match else None


def weight_format(name: str) -> WeightFormat:
    """A named format of ``formulas/memory.toml``, or ``"<N>bit"``: N bits per linear weight, no group scales."""
    bits = bit_width(name)
    if bits is not None and name not in recipes().weight_format:
        return WeightFormat(doc=f"{bits}-bit weights of the linear layers, no group scales", bits=bits, quantises=["linear"])
    if name not in recipes().weight_format:
        raise EvaluationError(f"unknown weight format {name!r}; choose one of {', '.join(recipes().weight_format)} or a bit width such as 6bit")
    return recipes().weight_format[name]


def _inference_conventions(setup: Inference) -> dict[str, object]:
    """The setup's storage sizes where it gives them; the model's conventions elsewhere."""
    given = {"kv_bytes": setup.kv_bytes, "kv_block": setup.kv_block, "act_bytes": setup.act_bytes}
    if setup.kv_block is not None and (isinstance(setup.kv_block, bool) or not isinstance(setup.kv_block, int) or setup.kv_block < 1):
        raise EvaluationError(f"kv_block is {setup.kv_block!r}; give the paged cache's block size in tokens (1 for none)")
    return {name: value for name, value in given.items() if value is not None}


def _convention(model: Model, name: str) -> sympy.Rational:
    return next(v for s, v in model.conventions.items() if s.name == name)


def dropout_origin(model: Model) -> str:
    """The dropout convention in force and where it comes from: the config's dropout probabilities (GPT-2,
    BERT), a convention the user set over them, or the convention's default."""
    value = _json(_convention(model, "dropout"))
    config = model.spec.conventions.get("dropout")
    if config is None:
        return f"{value} (the dropout convention; this family reads no dropout from its config)"
    if value == config:
        return f"{value} (from the config's dropout probabilities)"
    return f"{value} (set, over the config's {config})"


def inference_expressions(model: Model, setup: Inference = Inference(), *, keep: tuple[str, ...] = ()) -> tuple[dict[str, sympy.Expr], dict[str, object]]:
    """Weights, KV cache for past + seq tokens, and activations two ways: the notes' rule of thumb
    (0.4 bytes per parameter) and a computed peak (the largest op's inputs and outputs plus the
    residual stream), with the total using the computed peak. Settings named in ``keep`` (past)
    stay symbols instead of taking their values."""
    stored = weight_format_for(model, setup.weight_format)
    fmt = stored.format
    model = model.with_conventions(**_inference_conventions(setup), **GENERATING)
    layout = Layout(tensor=setup.tensor)
    split = tensor_split(model, setup.tensor)
    conventions = {s: value for s, value in model.conventions.items() if s.name not in keep}
    kv = model.expression("kv_cache", conventions=False).expr.xreplace(conventions)
    categories = {
        "weights": weight_bytes_per_device(model, fmt, layout, stored.keep),
        "kv_cache": sympy.expand(kv.xreplace(split)),
        "activations": _inference_peak(model, setup.flash, conventions).xreplace(split),
    }
    state = model.expression("recurrent_state", conventions=False).expr.xreplace(conventions)
    if state != 0:  # recurrent mixers: a state per sequence that does not grow with past, beside the KV cache
        categories = {**dict(list(categories.items())[:2]), "recurrent_state": sympy.expand(state.xreplace(split)), "activations": categories["activations"]}
    assumptions = {
        "weight_format": stored.name,
        "weight_format_read": stored.read,
        "bytes_per_weight": _json(bytes_per_weight(fmt)),
        "quantised_components": fmt.quantises or "all",
        **({"kept_unquantised": list(stored.keep)} if stored.keep else {}),
        **({"weight_notes": list(stored.notes)} if stored.notes else {}),
        "kv_bytes": _json(_convention(model, "kv_bytes")),
        "kv_block_tokens": _json(_convention(model, "kv_block")),
        **({"state_bytes": _json(model.conventions[model.vocabulary["state_bytes"]])} if state != 0 else {}),
        "act_bytes": _json(_convention(model, "act_bytes")),
        "tensor_parallel": setup.tensor,
        "activations": "computed peak: the largest single op's activation inputs and outputs plus the residual stream",
        "flash_attention": setup.flash,
        "attention": attention_accounting(setup.flash),
        "activations_rule_of_thumb_bytes": "0.4 × parameters (the notes' rule, batch 1)",
        "accounting": model.accounting or "default",
    }
    return categories, assumptions


def inference_memory(model: Model, *, batch: int, seq: int, past: int = 0, setup: Inference = Inference()) -> MemoryReport:
    """Bytes on one device serving ``batch`` sequences with ``past`` tokens cached and ``seq`` new ones."""
    categories, assumptions = inference_expressions(model.with_conventions(past=past), setup)
    report = _report(model, "infer", categories, {}, assumptions, batch=batch, seq=seq, past=past)
    report.assumptions["activations_rule_of_thumb_bytes"] = _json(RULE_OF_THUMB * model.evaluate("params") / setup.tensor)
    size = checkpoint_size(model, weight_format_for(model, setup.weight_format))
    if size is not None:
        report.assumptions["checkpoint_size"] = size.as_dict()
    return report


@dataclass(frozen=True)
class CheckpointSize:
    """The checkpoint's own size (its safetensors index's total_size) beside symform's weight bytes, the gap explained."""

    total_size: int
    weight_bytes: int
    explained: dict[str, int]  # each named cause and its bytes; they sum to the difference when it is fully explained
    unexplained: int
    dtypes: Mapping[str, Mapping[str, int]] | None = None  # tensors and bytes per dtype, from the safetensors headers

    @property
    def difference(self) -> int:
        return self.total_size - self.weight_bytes

    def as_dict(self) -> dict[str, object]:
        found = {"total_size": self.total_size, "symform_weight_bytes": self.weight_bytes, "difference": self.difference, "explained": self.explained, "unexplained": self.unexplained}
        return {**found, "dtypes": {k: dict(v) for k, v in self.dtypes.items()}} if self.dtypes else found


def checkpoint_size(model: Model, stored: StoredFormat) -> CheckpointSize | None:
    """Compare the weights' bytes (one device, as stored) with the checkpoint's total_size, naming each known cause
    of a difference: tensors the checkpoint stores that the model does not count, or stores at another width."""
    checkpoint = model.spec.checkpoint
    if checkpoint is None or checkpoint.total_size is None:
        return None
    evaluate = _evaluator(model.values)
    ours = evaluate(weight_bytes_per_device(model, stored.format, Layout(), stored.keep))
    candidates = _size_causes(model, stored, evaluate)
    gap = checkpoint.total_size - ours
    explained: dict[str, int] = {}
    for count in range(1, len(candidates) + 1):  # the smallest set of causes that accounts for every byte
        for combo in itertools.combinations(candidates.items(), count):
            if sum(v for _, v in combo) == gap:
                explained = dict(combo)
                break
        if explained:
            break
    return CheckpointSize(checkpoint.total_size, int(ours), {k: int(v) for k, v in explained.items()}, int(gap - sum(explained.values())), checkpoint.dtypes)


def _size_causes(model: Model, stored: StoredFormat, evaluate) -> dict[str, Number]:
    causes: dict[str, Number] = {}
    graph = model.graph()
    weight = graph.multiplicities("params")
    other = sympy.Rational(stored.format.other_bits, 8)
    for leaf in graph.leaves():  # a tied output head: one parameter, but some checkpoints store both copies
        node = graph.graph.nodes[leaf]
        if weight[leaf] == 0 and node["quantities"]["params"] != 0 and graph.multiplicities("forward_flops")[leaf] != 0:
            causes[f"{leaf}: the tied weight stored a second time"] = evaluate(other * node["quantities"]["params"])
    fmt = stored.format
    if fmt.stored and "scale_bytes" in fmt.stored and _rational(fmt.scale_bytes) != 2:
        bf16 = replace(fmt, scale_bytes=2)
        ours = weight_bytes_per_device(model, fmt, Layout(), stored.keep)
        causes["block scales stored in bf16, not float32"] = evaluate(weight_bytes_per_device(model, bf16, Layout(), stored.keep) - ours)
    values = model.values
    if "n_layers" in values and "d_head" in values:
        causes["float32 rotary inv_freq buffers saved with each layer"] = values["n_layers"] * values["d_head"] // 2 * 4
    root = model.library[model.spec.root]
    for arg in root.args:  # an optional part the checkpoint carries but the model leaves out (DeepSeek's MTP layers)
        if arg.name.startswith("include_") and model.spec.arguments.get(arg.name, arg.default) in (0, "0"):
            more = model.with_arguments(**{arg.name: 1})
            causes[f"{arg.name.removeprefix('include_')} weights, stored but left out (--set {arg.name}=1 counts them)"] = evaluate(
                weight_bytes_per_device(more, fmt, Layout(), stored.keep)
            ) - evaluate(weight_bytes_per_device(model, fmt, Layout(), stored.keep))
    return {k: v for k, v in causes.items() if v}


def _inference_peak(model: Model, flash: bool, conventions: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """The largest activation working set of any single op (its bytes moved without the weights), plus the
    residual stream it leaves live. With flash, attention cores run fused and never hold their score matrix."""
    graph = model.graph().graph
    runs = model.graph().multiplicities("bytes_moved")  # parts that do not run here (the loss, dropout) are repeated 0 times
    fused = [n for n, data in graph.nodes.items() if flash and "flash" in data["saved_when"]]
    no_weights = {**conventions, model.vocabulary["weight_bytes"]: 0}
    sizes: set[sympy.Expr] = set()
    for node, data in graph.nodes.items():
        if runs[node].xreplace(conventions) == 0:
            continue
        if data["component"].is_primitive and not any(node.startswith(f"{f}/") for f in fused):
            sizes.add(sympy.expand(data["quantities"]["bytes_moved"].xreplace(no_weights)))
    sizes.discard(sympy.Integer(0))
    v = model.vocabulary
    residual = (v["act_bytes"] * v["batch"] * v["seq"] * v["d_model"]).xreplace(conventions)
    largest = sympy.Max(*sizes) if sizes else sympy.Integer(0)  # sympy's Max of nothing is -oo
    return largest + residual


# --- numbers ------------------------------------------------------------------------------------


def _report(model: Model, phase: str, categories: dict[str, sympy.Expr], components: dict[str, sympy.Expr], assumptions: dict[str, object], **workload: int) -> MemoryReport:
    model.check_workload(**workload)
    values = {**model.values, **workload}
    evaluate = _evaluator(values, model.vocabulary)
    return MemoryReport(
        model=model.name,
        phase=phase,
        expressions={k: Formula(v, model.vocabulary) for k, v in categories.items()},
        values={k: evaluate(v) for k, v in categories.items()},
        assumptions={**assumptions, "workload": dict(workload)},
        activations_by_component={k: evaluate(v) for k, v in components.items()},
    )


def _evaluator(values: Mapping[str, object], vocabulary: Vocabulary | None = None) -> Callable[[sympy.Expr], Number]:
    """Exact values at ``values``; with the ``vocabulary``, through the generated exact functions where every value
    is plainly valid (the same numbers; sympy's route answers, or words the error, wherever they cannot)."""
    plain = plain_values(values, vocabulary) if vocabulary is not None else None

    def evaluate(expr: sympy.Expr) -> Number:
        fast = fast_exact(expr, plain, vocabulary) if plain is not None else None
        if fast is not None:
            return fast
        bound = {s: sympy.Rational(values[s.name]) for s in expr.free_symbols if s.name in values}
        return exact_value(expr, bound)

    return evaluate


def _json(value: object) -> int | float:
    number = sympy.Rational(value)
    return int(number) if number.is_Integer else float(number)
