"""Tests build result records (RunResult, TraceRecord, ABRecord, ABVerdict, ABPair) through tests/records_kit.py
only: a new field then needs one default in one place, not forty hand-built records changed."""

from __future__ import annotations

import re
from pathlib import Path

from perfbench.results import RunPlan, RunSpec
from tests.records_kit import ab_record, ab_verdict, run_result, trace_record

TESTS = Path(__file__).resolve().parent
KIT = TESTS / "records_kit.py"
# a call of the class itself; RunResult.from_dict(...) and the kit's run_result(...) are not
HAND_BUILT = re.compile(r"(?<![\w.])(RunResult|TraceRecord|ABRecord|ABVerdict|ABPair)\(")


def hand_built(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if HAND_BUILT.search(line)]


def test_only_the_kit_builds_result_records_by_hand() -> None:
    found = [f"{path.relative_to(TESTS)}: {line}" for path in sorted(TESTS.rglob("*.py"))
             if path not in (KIT, Path(__file__).resolve()) for line in hand_built(path.read_text())]
    assert found == [], "build these with tests/records_kit.py:\n" + "\n".join(found)


def test_the_check_sees_a_hand_built_record() -> None:
    assert hand_built('    run = RunResult(run_id="r", status="ok", spec=spec)\n')
    assert hand_built('[ABRecord(mode="one process")]') and hand_built("trace=TraceRecord(mode='eager')")
    assert not hand_built("RunResult.from_dict(raw)\nrun_result('r1')\n-> RunResult:\nab_record(verdicts={})")


def test_the_builders_leave_unnamed_fields_at_the_records_defaults() -> None:
    run = run_result("r7", status="error", error="boom", env={"torch": "2.13.0"})
    assert (run.run_id, run.status, run.error, run.env.torch) == ("r7", "error", "boom", "2.13.0")
    assert run.spec == RunSpec(run_id="r7", scenario="s") and run.plan == RunPlan()
    assert run.samples == {} and run.summary.tpot_ms_median is None and run.trace == trace_record()
    assert trace_record(decode_ops_per_step=12.0).plan_mismatches == []
    job = ab_record(verdicts={"r": {"tpot_ms": ab_verdict(1.2, "slower", ci_low=1.1, ci_high=1.3)}})
    assert job.mode == "two processes" and job.ratios()[0].ci_low == 1.1 and job.ratios()[0].method == "bootstrap"
