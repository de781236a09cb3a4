"""`perfbench calibrate --ops` on synthetic A/A op epochs: the family rarely names anything under A/A, a 10% shift
in a large group alone is named, and the same group with nothing injected is not."""

from __future__ import annotations

import pytest

from perfbench.analysis.op_calibration import calibrate_ops, epochs_per_job, op_noise, simulate_named
from perfbench.analysis.sequential import DecisionRule
from perfbench.errors import UserError
from perfbench.results.op_group import OpGroup
from perfbench.results.op_noise_record import OpNoise
from perfbench.run.calibrate_ops import op_calibration, op_lines
from tests.perfbench.profiling.op_profiles import op_pairs, profile
from tests.records_kit import ab_record

RULE = DecisionRule()
LARGE = "r0/" + OpGroup("moe", "aten::mm", "decode", "full_attention").label


@pytest.fixture(scope="module")
def noise() -> OpNoise:
    return op_noise(op_pairs(profile(), profile(), epochs=30, seed=11), [10.0] * 30)


def test_the_recorded_noise_keeps_every_epoch_and_each_groups_share_of_its_branch(noise: OpNoise) -> None:
    assert len(noise.epochs) == 30 and LARGE in noise.epochs[0].groups and "r0/moe" in noise.epochs[0].branches
    assert noise.shares[LARGE] == pytest.approx(600 / 1500, rel=0.05)  # of both layer types' MoE time
    assert epochs_per_job(noise, cap_s=130.0, startup_s=10.0) == 12


def test_a_shift_in_one_group_is_detected_and_nothing_injected_is_not(noise: OpNoise) -> None:
    shifted = simulate_named(noise, LARGE, 0.10, 100, 12, RULE)
    aa = simulate_named(noise, LARGE, 0.0, 100, 12, RULE)
    assert sum(LARGE in n for n in shifted) >= 80
    assert sum(LARGE in n for n in aa) <= 10


def test_the_calibration_reports_the_false_rate_and_a_detection_per_group(noise: OpNoise) -> None:
    found = calibrate_ops(noise, RULE, cap_s=130.0, startup_s=10.0, jobs=60)
    assert found.false_rate is not None and found.false_rate <= 0.15
    by_group = {d.group: d for d in found.detection}
    assert set(by_group) == set(noise.epochs[0].groups)
    assert by_group[LARGE].detected >= 0.8 and by_group[LARGE].others_named <= 0.2
    assert found.epochs_per_job == 12 and found.jobs == 60
    lines = op_lines(found)
    assert f"in {found.false_rate:.1%} of A/A jobs" in lines[0]
    assert found.detection[0].group in lines[1]


def test_a_job_without_op_epochs_cannot_be_calibrated() -> None:
    with pytest.raises(UserError, match="no op epochs"):
        op_calibration(ab_record(), 110.0, 10.0)


def test_a_recording_shorter_than_a_job_is_warned_about(noise: OpNoise) -> None:
    short = noise.model_copy(update={"epochs": noise.epochs[:5]})
    found = calibrate_ops(short, RULE, cap_s=130.0, startup_s=10.0, jobs=5)
    assert "warning: 5 op epochs recorded, fewer than the 12" in op_lines(found)[-1]
    enough = calibrate_ops(noise, RULE, cap_s=130.0, startup_s=10.0, jobs=5)
    assert not any("warning" in line for line in op_lines(enough))
