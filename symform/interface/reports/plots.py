"""Charts for papers and notes: parameter and FLOPs shares by component, training memory against a device.

Every number comes from the same expressions ``symform params``, ``flops`` and
``memory`` print. matplotlib is the optional ``plot`` extra
(``pip install matplotlib``) and is imported only when a figure is drawn;
the share and memory tables below need nothing beyond symform.

Python::

    from symform import plots
    plots.params_shares(["qwen3-0.6b", "qwen3-8b"])        # {model: {group: Fraction}}
    fig = plots.params_share_figure(["qwen3-0.6b", "qwen3-8b"])
    plots.save(fig, "params.png")                          # .png or .svg

Command line: ``symform plot params-share|flops-share|memory|roofline …`` (docs/plots.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

from ..options.cli_args import attention_arguments, uses_flash, positive_int as _positive
from ...engine.errors import EvaluationError
from ...engine.algebra.evaluate import Number
from ...analysis.memory.memory import MemoryReport, Training, training_memory
from ...analysis.memory.settings import RECOMPUTE, Layout
from ...analysis.memory.frameworks import with_defaults
from .memory_report import _gpu_memory, framework_argument, framework_name, precision_arguments
from ...engine.graph.model import Model
from ..options.output import writing
from .roofline_chart import _pyplot, check_chart_path

# --- grouping breakdown paths ------------------------------------------------------------

#: Groups in stacking order (bottom to top), with their legend labels and colours
#: (a colour-blind-safe palette; the same group has the same colour in every chart).
GROUPS = {
    "embedding": ("embedding", "#0072B2"),
    "attention projections": ("attention projections (Q, K, V, O)", "#E69F00"),
    "attention scores": (r"attention scores ($QK^{\top}$, $AV$)", "#D55E00"),
    "mlp": ("MLP / experts (incl. router)", "#009E73"),
    "norms": ("norms", "#CC79A7"),
    "output head": ("output head", "#56B4E9"),
    "other": ("other", "#999999"),
}


def component_group(path: str) -> str:
    """The group a full breakdown path (``layers/attn/q_proj``) belongs to, by its segment names.

    Rules, first match wins: a segment containing ``norm`` → norms (``attn_norm``,
    ``q_norm``, ``final_norm``); a first segment starting with ``embed`` → embedding;
    ``lm_head`` → output head; inside ``attn``, the ``core`` (scores, softmax, context)
    → attention scores, the rest → attention projections; inside ``mlp`` (dense MLPs,
    experts, shared experts, router) → mlp; anything else → other.
    """
    segments = path.split("/")
    if any("norm" in s for s in segments):
        return "norms"
    if segments[0].startswith("embed"):
        return "embedding"
    if "lm_head" in segments or "logit_softcap" in segments:
        return "output head"
    if "attn" in segments:
        return "attention scores" if "core" in segments else "attention projections"
    if "mlp" in segments:
        return "mlp"
    return "other"


def grouped(parts: dict[str, Number]) -> dict[str, Number]:
    """Sum a full-depth breakdown into the groups of :func:`component_group`, in stacking order."""
    sums: dict[str, Number] = {g: 0 for g in GROUPS}
    for path, value in parts.items():
        sums[component_group(path)] += value
    return sums


def shares(parts: dict[str, Number]) -> dict[str, Fraction]:
    """Each group's exact fraction of the total; they sum to 1."""
    sums = grouped(parts)
    total = sum(sums.values())
    if not total:
        raise EvaluationError("the total is zero: there is no share to plot")
    return {g: Fraction(v) / Fraction(total) for g, v in sums.items()}


# --- the numbers behind each chart --------------------------------------------------------


def _model(model: Model | str) -> Model:
    return model if isinstance(model, Model) else Model.load(model)


def _positive_list(name: str, values: Iterable[int]) -> list[int]:
    values = list(values)
    if not values:
        raise EvaluationError(f"give at least one {name}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise EvaluationError(f"{name} {v!r} is not a whole number of 1 or more")
    return values


def params_shares(models: Sequence[Model | str], *, quantity: str = "params") -> dict[str, dict[str, Fraction]]:
    """Per model, each group's share of its parameters (``quantity="active_params"``: of those active per token)."""
    if not models:
        raise EvaluationError("give at least one model")
    loaded = [_model(m) for m in models]
    return {m.name: shares(m.evaluate_breakdown(quantity, depth=None)) for m in loaded}


def flops_shares(model: Model | str, seqs: Iterable[int], *, batch: int = 1) -> dict[int, dict[str, Fraction]]:
    """Per context length, each group's share of the forward FLOPs of ``batch`` sequences."""
    model = _model(model)
    return {s: shares(model.evaluate_breakdown("forward_flops", depth=None, batch=batch, seq=s)) for s in _positive_list("seq", seqs)}


def memory_grid(model: Model | str, batches: Iterable[int], seqs: Iterable[int], *, setup: Training = Training()) -> dict[tuple[int, int], MemoryReport]:
    """Training memory per device at every (batch, seq) pair."""
    model = _model(model)
    batches, seqs = _positive_list("batch", batches), _positive_list("seq", seqs)
    return {(b, s): training_memory(model, batch=b, seq=s, setup=setup) for s in seqs for b in batches}


def device_memory(gpu: str) -> tuple[str, int]:
    """An accelerator's title and memory in bytes, from the hardware data."""
    from ...analysis.devices.hardware import load_device

    name, capacity = _gpu_memory(gpu)  # refuses systems, as symform memory does
    return load_device(gpu).title or name, capacity


# --- figures -------------------------------------------------------------------------------------


def _figure(**options):
    """A matplotlib Figure made without pyplot: no global state, no backend switch in notebooks."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        _pyplot()  # raises symform's PlotDependencyError with the install hint
        raise
    return Figure(layout="constrained", **options)


def _human(value: Number, unit: str = "") -> str:
    value = float(value)
    for scale, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G" if unit else "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}{unit}"
    return f"{value:.3g} {unit}".strip()


def _stacked_shares(axes, columns: dict[str, dict[str, Fraction]], labels: list[str]) -> None:
    """Stacked 0-100 % bars, one per column, each segment of 5 % or more printed on the bar."""
    positions = range(len(columns))
    bottoms = [0.0] * len(columns)
    for group, (legend, colour) in GROUPS.items():
        heights = [100 * float(c[group]) for c in columns.values()]
        if not any(heights):
            continue  # a group absent from every column stays out of the legend
        largest = max(heights)
        if largest < 1:  # invisible as a bar: the legend says how small
            legend = f"{legend} (at most {largest:.2g} %)"
        axes.bar(positions, heights, 0.65, bottom=bottoms, color=colour, label=legend, edgecolor="white", linewidth=0.5)
        for x, (h, b) in enumerate(zip(heights, bottoms)):
            if h >= 5:
                axes.text(x, b + h / 2, f"{h:.0f} %", ha="center", va="center", fontsize=8, color="white", weight="bold")
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    axes.set_xticks(list(positions), labels)
    axes.set_ylim(0, 100)
    axes.yaxis.set_major_formatter("{x:.0f} %")
    axes.grid(True, axis="y", linestyle=":", linewidth=0.5)
    axes.set_axisbelow(True)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="component", title_fontsize=9)


def params_share_figure(models: Sequence[Model | str], *, quantity: str = "params"):
    """Stacked bars: each model's parameters by component group, as shares of its total."""
    loaded = [_model(m) for m in models] if models else []
    table = params_shares(loaded, quantity=quantity)
    what = "active parameters per token" if quantity == "active_params" else "parameters"
    labels = [f"{m.name}\n{_human(m.evaluate(quantity))}" for m in loaded]
    figure = _figure(figsize=(max(7.5, 1.3 * len(loaded) + 4.5), 5.5), dpi=120)
    axes = figure.add_subplot()
    _stacked_shares(axes, table, labels)
    axes.set_xlabel(f"model (total {what})")
    axes.set_ylabel(f"share of {what} (%)")
    axes.set_title(f"Share of {what} by component")
    return figure


def flops_share_figure(model: Model | str, seqs: Iterable[int], *, batch: int = 1):
    """Stacked bars: the forward pass's FLOPs by component group at each context length."""
    model = _model(model)
    table = flops_shares(model, seqs, batch=batch)
    totals = {s: model.evaluate("forward_flops", batch=batch, seq=s) for s in table}
    labels = [f"{s:,}\n{_human(totals[s], 'FLOP')}" for s in table]
    figure = _figure(figsize=(max(7.5, 1.2 * len(table) + 4.5), 5.5), dpi=120)
    axes = figure.add_subplot()
    _stacked_shares(axes, {str(s): v for s, v in table.items()}, labels)
    axes.set_xlabel(f"context length (tokens per sequence; forward FLOPs of batch {batch} below)")
    axes.set_ylabel("share of forward FLOPs (%)")
    axes.set_title(f"{model.name}: share of forward FLOPs by component against context length")
    return figure


MEMORY_COLOURS = {
    "weights": "#0072B2",
    "master_weights": "#56B4E9",
    "gradients": "#E69F00",
    "optimizer": "#CC79A7",
    "activations": "#009E73",
    "offload_buffer": "#999999",
    "recompute_buffer": "#F0E442",
    "backward_peak": "#D55E00",
}
#: what a framework adds (its buffers, the CUDA context, the allocator's reserve), one group on top
FRAMEWORK_COLOUR, FRAMEWORK_LABEL = "#7F7F7F", "framework buffers and reserve"
GIB = 2**30


def memory_figure(model: Model | str, gpu: str, batches: Iterable[int], seqs: Iterable[int], *, setup: Training = Training()):
    """One panel per sequence length: stacked training memory per device (GiB) against batch, the device's memory as a line."""
    model = _model(model)
    batches, seqs = _positive_list("batch", batches), _positive_list("seq", seqs)
    title, capacity = device_memory(gpu)
    grid = memory_grid(model, batches, seqs, setup=setup)
    top = max(max(float(r.total) for r in grid.values()), capacity) / GIB * 1.15
    figure = _figure(figsize=(max(7.5, 3.2 * len(seqs) + 2.5), 5.5), dpi=120)
    panels = figure.subplots(1, len(seqs), sharey=True, squeeze=False)[0]
    for axes, seq in zip(panels, seqs):
        _memory_panel(axes, [grid[b, seq] for b in batches], batches, capacity, title)
        axes.set_title(f"seq {seq:,} tokens", fontsize=10)
        axes.set_xlabel("batch (sequences per device)")
        axes.set_ylim(0, top)
    panels[0].set_ylabel("memory per device (GiB = 2³⁰ bytes)")
    handles, names = panels[0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside lower center", ncols=min(len(names), 4), fontsize=8)
    figure.suptitle(f"Training memory per device: {model.name} on {title}\n{_setup_line(setup)}", fontsize=10)
    return figure


def _memory_panel(axes, reports: list[MemoryReport], batches: list[int], capacity: int, device: str) -> None:
    positions = range(len(reports))
    bottoms = [0.0] * len(reports)
    groups = [(category.replace("_", " "), colour, [float(r.values.get(category, 0)) / GIB for r in reports]) for category, colour in MEMORY_COLOURS.items()]
    rest = [float(sum(v for k, v in r.values.items() if k not in MEMORY_COLOURS)) / GIB for r in reports]
    for label, colour, heights in [*groups, (FRAMEWORK_LABEL, FRAMEWORK_COLOUR, rest)]:
        if not any(heights):
            continue
        axes.bar(positions, heights, 0.65, bottom=bottoms, color=colour, label=label, edgecolor="white", linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for x, (r, b) in enumerate(zip(reports, bottoms)):
        fits = r.total <= capacity
        label = f"{b:,.0f}" if fits else f"{b:,.0f} ✗"  # the cross: over the device's memory
        axes.text(x, b, label, ha="center", va="bottom", fontsize=8, color="black" if fits else "#B00000")
    axes.axhline(capacity / GIB, color="#B00000", linestyle="--", linewidth=1.5, label=f"{device}: {capacity / GIB:,.0f} GiB")
    axes.set_xticks(list(positions), [str(b) for b in batches])
    axes.grid(True, axis="y", linestyle=":", linewidth=0.5)
    axes.set_axisbelow(True)


def _setup_line(setup: Training) -> str:
    """The recipe and layout in words, for the subtitle: what the bars assume."""
    layout, default = setup.layout, Layout()
    words = {"data": "{} data-parallel", "tensor": "{} tensor-parallel", "pipeline": "{} pipeline stages", "zero": "ZeRO-{}", "sequence": "sequence parallelism", "distributed_optimizer": "distributed optimizer"}
    changed = [words.get(k, k + " {}").format(v) for k, v in vars(layout).items() if v != getattr(default, k)]
    parts = [f"{setup.precision} precision", setup.optimizer, f"recompute {setup.recompute}", "FlashAttention" if setup.flash else "eager attention"] + ([setup.framework] if setup.framework else [])
    return ", ".join(parts + (changed or ["one device"]))


def save(figure, path: str | Path) -> Path:
    """Write a figure as PNG or SVG, by the path's suffix."""
    with writing(check_chart_path(path)) as target:
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(target)
    return target


def roofline_plot(model: Model | str, gpu: str, path: str | Path, *, phase: str, batch: int, seq: int | None = None, context: int | None = None, **options) -> Path:
    """The roofline chart of ``symform roofline --plot``: the phase, its components and the device's roof."""
    from ...analysis.time.roofline import roofline
    from .roofline_chart import roofline_chart

    check_chart_path(path)
    return roofline_chart(roofline(_model(model), gpu, phase=phase, batch=batch, seq=seq, context=context, **options), path)


# --- command line ---------------------------------------------------------------------------------


def _size_list(text: str) -> list[int]:
    """512,2048,8192: whole numbers of 1 or more, in the order given."""
    return [_positive(t.strip()) for t in text.split(",")]


def _model_options(p: argparse.ArgumentParser) -> None:
    from ..options.parser import _assignment, _setting  # the same NAME=VALUE parsing as every other command

    p.add_argument("--set", dest="sizes", action="append", type=_setting, default=[], metavar="NAME=VALUE", help="change an argument of every model (e.g. --set n_layers=32)")
    p.add_argument("--convention", dest="conventions", action="append", type=_assignment, default=[], metavar="NAME=VALUE", help="counting convention, e.g. --convention causal=1/2")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the chart: .png or .svg")


MODEL_HELP = "a bundled preset (symform models), a path to a Hugging Face config.json, or an architecture file (.toml)"


def plot_arguments(p: argparse.ArgumentParser) -> None:
    """``symform plot KIND …``: one sub-command per chart."""
    from .roofline_report import roofline_arguments

    kinds = p.add_subparsers(dest="chart", required=True, parser_class=type(p), metavar="CHART", help="the chart to draw: params-share, flops-share, memory or roofline (symform plot CHART --help)")
    q = kinds.add_parser("params-share", help="parameter share by component across models (stacked bars)")
    q.add_argument("models", nargs="+", metavar="MODEL", help=MODEL_HELP)
    q.add_argument("--active", action="store_true", help="active parameters per token (mixtures of experts) instead of all")
    _model_options(q)
    q = kinds.add_parser("flops-share", help="forward-FLOPs share by component against context length")
    q.add_argument("model", help=MODEL_HELP)
    q.add_argument("--seq", type=_size_list, required=True, metavar="S1,S2,…", help="context lengths in tokens, e.g. 512,2048,8192,32768")
    q.add_argument("--batch", type=_positive, default=1, help="sequences (default 1; the shares do not depend on it)")
    _model_options(q)
    q = kinds.add_parser("memory", help="training memory per device against batch and sequence length, with the device's memory drawn")
    q.add_argument("model", help=MODEL_HELP)
    q.add_argument("--gpu", required=True, metavar="NAME", help="an accelerator (symform hardware) whose memory is drawn as the limit")
    q.add_argument("--batch", type=_size_list, required=True, metavar="B1,B2,…", help="micro-batch sizes, e.g. 1,2,4,8")
    q.add_argument("--seq", type=_size_list, required=True, metavar="S1,S2,…", help="sequence lengths, one panel each, e.g. 1024,4096")
    precision_arguments(q)
    q.add_argument("--recompute", default="none", choices=RECOMPUTE, help="activation recomputation")
    attention_arguments(q)
    q.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage over --dp ranks")
    q.add_argument("--dp", type=_positive, default=1, metavar="N", help="data-parallel degree")
    q.add_argument("--tp", type=_positive, default=1, metavar="N", help="tensor-parallel degree")
    framework_argument(q, accounting=False)
    q.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism beside --tp (default: the framework's)")
    _model_options(q)
    q = kinds.add_parser("roofline", help="the roofline chart of symform roofline --plot")
    q.add_argument("model", help=MODEL_HELP)
    roofline_arguments(q)
    _model_options(q)
    for action in q._actions:  # --out names the file here; --plot would say the same twice
        if action.dest == "plot":
            action.help = argparse.SUPPRESS
    q.set_defaults(json=False)


def plot_command(args: argparse.Namespace) -> str:
    """Draw the chart ``args`` describe and say where it went."""
    check_chart_path(args.out)  # before any algebra: a bad suffix fails at once
    if args.chart == "roofline":
        from .roofline_report import roofline_command

        args.plot = args.out  # the existing roofline command draws it, exactly as --plot does
        roofline_command(_load(args.model, args), args)
        return f"wrote {args.out}"
    save(_figure_for(args), args.out)
    return f"wrote {args.out}"


def _figure_for(args: argparse.Namespace):
    if args.chart == "params-share":
        models = [_load(m, args) for m in args.models]
        return params_share_figure(models, quantity="active_params" if args.active else "params")
    model = _load(args.model, args)
    if args.chart == "flops-share":
        return flops_share_figure(model, args.seq, batch=args.batch)
    # as `symform memory --train` counts the same options: the framework's overheads and layout defaults
    name = framework_name(args)
    layout = with_defaults(name, Layout(data=args.dp, tensor=args.tp, zero=args.zero), sequence=args.sp)
    setup = Training(precision=args.precision, optimizer=args.optimizer, recompute=args.recompute, flash=uses_flash(args), layout=layout, framework=name)
    return memory_figure(model, args.gpu, args.batch, args.seq, setup=setup)


def _load(source: str, args: argparse.Namespace) -> Model:
    model = Model.load(source, conventions=dict(args.conventions), accounting=getattr(args, "accounting", None))
    return model.with_arguments(**dict(args.sizes)) if args.sizes else model
