"""A bisect resumes from bisect.json, a file anyone can edit: it is read size- and depth-capped and validated as a
typed state. A tampered one is refused in one line naming the file and the field (exit 2), before any comparison
runs, and the file is left as it was."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.tools.bisect import STATE_FILE, Comparison
from tests.cli_helpers import one_error_line


def _history(path: Path, count: int = 5, slow_from: int = 3) -> list[str]:
    """`count` commits whose cost.txt holds 2.0, then 2.8 from commit `slow_from`; their shas, oldest first."""
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for i in range(count):
        (path / "cost.txt").write_text("2.8\n" if i >= slow_from else "2.0\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"step {i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return shas


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A real bisect of 5 commits (ab jobs answered from cost.txt), finished: (its folder, its shas, the calls
    a later ab_job gets)."""
    repo = tmp_path / "repo"
    shas = _history(repo)
    calls: list = []

    def ab_job(base, head, scenario, overrides, out_dir, settings, report=None):  # noqa: ANN001, ANN202
        from perfbench.results.ab_record import ABRecord
        from perfbench.run.ab import ABOutcome

        calls.append((base, head))
        cost = [float(subprocess.run(["git", "-C", str(repo), "show", f"{sha}:cost.txt"], capture_output=True,
                                     text=True, check=True).stdout) for sha in (base, head)]
        ratio = cost[1] / cost[0]
        Path(out_dir).mkdir(parents=True)
        record = ABRecord.model_validate({"verdicts": {"r1": {"tpot_ms": {
            "ratio": ratio, "ci_low": ratio * 0.97, "ci_high": ratio * 1.03, "pairs": 30,
            "verdict": "slower" if ratio > 1.05 else "same"}}}})
        (Path(out_dir) / "ab.json").write_text(record.model_dump_json())
        return ABOutcome(record, Path(out_dir), 1 if ratio > 1.05 else 0)

    monkeypatch.setattr("perfbench.run.ab.ab_job", ab_job)
    monkeypatch.chdir(repo)
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["bisect", shas[0], shas[4], "--out", str(out)])
    assert first.exit_code == 0 and first.stdout.startswith(f"first bad commit: {shas[3]}"), first.output
    calls.clear()
    return out, shas, calls


def _resume(out: Path, shas: list[str]) -> str:
    return one_error_line(CliRunner().invoke(main, ["bisect", shas[0], shas[4], "--out", str(out)]))


def _tamper(out: Path, edit) -> bytes:  # noqa: ANN001
    state = json.loads((out / STATE_FILE).read_text())
    edit(state)
    data = json.dumps(state).encode()
    (out / STATE_FILE).write_bytes(data)
    return data


def test_a_deeply_nested_state_is_one_line_not_a_recursion_error(finished):
    out, shas, calls = finished
    (out / STATE_FILE).write_text("[" * 100_000 + "]" * 100_000)
    line = _resume(out, shas)
    assert str(out / STATE_FILE) in line and "nested deeper than" in line
    assert calls == []


@pytest.mark.parametrize(("edit", "field", "words"), [
    (lambda s: s["steps"][0].update(ci_low=None, ci_high=None), "steps[0]", "given together"),
    (lambda s: s["steps"][0].update(ci_low=None), "steps[0]", "given together"),
    (lambda s: s["steps"][0].update(ratio="slow"), "steps[0].ratio", "a number"),
    (lambda s: s["steps"][0].update(ratio=float("nan")), "steps[0].ratio", "finite positive"),
    (lambda s: s["steps"][0].update(ci_low=5.0, ci_high=1.0), "steps[0]", "above ci_high"),
    (lambda s: s["steps"][0].update(code=99), "steps[0].code", "expected one of"),
    (lambda s: s["steps"][0].pop("head"), "steps[0]", "missing key 'head'"),
    (lambda s: s["steps"].append("a step"), "steps[", "an object"),
    (lambda s: s.update(steps={"0": 1}), "steps", "a list"),
    (lambda s: s["steps"][0].update(head="f" * 40), "steps[0].head", "not a commit of this bisect"),
    (lambda s: s["steps"][-1].update(base_trace="/etc/passwd", head_trace="/etc/passwd"), "steps[",
     "'/etc/passwd' is not inside"),
])
def test_a_tampered_step_is_refused_naming_file_and_field(finished, edit, field, words):
    out, shas, calls = finished
    before = _tamper(out, edit)
    line = _resume(out, shas)
    assert line.startswith(f"error: {out / STATE_FILE}: unreadable bisect state: {field}"), line
    assert words in line
    assert calls == [] and (out / STATE_FILE).read_bytes() == before  # nothing measured, nothing overwritten


def test_a_state_that_is_not_an_object_or_not_a_file_is_refused(finished):
    out, shas, calls = finished
    (out / STATE_FILE).write_text("[1, 2]")
    assert "not a JSON object" in _resume(out, shas)
    (out / STATE_FILE).unlink()
    (out / STATE_FILE).mkdir()
    assert f"{out / STATE_FILE}: not a regular file" in _resume(out, shas)
    assert calls == []


def test_an_oversized_state_is_refused_before_it_is_read(finished, monkeypatch):
    out, shas, calls = finished
    monkeypatch.setattr("perfbench.tools.bisect.STATE_BYTES", 1024**2)
    with open(out / STATE_FILE, "wb") as handle:  # sparse: no disk, no memory unless read
        handle.truncate(64 * 1024**2)
    line = _resume(out, shas)
    assert str(out / STATE_FILE) in line and "over the 1.0 MiB this reader takes" in line
    assert calls == []


def test_an_untampered_state_still_resumes_without_a_comparison(finished):
    out, shas, calls = finished
    again = CliRunner().invoke(main, ["bisect", shas[0], shas[4], "--out", str(out)])
    assert again.exit_code == 0 and again.stdout.startswith(f"first bad commit: {shas[3]}"), again.output
    assert calls == []


def test_a_comparison_without_a_ratio_shows_its_reason_only():
    step = Comparison(base="a" * 40, head="b" * 40, code=3, reason="too few pairs")
    assert step.text() == "too few pairs"
    with pytest.raises(ValueError, match="given together"):
        Comparison(base="a" * 40, head="b" * 40, code=1, ratio=1.5)
    with pytest.raises(ValueError, match="finite positive"):
        Comparison(base="a" * 40, head="b" * 40, code=1, ratio=float("inf"), ci_low=1.0, ci_high=2.0)


def test_an_ab_record_with_an_infinite_interval_is_stored_without_it(tmp_path, monkeypatch):
    """The ab job's own record may hold an interval a Comparison refuses: the step keeps the job's code and says
    why it has no ratio, rather than stopping the bisect with a traceback."""
    from perfbench.tools.bisect import ab_comparator

    def ab_job(base, head, scenario, overrides, out_dir, settings, report=None):  # noqa: ANN001, ANN202
        from perfbench.results.ab_record import ABRecord
        from perfbench.run.ab import ABOutcome

        Path(out_dir).mkdir(parents=True)
        record = ABRecord.model_validate({"verdicts": {"r1": {"tpot_ms": {"ratio": 1.4, "ci_low": 1.1,
                                                                         "ci_high": float("inf"),
                                                                         "verdict": "slower"}}}})
        return ABOutcome(record, Path(out_dir), 1)

    monkeypatch.setattr("perfbench.run.ab.ab_job", ab_job)
    step = ab_comparator(None, "tpot_ms", [], 60.0)("a" * 40, "b" * 40, tmp_path / "job")
    assert step.code == 1 and step.ratio is None and "not a finite interval" in step.text()
