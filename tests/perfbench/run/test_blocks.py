"""When interleaved blocks stop: the minimum, paired convergence against the group's reference, the caps."""

from __future__ import annotations

from types import SimpleNamespace

from perfbench.results import RunSpec
from perfbench.run.blocks import CONVERGED_PAIRED, BlockRun, stop_reason
from perfbench.run.measure import Timings
from perfbench.run.stopping import MAX_ITERATIONS, MAX_TIME


def _run(on: dict[str, bool], ttft: list[float], tpot: list[float]) -> BlockRun:
    spec = RunSpec(run_id=str(sorted(on)), scenario="s", toggles=on)
    return BlockRun(SimpleNamespace(spec=spec), Timings(ttft, tpot, [], []), list(range(len(ttft))))


SPEC = RunSpec(run_id="x", scenario="s", iterations=3, max_iterations=10, max_time_s=2.0, target_rel_ci=0.03)


def test_blocks_go_on_until_the_minimum():
    runs = [_run({}, [10.0] * 2, [1.0] * 2), _run({"chunk_gdr": True}, [5.0] * 2, [1.0] * 2)]
    assert stop_reason(runs, 2, 0.1, SPEC) is None


def test_tight_pairs_converge_although_the_host_drifts():
    drift = [1.0, 1.6, 0.8, 1.3]  # shared by both runs of a block
    base = _run({}, [10 * d for d in drift], [1 * d for d in drift])
    gdr = _run({"chunk_gdr": True}, [5 * d for d in drift], [1.001 * d for d in drift])
    assert stop_reason([base, gdr], 4, 0.5, SPEC) == CONVERGED_PAIRED


def test_loose_pairs_run_to_the_block_cap_or_the_time_cap():
    base = _run({}, [10.0, 10.0, 10.0, 10.0], [1.0] * 4)
    noisy = _run({"chunk_gdr": True}, [5.0, 7.0, 4.0, 6.5], [1.0] * 4)
    assert stop_reason([base, noisy], 4, 0.5, SPEC) is None
    assert stop_reason([base, noisy], 10, 0.5, SPEC) == MAX_ITERATIONS
    # the time cap is per run: two runs get 2 x 2.0 s
    assert stop_reason([base, noisy], 4, 3.9, SPEC) is None
    assert stop_reason([base, noisy], 4, 4.0, SPEC) == MAX_TIME


def test_a_failed_run_leaves_the_group_and_the_rest_can_converge():
    base = _run({}, [10.0] * 4, [1.0] * 4)
    broken = _run({"fused_rope": True}, [5.0, 9.0], [1.0, 3.0])
    broken.error = "RuntimeError: boom"
    fine = _run({"chunk_gdr": True}, [5.0] * 4, [1.0] * 4)
    assert stop_reason([base, broken, fine], 4, 0.1, SPEC) == CONVERGED_PAIRED
