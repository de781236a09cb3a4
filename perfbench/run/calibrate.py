"""`perfbench calibrate [SCENARIO]`: measure this host's timing noise, then say what a job here can detect.

1. Record: an A/A `ab` job (both arms HEAD, the same code) through the engine itself, with one look at the end
   (no early stop), for `record_s` seconds. Its epochs become a noise file (perfbench/results/noise_record.py):
   every epoch's paired log ratios per test, their estimates, the epoch times, the start-up, host kind and load.
   Or read them from an earlier A/A ab folder (`--from`).
2. Simulate (perfbench/analysis/calibration.py): `jobs` jobs per shift, drawn from the recorded epochs, decided by
   the jobs' own decision code; the table of false words, decided, detected and time per shift; the smallest
   slowdown detected in 80% of jobs at the cap; the cap that decides 90% of A/A jobs; the variance check.
3. Keep: the noise file in the result folder and in the per-user cache, where `ab`, `run` and `gate` find it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfbench.analysis import paired
from perfbench.analysis.calibration import (
    Noise,
    ShiftRow,
    VarianceCheck,
    epoch_design,
    recommended_cap,
    smallest_detectable,
    table,
    variance_check,
)
from perfbench.analysis.sequential import DecisionRule
from perfbench.errors import UserError
from perfbench.results import atomic_write_json
from perfbench.results.ab_record import ABRecord, read_ab_record
from perfbench.results.host_kind import HostKind, this_host
from perfbench.results.noise_record import (
    NOISE_FILE,
    Detectable,
    HostLoad,
    NoiseEpoch,
    NoiseRecord,
    noise_path,
)
from perfbench.results.timestamps import utc_timestamp
from perfbench.roofline.peaks import cache_dir

DEFAULT_CAP_S = 110.0  # `ab`'s cap where no noise file says better
METRICS = ("ttft_ms", "tpot_ms")


@dataclass(frozen=True)
class Calibration:
    """What calibrate found: the noise, the table at the cap, what it can detect, and the variance check."""

    record: NoiseRecord
    rows: list[ShiftRow]
    check: VarianceCheck
    simulate_s: float
    path: Path | None  # the per-user copy


def noise_of_ab(record: ABRecord, host: HostKind, load: HostLoad) -> NoiseRecord:
    """The epochs of an A/A ab job as a noise record: whole epochs only (the last, cut by the deadline, is left
    out when it has fewer pairs than the others)."""
    if record.base.sha is None or record.base.sha != record.head.sha:
        raise UserError(f"the ab job compared {record.base.ref} with {record.head.ref}: calibrate needs an A/A job "
                        "(both arms the same commit)")
    per = record.settings.pairs_per_epoch or 1
    run_ids = list(dict.fromkeys(p.run_id for p in record.pairs))
    tests = [f"{rid}/{m}" for rid in run_ids for m in METRICS]
    epochs = []
    for cluster, seconds in enumerate(record.cluster_seconds):
        mine = [p for p in record.pairs if p.cluster == cluster]
        logs: dict[str, list[float]] = {}
        for rid in run_ids:
            for m in METRICS:
                base = [getattr(p.base, m) for p in mine if p.run_id == rid]
                head = [getattr(p.head, m) for p in mine if p.run_id == rid]
                if None in base or None in head:
                    continue
                logs[f"{rid}/{m}"] = paired.log_ratios(base, head).tolist()
        if not logs or any(len(v) < per for v in logs.values()) or set(logs) != set(tests):
            continue
        epochs.append(NoiseEpoch(seconds=seconds, log_ratios=logs,
                                 estimates={t: paired.cluster_estimate(np.asarray(v)) for t, v in logs.items()},
                                 probe_ms=[p.base.probe_ms for p in mine if p.base.probe_ms is not None]))
    if len(epochs) < 3:
        raise UserError(f"the ab job has {len(epochs)} whole epochs; calibrate needs at least 3 (record longer)")
    return NoiseRecord(scenario=record.scenario, host=host, load=load, commit=record.base.sha,
                       recorded=utc_timestamp(), pairs_per_epoch=per, startup_s=record.startup_s or 0.0,
                       compile_s=record.compile_s, tests=tests, epochs=epochs)


def simulate_record(record: NoiseRecord, jobs: int, cap_s: float, startup_s: float | None = None,
                    rule: DecisionRule | None = None, seed: int = 0) -> tuple[list[ShiftRow], Detectable,
                                                                           VarianceCheck, float]:
    rule = rule or DecisionRule()
    noise = Noise.of(record)
    startup = record.startup_s if startup_s is None else startup_s
    began = time.perf_counter()
    rows = table(noise, jobs, rule, cap_s, startup, seed=seed)
    simulate_s = time.perf_counter() - began
    search_jobs = max(jobs // 5, 100)  # the bisection's steps need fewer jobs than the table
    detectable = Detectable(cap_s=cap_s, smallest_change=smallest_detectable(noise, search_jobs, rule, cap_s, startup,
                                                                             seed=seed),
                            recommended_cap_s=recommended_cap(noise, search_jobs, rule, startup, seed=seed),
                            jobs=jobs)
    return rows, detectable, variance_check(noise), simulate_s


def calibrate(scenario: str | None, overrides: list[str], out_dir: str | None, record_s: float, jobs: int,
              cap_s: float, startup_s: float | None, condition: str, from_folder: str | None,
              keep: bool = True, ops: bool = False) -> Calibration:
    host = this_host()
    load = HostLoad(condition=condition)
    if from_folder is not None:
        ab = read_ab_record(Path(from_folder))
        out = Path(out_dir) if out_dir else Path(from_folder)
    else:
        from perfbench.run.ab import ABSettings, ab_job
        from perfbench.run.runner import default_out

        out = Path(out_dir) if out_dir else default_out(f"calibrate-{scenario or 'ci_smoke'}")
        before = os.getloadavg()[0]
        outcome = ab_job("HEAD", "HEAD", scenario, overrides, str(out),
                         ABSettings(max_time_s=record_s, looks=1, ops=ops), report=None, say_noise=False)
        ab = outcome.record
        load = HostLoad(loadavg_before=round(before, 2), loadavg_after=round(os.getloadavg()[0], 2),
                        condition=condition)
        if ab.status != "ok":
            raise UserError(f"the A/A job ended {ab.status} ({ab.stopped}); nothing to calibrate from")
    record = noise_of_ab(ab, host, load)
    rows, detectable, check, simulate_s = simulate_record(record, jobs, cap_s, startup_s)
    record = record.model_copy(update={"detectable": detectable})
    if ops:  # calibrate --ops (perfbench/run/calibrate_ops.py)
        from perfbench.run.calibrate_ops import op_calibration

        startup = record.startup_s if startup_s is None else startup_s
        # a tenth of --jobs: each group is a shift of its own, judged over the whole family
        record = record.model_copy(update={"ops": op_calibration(ab, cap_s, startup, max(100, jobs // 10))})
    path = None
    if keep:
        atomic_write_json(out / NOISE_FILE, record.model_dump(mode="json"))
        path = noise_path(cache_dir(), host, record.scenario)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, record.model_dump(mode="json"))
    return Calibration(record, rows, check, simulate_s, path)


def table_lines(result: Calibration, startup_s: float) -> list[str]:
    record, d = result.record, result.record.detectable
    assert d is not None
    condition = record.load.condition or "condition not named"
    lines = [f"calibrate {record.scenario} on {record.host.describe()} ({condition}"
             f"; load average {_load(record.load)}): {len(record.epochs)} epochs of "
             f"{record.pairs_per_epoch} pairs, {len(record.tests)} tests, start-up {record.startup_s:.0f} s"
             + (f" (compile {record.compile_s:.0f} s)" if record.compile_s is not None else ""),
             f"simulated {d.jobs} jobs per shift in {result.simulate_s:.1f} s, cap {d.cap_s:g} s, start-up "
             f"{startup_s:.0f} s:",
             "  shift  false word  decided  detected  median s  p90 s"]
    for r in result.rows:
        lines.append(f"  {r.shift:5.0%}  {r.false_word:10.1%}  {r.decided:7.1%}  {r.detected:8.1%}  {r.median_s:8.0f}"
                     f"  {r.p90_s:5.0f}")
    change = f"{d.smallest_change:.1%}" if d.smallest_change is not None else "nothing up to 50%"
    cap = f"{d.recommended_cap_s:g} s" if d.recommended_cap_s is not None else "none up to 600 s"
    lines.append(f"this host could detect {change} (80% of jobs) at a {d.cap_s:g} s cap; 90% of A/A jobs are "
                 f"decided with a cap of {cap}")
    verdict = "honest" if result.check.honest else "NOT honest: the intervals do not match the recorded noise"
    lag = f"; lag-1 autocorrelation of epochs {result.check.lag1:+.2f}" if result.check.lag1 is not None else ""
    lines.append(f"variance check: mean t^2 {result.check.mean_t2:.2f} over {result.check.values} epochs "
                 f"(1 when the intervals are honest): {verdict}{lag}")
    design = epoch_design(record)
    best = (f"{design.pairs_best}" if design.pairs_best is not None
            else "more (no spread between epochs beyond the pairs' own)")
    lines.append(f"design: one pair's log ratio spreads {design.pair_sd:.3f}, an epoch's centre "
                 f"{design.epoch_sd:.3f}; a round of pairs takes {design.pair_s:.2f} s; {design.pairs_now} pairs "
                 f"per epoch recorded, the narrowest interval for the time at {best}")
    if record.ops is not None:
        from perfbench.run.calibrate_ops import op_lines

        lines += op_lines(record.ops)
    if result.path is not None:
        lines.append(f"noise file: {result.path}")
    return lines


def _load(load: HostLoad) -> str:
    if load.loadavg_before is None or load.loadavg_after is None:
        return "not recorded"
    return f"{load.loadavg_before:.2f} before, {load.loadavg_after:.2f} after"
