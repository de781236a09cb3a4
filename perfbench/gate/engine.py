"""`perfbench gate`: compare a current result folder with a baseline and exit 0 (pass) or 1 (regression).

Runs are matched by run_id. A pair is compared only when both runs are ok and ran the same thing
(`ENV_SPEC_KEYS` from the spec, `SOFTWARE_ENV_KEYS` and the torch version from the recorded env, where both
sides have them). Timing rules also need the same machine (`MACHINE_ENV_KEYS`, and the torch build tag such
as "+cpu"); deterministic rules (toggles, op counts, numerics) do not, so a baseline recorded on one CPU model
still gates another. Every other case is reported as not compared (SKIP), never silently dropped. A run that
was ok in the baseline and is not ok now fails the gate, and so does one that is missing from the current
folder (unless gate.yaml says `missing_runs: skip`: a truncated sweep must not pass) and a gate whose baseline
rules found nothing to compare. A timing check whose evidence cannot decide (effect within the noise, CI across
the bound, a contended machine) is INCONCLUSIVE: no failure, and no pass either.

Absolute timings of two folders were measured at different times, so a timing check that fails between them is
a suspect: with `confirm` it is decided on pairs (perfbench/gate/confirm.py), and one that cannot be confirmed
is UNCONFIRMED, reported but failing only when the slowdown is beyond what host speed can explain. The paired
speed-ups of each plan over its baseline (measured in the same blocks of one folder, so host speed cancels) are
compared across folders by `speedup` rules.

Exit codes: 0 pass, 1 regression, 2 input error (`UserError`: missing folder, no results.jsonl, bad rules),
3 inconclusive (nothing failed, but at least one timing check could not decide).

`save_baseline` records a result folder as a baseline (results + scenario + provenance in baseline.json);
`--baseline` accepts either kind of folder, since both hold results.jsonl.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfbench.analysis import stats
from perfbench.analysis.compare import match_runs
from perfbench.analysis.rounds import merge_rounds
from perfbench.analysis.speedup import baseline_of, plan_label, speedups
from perfbench.bounded_files import METADATA_BYTES, load_json
from perfbench.errors import UserError
from perfbench.gate.ab_folder import evaluate_ab
from perfbench.gate.checks import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIP,
    UNCONFIRMED,
    CheckResult,
    check_numerics,
    check_op_count,
    check_ratio_pair,
    check_speedup,
    check_timing,
    check_toggles,
    check_trace_plan,
    mann_whitney_p,
    ratio_pairs,
    selects,
)
from perfbench.gate.confirm import SUSPECT_KINDS, ABRunner, confirm, run_ab_job, unconfirmable_warning
from perfbench.gate.rules import GateRules, RatioRule, SpeedupRule, TimingRule, default_rules, load_rules
from perfbench.measure.code_origin import mixed_code
from perfbench.measure.git_state import git_state
from perfbench.results import CodeOrigin, ResultFolder, RunResult, atomic_write_json, atomic_write_text, write_results
from perfbench.results import load_folder as load_result_folder
from perfbench.results.ab_record import is_ab_folder
from perfbench.results.files import create_temp_folder
from perfbench.results.timestamps import utc_timestamp
from perfbench.run.folder_owner import exclusive, not_written
from perfbench.terminal_text import echo

ENV_SPEC_KEYS = ("device", "dtype", "world_size", "model", "num_layers")
# Keys of perfbench.environment.collect_environment, compared only where both runs recorded them. Software:
# another version may decompose ops differently, so nothing is compared across it (torch by its version).
SOFTWARE_ENV_KEYS = ("torch_npu", "torchair", "cann")
# Machine: only timings depend on it (torch by its build tag: "2.13.0+cpu" and "2.13.0" run the same code).
MACHINE_ENV_KEYS = ("device_name",)
EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE = 0, 1, 3
VOLATILE_ENV_KEYS = ("date",)  # differ between any two runs; left out when grouping environments
BASELINE_KINDS = ("timing", "toggles", "op_count")
BASELINE_FILES = ("results.jsonl", "results.csv", "scenario.json")


@dataclass
class GateReport:
    baseline: ResultFolder
    current: ResultFolder
    rules_source: str
    checks: list[CheckResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown first: what weakens the gate's answer

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    @property
    def exit_code(self) -> int:
        if self.count(FAIL):
            return EXIT_FAIL
        return EXIT_INCONCLUSIVE if self.count(INCONCLUSIVE) else EXIT_PASS

    @property
    def verdict(self) -> str:
        return {EXIT_FAIL: "FAIL", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}.get(self.exit_code, "PASS")

    def headline(self) -> str:
        unconfirmed = f", {self.count(UNCONFIRMED)} unconfirmed" if self.count(UNCONFIRMED) else ""
        return (f"gate: {self.verdict} ({self.count(FAIL)} failed, {self.count(PASS)} passed, "
                f"{self.count(INCONCLUSIVE)} inconclusive{unconfirmed}, {self.count(SKIP)} not compared; "
                f"rules: {self.rules_source})")

    def terminal(self) -> str:
        return "\n".join([*(f"WARNING: {w}" for w in self.warnings), *(c.line() for c in self.checks),
                          self.headline()])

    def to_json(self) -> dict[str, Any]:
        return _json_safe({"result": self.verdict.lower(), "exit_code": self.exit_code,
                "baseline": str(self.baseline.path), "current": str(self.current.path),
                "baseline_provenance": self.baseline.provenance, "rules": self.rules_source,
                "warnings": self.warnings,
                "counts": {s.lower(): self.count(s) for s in (FAIL, PASS, INCONCLUSIVE, UNCONFIRMED, SKIP)},
                "checks": [c.to_dict() for c in self.checks]})

    def markdown(self) -> str:
        verdict = self.verdict
        prov = self.baseline.provenance or {}
        sha = prov.get("git_sha") or "unknown"
        saved = f" (saved {prov.get('created_at', '?')}, git {sha})" if prov else ""
        lines = [f"## perfbench gate: {verdict}", "",
                 f"baseline `{self.baseline.path}`{saved} · current `{self.current.path}` · "
                 f"rules: {self.rules_source}", "",
                 *(f"> **Warning:** {w}\n" for w in self.warnings),
                 f"**{self.count(FAIL)} failed**, {self.count(PASS)} passed, "
                 f"{self.count(INCONCLUSIVE)} inconclusive, {self.count(SKIP)} not compared", ""]
        for title, status in (("Failures", FAIL), ("Inconclusive", INCONCLUSIVE),
                              ("Unconfirmed timing suspects (failing only past what host speed explains)", UNCONFIRMED),
                              ("Not compared", SKIP)):
            rows = [c for c in self.checks if c.status == status]
            if rows:
                lines += [f"### {title}", "", *_md_table(rows), ""]
        passed = [c for c in self.checks if c.status == PASS]
        if passed:
            lines += [f"<details><summary>{len(passed)} checks passed</summary>", "", *_md_table(passed), "",
                      "</details>", ""]
        return "\n".join(lines)


def _json_safe(obj: Any) -> Any:
    """NaN/inf as strings: strict JSON readers (CI dashboards, JavaScript) reject bare NaN."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def _md_table(rows: list[CheckResult]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    return ["| status | check | run | detail |", "|---|---|---|---|",
            *(f"| {c.status} | {cell(c.name)} | {cell(c.run_id or '')} | {cell(c.message)} |" for c in rows)]


# ---- folders -------------------------------------------------------------------------------------

def load_folder(path: Path, role: str) -> ResultFolder:
    """A result or baseline folder given as --`role`; one without runs cannot be gated (one-line UserError)."""
    folder = load_result_folder(path, f"--{role} {path}")
    if not folder.runs:
        raise UserError(f"--{role} {path}: results.jsonl holds no runs")
    refuse_mixed_code(folder, f"--{role} {path}")
    return folder


def refuse_mixed_code(folder: ResultFolder, what: str) -> None:
    """A folder whose runs (or ranks) imported model/ or perfbench/ from different commits or folders measured
    more than one code: one line, never gated (Environment.code, measure/code_origin.py). Arms of `perfbench
    ab` import their own model/ on purpose and are compared arm by arm."""
    arms: dict[str | None, list[list[CodeOrigin]]] = {}
    for run in folder.runs.values():
        arms.setdefault(run.env.ab_arm, []).append(list(run.env.code))
    for arm, origins in arms.items():
        if problem := mixed_code(origins):
            raise UserError(f"{what}: its runs{f' of arm {arm}' if arm else ''} ran different code ({problem}); "
                            "gate a folder measured by one checkout")


@dataclass(frozen=True)
class EnvironmentDiffs:
    software: list[str]  # what ran differs: no rule compares the pair
    machine: list[str]  # where it ran differs: timing rules do not compare the pair


def _recorded_diffs(base: RunResult, cur: RunResult, keys: tuple[str, ...],
                    view: Any = lambda value: value) -> list[str]:
    diffs = []
    for key in keys:
        before, after = getattr(base.env, key), getattr(cur.env, key)
        if before is not None and after is not None and view(before) != view(after):
            diffs.append(f"{key} {before} -> {after}")
    return diffs


def _torch_version(value: Any) -> str:
    return str(value).split("+", 1)[0]


def _torch_build(value: Any) -> str:
    return str(value).partition("+")[2]


def environment_diffs(base: RunResult, cur: RunResult) -> EnvironmentDiffs:
    software = [f"{key} {base.selector_field(key)} -> {cur.selector_field(key)}" for key in ENV_SPEC_KEYS
                if base.selector_field(key) != cur.selector_field(key)]
    software += _recorded_diffs(base, cur, ("torch",), _torch_version)
    software += _recorded_diffs(base, cur, SOFTWARE_ENV_KEYS)
    machine = _recorded_diffs(base, cur, MACHINE_ENV_KEYS) + _recorded_diffs(base, cur, ("torch",), _torch_build)
    return EnvironmentDiffs(software, machine)


# ---- evaluation ----------------------------------------------------------------------------------

def _pair_runs(baseline: ResultFolder, current: ResultFolder, checks: list[CheckResult],
               missing_runs: str = "fail") -> list[tuple[RunResult, RunResult, list[str]]]:
    """Runs comparable with the baseline, each with its machine differences (which rule out timing rules);
    everything else becomes a SKIP, or a FAIL for a lost ok status and, with `missing_runs` "fail" (the
    default; gate.yaml `missing_runs`), for a baseline run that was ok and is missing from current."""
    base_name = (baseline.scenario or {}).get("name")
    cur_name = (current.scenario or {}).get("name")
    if base_name and cur_name and base_name != cur_name:
        checks.append(CheckResult(SKIP, "coverage", "scenario", None,
                                  f"scenarios differ: baseline '{base_name}', current '{cur_name}'"))
    # the same run_id is the same measurement (a stable hash of what defines it): no looser matching here
    matches, only_base, only_cur = match_runs(baseline.results, current.results, by_identity=False)
    for r in sorted(only_base, key=lambda r: r.run_id):
        if r.status == "ok" and missing_runs == "fail":  # what the baseline measured must be measured again
            checks.append(CheckResult(FAIL, "coverage", "missing", r.run_id,
                                      "in the baseline, missing from current (an incomplete sweep; gate.yaml "
                                      "`missing_runs: skip` to allow)"))
        else:
            checks.append(CheckResult(SKIP, "coverage", "missing", r.run_id,
                                      "in the baseline, missing from current"))
    for r in sorted(only_cur, key=lambda r: r.run_id):
        checks.append(CheckResult(SKIP, "coverage", "new", r.run_id, "in current, not in the baseline"))
    pairs = []
    for match in sorted(matches, key=lambda m: m.a.run_id):
        base, cur, rid = match.a, match.b, match.a.run_id
        if base.status != "ok":
            checks.append(CheckResult(SKIP, "status", "status", rid,
                                      f"baseline status {base.status}, current {cur.status}: not compared"))
        elif cur.status != "ok":
            error = (cur.error or "").strip().splitlines()[-1:] or ["no error recorded"]
            checks.append(CheckResult(FAIL, "status", "status", rid, f"ok in the baseline, now {cur.status}: "
                                      f"{error[0]}"))
        elif (diffs := environment_diffs(base, cur)).software:
            checks.append(CheckResult(SKIP, "coverage", "environment", rid,
                                      f"different environment ({'; '.join(diffs.software)}): not compared"))
        else:
            pairs.append((base, cur, diffs.machine))
    return pairs


def evaluate(baseline: ResultFolder, current: ResultFolder, rules: GateRules) -> GateReport:
    report = GateReport(baseline, current, rules.source)
    checks = report.checks
    machine_pairs = _pair_runs(baseline, current, checks, rules.missing_runs)
    pairs = [(b, c) for b, c, _ in machine_pairs]
    timing_pairs = [(b, c) for b, c, machine in machine_pairs if not machine]
    if any(rule.kind == "timing" for rule in rules.rules):
        for _, cur, machine in machine_pairs:
            if machine:
                checks.append(CheckResult(SKIP, "coverage", "machine", cur.run_id,
                                          f"another machine ({'; '.join(machine)}): timing rules not compared, "
                                          "deterministic rules still are"))
    if not pairs and any(rule.kind in BASELINE_KINDS for rule in rules.rules):
        counts = f"{len(baseline.runs)} baseline runs, {len(current.runs)} current runs"
        checks.append(CheckResult(FAIL, "coverage", "comparable", None,
                                  f"no run could be compared with the baseline ({counts}); "
                                  "a gate that compares nothing cannot pass"))
    elif pairs and not timing_pairs and all(rule.kind == "timing" for rule in rules.rules
                                            if rule.kind in BASELINE_KINDS):
        checks.append(CheckResult(INCONCLUSIVE, "coverage", "comparable", None,
                                  "every comparable run ran on another machine: the timing rules compared "
                                  "nothing"))
    current_ok = [r for _, r in sorted(current.runs.items()) if r.status == "ok"]
    adjusted = _adjusted_p_values(rules, timing_pairs)
    for rule in rules.rules:
        if rule.kind == "timing":
            checks += [check_timing(rule, b, c, adjusted.get((id(rule), c.run_id)), rules.correction)
                       for b, c in timing_pairs if selects(c, rule.where)]
        elif rule.kind == "toggles":
            checks += [check_toggles(rule, b, c) for b, c in pairs if selects(c, rule.where)]
        elif rule.kind == "op_count":
            checks += [check_op_count(rule, b, c) for b, c in pairs if selects(c, rule.where)]
        elif rule.kind == "numerics":
            checks += [check_numerics(rule, c) for c in current_ok if selects(c, rule.where)]
        elif rule.kind == "trace_plan":
            # runs made without profiling have no trace to check: nothing to say about them
            checks += [check_trace_plan(rule, c) for c in current_ok
                       if selects(c, rule.where) and c.trace.plan_check]
        elif rule.kind == "speedup":
            checks += _speedup_checks(rule, baseline, current, {c.spec.combination_id for _, c in pairs})
        else:
            checks += _ratio_checks(rule, merge_rounds(list(current.runs.values())))
    return report


def _speedup_checks(rule: SpeedupRule, baseline: ResultFolder, current: ResultFolder,
                    comparable: set[str]) -> list[CheckResult]:
    """Each plan's paired speed-up (current folder) against the same plan's in the baseline folder, for the
    plans whose runs are comparable (same software); nothing when neither folder timed its plans in blocks."""
    if not any(r.blocks for folder in (baseline, current) for r in folder.results if r.status == "ok"):
        return []  # no run timed in blocks: no paired speed-up to check (and no bootstrap to spend on it)
    base_gains, cur_gains = speedups(baseline.results), speedups(current.results)
    paired_somewhere = any(g is not None and g.basis == "blocks" for gains in (base_gains, cur_gains)
                           for per in gains.values() for g in per.values())
    if not paired_somewhere:
        return []
    merged = [r for r in merge_rounds(current.results) if r.status == "ok"]
    representative = {r.spec.combination_id: r for r in merged}
    reference = baseline_of(merged)
    out = []
    for cid, per in sorted(cur_gains.items()):
        run = representative.get(cid)
        if (run is None or cid not in comparable or cid not in base_gains or not selects(run, rule.where)
                or (reference is not None and cid == reference.spec.combination_id)):
            continue
        out.append(check_speedup(rule, f"{cid} ({plan_label(run)})", base_gains[cid].get(rule.metric),
                                 per.get(rule.metric), combination_id=cid))
    return out


def _adjusted_p_values(rules: GateRules,
                       pairs: list[tuple[RunResult, RunResult]]) -> dict[tuple[int, str], float]:
    """(rule identity, run_id) -> Holm-adjusted p over every timing check decided by a U test; {} for none."""
    if rules.correction == "none":
        return {}
    keys, raw = [], []
    for rule in rules.rules:
        if isinstance(rule, TimingRule):
            for b, c in pairs:
                p = mann_whitney_p(rule, b, c) if selects(c, rule.where) else None
                if p is not None:
                    keys.append((id(rule), c.run_id))
                    raw.append(p)
    return dict(zip(keys, stats.holm_adjust(raw)))


def _ratio_checks(rule: RatioRule, current: list[RunResult]) -> list[CheckResult]:
    pairs = ratio_pairs(rule, current)
    if not pairs:
        # A within-run rule that pairs nothing checks nothing: a toggle went inactive or the sweep changed.
        return [CheckResult(FAIL, "ratio", rule.name or f"{rule.metric} ratio", None,
                            f"no ok run pairs numerator {rule.numerator} with denominator {rule.denominator} "
                            f"(where {rule.where or 'any'}, match {', '.join(rule.match)})")]
    return [check_ratio_pair(rule, num, den) for num, den in pairs]


def refuse_mixed_emulation(base: ResultFolder, cur: ResultFolder) -> None:
    """Emulated-NPU results are CPU timings of emulated ops: never gated against other hardware's results."""
    def kinds(folder: ResultFolder) -> set[str]:
        return {str(r.env.emulation or "not emulated") for r in folder.runs.values()}

    base_kinds, cur_kinds = kinds(base), kinds(cur)
    if base_kinds != cur_kinds and any(k != "not emulated" for k in base_kinds | cur_kinds):
        raise UserError(f"gate: baseline runs are {', '.join(sorted(base_kinds))} but current runs are "
                        f"{', '.join(sorted(cur_kinds))}; emulated npu results (CPU timings) compare only with "
                        f"results of the same emulation")


def run_gate(baseline: Path | None, current: Path, rules: Path | None, summary: Path | None,
             outputs: Callable[[GateReport], None] | None = None, confirm_suspects: bool = False,
             repo: Path | None = None, runner: ABRunner = run_ab_job) -> int:
    """Print one line per check and a verdict; write markdown (+ .json beside it) when `summary` is given, and
    hand the report to `outputs` (the CI files, perfbench/gate/ci_output.py). With `confirm_suspects`, timing
    suspects are decided on pairs (perfbench/gate/confirm.py) in `repo`.

    Returns:
        0 when every check passed, 1 on a regression, 3 when nothing failed but a timing check could not
        decide. Input errors raise UserError.
    """
    if summary is not None and summary.suffix == ".json":
        raise UserError(f"--summary {summary}: give the markdown path (e.g. gate.md); JSON goes beside it")
    gate_rules = load_rules(rules) if rules is not None else default_rules()
    if is_ab_folder(current):  # both arms in one folder, decided from its pairs (gate/ab_folder.py)
        if baseline is not None:
            echo(f"gate: --current {current} is a perfbench ab folder: its base arm is the baseline; "
                       f"--baseline {baseline} is not read", err=True)
        folder, checks = evaluate_ab(current, gate_rules)
        report = GateReport(folder, folder, gate_rules.source, checks)
    else:
        if baseline is None:
            raise UserError(f"--baseline: required unless --current is a perfbench ab folder ({current} holds "
                            "no ab.json)")
        base_folder, current_folder = load_folder(baseline, "baseline"), load_folder(current, "current")
        refuse_mixed_emulation(base_folder, current_folder)
        report = evaluate(base_folder, current_folder, gate_rules)
        if confirm_suspects:
            report.checks = confirm(report.checks, base_folder, current_folder, repo or Path.cwd(), runner)
            timed = any(c.kind in SUSPECT_KINDS for c in report.checks)  # only where suspects can arise
            if timed and (warning := unconfirmable_warning(base_folder)):
                report.warnings.append(warning)
        else:
            report.checks = [_unconfirmed_failure(c) for c in report.checks]
    echo(report.terminal())
    if summary is not None:
        atomic_write_text(summary, report.markdown())
        atomic_write_json(summary.with_suffix(".json"), report.to_json())
    if outputs is not None:
        outputs(report)
    return report.exit_code


def _unconfirmed_failure(check: CheckResult) -> CheckResult:
    if check.kind == "timing" and check.status == FAIL:
        check.message += "; not confirmed on pairs (run with --confirm: a suspect alone then never fails)"
    return check


# ---- baselines -----------------------------------------------------------------------------------

def _read_provenance(path: Path) -> dict[str, Any] | None:
    try:
        data = load_json(path, METADATA_BYTES)
    except UserError:
        return None
    return data if isinstance(data, dict) else None


def _git_sha(results: list[RunResult]) -> tuple[str | None, str | None]:
    """The commit the runs recorded, else perfbench's checkout at save time (and which one it is)."""
    recorded = {str(r.env.git_sha) for r in results if r.env.git_sha}
    if len(recorded) == 1:
        return recorded.pop(), "runs"
    if len(recorded) > 1:
        return ",".join(sorted(recorded)), "runs (several commits)"
    sha, _ = git_state()
    return (None, None) if sha == "unknown" else (sha, "perfbench's checkout at save time")


def save_baseline(folder: Path, dest: Path, force: bool = False, allow_failed: bool = False,
                  allow_dirty: bool = False) -> Path:
    """Write results.jsonl, results.csv and scenario.json of `folder` to `dest` with baseline.json (date, git sha,
    source folder, run statuses, the distinct run environments). Returns `dest`.

    Atomic: the baseline is written into a temporary folder beside `dest`, which then replaces it, all under a lock
    on `dest`'s parent, so two saves to one `dest` never mix (the second one sees the first's baseline). The runs
    are written from their records, so an older folder's environment passes the allow-list too.

    Refused (UserError, before anything is written; errors name the command's FOLDER / DEST arguments and
    its options): a `folder` a live sweep is writing (naming its pid), a `dest` that already holds a baseline
    unless `force` (`--force`), and a `folder` with runs that are not ok (error, timeout, killed) unless
    `allow_failed` (`--allow-failed`): a baseline missing a measurement gates nothing on it; and a `folder` measured
    with uncommitted changes unless `allow_dirty` (`--allow-dirty`): no commit reproduces it, so `gate --confirm`
    can confirm no timing suspect against it."""
    if dest.exists() and not dest.is_dir():
        raise UserError(f"DEST {dest}: exists and is not a folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with not_written(folder, f"FOLDER {folder}"), exclusive(dest.parent):
        source = load_result_folder(folder, f"FOLDER {folder}")
        _check_save(source, folder, dest, force, allow_failed)
        _check_clean(source, folder, allow_dirty)
        staging = create_temp_folder(dest.parent, f".{dest.name}.saving-")  # the umask's mode, not 0700
        try:
            _write_baseline(source, folder, staging)
            _replace_folder(staging, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def _check_save(source: ResultFolder, folder: Path, dest: Path, force: bool, allow_failed: bool) -> None:
    if not source.runs:
        raise UserError(f"FOLDER {folder}: results.jsonl holds no runs")
    refuse_mixed_code(source, f"FOLDER {folder}")
    if dest.exists() and not dest.is_dir():
        raise UserError(f"DEST {dest}: exists and is not a folder")
    if dest.resolve() == folder.resolve():
        raise UserError(f"DEST {dest}: is FOLDER itself; choose another folder")
    held = [name for name in ("baseline.json", *BASELINE_FILES) if (dest / name).is_file()]
    if held and not force:
        saved = (_read_provenance(dest / "baseline.json") or {}).get("created_at")
        when = f" saved {saved}" if saved else f" ({held[0]})"
        raise UserError(f"DEST {dest}: already holds a baseline{when}; pass --force to overwrite it")
    failed = sorted((r for r in source.runs.values() if r.status != "ok"), key=lambda r: r.run_id)
    if failed and not allow_failed:
        listed = ", ".join(f"{r.run_id} {r.status}" for r in failed[:3]) + (", ..." if len(failed) > 3 else "")
        raise UserError(f"FOLDER {folder}: {len(failed)} of {len(source.runs)} runs are not ok ({listed}); "
                        "rerun them, or pass --allow-failed to save the baseline anyway")


def _check_clean(source: ResultFolder, folder: Path, allow_dirty: bool) -> None:
    dirty = sorted(r.run_id for r in source.runs.values() if r.env.git_dirty)
    if dirty and not allow_dirty:
        raise UserError(f"FOLDER {folder}: {len(dirty)} of {len(source.runs)} runs were measured with uncommitted "
                        "changes, so no commit reproduces them and the gate could confirm no timing suspect against "
                        "this baseline; commit and rerun, or pass --allow-dirty to save it anyway")


def _write_baseline(source: ResultFolder, folder: Path, out: Path) -> None:
    results = list(source.runs.values())
    write_results(out, results)  # results.jsonl + results.csv from the (allow-listed) records
    if source.scenario is not None:  # as read: credentials masked (results/env_allowlist.py masked_values)
        atomic_write_json(out / "scenario.json", source.scenario)
    sha, sha_source = _git_sha(results)
    environments: dict[str, dict[str, Any]] = {}
    for r in results:
        env = {k: v for k, v in r.env.to_dict().items() if k not in VOLATILE_ENV_KEYS}
        key = json.dumps(env, sort_keys=True, default=str)
        environments.setdefault(key, {"env": env, "run_ids": []})["run_ids"].append(r.run_id)
    atomic_write_json(out / "baseline.json", {
        "created_at": utc_timestamp(),
        "source": str(folder.resolve()),
        "git_sha": sha,
        "git_sha_source": sha_source,
        "git_dirty": any(bool(r.env.git_dirty) for r in results),
        "scenario": (source.scenario or {}).get("name"),
        "runs": len(results),
        "statuses": dict(Counter(r.status for r in results)),
        "environments": list(environments.values()),
    })


def _replace_folder(staging: Path, dest: Path) -> None:
    """`staging` becomes `dest`: by one rename for a new `dest`; else the old folder is renamed away before
    `staging` takes its name (a reader sees the old baseline, then none for an instant, then the new one: never a
    mix), and what the old folder held besides its baseline moves into the new one."""
    if not dest.exists():
        os.rename(staging, dest)
        return
    old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old-"))
    parked = old / dest.name
    try:
        os.rename(dest, parked)
        try:
            os.rename(staging, dest)
        except BaseException:
            os.rename(parked, dest)  # the earlier baseline stays
            raise
        ours = {"baseline.json", *BASELINE_FILES}
        for entry in parked.iterdir():
            if entry.name not in ours and not (dest / entry.name).exists():
                os.rename(entry, dest / entry.name)
    finally:
        shutil.rmtree(old, ignore_errors=True)
