"""The report's "ops that moved" section of an `ab --ops` job."""

from __future__ import annotations

from perfbench.analysis.op_ab import op_verdicts
from perfbench.analysis.sequential import DecisionRule
from perfbench.pages.table import Table
from perfbench.report.ab_ops import ops_section
from perfbench.results.op_ab_record import OpABRecord
from perfbench.results.op_group import OpGroup
from tests.perfbench.profiling.op_profiles import op_pairs, profile


def test_the_section_lists_the_branches_and_the_moved_groups_with_intervals() -> None:
    ops = op_verdicts(op_pairs(profile(), profile({("full_attention", "moe", "aten::mm"): 1.10}), epochs=20),
                      DecisionRule())
    section = ops_section(ops)
    assert section is not None and section.title == "Ops that moved"
    moved = next(b for b in section.blocks if isinstance(b, Table) and b.name == "ab_ops_moved")
    groups = [r for r in moved.rows if "(branch)" not in str(r["what"])]
    assert [r["what"] for r in groups] == [OpGroup("moe", "aten::mm", "decode", "full_attention").label]
    assert groups[0]["lo"] is not None and groups[0]["hi"] is not None and groups[0]["verdict"] == "slower (regression)"
    assert {str(r["what"]) for r in moved.rows} >= {"moe (branch)", "norm (branch)"}


def test_a_fusion_is_listed_as_a_cost_shift_and_a_job_without_ops_has_no_section() -> None:
    section = ops_section(op_verdicts(op_pairs(profile(), profile(fused_norm=True), seed=5), DecisionRule()))
    assert section is not None
    moved = next(b for b in section.blocks if isinstance(b, Table) and b.name == "ab_ops_moved")
    one_sided = [r for r in moved.rows if r["present"] != "both"]
    assert one_sided and all(r["call"].startswith("cost shift") for r in one_sided)
    assert ops_section(None) is None
    empty = ops_section(OpABRecord(note="no op epochs: two processes"))
    assert empty is not None and "two processes" in empty.blocks[0].text  # type: ignore[union-attr]
