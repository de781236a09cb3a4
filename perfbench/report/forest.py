"""The report's first picture: every single-toggle speed-up (TTFT and TPOT) with its CI, coloured by its verdict, as
an inline SVG forest plot. A plan that adds one toggle to its shape's all-off run answers "what does this toggle
buy"; each workload shape is compared with its own all-off run (a bs=4 plan against the bs=1 baseline would measure
the batch, not the toggle), and a row names its shape where the folder has several. When no plan adds a single
toggle (a leave-one-out design), every plan is drawn against its shape's baseline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.speedup import Speedup, plan_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.pages.page import Section, Svg, Text
from perfbench.pages.svg import ForestRow, forest_plot
from perfbench.results import RunResult
from perfbench.results.verdicts import FASTER, INCONCLUSIVE, SAME, SLOWER

VERDICT_COLOURS = {FASTER: "#3a9a4a", SLOWER: "#c8413b", SAME: "#5b7db8", INCONCLUSIVE: "#d9a21b"}
OTHER_COLOUR = "#888"
PANELS = {"ttft_ms": "TTFT (prefill)", "tpot_ms": "TPOT (decode)"}
TITLE = "Speed-ups"
Gains = Mapping[str, Mapping[str, Speedup | None]]


def _toggle_label(run: RunResult, base: RunResult) -> str:
    (added,) = set(run.ran_on()) - set(base.ran_on())
    return f"+{TOGGLE_ABBREV[added]} ({added})" if added in TOGGLE_ABBREV else f"+{added}"


def _row(label: str, key: str, gain: Speedup) -> ForestRow:
    hover = (f"{label}, {PANELS[key]}: {gain.value:.3f}x, {CI_LEVEL:.0%} CI [{gain.low:.3f}, {gain.high:.3f}], "
             f"{gain.verdict} (basis: {gain.basis}, n={gain.n})")
    return ForestRow(label=label, panel=PANELS[key], value=gain.value, low=gain.low, high=gain.high,
                     colour=VERDICT_COLOURS.get(gain.verdict, OTHER_COLOUR), hover=hover)


def _shape_names(shapes: Sequence[str]) -> dict[str, str]:
    """Each shape label cut to the words that tell it from the others ("bs=4"); "" when there is one shape."""
    if len(set(shapes)) < 2:
        return {s: "" for s in shapes}
    common = set.intersection(*(set(s.split()) for s in shapes))
    return {s: " ".join(word for word in s.split() if word not in common) for s in shapes}


def _comparisons(analysis: FolderAnalysis) -> list[tuple[RunResult, Gains, list[RunResult]]]:
    """(all-off run, speed-ups over it, the other ok plans of its shape) per shape; the folder's baseline alone
    when no shape has an all-off run."""
    ok = [r for r in analysis.merged if r.status == "ok"]
    if analysis.by_shape:
        return [(sb.baseline, sb.gains, [r for r in ok if r.shape() == sb.shape and r is not sb.baseline])
                for sb in analysis.by_shape]
    base = analysis.baseline
    if base is None:
        return []
    return [(base, analysis.gains, [r for r in ok if r.shape() == base.shape() and r is not base])]


def speedups_section(analysis: FolderAnalysis) -> Section:
    section = Section(TITLE)
    comparisons = _comparisons(analysis)
    if not comparisons:
        section.blocks.append(Text("No run finished: no speed-up to draw.", note=True))
        return section
    singles = [(base, gains, [r for r in plans if set(base.ran_on()) < set(r.ran_on())
                              and len(set(r.ran_on()) - set(base.ran_on())) == 1])
               for base, gains, plans in comparisons]
    single = any(plans for _, _, plans in singles)
    drawn = singles if single else comparisons
    shapes = _shape_names([base.shape().label() for base, _, plans in drawn if plans])
    rows = []
    for base, gains, plans in drawn:
        suffix = f" · {shapes[base.shape().label()]}" if shapes.get(base.shape().label()) else ""
        for r in plans:
            label = (_toggle_label(r, base) if single else plan_label(r)) + suffix
            rows += [_row(label, key, gain) for key in PANELS
                     if (gain := gains.get(r.spec.combination_id, {}).get(key)) is not None]
    if not rows:
        section.blocks.append(Text("No plan has a speed-up over its shape's all-off run to draw (every other plan "
                                   "failed, or the sweep ran the baseline only).", note=True))
        return section
    legend = [(colour, verdict) for verdict, colour in VERDICT_COLOURS.items()
              if any(row.colour == colour for row in rows)]
    what = "each toggle added alone to" if single else "each plan (no plan adds a single toggle) over"
    caption = (f"Speed-up of {what} the all-off run of its workload shape: baseline time / plan time, > 1 is "
               f"faster; bars: {CI_LEVEL:.0%} CI; hover a mark for its numbers. The Headline table below has every "
               "plan.")
    section.blocks.append(Svg(forest_plot(rows, list(PANELS.values()), legend,
                                          "speed-up (log scale), 1 = no change"), caption))
    return section
