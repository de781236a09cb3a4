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

Exit codes: 0 pass, 1 regression, 2 input error (`UserError`: missing folder, no results.jsonl, bad rules),
3 inconclusive (nothing failed, but at least one timing check could not decide).

`save_baseline` records a result folder as a baseline (results + scenario + provenance in baseline.json);
`--baseline` accepts either kind of folder, since both hold results.jsonl.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from perfbench.analysis import stats
from perfbench.analysis.compare import match_runs
from perfbench.analysis.rounds import merge_rounds
from perfbench.errors import UserError
from perfbench.gate.ab_folder import evaluate_ab, is_ab_folder
from perfbench.gate.checks import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIP,
    CheckResult,
    check_numerics,
    check_op_count,
    check_ratio_pair,
    check_timing,
    check_toggles,
    check_trace_plan,
    mann_whitney_p,
    ratio_pairs,
    selects,
)
from perfbench.gate.rules import GateRules, RatioRule, TimingRule, default_rules, load_rules
from perfbench.results import ResultFolder, RunResult, atomic_write_json, atomic_write_text
from perfbench.results import load_folder as load_result_folder
from perfbench.results.timestamps import utc_timestamp
from perfbench.run.git_state import git_state

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
        return (f"gate: {self.verdict} ({self.count(FAIL)} failed, {self.count(PASS)} passed, "
                f"{self.count(INCONCLUSIVE)} inconclusive, {self.count(SKIP)} not compared; "
                f"rules: {self.rules_source})")

    def terminal(self) -> str:
        return "\n".join([*(c.line() for c in self.checks), self.headline()])

    def to_json(self) -> dict[str, Any]:
        return _json_safe({"result": self.verdict.lower(), "exit_code": self.exit_code,
                "baseline": str(self.baseline.path), "current": str(self.current.path),
                "baseline_provenance": self.baseline.provenance, "rules": self.rules_source,
                "counts": {s.lower(): self.count(s) for s in (FAIL, PASS, INCONCLUSIVE, SKIP)},
                "checks": [c.to_dict() for c in self.checks]})

    def markdown(self) -> str:
        verdict = self.verdict
        prov = self.baseline.provenance or {}
        sha = prov.get("git_sha") or "unknown"
        saved = f" (saved {prov.get('created_at', '?')}, git {sha})" if prov else ""
        lines = [f"## perfbench gate: {verdict}", "",
                 f"baseline `{self.baseline.path}`{saved} · current `{self.current.path}` · "
                 f"rules: {self.rules_source}", "",
                 f"**{self.count(FAIL)} failed**, {self.count(PASS)} passed, "
                 f"{self.count(INCONCLUSIVE)} inconclusive, {self.count(SKIP)} not compared", ""]
        for title, status in (("Failures", FAIL), ("Inconclusive", INCONCLUSIVE), ("Not compared", SKIP)):
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
    return folder


@dataclass(frozen=True)
class EnvironmentDiffs:
    software: list[str]  # what ran differs: no rule compares the pair
    machine: list[str]  # where it ran differs: timing rules do not compare the pair


def _recorded_diffs(base: RunResult, cur: RunResult, keys: tuple[str, ...],
                    view: Any = lambda value: value) -> list[str]:
    diffs = []
    for key in keys:
        before, after = base.env.get(key), cur.env.get(key)
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
        else:
            checks += _ratio_checks(rule, merge_rounds(list(current.runs.values())))
    return report


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
        return {str(r.env.get("emulation") or "not emulated") for r in folder.runs.values()}

    base_kinds, cur_kinds = kinds(base), kinds(cur)
    if base_kinds != cur_kinds and any(k != "not emulated" for k in base_kinds | cur_kinds):
        raise UserError(f"gate: baseline runs are {', '.join(sorted(base_kinds))} but current runs are "
                        f"{', '.join(sorted(cur_kinds))}; emulated npu results (CPU timings) compare only with "
                        f"results of the same emulation")


def run_gate(baseline: Path | None, current: Path, rules: Path | None, summary: Path | None,
             outputs: Callable[[GateReport], None] | None = None) -> int:
    """Print one line per check and a verdict; write markdown (+ .json beside it) when `summary` is given, and
    hand the report to `outputs` (the CI files, perfbench/gate/ci_output.py).

    Returns:
        0 when every check passed, 1 on a regression, 3 when nothing failed but a timing check could not
        decide. Input errors raise UserError.
    """
    if summary is not None and summary.suffix == ".json":
        raise UserError(f"--summary {summary}: give the markdown path (e.g. gate.md); JSON goes beside it")
    gate_rules = load_rules(rules) if rules is not None else default_rules()
    if is_ab_folder(current):  # both arms in one folder, decided from its pairs (gate/ab_folder.py)
        if baseline is not None:
            click.echo(f"gate: --current {current} is a perfbench ab folder: its base arm is the baseline; "
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
    click.echo(report.terminal())
    if summary is not None:
        atomic_write_text(summary, report.markdown())
        atomic_write_json(summary.with_suffix(".json"), report.to_json())
    if outputs is not None:
        outputs(report)
    return report.exit_code


# ---- baselines -----------------------------------------------------------------------------------

def _read_provenance(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
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


def save_baseline(folder: Path, dest: Path, force: bool = False, allow_failed: bool = False) -> Path:
    """Copy results.jsonl, results.csv and scenario.json from `folder` to `dest` and write baseline.json
    (date, git sha, source folder, run statuses, the distinct run environments). Returns `dest`.

    Refused (UserError, before anything is written; errors name the command's FOLDER / DEST arguments and
    its options): a `dest` that already holds a baseline unless `force` (`--force`), and a `folder` with runs
    that are not ok (error, timeout, killed) unless `allow_failed` (`--allow-failed`): a baseline missing a
    measurement gates nothing on it."""
    source = load_result_folder(folder, f"FOLDER {folder}")
    if not source.runs:
        raise UserError(f"FOLDER {folder}: results.jsonl holds no runs")
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
    dest.mkdir(parents=True, exist_ok=True)
    for name in BASELINE_FILES:
        if (folder / name).is_file():
            atomic_write_text(dest / name, (folder / name).read_text())
        else:
            (dest / name).unlink(missing_ok=True)  # a stale copy from an earlier baseline would mislead
    results = list(source.runs.values())
    sha, sha_source = _git_sha(results)
    environments: dict[str, dict[str, Any]] = {}
    for r in results:
        env = {k: v for k, v in r.env.to_dict().items() if k not in VOLATILE_ENV_KEYS}
        key = json.dumps(env, sort_keys=True, default=str)
        environments.setdefault(key, {"env": env, "run_ids": []})["run_ids"].append(r.run_id)
    atomic_write_json(dest / "baseline.json", {
        "created_at": utc_timestamp(),
        "source": str(folder.resolve()),
        "git_sha": sha,
        "git_sha_source": sha_source,
        "git_dirty": any(bool(r.env.get("git_dirty")) for r in results),
        "scenario": (source.scenario or {}).get("name"),
        "runs": len(results),
        "statuses": dict(Counter(r.status for r in results)),
        "environments": list(environments.values()),
    })
    return dest
