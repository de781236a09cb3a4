"""`perfbench calibrate --ops`: the op-level A/A noise of the recorded job, simulated (perfbench/analysis/
op_calibration.py), and its lines in calibrate's output."""

from __future__ import annotations

from perfbench.analysis.op_calibration import DEFAULT_JOBS, calibrate_ops, op_noise
from perfbench.analysis.sequential import DecisionRule
from perfbench.errors import UserError
from perfbench.results.ab_record import ABRecord
from perfbench.results.op_noise_record import OpNoise

SHOWN = 8  # groups in the printed list (the noise file holds them all)


def op_calibration(ab: ABRecord, cap_s: float, startup_s: float, jobs: int = DEFAULT_JOBS) -> OpNoise:
    """The A/A job's op epochs as noise, with what the simulated `ab --ops` jobs found."""
    if ab.ops is None or not ab.ops.pairs:
        raise UserError("--ops: the A/A job has no op epochs (record with --ops, or read a folder of `ab --ops`)")
    noise = op_noise(ab.ops.pairs, ab.cluster_seconds)
    if len(noise.epochs) < 3:
        raise UserError(f"--ops: the A/A job has {len(noise.epochs)} op epochs; calibrate needs at least 3")
    return calibrate_ops(noise, DecisionRule(), cap_s, startup_s, jobs)


def op_lines(noise: OpNoise) -> list[str]:
    false = f"{noise.false_rate:.1%}" if noise.false_rate is not None else "not simulated"
    lines = [f"ops: {len(noise.epochs)} A/A op epochs recorded; {noise.jobs} simulated jobs of {noise.epochs_per_job} "
             f"op epochs: the family names a group or branch in {false} of A/A jobs; a {noise.shift:.0%} shift in "
             f"one group alone is named in:"]
    for d in noise.detection[:SHOWN]:
        lines.append(f"  {d.detected:6.1%}  {d.group} ({d.share_of_branch:.0%} of its branch; something else named "
                     f"in {d.others_named:.1%})")
    if len(noise.detection) > SHOWN:
        lines.append(f"  ... {len(noise.detection) - SHOWN} more groups in the noise file (ops.detection)")
    if noise.epochs_per_job > len(noise.epochs):
        lines.append(f"  warning: {len(noise.epochs)} op epochs recorded, fewer than the {noise.epochs_per_job} of a "
                     "job at this cap: simulated jobs repeat epochs, which understates the spread and overstates the "
                     "rates; record longer (--record-time)")
    return lines
