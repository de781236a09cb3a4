"""MoE expert-load summary: per layer max / mean per expert, hottest expert, per EP rank totals (hand-computed)."""

from __future__ import annotations

import pytest

from perfbench.analysis.expert_load import layer_loads, load_lines, load_record, worst_imbalance

# 8 experts on 2 EP ranks (0-3, 4-7), top-2; prefill 6 tokens (12 assignments), decode 2 tokens (4)
TOTALS = {"prefill": {0: [4, 0, 1, 1, 2, 1, 3, 0], 1: [2, 2, 1, 1, 2, 1, 2, 1]},
          "decode": {0: [0, 0, 0, 0, 1, 1, 2, 0]}}


def record(**extra) -> dict:
    return load_record(TOTALS, num_experts=8, top_k=2, ep_size=2, counted="one iteration", **extra)


def test_per_layer_summary_is_the_hand_computed_one():
    loads = {(load.phase, load.layer): load for load in layer_loads(record())}
    first = loads["prefill", 0]
    assert (first.assignments, first.max_per_expert, first.mean_per_expert) == (12, 4, 1.5)
    assert first.imbalance == pytest.approx(4 / 1.5) and first.hottest_expert == 0
    assert first.rank_totals == (6, 6) and first.rank_imbalance == pytest.approx(1.0)
    assert loads["prefill", 1].imbalance == pytest.approx(2 / 1.5)
    decode = loads["decode", 0]
    assert decode.hottest_expert == 6 and decode.rank_totals == (0, 4)
    assert decode.rank_imbalance == pytest.approx(2.0) and decode.imbalance == pytest.approx(2 / 0.5)


def test_worst_imbalance_per_phase_and_an_empty_record():
    assert worst_imbalance(record(), "prefill") == pytest.approx(4 / 1.5)
    assert worst_imbalance(record(), "decode") == pytest.approx(4.0)
    assert worst_imbalance({}, "prefill") is None and layer_loads({}) == [] and load_lines({}) == []


def test_text_lines_name_hottest_expert_rank_totals_and_missing_phases():
    lines = load_lines(record(not_recorded={"decode": "graph_mode: compiled"}))
    assert "EP size 2" in lines[0]
    assert "prefill layer   0: 12 assignments" in lines[1] and "hottest expert 0" in lines[1]
    assert lines[1].endswith("per EP rank 6, 6")
    assert lines[-1] == "  decode: not recorded (graph_mode: compiled)"
    assert record()["experts_by_rank"] == [[0, 4], [4, 8]]
