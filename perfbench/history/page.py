"""The trend page: one offline HTML file, every series with its CIs and change points, filters, links.

Each series is a matplotlib figure inlined as SVG (no remote resource, no script library): points with their 95%
CIs over first-parent commit order, a dashed line at each change point with its size. Each point links to its
result folder's report (or the folder), and the table under the figure links each commit (through
`--commit-url`, e.g. https://github.com/ORG/REPO/commit/{sha}) and folder. Selects filter the series by scenario,
machine and plan, client-side, with a few lines of inline script.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from perfbench.analysis.stats import CI_LEVEL
from perfbench.history.changes import Change, series_changes
from perfbench.history.series import Series, SeriesPoint
from perfbench.results import atomic_write_text

FASTER, SLOWER, NEUTRAL = "#3a9a4a", "#c8413b", "#4e79a7"
SCRIPT = """
const selects = [...document.querySelectorAll('select[data-filter]')];
function applyFilters() {
  for (const s of document.querySelectorAll('section.series')) {
    const shown = selects.every(f => f.value === '' || s.dataset[f.dataset.filter] === f.value);
    s.style.display = shown ? '' : 'none';
  }
  document.getElementById('shown').textContent =
    document.querySelectorAll('section.series:not([style*="none"])').length;
}
selects.forEach(f => f.addEventListener('change', applyFilters));
applyFilters();
"""
STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222} section.series{border-top:1px solid #ccc;padding:.5em 0}
table{border-collapse:collapse;font-size:.85em} td,th{padding:.15em .6em;text-align:left}
tr:nth-child(even){background:#f4f4f4} .change{color:#c8413b;font-weight:bold} details{margin:.3em 0}
"""


def folder_link(point: SeriesPoint) -> str:
    folder = Path(point.folder)
    report = folder / "report.html"
    return (report if report.is_file() else folder).as_uri()


def commit_link(point: SeriesPoint, template: str | None) -> str | None:
    return template.replace("{sha}", point.sha) if template and point.sha else None


def series_svg(series: Series, changes: list[Change]) -> str:
    points = series.ordered
    fig = Figure(figsize=(9, 2.6))
    ax = fig.subplots()
    xs = [p.commit_order for p in points if p.commit_order is not None]  # all of them: `ordered` keeps only these
    ys = [p.value for p in points]
    lows = [p.value - p.low if p.low is not None else 0.0 for p in points]
    highs = [p.high - p.value if p.high is not None else 0.0 for p in points]
    ax.errorbar(xs, ys, yerr=[lows, highs], fmt="none", ecolor="#999", elinewidth=1, capsize=2)
    dots = ax.scatter(xs, ys, s=18, color=NEUTRAL, zorder=3)
    dots.set_urls([folder_link(p) for p in points])  # the SVG wraps each dot in a link
    for change in changes:
        x = (change.order_before + change.order_after) / 2
        ax.axvline(x, color=SLOWER if change.after < change.before else FASTER, ls="--", lw=1)
        ax.annotate(f"{change.size:+.1%}", (x, 1), xycoords=("data", "axes fraction"), fontsize=8,
                    ha="center", va="bottom")
    if series.key.family == "speedup":
        ax.axhline(1.0, color="black", lw=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # commits are whole positions
    ax.set_xlabel("commit (first-parent order)")
    ax.set_ylabel({"speedup": "speed-up (x)", "median": "ms"}.get(series.key.family, series.key.metric))
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "perfbench", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # inline: no XML prolog or doctype


def _rows(series: Series, template: str | None) -> str:
    out = []
    for p in series.points:
        sha = html.escape((p.sha or "-")[:10] + ("+" if p.dirty else ""))
        link = commit_link(p, template)
        sha_cell = f'<a href="{html.escape(link)}">{sha}</a>' if link else sha
        ci = f"[{p.low:.3f}, {p.high:.3f}]" if p.low is not None and p.high is not None else ""
        order = p.commit_order if p.commit_order is not None else "one-off"
        out.append(f"<tr><td>{order}</td><td>{sha_cell}</td><td>{p.value:.3f}</td><td>{ci}</td>"
                   f"<td>{html.escape(p.verdict)}</td><td><a href=\"{html.escape(folder_link(p))}\">"
                   f"{html.escape(p.folder)}</a></td></tr>")
    return "".join(out)


def _section(series: Series, changes: list[Change], template: str | None) -> str:
    key = series.key
    attrs = " ".join(f'data-{name}="{html.escape(value, quote=True)}"' for name, value in (
        ("scenario", key.scenario), ("machine", key.machine_key), ("plan", key.plan), ("family", key.family)))
    changed = "".join(f'<p class="change">{html.escape(c.line())} · {html.escape(c.where())}</p>' for c in changes)
    figure = series_svg(series, changes) if series.ordered else "<p>No point on first-parent history.</p>"
    return (f'<section class="series" {attrs}><h3>{html.escape(key.label())}</h3>'
            f"<p>{html.escape(key.software_key)} · {html.escape(key.shape)}</p>{changed}{figure}"
            f"<details><summary>{len(series.points)} point{'s' * (len(series.points) != 1)}</summary>"
            "<table><tr><th>commit</th><th>sha</th>"
            f"<th>value</th><th>{CI_LEVEL:.0%} CI</th><th>verdict</th><th>folder</th></tr>{_rows(series, template)}"
            "</table></details></section>")


def _select(name: str, values: set[str]) -> str:
    options = "".join(f'<option value="{html.escape(v, quote=True)}">{html.escape(v)}</option>'
                      for v in sorted(values))
    return f'<label>{name} <select data-filter="{name}"><option value="">all</option>{options}</select></label> '


def render(found: list[Series], min_magnitude: float, template: str | None) -> str:
    shown = [s for s in found if s.key.family in ("speedup", "median")]
    sections = "".join(_section(s, series_changes(s, min_magnitude), template) for s in shown)
    filters = "".join(_select(name, {getattr(s.key, attr) for s in shown}) for name, attr in (
        ("scenario", "scenario"), ("machine", "machine_key"), ("plan", "plan"), ("family", "family")))
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>perfbench history</title>"
            f"<style>{STYLE}</style></head><body><h1>perfbench history</h1>"
            f"<p>{filters}<span id=\"shown\">{len(shown)}</span> of {len(shown)} series shown. A series never "
            "mixes machines, software or emulation; dashed lines: change points of "
            f"{min_magnitude:.0%} or more.</p>{sections}<script>{SCRIPT}</script></body></html>")


def write_page(found: list[Series], out: Path, min_magnitude: float, template: str | None) -> Path:
    atomic_write_text(out, render(found, min_magnitude, template))
    return out
