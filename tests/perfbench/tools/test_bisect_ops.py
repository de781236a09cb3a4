"""`perfbench bisect --ops`: every comparison an `ab --ops` job, and the outcome names the op groups that moved in
the first bad commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbench.analysis.op_ab import op_verdicts
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.op_group import OpGroup
from perfbench.tools.bisect import Comparison, ab_comparator, bisect
from tests.perfbench.profiling.op_profiles import op_pairs, profile
from tests.perfbench.tools.test_bisect import FakeAB, _repo
from tests.records_kit import ab_record

SLOWED = OpGroup("moe", "aten::mm", "decode", "full_attention").label


def test_the_comparator_runs_ab_with_ops_and_keeps_the_moved_groups(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    ops = op_verdicts(op_pairs(profile(), profile({("full_attention", "moe", "aten::mm"): 1.10}), epochs=20),
                      DecisionRule())

    def ab_job(base, head, scenario, overrides, out_dir, settings, report=None):  # noqa: ANN001, ANN202
        from perfbench.run.ab import ABOutcome

        asked.append(settings.ops)
        Path(out_dir).mkdir(parents=True)
        record = ab_record(mode="one process", ops=ops, verdicts={"r1": {"tpot_ms": {
            "ratio": 1.04, "ci_low": 1.02, "ci_high": 1.06, "pairs": 30, "verdict": "slower"}}})
        (Path(out_dir) / "ab.json").write_text(record.model_dump_json())
        return ABOutcome(record, Path(out_dir), 1)

    monkeypatch.setattr("perfbench.run.ab.ab_job", ab_job)
    found = ab_comparator(None, "tpot_ms", [], 60.0, ops=True)("a" * 40, "b" * 40, tmp_path / "one")
    assert asked == [True] and found.code == 1
    assert found.moved.startswith("moe (branch)") and SLOWED in found.moved
    plain = ab_comparator(None, "tpot_ms", [], 60.0)("a" * 40, "b" * 40, tmp_path / "two")
    assert asked == [True, False] and SLOWED in plain.moved  # the record's ops are kept whoever asked for them


def test_the_outcome_names_the_ops_of_the_first_bad_commit(tmp_path: Path) -> None:
    shas = _repo(tmp_path / "repo")
    fake = FakeAB(tmp_path / "repo")

    def with_ops(base: str, head: str, out: Path) -> Comparison:
        found = fake(base, head, out)
        return found.model_copy(update={"moved": f"{SLOWED} 1.100x [1.07, 1.13] slower"} if found.code == 1 else {})

    text = bisect(tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "out", with_ops,
                  say=lambda _: None)
    assert f"ops that moved in the first bad commit (ab --ops): {SLOWED} 1.100x" in text
    plain = bisect(tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "plain", fake,
                   say=lambda _: None)
    assert "ops that moved" not in plain
