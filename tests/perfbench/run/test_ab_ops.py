"""`perfbench ab --ops`: its record and table from synthetic op epochs, and one end-to-end job on the working
tree that asserts only structure (the ops table, named groups, an exit code of 0, 1 or 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfbench.analysis.sequential import DecisionRule
from perfbench.results.ab_record import ABRecord, read_ab_record
from perfbench.results.op_group import BRANCHES, OpGroup
from perfbench.run.ab_ops import TWO_PROCESSES_NOTE, op_seed, ops_record, ops_table
from tests.perfbench.profiling.op_profiles import op_pairs, profile
from tests.perfbench.run.test_ab import REPO, TINY
from tests.records_kit import ab_record


def test_the_record_round_trips_through_ab_json_and_the_table_names_the_moved_group() -> None:
    record = ops_record(op_pairs(profile(), profile({("full_attention", "moe", "aten::mm"): 1.10}), epochs=20),
                        DecisionRule())
    ab = ab_record(ops=record)
    again = ABRecord.model_validate_json(ab.model_dump_json())
    assert again.ops == record
    lines = ops_table(record)
    label = OpGroup("moe", "aten::mm", "decode", "full_attention").label
    moved = [line for line in lines if label in line]
    assert len(moved) == 1 and "slower" in moved[0] and "moved" in moved[0] and "REGRESSION" in moved[0]
    assert "profiler overhead +10%" in lines[0]


def test_no_op_epoch_is_said_not_judged() -> None:
    record = ops_record([], DecisionRule(), TWO_PROCESSES_NOTE)
    assert record.epochs == 0 and not record.groups
    assert ops_table(record) == [f"ops: {TWO_PROCESSES_NOTE}"]


def test_the_op_order_seed_follows_the_epoch_seed() -> None:
    assert op_seed(5) == op_seed(5) != op_seed(6)


@pytest.mark.slow
def test_ab_ops_on_the_working_tree_prints_the_ops_table_and_records_the_groups(tmp_path: Path) -> None:
    out = tmp_path / "ops"
    done = subprocess.run([sys.executable, "-m", "perfbench.cli", "ab", "HEAD", "--ops", *TINY, "--max-time", "40",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    assert "ops: " in done.stdout and "head/base [interval]" in done.stdout, done.stdout[-2000:]
    record = read_ab_record(out)
    assert record.ops is not None and record.ops.epochs >= 1
    assert record.ops.groups and record.ops.branches
    assert {r.branch for r in record.ops.branches} <= set(BRANCHES)
    assert all(OpGroup.from_label(r.group or "").branch == r.branch for r in record.ops.groups)
    assert record.ops.profiler_overhead is not None


def test_ops_on_one_side_only_come_first_in_the_table() -> None:
    record = ops_record(op_pairs(profile(), profile(fused_norm=True), seed=5), DecisionRule())
    rows = ops_table(record)[2:]
    one_sided = [i for i, line in enumerate(rows) if "only base" in line or "only head" in line]
    assert one_sided == list(range(len(one_sided))) and len(one_sided) >= 2
    assert all("cost shift" in rows[i] for i in one_sided)
