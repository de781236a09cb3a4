"""The crossover page (`perfbench crossover`): per phase, the measured speed-up along the axis with its CIs,
the roofline prior beside it, the threshold and the crossing's CI; the crossings and points as tables (and
CSV under report/)."""

from __future__ import annotations

from pathlib import Path

from perfbench.analysis.stats import CI_LEVEL
from perfbench.pages.page import Figure, Section, Text, write_page
from perfbench.pages.table import Column, Table
from perfbench.report.plots import curve_with_ci
from perfbench.run.crossover import CrossingRow, CrossoverSearch


def crossover_sections(search: CrossoverSearch, rows: list[CrossingRow],
                       prior: dict[str, dict[int, float]]) -> list[Section]:
    sections = []
    summary = Section("Crossings")
    summary.blocks.append(Text(
        f"Speed-up of {search.toggle} (time without / time with; > 1 faster) along {search.axis} in "
        f"[{search.lo}, {search.hi}], from paired in-process comparisons of the plan with and without it at each "
        "point (docs/crossover.md). A crossing's CI runs between the nearest measured points whose CI lies wholly "
        "on either side of the threshold; an open end means no such point was found before the range's end.",
        note=True))
    summary.blocks.append(Table("crossings", [
        Column("phase"), Column("threshold"), Column("text", "crossing")],
        [{"phase": r.phase, "threshold": r.crossing.threshold, "text": r.crossing.text} for r in rows]))
    if search.emulation:
        summary.blocks.append(Text(f"Emulation: {search.emulation}. These speed-ups are CPU timings of the NPU "
                                   "emulator, not NPU measurements."))
    sections.append(summary)
    for phase, by_x in search.points.items():
        section = Section(f"{phase}: speed-up along {search.axis}")
        xs = sorted(by_x)
        series = {phase: (xs, [by_x[x].value for x in xs], [by_x[x].low for x in xs], [by_x[x].high for x in xs])}
        prior_x = sorted(prior.get(phase, {}))
        priors = {phase: (prior_x, [prior[phase][x] for x in prior_x])} if prior_x else {}
        bands = [(r.crossing.low or search.lo, r.crossing.high or search.hi) for r in rows
                 if r.phase == phase and r.crossing.found]
        section.blocks.append(Figure(curve_with_ci(series, priors, search.thresholds, bands, search.axis,
                                                   f"speed-up ({CI_LEVEL:.0%} CI)", f"{search.toggle}: {phase}"),
                                     f"{phase} speed-up of {search.toggle} against {search.axis}; dashed: the "
                                     "roofline prior; grey: the crossings' CIs"))
        section.blocks.append(Table(f"crossover_{phase}", [
            Column("x", search.axis), Column("value", "speed-up", ci=("low", "high")), Column("prior", "roofline")],
            [{"x": x, "value": by_x[x].value, "low": by_x[x].low, "high": by_x[x].high,
              "prior": prior.get(phase, {}).get(x)} for x in xs]))
        sections.append(section)
    return sections


def write_crossover_page(out: Path, search: CrossoverSearch, rows: list[CrossingRow],
                         prior: dict[str, dict[int, float]]) -> Path:
    html = out / "crossover.html"
    write_page(html, out / "report", f"perfbench crossover: {search.toggle} over {search.axis}",
               f"{search.scenario}, {search.axis} {search.lo}-{search.hi}", crossover_sections(search, rows, prior))
    return html
