"""`perfbench compare A B`: each run of B against its match in A, per metric, with significance.

Runs match by run_id, then (for the rest) by what they computed: workload shape + effective toggle set.
Ratio = B / A of the summary value. Significance comes from the raw samples: a two-sided Mann-Whitney U
p-value below ALPHA, and the bootstrap CI of the ratio of medians excluding 1. Throughputs have no samples of
their own; they are tested on the latency samples they derive from (prefill on TTFT, decode on TPOT: the
rank test is the same for a quantity and its inverse) and their CI is the inverted latency CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbench.analysis import stats
from perfbench.analysis.attribution import WorkloadShape, combo_label, effective_on, finite_samples, higher_is_better
from perfbench.report.build import load_folder
from perfbench.report.page import Section, Text, write_page
from perfbench.report.table import Column, Table, format_number
from perfbench.results import RunResult, atomic_write_text

ALPHA = 0.05
CI_LEVEL = 0.95
# metric -> raw samples it is tested on
COMPARED = {"ttft_ms_median": "ttft_ms", "tpot_ms_median": "tpot_ms", "prefill_tok_s": "ttft_ms",
            "decode_tok_s": "tpot_ms"}


@dataclass(frozen=True)
class MetricChange:
    """One metric of one matched pair. significant is None when there are too few samples to test."""

    metric: str
    a: float
    b: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    significant: bool | None

    @property
    def ratio(self) -> float:
        return self.b / self.a

    @property
    def direction(self) -> str:
        """faster / slower / same, whatever the metric's direction."""
        if self.ratio == 1.0:
            return "same"
        better = self.ratio > 1.0 if higher_is_better(self.metric) else self.ratio < 1.0
        return "faster" if better else "slower"

    @property
    def verdict(self) -> str:
        """"1.25x faster" when significant; "~ 1.01x slower" when not (or not testable)."""
        factor = max(self.ratio, 1.0 / self.ratio)
        text = "same" if self.direction == "same" else f"{factor:.3f}x {self.direction}"
        return text if self.significant else f"~ {text}"


def _pair_change(metric: str, a: RunResult, b: RunResult) -> MetricChange | None:
    value_a, value_b = a.summary.get(metric), b.summary.get(metric)
    if value_a is None or value_b is None or value_a <= 0 or value_b <= 0:
        return None
    sample_key = COMPARED[metric]
    xs, ys = finite_samples(a, sample_key), finite_samples(b, sample_key)
    if len(xs) < 2 or len(ys) < 2:
        return MetricChange(metric, value_a, value_b, None, None, None, None)
    _, p_value = stats.mann_whitney_u(ys, xs, alternative="two-sided")
    _, lo, hi = stats.ratio_ci(xs, ys, level=CI_LEVEL)
    if higher_is_better(metric):  # throughput ~ 1 / latency
        lo, hi = 1.0 / hi, 1.0 / lo
    significant = p_value < ALPHA and not lo <= 1.0 <= hi
    return MetricChange(metric, value_a, value_b, lo, hi, p_value, significant)


@dataclass
class Match:
    a: RunResult
    b: RunResult
    matched_by: str  # "run_id" or "shape+toggles"

    @property
    def label(self) -> str:
        return self.a.run_id if self.a.run_id == self.b.run_id else f"{self.a.run_id} -> {self.b.run_id}"

    def changes(self) -> list[MetricChange]:
        if self.a.status != "ok" or self.b.status != "ok":
            return []
        return [c for c in (_pair_change(m, self.a, self.b) for m in COMPARED) if c is not None]


def _identity(r: RunResult) -> tuple[WorkloadShape, frozenset[str]]:
    return WorkloadShape.of(r), effective_on(r)


def match_runs(runs_a: Sequence[RunResult],
               runs_b: Sequence[RunResult]) -> tuple[list[Match], list[RunResult], list[RunResult]]:
    """Pairs (by run_id first, then by shape + effective toggles, in order), runs only in A, only in B."""
    by_id_a = {r.run_id: r for r in runs_a}
    matches = [Match(by_id_a[r.run_id], r, "run_id") for r in runs_b if r.run_id in by_id_a]
    taken = {m.a.run_id for m in matches}
    rest_a = [r for r in runs_a if r.run_id not in taken]
    rest_b = [r for r in runs_b if r.run_id not in taken]
    only_b = []
    for r in rest_b:
        same = next((x for x in rest_a if _identity(x) == _identity(r)), None)
        if same is None:
            only_b.append(r)
        else:
            rest_a.remove(same)
            matches.append(Match(same, r, "shape+toggles"))
    return matches, rest_a, only_b


def _status_note(m: Match) -> str:
    if m.a.status == "ok" and m.b.status == "ok":
        return ""
    return f"A {m.a.status}, B {m.b.status}"


def _rows(matches: list[Match]) -> list[dict[str, Any]]:
    rows = []
    for m in matches:
        base = {"run": m.label, "matched_by": m.matched_by, "shape": WorkloadShape.of(m.b).label(),
                "toggles_on": combo_label(effective_on(m.b))}
        note = _status_note(m)
        if note:
            # a run that broke is the worst slowdown; one that now works, a fix; both broken, no news
            direction = {(True, False): "slower", (False, True): "faster"}.get(
                (m.a.status == "ok", m.b.status == "ok"), "")
            rows.append({**base, "change": note, "direction": direction})
        for c in m.changes():
            rows.append({**base, "metric": c.metric, "a": c.a, "b": c.b, "ratio": c.ratio, "ci_lo": c.ci_low,
                         "ci_hi": c.ci_high, "p_value": c.p_value, "change": c.verdict,
                         "direction": c.direction if c.significant else ""})
    return rows


def _summary_rows(matches: list[Match]) -> list[dict[str, Any]]:
    """Per metric over the matched ok pairs: geometric mean of B/A and how many changed significantly."""
    rows = []
    for metric in COMPARED:
        changes = [c for m in matches for c in m.changes() if c.metric == metric]
        if not changes:
            continue
        rows.append({"metric": metric, "pairs": len(changes),
                     "geomean_ratio": stats.geometric_mean([c.ratio for c in changes]),
                     "faster": sum(bool(c.significant) and c.direction == "faster" for c in changes),
                     "slower": sum(bool(c.significant) and c.direction == "slower" for c in changes),
                     "not_significant": sum(not c.significant for c in changes)})
    return rows


def _terminal(a: Path, b: Path, rows: list[dict[str, Any]], only_a: list[RunResult],
              only_b: list[RunResult]) -> str:
    """Aligned text table: numbers right-aligned, `~` marks a change that is not significant."""
    def cell(value: Any) -> str:
        if value is None:
            return ""
        return format_number(value) if isinstance(value, float) else str(value)

    header = ["run", "metric", "A", "B", "B/A", f"{CI_LEVEL:.0%} CI", "p", "change"]
    table = [header]
    for row in rows:
        ci = f"[{cell(row['ci_lo'])}, {cell(row['ci_hi'])}]" if row.get("ci_lo") is not None else ""
        table.append([row["run"], row.get("metric", ""), cell(row.get("a")), cell(row.get("b")),
                      cell(row.get("ratio")), ci, cell(row.get("p_value")), row["change"]])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    right = {2, 3, 4, 6}
    lines = [f"A (before): {a}", f"B (after):  {b}", ""]
    for r in table:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    if len(table) == 1:
        lines.append("(no matched runs)")
    lines.append(f"~: not significant (two-sided Mann-Whitney p >= {ALPHA} or the CI contains 1)")
    for side, runs in (("A", only_a), ("B", only_b)):
        if runs:
            lines.append(f"only in {side}: " + ", ".join(r.run_id for r in runs))
    return "\n".join(lines)


def compare_folders(a: Path, b: Path, out: Path) -> str:
    """Write out/compare.html and out/compare.csv (+ compare_summary.csv, compare_unmatched.csv); return the
    terminal table."""
    a, b, out = Path(a), Path(b), Path(out)
    runs_a, runs_b = load_folder(a), load_folder(b)
    matches, only_a, only_b = match_runs(runs_a, runs_b)
    rows = _rows(matches)
    columns = [Column("run"), Column("metric"), Column("a", "A"), Column("b", "B"),
               Column("ratio", "B/A", ci=("ci_lo", "ci_hi")), Column("p_value", "p (Mann-Whitney)"),
               Column("change", mark_key="direction"), Column("matched_by"), Column("shape"),
               Column("toggles_on")]
    overview = Section("Runs compared")
    overview.blocks.append(Text(f"A (before): {a.resolve()}; B (after): {b.resolve()}. {len(matches)} "
                                f"matched runs, {len(only_a)} only in A, {len(only_b)} only in B."))
    overview.blocks.append(Text(
        f"B/A ratio of the summary value; brackets: {CI_LEVEL:.0%} bootstrap CI of the ratio of sample "
        f"medians. A change is significant when the two-sided Mann-Whitney p < {ALPHA} and the CI excludes "
        "1; '~' marks the rest. Throughputs are tested on the latency samples they derive from.", note=True))
    summary = _summary_rows(matches)
    if summary:
        summary_columns = [Column("metric"), Column("pairs"), Column("geomean_ratio", "geometric mean B/A"),
                           Column("faster"), Column("slower"), Column("not_significant")]
        overview.blocks.append(Table("compare_summary", summary_columns, summary,
                                     caption="Summary over matched runs"))
    per_run = Section("Per run")
    per_run.blocks.append(Table("compare", columns, rows) if rows else Text("No runs matched.", note=True))
    unmatched = Section("Only on one side")
    one_side = [{"side": side, "run_id": r.run_id, "status": r.status, "shape": WorkloadShape.of(r).label(),
                 "toggles_on": combo_label(effective_on(r))} for side, runs in (("A", only_a), ("B", only_b))
                for r in runs]
    if one_side:
        unmatched_columns = [Column("side"), Column("run_id"), Column("status"), Column("shape"),
                             Column("toggles_on")]
        unmatched.blocks.append(Table("compare_unmatched", unmatched_columns, one_side))
    else:
        unmatched.blocks.append(Text("Every run has a match.", note=True))
    write_page(out / "compare.html", out, "perfbench compare", f"{a.name} -> {b.name}",
               [overview, per_run, unmatched], owned_csvs="compare*.csv")
    if not rows:  # compare.csv always exists, even when nothing matched
        atomic_write_text(out / "compare.csv", Table("compare", columns).csv_text())
    return _terminal(a, b, rows, only_a, only_b)

