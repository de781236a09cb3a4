"""The report's opening: the best plan against the baseline and each plan's speed-up with its CI and verdict
(faster / slower / same / inconclusive: perfbench/results/verdicts.py), then the warnings: the folder
analysis (perfbench/analysis/folder_analysis.py) laid out."""

from __future__ import annotations

from typing import Any

from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.analysis.plan_warnings import host_notes
from perfbench.analysis.speedup import plan_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results.verdicts import words_line


def headline_section(analysis: FolderAnalysis) -> Section:
    section = Section("Headline")
    merged, base, gains = analysis.merged, analysis.baseline, analysis.gains
    if base is None:
        section.blocks.append(Text("No run finished: nothing to compare.", note=True))
        return section
    ranked = [r for r in merged if r.status == "ok" and r is not base
              and gains.get(r.spec.combination_id, {}).get("tpot_ms") is not None]
    if ranked:
        best = max(ranked, key=lambda r: gains[r.spec.combination_id]["tpot_ms"].value)  # type: ignore[union-attr]
        tpot = gains[best.spec.combination_id]["tpot_ms"]
        ttft = gains[best.spec.combination_id]["ttft_ms"]
        section.blocks.append(Text(
            f"Best plan by TPOT: {plan_label(best)}, vs the baseline ({plan_label(base)}): "
            f"TPOT {tpot.text() if tpot else '-'}; TTFT {ttft.text() if ttft else '-'}."))
    rows: list[dict[str, Any]] = []
    for r in merged:
        if r is base or r.status != "ok":
            continue
        gain = gains.get(r.spec.combination_id, {})
        row: dict[str, Any] = {"plan": plan_label(r), "toggles_on": len(r.ran_on())}
        for key in ("ttft_ms", "tpot_ms"):
            g = gain.get(key)
            if g is not None:
                row.update({f"{key}_speedup": g.value, f"{key}_lo": g.low, f"{key}_hi": g.high,
                            f"{key}_verdict": g.verdict, "basis": g.basis})
        # a run's stability is judged on its own timing window: it says nothing of a speed-up from within-block
        # pairs (whose verdict already accounts for the pairs' spread), so such a row leaves it empty
        if row.get("basis") != "blocks":
            row["stable"] = {True: "yes", False: "no", None: ""}[r.is_stable()]
        rows.append(row)
    rows.sort(key=lambda row: (row["toggles_on"], row["plan"]))
    columns = [Column("plan"), Column("ttft_ms_speedup", "TTFT speed-up", ci=("ttft_ms_lo", "ttft_ms_hi"),
                                      suffix="x"),
               Column("ttft_ms_verdict", "TTFT verdict"),
               Column("tpot_ms_speedup", "TPOT speed-up", ci=("tpot_ms_lo", "tpot_ms_hi"), suffix="x"),
               Column("tpot_ms_verdict", "TPOT verdict"),
               *([Column("stable")] if any(row.get("stable") for row in rows) else []), Column("basis")]
    section.blocks.append(Table("headline", columns, rows,
                                caption=f"Speed-up over the baseline ({plan_label(base)}): baseline / plan, "
                                        f"{CI_LEVEL:.0%} CI; > 1 is faster"))
    section.blocks.append(Text(
        "basis 'blocks': baseline and plan timed in the same interleaved blocks of one process; per re-allocation "
        "epoch the trimmed mean of the within-block log ratios, with a Student t CI over the epochs (Yuen's "
        f"trimmed t from 10); {words_line()}. Runs timed separately: 'rounds' pairs baseline and plan by "
        "interleaved round (t interval); 'iterations' compares one round by a bootstrap over iterations, which "
        "decides nothing (one process per side); a run judged unstable, or a host that ran at another speed, "
        "makes the word 'inconclusive' (see the warnings).", note=True))
    section.blocks.extend(Text(f"HOST: {note}") for note in host_notes(list(analysis.results)))
    for texts in analysis.warnings.values():
        section.blocks.extend(Text(f"WARNING: {warning}") for warning in texts)
    return section
