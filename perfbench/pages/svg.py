"""Charts as inline SVG text: a forest plot (one row per estimate with its CI) and a trend chart (points over
commits). Each mark carries an SVG <title>, so a browser shows its value on hover with no script; every string
from data passes through html.escape here. The SVG scales to the page's width (viewBox, width 100%)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

GRID = "#e3e3e3"
AXIS = "#444"
TEXT = "#1d1d1f"
MUTED = "#666"
FONT = 'font-family="system-ui, sans-serif"'


def _num(x: float) -> str:
    """A coordinate with two decimals (enough at any zoom, and short: a 5,000-point page stays small)."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", colour: str = TEXT,
          weight: str = "normal") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" fill="{colour}" '
            f'font-weight="{weight}">{html.escape(text)}</text>')


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((high - first) / step + 1e-9) + 1)]


def tick_label(value: float) -> str:
    return f"{value:.4g}"


# ---- forest plot ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForestRow:
    """One estimate: `label` at the left, the point and its CI in the panel `panel`, coloured by its verdict."""

    label: str
    panel: str
    value: float
    low: float | None
    high: float | None
    colour: str
    hover: str  # the <title>: what a reader sees on hover


CHAR_WIDTH = 7.2  # px of a 12 px label character, a little over the average: a label never runs off the left
PANEL_WIDTH = 380
PANEL_GAP = 30
ROW_HEIGHT = 26
TOP = 46  # panel titles and the colour legend
BOTTOM = 40  # the axis and its caption


def _log_range(rows: Sequence[ForestRow]) -> tuple[float, float]:
    """The x range in log space: every CI and the no-change line at 1, with a margin."""
    values = [math.log(v) for r in rows for v in (r.value, r.low, r.high) if v is not None and v > 0]
    low, high = min([0.0, *values]), max([0.0, *values])
    span = max(high - low, math.log(1.1))
    return low - 0.06 * span, high + 0.06 * span


def forest_plot(rows: Sequence[ForestRow], panels: Sequence[str], legend: Sequence[tuple[str, str]],
                axis_caption: str) -> str:
    """Rows grouped by label (one line each), one panel per entry of `panels` side by side, all on one log
    axis around 1 (no change). `legend`: (colour, meaning) pairs drawn above the panels."""
    labels = list(dict.fromkeys(r.label for r in rows))
    label_width = round(max([12, *map(len, labels)]) * CHAR_WIDTH) + 12
    width = label_width + len(panels) * (PANEL_WIDTH + PANEL_GAP)
    height = TOP + ROW_HEIGHT * len(labels) + BOTTOM
    lo, hi = _log_range(rows)

    def x_of(panel: int, value: float) -> float:
        return label_width + panel * (PANEL_WIDTH + PANEL_GAP) + (math.log(value) - lo) / (hi - lo) * PANEL_WIDTH

    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px" '
           f'role="img" xmlns="http://www.w3.org/2000/svg" {FONT}>']
    x = 0.0
    for colour, meaning in legend:
        out.append(f'<rect x="{_num(x)}" y="2" width="12" height="12" fill="{html.escape(colour)}"/>')
        out.append(_text(x + 16, 12, meaning, size=11, colour=MUTED))
        x += 16 + 7 * len(meaning) + 18
    bottom = TOP + ROW_HEIGHT * len(labels)
    ticks = [t for t in nice_ticks(math.exp(lo), math.exp(hi), 6) if t > 0 and lo <= math.log(t) <= hi]
    for p, panel in enumerate(panels):
        left = label_width + p * (PANEL_WIDTH + PANEL_GAP)
        out.append(_text(left + PANEL_WIDTH / 2, TOP - 10, panel, anchor="middle", weight="600"))
        out.append(f'<rect x="{left}" y="{TOP}" width="{PANEL_WIDTH}" height="{bottom - TOP}" fill="none" '
                   f'stroke="{GRID}"/>')
        for t in ticks:
            tx = x_of(p, t)
            out.append(f'<line x1="{_num(tx)}" x2="{_num(tx)}" y1="{TOP}" y2="{bottom}" stroke="{GRID}"/>')
            out.append(_text(tx, bottom + 14, f"{tick_label(t)}x", size=10, anchor="middle", colour=MUTED))
        one = x_of(p, 1.0)
        out.append(f'<line x1="{_num(one)}" x2="{_num(one)}" y1="{TOP}" y2="{bottom}" stroke="{AXIS}"/>')
        out.append(_text(left + PANEL_WIDTH / 2, bottom + 30, axis_caption, size=10, anchor="middle",
                         colour=MUTED))
    for i, label in enumerate(labels):
        y = TOP + ROW_HEIGHT * i + ROW_HEIGHT / 2
        out.append(_text(label_width - 8, y + 4, label, anchor="end"))
    for r in rows:
        if r.panel not in panels or not (r.value > 0):
            continue
        p, y = panels.index(r.panel), TOP + ROW_HEIGHT * labels.index(r.label) + ROW_HEIGHT / 2
        mark = [f"<g><title>{html.escape(r.hover)}</title>"]
        if r.low is not None and r.high is not None and r.low > 0 and r.high > 0:
            x1, x2 = x_of(p, r.low), x_of(p, r.high)
            mark.append(f'<line x1="{_num(x1)}" x2="{_num(x2)}" y1="{_num(y)}" y2="{_num(y)}" '
                        f'stroke="{html.escape(r.colour)}" stroke-width="2"/>')
            mark += [f'<line x1="{_num(e)}" x2="{_num(e)}" y1="{_num(y - 5)}" y2="{_num(y + 5)}" '
                     f'stroke="{html.escape(r.colour)}" stroke-width="2"/>' for e in (x1, x2)]
        mark.append(f'<rect x="{_num(x_of(p, r.value) - 5)}" y="{_num(y - 5)}" width="10" height="10" '
                    f'fill="{html.escape(r.colour)}"/></g>')
        out.append("".join(mark))
    out.append("</svg>")
    return "".join(out)


# ---- trend chart ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrendPoint:
    """A point (or a thinned bucket of points) at commit position `x`; `low`/`high` its bar (a CI, or the
    bucket's range); `link`: where a click goes (None: nowhere)."""

    x: float
    value: float
    low: float | None
    high: float | None
    hover: str
    link: str | None = None


@dataclass(frozen=True)
class TrendMark:
    """A vertical dashed line between two commit positions (a change point) with its label."""

    x: float
    label: str
    colour: str
    hover: str


CHART_WIDTH = 900
CHART_HEIGHT = 210
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 18, 34


def trend_chart(points: Sequence[TrendPoint], marks: Sequence[TrendMark], *, y_caption: str,
                x_caption: str, reference: float | None, colour: str) -> str:
    """Points with their bars over commit positions, dashed lines at `marks`, a solid line at `reference`
    (1 for a speed-up) when given."""
    ys = [v for p in points for v in (p.value, p.low, p.high) if v is not None and math.isfinite(v)]
    ys += [reference] if reference is not None else []
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = max(y_hi - y_lo, abs(y_hi) * 0.02, 1e-9) * 0.08
    y_lo, y_hi = y_lo - pad, y_hi + pad
    xs = [p.x for p in points] + [m.x for m in marks]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    pad_x = max(0.5, 0.01 * (x_hi - x_lo))  # the first and last points clear the axes
    x_lo, x_hi = x_lo - pad_x, x_hi + pad_x
    plot_w = CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = CHART_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def sx(x: float) -> float:
        return MARGIN_LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return MARGIN_TOP + (y_hi - y) / (y_hi - y_lo) * plot_h

    out = [f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" width="100%" '
           f'style="max-width:{CHART_WIDTH}px" role="img" xmlns="http://www.w3.org/2000/svg" {FONT}>',
           f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
           f'stroke="{GRID}"/>']
    for t in nice_ticks(y_lo, y_hi, 4):
        ty = sy(t)
        out.append(f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{_num(ty)}" y2="{_num(ty)}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(MARGIN_LEFT - 4, ty + 4, tick_label(t), size=10, anchor="end", colour=MUTED))
    for t in nice_ticks(x_lo, x_hi, 8):
        if float(t).is_integer():  # commits are whole positions
            out.append(_text(sx(t), MARGIN_TOP + plot_h + 14, str(int(t)), size=10, anchor="middle",
                             colour=MUTED))
    out.append(_text(MARGIN_LEFT + plot_w / 2, CHART_HEIGHT - 4, x_caption, size=10, anchor="middle",
                     colour=MUTED))
    out.append(f'<text x="12" y="{_num(MARGIN_TOP + plot_h / 2)}" font-size="10" fill="{MUTED}" '
               f'text-anchor="middle" transform="rotate(-90 12 {_num(MARGIN_TOP + plot_h / 2)})">'
               f"{html.escape(y_caption)}</text>")
    if reference is not None:
        ry = sy(reference)
        out.append(f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{_num(ry)}" y2="{_num(ry)}" '
                   f'stroke="{AXIS}" stroke-width="0.8"/>')
    for m in marks:
        mx = sx(m.x)
        out.append(f'<g><title>{html.escape(m.hover)}</title><line x1="{_num(mx)}" x2="{_num(mx)}" '
                   f'y1="{MARGIN_TOP}" y2="{MARGIN_TOP + plot_h}" stroke="{html.escape(m.colour)}" '
                   f'stroke-dasharray="5 3" stroke-width="1.5"/>'
                   f"{_text(mx, MARGIN_TOP - 5, m.label, size=10, anchor='middle', colour=m.colour)}</g>")
    for p in points:
        px, py = sx(p.x), sy(p.value)
        bar = ""
        if p.low is not None and p.high is not None and math.isfinite(p.low) and math.isfinite(p.high):
            bar = (f'<line x1="{_num(px)}" x2="{_num(px)}" y1="{_num(sy(p.high))}" y2="{_num(sy(p.low))}" '
                   f'stroke="#999"/>')
        dot = f'<circle cx="{_num(px)}" cy="{_num(py)}" r="3.2" fill="{html.escape(colour)}"/>'
        body = f"<title>{html.escape(p.hover)}</title>{bar}{dot}"
        if p.link:
            out.append(f'<a href="{html.escape(p.link, quote=True)}">{body}</a>')
        else:
            out.append(f"<g>{body}</g>")
    out.append("</svg>")
    return "".join(out)
