"""The report's first picture: every single-toggle speed-up over the baseline (TTFT and TPOT) with its CI, coloured
by its verdict, as an inline SVG forest plot. A plan that adds one toggle to the baseline answers "what does this
toggle buy"; when the sweep has no such plan (a leave-one-out design), every plan is drawn. Only plans of the
baseline's workload shape are drawn."""

from __future__ import annotations

from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.speedup import FASTER, INCONCLUSIVE, SAME, SLOWER, UNSTABLE, Speedup, plan_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.pages.page import Section, Svg, Text
from perfbench.pages.svg import ForestRow, forest_plot
from perfbench.results import RunResult

VERDICT_COLOURS = {FASTER: "#3a9a4a", SLOWER: "#c8413b", SAME: "#5b7db8", INCONCLUSIVE: "#d9a21b",
                   UNSTABLE: "#9b59b6"}
OTHER_COLOUR = "#888"
PANELS = {"ttft_ms": "TTFT (prefill)", "tpot_ms": "TPOT (decode)"}
TITLE = "Speed-ups"


def _label(run: RunResult, base: RunResult, single: bool) -> str:
    if not single:
        return plan_label(run)
    (added,) = set(run.ran_on()) - set(base.ran_on())
    return f"+{TOGGLE_ABBREV.get(added, added)} ({added})" if added in TOGGLE_ABBREV else f"+{added}"


def _row(label: str, key: str, gain: Speedup) -> ForestRow:
    hover = (f"{label}, {PANELS[key]}: {gain.value:.3f}x, {CI_LEVEL:.0%} CI [{gain.low:.3f}, {gain.high:.3f}], "
             f"{gain.verdict} (basis: {gain.basis}, n={gain.n})")
    return ForestRow(label=label, panel=PANELS[key], value=gain.value, low=gain.low, high=gain.high,
                     colour=VERDICT_COLOURS.get(gain.verdict, OTHER_COLOUR), hover=hover)


def speedups_section(analysis: FolderAnalysis) -> Section:
    section = Section(TITLE)
    base, gains = analysis.baseline, analysis.gains
    if base is None:
        section.blocks.append(Text("No run finished: no speed-up to draw.", note=True))
        return section
    # a speed-up across workload shapes (bs=4 against the bs=1 baseline) is not a toggle's: only the baseline's
    # shape is drawn; the Ablation section compares each shape's plans within it
    others = [r for r in analysis.merged if r.status == "ok" and r is not base]
    ok = [r for r in others if r.shape() == base.shape()]
    base_on = set(base.ran_on())
    singles = [r for r in ok if base_on < set(r.ran_on()) and len(set(r.ran_on()) - base_on) == 1]
    drawn, single = (singles, True) if singles else (ok, False)
    rows = [_row(_label(r, base, single), key, gain) for r in drawn
            for key in PANELS if (gain := gains.get(r.spec.combination_id, {}).get(key)) is not None]
    if not rows:
        section.blocks.append(Text("No plan has a speed-up over the baseline to draw (every other plan failed, "
                                   "or the sweep ran the baseline only).", note=True))
        return section
    rows.sort(key=lambda row: row.label)
    legend = [(colour, verdict) for verdict, colour in VERDICT_COLOURS.items()
              if any(row.colour == colour for row in rows)]
    what = "each toggle added alone to" if single else "each plan (no plan adds a single toggle) over"
    caption = (f"Speed-up of {what} the baseline ({plan_label(base)}): baseline time / plan time, > 1 is faster; "
               f"bars: {CI_LEVEL:.0%} CI; hover a mark for its numbers. The Headline table below has every plan.")
    section.blocks.append(Svg(forest_plot(rows, list(PANELS.values()), legend,
                                          "speed-up (log scale), 1 = no change"), caption))
    if skipped := len(others) - len(ok):
        section.blocks.append(Text(f"{skipped} plan{'s' * (skipped != 1)} of another workload shape than the "
                                   f"baseline's ({base.shape().label()}) left out: the Ablation section compares "
                                   "the plans of each shape.", note=True))
    return section
