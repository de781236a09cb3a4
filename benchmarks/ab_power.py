"""The power study of `perfbench ab`: how often it calls identical code a change, and how often it finds a plant.

    python benchmarks/ab_power.py [--aa 30] [--null 10] [--plant5 10] [--plant15 10] [--seed 0]
                                  [--truth-time 600] [--out reports/ab_power]

Settings and trial counts are fixed before the study (the defaults above, `perfbench ab` at its own defaults) and
nothing is tuned between trials. Four trial types, each a `perfbench ab PARENT HEAD` job on the tiny workload
(the default scenario's shape and base plan, whose six eager toggles are on; one run):

- A/A: HEAD is an empty commit on top of PARENT;
- layout-only null: HEAD adds dead code to model/ (never called), which changes code layout and nothing else
  (the Mytkowicz / Stabilizer check that plants cannot make);
- +5% and +15% plants (benchmarks/planted.py: every forward followed by a busy wait of that share of its time).

First, each plant's realised size is measured by one long job (`--truth-time` seconds, one look) and reported
with its interval, so each plant's target is judged against the size it really has here. Then every trial runs
once, the types interleaved in a seeded random order in one sitting (a slow spell of the host spreads over all
types). Every job's folder (ab.json: every pair) is kept under --out; a rerun with the same --out skips the jobs
already there. It prints, per type and metric, the verdict counts with 95% Clopper-Pearson intervals, the wall
times, and each acceptance target of the paired-measurement issue as PASS or FAIL.

Timing needs a quiet machine: nothing else running (tests, helpers, builds).
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

from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planted import commit_plant, commit_source

REPO = Path(__file__).resolve().parents[1]
SCENARIO = ["--scenario", "default_cpu", "--set", "perfbench.sweep.design=none", "--set", "perfbench.sweep.runs=[]",
            "--no-report"]
METRICS = ("ttft_ms", "tpot_ms")
DEAD_CODE = '''

def _unused_layout_probe(values):  # dead code: never called; it only moves the code that follows in memory
    total = 0
    for i, v in enumerate(values):
        total += (i * 2654435761 + int(v)) % 1000003
    return total


_UNUSED_TABLE = tuple(range(4096))
'''


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k successes in n trials."""
    alpha = 1 - level
    low = scipy_stats.beta.ppf(alpha / 2, k, n - k + 1) if k else 0.0
    high = scipy_stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(low), float(high)


def ab(base: str, head: str, out: Path, extra: list[str]) -> tuple[dict, float]:
    """One `perfbench ab` job of this checkout: (its ab.json, wall seconds); a kept folder is read back."""
    if (out / "ab.json").is_file():
        record = json.loads((out / "ab.json").read_text())
        return record, float(record.get("wall_s", 0.0))
    cmd = [sys.executable, "-m", "perfbench.cli", "ab", base, head, *SCENARIO, "--out", str(out), *extra]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    if not (out / "ab.json").is_file():
        raise SystemExit(f"ab failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    record = json.loads((out / "ab.json").read_text())
    record["wall_s"] = wall
    (out / "ab.json").write_text(json.dumps(record))
    return record, wall


def verdicts(record: dict) -> dict[str, str]:
    """metric -> verdict of the job's single run."""
    (per,) = record["verdicts"].values()
    return {metric: v["verdict"] for metric, v in per.items()}


def add_dead_code(tree: Path) -> None:
    path = tree / "model" / "layers" / "norm.py"
    path.write_text(path.read_text() + DEAD_CODE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=30)
    parser.add_argument("--null", type=int, default=10)
    parser.add_argument("--plant5", type=int, default=10)
    parser.add_argument("--plant15", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--truth-time", type=float, default=600.0, help="seconds of each plant's measuring job")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "ab_power")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parent, empty = commit_plant(REPO, 0.0)
    heads = {"aa": empty, "null": commit_source(REPO, add_dead_code, "layout-only: dead code in model/")[1],
             "plant5": commit_plant(REPO, 0.05)[1], "plant15": commit_plant(REPO, 0.15)[1]}
    print(f"parent {parent[:12]}; heads " + ", ".join(f"{k} {v[:12]}" for k, v in heads.items()), flush=True)

    realised: dict[str, dict[str, tuple[float, float, float]]] = {}
    for kind in ("plant5", "plant15"):
        record, wall = ab(parent, heads[kind], args.out / f"truth-{kind}",
                          ["--max-time", str(args.truth_time), "--looks", "1", "--band", "0.001", "--margin", "0"])
        (per,) = record["verdicts"].values()
        realised[kind] = {m: (v["ratio"], v["ci_low"], v["ci_high"]) for m, v in per.items()}
        print(f"truth {kind} ({wall:.0f} s): " + "; ".join(
            f"{m} {r:.4f}x [{lo:.4f}, {hi:.4f}] (half-width {(hi - lo) / 2 / r:.2%})"
            for m, (r, lo, hi) in realised[kind].items()), flush=True)

    plan = [k for k, n in (("aa", args.aa), ("null", args.null), ("plant5", args.plant5),
                           ("plant15", args.plant15)) for _ in range(n)]
    random.Random(args.seed).shuffle(plan)
    trials: dict[str, list[tuple[dict[str, str], float]]] = {k: [] for k in heads}
    for i, kind in enumerate(plan):
        record, wall = ab(parent, heads[kind], args.out / f"{i:03d}-{kind}", [])
        trials[kind].append((verdicts(record), wall))
        print(f"{i + 1}/{len(plan)} {kind}: {verdicts(record)} ({wall:.0f} s, {len(record['pairs'])} pairs, "
              f"{record.get('mode')})", flush=True)

    print(f"\n{'type':8} {'metric':8} {'n':>3} " + " ".join(f"{v:>26}" for v in
                                                          ("slower", "faster", "same", "inconclusive")))
    for kind, rows in trials.items():
        n = len(rows)
        for metric in METRICS:
            counts = [sum(r[metric] == v for r, _ in rows) for v in ("slower", "faster", "same", "inconclusive")]
            cells = []
            for k in counts:
                lo, hi = clopper_pearson(k, n) if n else (float("nan"),) * 2
                cells.append(f"{k:3d} [{lo:.2f}, {hi:.2f}]")
            print(f"{kind:8} {metric:8} {n:3d} " + " ".join(f"{c:>26}" for c in cells))
    walls = [w for rows in trials.values() for _, w in rows]
    if walls:
        print(f"wall time per trial: median {statistics.median(walls):.0f} s, max {max(walls):.0f} s")

    def calls(kind: str) -> int:
        return sum(any(r[m] in ("slower", "faster") for m in METRICS) for r, _ in trials[kind])

    def slower(kind: str, metric: str) -> int:
        return sum(r[metric] == "slower" for r, _ in trials[kind])

    size5 = min(realised["plant5"][m][0] for m in METRICS) - 1
    targets = [
        ("A/A: at most 1 false call in 30", calls("aa") <= 1),
        ("A/A: same on both metrics in >= 24 of 30",
         sum(all(r[m] == "same" for m in METRICS) for r, _ in trials["aa"]) >= 24),
        ("layout-only null: 0 false calls in 10", calls("null") == 0),
        ("+15%: slower 10 of 10 on each metric", all(slower("plant15", m) == len(trials["plant15"])
                                                    for m in METRICS)),
        (f"+5% (realised {size5:.1%}, must be >= 4.5%): slower >= 8 of 10 on each metric",
         size5 >= 0.045 and all(slower("plant5", m) >= 8 for m in METRICS)),
        ("each trial at most 120 s", bool(walls) and max(walls) <= 120),
    ]
    planned = (args.aa, args.null, args.plant5, args.plant15) == (30, 10, 10, 10)
    for text, ok in targets:  # the targets are for the planned counts; a pilot with fewer trials judges none
        print(f"{('PASS' if ok else 'FAIL') if planned else 'not judged (pilot counts)'}: {text}")


if __name__ == "__main__":
    main()
