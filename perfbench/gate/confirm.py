"""Timing suspects, confirmed on pairs before they fail a gate.

A baseline folder and a current folder were timed at different times, maybe on a host running at another speed,
so an absolute timing check that fails between them (gate/checks.py `check_timing`), or finds the threshold
passed without significance, is a *suspect*, never a failure by itself. So is a plan's speed-up over its
baseline that fell past the threshold (`check_speedup`): host speed cancels inside each folder, but a folder
of one re-allocation epoch (ci_smoke) gives its speed-up no spread to test with, and a fall of 10% then comes
from noise alone in a fair share of identical-code pairs (docs/measurements.md). With `--confirm` (on by
default when the CI environment variable is set) each suspect is decided so:

- both folders were measured at the same clean commit: the code did not change, so the difference is the
  host's: PASS, saying so;
- both commits are known, clean and reachable in this repository: one `perfbench ab` job of the baseline's
  commit against the current one on the current folder's scenario (both arms in one process, interleaved pairs;
  perfbench/run/ab.py) decides: a suspect whose run and latency ab calls a regression (slower, after Holm's
  correction) FAILs, naming the pairs; one that ab finds same or faster PASSes; one that ab leaves undecided is
  UNCONFIRMED;
- otherwise (a commit unknown, dirty or unreachable, the scenario not found): UNCONFIRMED, with the reason.

UNCONFIRMED is reported and never fails the gate. Without `--confirm` a suspect fails as before, and its line
says it was not confirmed. This is what teams whose timing alerts cried wolf ended up asking for: a paired rerun
before an alert.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfbench.errors import UserError
from perfbench.gate.checks import FAIL, INCONCLUSIVE, PASS, UNCONFIRMED, CheckResult
from perfbench.results import ResultFolder
from perfbench.results.ab_record import ABRecord, read_ab_record

# (base sha, head sha, scenario, out folder) -> the ab job's record
ABRunner = Callable[[str, str, str, Path], ABRecord]
SUSPECT_KINDS = ("timing", "speedup")
LATENCY_OF = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "prefill_tok_s": "ttft_ms", "decode_tok_s": "tpot_ms"}


@dataclass(frozen=True)
class Commit:
    sha: str | None
    dirty: bool
    why: str = ""  # why it cannot be used ("" when it can)


def folder_commit(folder: ResultFolder) -> Commit:
    """The one commit a folder's runs were measured at, and whether the tree had uncommitted changes."""
    shas = {str(r.env.git_sha) for r in folder.runs.values() if r.env.git_sha}
    if len(shas) != 1 or "unknown" in shas:
        return Commit(None, False, "no single recorded commit" if len(shas) != 1 else "the commit is unknown")
    dirty = any(bool(r.env.git_dirty) for r in folder.runs.values())
    sha = shas.pop()
    return Commit(sha, dirty, "measured with uncommitted changes" if dirty else "")


def _reachable(sha: str, repo: Path) -> bool:
    done = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True,
                          timeout=60, check=False)
    return done.returncode == 0


def run_ab_job(base: str, head: str, scenario: str, out: Path) -> ABRecord:
    """The default runner: `perfbench ab BASE HEAD --scenario SCENARIO` with its default settings, except that its
    --max-time counts pairs, not the start-up (a confirmation that ran out of time in its start-up decides
    nothing)."""
    from perfbench.run.ab import ABSettings, run_ab

    run_ab(base, head, scenario, [], str(out), ABSettings(budget_after_startup=True))
    return read_ab_record(out)


def _scenario_of(folder: ResultFolder) -> str | None:
    scenario = folder.scenario or {}
    source = scenario.get("source")
    if source and Path(source).is_file():
        return str(source)
    return scenario.get("name") or None


def confirm(checks: list[CheckResult], baseline: ResultFolder, current: ResultFolder, repo: Path,
            runner: ABRunner = run_ab_job) -> list[CheckResult]:
    """The checks with every suspect (a `timing` or `speedup` check that failed, or that found the threshold
    passed without significance) decided as the module docstring says."""
    suspects = [c for c in checks if c.kind in SUSPECT_KINDS and c.status in (FAIL, INCONCLUSIVE)]
    if not suspects:
        return checks
    decided = _decide(suspects, baseline, current, repo, runner)
    return [decided.get(id(c), c) for c in checks]


def _decide(suspects: list[CheckResult], baseline: ResultFolder, current: ResultFolder, repo: Path,
            runner: ABRunner) -> dict[int, CheckResult]:
    base, cur = folder_commit(baseline), folder_commit(current)

    def each(status: str, why: str) -> dict[int, CheckResult]:
        return {id(c): CheckResult(status, c.kind, c.name, c.run_id, f"{c.message}; {why}",
                                   {**c.details, "confirmation": why}) for c in suspects}

    if base.why or cur.why:
        side, commit = ("baseline", base) if base.why else ("current", cur)
        return each(UNCONFIRMED, f"unconfirmed: the {side} folder has {commit.why}, so no paired rerun can decide "
                                 "(a suspect alone never fails)")
    assert base.sha is not None and cur.sha is not None
    if base.sha == cur.sha:
        return each(PASS, f"not a code change: both folders were measured at {cur.sha[:12]}, so the host made the "
                          "difference")
    missing = [sha for sha in (base.sha, cur.sha) if not _reachable(sha, repo)]
    scenario = _scenario_of(current)
    if missing or scenario is None:
        why = f"commit {missing[0][:12]} is not in {repo}" if missing else "the current folder names no scenario"
        return each(UNCONFIRMED, f"unconfirmed: {why} (a suspect alone never fails)")
    out = current.path / "confirm-ab"
    try:
        record = runner(base.sha, cur.sha, scenario, out)
    except UserError as err:
        return each(UNCONFIRMED, f"unconfirmed: the confirming ab job failed ({err})")
    decided = {}
    for c in suspects:
        run = current.runs.get(c.run_id or "")
        # a speed-up check names its plan by combination (a plan's rounds share it), a timing check by run
        combination = c.details.get("combination_id") or (run.spec.combination_id if run else "")
        latency = LATENCY_OF.get(str(c.details.get("metric", "")).removesuffix("_median"))
        verdict = record.verdicts.get(combination, {}).get(latency or "")
        if verdict is None:
            why, status = f"unconfirmed: the ab job in {out} has no {latency} pairs for this run", UNCONFIRMED
        else:
            pairs = (f"ab {base.sha[:12]} -> {cur.sha[:12]}: head/base {verdict.ratio:.3f}x "
                     f"[{verdict.ci_low:.3f}, {verdict.ci_high:.3f}] over {verdict.pairs} pairs in {verdict.clusters} "
                     f"clusters ({record.mode}; {out})")
            if verdict.regression:
                why, status = f"confirmed by {pairs}", FAIL
            elif verdict.verdict in ("same", "faster"):
                why, status = f"not confirmed: {pairs} is {verdict.verdict}", PASS
            else:
                why, status = f"unconfirmed: {pairs} is {verdict.verdict}", UNCONFIRMED
        decided[id(c)] = CheckResult(status, c.kind, c.name, c.run_id, f"{c.message}; {why}",
                                     {**c.details, "confirmation": why})
    return decided
