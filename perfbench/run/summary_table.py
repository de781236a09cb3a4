"""What a sweep means, printed at the end of `perfbench run`: one line per plan (short toggle names, a legend
below), the TTFT and TPOT medians, and each speed-up against the baseline with its 95% CI and verdict; then each
toggle measured on top of another plan; then the warnings. Everything is computed once in
perfbench/analysis/folder_analysis.py; this module only lays it out (at most 120 columns for the default scenario)."""

from __future__ import annotations

import math
import re
import textwrap

from tabulate import tabulate

from perfbench.analysis import stats
from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.plan_warnings import host_notes
from perfbench.analysis.speedup import Speedup, plan_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import TOGGLE_ABBREV, legend
from perfbench.results import STATUSES, RunResult
from perfbench.results.verdicts import VERDICTS, words_line

# The tables and notes fit WIDTH whatever the values (tests/perfbench/run/test_summary_table.py): every number takes
# at most NUMBER_WIDTH characters (`short_number`), a speed-up cell at most GAIN_WIDTH, and the plan labels, the one
# column of unbounded text, wrap onto more lines at what is left.
WIDTH = 120
NUMBER_WIDTH = 5
COLUMN_GAP = 2  # tabulate's "plain" format
GAIN_WIDTH = len("x [,] ") + 3 * NUMBER_WIDTH + max(map(len, VERDICTS))
MEDIAN_WIDTH = max(NUMBER_WIDTH, *map(len, STATUSES))  # a failed plan shows its status there
PLAN_WIDTH = WIDTH - 2 * (MEDIAN_WIDTH + GAIN_WIDTH) - 4 * COLUMN_GAP
ADDED_WIDTH = WIDTH - 2 * GAIN_WIDTH - 2 * COLUMN_GAP


def short_number(x: float) -> str:
    """A latency or ratio (never negative) in at most 5 characters, so that the table's width does not depend on
    the values: two decimals below 10, one below 1000, none below 10^5, else the exponent form ("1e+05",
    "1e300"); a value that rounds up past its range (999.96 -> "1000.0") takes the next, coarser form; "inf" for
    an unbounded CI."""
    magnitude = abs(x)
    if math.isnan(x):
        return "nan"
    if not magnitude < float("inf"):
        return "inf" if x > 0 else "-inf"
    forms = ("{:.2f}", "{:.1f}", "{:.0f}")
    first = 0 if magnitude < 10 else 1 if magnitude < 1000 else 2 if magnitude < 1e5 else 3
    fixed = next((text for form in forms[first:] if len(text := form.format(x)) <= NUMBER_WIDTH), None)
    if fixed is not None:
        return fixed
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{exponent}" if len(exponent) <= 3 else f"{mantissa}e{int(exponent)}"  # 1e+05, 1e300


def _plan_cell(label: str, width: int) -> str:
    """A plan label in lines of at most `width`, broken after a "+" or a space ("attn+gdr+" / "rope")."""
    lines: list[str] = []
    for token in re.findall(r"[^+ ]+[+ ]?|[+ ]", label):
        pieces = textwrap.wrap(token, width, drop_whitespace=False) if len(token) > width else [token]
        for piece in pieces:
            if lines and len(lines[-1] + piece.rstrip()) <= width:
                lines[-1] += piece
            else:
                lines.append(piece)
    return "\n".join(line.rstrip() for line in lines)


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
        seconds, warm = r.summary.compile_s, r.summary.compile_cache_warm
        if r.status == "ok" and seconds is not None and warm is not None:
            groups["warm" if warm else "cold"].append(seconds)
    parts = [f"{state} cache: median {stats.median(v):.1f} s over {len(v)} run{'s' * (len(v) != 1)}"
             for state, v in groups.items() if v]
    return f"graph compile: {'; '.join(parts)}" if parts else ""


def _basis_line(gains: dict[str, dict[str, Speedup | None]]) -> str:
    values = [g for per in gains.values() for g in per.values() if g is not None]
    if values and all(g.basis == "blocks" for g in values):
        pairs = max(g.n for g in values)
        clusters = max(g.clusters for g in values)
        return (f"TTFT, TPOT: medians in ms; speed-up: baseline / plan from within-block pairs (up to {pairs} pairs "
                f"in {clusters} epoch{'s' * (clusters != 1)}), {CI_LEVEL:.0%} t CI over epochs, > 1 is faster; "
                + words_line())
    return (f"TTFT, TPOT: medians in ms; speed-up: baseline / plan, {CI_LEVEL:.0%} CI, > 1 is faster; runs timed "
            "separately, paired by round where there are several (one round decides nothing); " + words_line())


def summary_table(analysis: FolderAnalysis) -> str:
    """The end table of `perfbench run`: the folder analysis laid out, nothing computed again."""
    merged = list(analysis.merged)
    base = analysis.baseline
    gains = analysis.gains
    base_id = base.spec.combination_id if base is not None else None
    # baseline first, then by how many toggles a plan switches on (one-at-a-time before combined plans)
    merged.sort(key=lambda r: (r.spec.combination_id != base_id, len(r.plan.effective_on()), plan_label(r)))
    rows: list[tuple[str, ...]] = []
    for r in merged:
        label = _plan_cell(plan_label(r), PLAN_WIDTH)
        if r.status != "ok":
            rows.append((label, r.status, "", "", ""))
        elif r.spec.combination_id == base_id:
            rows.append((_plan_cell(f"{plan_label(r)} (baseline)", PLAN_WIDTH), _median(r, "ttft_ms"), "-",
                         _median(r, "tpot_ms"), "-"))
        else:
            gain = gains.get(r.spec.combination_id, {})
            rows.append((label, _median(r, "ttft_ms"), _gain(gain.get("ttft_ms")), _median(r, "tpot_ms"),
                         _gain(gain.get("tpot_ms"))))
    header = ("plan", "TTFT", "TTFT speed-up", "TPOT", "TPOT speed-up")  # medians in ms (the basis line says)
    lines = [tabulate(rows, header, tablefmt="plain", disable_numparse=True)]
    if analysis.on_top:
        ids = {r.spec.combination_id: r for r in merged}
        rows = [(_plan_cell(f"+{TOGGLE_ABBREV.get(m.toggle, m.toggle)} on {plan_label(ids[m.without])}",
                            ADDED_WIDTH),
                 _gain(m.gains.get("ttft_ms")), _gain(m.gains.get("tpot_ms"))) for m in analysis.on_top]
        lines += ["", tabulate(rows, ("toggle added to a plan", "TTFT speed-up", "TPOT speed-up"),
                               tablefmt="plain", disable_numparse=True)]
    lines.append("")
    notes = [legend([plan_label(r) for r in merged]), _basis_line(gains) if base is not None else ""]
    lines += [textwrap.fill(note, WIDTH, subsequent_indent="  ") for note in notes if note]
    compile_line = compile_summary(list(analysis.results))
    if compile_line:
        lines.append(compile_line)
    lines += [textwrap.fill(f"HOST: {note}", WIDTH, subsequent_indent="  ")
              for note in host_notes(list(analysis.results))]
    warn = analysis.warnings
    if warn:
        lines.append(f"WARNING: {len(warn)} of {len(merged)} plans need a second look:")
        lines += [textwrap.fill(w, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
                  for texts in warn.values() for w in texts]
    return "\n".join(lines)
