"""The ablation section: what each toggle buys, from whatever design the runs form (see attribution.py), as the
folder analysis computed it."""

from __future__ import annotations

from typing import Any

from perfbench.analysis.attribution import (
    Attribution,
    Interaction,
    ShapleyValue,
    ToggleEffect,
    Unavailable,
    WaterfallStep,
    combo_label,
)
from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import legend, short_plan_label
from perfbench.pages.page import Block, Figure, Heading, Section, Text
from perfbench.pages.table import Column, Table
from perfbench.report import plots

# Metric -> title; both are latencies in milliseconds.
ABLATION_METRICS = {"tpot_ms_median": "Decode: TPOT median", "ttft_ms_median": "Prefill: TTFT median"}
ANALYSES = {"marginal": "Marginal effects (each toggle alone vs baseline)",
            "waterfall": "Cumulative waterfall", "leave_one_out": "Leave-one-out losses",
            "interactions": "Pairwise interactions", "shapley": "Shapley values"}

EXPLANATION = (
    "Speed-up = time without the toggle / time with it (> 1 is faster). Runs timed in the same blocks: the "
    f"headline's paired estimate and its {CI_LEVEL:.0%} CI; runs timed separately: from the runs' medians, "
    f"brackets: {CI_LEVEL:.0%} CI of the ratio (t over paired rounds, else a bootstrap of the sample medians). "
    "Effects are combined in log time, so "
    "speed-ups multiply. An interaction factor > 1 means the pair together beats the product of their "
    "single speed-ups. Shapley values split the total speed-up from baseline to all on among the toggles, "
    "interactions shared equally. Inactive toggles count as off.")


def _effect_row(shape: str, e: ToggleEffect) -> dict[str, Any]:
    return {"shape": shape, "toggle": e.toggle, "context": combo_label(e.context),
            "runs_without": e.runs_without, "runs_with": e.runs_with, "ms_without": e.value_without,
            "ms_with": e.value_with,
            "speedup": e.speedup, "ci_lo": e.ci_low, "ci_hi": e.ci_high}


def _effect_columns() -> list[Column]:
    return [Column("shape"), Column("toggle"), Column("context", "other toggles on"), Column("runs_without"),
            Column("runs_with"), Column("ms_without"), Column("ms_with"),
            Column("speedup", ci=("ci_lo", "ci_hi"), suffix="x")]


def _waterfall_row(shape: str, index: int, step: WaterfallStep) -> dict[str, Any]:
    row = _effect_row(shape, step.effect)
    row.update(step=index, cumulative_speedup=step.cumulative_speedup)
    return row


def _interaction_row(shape: str, i: Interaction) -> dict[str, Any]:
    return {"shape": shape, "a": i.a, "b": i.b, "log_effect_a": i.effect_a, "log_effect_b": i.effect_b,
            "log_effect_ab": i.effect_ab, "log_interaction": i.log_interaction, "factor": i.factor,
            "contexts": i.contexts}


def _shapley_row(shape: str, v: ShapleyValue) -> dict[str, Any]:
    return {"shape": shape, "toggle": v.toggle, "log_value": v.log_value, "speedup": v.speedup,
            "share_pct": v.share_pct}


def _tables(metric: str, rows: dict[str, list[dict[str, Any]]]) -> list[Block]:
    effect_cols = _effect_columns()
    columns = {
        "marginal": effect_cols,
        "waterfall": [Column("shape"), Column("step"), *effect_cols[1:],
                      Column("cumulative_speedup", suffix="x")],
        "leave_one_out": effect_cols,
        "interactions": [Column("shape"), Column("a"), Column("b"), Column("log_effect_a"),
                         Column("log_effect_b"), Column("log_effect_ab"), Column("log_interaction"),
                         Column("factor", "interaction factor", suffix="x"), Column("contexts")],
        "shapley": [Column("shape"), Column("toggle"), Column("log_value"), Column("speedup", suffix="x"),
                    Column("share_pct", "share of total (%)")],
    }
    out: list[Block] = []
    for analysis, analysis_rows in rows.items():
        if analysis_rows:
            out.append(Table(f"{analysis}_{metric}", columns[analysis], analysis_rows,
                             caption=ANALYSES[analysis]))
    return out


def _shape_blocks(att: Attribution, title: str, rows: dict[str, list[dict[str, Any]]]) -> list[Block]:
    """Plots of one shape, the reasons its design lacks an analysis, and its rows appended to `rows`."""
    shape = att.design.shape.label()
    blocks: list[Block] = [Heading(f"{title}: {shape}")]
    if not isinstance(att.marginal, Unavailable):
        rows["marginal"] += [_effect_row(shape, e) for e in att.marginal]
        blocks.append(Figure(plots.speedup_bars(
            [short_plan_label([e.toggle]) for e in att.marginal], [e.speedup for e in att.marginal],
            [e.ci_low for e in att.marginal], [e.ci_high for e in att.marginal],
            f"{title}, each toggle alone vs baseline ({shape})"), f"Speed-up per toggle, {title}, {shape}"))
    if not isinstance(att.waterfall, Unavailable):
        rows["waterfall"] += [_waterfall_row(shape, i, s) for i, s in enumerate(att.waterfall, 1)]
    if not isinstance(att.waterfall, Unavailable) and len(att.waterfall) > 1:  # one step = the marginal plot
        blocks.append(Figure(plots.waterfall(
            "baseline", att.waterfall[0].effect.value_without,
            [(short_plan_label([s.effect.toggle]), s.effect.value_with) for s in att.waterfall], "ms",
            f"{title} ({shape})"), f"Cumulative waterfall, {title}, {shape}"))
    charted = [*([] if isinstance(att.marginal, Unavailable) else [e.toggle for e in att.marginal]),
               *([] if isinstance(att.waterfall, Unavailable) else [s.effect.toggle for s in att.waterfall])]
    key_line = legend(short_plan_label([toggle]) for toggle in charted)
    if any(isinstance(b, Figure) for b in blocks) and key_line:
        blocks.append(Text(key_line, note=True))  # the charts name toggles as the end table does
    if not isinstance(att.leave_one_out, Unavailable):
        rows["leave_one_out"] += [_effect_row(shape, e) for e in att.leave_one_out]
    if not isinstance(att.interactions, Unavailable):
        rows["interactions"] += [_interaction_row(shape, i) for i in att.interactions]
    if not isinstance(att.shapley, Unavailable):
        rows["shapley"] += [_shapley_row(shape, v) for v in att.shapley]
    for analysis, outcome in (("marginal", att.marginal), ("waterfall", att.waterfall),
                              ("leave_one_out", att.leave_one_out), ("interactions", att.interactions),
                              ("shapley", att.shapley)):
        if isinstance(outcome, Unavailable):
            blocks.append(Text(f"{ANALYSES[analysis]}: not available for this design, {outcome.reason}.",
                               note=True))
    return blocks


def ablation_section(analysis: FolderAnalysis) -> Section:
    section = Section("Ablation")
    section.blocks.append(Text(EXPLANATION, note=True))
    for metric, title in ABLATION_METRICS.items():
        attributions = analysis.attributions[metric]
        if not attributions:
            section.blocks.append(Text(
                f"{title}: nothing to attribute, no workload shape has ok runs with two different effective "
                "toggle sets.", note=True))
            continue
        rows: dict[str, list[dict[str, Any]]] = {a: [] for a in ANALYSES}
        for att in attributions:
            section.blocks += _shape_blocks(att, title, rows)
        section.blocks += _tables(metric, rows)
    return section
