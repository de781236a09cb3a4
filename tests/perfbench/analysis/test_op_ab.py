"""`perfbench ab --ops`' judgement on synthetic profile pairs (tests/perfbench/profiling/op_profiles.py): the
group a planted change moved is named and nothing else; a move inside one branch is a shift; a fusion toggle
flipped between the arms is a cost shift inside its branch; A/A names nothing."""

from __future__ import annotations

import pytest

from perfbench.analysis.op_ab import op_verdicts
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.op_ab_record import OpABRecord
from perfbench.results.op_group import OpGroup
from tests.perfbench.profiling.op_profiles import op_pairs, profile

RULE = DecisionRule()


def named(record: OpABRecord) -> set[str]:
    """Every group and branch the record calls a change (moved or shift), as "group" or "branch:<name>"."""
    return {r.group or f"branch:{r.branch}" for r in [*record.groups, *record.branches] if r.call}


def test_a_group_slowed_by_ten_percent_is_named_and_nothing_else() -> None:
    key = ("full_attention", "moe", "aten::mm")
    record = op_verdicts(op_pairs(profile(), profile({key: 1.10}), epochs=20), RULE)
    label = OpGroup("moe", "aten::mm", "decode", "full_attention").label
    assert named(record) == {label, "branch:moe"}  # the group, and the branch it made slower (by 4%)
    (row,) = [r for r in record.groups if r.group == label]
    assert row.verdict == "slower" and row.call == "moved" and row.regression
    assert row.ratio == pytest.approx(1.10, abs=0.02)
    assert row.detectable is not None and row.detectable < 0.10
    assert [(r.group, r.branch) for r in record.moved()] == [(None, "moe"), (label, "moe")]
    assert record.groups[0].group == label  # the called group leads the table


def test_a_change_under_the_margin_is_not_named() -> None:
    key = ("full_attention", "moe", "aten::mm")
    record = op_verdicts(op_pairs(profile(), profile({key: 1.005})), RULE)
    assert named(record) == set()
    assert not any(r.regression for r in [*record.groups, *record.branches])


def test_time_moved_between_two_ops_of_one_branch_is_a_shift() -> None:
    # 8 µs of pow's 40 move to mul: the norm branch's total is unchanged
    changes = {("linear_attention", "norm", "aten::pow"): 0.8, ("linear_attention", "norm", "aten::mul"): 38 / 30}
    record = op_verdicts(op_pairs(profile(), profile(changes), seed=3), RULE)
    calls = {r.group: r.call for r in record.groups if r.call}
    assert calls == {OpGroup("norm", "aten::pow", "decode", "linear_attention").label: "shift",
                     OpGroup("norm", "aten::mul", "decode", "linear_attention").label: "shift"}
    norm = [b for b in record.branches if b.branch == "norm"]
    assert [b.verdict for b in norm] == ["same"]
    assert not any(r.regression for r in [*record.groups, *record.branches])


def test_the_same_move_with_the_branch_slower_is_not_a_shift() -> None:
    # the near miss of the shift: mul gains 8 µs but pow loses nothing, so the norm branch itself is slower
    changes = {("linear_attention", "norm", "aten::mul"): 2.0, ("full_attention", "norm", "aten::mul"): 2.0}
    record = op_verdicts(op_pairs(profile(), profile(changes), seed=3), RULE)
    mul = [r for r in record.groups if r.group and "aten::mul" in r.group and r.call]
    assert mul and all(r.call == "moved" for r in mul)
    assert any(b.branch == "norm" and b.verdict == "slower" for b in record.branches)


def test_a_fusion_toggle_flipped_between_arms_is_a_cost_shift_in_its_branch() -> None:
    record = op_verdicts(op_pairs(profile(), profile(fused_norm=True), seed=5), RULE)
    one_sided = [r for r in record.groups if r.present != "both"]
    assert {r.present for r in one_sided} == {"only base", "only head"}
    assert record.groups[:len(one_sided)] == one_sided  # ops on one side only come first
    assert {r.branch for r in one_sided} == {"norm"}
    assert all(r.call == "shift" and not r.regression for r in one_sided)
    assert any("fused_rmsnorm" in (r.group or "") and r.present == "only head" for r in one_sided)
    # every op the fusion replaced is named on its own, never pooled into the branch's small ops
    gone = {OpGroup.from_label(r.group or "").op for r in one_sided if r.present == "only base"}
    assert gone == {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"}
    assert {(b.branch, b.verdict) for b in record.branches if b.branch == "norm"} == {("norm", "same")}
    assert not any(r.regression for r in [*record.groups, *record.branches])


def test_a_fused_op_that_costs_more_than_what_it_replaced_is_no_shift() -> None:
    # near miss of the fusion: the fused op takes twice the time, so the norm branch is slower, not conserved
    fused = profile(fused_norm=True)
    fused = {k: (v * 2 if k[2] == "model::fused_rmsnorm" else v) for k, v in fused.items()}
    record = op_verdicts(op_pairs(profile(), fused, seed=5), RULE)
    assert any(b.branch == "norm" and b.verdict == "slower" and b.regression for b in record.branches)
    assert all(r.call == "moved" for r in record.groups if r.present != "both")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_over_a_names_no_group(seed: int) -> None:
    record = op_verdicts(op_pairs(profile(), profile(), seed=seed), RULE)
    assert named(record) == set()
    assert all(r.present == "both" for r in record.groups)
    assert record.profiler_overhead == pytest.approx(0.1)
    assert record.epochs == 12


def test_small_groups_are_pooled_per_branch() -> None:
    record = op_verdicts(op_pairs(profile(), profile()), RULE, small_share=0.02)
    small = {r.group for r in record.groups if r.group and "(small ops)" in r.group}
    assert OpGroup.small_ops("embed_head").label in small
    assert not any(r.group and "aten::embedding" in r.group for r in record.groups)
