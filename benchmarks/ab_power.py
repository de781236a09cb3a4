"""How often `perfbench ab` calls a planted slowdown "slower", and how often it calls no change a change.

    python benchmarks/ab_power.py [--trials 10] [--planted 0.15,0.05] [--out reports/ab_power]

For each planted factor f (and for A/A: an empty commit against its parent) it clones this repository's HEAD
in a temporary worktree and commits a plant that makes every forward of the tiny model slower by f
(benchmarks/planted.py). First one long `perfbench ab` of the planted commit against its parent measures what
the plant really costs here (its TTFT and TPOT ratios with their CIs: the size of the effect, not assumed).
Then `--trials` ordinary `perfbench ab` jobs at the default settings (different pair orders) record their
verdicts. It prints, per arm and metric, the share of trials called slower / faster / same with 95%
Clopper-Pearson intervals, and each trial's wall time. Every trial's folder (ab.json: all pairs) is kept under
--out, and a rerun with the same --out adds trials instead of repeating them.

Timing needs a quiet machine: nothing else running (tests, helpers, builds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planted import commit_plant  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# the default scenario's tiny workload (8 layers, b1, prompt 256, 16 new tokens), all toggles off (no compile: a
# worker starts in seconds), one run
SCENARIO = ["perfbench.sweep.design=none", "perfbench.sweep.runs=[]"]
VERDICTS = ("slower", "faster", "same", "inconclusive")


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k successes in n trials."""
    alpha = 1 - level
    low = scipy_stats.beta.ppf(alpha / 2, k, n - k + 1) if k else 0.0
    high = scipy_stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(low), float(high)


def ab(base: str, head: str, out: Path, extra: list[str]) -> tuple[dict, float]:
    """One `perfbench ab` job of this checkout: (its ab.json, wall seconds)."""
    sets = [x for s in SCENARIO for x in ("--set", s)]
    cmd = [sys.executable, "-m", "perfbench.cli", "ab", base, head, "--scenario", "default_cpu", *sets,
           "--out", str(out), "--no-report", *extra]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    if not (out / "ab.json").is_file():
        raise SystemExit(f"ab failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads((out / "ab.json").read_text()), wall


def verdict_of(record: dict) -> dict[str, str]:
    """metric -> verdict of the job's single run."""
    (per,) = record["verdicts"].values()
    return {metric: v["verdict"] for metric, v in per.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--planted", default="0.15,0.05", help="slowdown factors, comma separated")
    parser.add_argument("--no-aa", action="store_true", help="skip the A/A arm")
    parser.add_argument("--truth-time", type=float, default=300.0, help="seconds of the long measuring run")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "ab_power")
    args = parser.parse_args()
    factors = [float(x) for x in args.planted.split(",") if x.strip()] + ([] if args.no_aa else [0.0])
    args.out.mkdir(parents=True, exist_ok=True)
    summary = []
    for factor in factors:
        name = f"planted_{factor:g}" if factor else "aa"
        parent, planted = commit_plant(REPO, factor)
        truth_dir = args.out / name / "truth"
        if not (truth_dir / "ab.json").is_file():
            # a long run that never stops early: the plant's true size on this host, with its CI
            ab(parent, planted, truth_dir, ["--max-time", str(args.truth_time), "--min-pairs", "100000"])
        truth = json.loads((truth_dir / "ab.json").read_text())
        (per,) = truth["verdicts"].values()
        sizes = {m: (v["ratio"], v["ci_low"], v["ci_high"], v["pairs"]) for m, v in per.items()}
        counts = {m: dict.fromkeys(VERDICTS, 0) for m in sizes}
        walls = []
        for k in range(args.trials):
            trial = args.out / name / f"trial_{k:03d}"
            if (trial / "ab.json").is_file():
                record, wall = json.loads((trial / "ab.json").read_text()), None
            else:
                record, wall = ab(parent, planted, trial, ["--seed", str(k)])
                walls.append(wall)
            for metric, verdict in verdict_of(record).items():
                counts[metric][verdict] += 1
        for metric, (ratio, low, high, pairs) in sizes.items():
            n = sum(counts[metric].values())
            rates = ", ".join(f"{v} {c}/{n} [{clopper_pearson(c, n)[0]:.2f}, {clopper_pearson(c, n)[1]:.2f}]"
                              for v, c in counts[metric].items())
            line = (f"{name} {metric}: measured head/base {ratio:.3f}x [{low:.3f}, {high:.3f}] ({pairs} pairs); "
                    f"{rates}")
            summary.append(line)
            print(line, flush=True)
        if walls:
            print(f"{name}: trial wall time median {sorted(walls)[len(walls) // 2]:.0f} s, max {max(walls):.0f} s",
                  flush=True)
    (args.out / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
