"""The real series that checks `perfbench calibrate`'s simulation: A/A and planted +5% `ab` jobs at the defaults.

    python benchmarks/engine_series.py --aa 8 --plant 4 --out reports/series-quiet [--condition quiet] [--seed 0]

Each job is `perfbench ab PARENT HEAD` at its defaults (scenario ci_smoke, the cap the host's noise file
recommends, else 110 s), as a separate command, the job types interleaved in a seeded random order (a slow spell
spreads over both). A/A: HEAD is an empty commit on top of PARENT; +5%: every forward followed by a busy wait of
5% of its time (benchmarks/planted.py). The jobs' folders are kept under --out (a rerun skips the done ones).

It prints per job the exit code, wall time, start-up and words, then per type the counts against what the noise
file's simulation predicts for these settings (the same `SequentialJob`, at each job's measured start-up): the
observed count must lie inside the central 95% of Binomial(n, p_predicted). Where it does not, the noise model is
wrong for that condition. Timing needs the machine to itself (or the one condition you name, e.g. a niced
spinner beside it).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from planted import commit_plant

from perfbench.analysis.calibration import Noise, row, simulate
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.ab_record import read_ab_record
from perfbench.run.detectable import noise_for

REPO = Path(__file__).resolve().parents[1]
SCENARIO = "ci_smoke"
PLANT = 0.05


def run_job(kind: str, parent: str, head: str, out: Path) -> dict:
    folder = out / f"{kind}"
    if (folder / "ab.json").is_file():
        record = read_ab_record(folder)
        return {"kind": kind.split("-")[0], "code": record.exit_code, "wall_s": None, "record": record}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from perfbench.cli import main; main()", "ab", parent, head,
                           "--no-report",
                           "--out", str(folder)], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - began
    (out / f"{kind}.log").write_text(done.stdout + done.stderr)
    record = read_ab_record(folder)
    return {"kind": kind.split("-")[0], "code": done.returncode, "wall_s": wall, "record": record}


def predicted(kind: str, startup_s: float, cap_s: float, jobs: int = 2000) -> dict[str, float]:
    record = noise_for(SCENARIO)
    if record is None:
        return {}
    noise = Noise.of(record)
    shift = PLANT if kind == "plant" else 0.0
    found = simulate(noise, shift, jobs, DecisionRule(), cap_s, startup_s, seed=11)
    r = row(shift, found)
    return {"exit1": r.detected, "all_same": float(np.mean([all(w == "same" for w in j.words.values())
                                                             for j in found])), "false_word": r.false_word}


def inside(count: int, n: int, p: float) -> str:
    low, high = scipy_stats.binom.ppf(0.025, n, p), scipy_stats.binom.ppf(0.975, n, p)
    return f"{count}/{n} (predicted {p:.0%}: 95% range {int(low)}-{int(high)}) " + (
        "AGREES" if low <= count <= high else "DISAGREES")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=8)
    parser.add_argument("--plant", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--condition", default="quiet")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shas_file = args.out / "commits.json"
    if shas_file.is_file():
        shas = json.loads(shas_file.read_text())
    else:
        parent, empty = commit_plant(REPO, 0.0)
        _, planted = commit_plant(REPO, PLANT)
        shas = {"parent": parent, "aa": empty, "plant": planted}
        shas_file.write_text(json.dumps(shas))
    order = [f"aa-{i}" for i in range(args.aa)] + [f"plant-{i}" for i in range(args.plant)]
    random.Random(args.seed).shuffle(order)
    jobs = []
    for kind in order:
        job = run_job(kind, shas["parent"], shas[kind.split("-")[0]], args.out)
        rec = job["record"]
        words = [v.verdict for per in rec.verdicts.values() for v in per.values()]
        first = (rec.startup_s or 0) + (rec.cluster_seconds[0] if rec.cluster_seconds else 0)
        wall = f"{job['wall_s']:.0f} s" if job["wall_s"] is not None else "(kept)"
        print(f"{kind}: exit {job['code']}, wall {wall}, start-up {rec.startup_s or 0:.0f} s (compile "
              f"{rec.compile_s or 0:.0f} s), first epoch done at {first:.0f} s, cap {rec.settings.max_time_s:g} s, "
              f"words {dict((w, words.count(w)) for w in sorted(set(words)))}", flush=True)
        jobs.append(job)
    print(f"\ncondition: {args.condition}")
    for kind in ("aa", "plant"):
        mine = [j for j in jobs if j["kind"] == kind]
        if not mine:
            continue
        records = [j["record"] for j in mine]
        walls = [j["wall_s"] for j in mine if j["wall_s"] is not None]
        startup = statistics.median(r.startup_s or 0 for r in records)
        cap = records[0].settings.max_time_s or 110.0
        p = predicted(kind, startup, cap)
        exit1 = sum(j["code"] == 1 for j in mine)
        all_same = sum(all(v.verdict == "same" for per in r.verdicts.values() for v in per.values()) for r in records)
        false = sum(any(v.verdict in ("slower", "faster") for per in r.verdicts.values() for v in per.values())
                    for r in records) if kind == "aa" else sum(
            any(v.verdict == "faster" for per in r.verdicts.values() for v in per.values()) for r in records)
        print(f"{kind}: {len(mine)} jobs, wall median {statistics.median(walls) if walls else 0:.0f} s, max "
              f"{max(walls) if walls else 0:.0f} s; start-up median {startup:.0f} s; exit 1 in {exit1}; all 'same' "
              f"in {all_same}; a false word in {false}")
        if p:
            print(f"  exit 1: {inside(exit1, len(mine), p['exit1'])}")
            print(f"  all same: {inside(all_same, len(mine), p['all_same'])}")
            print(f"  false word: {inside(false, len(mine), p['false_word'])}")
        else:
            print("  no noise file for this host kind: run perfbench calibrate first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
