"""The report's MoE expert-load section: one row per (run, phase, layer) with the hand-computed summary."""

from __future__ import annotations

import csv

from perfbench.analysis.expert_load import load_record
from perfbench.report import build_report
from perfbench.results import load_results, write_results


def test_expert_load_table_and_missing_phase_note(tmp_path, make_folder, planted):
    folder = make_folder(tmp_path, failed=False, traces=False,
                         drop=tuple(k for k in planted.run_ids if k not in ("r-base", "r-grouped_moe")))
    results = sorted(load_results(folder), key=lambda r: r.run_id)
    # 4 experts on 2 EP ranks, top-2, 3 tokens: expert 2 took 3 of the 6 assignments
    results[0].expert_load = load_record({"prefill": {0: [1, 0, 3, 2]}}, num_experts=4, top_k=2, ep_size=2,
                                         counted="one iteration",
                                         not_recorded={"decode": "graph_mode: compiled decode"})
    write_results(folder, results)
    text = build_report(folder).read_text()
    assert "<h2>MoE expert load</h2>" in text and "decode: graph_mode: compiled decode" in text
    with open(folder / "report" / "expert_load.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["run_id"] == results[0].run_id and row["phase"] == "prefill" and row["layer"] == "0"
    assert (row["assignments"], row["max_per_expert"], row["hottest_expert"]) == ("6", "3", "2")
    assert float(row["imbalance"]) == 2.0 and row["ep_rank_totals"] == "1 / 5"
    assert abs(float(row["ep_rank_imbalance"]) - 5 / 3) < 1e-12
