"""`perfbench bisect` on a real git repository with a comparator that answers from each commit's content: 16
commits, a slowdown planted at commit 11, commit 5 broken."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from perfbench.errors import UserError
from perfbench.tools.bisect import STATE_FILE, Comparison, bisect, bisect_with_code
from tests.cli_helpers import one_error_line


def _repo(path: Path, slow_from: int = 11, broken: int = 5, count: int = 16) -> list[str]:
    """Commits 0..count-1; speed.txt holds the time a run takes (1.0, then 1.3 from `slow_from`), commit
    `broken` adds a file that makes it fail to build."""
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for i in range(count):
        (path / "speed.txt").write_text("1.3\n" if i >= slow_from else "1.0\n")
        broken_file = path / "BROKEN"
        if i == broken:
            broken_file.write_text("syntax error\n")
        else:
            broken_file.unlink(missing_ok=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return shas


class FakeAB:
    """Answers like `perfbench ab` from the commits' files: head/base of speed.txt, slower beyond 5%; a commit
    holding BROKEN does not build (exit 2)."""

    def __init__(self, repo: Path, interrupt_after: int | None = None) -> None:
        self.repo, self.calls, self.interrupt_after = repo, [], interrupt_after

    def _file(self, sha: str, name: str) -> str | None:
        out = subprocess.run(["git", "-C", str(self.repo), "show", f"{sha}:{name}"], capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else None

    def __call__(self, base: str, head: str, out: Path) -> Comparison:
        if self.interrupt_after is not None and len(self.calls) == self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append((base, head))
        if self._file(head, "BROKEN") is not None:
            return Comparison(base=base, head=head, code=2, reason="model/ does not import")
        ratio = float(self._file(head, "speed.txt")) / float(self._file(base, "speed.txt"))
        code = 1 if ratio > 1.05 else 0
        return Comparison(base=base, head=head, code=code, ratio=ratio, ci_low=ratio * 0.98, ci_high=ratio * 1.02)


def test_it_names_commit_11_and_never_blames_the_broken_one(tmp_path):
    shas = _repo(tmp_path / "repo")
    fake = FakeAB(tmp_path / "repo")
    text = bisect(tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "out", fake, say=lambda _: None)
    assert text.splitlines()[0].startswith(f"first bad commit: {shas[11]} (tpot_ms: head/base 1.300x")
    assert fake.calls[0] == (shas[0], shas[15])  # the ends are confirmed first
    assert fake.calls[-1] == (shas[10], shas[11])  # the size: last good against first bad
    assert shas[5] not in text.splitlines()[0]


def test_a_broken_commit_on_the_way_is_labelled_skip(tmp_path):
    shas = _repo(tmp_path / "repo")
    fake = FakeAB(tmp_path / "repo")
    # GOOD 0, BAD 11: the first midpoint is commit 5, which does not build
    text = bisect(tmp_path / "repo", shas[0], shas[11], "s", "tpot_ms", tmp_path / "out", fake, say=lambda _: None)
    assert text.splitlines()[0].startswith(f"first bad commit: {shas[11]}")
    assert f"skipped (did not build, run or decide; never blamed): {shas[5][:10]}" in text
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    labels = {s["head"]: s["code"] for s in state["steps"] if s["base"] == shas[0]}
    assert labels[shas[5]] == 2 and labels[shas[11]] == 1


def test_a_skipped_commit_just_before_the_first_bad_one_is_named_as_possible(tmp_path):
    shas = _repo(tmp_path / "repo", slow_from=6, broken=5)
    text = bisect(tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "out", FakeAB(tmp_path / "repo"),
                  say=lambda _: None)
    assert text.splitlines()[0].startswith(f"first bad commit: {shas[6]}")
    assert f"or one of the skipped commits before it (they could not be tested): {shas[5][:10]}" in text


def test_a_range_without_a_change_says_so_and_blames_nothing(tmp_path):
    shas = _repo(tmp_path / "repo")
    fake = FakeAB(tmp_path / "repo")
    text = bisect(tmp_path / "repo", shas[0], shas[10], "s", "tpot_ms", tmp_path / "out", fake, say=lambda _: None)
    assert text.startswith(f"nothing to bisect: BAD {shas[10][:10]} is not slower than GOOD {shas[0][:10]}")
    assert "no commit blamed" in text and "first bad" not in text
    assert fake.calls == [(shas[0], shas[10])]


def test_an_interrupted_bisect_resumes_without_repeating_a_comparison(tmp_path):
    shas = _repo(tmp_path / "repo")
    args = (tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "out")
    whole = FakeAB(tmp_path / "repo")
    expected = bisect(*args[:5], tmp_path / "whole", whole, say=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        bisect(*args, FakeAB(tmp_path / "repo", interrupt_after=3), say=lambda _: None)
    assert len(json.loads((tmp_path / "out" / STATE_FILE).read_text())["steps"]) == 3
    rest = FakeAB(tmp_path / "repo")
    assert bisect(*args, rest, say=lambda _: None) == expected
    assert rest.calls == whole.calls[3:]


def test_a_state_of_another_bisect_is_refused(tmp_path):
    shas = _repo(tmp_path / "repo")
    bisect(tmp_path / "repo", shas[0], shas[10], "s", "tpot_ms", tmp_path / "out", FakeAB(tmp_path / "repo"),
           say=lambda _: None)
    with pytest.raises(UserError, match="holds another bisect"):
        bisect(tmp_path / "repo", shas[0], shas[15], "s", "tpot_ms", tmp_path / "out", FakeAB(tmp_path / "repo"),
               say=lambda _: None)


def test_good_must_be_an_ancestor_of_bad(tmp_path):
    shas = _repo(tmp_path / "repo", count=4)
    with pytest.raises(UserError, match="not an ancestor"):
        bisect(tmp_path / "repo", shas[3], shas[1], "s", "tpot_ms", tmp_path / "out", FakeAB(tmp_path / "repo"))


def test_the_ab_comparator_reads_one_metric_of_the_verdicts():
    from perfbench.results.ab_record import ABRecord
    from perfbench.tools.bisect import verdict_code

    def record(*verdicts: tuple[float, str]) -> ABRecord:
        return ABRecord.model_validate({"verdicts": {f"r{i}": {
            "tpot_ms": {"ratio": r, "ci_low": r - 0.01, "ci_high": r + 0.01, "verdict": v},
            "ttft_ms": {"ratio": 2.0, "ci_low": 1.9, "ci_high": 2.1, "verdict": "slower"}}
            for i, (r, v) in enumerate(verdicts)}})

    assert verdict_code(record((1.0, "same"), (1.2, "slower")), "tpot_ms")[:2] == (1, 1.2)
    assert verdict_code(record((1.0, "same"), (0.9, "faster")), "tpot_ms")[0] == 0  # TTFT slower: not asked
    assert verdict_code(record((1.0, "same"), (1.02, "inconclusive")), "tpot_ms")[0] == 3
    assert verdict_code(record((1.0, "same")), "compile_s")[0] == 3


def test_the_command_runs_ab_jobs_and_takes_their_verdicts_in_memory(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from perfbench.cli import main

    shas = _repo(tmp_path / "repo")
    fake = FakeAB(tmp_path / "repo")
    calls = []

    def fake_ab_job(base, head, scenario, overrides, out_dir, settings, report=None):
        from perfbench.results.ab_record import ABRecord
        from perfbench.run.ab import ABOutcome

        calls.append((base, head, scenario, settings.max_time_s))
        answer = fake(base, head, Path(out_dir))
        if answer.code == 2:
            raise UserError(f"{head[:10]}: {answer.reason}")
        Path(out_dir).mkdir(parents=True)
        verdict = "slower" if answer.code == 1 else "same"
        record = ABRecord.model_validate({"verdicts": {"r1": {"tpot_ms": {
            "ratio": answer.ratio, "ci_low": answer.ci_low, "ci_high": answer.ci_high, "pairs": 30,
            "verdict": verdict}}}})
        return ABOutcome(record, Path(out_dir), answer.code)

    monkeypatch.setattr("perfbench.run.ab.ab_job", fake_ab_job)
    monkeypatch.chdir(tmp_path / "repo")
    result = CliRunner().invoke(main, ["bisect", shas[0], shas[11], "--out", str(tmp_path / "out"),
                                       "--max-time", "60"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"first bad commit: {shas[11]} (tpot_ms: head/base 1.300x [1.274, 1.326]")
    assert f"never blamed): {shas[5][:10]}" in result.stdout
    assert calls[0] == (shas[0], shas[11], None, 60.0)
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    broken = next(s for s in state["steps"] if s["head"] == shas[5])
    assert broken["code"] == 2 and "model/ does not import" in broken["reason"]


# ---- exit codes, usage errors and resumes -------------------------------------------------------------------

def _fake_ab_job(fake: FakeAB, calls: list, signal_at: int | None = None, signum: int = signal.SIGTERM):
    """ab_job answering from `fake`; at call `signal_at` it starts its folder and the signal arrives."""
    from perfbench.results.ab_record import ABRecord
    from perfbench.run.ab import ABOutcome

    def ab_job(base, head, scenario, overrides, out_dir, settings, report=None):  # noqa: ANN001, ANN202
        calls.append((base, head, scenario, tuple(overrides), settings.max_time_s))
        Path(out_dir).mkdir(parents=True)
        if signal_at is not None and len(calls) == signal_at:
            (Path(out_dir) / "pairs-so-far").write_text("measured before the signal\n")
            os.kill(os.getpid(), signum)  # a real signal: SIGTERM raises through perfbench/lifecycle.py
            time.sleep(5)  # never reached: the handler raises at once
        answer = fake(base, head, Path(out_dir))
        if answer.code == 2:
            raise UserError(f"{head[:10]}: {answer.reason}")
        verdict = "slower" if answer.code == 1 else "same"
        record = ABRecord.model_validate({"verdicts": {"r1": {"tpot_ms": {
            "ratio": answer.ratio, "ci_low": answer.ci_low, "ci_high": answer.ci_high, "pairs": 30,
            "verdict": verdict}}}})
        (Path(out_dir) / "ab.json").write_text(record.model_dump_json())  # as the real job leaves its folder
        return ABOutcome(record, Path(out_dir), answer.code)

    return ab_job


def _cli(*args: str):
    from click.testing import CliRunner

    from perfbench.cli import main

    return CliRunner().invoke(main, ["bisect", *args])


@pytest.mark.parametrize(("option", "words"), [
    (["--max-time", "-1"], "--max-time: must be a positive number"),
    (["--max-time", "nan"], "--max-time: must be a positive number"),
    (["--scenario", "no_such_scenario"], "no_such_scenario"),
    (["--set", "perfbench.no_such_key=1"], "no_such_key"),
])
def test_a_usage_error_exits_2_before_anything_is_stored_and_the_fixed_command_bisects(tmp_path, monkeypatch,
                                                                                      option, words):
    shas = _repo(tmp_path / "repo")
    calls: list = []
    monkeypatch.setattr("perfbench.run.ab.ab_job", _fake_ab_job(FakeAB(tmp_path / "repo"), calls))
    monkeypatch.chdir(tmp_path / "repo")
    out = tmp_path / "out"
    line = one_error_line(_cli(shas[0], shas[11], "--out", str(out), *option))
    assert words in line and calls == [] and not out.exists()
    fixed = _cli(shas[0], shas[11], "--out", str(out))  # the near miss: the same bisect with the option fixed
    assert fixed.exit_code == 0, fixed.output
    assert fixed.stdout.startswith(f"first bad commit: {shas[11]}")


def test_ends_that_could_not_be_compared_exit_2_and_are_compared_again_on_resume(tmp_path):
    shas = _repo(tmp_path / "repo")

    def cannot(base: str, head: str, out: Path) -> Comparison:
        return Comparison(base=base, head=head, code=2, reason="ab: no such scenario")

    args = (tmp_path / "repo", shas[0], shas[11], "s", "tpot_ms", tmp_path / "out")
    text, code = bisect_with_code(*args, cannot, say=lambda _: None)
    assert code == 2 and "could not be compared" in text and "nothing to bisect" not in text
    assert json.loads((tmp_path / "out" / STATE_FILE).read_text())["steps"] == []
    # a state an earlier version wrote, with the failed ends stored, is not replayed either
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    state["steps"] = [{"base": shas[0], "head": shas[11], "code": 2, "reason": "old"}]
    (tmp_path / "out" / STATE_FILE).write_text(json.dumps(state))
    text, code = bisect_with_code(*args, FakeAB(tmp_path / "repo"), say=lambda _: None)
    assert code == 0 and text.startswith(f"first bad commit: {shas[11]}")


def test_undecided_ends_exit_3(tmp_path):
    shas = _repo(tmp_path / "repo")

    def undecided(base: str, head: str, out: Path) -> Comparison:
        return Comparison(base=base, head=head, code=3, ratio=1.04, ci_low=0.99, ci_high=1.09)

    text, code = bisect_with_code(tmp_path / "repo", shas[0], shas[11], "s", "tpot_ms", tmp_path / "out", undecided,
                                  say=lambda _: None)
    assert code == 3 and "could not be shown slower than" in text


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_exits_with_its_code_and_the_resume_continues_where_it_stopped(tmp_path, monkeypatch, signum,
                                                                                code):
    shas = _repo(tmp_path / "repo")
    monkeypatch.chdir(tmp_path / "repo")
    out = tmp_path / "out"
    calls: list = []
    monkeypatch.setattr("perfbench.run.ab.ab_job", _fake_ab_job(FakeAB(tmp_path / "repo"), calls, 3, signum))
    stopped = _cli(shas[0], shas[15], "--out", str(out))
    assert stopped.exit_code == code, stopped.output
    assert "Aborted" not in stopped.output and "interrupted by" in stopped.stderr
    assert len(json.loads((out / STATE_FILE).read_text())["steps"]) == 2  # the cut-short third is not stored
    cut_short = next(out.glob("02-*"))
    rest: list = []
    monkeypatch.setattr("perfbench.run.ab.ab_job", _fake_ab_job(FakeAB(tmp_path / "repo"), rest))
    resumed = _cli(shas[0], shas[15], "--out", str(out))
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.startswith(f"first bad commit: {shas[11]}")
    assert rest[0][:2] == calls[2][:2]  # the resume starts with the comparison that was cut short
    assert (cut_short / "pairs-so-far").is_file()  # what it had measured is kept; the retry has its own folder
    assert (out / f"{cut_short.name}-retry1" / "ab.json").is_file()
