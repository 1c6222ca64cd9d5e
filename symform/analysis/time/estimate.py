"""Point estimates with a band: a training step, a served request's TTFT and TPOT.

The bounds of ``symform.analysis.time.timing`` take every kernel at the datasheet's peak. An estimate
instead runs each leaf of the model (each kernel an eager framework would launch) at the
rate the device sustains for work of its kind and size, one after another:

- a GEMM at ``peak × sustained × tile(M) × F / (F + half_flops)``: the fraction of the
  peak large GEMMs reach, the tile quantisation of its M rows (tokens), and a roll-off
  for GEMMs too small to fill the SMs (wave quantisation, launch overhead); or, as an option
  (``gemm.model = "waves"``), each product's output tiles spread over the SMs in waves, from the
  shape (batches, M, N, K) its primitive declares (``gemm`` in formulas/components/);
- an attention core (FlashAttention/SDPA) at FlashAttention's achieved fraction by head size;
- memory-bound work at a fraction of the HBM bandwidth, its bytes scaled by a fusion
  convention (a serving engine fuses norms, rotary and activations into their neighbours);

each kernel taking the longer of its compute and its memory time. Communication comes from
``symform.analysis.time.timing`` (the same transfers) at each link's bus efficiency and latency per hop,
hidden under compute only where the overlap rules say so; the pipeline bubble, the
recomputation and the optimizer step are added. Every factor is data: one file per device
in ``hardware/efficiency/`` and the rules in ``hardware/efficiency/rules.toml``, each with
its source (``fitted`` ones are fitted on published runs: docs/validation.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

import sympy

from ...engine.algebra.multiplied import fraction_at
from ...engine.budget import check_result
from ...engine.store.derivation import derivation
from ...engine.errors import ConfigError, EvaluationError
from ...engine.graph.model import Model
from . import timing
from . import phase_time
from . import step_model
from .step_model import StepParts, utilisation
from . import measured_runs
from ..devices.hardware import Hardware
from ..memory.finetune import FineTune, kernel_passes, trained_per_device
from ..memory.memory import params_on_rank, tensor_split
from ..memory.settings import Layout
from ..parallel.scaling import in_flight_microbatches
from . import grouped_gemm
from . import routing
from .efficiencies import TimeProfile
from .roofline import attention_cores, phase_work, within
from .kernel_work import Kernel
from .efficiencies import ATTENTION, Efficiency, NO_KERNEL_DATA, NO_MOE_DATA, SCORE_LEAVES, efficiency, has_efficiency, rules


# --- the data -------------------------------------------------------------------------------


# --- kernels -----------------------------------------------------------------------------------


def kernels(
    model: Model,
    phase: str,
    *,
    workload: Mapping[str, int | Fraction],
    tensor: int = 1,
    pipeline: int = 1,
    attention: str = "sdpa",
    recompute: str = "none",
    expert_skew: float = 0,
    context: int = 1,
    finetune: FineTune | None = None,
    recompute_share: Fraction = Fraction(1),
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
) -> list[Kernel]:
    """The leaves of one micro-batch (train, prefill) or one step (decode) on one device, as kernels
    (``finetune``: a fine-tuning step's FLOPs, each adapter's in the kernel of the projection it adapts;
    ``recompute_share``: of the recomputed forward, the share run again, timing.recompute_share;
    ``weight_bytes``: bytes per parameter by leaf path as a checkpoint stores them, roofline.phase_work's)."""
    if attention not in ATTENTION:
        raise EvaluationError(f"unknown attention implementation {attention!r}; choose one of {', '.join(ATTENTION)}")
    return list(_kernels(model, phase, workload, tensor, pipeline, attention, recompute, expert_skew, context, finetune, Fraction(recompute_share), weight_bytes))


@derivation  # a plan's shortlisted layouts share their micro-batches, tensor splits, pipeline depths and recomputation
def _kernels(model: Model, phase: str, workload: Mapping[str, int | Fraction], tensor: int, pipeline: int, attention: str, recompute: str, expert_skew: float, context: int, finetune: FineTune | None, recompute_share: Fraction = Fraction(1), weight_bytes: Mapping[str, sympy.Expr] | None = None) -> tuple[Kernel, ...]:
    flash = attention != "eager"
    leaves = phase_work(
        model, phase, depth=None, flash=flash, expert_skew=expert_skew, finetune=finetune, grouped=attention != "fused_per_head", weight_bytes=weight_bytes
    ).components
    extra = _recomputed(model, recompute, flash) if phase == "train" else {}
    split = tensor_split(model, tensor)
    layers_here = Fraction(model.values.get("n_layers", 1), pipeline)
    rows = workload["batch"] * workload.get("seq", 1) / context
    passes = (1, 1, 1) if phase == "train" else (1, 0, 0)  # forward, gradient of the input, gradient of the weights
    tuned = kernel_passes(model, finetune) if finetune is not None else {}
    again = Fraction(recompute_share)  # of the recomputed forward, the share run again
    point = _device_point(model, split, workload)
    on_device = _on_device(model, point, split, pipeline, workload, context)
    found, cores = [], attention_cores(model)
    for path, work in leaves.items():
        both = [(1, work)] + ([(again, extra[path])] if path in extra else [])
        flops = sum(share * on_device(w.flops) for share, w in both)
        moved = sum(share * on_device(w.bytes) for share, w in both)
        if not flops and not moved:
            continue
        kind = "attention" if flash and within(path, cores) else "gemm" if flops else "elementwise"
        runs = tuple(float(p) for p in tuned.get(path, passes))
        calls = sum(runs) * (float(layers_here) if path.startswith("layers/") else 1.0)
        shape = _gemm_shape(model, path, split, workload, context, point) if kind == "gemm" else None
        routed = grouped_gemm.routed_experts(model, path) if kind == "gemm" else None
        found.append(Kernel(path, kind, float(flops), float(moved), calls, float(rows), shape, runs, routed))
    return tuple(found)


def _at_expert_tensor(model: Model, work: Sequence[Kernel], layout: Layout, *, micro_batch: int, seq: int, attention: str, recompute: str, finetune: FineTune | None, recompute_share: Fraction = Fraction(1)) -> list[Kernel]:
    """The routed experts' kernels of a layout whose experts split by their own tensor degree (Megatron-Core's MoE
    parallel folding): each expert tensor rank computes 1/etp of an expert's width for the tokens of its etp ranks,
    which hold 1/tensor of the sequence each under sequence parallelism: micro-batch · etp / tensor sequences."""
    share = Fraction(micro_batch * layout.etp, layout.tensor)
    routed = {k.path: k for k in kernels(model, "train", workload={"batch": share, "seq": seq}, tensor=layout.etp, pipeline=layout.pipeline, attention=attention, recompute=recompute, context=layout.context, finetune=finetune, recompute_share=recompute_share) if k.routed}
    return [routed.get(k.path, k) if k.routed else k for k in work]


def _gemm_shape(model: Model, path: str, split, workload, context: int, point: Mapping[str, int | Fraction]) -> tuple[float, float, float, float] | None:
    """The declared (batches, m, n, k) of the leaf at ``path`` on one device: the tensor split and the
    model's conventions in, the workload bound (one new token per sequence when decoding), a context
    rank's share of the tokens taken from the size that grows with the batch. ``point``: the device's sizes
    (_device_point)."""
    node = model.graph().graph.nodes.get(path)
    declared = node.get("gemm") if node is not None else None
    if not declared:
        return None
    fixed = {name: v for name, v in _convention_values(model).items() if name not in workload}
    at = {"seq": 1, **point, **fixed}
    batch = model.vocabulary["batch"].name
    sizes, shared = [], False
    for name in ("batches", "m", "n", "k"):
        expr = sympy.sympify(declared[name])
        value = fraction_at(expr, at)
        if value is None:  # sympy's route, which also words what is wrong
            conventions = {s: v for s, v in model.conventions.items() if s.name not in workload}
            value = Fraction(step_model._bind(model, expr.xreplace(split).xreplace(conventions), **{"seq": 1, **workload}))
        if context > 1 and not shared and name in ("batches", "m") and batch in {s.name for s in expr.free_symbols}:
            value, shared = value / context, True
        sizes.append(float(value))
    return tuple(sizes)


@derivation
def _convention_values(model: Model) -> dict[str, Fraction]:
    return {s.name: Fraction(int(v.p), int(v.q)) for s, v in model.conventions.items() if v.is_Rational}


def _device_point(model: Model, split, workload) -> dict[str, int | Fraction]:
    """The sizes one device of the layout holds, by name: the model's, the workload's, the tensor split's shares put in
    as values (heads / tensor: the same exact number as the split expression's, whose polynomial form one leaf
    shares across every layout)."""
    point: dict[str, int | Fraction] = {**model.values, **workload}
    for s, whole in split.items():
        if s.name in model.values:
            share = sympy.Rational(model.values[s.name]) * whole / s
            point[s.name] = Fraction(int(share.p), int(share.q))
    return point


def _on_device(model: Model, point: Mapping[str, int | Fraction], split, pipeline: int, workload, context: int) -> Callable[[sympy.Expr], Number]:
    """A leaf's total (FLOPs or bytes) as one device of the layout runs it, at its sizes ``point`` (_device_point):
    a context rank's share of the terms that grow with the batch, a pipeline stage's of the layers."""
    batch = model.vocabulary["batch"]
    scaled = (batch.name, Fraction(1, context)) if context > 1 else None

    def on_device(expr: sympy.Expr) -> Number:
        expr = sympy.sympify(expr)
        if expr == 0:
            return 0
        if routing.is_expected_count(expr):  # an expectation in floats: the split taken in the expression, as before
            shared = step_model.context_share(expr, batch, context)
            return step_model._bind(model, _device_share(shared, split, pipeline), **workload)
        value = fraction_at(expr, point, scaled)
        if value is None:  # no polynomial there: sympy's route, which also words what is wrong
            shares = {name: point[name] for name in (s.name for s in split) if name in model.values}
            value = Fraction(step_model._bind(model, step_model.context_share(expr, batch, context), **workload, **shares))
        check_result(value, "the result")
        value /= pipeline
        return int(value) if value.denominator == 1 else value

    return on_device


@derivation  # a plan's shortlisted layouts share their tensor splits and pipeline depths
def _device_share(expr: sympy.Expr, split, pipeline: int) -> sympy.Expr:
    return sympy.expand(expr.xreplace(split) / pipeline)


Number = int | float | Fraction


def _recomputed(model: Model, recompute: str, flash: bool) -> dict[str, Any]:
    """One more forward of the leaves ``recompute`` runs again in backward, by path (as symform.analysis.time.timing counts them)."""
    parts = step_model.recomputed_parts(model, recompute, flash)
    if parts is None:
        return {}
    units, kept = parts
    return step_model.recomputed_leaves(model, units, flash, kept=kept)


def kernel_parts(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> tuple[float, float, float]:
    """One kernel at the device's sustained rates: its compute time, its memory time and its fixed cost per
    launch (none for a kernel fused away)."""
    fraction, fused = fusion
    moved = kernel.bytes * (fraction if kernel.leaf in fused else 1.0)
    t_mem = moved / (hbm * eff.memory)
    if kernel.kind == "elementwise":
        t_compute = 0.0
    else:
        rate = eff.attention_fraction(head_size) if kernel.kind == "attention" else grouped_gemm.gemm_rate(eff, kernel)
        t_compute = kernel.flops / (peak * rate) + grouped_gemm.expert_seconds(eff, kernel)
    if not t_compute and not t_mem:
        return 0.0, 0.0, 0.0
    return t_compute, t_mem, eff.launch_s * kernel.calls


def kernel_seconds(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> float:
    """One kernel at the device's sustained rates: the longer of its compute and its memory time, plus a fixed
    cost per launch; a kernel fused away costs nothing."""
    t_compute, t_mem, launch = kernel_parts(kernel, peak, hbm, eff, fusion, head_size)
    return max(t_compute, t_mem) + launch


def kernel_ceiling(kernel: Kernel, peak: float, hbm: float, eff: Efficiency, fusion: tuple[float, frozenset[str]], head_size: int) -> float:
    """The kernel with its compute and its memory traffic not overlapped at all: the estimate's ceiling."""
    return sum(kernel_parts(kernel, peak, hbm, eff, fusion, head_size))


def _head_size(model: Model) -> int:
    values = model.values
    if "d_head" in values:
        return int(values["d_head"])
    return int(values.get("d_model", 128) // max(values.get("n_heads", 1), 1))


def _device_rates(place: step_model.Placement, dtype: str) -> tuple[float, float]:
    return float(place.device.flops_per_s(dtype)), float(place.device.hbm_bytes_per_s)


def _efficiency_for(place: step_model.Placement, given: Efficiency | str | os.PathLike[str] | None, gemm_model: str | None = None) -> Efficiency:
    found = _device_efficiency(place, given)
    return found.with_gemm_model(gemm_model) if gemm_model else found


def _device_efficiency(place: step_model.Placement, given: Efficiency | str | os.PathLike[str] | None) -> Efficiency:
    if isinstance(given, Efficiency):
        return given
    if given is not None:
        return efficiency(given)
    named = place.hardware.name  # a system of the user's own: its accelerator's data
    return efficiency(named if named and has_efficiency(named) else place.device.name or place.name)


def serving_kernels(
    model: Model, *, batch: int, prompt: int, output: int, tensor: int = 1, attention: str = "sdpa", expert_skew: float = 0, weight_bytes: Mapping[str, sympy.Expr] | None = None,
) -> tuple[list[Kernel], list[Kernel]]:
    """The prefill's kernels, and one decode step's at the mean cache length of the output − 1 steps (``weight_bytes``:
    the weights read as a checkpoint stores them, by leaf path)."""
    prefill = kernels(model, "prefill", workload={"batch": batch, "seq": prompt}, tensor=tensor, attention=attention, expert_skew=expert_skew, weight_bytes=weight_bytes)
    past = Fraction(2 * prompt + max(output - 2, 0), 2)
    return prefill, kernels(model, "decode", workload={"batch": batch, "past": past}, tensor=tensor, attention=attention, expert_skew=expert_skew, weight_bytes=weight_bytes)


def _compiled(convention: str | tuple[float, frozenset[str]], eff: Efficiency) -> str | tuple[float, frozenset[str]]:
    """The training step's fusion convention on a device whose compiler fuses for itself (its efficiency file's
    [fusion] training: XLA on TPUs) in place of the eager frameworks' "training"; any other convention as given."""
    return eff.training_fusion if convention == "training" and eff.training_fusion else convention


def _fusion(convention: str | tuple[float, frozenset[str]], attention: str = "sdpa") -> tuple[float, frozenset[str]]:
    if isinstance(convention, tuple):
        fraction, fused = convention
    else:
        conventions = rules().fusion
        if convention not in conventions:
            raise EvaluationError(f"unknown fusion convention {convention!r}; choose one of {', '.join(conventions)}")
        fraction, fused = conventions[convention]
    return fraction, fused - SCORE_LEAVES if attention == "eager" else fused


@dataclass(frozen=True)
class Band:
    """A point estimate with its band, and the bounds that bracket it: ``floor``, the datasheet peaks with
    everything overlapped (symform.analysis.time.timing's lower bound, where given), and ``ceiling``, every kernel at the
    device's sustained rates with nothing overlapped (its compute and memory time added, every transfer
    exposed). The band never goes below the floor; it may reach above the ceiling, which bounds the estimate,
    not a real run."""

    estimate: float
    low: float
    high: float
    ceiling: float | None = None
    floor: float | None = None

    @classmethod
    def around(cls, value: float, kind: str, *, ceiling: float | None = None, floor: float | None = None, widen: float = 0.0) -> "Band":
        """The fitted band of ``kind``, its edges moved out by a factor 1 + ``widen`` where the case extrapolates
        (a ratio, so the lower edge never reaches zero), never below the floor."""
        below, above = rules().band[kind]
        low, high = value * (1 - below) / (1 + widen), value * (1 + above) * (1 + widen)
        # no real run beats the floor; the ceiling bounds the estimate, not a real run (kernels slower than fitted)
        return cls(value, max(low, floor or 0.0), high, ceiling, floor)

    def as_dict(self) -> dict[str, float]:
        bounds = {k: v for k, v in (("ceiling", self.ceiling), ("floor", self.floor)) if v is not None}
        return {"estimate": self.estimate, "low": self.low, "high": self.high} | bounds


# --- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingEstimate:
    """One training step's estimate: its parts, the band, MFU and HFU at the estimate, and the factors used."""

    step: Band
    compute_s: float
    comm_s: dict[str, float]
    exposed_comm_s: dict[str, float]
    bubble_s: float
    optimizer_s: float
    model_flops: Number
    hardware_flops: Number
    devices: int
    peak_flops_per_s: float
    tokens: int
    attention: str
    factors: dict[str, object] = field(default_factory=dict)
    extrapolating: tuple[str, ...] = ()  # how the case lies outside the published runs (the band widened for each)

    def mfu(self, seconds: float | None = None) -> float:
        return utilisation(self.model_flops, seconds or self.step.estimate, self.devices, self.peak_flops_per_s)

    def hfu(self, seconds: float | None = None) -> float:
        return utilisation(self.hardware_flops, seconds or self.step.estimate, self.devices, self.peak_flops_per_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step.estimate

    def as_dict(self) -> dict[str, object]:
        return {
            "estimate_s": self.step.as_dict(),
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s,
            "optimizer_s": self.optimizer_s,
            "mfu": self.mfu(),
            "hfu": self.hfu(),
            "tokens_per_s": self.tokens_per_s,
            "attention": self.attention,
            "factors": self.factors,
            "extrapolating": list(self.extrapolating),
        }


def _extrapolating(kind: str, eff: Efficiency, dtype: str, devices: int, model: Model, features: Sequence[str] = (), release: tuple[str, str | None] | None = None) -> tuple[tuple[str, ...], float]:
    """What the case lies outside the published runs by (symform.analysis.time.measured_runs.extrapolating), and the band's
    widening for it (rules.toml [band_widen]); ``release``: the framework or engine and its release, where named."""

    found = measured_runs.extrapolating(kind, device=eff.device, dtype=dtype, devices=devices, moe="n_experts" in model.values, features=features, release=release)
    widen = rules().widen
    return tuple(text for _, text in found), sum(widen.get(name, 0.0) for name, _ in found)


def _unfitted_features(layout: Layout, tp_comm_overlap: bool) -> list[str]:
    """The layout's features that no fitted training run has (measured_runs.fitted_features)."""
    fitted = measured_runs.fitted_features()
    return [text for kind, text in measured_runs.layout_features(layout, tp_comm_overlap) if kind not in fitted]


def training_estimate(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    global_batch: int,
    micro_batch: int,
    seq: int,
    layout: Layout | None = None,
    recompute: str = "none",
    dtype: str = "bf16",
    precision: str = "mixed",
    attention: str = "sdpa",
    node_size: int | None = None,
    efficiency_data: Efficiency | str | None = None,
    convention: str = "training",
    bounds: timing.TrainingTime | None = None,
    work: list[Kernel] | None = None,
    finetune: FineTune | None = None,
    gemm_model: str | None = None,
    tp_comm_overlap: bool = False,
    profile: TimeProfile | None = None,
    ep_comm_overlap: bool | str = False,
    offload_layers: int = 0,
    offload_framework: str | None = None,
    recompute_layers: int | None = None,
) -> TrainingEstimate:
    """The estimated step time of ``symform.analysis.time.timing.training_time``'s step, with its parts and band.

    ``finetune``: a fine-tuning step (its FLOPs, its trainable weights' gradient exchange and optimizer
    update), at the efficiency factors fitted to full training. ``gemm_model``: one of GEMM_MODELS at its own
    fit, in place of the device's default. ``tp_comm_overlap``: sequence parallelism's all-gathers and
    reduce-scatters pipelined with the GEMMs (Transformer Engine's Userbuffers; rules.toml overlap.tensor_overlapped).
    ``profile``: the framework's time-side facts (symform.analysis.time.efficiencies): its recipes' overlaps and a
    release's slowdown. ``ep_comm_overlap``: the expert-parallel
    all-to-alls overlapped with other micro-batches' compute, where Megatron-Core's default leaves them exposed: True
    or "1f1b", one micro-batch's forward paired with another's backward phase by phase (Megatron-Core's
    overlap_moe_expert_parallel_comm, DeepEP's; rules.toml overlap.expert_overlapped, :class:`Pairing`; the CLI's
    --ep-comm-overlap); "dualpipe", DeepSeek-V3's DualPipe, which places them anywhere in the step's compute
    (overlap.expert_dualpipe; --dualpipe).
    ``offload_layers``, ``offload_framework``: activation offload's host-link copies (timing.offload_comm), DMA at the link's rate (no
    collective, so no bus efficiency), hidden under the compute by rules.toml overlap.offload. ``recompute_layers``: with
    full recomputation, only these layers of each pipeline chunk recomputed (timing.training_time's)."""
    ep_comm_overlap = ep_comm_overlap or False
    if ep_comm_overlap not in EP_OVERLAPS:
        raise ConfigError(f"ep_comm_overlap is {ep_comm_overlap!r}; give True or one of {', '.join(map(repr, EP_OVERLAPS[2:]))} (how the all-to-alls are overlapped), or False")
    if tp_comm_overlap and not (layout and layout.sequence):
        raise ConfigError("tensor-parallel communication overlap pipelines sequence parallelism's all-gathers and reduce-scatters with the GEMMs; add sequence parallelism (--sp) or drop it")
    layout = layout or Layout()
    if profile is not None and profile.overlaps_tensor(layout):
        tp_comm_overlap = True
    bounds = bounds or timing.training_time(
        model, gpu, global_batch=global_batch, micro_batch=micro_batch, seq=seq, layout=layout,
        recompute=recompute, dtype=dtype, flash=attention != "eager", precision=precision, node_size=node_size, finetune=finetune, offload_layers=offload_layers, offload_framework=offload_framework, recompute_layers=recompute_layers,
    )
    place = step_model.placement(gpu, node_size)
    model = step_model.at_dtype(model, dtype)
    eff = grouped_gemm.at_precision(_efficiency_for(place, efficiency_data, gemm_model), dtype)
    peak, hbm = _device_rates(place, dtype)
    again = timing.recompute_share(model, recompute_layers, recompute, layout)
    if work is None:
        work = kernels(model, "train", workload={"batch": micro_batch, "seq": seq}, tensor=layout.tensor, pipeline=layout.pipeline, attention=attention, recompute=recompute, context=layout.context, finetune=finetune, recompute_share=again)
    if layout.folded:
        work = _at_expert_tensor(model, work, layout, micro_batch=micro_batch, seq=seq, attention=attention, recompute=recompute, finetune=finetune, recompute_share=again)
    work = grouped_gemm.at_expert_degree(work, layout.expert)
    convention = _compiled(convention, eff)
    fusion, head = _fusion(convention, attention), _head_size(model)
    seconds = [kernel_seconds(k, peak, hbm, eff, fusion, head) for k in work]
    paced = bounds.microbatches * bounds.stage_pace  # the slowest pipeline device's share paces the others
    compute = sum(seconds) * paced
    serial = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in work) * paced
    attention_s = sum(t for t, k in zip(seconds, work) if k.kind == "attention") * paced
    gemm_s = sum(t for t, k in zip(seconds, work) if k.kind == "gemm") * paced
    routed_s = sum(t for t, k in zip(seconds, work) if k.routed) * paced
    comm = {kind: c.seconds / (1.0 if kind == "offload" else eff.link(c.link).bus_efficiency) for kind, c in bounds.comm.items()}
    ep_comm_overlap = _expert_overlap(ep_comm_overlap, profile)
    recomputed = float(bounds.hardware_flops) / float(bounds.model_flops) - 1 if finetune is None else 0.0
    pairing = Pairing(compute - routed_s, routed_s, _unpaired(layout, bounds.microbatches), recomputed) if ep_comm_overlap and "expert" in comm else Pairing()
    exposed = _exposed(comm, compute, layout, attention_s, gemm_s if tp_comm_overlap else None, p2p_overlap=profile is not None and profile.p2p_overlap, ep_overlap=ep_comm_overlap, pairing=pairing, microbatches=bounds.microbatches)
    inside = tuple(v for k, v in exposed.items() if k not in timing.ONCE_PER_STEP)
    params = float(params_on_rank(model, layout) if finetune is None else step_model._bind(model, trained_per_device(model, finetune, layout)))
    optimizer = params / layout.optimizer_shards * rules().optimizer_bytes_per_param / (hbm * eff.memory)
    expected = StepParts((compute,), inside, bounds.bubble_ratio, (*_once(exposed), optimizer))
    within = tuple(v for k, v in comm.items() if k not in timing.ONCE_PER_STEP)
    ceiling = StepParts((serial,), within, bounds.bubble_ratio, (*_once(comm), optimizer)).serial()
    step, bubble = expected.expected(), expected.bubble()
    slower = profile.step_factor if profile is not None else 1.0  # a release's own slowdown (efficiencies)
    step, ceiling = step * slower, ceiling * slower
    release = (profile.framework, profile.version) if profile is not None else None
    reasons, widen = _extrapolating("training", eff, dtype, bounds.devices, model, _unfitted_features(layout, tp_comm_overlap) + (["fine-tuning"] if finetune is not None else []) + ([f"activation offload of {offload_layers} layers"] if offload_layers else []), release)
    return TrainingEstimate(
        step=Band.around(step, "training", ceiling=ceiling, floor=bounds.time_lower, widen=widen),
        compute_s=compute,
        comm_s=comm,
        exposed_comm_s=exposed,
        bubble_s=bubble,
        optimizer_s=optimizer,
        model_flops=bounds.model_flops,
        hardware_flops=bounds.hardware_flops,
        devices=bounds.devices,
        peak_flops_per_s=peak,
        tokens=bounds.tokens,
        attention=attention,
        factors=_factors(eff, convention, "training") | ({"framework": profile.applied()} if profile is not None else {}),
        extrapolating=reasons,
    )


#: ``ep_comm_overlap``'s values: off, on (Megatron-Core's combined 1F1B), or a schedule by name.
EP_OVERLAPS = (False, True, "1f1b", "dualpipe")


@dataclass(frozen=True)
class Pairing:
    """What an all-to-all overlapped by pairing micro-batches hides under: the step's compute outside the routed
    experts (attention, norms, router, shared experts) and inside them, and the share of the passes left unpaired."""

    dense_s: float = 0.0
    routed_s: float = 0.0
    unpaired: float = 1.0
    recomputed: float = 0.0  # full recomputation's extra forward, as a share of the step's other compute

    def exposed(self, a2a: float) -> float:
        """The all-to-alls' seconds left on the critical path. A forward pass of one micro-batch runs beside the backward
        of another, layer by layer (Megatron-Core's combined 1F1B under overlap_moe_expert_parallel_comm, after
        DeepSeek-V3's DualPipe): the backward's combine under the forward's attention, both dispatches under the
        experts' backward and forward, the forward's combine under the attention's backward (a backward pass twice its
        forward's work, and a recomputed forward runs in the backward); each of the four all-to-alls a quarter of
        them. Passes outside the 1F1B steady state (the pipeline's warm-up forwards and cool-down backwards, or
        without a pipeline the first forward and the last backward) have no partner."""
        quarter, forward = a2a / 4, self.dense_s / (3 * (1 + self.recomputed))
        paired = max(0.0, quarter - forward) + max(0.0, 2 * quarter - self.routed_s) + max(0.0, quarter - (self.dense_s - forward))
        return (1 - self.unpaired) * paired + self.unpaired * a2a


def _expert_overlap(asked: bool | str, profile: TimeProfile | None) -> bool | str:
    """How the all-to-alls are overlapped: as the run or the framework's recipe asks, unless the release's own
    overlap of micro-batches (Megatron-Core's, True or "1f1b") hides nothing (a fact whose value is false: its CPU
    overhead, say, costs what it would hide); DualPipe is another schedule, which such a release's facts (its
    slower step among them) do not describe: refused beside them."""
    if profile is None:
        return asked
    if profile.ep_comm_overlap is False:
        if asked == "dualpipe":
            raise ConfigError(f"{profile.framework} {profile.version}'s facts for this model describe its own overlap of the all-to-alls (it hides nothing, its step runs slower), not DualPipe's schedule; drop --dualpipe or --framework")
        return False
    return asked or bool(profile.ep_comm_overlap)


def _unpaired(layout: Layout, microbatches: int) -> float:
    """The share of a stage's passes outside the 1F1B steady state: the first stage's warm-up forwards and one more
    (and as many backwards at the end), of its micro-batches (in whole-stage units with a virtual pipeline); all of
    them under the naive schedule, which runs one micro-batch at a time, and GPipe's, whose forwards all come first."""
    if layout.pipeline > 1 and layout.schedule in ("naive", "gpipe"):
        return 1.0
    warm = in_flight_microbatches(layout.schedule, layout.pipeline, microbatches, layout.chunks) if layout.pipeline > 1 else 1
    return min(1.0, float(warm) / microbatches)


def _exposed(comm: Mapping[str, float], compute: float, layout: Layout, attention_s: float = 0.0, gemm_s: float | None = None, *, p2p_overlap: bool = False, ep_overlap: bool | str = False, pairing: Pairing = Pairing(), microbatches: int) -> dict[str, float]:
    """Each kind of communication's part on the critical path, by the overlap rules (``gemm_s``: the GEMMs' time,
    where the tensor-parallel communication is overlapped with them; ``p2p_overlap``: a virtual pipeline's sends
    overlapped with the other chunks' compute; ``ep_overlap``: the all-to-alls overlapped by pairing micro-batches,
    ``pairing``; ``microbatches``: the step's, whose last backward the gradient exchange hides under)."""
    overlap = rules().overlap
    windows = {"none": 0.0, "last_backward": compute * 2 / 3 / microbatches, "step": compute, "attention": attention_s, "gemm": gemm_s or 0.0}
    exposed = {}
    for kind, seconds in comm.items():
        step = kind in timing.ONCE_PER_STEP  # hybrid sharding's all-reduce across replicas overlaps as the gradient exchange does
        name = "sharded" if step and layout.zero >= 3 else "data" if step else "tensor_overlapped" if kind == "tensor" and gemm_s is not None else kind
        name = "pipeline_overlapped" if kind == "pipeline" and p2p_overlap and layout.chunks > 1 else name
        name = ("expert_dualpipe" if ep_overlap == "dualpipe" else "expert_overlapped") if kind == "expert" and ep_overlap else name
        rule = overlap[name]
        if rule.get("window") == "paired":
            exposed[kind] = pairing.exposed(seconds) * float(rule.get("exposed", 1.0))
            continue
        window = windows[rule.get("window", "none")]
        if kind == "replicate":  # it follows the shard group's reduce-scatter: the compute left once that is hidden
            window = max(0.0, window - comm.get("data", 0.0))
        exposed[kind] = max(0.0, seconds - window) * float(rule.get("exposed", 1.0))
    return exposed


def _once(comm: Mapping[str, float]) -> tuple[float, ...]:
    """The once-per-step communication: the gradient exchange, and hybrid sharding's all-reduce across replicas where there is one."""
    return (comm.get("data", 0.0), *((comm["replicate"],) if "replicate" in comm else ()))


def _factors(eff: Efficiency, convention: str | tuple, band: str) -> dict[str, object]:
    r = rules()
    if isinstance(convention, tuple):
        return {"efficiency_file": eff.device, "fusion": {"convention": "given", "fraction": convention[0]}}
    return {
        "efficiency_file": eff.device,
        "gemm": {"sustained": eff.gemm_sustained, "tile_m": eff.tile_m, "half_flops": eff.half_flops, "source": eff.sources["gemm"]}
        | ({"model": "waves", "tiles": [list(t) for t in eff.tiles], "sms": eff.sms} if eff.gemm_model == "waves" else {}),
        "attention": {"fraction": {str(k): v for k, v in eff.attention.items()}, "source": eff.sources["attention"]},
        "memory": {"fraction": eff.memory, "source": eff.sources["memory"]},
        "kernel": {"launch_s": eff.launch_s, "source": eff.sources.get("kernel", NO_KERNEL_DATA)},
        "moe": {"expert_s": eff.expert_s, "source": eff.sources.get("moe", NO_MOE_DATA)},
        "links": {n: {"bus_efficiency": l.bus_efficiency, "latency_s": l.latency_s, "source": eff.sources.get(f"links.{n}", "")} for n, l in eff.links.items()},
        "fusion": {"convention": convention, "fraction": r.fusion[convention][0], "source": r.sources[f"fusion.{convention}"]}
        | ({"compiler": eff.sources.get("fusion", "")} if band == "training" and convention == eff.training_fusion else {}),
        "overlap": {k: dict(v) for k, v in r.overlap.items()},
        "optimizer_bytes_per_param": r.optimizer_bytes_per_param,
        "band": {"below": r.band[band][0], "above": r.band[band][1], "source": r.sources[f"band.{band}"]},
    }


# --- serving --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingEstimate:
    ttft: Band
    tpot: Band
    total: Band
    batch: int
    output: int
    prefill_comm_s: float
    decode_comm_s: float
    attention: str
    factors: dict[str, object] = field(default_factory=dict)
    extrapolating: tuple[str, ...] = ()  # how the case lies outside the published runs (the band widened for each)

    @property
    def tokens_per_s(self) -> Band:
        """Output tokens per second of the whole batch, prefill included (high time, low rate)."""
        n = self.batch * self.output
        return Band(n / self.total.estimate, n / self.total.high, n / self.total.low)

    def as_dict(self) -> dict[str, object]:
        return {
            "ttft_s": self.ttft.as_dict(),
            "tpot_s": self.tpot.as_dict(),
            "total_s": self.total.as_dict(),
            "tokens_per_s": self.tokens_per_s.as_dict(),
            "prefill_comm_s": self.prefill_comm_s,
            "decode_comm_s": self.decode_comm_s,
            "attention": self.attention,
            "factors": self.factors,
            "extrapolating": list(self.extrapolating),
        }


def serving_estimate(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    *,
    batch: int,
    prompt: int,
    output: int,
    tensor: int = 1,
    dtype: str = "bf16",
    attention: str = "sdpa",
    node_size: int | None = None,
    efficiency_data: Efficiency | str | None = None,
    convention: str = "fused",
    work: tuple[list[Kernel], list[Kernel]] | None = None,
    expert_skew: float = 0,
    gemm_model: str | None = None,
    release: tuple[str, str | None] | None = None,
    weight_bytes: Mapping[str, sympy.Expr] | None = None,
    bounds: phase_time.InferenceTime | None = None,
) -> ServingEstimate:
    """TTFT, TPOT and tokens/s of ``batch`` requests (static batching), each kernel at its sustained rate.

    TPOT is one decode step at the mean cache length of the output − 1 steps (the
    per-step work is linear in the cache length, so this is their mean). ``release``: the serving engine and its
    release, where known: a release no fitted run ran widens the band (rules.toml [band_widen] framework).
    ``weight_bytes``: the weights read as a checkpoint stores them, by leaf path (as the bounds read them);
    ``bounds``: the same case's phase_time.inference_time, whose lower bounds are the bands' floors.
    """
    for name, value in (("batch", batch), ("prompt", prompt), ("output", output), ("tensor", tensor)):
        step_model._whole(name, value)
    place = step_model.placement(gpu, node_size)
    model = step_model.at_dtype(model, dtype)
    eff = _efficiency_for(place, efficiency_data, gemm_model)
    peak, hbm = _device_rates(place, dtype)
    fusion, head = _fusion(convention, attention), _head_size(model)
    prefill, decode = work or serving_kernels(model, batch=batch, prompt=prompt, output=output, tensor=tensor, attention=attention, expert_skew=expert_skew, weight_bytes=weight_bytes)
    comm_prefill = comm_decode = 0.0
    if tensor > 1:
        link = place.link(tensor)
        rates = eff.link(link)
        bandwidth = step_model._bandwidth(place, link) * rates.bus_efficiency
        algorithms = rules().engine_all_reduce(link)
        comm_prefill, _ = phase_time._inference_comm(model, place, tensor, batch, prompt, alpha=rates.latency_s, bandwidth=bandwidth, algorithms=algorithms)
        comm_decode, _ = phase_time._inference_comm(model, place, tensor, batch, 1, alpha=rates.latency_s, bandwidth=bandwidth, algorithms=algorithms)
    ttft = sum(kernel_seconds(k, peak, hbm, eff, fusion, head) for k in prefill) + comm_prefill
    tpot = sum(kernel_seconds(k, peak, hbm, eff, fusion, head) for k in decode) + comm_decode
    total = ttft + (output - 1) * tpot
    ttft_ceiling = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in prefill) + comm_prefill
    tpot_ceiling = sum(kernel_ceiling(k, peak, hbm, eff, fusion, head) for k in decode) + comm_decode
    reasons, widen = _extrapolating("serving", eff, dtype, tensor, model, [f"routing skew {expert_skew}"] if expert_skew else [], release)
    floors = (bounds.ttft_lower, bounds.tpot_lower, bounds.total_lower) if bounds is not None else (None, None, None)
    return ServingEstimate(
        ttft=Band.around(ttft, "serving", ceiling=ttft_ceiling, floor=floors[0], widen=widen),
        tpot=Band.around(tpot, "serving", ceiling=tpot_ceiling, floor=floors[1], widen=widen),
        total=Band.around(total, "serving", ceiling=ttft_ceiling + (output - 1) * tpot_ceiling, floor=floors[2], widen=widen),
        batch=batch,
        output=output,
        prefill_comm_s=comm_prefill,
        decode_comm_s=comm_decode,
        attention=attention,
        factors=_factors(eff, convention, "serving"),
        extrapolating=reasons,
    )
