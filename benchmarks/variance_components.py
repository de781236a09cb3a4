"""Variance components of a paired A/A comparison: what the cluster unit of `perfbench ab` must be.

    python benchmarks/variance_components.py [--jobs 4] [--max-time 90] [--seed 0] [--out reports/variance]

A pair's log ratio log(head / base) of identical code is modelled as d = u_process + u_epoch + e_pair, with SDs
tau_process (between cold worker processes), tau_epoch (between re-allocation epochs of one process) and s
(between pairs of one epoch). Three regimes, each an A/A `perfbench ab HEAD HEAD` job on one tiny run (the
default scenario's shape, every toggle off), with one look only and no band it could reach, so every job runs
its full time:

- R1: two processes (`--processes two`): each worker generation is a cold pair of processes, one per arm; its
  clusters give tau between two-process generations (tau_process of today's fallback) and s;
- R2: one process holding both arms (`--processes one`), epochs of 6 pairs with the weights re-allocated between
  them: tau_epoch and s inside a job; several cold jobs give tau_process of the one-process design;
- R3: R2 with OMP_PROC_BIND=close.

`--jobs` jobs of each regime run in one sitting in a seeded random order (regimes interleaved, so a slow spell of
the host does not hit one regime only). Estimates: one-way / nested ANOVA (method of moments) on the log ratios,
90% intervals from a two-stage bootstrap (jobs, then clusters within each drawn job; 2000 resamples), and the
cost of a cluster (wall seconds) and of a job's start-up. Every job's folder (ab.json: every pair) is kept under
--out, and the summary is written to --out/components.json.

Timing needs a quiet machine: nothing else running (tests, helpers, builds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCENARIO = ["--scenario", "default_cpu", "--set", "perfbench.sweep.design=none", "--set", "perfbench.sweep.runs=[]",
            "--no-report", "--looks", "1", "--band", "0.0001", "--margin", "0"]
REGIMES = {"R1": (["--processes", "two", "--pairs-per-process", "8"], {}),
           "R2": (["--processes", "one", "--pairs-per-epoch", "6"], {}),
           "R3": (["--processes", "one", "--pairs-per-epoch", "6"], {"OMP_PROC_BIND": "close"})}
METRICS = ("ttft_ms", "tpot_ms")


def run_job(regime: str, out: Path, max_time: float) -> dict:
    args, env = REGIMES[regime]
    cmd = [sys.executable, "-m", "perfbench.cli", "ab", "HEAD", "HEAD", *SCENARIO, *args, "--max-time",
           str(max_time), "--out", str(out)]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **env})
    if not (out / "ab.json").is_file():
        raise SystemExit(f"{regime} job failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    record = json.loads((out / "ab.json").read_text())
    record["wall_s"] = time.monotonic() - started
    return record


def log_ratios(record: dict, metric: str) -> dict[int, np.ndarray]:
    """cluster -> the log ratios of its pairs."""
    out: dict[int, list[float]] = {}
    for p in record["pairs"]:
        b, h = p["base"].get(metric), p["head"].get(metric)
        if b and h and b > 0 and h > 0:
            out.setdefault(p["cluster"], []).append(float(np.log(h / b)))
    return {c: np.asarray(v) for c, v in out.items() if len(v) >= 2}


def components(jobs: list[dict[int, np.ndarray]]) -> dict[str, float]:
    """s, tau_cluster and tau_job by the method of moments (negative variance estimates set to 0)."""
    within = [x for job in jobs for x in job.values()]
    n = float(np.mean([x.size for x in within]))
    s2 = float(np.mean([x.var(ddof=1) for x in within]))
    cluster_means = [np.array([x.mean() for x in job.values()]) for job in jobs]
    between = [m.var(ddof=1) for m in cluster_means if m.size >= 2]
    tau_cluster2 = max(float(np.mean(between)) - s2 / n, 0.0) if between else float("nan")
    job_means = np.array([m.mean() for m in cluster_means])
    g = float(np.mean([m.size for m in cluster_means]))
    within_job = (tau_cluster2 if np.isfinite(tau_cluster2) else 0.0) + s2 / n  # one cluster a job: no tau_cluster
    tau_job2 = max(float(job_means.var(ddof=1)) - within_job / g, 0.0) if job_means.size >= 2 else float("nan")
    return {"s": s2 ** 0.5, "tau_cluster": tau_cluster2 ** 0.5, "tau_job": tau_job2 ** 0.5,
            "pairs_per_cluster": n, "clusters_per_job": g, "jobs": len(jobs)}


def bootstrap(jobs: list[dict[int, np.ndarray]], rng: np.random.Generator, resamples: int = 2000
              ) -> dict[str, tuple[float, float]]:
    """90% percentile intervals of each component: jobs drawn with replacement, then clusters within each."""
    draws: dict[str, list[float]] = {"s": [], "tau_cluster": [], "tau_job": []}
    for _ in range(resamples):
        sample = []
        for j in rng.integers(0, len(jobs), len(jobs)):
            clusters = list(jobs[j].values())
            sample.append({k: clusters[c] for k, c in enumerate(rng.integers(0, len(clusters), len(clusters)))})
        found = components(sample)
        for key in draws:
            if np.isfinite(found[key]):
                draws[key].append(found[key])
    return {k: (float(np.quantile(v, 0.05)), float(np.quantile(v, 0.95))) if v else (float("nan"),) * 2
            for k, v in draws.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="cold jobs per regime")
    parser.add_argument("--max-time", type=float, default=90.0, help="seconds per job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "variance")
    args = parser.parse_args()
    order = [r for r in REGIMES for _ in range(args.jobs)]
    random.Random(args.seed).shuffle(order)
    records: dict[str, list[dict]] = {r: [] for r in REGIMES}
    for i, regime in enumerate(order):
        out = args.out / f"{i:02d}-{regime}"
        if (out / "ab.json").is_file():
            record = json.loads((out / "ab.json").read_text())
        else:
            record = run_job(regime, out, args.max_time)
        records[regime].append(record)
        print(f"{i + 1}/{len(order)} {regime}: {len(record['pairs'])} pairs, "
              f"{len(record.get('cluster_seconds', []))} clusters, startup {record.get('startup_s') or 0:.0f} s",
              flush=True)
    rng = np.random.default_rng(args.seed)
    summary = {}
    for regime, recs in records.items():
        costs = [c for r in recs for c in r.get("cluster_seconds", [])]
        startup = [r["startup_s"] for r in recs if r.get("startup_s") is not None]
        summary[regime] = {"cluster_s": float(np.mean(costs)) if costs else None,
                           "startup_s": float(np.mean(startup)) if startup else None}
        for metric in METRICS:
            jobs = [x for x in (log_ratios(r, metric) for r in recs) if x]
            point = components(jobs)
            summary[regime][metric] = {**point, "ci90": bootstrap(jobs, rng)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "components.json").write_text(json.dumps(summary, indent=2))
    print(f"{'regime':6} {'metric':8} {'s':>22} {'tau between clusters':>24} {'tau between jobs':>22} "
          f"{'cluster s':>9} {'startup s':>9}")
    for regime, per in summary.items():
        for metric in METRICS:
            c = per[metric]

            def cell(key: str, c: dict = c) -> str:
                lo, hi = c["ci90"][key]
                return f"{c[key]:.3f} [{lo:.3f}, {hi:.3f}]"

            print(f"{regime:6} {metric:8} {cell('s'):>22} {cell('tau_cluster'):>24} {cell('tau_job'):>22} "
                  f"{per['cluster_s'] or 0:9.1f} {per['startup_s'] or 0:9.1f}")
    print("R1: clusters are worker generations (a cold pair of processes each: tau between clusters is the "
          "two-process tau_process); R2/R3: clusters are epochs of one process (tau_epoch), jobs are cold processes "
          "(tau between jobs is the one-process tau_process). 90% intervals: two-stage bootstrap (jobs, then "
          "clusters).")


if __name__ == "__main__":
    main()
