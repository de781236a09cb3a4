"""Timing suspects between two folders: never a failure by themselves; decided on pairs with --confirm.

Copies of the committed ci_smoke baseline with every latency scaled, and a recorded commit and dirty flag set
where it matters, stand for two folders timed at different times; the confirming ab job is a recorded verdict
(an injected runner), so nothing here times anything."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.gate.engine import run_gate
from perfbench.results.ab_record import ABRecord
from tests.records_kit import ab_record, ab_verdict

REPO = Path(__file__).resolve().parents[3]
BASELINE = REPO / "baselines" / "ci_smoke"
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "tpot_steps_ms")


def _copy(dst: Path, factor: float = 1.0, sha: str | None = None, dirty: bool | None = None) -> Path:
    """The baseline's results with every latency sample and latency summary x `factor`, and optionally another
    recorded commit."""
    dst.mkdir(parents=True)
    shutil.copy(BASELINE / "scenario.json", dst / "scenario.json")
    lines = []
    for line in (BASELINE / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in LATENCY_KEYS:
            if key in record["samples"]:
                record["samples"][key] = [v * factor for v in record["samples"][key]]
        for key, value in list(record.get("summary", {}).items()):
            if value is not None and ("_ms_" in key):
                record["summary"][key] = value * factor
            elif value is not None and key.endswith("_tok_s"):
                record["summary"][key] = value / factor
        if sha is not None:
            record["env"]["git_sha"] = sha
        if dirty is not None:
            record["env"]["git_dirty"] = dirty
        lines.append(json.dumps(record))
    (dst / "results.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def _gate(*args: str):
    return CliRunner().invoke(main, ["gate", *args])


def _head(n: int = 0) -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", f"HEAD~{n}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_without_confirmation_the_gate_decides_on_absolute_timings_as_before(tmp_path: Path):
    for factor, code in ((1.0, 0), (0.8, 0), (1.2, 1)):
        result = _gate("--no-confirm", "--baseline", str(BASELINE), "--current",
                       str(_copy(tmp_path / f"x{factor}", factor)))
        assert result.exit_code == code, result.output
    assert "not confirmed on pairs (run with --confirm" in result.output


def test_a_suspect_between_folders_of_one_commit_is_the_hosts_not_the_codes(tmp_path: Path):
    sha = _head()
    base = _copy(tmp_path / "base", 1.0, sha=sha, dirty=False)
    slower = _copy(tmp_path / "slower", 1.2, sha=sha, dirty=False)
    result = _gate("--confirm", "--baseline", str(base), "--current", str(slower))
    assert result.exit_code == 0, result.output
    assert f"not a code change: both folders were measured at {sha[:12]}" in result.output


def test_a_suspect_that_cannot_be_confirmed_is_reported_and_never_fails(tmp_path: Path):
    # a baseline measured with uncommitted changes: no paired rerun can reproduce it
    dirty = _copy(tmp_path / "dirty", 1.0, sha="e" * 40, dirty=True)
    result = _gate("--confirm", "--baseline", str(dirty), "--current", str(_copy(tmp_path / "slower", 1.2)))
    assert result.exit_code == 0, result.output
    assert "UNCONFIRMED" in result.output and "measured with uncommitted changes" in result.output
    assert "unconfirmed" in result.output.splitlines()[-1]
    # a commit that is not in this repository
    base = _copy(tmp_path / "base", 1.0, sha="f" * 40, dirty=False)
    cur = _copy(tmp_path / "cur", 1.2, sha=_head(), dirty=False)
    result = _gate("--confirm", "--baseline", str(base), "--current", str(cur))
    assert result.exit_code == 0 and f"commit {'f' * 12} is not in" in result.output, result.output


def _recorded(verdict: str, regression: bool, ratio: float):
    """A runner that answers every run of the folder with one recorded verdict, and remembers its calls."""
    calls = []

    def runner(base: str, head: str, scenario: str, out: Path) -> ABRecord:
        calls.append((base, head, scenario, out))
        runs = [json.loads(line)["spec"] for line in (BASELINE / "results.jsonl").read_text().splitlines()]
        v = ab_verdict(ratio, verdict, ci_low=ratio * 0.97, ci_high=ratio * 1.03, pairs=48, clusters=8, band=0.05,
                       margin=0.01, level=0.95, method="t", p_slower=1e-4 if regression else 0.5,
                       regression=regression)
        ids = {spec["run_id"] for spec in runs}  # ci_smoke's run ids are its combination ids
        return ab_record(mode="one process", verdicts={rid: {"ttft_ms": v, "tpot_ms": v} for rid in ids})

    return runner, calls


@pytest.mark.parametrize(("verdict", "regression", "ratio", "code", "words"), [
    ("slower", True, 1.3, 1, "confirmed by ab"),
    ("same", False, 1.0, 0, "not confirmed: ab"),
    ("inconclusive", False, 1.04, 0, "unconfirmed: ab"),
])
def test_a_suspect_between_two_commits_is_decided_by_a_paired_ab_job(tmp_path: Path, verdict: str,
                                                                     regression: bool, ratio: float, code: int,
                                                                     words: str):
    base_sha, cur_sha = _head(1), _head(0)
    base = _copy(tmp_path / "base", 1.0, sha=base_sha, dirty=False)
    cur = _copy(tmp_path / "cur", 1.3, sha=cur_sha, dirty=False)
    runner, calls = _recorded(verdict, regression, ratio)
    assert run_gate(base, cur, None, None, confirm_suspects=True, repo=REPO, runner=runner) == code
    assert [(b, h) for b, h, _, _ in calls] == [(base_sha, cur_sha)]  # one job for every suspect
    out = calls[0][3]
    assert out.parent.name.startswith("cur.confirm-") and out.parent.parent == tmp_path  # beside, not inside


def test_the_confirming_pairs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    base = _copy(tmp_path / "base", 1.0, sha=_head(1), dirty=False)
    cur = _copy(tmp_path / "cur", 1.3, sha=_head(0), dirty=False)
    runner, _ = _recorded("slower", True, 1.3)
    run_gate(base, cur, None, None, confirm_suspects=True, repo=REPO, runner=runner)
    out = capsys.readouterr().out
    assert "confirmed by ab" in out and "head/base 1.300x [1.261, 1.339] over 48 pairs in 8 clusters" in out


def test_the_confirming_job_counts_its_time_budget_from_the_end_of_start_up(monkeypatch, tmp_path: Path) -> None:
    # on a slow 2-core host the start-up (two worktrees, both arms built and compiled cold) took 90 s of the
    # default 110 s, which left the job one epoch: one cluster never decides, and the planted +30% went unconfirmed
    from perfbench.gate import confirm as confirm_module
    from perfbench.run import ab as ab_module

    seen = []

    def fake_ab_job(*args):
        seen.append(args[-1])
        return ab_module.ABOutcome(ab_record(), tmp_path / "ab", 0)

    monkeypatch.setattr(ab_module, "ab_job", fake_ab_job)
    confirm_module.run_ab_job("a" * 40, "b" * 40, "ci_smoke", tmp_path / "ab")
    (settings,) = seen
    assert settings.budget_after_startup is True
    assert settings.max_time_s == ab_module.ABSettings().max_time_s


def _at(folder, sha: str):
    for run in folder.runs.values():
        run.env.git_sha, run.env.git_dirty = sha, False
    return folder


@pytest.mark.parametrize(("same_commit", "verdict", "status", "words"), [
    (True, None, "PASS", "not a code change: both folders were measured at"),
    (False, "slower", "FAIL", "confirmed by ab"),
    (False, "same", "PASS", "not confirmed: ab"),
])
def test_a_speedup_that_fell_is_a_suspect_decided_like_a_timing_one(same_commit: bool, verdict: str | None,
                                                                    status: str, words: str, tmp_path: Path):
    # a chunk_gdr plan at 2.0x over all-off in the baseline folder and 1.43x in the current one (synthetic blocks
    # of one process each): the speed-up check fails on its own, and --confirm decides it on pairs
    from perfbench.gate.confirm import confirm
    from perfbench.gate.engine import evaluate
    from tests.perfbench.gate.test_speedup_rule import RULES, _folder

    base_sha, cur_sha = (_head(), _head()) if same_commit else (_head(1), _head(0))
    base, cur = _at(_folder(0.5), base_sha), _at(_folder(0.7, seed=1), cur_sha)
    cur.scenario = json.loads((BASELINE / "scenario.json").read_text())
    checks = evaluate(base, cur, RULES).checks
    assert {c.status for c in checks if c.kind == "speedup"} == {"FAIL"}
    calls = []

    def runner(b: str, h: str, scenario: str, out: Path) -> ABRecord:
        calls.append((b, h))
        v = ab_verdict(1.4, str(verdict), ci_low=1.3, ci_high=1.5, pairs=48, clusters=8, band=0.05, margin=0.01,
                       level=0.95, method="t", p_slower=1e-4, regression=verdict == "slower")
        return ab_record(mode="one process", verdicts={r.spec.combination_id: {"ttft_ms": v, "tpot_ms": v}
                                                       for r in cur.runs.values()})

    decided = [c for c in confirm(checks, base, cur, REPO, runner=runner, folder_for_job=lambda _: tmp_path / "job")
               if c.kind == "speedup"]
    assert {c.status for c in decided} == {status} and all(words in c.message for c in decided), decided
    assert calls == ([] if same_commit else [(base_sha, cur_sha)])


@pytest.mark.parametrize(("factor", "code"), [(3.0, 1), (2.5, 1), (1.9, 0), (1.2, 0)])
def test_a_gross_slowdown_fails_even_when_the_baseline_cannot_be_confirmed(tmp_path: Path, factor: float,
                                                                           code: int):
    # the shipped baseline was measured with uncommitted changes, so no paired rerun can decide its suspects: a 3x
    # slowdown passed as "unconfirmed". Past 2x no host-speed change explains it: it fails; below, it stays
    # unconfirmed (the near misses)
    summary = tmp_path / "gate.md"
    dirty = _copy(tmp_path / "dirty", 1.0, sha="e" * 40, dirty=True)
    result = _gate("--confirm", "--baseline", str(dirty), "--current", str(_copy(tmp_path / "slower", factor)),
                   "--summary", str(summary))
    assert result.exit_code == code, result.output
    assert ("more than host speed can explain" in result.output) == (code == 1)
    assert result.output.startswith("WARNING: the baseline") and "uncommitted changes" in result.output
    assert "> **Warning:** the baseline" in summary.read_text()  # loud in the CI summary too
    assert json.loads(summary.with_suffix(".json").read_text())["warnings"]


def _probe(folder: Path, reading_ms: float) -> None:
    """Plant host-probe readings of `reading_ms` in every run of `folder`."""
    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    for record in lines:
        record["samples"]["host_probe_ms"] = [reading_ms] * 8
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


@pytest.mark.parametrize(("host", "code"), [(2.4, 0), (1.0, 1)])
def test_a_host_probe_that_ran_slower_too_raises_the_limit(tmp_path: Path, host: float, code: int):
    # 2.5x slower timings: the host probe of the current folder ran 2.4x slower as well, so the host may explain
    # them (limit 2.4 x 1.15); with the probe at the baseline's speed nothing does
    base, cur = _copy(tmp_path / "base", 1.0, sha="e" * 40, dirty=True), _copy(tmp_path / "cur", 2.5)
    _probe(base, 1.0)
    _probe(cur, host)
    result = _gate("--confirm", "--baseline", str(base), "--current", str(cur))
    assert result.exit_code == code, result.output


def test_the_confirming_job_gets_a_fresh_folder_and_the_recorded_scenario(tmp_path: Path):
    # a retried gate found its first job's folder inside --current taken and said UNCONFIRMED; the job also
    # reloaded the YAML, dropping the folder's --set overrides
    base = _copy(tmp_path / "base", 1.0, sha=_head(1), dirty=False)
    cur = _copy(tmp_path / "cur", 1.3, sha=_head(0), dirty=False)
    recorded = json.loads((cur / "scenario.json").read_text())
    recorded["perfbench"]["seed"] = 1234  # stands for a --set the YAML does not hold
    (cur / "scenario.json").write_text(json.dumps(recorded))
    before = sorted(p.name for p in cur.iterdir())
    answer, _ = _recorded("slower", True, 1.3)
    outs, scenarios = [], []

    def runner(base_sha: str, head_sha: str, scenario: str, out: Path) -> ABRecord:
        if (out / "ab.json").exists():  # as run_ab: a folder that holds a job is refused
            raise UserError(f"--out {out}: already holds results; choose another folder")
        out.mkdir(parents=True)
        (out / "ab.json").write_text("{}")
        outs.append(out)
        scenarios.append(json.loads(Path(scenario).read_text()))
        assert Path(scenario).stem == "ci_smoke"
        return answer(base_sha, head_sha, scenario, out)

    codes = [run_gate(base, cur, None, None, confirm_suspects=True, repo=REPO, runner=runner) for _ in range(2)]
    assert codes == [1, 1]  # the retry gives the same answer
    assert len(set(outs)) == 2 and all(cur not in out.parents for out in outs)
    assert sorted(p.name for p in cur.iterdir()) == before  # nothing written into --current
    assert all(s["perfbench"]["seed"] == 1234 and "source" not in s for s in scenarios)
    from perfbench.config.scenario import load_scenario

    assert load_scenario(str(outs[0].parent / "scenario" / "ci_smoke.json")).perfbench.seed == 1234


def test_an_interrupted_confirming_job_interrupts_the_gate(monkeypatch, tmp_path: Path):
    # ab_job saves its pairs and returns 143 on SIGTERM: the gate stops with it, never judging half a job
    from perfbench.gate import confirm as confirm_module
    from perfbench.lifecycle import Interrupted
    from perfbench.run import ab as ab_module

    monkeypatch.setattr(ab_module, "ab_job", lambda *args: ab_module.ABOutcome(ab_record(), tmp_path / "ab", 143))
    with pytest.raises(Interrupted) as caught:
        confirm_module.run_ab_job("a" * 40, "b" * 40, "ci_smoke", tmp_path / "ab")
    assert caught.value.signum == 15


def test_no_warning_where_no_timing_is_compared(tmp_path: Path):
    # the near miss of the warning: rules without timing or speed-up checks (the CI smoke gate) raise no suspect
    dirty = _copy(tmp_path / "dirty", 1.0, sha="e" * 40, dirty=True)
    result = _gate("--confirm", "--baseline", str(dirty), "--current", str(_copy(tmp_path / "cur", 3.0)),
                   "--rules", str(REPO / "gates" / "ci_smoke_gate.yaml"))
    assert "WARNING" not in result.output and "more than host speed" not in result.output, result.output
