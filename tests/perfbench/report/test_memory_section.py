"""The report's memory section: every ok run's peak and split, and the peak against the same shape's run
with the fewest toggles on."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.pages.table import Table
from perfbench.report.memory import memory_rows, memory_section
from tests.perfbench.report.conftest import failed_run, synthetic_run


def test_each_ok_run_has_its_split_and_its_peak_against_the_fewest_toggles() -> None:
    rng = np.random.default_rng(0)
    base, rope = synthetic_run("base", set(), rng), synthetic_run("rope", {"fused_rope"}, rng)
    base.summary.update({"peak_mem_mb": 300.0, "mem_weights_mb": 100.0, "mem_state_mb": 20.0,
                         "mem_rest_mb": 180.0})
    rope.summary.update({"peak_mem_mb": 280.0, "mem_weights_mb": 100.0, "mem_state_mb": 20.0,
                         "mem_rest_mb": 160.0})
    rows = {r["run_id"]: r for r in memory_rows([rope, base, failed_run("bad", "RuntimeError: x")])}
    assert set(rows) == {"base", "rope"}  # a failed run has no peak to show
    assert rows["rope"]["peak_vs_fewest_mb"] == pytest.approx(-20.0)
    assert rows["base"]["peak_vs_fewest_mb"] is None and rows["rope"]["mem_weights_mb"] == 100.0
    (table,) = [b for b in memory_section([base, rope]).blocks if isinstance(b, Table)]
    assert [c.key for c in table.columns][-6:] == ["peak_mem_mb", "mem_weights_mb", "mem_state_mb",
                                                   "mem_rest_mb", "mem_graph_pool_mb", "peak_vs_fewest_mb"]


def test_no_recorded_peak_says_so() -> None:
    section = memory_section([failed_run("bad", "RuntimeError: x")])
    assert "No run recorded its peak memory." in section.blocks[0].text
