"""Report section "Cold start and tail": per run, the first iteration (compile) cost and the p50 / p99 of its
timed decode steps with CIs; per toggle, its break-even (analysis/break_even.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from perfbench.analysis import stats
from perfbench.analysis.attribution import combo_label
from perfbench.analysis.break_even import break_evens, cold_cost_ms
from perfbench.analysis.rounds import by_combination
from perfbench.analysis.stats import CI_LEVEL
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.report.emulation import emulation_note
from perfbench.results import RunResult

STEP_KEYS = ("decode_step_ms_p50", "decode_step_ms_p99")


def cold_start_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    ok = sorted((r for r in results if r.status == "ok"),
                key=lambda r: (r.shape(), combo_label(r.effective_on()), r.spec.round, r.run_id))
    rows = []
    for r in ok:
        row: dict[str, Any] = {"run_id": r.run_id, "shape": r.shape().label(), "round": r.spec.round,
                               "toggles_on": combo_label(r.effective_on()),
                               "first_ttft_ms": r.summary.first_ttft_ms, "ttft_ms_median": r.summary.ttft_ms_median,
                               "compile_s": r.summary.compile_s, "cold_cost_ms": cold_cost_ms(r),
                               "decode_steps": len(r.finite_samples("tpot_steps_ms"))}
        for key in STEP_KEYS:
            row.update({k: r.metric(k) for k in (key, f"{key}_ci_low", f"{key}_ci_high")})
        rows.append(row)
    return rows


def rounds_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per combination run in two rounds or more (each a fresh process): the median of each cold-start figure over
    its rounds with a percentile-bootstrap CI (stats.bootstrap_ci)."""
    groups = by_combination([r for r in results if r.status == "ok"])
    rows = []
    for rounds in groups.values():
        if len(rounds) < 2:
            continue
        first = rounds[0]
        row: dict[str, Any] = {"shape": first.shape().label(), "toggles_on": combo_label(first.effective_on()),
                               "rounds": len(rounds)}
        for key, read in (("first_ttft_ms", lambda r: r.summary.first_ttft_ms),
                          ("compile_s", lambda r: r.summary.compile_s), ("cold_cost_ms", cold_cost_ms)):
            values = [v for v in (read(r) for r in rounds) if v is not None]
            row[key] = stats.median(values) if values else None
            low = high = None
            if len(values) >= 2:
                low, high = ((values[0], values[0]) if min(values) == max(values)
                             else stats.bootstrap_ci(values, level=CI_LEVEL))
            row[f"{key}_lo"], row[f"{key}_hi"] = low, high
        rows.append(row)
    return sorted(rows, key=lambda row: (row["shape"], row["toggles_on"]))


def _tokens(value: float | None) -> float | str | None:
    return "never" if value is not None and math.isinf(value) else value


def cold_start_section(results: Sequence[RunResult]) -> Section:
    section = Section("Cold start and tail")
    if (note := emulation_note(results)) is not None:
        section.blocks.append(note)
    rows = cold_start_rows(results)
    if not rows:
        section.blocks.append(Text("No run finished ok: no cold start or tail to show.", note=True))
        return section
    section.blocks.append(Text(
        "first_ttft_ms: the first (untimed) prefill, which builds the plan's compiled kernels; compile_s: the first "
        "decode step's excess over the steady steps (graph mode); cold_cost_ms: the first iteration's excess over "
        "a steady one (first_ttft_ms - median TTFT + compile). One observation per run (a process starts cold "
        "once); rounds of a combination are separate processes and show its spread. decode_step_ms p50 / p99: "
        f"every timed decode step apart, with {CI_LEVEL:.0%} percentile-bootstrap CIs (a p99 of fewer than 100 "
        "steps is near the largest step).", note=True))
    columns = [Column("run_id"), Column("shape"), Column("round"), Column("toggles_on"), Column("first_ttft_ms"),
               Column("ttft_ms_median"), Column("compile_s"), Column("cold_cost_ms"),
               *(Column(key, ci=(f"{key}_ci_low", f"{key}_ci_high")) for key in STEP_KEYS), Column("decode_steps")]
    section.blocks.append(Table("cold_start", columns, rows))
    across = rounds_rows(results)
    if across:
        section.blocks.append(Text(
            f"Across rounds (each round a fresh process): the median of each cold-start figure with a {CI_LEVEL:.0%} "
            "percentile-bootstrap CI over the rounds.", note=True))
        section.blocks.append(Table("cold_start_rounds", [
            Column("shape"), Column("toggles_on"), Column("rounds"),
            *(Column(key, ci=(f"{key}_lo", f"{key}_hi")) for key in ("first_ttft_ms", "compile_s", "cold_cost_ms"))],
            across))
    pairs = break_evens(list(results))
    if pairs:
        section.blocks.append(Text(
            "Break-even: generated tokens a process serves before a toggle's extra cold-start cost is paid back: "
            "(cold cost with - without) / saving per token, the saving being one iteration's time (TTFT + "
            "(output_len - 1) TPOT) without minus with, over its batch x output_len tokens; the toggle against the "
            "same shape's plan without it (rounds merged; medians, no CI; runs sharing a process share warm "
            "caches, so cold costs are lower bounds).", note=True))
        section.blocks.append(Table("break_even", [
            Column("toggle"), Column("plan", "added to"), Column("shape"), Column("cold_extra_ms"),
            Column("saving_per_token_ms"), Column("tokens"), Column("verdict")],
            [{**p.model_dump(), "tokens": _tokens(p.tokens)} for p in pairs]))
    return section
