"""One folder -> a `Snapshot`: a sweep's result folder, a `perfbench ab` folder or a saved baseline.

What a folder measured is read through the result readers (perfbench/results) and the speed-ups come from
perfbench/analysis/speedup.py, exactly as the run's table and report give them. A folder whose runs disagree on
the commit, the scenario, the machine, the software or emulation is refused (one line naming results.jsonl and
the line of the first run that differs): a point in a series must mean one thing.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfbench.analysis import paired, stats
from perfbench.analysis.rounds import merge_rounds
from perfbench.analysis.speedup import LATENCIES, MIN_T_ROUNDS, Speedup, plan_label, speedups
from perfbench.bounded_files import TRACE_BYTES, hash_capped
from perfbench.errors import UserError
from perfbench.history.git_order import commit_date, first_parent_order, is_sha
from perfbench.history.records import FolderKind, OpFamily, Point, Snapshot
from perfbench.history.schema import run_key
from perfbench.results import RunResult, load_folder
from perfbench.results.ab_record import AB_BYTES, AB_FILE, ABRecord, read_ab_record

BASELINE_FILE, RESULTS_FILE = "baseline.json", "results.jsonl"
ONCE_METRICS = ("compile_s", "first_ttft_ms")  # measured once per run: no CI
TOP_FAMILIES = 5
# no latency of one token or request takes 11 days: a larger sample is a broken timer or a unit error, and would
# overflow the statistics (squares of 1e308 are infinite)
MAX_SAMPLE_MS = 1e9


def content_hash(folder: Path) -> str:
    """What the folder measured, as a hash of results.jsonl and ab.json. Each file's size is checked against its
    reader's cap before a byte is read and the bytes are hashed in chunks: a folder that cannot be read is
    refused before it costs its size in memory (the hash is the same as of the whole bytes)."""
    digest = hashlib.sha256()
    for name, cap in ((RESULTS_FILE, TRACE_BYTES), (AB_FILE, AB_BYTES)):
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            hash_capped(path, cap, digest)
            digest.update(b"\0")
    return digest.hexdigest()


def machine_key(r: RunResult) -> str:
    """Where a run ran: timings compare only within one machine key (device, its name, torch's build tag)."""
    env = r.env
    name = env.device_name or env.cpu_model or "unknown"
    build = str(env.torch or "").partition("+")[2]
    return " / ".join(part for part in (r.spec.device, name, build and f"torch +{build}") if part)


def software_key(r: RunResult) -> str:
    """What ran: another torch (by version), torch_npu, torchair or CANN may decompose ops differently."""
    env = r.env
    parts = [f"torch {str(env.torch).partition('+')[0]}" if env.torch else "torch unknown"]
    parts += [f"{name} {getattr(env, name)}" for name in ("torch_npu", "torchair", "cann") if getattr(env, name)]
    return ", ".join(parts)


def _lines(path: Path) -> dict[str, int]:
    """run_id -> line of its last record in results.jsonl (load_results has already validated each line)."""
    out = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            out[str(json.loads(line).get("run_id"))] = lineno
    return out


def _one(results: list[RunResult], lines: dict[str, int], path: Path, what: str,
         value_of: Callable[[RunResult], Any]) -> Any:
    first = results[0]
    for r in results[1:]:
        if value_of(r) != value_of(first):
            raise UserError(f"{path}:{lines.get(r.run_id, '?')}: a mixed folder: run {r.run_id} has {what} "
                            f"{value_of(r)!r}, run {first.run_id} (line {lines.get(first.run_id, '?')}) "
                            f"{value_of(first)!r}")
    return value_of(first)


def _median_points(merged: list[RunResult]) -> list[Point]:
    out = []
    for r in merged:
        if r.status != "ok":
            continue
        label, shape = plan_label(r), r.shape().label()
        for key in LATENCIES:
            samples = r.finite_samples(key)
            if not samples:
                continue
            value = stats.median(samples)
            low, high = stats.bootstrap_ci(samples) if len(samples) >= 2 else (None, None)
            out.append(Point(family="median", run_id=r.spec.combination_id, plan=label, shape=shape, metric=key,
                             value=value, low=low, high=high, n=len(samples), basis="iterations"))
        for key in ONCE_METRICS:
            once = r.metric(key)
            if once is not None:
                out.append(Point(family="once", run_id=r.spec.combination_id, plan=label, shape=shape, metric=key,
                                 value=once, n=1))
    return out


def _speedup_df(gain: Speedup) -> float | None:
    """The t interval's degrees of freedom behind a speed-up's CI (speedup.py's rules); None: a bootstrap CI."""
    if gain.basis == "blocks":
        return float(paired.interval_df(gain.clusters)) or None
    if gain.basis == "rounds":
        return float(gain.n - 1) if gain.n >= MIN_T_ROUNDS else None
    return None


def _speedup_points(results: list[RunResult]) -> list[Point]:
    """Each plan over the baseline of its shape (speedup.py compares within one shape's runs)."""
    by_shape: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_shape[r.shape().label()].append(r)
    out = []
    for shape, group in sorted(by_shape.items()):
        merged = {r.spec.combination_id: r for r in merge_rounds(group)}
        gains = speedups(group)
        base = min((r for r in merged.values() if r.status == "ok"), key=lambda r: len(r.ran_on()), default=None)
        for cid, per in sorted(gains.items()):
            if base is None or cid == base.spec.combination_id or merged[cid].status != "ok":
                continue
            for key, gain in per.items():
                if gain is not None:
                    out.append(Point(family="speedup", run_id=cid, plan=plan_label(merged[cid]), shape=shape,
                                     metric=key, value=gain.value, low=gain.low, high=gain.high, n=gain.n,
                                     verdict=gain.verdict, basis=gain.basis, df=_speedup_df(gain)))
    return out


def _op_families(folder: Path, merged: list[RunResult]) -> list[OpFamily]:
    out = []
    for r in merged:
        table = folder / "runs" / r.run_id / "tables" / "per_category.csv"
        if r.status != "ok" or not table.is_file():
            continue
        try:
            with table.open(newline="") as fh:
                rows = [(row["side"], row["category"], float(row["total_us"])) for row in csv.DictReader(fh)]
        except (KeyError, ValueError, csv.Error) as err:
            raise UserError(f"{table}: unreadable trace table ({err})") from None
        rows.sort(key=lambda row: -row[2])
        out += [OpFamily(run_id=r.spec.combination_id, plan=plan_label(r), side=side, family=family,
                         total_us=total, rank=rank)
                for rank, (side, family, total) in enumerate(rows[:TOP_FAMILIES], 1)]
    return out


def read_ab(folder: Path) -> ABRecord:
    return read_ab_record(folder)


def _ab_points(record: ABRecord, merged: dict[str, RunResult]) -> list[Point]:
    out = []
    for rid, per in sorted(record.verdicts.items()):
        head = merged.get(f"{rid}@head")
        label = plan_label(head) if head is not None else rid
        shape = head.shape().label() if head is not None else ""
        for metric, v in sorted(per.items()):
            df = float(paired.interval_df(v.clusters)) if v.method in ("t", "yuen") else 0.0
            out.append(Point(family="ab", run_id=rid, plan=label, shape=shape, metric=metric, value=v.ratio,
                             low=v.ci_low, high=v.ci_high, n=v.pairs, verdict=v.verdict, basis="pairs",
                             level=v.level, df=df or None))
    return out


def kind_of(folder: Path) -> FolderKind:
    if (folder / AB_FILE).is_file():
        return "ab"
    return "baseline" if (folder / BASELINE_FILE).is_file() else "results"


def _check_samples(results: list[RunResult], lines: dict[str, int], path: Path) -> None:
    """Every latency sample a positive number of ms below MAX_SAMPLE_MS, every once-measured figure one >= 0:
    anything else is refused naming the line, the run and the field (it would break every statistic of its
    series)."""
    for r in results:
        where = f"{path}:{lines.get(r.run_id, '?')}: run {r.run_id}"
        if r.status != "ok":
            continue
        for key in LATENCIES:
            raw = r.samples.get(key)
            if raw is not None and not raw:
                raise UserError(f"{where}: samples.{key} is empty: an ok run measured no {key}")
            bad = [x for x in raw or [] if x is not None and math.isfinite(x) and not 0 < x < MAX_SAMPLE_MS]
            if bad:
                raise UserError(f"{where}: samples.{key} holds {bad[0]!r}: a latency is a positive number of ms "
                                f"below {MAX_SAMPLE_MS:g}")
        for key in ONCE_METRICS:
            once = r.metric(key)
            if once is not None and not (math.isfinite(once) and 0 <= once < MAX_SAMPLE_MS):
                raise UserError(f"{where}: summary.{key} is {once!r}: a duration is a finite number >= 0")


NO_COMMIT = ("unknown", "working tree")  # what a run records when it had no git checkout, or uncommitted changes


def _checked_sha(sha: str | None, where: str) -> str | None:
    """A recorded commit must be a sha (hex): a ref (HEAD~1) would name another commit in every clone, and an
    option-shaped value must never reach git."""
    if sha in NO_COMMIT:  # perfbench's own words for "no single commit": stored without one
        return None
    if sha and not is_sha(sha):
        raise UserError(f"{where} is {sha[:60]!r}: not a commit sha (7 to 64 lower-case hex digits)")
    return sha or None


def snapshot(folder: Path, repo: Path) -> Snapshot:
    """The folder's snapshot; UserError (one line naming file and line) for anything that cannot be stored.
    `repo` places its commit: the first-parent position from a full clone, the commit date from any clone."""
    loaded = load_folder(folder)
    kind = kind_of(folder)
    results = sorted(loaded.results, key=lambda r: r.run_id)
    if not results:
        raise UserError(f"{folder / RESULTS_FILE}: holds no runs")
    path = folder / RESULTS_FILE
    lines = _lines(path)
    _check_samples(results, lines, path)
    recorded = [r for r in results if r.env] or results
    machine = _one(recorded, lines, path, "machine", machine_key)
    software = _one(recorded, lines, path, "software", software_key)
    emulated = _one(recorded, lines, path, "emulation", lambda r: r.env.emulation or "") != ""
    scenario = _one(results, lines, path, "scenario", lambda r: r.spec.scenario)
    ab = read_ab(folder) if kind == "ab" else None
    if ab is not None:
        sha = _checked_sha(ab.head.sha, f"{folder / AB_FILE}: head.sha")
        dirty = ab.head.dirty
        base_sha = _checked_sha(ab.base.sha, f"{folder / AB_FILE}: base.sha")
    else:
        recorded_sha = _one(recorded, lines, path, "commit", lambda r: r.env.git_sha) or None
        sha = _checked_sha(recorded_sha, f"{path}:{lines.get(recorded[0].run_id, '?')}: env.git_sha")
        dirty = any(bool(r.env.git_dirty) for r in recorded)
        base_sha = None
    merged = merge_rounds(results)
    points = _ab_points(ab, {r.run_id: r for r in results}) if ab is not None else []
    if ab is None:
        points += _median_points(merged) + _speedup_points(results)
    dates = sorted(d for r in results if (d := r.started_at or r.env.date))
    recorded_at = dates[0] if dates else ""
    return Snapshot(path=str(folder.resolve()),
                    run_key=run_key(kind, sha, scenario, machine, software, emulated, recorded_at),
                    content_hash=content_hash(folder), kind=kind, sha=sha, dirty=dirty,
                    commit_order=first_parent_order(repo, sha) if sha else None,
                    commit_date=commit_date(repo, sha) if sha else None, base_sha=base_sha,
                    scenario=scenario, machine_key=machine, software_key=software, emulated=emulated,
                    recorded_at=recorded_at, points=points, op_families=_op_families(folder, merged))
