"""The trend page: a team's dashboard in one offline HTML file, rendered by the page shell the report uses
(perfbench/pages/page.py).

First the changes found, newest first: which plan (toggle), which metric, from what to what, between which two
commits (linked through `--commit-url`, e.g. https://github.com/ORG/REPO/commit/{sha}), on which machine. Then each
plan's speed-up series (what the product answers), then the medians, then any ab ratios. Each chart is inline SVG
(perfbench/pages/svg.py): a point's value, CI, commit and folder show on hover (an SVG <title>), and a click opens
its folder's report. Selects filter the list and the charts by scenario, machine, plan and family with a few lines
of inline script.

At thousands of folders the page stays small: a chart draws at most `MAX_DRAWN` marks (beyond that each mark is
the median of a run of consecutive commits, its bar their range, and the chart says so), its table lists the
newest `MAX_ROWS` points (the chart says how many more `history show` lists), and at most `MAX_SERIES` charts
are drawn (the page says how many were left out and how to narrow it).
"""

from __future__ import annotations

import html
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfbench.analysis.stats import CI_LEVEL
from perfbench.history.changes import CHANGE_FAMILIES, Change, series_changes
from perfbench.history.series import Series, SeriesPoint
from perfbench.pages.page import Section, Text, render_page
from perfbench.pages.svg import TrendMark, TrendPoint, trend_chart
from perfbench.results import atomic_write_text

FASTER, SLOWER, NEUTRAL = "#3a9a4a", "#c8413b", "#4e79a7"
MAX_DRAWN = 200  # marks per chart: about one per 4 px of its width
MAX_ROWS = 30  # points listed under a chart, newest first
MAX_SERIES = 300  # charts on one page
FAMILIES = {"speedup": "Speed-ups", "median": "Medians", "ab": "ab ratios (head / base)"}
FILTERS = (("scenario", "scenario"), ("machine", "machine_key"), ("plan", "plan"), ("family", "family"))

SCRIPT = """
(function () {
  var selects = Array.prototype.slice.call(document.querySelectorAll('select[data-filter]'));
  function apply() {
    var shown = 0;
    document.querySelectorAll('[data-family]').forEach(function (el) {
      var keep = selects.every(function (f) { return f.value === '' || el.dataset[f.dataset.filter] === f.value; });
      el.style.display = keep ? '' : 'none';
      if (keep && el.classList.contains('series')) { shown += 1; }
    });
    document.getElementById('shown').textContent = shown;
  }
  selects.forEach(function (f) { f.addEventListener('change', apply); });
  apply();
})();
"""
STYLE = """
div.series { border-top: 1px solid #e3e3e3; padding: 0.4rem 0 0.8rem; }
p.change { color: #c8413b; font-weight: 600; margin: 0.2rem 0; }
td.faster { color: #3a9a4a; font-weight: 600; } td.slower { color: #c8413b; font-weight: 600; }
.filters label { margin-right: 1rem; }
"""


def folder_link(point: SeriesPoint) -> str:
    folder = Path(point.folder)
    report = folder / "report.html"
    return (report if report.is_file() else folder).as_uri()


def commit_link(sha: str | None, template: str | None) -> str | None:
    return template.replace("{sha}", sha) if template and sha else None


def _sha_html(sha: str | None, template: str | None, dirty: bool | None = None) -> str:
    text = html.escape((sha or "-")[:10] + ("+" if dirty else ""))
    link = commit_link(sha, template)
    return f'<a href="{html.escape(link, quote=True)}">{text}</a>' if link else text


def _data_attrs(series: Series) -> str:
    return " ".join(f'data-{name}="{html.escape(str(getattr(series.key, attr)), quote=True)}"'
                    for name, attr in FILTERS)


def _unit(series: Series) -> str:
    return "x" if series.key.family in ("speedup", "ab") else " ms"


def _metric(series: Series) -> str:
    metric = series.key.metric
    return metric.replace("_ms", "").upper() if metric in ("ttft_ms", "tpot_ms") else metric


def _p_text(p: float) -> str:
    return f"{p:.1g}" if p >= 1e-6 else "<1e-6"  # a p of 0.0 (underflow) reads as what it means


# ---- the list of changes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoundChange:
    """A change point and the chart (anchor) of its series."""

    change: Change
    series: Series
    anchor: str


@dataclass(frozen=True)
class ChangesTable:
    """The changes, newest first, one row each; every string escaped here."""

    found: Sequence[FoundChange]
    template: str | None

    def html(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("after commit", "plan", "metric", "what", "from", "to", "change",
                                                  "between", "machine", "scenario", "p"))
        rows = []
        for item in self.found:
            c, s = item.change, item.series
            unit = _unit(s)
            direction = "slower" if (c.after < c.before) == (s.key.family in ("speedup", "ab")) else "faster"
            what = {"speedup": "speed-up", "median": "median", "ab": "head/base"}.get(s.key.family, s.key.family)
            between = (f"{_sha_html(c.sha_before, self.template)} &rarr; {_sha_html(c.sha_after, self.template)}"
                       f' (<a href="#{item.anchor}">chart</a>)')
            rows.append(
                f"<tr {_data_attrs(s)}><td class=\"num\">{c.order_after}</td><td>{html.escape(s.key.plan)}</td>"
                f"<td>{html.escape(_metric(s))}</td><td>{what}</td>"
                f'<td class="num">{c.before:.3f}{unit}</td><td class="num">{c.after:.3f}{unit}</td>'
                f'<td class="num {direction}">{c.size:+.1%} {direction}</td><td>{between}</td>'
                f"<td>{html.escape(s.key.machine_key)}</td><td>{html.escape(s.key.scenario)}</td>"
                f'<td class="num">{_p_text(c.p_value)}</td></tr>')
        return (f'<div class="table-wrap"><table id="t-changes"><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(rows)}</tbody></table></div>\n")


@dataclass(frozen=True)
class Filters:
    """The selects that filter the list and the charts, and the count of charts shown."""

    series: Sequence[Series]

    def html(self) -> str:
        out = []
        for name, attr in FILTERS:
            values = sorted({str(getattr(s.key, attr)) for s in self.series})
            options = "".join(f'<option value="{html.escape(v, quote=True)}">{html.escape(v)}</option>'
                              for v in values)
            out.append(f'<label>{name} <select data-filter="{name}"><option value="">all</option>{options}'
                       "</select></label>")
        return (f'<p class="filters">{"".join(out)} <span id="shown">{len(self.series)}</span> of '
                f"{len(self.series)} charts shown.</p>\n")


# ---- one series ---------------------------------------------------------------------------------------------


def _hover(series: Series, p: SeriesPoint) -> str:
    ci = f", {CI_LEVEL:.0%} CI [{p.low:.3f}, {p.high:.3f}]" if p.low is not None and p.high is not None else ""
    sha = (p.sha or "-")[:10] + ("+" if p.dirty else "")
    return f"commit {p.commit_order} {sha}: {p.value:.3f}{_unit(series)}{ci}, {p.verdict} · {p.folder}"


def thinned(series: Series, points: Sequence[SeriesPoint], limit: int = MAX_DRAWN) -> list[TrendPoint]:
    """Every point when they fit, else `limit` runs of consecutive points, each drawn at its median with a bar
    over its range (a step stays visible: a run never averages it away, it widens the bar)."""
    if len(points) <= limit:
        return [TrendPoint(float(p.commit_order or 0), p.value, p.low, p.high, _hover(series, p), folder_link(p))
                for p in points]
    out = []
    for i in range(limit):
        run = points[i * len(points) // limit:(i + 1) * len(points) // limit]
        values = [p.value for p in run]
        first, last = run[0], run[-1]
        hover = (f"commits {first.commit_order}-{last.commit_order} ({(first.sha or '-')[:10]}.."
                 f"{(last.sha or '-')[:10]}): {len(run)} points, median {statistics.median(values):.3f}"
                 f"{_unit(series)}, range {min(values):.3f}-{max(values):.3f}")
        out.append(TrendPoint(statistics.median(float(p.commit_order or 0) for p in run),
                              statistics.median(values), min(values), max(values), hover))
    return out


def _marks(series: Series, changes: Sequence[Change]) -> list[TrendMark]:
    out = []
    for c in changes:
        worse = (c.after < c.before) == (series.key.family in ("speedup", "ab"))
        out.append(TrendMark((c.order_before + c.order_after) / 2, f"{c.size:+.1%}", SLOWER if worse else FASTER,
                             c.line()))
    return out


@dataclass(frozen=True)
class SeriesChart:
    """One series: its title, its changes, the chart and the newest points as a table."""

    series: Series
    changes: Sequence[Change]
    anchor: str
    template: str | None

    def html(self) -> str:
        s, key = self.series, self.series.key
        ordered = s.ordered
        words = []
        if ordered:
            drawn = thinned(s, ordered)
            chart = trend_chart(drawn, _marks(s, self.changes), y_caption={
                "speedup": "speed-up (x)", "median": "ms", "ab": "head / base"}.get(key.family, key.metric),
                x_caption="commit (first-parent order)", reference=1.0 if key.family in ("speedup", "ab") else None,
                colour=NEUTRAL)
            if len(drawn) < len(ordered):
                words.append(f"{len(ordered):,} points thinned to {len(drawn)} marks: each is the median of a run "
                             "of consecutive commits, its bar their range (hover for which)")
            else:
                words.append(f"bars: {CI_LEVEL:.0%} CIs; hover a point for its value, click for its folder")
        else:
            chart = "<p>No point on first-parent history.</p>"
        listed = sorted(s.points, key=lambda p: (p.commit_order is not None, p.commit_order or 0, p.recorded_at),
                        reverse=True)[:MAX_ROWS]
        if len(s.points) > len(listed):
            words.append(f"the table lists the newest {len(listed)} of {len(s.points):,} points; `perfbench "
                         f"history show --family {shlex.quote(key.family)} --plan {shlex.quote(key.plan)} "
                         f"--metric {shlex.quote(key.metric)}` lists all")
        changed = "".join(f'<p class="change">{html.escape(c.line())}</p>' for c in self.changes)
        rows = "".join(self._row(p) for p in listed)
        return (f'<div class="series" id="{self.anchor}" {_data_attrs(s)}><h3>{html.escape(key.label())}</h3>'
                f'<p class="note">{html.escape(key.software_key)} · {html.escape(key.shape)}</p>{changed}'
                f'<figure class="svg">{chart}<figcaption>{html.escape("; ".join(words))}</figcaption></figure>'
                f"<details><summary>{len(listed)} newest point{'s' * (len(listed) != 1)}</summary>"
                "<table><thead><tr><th>commit</th><th>sha</th><th>value</th>"
                f"<th>{CI_LEVEL:.0%} CI</th><th>verdict</th><th>folder</th></tr></thead><tbody>{rows}</tbody>"
                "</table></details></div>\n")

    def _row(self, p: SeriesPoint) -> str:
        ci = f"[{p.low:.3f}, {p.high:.3f}]" if p.low is not None and p.high is not None else ""
        order = p.commit_order if p.commit_order is not None else "one-off"
        return (f"<tr><td>{order}</td><td>{_sha_html(p.sha, self.template, p.dirty)}</td>"
                f'<td class="num">{p.value:.3f}</td><td>{ci}</td><td>{html.escape(p.verdict)}</td>'
                f'<td><a href="{html.escape(folder_link(p), quote=True)}">{html.escape(p.folder)}</a></td></tr>')


# ---- the page -----------------------------------------------------------------------------------------------


def since(found: Sequence[Series], since_order: int | None) -> list[Series]:
    """The series cut to commits from `since_order` on (one-offs left out); a series left empty goes."""
    if since_order is None:
        return list(found)
    cut = [Series(key=s.key, points=[p for p in s.points if p.commit_order is not None
                                     and p.commit_order >= since_order]) for s in found]
    return [s for s in cut if s.points]


def find_changes(found: Sequence[Series], min_magnitude: float) -> dict[int, list[Change]]:
    """Index of a series in `found` -> its change points (series of a family without change points left out)."""
    return {i: changes for i, s in enumerate(found) if s.key.family in CHANGE_FAMILIES
            and (changes := series_changes(s, min_magnitude))}


def render(found: Sequence[Series], changes: dict[int, list[Change]], min_magnitude: float,
           template: str | None, since_ref: str | None = None) -> str:
    """The page of `found` (series of every family; those of FAMILIES are drawn) with `changes` (find_changes)."""
    shown = [(i, s) for i, s in enumerate(found) if s.key.family in FAMILIES]
    anchors = {i: f"s{n}" for n, (i, _) in enumerate(shown)}
    # the charts kept under the cap: series with a change first, then those measured most recently
    ranked = sorted(shown, key=lambda item: (item[0] not in changes,
                                             -max((p.commit_order or -1) for p in item[1].points)))
    kept = {i for i, _ in ranked[:MAX_SERIES]}
    listed = sorted((FoundChange(c, found[i], anchors[i]) for i, cs in changes.items() if i in anchors for c in cs),
                    key=lambda f: (-f.change.order_after, -abs(f.change.size)))
    head = Section("Changes found")
    head.blocks.append(Filters([s for i, s in shown if i in kept]))
    if listed:
        head.blocks.append(ChangesTable(listed, template))
    else:
        head.blocks.append(Text(f"No change of {min_magnitude:.0%} or more in {len(shown)} series.", note=True))
    head.blocks.append(Text(
        f"Newest first. A change is a step of {min_magnitude:.0%} or more between two commits that a test on the "
        "points' CIs confirms (docs/history.md); a series never mixes machines, software or emulation.", note=True))
    if len(kept) < len(shown):
        head.blocks.append(Text(
            f"{len(shown) - len(kept)} of {len(shown)} series are not drawn (at most {MAX_SERIES} charts per page: "
            "those with a change first, then the most recently measured); narrow the page with --machine, "
            "--scenario, --plan, --family or --since.", note=True))
    sections = [head]
    for family, title in FAMILIES.items():
        section = Section(title)
        section.blocks += [SeriesChart(s, changes.get(i, []), anchors[i], template) for i, s in shown
                           if s.key.family == family and i in kept]
        if section.blocks:
            sections.append(section)
    points = sum(len(s.points) for _, s in shown)
    subtitle = (f"{len(shown)} series, {points:,} points" + (f", commits from {since_ref} on" if since_ref else "")
                + f"; dashed lines: change points of {min_magnitude:.0%} or more")
    return render_page("perfbench history", subtitle, sections, script=SCRIPT, style=STYLE)


def write_page(found: list[Series], out: Path, min_magnitude: float, template: str | None,
               since_order: int | None = None, since_ref: str | None = None) -> Path:
    cut = since(found, since_order)
    atomic_write_text(out, render(cut, find_changes(cut, min_magnitude), min_magnitude, template, since_ref))
    return out
