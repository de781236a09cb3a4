"""What a sweep means, printed at the end of `perfbench run`: one line per plan (short toggle names, a legend
below), the TTFT and TPOT medians, and each speed-up against the baseline with its 95% CI and verdict; then each
toggle measured on top of another plan; then the warnings. Everything is computed once in
perfbench/analysis/folder_analysis.py; this module only lays it out (at most 120 columns for the default scenario)."""

from __future__ import annotations

import textwrap

from tabulate import tabulate

from perfbench.analysis import paired, stats
from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.speedup import Speedup, plan_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.results import RunResult

# notes wrap here; every number takes at most 5 characters (`short_number`), so the tables of the default scenario
# fit whatever the values (tests/perfbench/run/test_summary_table.py)
WIDTH = 120


def short_number(x: float) -> str:
    """A number in at most 5 characters, so that the table's width does not depend on the values: two decimals
    below 10, one below 1000, none below 10^5, else the exponent form ("1e+05"); "inf" for an unbounded CI."""
    magnitude = abs(x)
    if not magnitude < float("inf"):
        return "inf" if x > 0 else "-inf"
    if magnitude < 10:
        return f"{x:.2f}"
    if magnitude < 1000:
        return f"{x:.1f}"
    return f"{x:.0f}" if magnitude < 1e5 else f"{x:.0e}"


def _gain(value: Speedup | None) -> str:
    if value is None:
        return "-"
    return (f"{short_number(value.value)}x [{short_number(value.low)},{short_number(value.high)}] "
            f"{value.verdict}")


def _median(result: RunResult, key: str) -> str:
    values = result.finite_samples(key)
    return short_number(stats.median(values)) if values else "-"


def compile_summary(results: list[RunResult]) -> str:
    """Graph compile time of runs that found the sweep's compile cache cold vs warm ("" when none compiled)."""
    groups: dict[str, list[float]] = {"cold": [], "warm": []}
    for r in results:
        seconds, warm = r.metric("compile_s"), r.metric("compile_cache_warm")
        if r.status == "ok" and seconds is not None and warm is not None:
            groups["warm" if warm else "cold"].append(seconds)
    parts = [f"{state} cache: median {stats.median(v):.1f} s over {len(v)} run{'s' * (len(v) != 1)}"
             for state, v in groups.items() if v]
    return f"graph compile: {'; '.join(parts)}" if parts else ""


def _legend(labels: list[str]) -> str:
    used = {part for label in labels for part in label.split("+")}
    names = [f"{short} {name}" for name, short in TOGGLE_ABBREV.items() if short in used]
    return f"legend: {', '.join(names)}" if names else ""


def _basis_line(gains: dict[str, dict[str, Speedup | None]]) -> str:
    values = [g for per in gains.values() for g in per.values() if g is not None]
    if values and all(g.basis == "blocks" for g in values):
        pairs = max(g.n for g in values)
        clusters = max(g.clusters for g in values)
        return (f"TTFT, TPOT: medians in ms; speed-up: baseline / plan from within-block pairs (up to {pairs} pairs "
                f"in {clusters} epoch{'s' * (clusters != 1)}), {CI_LEVEL:.0%} t CI over epochs, > 1 is faster; "
                f"no change: the whole CI within +-{paired.DEFAULT_BAND:.0%}; faster/slower: beyond "
                f"+-{paired.DEFAULT_MARGIN:.0%}")
    return (f"TTFT, TPOT: medians in ms; speed-up: baseline / plan, {CI_LEVEL:.0%} CI, > 1 is faster; runs timed "
            "separately, paired by round "
            "where there are several")


def summary_table(analysis: FolderAnalysis) -> str:
    """The end table of `perfbench run`: the folder analysis laid out, nothing computed again."""
    merged = list(analysis.merged)
    base = analysis.baseline
    gains = analysis.gains
    base_id = base.spec.combination_id if base is not None else None
    # baseline first, then by how many toggles a plan switches on (one-at-a-time before combined plans)
    merged.sort(key=lambda r: (r.spec.combination_id != base_id, len(r.plan.effective_on()), plan_label(r)))
    rows = []
    for r in merged:
        label = plan_label(r)
        if r.status != "ok":
            rows.append((label, r.status, "", "", ""))
        elif r.spec.combination_id == base_id:
            rows.append((f"{label} (baseline)", _median(r, "ttft_ms"), "-", _median(r, "tpot_ms"), "-"))
        else:
            gain = gains.get(r.spec.combination_id, {})
            rows.append((label, _median(r, "ttft_ms"), _gain(gain.get("ttft_ms")), _median(r, "tpot_ms"),
                         _gain(gain.get("tpot_ms"))))
    header = ("plan", "TTFT", "TTFT speed-up", "TPOT", "TPOT speed-up")  # medians in ms (the basis line says)
    lines = [tabulate(rows, header, tablefmt="plain", disable_numparse=True)]
    if analysis.on_top:
        ids = {r.spec.combination_id: r for r in merged}
        rows = [(f"+{TOGGLE_ABBREV.get(m.toggle, m.toggle)} on {plan_label(ids[m.without])}",
                 _gain(m.gains.get("ttft_ms")), _gain(m.gains.get("tpot_ms"))) for m in analysis.on_top]
        lines += ["", tabulate(rows, ("toggle added to a plan", "TTFT speed-up", "TPOT speed-up"),
                               tablefmt="plain", disable_numparse=True)]
    lines.append("")
    notes = [_legend([plan_label(r) for r in merged]), _basis_line(gains) if base is not None else ""]
    lines += [textwrap.fill(note, WIDTH, subsequent_indent="  ") for note in notes if note]
    compile_line = compile_summary(list(analysis.results))
    if compile_line:
        lines.append(compile_line)
    warn = analysis.warnings
    if warn:
        lines.append(f"WARNING: {len(warn)} of {len(merged)} plans need a second look:")
        lines += [textwrap.fill(w, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
                  for texts in warn.values() for w in texts]
    return "\n".join(lines)
