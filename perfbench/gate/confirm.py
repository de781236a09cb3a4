"""Timing suspects, confirmed on pairs before they fail a gate.

A baseline folder and a current folder were timed at different times, maybe on a host running at another speed,
so an absolute timing check that fails between them (gate/checks.py `check_timing`), or finds the threshold
passed without significance, is a *suspect*, never a failure by itself. So is a plan's speed-up over its
baseline that fell past the threshold (`check_speedup`): host speed cancels inside each folder, but a folder
of one re-allocation epoch (ci_smoke) gives its speed-up no spread to test with, and a fall of 10% then comes
from noise alone in a fair share of identical-code pairs (docs/measurements_log.md). With `--confirm` (on by
default when the CI environment variable is set) each suspect is decided so:

- both folders were measured at the same clean commit: the code did not change, so the difference is the
  host's: PASS, saying so;
- both commits are known, clean and reachable in this repository: one `perfbench ab` job of the baseline's
  commit against the current one on the current folder's scenario (both arms in one process, interleaved pairs;
  perfbench/run/ab.py) decides: a suspect whose run and latency ab calls a regression (slower, after Holm's
  correction) FAILs, naming the pairs; one that ab finds same or faster PASSes; one that ab leaves undecided is
  UNCONFIRMED;
- otherwise (a commit unknown, dirty or unreachable, no scenario.json recorded): UNCONFIRMED, with the reason.

UNCONFIRMED is reported and does not fail the gate, with one exception: a slowdown beyond what host speed can
explain (`GROSS_SLOWDOWN`, 2x, or the host-speed probe's ratio between the two runs past its tolerance, whichever
is larger) FAILs even when no paired rerun can decide it, so a baseline that cannot be confirmed never turns a 3x
regression into a pass. A baseline that cannot be confirmed at all (a dirty tree, no single commit) is a warning
at the top of the gate's output and summary. Without `--confirm` a suspect fails as before, and its line says it
was not confirmed. This is what teams whose timing alerts cried wolf ended up asking for: a paired rerun before
an alert.

The confirming job runs in a fresh folder beside `--current` (`<current>.confirm-<random>/ab`, or in the system's
temporary folder when that one cannot be written), never inside it: a retried gate starts its own job and gets the
same answer. It times the scenario the current folder recorded (its scenario.json, `--set` overrides resolved),
not the YAML file that scenario came from.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfbench.analysis import stats
from perfbench.analysis.stability import HOST_SPEED_TOLERANCE, PROBE_SAMPLES
from perfbench.errors import UserError
from perfbench.gate.checks import FAIL, INCONCLUSIVE, PASS, UNCONFIRMED, CheckResult
from perfbench.git_refs import is_sha, resolve_commit
from perfbench.lifecycle import Interrupted
from perfbench.results import ResultFolder, RunResult, atomic_write_text
from perfbench.results.ab_record import ABRecord
from perfbench.results.verdicts import FASTER, SAME
from perfbench.terminal_text import printable

# (base sha, head sha, scenario, out folder) -> the ab job's record
ABRunner = Callable[[str, str, str, Path], ABRecord]
SUSPECT_KINDS = ("timing", "speedup")
LATENCY_OF = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "prefill_tok_s": "ttft_ms", "decode_tok_s": "tpot_ms"}
# A slowdown no host-speed change between two folders explains: it fails even when no paired rerun can decide it
GROSS_SLOWDOWN = 2.0


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
    if not is_sha(sha):  # results/records.py refuses it at read; a folder built in memory is checked here too
        return Commit(None, dirty, f"a recorded commit that is not a sha ({sha[:40]!r})")
    return Commit(sha, dirty, "measured with uncommitted changes" if dirty else "")


def unconfirmable_warning(baseline: ResultFolder) -> str:
    """The warning for a baseline no paired rerun can reproduce ("" when one can)."""
    commit = folder_commit(baseline)
    if not commit.why:
        return ""
    return (f"the baseline {baseline.path} has {commit.why}: no timing suspect can be confirmed on pairs, only a "
            f"slowdown past {GROSS_SLOWDOWN:g}x (or past the host-speed probe's ratio) fails. Re-record it from a "
            "clean checkout with `perfbench baseline save`.")


def run_ab_job(base: str, head: str, scenario: str, out: Path) -> ABRecord:
    """The default runner: `perfbench ab BASE HEAD --scenario SCENARIO` with its default settings, except that its
    --max-time counts pairs, not the start-up (a confirmation that ran out of time in its start-up decides
    nothing). An interrupted job interrupts the gate (130 / 143), never a verdict from half its pairs."""
    from perfbench.run.ab import ABSettings, ab_job

    outcome = ab_job(base, head, scenario, [], str(out), ABSettings(budget_after_startup=True))
    if outcome.exit_code in (128 + 2, 128 + 15):  # the job saved its pairs and returned the signal's code
        raise Interrupted(outcome.exit_code - 128)
    return outcome.record


def job_folder(current: Path) -> Path:
    """A fresh folder for one confirming job: beside `current` (`<name>.confirm-<random>`), else in the system's
    temporary folder when `current`'s parent cannot be written."""
    prefix = f"{current.name}.confirm-"
    try:
        return Path(tempfile.mkdtemp(dir=current.parent, prefix=prefix))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=prefix))


def recorded_scenario(folder: ResultFolder, into: Path) -> Path | None:
    """The current folder's resolved scenario (scenario.json, its `--set` overrides applied) as a scenario file in
    `into`, named by the scenario so the job's runs carry its name; None when the folder recorded none."""
    recorded = folder.scenario or {}
    sections = {k: v for k, v in recorded.items() if k not in ("name", "source")}
    if not sections:
        return None
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(recorded.get("name") or "scenario"))[:80] or "scenario"
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{name}.json"
    atomic_write_text(path, json.dumps(sections, indent=1))
    return path


def _host_ratio(base: RunResult | None, cur: RunResult | None) -> float | None:
    """How much slower the host-speed probe ran for the current run than for the baseline's (None: unknown)."""
    if base is None or cur is None:
        return None
    before, after = base.finite_samples(PROBE_SAMPLES), cur.finite_samples(PROBE_SAMPLES)
    if not before or not after or stats.median(before) <= 0 or stats.median(after) <= 0:
        return None
    return stats.median(after) / stats.median(before)


def beyond_host_speed(check: CheckResult, baseline: ResultFolder, current: ResultFolder) -> str:
    """Why the suspect's slowdown is more than host speed can explain ("" when host speed might explain it).

    The slowdown is a timing check's ratio (its CI's lower end where it has one) or a speed-up's fall (host speed
    cancels inside each folder). The limit is GROSS_SLOWDOWN, raised to the host probe's ratio between the two
    runs, plus the probe's tolerance, when the probe says the current run's host was slower still."""
    details = check.details
    if check.kind == "timing":
        slowdown = details.get("ci_low", details.get("ratio"))
        host = _host_ratio(baseline.runs.get(check.run_id or ""), current.runs.get(check.run_id or ""))
    else:
        slowdown, host = details.get("fell"), None
    if not isinstance(slowdown, int | float):
        return ""
    limit, basis = GROSS_SLOWDOWN, f"{GROSS_SLOWDOWN:g}x"
    if host is not None and host * (1 + HOST_SPEED_TOLERANCE) > limit:
        limit = host * (1 + HOST_SPEED_TOLERANCE)
        basis = f"the host probe ran {host:.2f}x slower, +{HOST_SPEED_TOLERANCE:.0%}"
    if slowdown <= limit:
        return ""
    return f"a {slowdown:.2f}x slowdown is more than host speed can explain (limit {limit:.2f}x: {basis})"


def confirm(checks: list[CheckResult], baseline: ResultFolder, current: ResultFolder, repo: Path,
            runner: ABRunner = run_ab_job, folder_for_job: Callable[[Path], Path] = job_folder
            ) -> list[CheckResult]:
    """The checks with every suspect (a `timing` or `speedup` check that failed, or that found the threshold
    passed without significance) decided as the module docstring says; `folder_for_job(current folder)` gives
    the confirming job a fresh folder."""
    suspects = [c for c in checks if c.kind in SUSPECT_KINDS and c.status in (FAIL, INCONCLUSIVE)]
    if not suspects:
        return checks
    decided = _decide(suspects, baseline, current, repo, runner, folder_for_job)
    for c in suspects:
        found = decided[id(c)]
        if found.status == UNCONFIRMED and (gross := beyond_host_speed(c, baseline, current)):
            why = f"{gross}: fails although it could not be confirmed"
            decided[id(c)] = CheckResult(FAIL, c.kind, c.name, c.run_id, f"{found.message}; {why}",
                                         {**found.details, "gross": why})
    return [decided.get(id(c), c) for c in checks]


def _decide(suspects: list[CheckResult], baseline: ResultFolder, current: ResultFolder, repo: Path,
            runner: ABRunner, folder_for_job: Callable[[Path], Path]) -> dict[int, CheckResult]:
    base, cur = folder_commit(baseline), folder_commit(current)

    def each(status: str, why: str) -> dict[int, CheckResult]:
        return {id(c): CheckResult(status, c.kind, c.name, c.run_id, f"{c.message}; {why}",
                                   {**c.details, "confirmation": why}) for c in suspects}

    if base.why or cur.why:
        side, commit = ("baseline", base) if base.why else ("current", cur)
        return each(UNCONFIRMED, f"unconfirmed: the {side} folder has {commit.why}, so no paired rerun can decide "
                                 "(a suspect alone fails only past what host speed can explain)")
    assert base.sha is not None and cur.sha is not None
    if base.sha == cur.sha:
        return each(PASS, f"not a code change: both folders were measured at {cur.sha[:12]}, so the host made the "
                          "difference")
    missing = [sha for sha in (base.sha, cur.sha) if resolve_commit(repo, sha) is None]
    if missing:
        return each(UNCONFIRMED, f"unconfirmed: commit {missing[0][:12]} is not in {repo} (a suspect alone fails "
                                 "only past what host speed can explain)")
    try:
        root = folder_for_job(current.path)
        scenario = recorded_scenario(current, root / "scenario")
    except OSError as err:
        return each(UNCONFIRMED, f"unconfirmed: no folder for the confirming ab job ({err})")
    if scenario is None:
        return each(UNCONFIRMED, "unconfirmed: the current folder records no scenario.json to rerun (a suspect "
                                 "alone fails only past what host speed can explain)")
    out = root / "ab"
    print(printable(f"gate --confirm: the confirming ab job runs in {out}"), file=sys.stderr, flush=True)
    try:
        record = runner(base.sha, cur.sha, str(scenario), out)
    except UserError as err:
        return each(UNCONFIRMED, f"unconfirmed: the confirming ab job in {out} failed ({err})")
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
            elif verdict.verdict in (SAME, FASTER):
                why, status = f"not confirmed: {pairs} is {verdict.verdict}", PASS
            else:
                why, status = f"unconfirmed: {pairs} is {verdict.verdict}", UNCONFIRMED
        decided[id(c)] = CheckResult(status, c.kind, c.name, c.run_id, f"{c.message}; {why}",
                                     {**c.details, "confirmation": why})
    return decided
