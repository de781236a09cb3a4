"""When interleaved blocks stop: the minimum, a decision at a planned look against the group's reference (the
verdict's own rule, epochs as clusters), the caps."""

from __future__ import annotations

from types import SimpleNamespace

from perfbench.analysis.sequential import DecisionRule, SequentialJob
from perfbench.measure.blocks import CONVERGED_PAIRED, BlockRun, stop_reason
from perfbench.measure.run_steps import Timings
from perfbench.measure.stopping import MAX_ITERATIONS, MAX_TIME
from perfbench.results import RunSpec


def _run(on: dict[str, bool], ttft: list[float], tpot: list[float], per_epoch: int = 2) -> BlockRun:
    spec = RunSpec(run_id=str(sorted(on)), scenario="s", toggles=on)
    return BlockRun(SimpleNamespace(spec=spec), Timings(ttft, tpot, [], []), list(range(len(ttft))),
                    [i // per_epoch for i in range(len(ttft))])


SPEC = RunSpec(run_id="x", scenario="s", iterations=3, max_iterations=10, max_time_s=2.0, target_rel_ci=0.03)


def _looks() -> SequentialJob[tuple[str, str]]:
    return SequentialJob(DecisionRule(looks=3), max_time_s=4.0, tests=1)  # two runs x 2.0 s


def test_blocks_go_on_until_the_minimum():
    runs = [_run({}, [10.0] * 2, [1.0] * 2), _run({"chunk_gdr": True}, [5.0] * 2, [1.0] * 2)]
    assert stop_reason(runs, 2, 0.1, SPEC, _looks(), 0.1) is None


def test_tight_pairs_stop_at_the_first_look_although_the_host_drifts():
    drift = [1.0, 1.6, 0.8, 1.3]  # shared by both runs of a block
    base = _run({}, [10 * d for d in drift], [1 * d for d in drift])
    gdr = _run({"chunk_gdr": True}, [5 * d for d in drift], [1.001 * d for d in drift])
    looks = _looks()
    assert stop_reason([base, gdr], 4, 1.0, SPEC, looks, 0.2) is None  # before 1/3 of the budget: no look
    assert looks.plan.done == 0
    # at the look: TTFT 2x faster and TPOT within 0.1% in both epochs, exactly: decided even at 99.9%
    assert stop_reason([base, gdr], 4, 1.5, SPEC, looks, 0.2) == CONVERGED_PAIRED
    assert looks.plan.done == 1


def test_loose_pairs_run_to_the_block_cap_or_the_time_cap():
    base = _run({}, [10.0, 10.0, 10.0, 10.0], [1.0] * 4)
    noisy = _run({"chunk_gdr": True}, [5.0, 7.0, 4.0, 8.5], [1.0] * 4)
    assert stop_reason([base, noisy], 4, 1.5, SPEC, _looks(), 0.2) is None
    assert stop_reason([base, noisy], 10, 1.5, SPEC, _looks(), 0.2) == MAX_ITERATIONS
    # the time budget is per run (two runs get 2 x 2.0 s); an epoch that would pass it is not started
    assert stop_reason([base, noisy], 4, 3.7, SPEC, None, 0.2) is None
    assert stop_reason([base, noisy], 4, 3.9, SPEC, None, 0.2) == MAX_TIME


def test_a_failed_run_leaves_the_group_and_the_rest_can_converge():
    base = _run({}, [10.0] * 4, [1.0] * 4)
    broken = _run({"fused_rope": True}, [5.0, 9.0], [1.0, 3.0])
    broken.error = "RuntimeError: boom"
    fine = _run({"chunk_gdr": True}, [5.0] * 4, [1.0] * 4)
    assert stop_reason([base, broken, fine], 4, 1.5, SPEC, _looks(), 0.2) == CONVERGED_PAIRED
