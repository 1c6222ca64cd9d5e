"""Roofline charts (PNG or SVG) with the work placed on them; matplotlib is an optional extra."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from ...engine.errors import SymformError
from ..options.output import writing
from ...analysis.time.roofline import PhaseRoofline, Roofline

FORMATS = (".png", ".svg")


# What the `plot` extra installs, named so that the advice works from a clone and from a package index alike
INSTALL_HINT = "pip install matplotlib"


class PlotDependencyError(SymformError):
    """Charts need matplotlib, which symform does not install by default."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotDependencyError(f"charts need matplotlib: {INSTALL_HINT}") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def roofline_chart(
    result: PhaseRoofline,
    path: str | Path,
    *,
    extra: Mapping[str, Roofline] | None = None,
) -> Path:
    """Draw the device's roofline with the phase, its components and any ``extra`` work on it; PNG or SVG by suffix."""
    points = {
        f"{result.phase} (total)": result.total,
        **result.components,
        **(extra or {}),
    }
    title = f"{result.model}, {result.phase} on {result.device} ({result.dtype})"
    return chart(points, path, title=title, highlight=f"{result.phase} (total)")


def check_chart_path(path: str | Path) -> Path:
    target = Path(path)
    if target.suffix.lower() not in FORMATS:
        raise SymformError(
            f"{target}: a chart is written as .png or .svg, not {target.suffix or 'a file without a suffix'}"
        )
    return target


def chart(
    points: Mapping[str, Roofline],
    path: str | Path,
    *,
    title: str,
    highlight: str | None = None,
) -> Path:
    """A log-log roofline: attainable FLOP/s against FLOP/byte, one labelled marker per piece of work."""
    target = check_chart_path(path)
    placed = {
        label: r for label, r in points.items() if r.intensity is not None and r.flops
    }
    left_out = len(points) - len(
        placed
    )  # no FLOPs (norms, lookups): no point on a log axis
    if not placed:
        raise SymformError(
            "nothing to place on the chart: every piece of work has zero FLOPs or zero bytes"
        )
    plt = _pyplot()
    first = next(iter(placed.values()))
    peak, bandwidth = float(first.peak_flops_per_s), float(first.bytes_per_s)
    figure, axes = plt.subplots(figsize=(10, 6.5), dpi=120)
    low, high = _span(
        [float(r.intensity) for r in placed.values()], ridge=peak / bandwidth
    )
    _draw_roof(axes, peak, bandwidth, low, high)
    for index, (label, r) in enumerate(placed.items()):
        _place(axes, label, r, index, emphasised=label == highlight)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(
        _floor_decade(
            min(
                min(bandwidth * low, peak),
                *(r.attainable_flops_per_s for r in placed.values()),
            )
            / 1e12
        )
        * 1e12
        / 2,
        peak * 3,
    )
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("attainable performance (FLOP/s)")
    axes.set_title(title)
    if left_out:
        axes.text(
            0.01,
            0.01,
            f"not shown: {left_out} component(s) with no FLOPs (memory traffic only)",
            transform=axes.transAxes,
            fontsize=7,
            color="grey",
        )
    axes.grid(True, which="both", linestyle=":", linewidth=0.5)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    try:
        with writing(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(target)
    finally:
        plt.close(figure)
    return target


def _span(intensities: list[float], *, ridge: float) -> tuple[float, float]:
    """x range in whole decades around the points and the ridge, with room for labels."""
    low = min(min(intensities), ridge) / 3
    high = max(max(intensities), ridge) * 10
    return 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))


def _floor_decade(value: float) -> float:
    return 10 ** math.floor(math.log10(value))


def _draw_roof(axes, peak: float, bandwidth: float, low: float, high: float) -> None:
    ridge = peak / bandwidth
    axes.plot(
        [low, ridge, high],
        [bandwidth * low, peak, peak],
        color="black",
        linewidth=2,
        label=f"roof: min({peak / 1e12:.4g} TFLOP/s, {bandwidth / 1e12:.3g} TB/s × intensity)",
    )
    axes.axvline(
        ridge,
        color="grey",
        linestyle="--",
        linewidth=1,
        label=f"ridge point {ridge:.1f} FLOP/byte",
    )
    axes.text(low * 1.3, peak * 1.25, "compute roof", fontsize=8)


_MARKERS = "os^Dv<>PXph"
# around the marker, so that neighbours' numbers differ in place
_OFFSETS = ((6, 6), (6, -12), (-14, 6), (-14, -12))


def _place(axes, label: str, r: Roofline, index: int, *, emphasised: bool) -> None:
    """A marker numbered on the chart; the legend pairs the number with the label, bound and intensity."""
    x, y = float(r.intensity), r.attainable_flops_per_s
    number = str(index + 1)
    marker = "*" if emphasised else _MARKERS[index % len(_MARKERS)]
    legend = f"{number}. {label}: {x:.3g} FLOP/byte, {r.bound}-bound"
    axes.scatter(
        [x],
        [y],
        s=150 if emphasised else 45,
        marker=marker,
        zorder=3,
        alpha=0.85,
        label=legend,
    )
    axes.annotate(
        number,
        (x, y),
        textcoords="offset points",
        xytext=_OFFSETS[index % len(_OFFSETS)],
        fontsize=8,
        weight="bold",
    )
