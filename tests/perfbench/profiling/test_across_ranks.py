"""Per-rank steps and the cluster lines, on the two-rank Ascend fixture (rank 1 has only step_trace_time.csv)."""

from __future__ import annotations

import pandas as pd
import pytest

from perfbench.profiling import load_trace
from perfbench.profiling.across_ranks import per_rank_steps, rank_summary, slowest
from perfbench.profiling.events import events_from_columns
from perfbench.profiling.summary import cluster_lines, trace_steps

from .conftest import NPU_FIXTURES, require

LEVEL2 = "msinsight_st_qwen3_0.6b_level2"


def _step_trace(rank: int) -> pd.DataFrame:
    folder = require(NPU_FIXTURES / LEVEL2 / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    return pd.read_csv(folder / "step_trace_time.csv")


def test_every_rank_gets_rows_from_the_files_it_has():
    trace = load_trace(NPU_FIXTURES / LEVEL2)

    steps = trace_steps(trace).set_index("rank")

    assert list(steps.index) == [0, 1]
    assert steps.loc[0, "source"] == "events" and steps.loc[1, "source"] == "step_trace_time.csv"
    for rank in (0, 1):
        theirs = _step_trace(rank).iloc[0]
        assert steps.loc[rank, "compute_us"] == pytest.approx(theirs["Computing"], rel=1e-4)
        assert steps.loc[rank, "communication_us"] == pytest.approx(theirs["Communication"], rel=1e-4)
        assert steps.loc[rank, "free_us"] == pytest.approx(theirs["Free"], rel=1e-4)
        assert steps.loc[rank, "step_us"] == pytest.approx(theirs["Stage"])
        assert steps.loc[rank, "preparing_us"] == pytest.approx(theirs["Preparing"])
        assert steps.loc[rank, "bubble_us"] == pytest.approx(theirs["Bubble"])


def test_cluster_lines_name_the_slower_rank_and_the_links():
    trace = load_trace(NPU_FIXTURES / LEVEL2)
    stages = {rank: float(_step_trace(rank).iloc[0]["Stage"]) for rank in (0, 1)}
    slower = max(stages, key=stages.get)
    over_median = 100 * (stages[slower] / ((stages[0] + stages[1]) / 2) - 1)

    lines = cluster_lines(trace_steps(trace), trace.extra_tables["ascend_communication_links"],
                          trace.extra_tables["ascend_communication_matrix"])

    assert f"slowest rank: {slower}, steps {over_median:.2f}% longer than the median rank's" in lines
    assert any(line.startswith("  HCCS (part of SDMA): rank 0") for line in lines)
    assert any(line.startswith("slowest link: ") for line in lines)


def test_host_only_ranks_wait_is_step_time_outside_compute_and_communication():
    """Two CPU ranks, one decode step each: rank 1 spends 30 µs more waiting; hand-computed."""
    def rank(r: int, wait: float) -> dict:
        return {"name": ["aten::mm", "gloo:all_reduce"], "category": ["matmul", "communication"],
                "step": [0, 0], "side": ["host", "host"], "start_us": [0.0, 10.0 + wait],
                "dur_us": [10.0, 5.0], "rank": [r, r]}
    events = pd.concat([events_from_columns(rank(0, 0.0)), events_from_columns(rank(1, 30.0))],
                       ignore_index=True)

    ranks = rank_summary(per_rank_steps(events)).set_index("rank")

    assert ranks["step_us"].tolist() == [15.0, 45.0]
    assert ranks["wait_us"].tolist() == [0.0, 30.0]
    assert slowest(ranks.reset_index(), "rank", "step_us") == (1, pytest.approx(100 * (45 / 30 - 1)))
