"""`perfbench compare A B`: the page and terminal table of each run of B against its match in A.

Matching and the per-metric changes with their significance come from `perfbench.analysis.compare`; the page's
op-level diff of the pairs with traces from `op_diff.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tabulate import tabulate

from perfbench.analysis import stats
from perfbench.analysis.attribution import combo_label
from perfbench.analysis.compare import ALPHA, CI_LEVEL, COMPARED, Match, match_merged
from perfbench.analysis.folder_analysis import analyse
from perfbench.analysis.stability import host_speed_differs
from perfbench.errors import UserError
from perfbench.pages.page import Section, Text, write_page
from perfbench.pages.table import Column, Table, format_number
from perfbench.report.op_diff import op_diff_section
from perfbench.results import ResultFolder, RunResult, atomic_write_text, load_folder


def _status_note(m: Match) -> str:
    if m.a.status == "ok" and m.b.status == "ok":
        return ""
    return f"A {m.a.status}, B {m.b.status}"


def _rows(matches: list[Match], bands: dict[str, float] | None = None) -> list[dict[str, Any]]:
    rows = []
    for m in matches:
        base: dict[str, Any] = {"run": m.label, "matched_by": m.matched_by, "shape": m.b.shape().label(),
                "toggles_on": combo_label(m.b.effective_on())}
        note = _status_note(m)
        if note:
            # a run that broke is the worst slowdown; one that now works, a fix; both broken, no news
            direction = {(True, False): "slower", (False, True): "faster"}.get(
                (m.a.status == "ok", m.b.status == "ok"), "")
            rows.append({**base, "change": note, "direction": direction})
        for c in m.changes(bands):
            rows.append({**base, "metric": c.metric, "a": c.a, "b": c.b, "ratio": c.ratio, "ci_lo": c.ci_low,
                         "ci_hi": c.ci_high, "p_value": c.p_value,
                         "change": c.verdict + (" (inside the run-to-run band)" if c.in_band else "")
                         + (" (not decided: see stability)" if c.undecided else ""),
                         "direction": c.direction if c.significant else "", "basis": c.basis,
                         "stable": _stable_text(m)})
    return rows


def _stable_text(m: Match) -> str:
    """"" when both sides are stable (or not judged) and the host ran at one speed for both; otherwise which
    side is not stable, with its reason, and the host's change of speed."""
    reasons = [f"{side} unstable: {r.stability.reason}" for side, r in (("A", m.a), ("B", m.b))
               if r.is_stable() is False]
    if speed := host_speed_differs(m.a, m.b):
        reasons.append(speed)
    return "; ".join(reasons)


def _summary_rows(matches: list[Match], bands: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Per metric over the matched ok pairs: geometric mean of B/A and how many changed significantly."""
    rows = []
    for metric in COMPARED:
        changes = [c for m in matches for c in m.changes(bands) if c.metric == metric]
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
    align = ["right" if i in (2, 3, 4, 6) else "left" for i in range(len(header))]
    lines = [f"A (before): {a}", f"B (after):  {b}", ""]
    lines += tabulate(table[1:], header, tablefmt="plain", disable_numparse=True, colalign=align).splitlines()
    if len(table) == 1:
        lines.append("(no matched runs)")
    lines.append(f"~: not significant (two-sided Mann-Whitney p >= {ALPHA}, the CI contains 1, or, with one "
                 "round per side, inside the run-to-run band)")
    why_not_evidence = {row["run"]: row["stable"] for row in rows if row.get("stable")}  # one line per run
    if why_not_evidence:
        lines.append("WARNING: unstable runs, or a host that ran at another speed, their changes are not "
                     f"evidence: {', '.join(sorted(why_not_evidence))}")
        lines += [f"  {run}: {why}" for run, why in sorted(why_not_evidence.items())]
    for side, runs in (("A", only_a), ("B", only_b)):
        if runs:
            lines.append(f"only in {side}: " + ", ".join(r.run_id for r in runs))
    return "\n".join(lines)


def _scenario_names(folder: ResultFolder) -> list[str]:
    """The sweep's scenario (scenario.json), else the scenarios its runs name."""
    name = (folder.scenario or {}).get("name")
    return [str(name)] if name else sorted({r.spec.scenario for r in folder.results}) or ["(none)"]


def compare_folders(a: Path, b: Path, out: Path, bands: dict[str, float] | None = None) -> str:
    """Write out/compare.html and out/compare.csv (+ compare_summary.csv, compare_unmatched.csv); return the
    terminal table."""
    a, b, out = Path(a), Path(b), Path(out)
    folder_a, folder_b = load_folder(a), load_folder(b)
    # each folder analysed once (its rounds merged there); compare lays the two analyses side by side
    analysis_a, analysis_b = analyse(folder_a.results), analyse(folder_b.results)
    matches, only_a, only_b = match_merged(analysis_a.merged, analysis_b.merged)
    names = [_scenario_names(folder) for folder in (folder_a, folder_b)]
    if names[0] != names[1]:
        what = f"A ran scenario {', '.join(names[0])} but B ran scenario {', '.join(names[1])}"
        if not matches:  # not "(no matched runs)": the folders answer different questions
            raise UserError(f"compare: {what}, and no run of B has the shape and toggles of a run of A; compare "
                            f"two result folders of the same scenario")
        different = f"note: {what}; only runs with the same shape and toggles are compared"
    else:
        different = ""
    rows = _rows(matches, bands)
    columns = [Column("run"), Column("metric"), Column("a", "A"), Column("b", "B"),
               Column("ratio", "B/A", ci=("ci_lo", "ci_hi")), Column("p_value", "p (Mann-Whitney)"),
               Column("change", mark_key="direction"), Column("matched_by"), Column("shape"),
               Column("toggles_on"), Column("basis"), Column("stable", "stability")]
    overview = Section("Runs compared")
    overview.blocks.append(Text(f"A (before): {a.resolve()}; B (after): {b.resolve()}. {len(matches)} "
                                f"matched runs, {len(only_a)} only in A, {len(only_b)} only in B."))
    overview.blocks.append(Text(
        f"B/A ratio of the summary value; brackets: {CI_LEVEL:.0%} bootstrap CI of the ratio of sample "
        f"medians. A change is significant when the two-sided Mann-Whitney p < {ALPHA} and the CI excludes "
        "1; '~' marks the rest. Throughputs are tested on the latency samples they derive from. basis "
        "'rounds': both folders ran two or more interleaved rounds, and the per-round medians are the samples "
        "(a round is a separate process); 'iterations': one round, and a change inside the metric's run-to-run "
        "band (perfbench/analysis/noise_band.py, --band) is not significant.", note=True))
    summary = _summary_rows(matches, bands)
    if summary:
        summary_columns = [Column("metric"), Column("pairs"), Column("geomean_ratio", "geometric mean B/A"),
                           Column("faster"), Column("slower"), Column("not_significant")]
        overview.blocks.append(Table("compare_summary", summary_columns, summary,
                                     caption="Summary over matched runs"))
    per_run = Section("Per run")
    per_run.blocks.append(Table("compare", columns, rows) if rows else Text("No runs matched.", note=True))
    unmatched = Section("Only on one side")
    one_side = [{"side": side, "run_id": r.run_id, "status": r.status, "shape": r.shape().label(),
                 "toggles_on": combo_label(r.effective_on())} for side, runs in (("A", only_a), ("B", only_b))
                for r in runs]
    if one_side:
        unmatched_columns = [Column("side"), Column("run_id"), Column("status"), Column("shape"),
                             Column("toggles_on")]
        unmatched.blocks.append(Table("compare_unmatched", unmatched_columns, one_side))
    else:
        unmatched.blocks.append(Text("Every run has a match.", note=True))
    op_diffs = op_diff_section(folder_a, folder_b, matches)  # None when no pair kept traces
    write_page(out / "compare.html", out, "perfbench compare", f"{a.name} -> {b.name}",
               [overview, per_run, unmatched, *([op_diffs] if op_diffs else [])], owned_csvs="compare*.csv")
    if not rows:  # compare.csv always exists, even when nothing matched
        atomic_write_text(out / "compare.csv", Table("compare", columns).csv_text())
    terminal = _terminal(a, b, rows, only_a, only_b)
    return f"{different}\n{terminal}" if different else terminal

