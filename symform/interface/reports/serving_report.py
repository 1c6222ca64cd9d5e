"""``symform plan --serve``: the cheapest serving layouts under TTFT and TPOT targets, the throughput-latency
curve of the best one (``--curve``) and its chart (``--plot``)."""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING

from ..options.cli_args import fraction, positive_float, positive_int
from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from .memory_report import kv_dtype_argument, weight_format_name

if TYPE_CHECKING:  # the serving model (and numpy) load when a plan is asked for
    from ...analysis.serving.serving import Curve, Setup
    from ...analysis.serving.kv_pool import Lengths
    from ...analysis.plans.serving_planner import ServingPlan
    from ...analysis.plans.serving_planner import Targets

SERVE_ONLY = ("prompt", "output", "prompt_max", "output_max", "ttft_max", "tpot_max", "offline", "rate", "mode", "tp_max", "block_size", "token_budget", "memory_utilisation", "admit", "kv_link", "weight_format", "kv_dtype", "speculate", "acceptance", "draft", "curve", "plot", "price_per_hour", "energy")
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|us|µs)?\s*", re.IGNORECASE)


def duration(text: str) -> float:
    """Seconds from "0.2", "0.2s", "200ms" or "50us"."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; give seconds (0.2), or 200ms, 0.2s")
    value = float(match.group(1)) * {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}.get((match.group(2) or "s").lower(), 1.0)
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive duration")
    return value


def serve_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``symform plan --serve`` (--gpu, --node-size and --top are the plan verb's)."""
    g = p.add_argument_group("serving (--serve)")
    g.add_argument("--serve", action="store_true", help="plan serving instead of training: layouts that meet --ttft-max and --tpot-max")
    g.add_argument("--prompt", type=positive_int, help="prompt tokens per request (the mean with --prompt-max)")
    g.add_argument("--output", type=positive_int, help="output tokens per request (the mean with --output-max)")
    g.add_argument("--prompt-max", type=positive_int, help="the longest prompt (default: --prompt, fixed lengths)")
    g.add_argument("--output-max", type=positive_int, help="the longest output (default: --output)")
    g.add_argument("--ttft-max", type=duration, help="time-to-first-token target: 0.5, 500ms")
    g.add_argument("--tpot-max", type=duration, help="time-per-output-token target: 0.05, 50ms")
    g.add_argument("--offline", action="store_true", help="batch inference, no latency targets (instead of --ttft-max and --tpot-max): every layout saturated at the most requests its cache holds, ranked by output tokens/s per GPU")
    g.add_argument("--rate", type=positive_float, metavar="REQ/S", help="requests per second to serve: replicas and GPUs in all")
    g.add_argument("--mode", action="append", choices=("continuous", "chunked", "disaggregated"), help="scheduling to consider (repeatable; default all three)")
    g.add_argument("--tp-max", type=positive_int, help="the largest tensor degree to try (default: one node)")
    g.add_argument("--kv-block", "--block-size", dest="block_size", type=positive_int, help="paged KV cache block size in tokens (default: the engine's, hardware/efficiency/serving.toml; --block-size is the same flag)")
    g.add_argument("--token-budget", type=positive_int, help="chunked prefill: tokens per engine step (default: the engine's)")
    g.add_argument("--memory-utilisation", type=fraction, help="share of device memory the engine uses (default: the engine's)")
    g.add_argument("--admit", choices=("longest", "steady"), help="how many requests the cache takes: longest (every one at its longest, no preemption; the default) or steady (at mean occupancy, preempting when many are long at once)")
    g.add_argument("--kv-link", choices=("scale_out", "scale_up", "pcie"), help="disaggregation: the link the KV cache moves over (default scale_out)")
    g.add_argument("--weight-format", type=weight_format_name, help="stored weights (default: as the checkpoint says)")
    kv_dtype_argument(g)
    g.add_argument("--speculate", type=int, metavar="K", help="speculative decoding: K drafted tokens per target pass")
    g.add_argument("--acceptance", type=fraction, metavar="ALPHA", help="speculative decoding: each drafted token's acceptance rate")
    g.add_argument("--draft", metavar="MODEL", help="speculative decoding's drafter: a model (preset, Hub id, config), mtp (the model's multi-token-prediction module) or eagle (an EAGLE head); default: a free draft")
    g.add_argument("--curve", action="store_true", help="also print the best layout's throughput-latency curve and its knee")
    g.add_argument("--price-per-hour", type=positive_float, metavar="DOLLARS", help="price of one device-hour (yours: symform ships no prices): $ per million output tokens of each layout (docs/cost.md)")
    g.add_argument("--energy", action="store_true", help="energy per output token of each layout, at the device's TDP (an upper bound; docs/cost.md)")
    g.add_argument("--plot", metavar="PATH", help="draw each scheduling's best curve to PATH (.png or .svg; needs matplotlib)")


def serve_command(model: Model, args: argparse.Namespace) -> str:
    from ...analysis.plans.serving_planner import plan_serving

    targets = _targets(args)
    missing = [f"--{n.replace('_', '-')}" for n in ("prompt", "output") if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"plan --serve needs {', '.join(missing)}")
    for name in ("global_batch", "seq", "gpus", "memory", "sp"):
        if getattr(args, name, None) is not None:
            raise ConfigError(f"{'--sp/--no-sp' if name == 'sp' else '--' + name.replace('_', '-')} is a training option; drop it with --serve")
    lengths = _lengths(args)
    setup = _setup(model, args)
    plan = plan_serving(model, args.gpu, lengths, targets, setup=setup, modes=tuple(args.mode or ("continuous", "chunked", "disaggregated")), rate=args.rate, max_tensor=args.tp_max, top=args.top)
    curves = _curves(model, args.gpu, lengths, plan, setup) if (args.curve or args.plot) and plan.best else {}
    if args.plot and curves:
        from .plots import save

        save(serving_figure(list(curves.values()), chosen=plan.best[0].point, targets=None if targets.is_offline else (args.ttft_max, args.tpot_max)), args.plot)
    priced = _layout_costs(plan, args)
    if args.json:
        data = plan.as_dict()
        for layout, cost in zip(data["layouts"], priced):
            layout["cost_per_million_tokens"] = cost
        if curves:
            data["curves"] = {name: c.as_dict() for name, c in curves.items()}
        return json.dumps(data)
    text = plan_table(plan) + _cost_text(priced)
    if args.curve and curves:
        text += "\n\n" + curve_table(next(iter(curves.values())))
    if args.plot and curves:
        text += f"\n\nwrote {args.plot}"
    return text


def _targets(args: argparse.Namespace) -> Targets:
    """The latency targets the plan meets: both given, or --offline for none."""
    from ...analysis.plans.serving_planner import Targets

    given = [f"--{n.replace('_', '-')}" for n in ("ttft_max", "tpot_max") if getattr(args, n) is not None]
    if args.offline:
        if given:
            raise ConfigError(f"--offline plans with no latency target; drop {' and '.join(given)} or --offline")
        return Targets.offline()
    missing = [f"--{n.replace('_', '-')}" for n in ("ttft_max", "tpot_max") if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"plan --serve needs {', '.join(missing)} (or --offline for batch inference with no latency target)")
    return Targets(args.ttft_max, args.tpot_max)


def _layout_costs(plan: ServingPlan, args: argparse.Namespace) -> list[dict[str, object]]:
    """$ and energy per million output tokens of each layout, per GPU at its tokens/s per GPU (empty without --price-per-hour or --energy)."""
    if not (args.price_per_hour or args.energy):
        return []
    from ...analysis.devices import cost
    from ...analysis.time.step_model import placement

    tdp = placement(args.gpu, args.node_size).device.tdp_watts if args.energy else None
    return [cost.serving_cost(tokens_per_s=row.point.tokens_per_s_per_gpu, devices=1, price_per_hour=args.price_per_hour, tdp_watts=tdp) for row in plan.best]


def _cost_text(priced: list[dict[str, object]]) -> str:
    if not priced:
        return ""
    lines = ["cost of a million output tokens (per GPU, at each layout's tokens/s per GPU):"]
    for rank, found in enumerate(priced, 1):
        parts = [f"${found['dollars']:,.4g}"] if "dollars" in found else []
        parts += [f"{found['joules_per_token']:,.4g} J per token"] if "joules_per_token" in found else []
        lines.append(f"{rank:>2}  " + ", ".join(parts or ["no price or TDP to count"]))
    lines += [f"  assumed: {a}" for a in priced[0]["assumptions"]]
    return "\n" + "\n".join(lines)


def refuse_serving_options(args: argparse.Namespace) -> None:
    """Serving options given to a training plan: one line naming the first."""
    for name in SERVE_ONLY:
        if getattr(args, name, None) not in (None, False):
            raise ConfigError(f"--{name.replace('_', '-')} is a serving option; add --serve")


def _lengths(args: argparse.Namespace) -> Lengths:
    from ...analysis.serving.kv_pool import Lengths

    if args.prompt_max is None and args.output_max is None:
        return Lengths.fixed(args.prompt, args.output)
    return Lengths.spread(args.prompt, args.prompt_max or args.prompt, args.output, args.output_max or args.output)


def _setup(model: Model, args: argparse.Namespace) -> Setup:
    from ...analysis.serving.serving import Setup, check_same_vocabulary
    from ...analysis.serving.kv_pool import engine

    settings = engine(utilisation=args.memory_utilisation, block_tokens=args.block_size, token_budget=args.token_budget)
    draft = args.draft
    if draft not in (None, "mtp", "eagle"):
        draft = Model.load(draft)
        check_same_vocabulary(model, draft)
    if args.speculate is not None and args.speculate < 0:
        raise ConfigError(f"--speculate is {args.speculate}; give 0 or more drafted tokens")
    if (args.speculate is None) != (args.acceptance is None):
        raise ConfigError("speculative decoding needs both --speculate K and --acceptance ALPHA")
    if draft is not None and args.speculate is None:
        raise ConfigError("--draft needs --speculate K and --acceptance ALPHA")
    return Setup(settings=settings, weight_format=args.weight_format, kv_bytes=args.kv_dtype, node_size=args.node_size, kv_link=args.kv_link or "scale_out", admit=args.admit or "longest", k=args.speculate or 0, alpha=args.acceptance or 0.0, draft=draft)


def _curves(model: Model, gpu: str, lengths: Lengths, plan: ServingPlan, setup: Setup) -> dict[str, Curve]:
    """The best layout's curve first, then the best layout of each other scheduling."""
    from ...analysis.serving.serving import Replica

    chosen = {plan.best[0].mode: plan.best[0], **plan.best_by_mode}
    return {layout.name: Replica(model, gpu, lengths, layout.mode, layout.tensor, setup, layout.prefill_tensor).curve() for layout in chosen.values()}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def plan_table(plan: ServingPlan) -> str:
    lines = [
        f"serving layouts of {plan.model} on {plan.gpu}: {plan.lengths.describe()}; " + ("offline: no latency target, each layout saturated" if plan.targets.is_offline else f"TTFT ≤ {_ms(plan.targets.ttft_s)}, TPOT ≤ {_ms(plan.targets.tpot_s)}") + (f", {plan.rate:g} requests/s" if plan.rate else ""),
    ]
    if not plan.best:
        lines.append("no layout meets the targets:")
        lines += [f"  {k}: {v}" for k, v in plan.refused.items()]
        lines.append("loosen --ttft-max or --tpot-max, shorten the requests, or try another device")
        return "\n".join(lines)
    rate = plan.rate is not None
    lines.append(f"{'#':>2}  {'layout':<42} {'concurrency':>11} {'of':>5}  {'TTFT':>9}  {'TPOT':>9}  {'tokens/s':>9}  {'per GPU':>8}  {'GPUs':>5}" + ("  GPUs for rate" if rate else ""))
    for rank, row in enumerate(plan.best, 1):
        p = row.point
        lines.append(
            f"{rank:>2}  {row.name:<42} {p.concurrency:>11,} {row.largest:>5,}  {_ms(p.ttft_s):>9}  {_ms(p.tpot_s):>9}  {p.tokens_per_s:>9,.0f}  {p.tokens_per_s_per_gpu:>8,.0f}  {p.gpus:>5.2f}"
            + (f"  {row.gpus} ({row.replicas} decode" + (f" + {row.prefill_replicas} prefill" if row.prefill_replicas else "") + " replicas)" if rate else "")
        )
    best = plan.best[0]
    lines.append(f"best: {best.name} at {best.point.concurrency} requests in flight: {best.point.tokens_per_s_per_gpu:,.0f} output tokens/s per GPU, {best.point.tokens_per_s_per_user:,.1f} tokens/s per user")
    if best.mode == "disaggregated":
        lines.append(f"  {best.point.prefill_replicas_per_decode:.2f} prefill replicas (TP {best.prefill_tensor}) per decode replica; KV transfer {_ms(best.point.kv_transfer_s)} per request over {plan.assumptions['kv_link']}")
    lines += [f"note: {n}" for n in plan.notes]
    lines.append("evidence: " + "; ".join(plan.assumptions.get("evidence", [])))
    if plan.refused:
        lines.append(f"{len(plan.refused)} layouts refused (--json lists why)")
    lines.append("concurrency: requests in flight per decode replica (of: the most its paged cache admits, --admit); GPUs: per decode replica with its share of any prefill pool")
    return "\n".join(lines)


def curve_table(curve: Curve) -> str:
    pool = curve.pool
    lines = [
        f"throughput-latency curve: {curve.model}, {curve.mode}, TP {curve.tensor} on {curve.gpu}; {curve.lengths.describe()}",
        f"memory per device: {pool.usable_bytes / 2**30:.1f} GiB usable = weights {pool.weights_bytes / 2**30:.1f} + activations {pool.activations_bytes / 2**30:.2f}"
        + (f" + draft {pool.draft_bytes / 2**30:.1f}" if pool.draft_bytes else "")
        + f" + KV pool {pool.pool_bytes / 2**30:.1f} GiB; blocks of {pool.block_tokens} tokens, {pool.sequence_bytes_max / 2**20:.1f} MiB per longest sequence ({pool.fragmentation:.1%} in its last block's unused tail)",
        f"holds {pool.max_concurrency:,} sequences at their longest (no preemption), {pool.steady_concurrency:,} at mean occupancy",
        f"{'concurrency':>11}  {'TTFT':>9}  {'TPOT':>9}  {'tokens/s/user':>13}  {'tokens/s':>9}  {'per GPU':>8}",
    ]
    for i, p in enumerate(curve.points):
        mark = "  ← knee" if i == curve.knee else ""
        lines.append(f"{p.concurrency:>11,}  {_ms(p.ttft_s):>9}  {_ms(p.tpot_s):>9}  {p.tokens_per_s_per_user:>13,.1f}  {p.tokens_per_s:>9,.0f}  {p.tokens_per_s_per_gpu:>8,.0f}{mark}")
    lines.append("knee: the point farthest above the chord of the normalised curve (Kneedle); past it, more concurrency buys little throughput for much latency")
    if curve.speculation:
        s = curve.speculation
        lines.append(f"speculative decoding: k = {s.k}, α = {s.alpha:g}, {s.tokens_per_pass:.2f} tokens per target pass ({s.draft})")
    lines.append(f"evidence: {curve.assumptions['evidence']}")
    return "\n".join(lines)


# --- the chart -------------------------------------------------------------------------------------------

COLOURS = {"continuous": "#0072B2", "chunked": "#E69F00", "disaggregated": "#009E73"}


def serving_figure(curves: list[Curve], *, chosen=None, targets: tuple[float, float] | None = None):
    """Output tokens/s per GPU against TPOT, one line per curve, concurrencies labelled, knees circled, the target shaded off."""
    from .plots import _figure

    figure = _figure(figsize=(7.5, 4.8))
    axes = figure.add_subplot()
    for curve in curves:
        x = [p.tpot_s * 1e3 for p in curve.points]
        y = [p.tokens_per_s_per_gpu for p in curve.points]
        label = f"{curve.mode}, TP {curve.tensor}" + (f" (prefill TP {curve.assumptions['prefill_tensor']})" if curve.mode == "disaggregated" else "")
        axes.plot(x, y, marker="o", markersize=3, color=COLOURS.get(curve.mode), label=label)
        for p, xi, yi in zip(curve.points, x, y):
            axes.annotate(str(p.concurrency), (xi, yi), textcoords="offset points", xytext=(3, -9), fontsize=6, color=COLOURS.get(curve.mode))
        if curve.knee is not None:
            axes.plot([x[curve.knee]], [y[curve.knee]], marker="o", markersize=10, fillstyle="none", color=COLOURS.get(curve.mode))
    if targets:
        axes.axvline(targets[1] * 1e3, color="#999999", linestyle="--", linewidth=1, label=f"TPOT target {targets[1] * 1e3:g} ms")
    if chosen is not None:
        axes.plot([chosen.tpot_s * 1e3], [chosen.tokens_per_s_per_gpu], marker="*", markersize=14, color="#D55E00", linestyle="none", label="planner's choice")
    first = curves[0]
    axes.set_xlabel("TPOT (ms): time per output token, per request")
    axes.set_ylabel("output tokens/s per GPU")
    axes.set_title(f"{first.model} on {first.gpu}: {first.lengths.describe()}\n(numbers: requests in flight; circles: knees)", fontsize=9)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="lower right")
    return figure
