"""`perfbench bisect GOOD BAD`: the first commit on first-parent history between GOOD and BAD that made a metric
slower, found with paired ab jobs.

Every step compares a commit with GOOD (one fixed baseline, so each answer means the same thing): exit code 1 of
the comparison (slower) marks it bad, 0 good; 2 (the commit does not build or run) and 3 (inconclusive) mark it
"skip", and a skipped commit is never blamed: the search moves to the nearest untested commit instead. The ends
are confirmed first: if BAD is not slower than GOOD, the bisect stops and says so. At the end a last comparison of
the last good commit with the first bad one gives the size of the change, and `perfbench diff` of their traces
when the comparison left traces; with `--ops` every comparison is an `ab --ops` job and the outcome names the op
groups and branches that moved in the first bad commit. Every step is written to bisect.json as it is decided,
so an interrupted bisect resumes where it stopped (same GOOD, BAD, scenario, --set overrides and metric; a
finished comparison is never rerun, and a comparison cut short by SIGINT/SIGTERM is not stored: the resume runs
it again in a fresh folder).

Exit codes: 0 a commit named, or BAD not slower than GOOD; 2 a usage error (refused before anything is stored) or
ends that could not be compared (not stored either: a resume after the cause is fixed compares them again); 3 the
ends' comparison could not decide; 130/143 interrupted.

The comparator is injectable (`Comparator`): `ab_comparator` runs `perfbench ab` (perfbench/run/ab.py `run_ab`);
tests answer from the commit's content.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from perfbench.bounded_files import MiB, load_json
from perfbench.errors import UserError
from perfbench.git_refs import END_OF_OPTIONS, checked_sha, git_command, resolve_commit
from perfbench.lifecycle import Interrupted
from perfbench.results import atomic_write_json
from perfbench.results.ab_record import ABRecord
from perfbench.results.validation import record_error
from perfbench.results.verdicts import INCONCLUSIVE, SLOWER

STATE_FILE = "bisect.json"
STATE_BYTES = 16 * MiB  # a bisect of 1,000 commits writes ~500 KB; the cap refuses a file before it is read
EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE = 0, 1, 2, 3
Label = Literal["good", "bad", "skip"]


class Comparison(BaseModel):
    """One comparison of `head` against `base`: the ab exit code, the metric's head/base with its CI."""

    base: str
    head: str
    code: Literal[0, 1, 2, 3]  # EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""
    folder: str = ""
    base_trace: str | None = None  # traces the comparison left, for `perfbench diff`
    head_trace: str | None = None
    moved: str = ""  # with --ops: the op groups and branches that moved (ab.json ops), in a few words

    @field_validator("ratio", "ci_low", "ci_high")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"must be a finite positive head/base ratio, got {value!r}")
        return value

    @model_validator(mode="after")
    def _ratio_with_its_interval(self) -> Comparison:
        given = [v is not None for v in (self.ratio, self.ci_low, self.ci_high)]
        if any(given) and not all(given):
            raise ValueError("ratio, ci_low and ci_high are given together or not at all")
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low {self.ci_low!r} is above ci_high {self.ci_high!r}")
        return self

    @property
    def label(self) -> Label:
        return {EXIT_FAIL: "bad", EXIT_PASS: "good"}.get(self.code, "skip")  # type: ignore[return-value]

    def text(self) -> str:
        ratio = ""
        if self.ratio is not None and self.ci_low is not None and self.ci_high is not None:
            ratio = f"head/base {self.ratio:.3f}x [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        return "; ".join(part for part in (ratio, self.reason) if part)


Comparator = Callable[[str, str, Path], Comparison]


class BisectState(BaseModel):
    """bisect.json: what was asked, the commits in order, and every comparison made so far."""

    good: str
    bad: str
    scenario: str
    metric: str
    commits: list[str]  # first-parent commits after GOOD up to BAD, oldest first
    overrides: list[str] = Field(default_factory=list)  # the --set overrides every comparison ran with
    steps: list[Comparison] = Field(default_factory=list)
    outcome: str = ""
    exit_code: int | None = None  # of the finished bisect; None while it is not

    def done(self, base: str, head: str) -> Comparison | None:
        return next((s for s in self.steps if (s.base, s.head) == (base, head)), None)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git with arguments bisect built from shas git answered (checked_sha), each after --end-of-options."""
    try:
        return subprocess.run(git_command(repo, *args), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        raise UserError(f"git {args[0]}: {err}") from None


def _commit(repo: Path, ref: str, name: str) -> str:
    sha = resolve_commit(repo, ref)  # after --end-of-options: a GOOD of "--output=x" is a revision, not found
    if sha is None:
        raise UserError(f"{name} {ref!r}: not a commit in {repo}")
    return sha


def first_parent_range(repo: Path, good: str, bad: str) -> tuple[str, str, list[str]]:
    """(GOOD's sha, BAD's sha, the commits after GOOD up to BAD on BAD's first-parent line, oldest first)."""
    good_sha, bad_sha = _commit(repo, good, "GOOD"), _commit(repo, bad, "BAD")
    if _git(repo, "merge-base", "--is-ancestor", END_OF_OPTIONS, checked_sha(good_sha, "GOOD"),
            checked_sha(bad_sha, "BAD")).returncode != 0:
        raise UserError(f"GOOD {good} is not an ancestor of BAD {bad}")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", END_OF_OPTIONS, f"{good_sha}..{bad_sha}")
    if listed.returncode != 0:
        raise UserError(f"git rev-list {good_sha[:10]}..{bad_sha[:10]}: {listed.stderr.strip()[-200:]}")
    commits = [checked_sha(sha, "git rev-list") for sha in listed.stdout.split()]
    if not commits or commits[-1] != bad_sha:
        raise UserError(f"BAD {bad} is not on the first-parent line after GOOD {good}")
    return good_sha, bad_sha, commits


def load_state(path: Path, fresh: BisectState) -> BisectState:
    """The saved state when it is the same bisect; a state of another bisect is refused. The file is someone's
    to edit: it is read size- and depth-capped (STATE_BYTES, bounded_files.MAX_DEPTH) and validated as a `BisectState`,
    its steps must compare this bisect's commits and name traces inside its folder; anything else is one line
    naming the file and the field."""
    if not path.exists() and not path.is_symlink():
        return fresh
    if not path.is_file():
        raise UserError(f"{path}: not a regular file; a bisect's state is a JSON file (choose another --out)")
    # size-capped before a byte is read, depth-capped (MAX_DEPTH) by a linear scan before the decoder recurses
    raw = load_json(path, STATE_BYTES)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: unreadable bisect state: not a JSON object")
    try:
        saved = BisectState.model_validate(raw)
    except ValidationError as err:
        raise UserError(f"{path}: unreadable bisect state: {record_error(err, '', BisectState).lstrip('.')}") from None
    asked = (fresh.good, fresh.bad, fresh.scenario, fresh.metric, fresh.commits, fresh.overrides)
    if (saved.good, saved.bad, saved.scenario, saved.metric, saved.commits, saved.overrides) != asked:
        raise UserError(f"{path}: holds another bisect ({saved.good[:10]}..{saved.bad[:10]}, {saved.scenario}, "
                        f"{saved.metric}); choose another --out")
    _check_steps(path, saved)
    return saved


def _check_steps(path: Path, state: BisectState) -> None:
    """Each stored step compares two commits of this bisect (GOOD and the listed ones) and names traces only
    inside the bisect's folder (a state naming /etc/passwd as a trace would have it read)."""
    known, folder = {state.good, *state.commits}, path.parent.resolve()
    for i, step in enumerate(state.steps):
        for name in ("base", "head"):
            if getattr(step, name) not in known:
                raise UserError(f"{path}: unreadable bisect state: steps[{i}].{name}: "
                                f"{getattr(step, name)[:40]!r} is not a commit of this bisect")
        for name in ("base_trace", "head_trace"):
            trace = getattr(step, name)
            if trace is not None and not Path(trace).resolve().is_relative_to(folder):
                raise UserError(f"{path}: unreadable bisect state: steps[{i}].{name}: {trace[:80]!r} is not inside "
                                f"{folder}")


class Bisect:
    def __init__(self, state: BisectState, compare: Comparator, out: Path, say: Callable[[str], None]) -> None:
        self.state, self.compare, self.out, self.say = state, compare, out, say

    def _folder(self, head: str) -> Path:
        """A fresh folder for the next comparison: a comparison cut short left its folder (and its pairs) behind."""
        name = f"{len(self.state.steps):02d}-{head[:10]}"
        folder, retry = self.out / name, 1
        while folder.exists():
            folder, retry = self.out / f"{name}-retry{retry}", retry + 1
        return folder

    def _step(self, base: str, head: str, what: str, keep_input_error: bool = True) -> Comparison:
        found = self.state.done(base, head)
        if found is None:
            self.say(f"bisect: {what}: {head[:10]} against {base[:10]} ...")
            found = self.compare(base, head, self._folder(head))
            if keep_input_error or found.code != EXIT_INPUT:
                self.state.steps.append(found)
                atomic_write_json(self.out / STATE_FILE, self.state.model_dump(mode="json"))
        self.say(f"bisect: {head[:10]} {found.label}" + (f" ({found.text()})" if found.text() else ""))
        return found

    def _finish(self, outcome: str, code: int) -> str:
        self.state.outcome, self.state.exit_code = outcome, code
        atomic_write_json(self.out / STATE_FILE, self.state.model_dump(mode="json"))
        return outcome

    def run(self) -> str:
        st = self.state
        # ends that could not be compared (an earlier version stored them) are compared again, never replayed
        st.steps = [s for s in st.steps if not ((s.base, s.head) == (st.good, st.bad) and s.code == EXIT_INPUT)]
        ends = self._step(st.good, st.bad, "confirming the ends", keep_input_error=False)
        if ends.code == EXIT_INPUT:
            return self._finish(f"bisect: BAD {st.bad[:10]} could not be compared with GOOD {st.good[:10]} "
                                f"({ends.text() or f'exit {ends.code}'}); nothing stored for it: fix the cause and "
                                "run the same command again", EXIT_INPUT)
        if ends.label != "bad":
            code = EXIT_INCONCLUSIVE if ends.code == EXIT_INCONCLUSIVE else EXIT_PASS
            word = "could not be shown slower than" if code == EXIT_INCONCLUSIVE else "is not slower than"
            return self._finish(f"nothing to bisect: BAD {st.bad[:10]} {word} GOOD {st.good[:10]} on {st.metric} "
                                f"({ends.text() or f'exit {ends.code}'}); no commit blamed", code)
        commits = st.commits
        lo, hi = -1, len(commits) - 1  # lo: last known good (-1: GOOD itself); hi: first known bad
        skipped: set[int] = set()
        while True:
            untested = [i for i in range(lo + 1, hi) if i not in skipped]
            if not untested:
                break
            mid = (lo + hi) // 2
            pick = min(untested, key=lambda i: (abs(i - mid), i))  # the midpoint, else its nearest untested neighbour
            label = self._step(st.good, commits[pick], "testing").label
            if label == "bad":
                hi = pick
            elif label == "good":
                lo = pick
            else:
                skipped.add(pick)
        return self._finish(self._verdict(lo, hi, sorted(i for i in skipped if lo < i < hi)), EXIT_PASS)

    def _verdict(self, lo: int, hi: int, between: list[int]) -> str:
        st = self.state
        first_bad = st.commits[hi]
        last_good = st.commits[lo] if lo >= 0 else st.good
        size = self._step(last_good, first_bad, "sizing the change")
        lines = [f"first bad commit: {first_bad} ({st.metric}: {size.text() or 'size not measured'}, against the "
                 f"last good commit {last_good[:10]})"]
        if between:
            lines.append("  or one of the skipped commits before it (they could not be tested): "
                         + ", ".join(st.commits[i][:10] for i in between))
        skips = [s.head[:10] for s in st.steps if s.label == "skip" and s.base == st.good]
        if skips:
            lines.append(f"skipped (did not build, run or decide; never blamed): {', '.join(skips)}")
        if size.moved:
            lines.append(f"ops that moved in the first bad commit (ab --ops): {size.moved}")
        lines.append(self._trace_diff(size))
        return "\n".join(lines)

    def _trace_diff(self, size: Comparison) -> str:
        if not (size.base_trace and size.head_trace):
            return "no traces around it to diff (ab jobs do not profile; `perfbench run` both commits to get them)"
        from perfbench.profiling.diff_runs import diff_command

        return diff_command(Path(size.base_trace), Path(size.head_trace), self.out / "diff")


def verdict_code(record: ABRecord, metric: str) -> tuple[int, float | None, float | None, float | None]:
    """The ab verdicts of one metric as an exit code (any run slower: 1; every run decided otherwise: 0; else 3),
    with the slowest run's head/base and CI."""
    found = [per[metric] for per in record.verdicts.values() if metric in per]
    if not found:
        return EXIT_INCONCLUSIVE, None, None, None
    worst = max(found, key=lambda v: v.ratio)
    if any(v.verdict == SLOWER for v in found):
        return EXIT_FAIL, worst.ratio, worst.ci_low, worst.ci_high
    code = EXIT_INCONCLUSIVE if any(v.verdict == INCONCLUSIVE for v in found) else EXIT_PASS
    return code, worst.ratio, worst.ci_low, worst.ci_high


def ab_comparator(scenario: str | None, metric: str, overrides: list[str], max_time_s: float,
                  ops: bool = False) -> Comparator:
    """Each comparison a `perfbench ab` job in its own folder (`ops`: `ab --ops`, so that each comparison names
    the op groups that moved); a commit that cannot be checked out, built or run is exit 2 (skip). The settings
    and the scenario with its overrides are checked here, once: a usage error is the command's (exit 2, nothing
    stored), never a commit's."""
    from perfbench.config.scenario import load_scenario  # noqa: PLC0415
    from perfbench.run.ab import ABSettings, ab_job  # noqa: PLC0415

    settings = ABSettings(max_time_s=max_time_s, ops=ops)
    load_scenario(scenario or "ci_smoke", overrides)

    def compare(base: str, head: str, out: Path) -> Comparison:
        try:
            outcome = ab_job(base, head, scenario, overrides, str(out), settings, report=None)
            code, record = outcome.exit_code, outcome.record
        except (UserError, OSError, RuntimeError, ValueError) as err:
            return Comparison(base=base, head=head, code=EXIT_INPUT, reason=" ".join(str(err).split())[:300],
                              folder=str(out))
        if code in (128 + 2, 128 + 15):  # the ab job saved its pairs and returned 130/143: the bisect stops too
            raise Interrupted(code - 128)
        if record.status == "interrupted":
            raise KeyboardInterrupt(record.stopped)
        code, ratio, low, high = verdict_code(record, metric)
        moved = record.ops.moved_text() if record.ops is not None else ""
        try:
            return Comparison(base=base, head=head, code=code, ratio=ratio, ci_low=low, ci_high=high,
                              folder=str(out), moved=moved)
        except ValidationError:  # an ab.json whose interval is no finite positive one: its code, not its numbers
            return Comparison(base=base, head=head, code=code, folder=str(out), moved=moved,
                              reason=f"head/base {ratio!r} [{low!r}, {high!r}] is not a finite interval")

    return compare


def bisect_with_code(repo: Path, good: str, bad: str, scenario: str, metric: str, out: Path, compare: Comparator,
                     say: Callable[[str], None] = print, overrides: list[str] | None = None) -> tuple[str, int]:
    """The bisect's outcome and its exit code (module docstring)."""
    good_sha, bad_sha, commits = first_parent_range(repo, good, bad)
    fresh = BisectState(good=good_sha, bad=bad_sha, scenario=scenario, metric=metric, commits=commits,
                        overrides=list(overrides or []))
    state = load_state(out / STATE_FILE, fresh)  # another bisect's folder is refused before anything is written
    out.mkdir(parents=True, exist_ok=True)
    if state.steps:
        say(f"bisect: resuming {out / STATE_FILE} ({len(state.steps)} comparisons already made)")
    run = Bisect(state, compare, out, say)
    text = run.run()
    return text, state.exit_code if state.exit_code is not None else EXIT_PASS


def bisect(repo: Path, good: str, bad: str, scenario: str, metric: str, out: Path, compare: Comparator,
           say: Callable[[str], None] = print, overrides: list[str] | None = None) -> str:
    return bisect_with_code(repo, good, bad, scenario, metric, out, compare, say, overrides)[0]
