"""Report figures as base64 PNG (matplotlib's Agg canvas through `Figure`, so no GUI backend and no pyplot
global state)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from perfbench.analysis.stats import CI_LEVEL

FASTER = "#3a9a4a"
SLOWER = "#c8413b"
NEUTRAL = "#5b7db8"
# Enough distinct colours for the categories of a trace table; cycled beyond that.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#8c564b")


def png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def speedup_bars(labels: Sequence[str], speedups: Sequence[float], ci_low: Sequence[float | None],
                 ci_high: Sequence[float | None], title: str) -> str:
    """Horizontal bars of speed-up factors around 1 (no change), CI as error bars where known."""
    fig = Figure(figsize=(7.5, 0.45 * len(labels) + 1.3))
    ax = fig.subplots()
    ys = range(len(labels))
    colours = [FASTER if s >= 1 else SLOWER for s in speedups]
    ax.barh(list(ys), [s - 1 for s in speedups], left=1, color=colours)
    for y, s, lo, hi in zip(ys, speedups, ci_low, ci_high):
        if lo is not None and hi is not None:
            ax.errorbar(s, y, xerr=[[max(s - lo, 0)], [max(hi - s, 0)]], color="black", capsize=4, lw=1)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"speed-up (time without / time with), {CI_LEVEL:.0%} CI")
    ax.set_title(title, fontsize=10)
    return png_base64(fig)


def waterfall(start_label: str, start_value: float, steps: Sequence[tuple[str, float]], unit: str,
              title: str) -> str:
    """Classic waterfall: the baseline bar, one floating bar per addition (from value before to value after),
    then the final value."""
    fig = Figure(figsize=(max(6.0, 1.0 * (len(steps) + 2)), 4.2))
    ax = fig.subplots()
    labels = [start_label]
    ax.bar(0, start_value, color=NEUTRAL)
    ax.annotate(f"{start_value:.4g}", (0, start_value), ha="center", va="bottom", fontsize=8)
    before = start_value
    for i, (label, after) in enumerate(steps, start=1):
        ax.bar(i, after - before, bottom=before, color=FASTER if after <= before else SLOWER)
        ax.plot([i - 1.4, i + 0.4], [before, before], color="#999", lw=0.6)
        ax.annotate(f"{before / after:.3f}x", (i, max(before, after)), ha="center", va="bottom", fontsize=8)
        labels.append("+" + label)
        before = after
    ax.bar(len(steps) + 1, before, color=NEUTRAL)
    ax.annotate(f"{before:.4g}", (len(steps) + 1, before), ha="center", va="bottom", fontsize=8)
    labels.append("all on")
    ax.set_ylim(0, 1.12 * max(start_value, *(value for _, value in steps)))
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    return png_base64(fig)


def stacked_bars(bars: Sequence[str], stacks: Sequence[str], values: dict[tuple[str, str], float], unit: str,
                 title: str) -> str:
    """One bar per entry of `bars`, stacked by `stacks`; values keyed (bar, stack), missing = 0."""
    fig = Figure(figsize=(max(6.0, 0.8 * len(bars) + 3.5), 4.5))
    ax = fig.subplots()
    bottoms = [0.0] * len(bars)
    for i, stack in enumerate(stacks):
        heights = [values.get((bar, stack), 0.0) for bar in bars]
        ax.bar(range(len(bars)), heights, bottom=bottoms, label=stack, color=PALETTE[i % len(PALETTE)])
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(bars)), bars, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png_base64(fig)


def curve_with_ci(series: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]],
                  priors: Mapping[str, tuple[Sequence[float], Sequence[float]]], hlines: Sequence[float],
                  bands: Sequence[tuple[float, float]], xlabel: str, ylabel: str, title: str,
                  log_x: bool = True) -> str:
    """Measured curves (name -> x, value, ci low, ci high) as points with CI bars and lines, dashed prior
    curves (name -> x, value), horizontal reference lines (a threshold) and shaded x bands (a crossing's CI)."""
    fig = Figure(figsize=(7.5, 4.4))
    ax = fig.subplots()
    for i, (name, (xs, ys, lows, highs)) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        ax.errorbar(list(xs), list(ys), yerr=[[max(y - lo, 0) for y, lo in zip(ys, lows)],
                                              [max(hi - y, 0) for y, hi in zip(ys, highs)]],
                    color=colour, marker="o", ms=4, capsize=3, lw=1, label=name)
        if name in priors:
            px, py = priors[name]
            ax.plot(list(px), list(py), color=colour, ls="--", lw=1, label=f"{name} (roofline prior)")
    for y in hlines:
        ax.axhline(y, color="black", lw=0.7)
    for low, high in bands:
        ax.axvspan(low, high, color="#999", alpha=0.2)
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return png_base64(fig)


def scatter_frontier(points: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[str]]],
                     frontier: tuple[Sequence[float], Sequence[float]], xlabel: str, ylabel: str, title: str) -> str:
    """Labelled points per series (name -> x, y, labels) and the Pareto frontier as a step line."""
    fig = Figure(figsize=(7.5, 4.6))
    ax = fig.subplots()
    for i, (name, (xs, ys, labels)) in enumerate(points.items()):
        ax.scatter(list(xs), list(ys), color=PALETTE[i % len(PALETTE)], label=name, s=18)
        for x, y, label in zip(xs, ys, labels):
            ax.annotate(label, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    fx, fy = frontier
    if len(fx):
        ax.plot(list(fx), list(fy), color="black", lw=0.8, ls="--", label="Pareto frontier")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return png_base64(fig)
