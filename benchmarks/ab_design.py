"""Which default `ab` design a host's noise allows: candidate designs simulated from one recorded noise file.

    python benchmarks/ab_design.py --folder CALIBRATE_FOLDER [--jobs 1000] [--caps 90 120 150]

A design times a subset of ci_smoke's runs (every run: 8 tests; the all-off and all-on runs: 4 tests; all-on
alone: 2 tests). Its epochs are the recorded ones restricted to its tests, and shorter: an epoch's time is taken
as proportional to the runs it times (every run costs about the same pair of iterations; the move and the
untimed round scale the same way). Each design x cap is simulated with the jobs' own decision (perfbench
calibrate's simulator), with the recorded start-up: A/A decided (every test "same"), false words, and the share
of +3% and +5% jobs detected (exit 1). The folder is a `perfbench calibrate` result folder (its noise.json, and
its results.jsonl for the runs' plans: all off is the run with the fewest toggles on, all on the one with most).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbench.analysis.calibration import Noise, row, simulate
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.noise_record import read_noise

DESIGNS = {"every run (4 runs, 8 tests)": None, "all off + all on (2 runs, 4 tests)": 2,
           "all on alone (1 run, 2 tests)": 1}


def subset(noise: Noise, runs: int | None, all_runs: list[str]) -> Noise:
    """`all_runs` ordered all off, all on, then the others."""
    if runs is None:
        return noise
    keep_runs = all_runs[:2] if runs == 2 else all_runs[1:2]
    cols = [i for i, t in enumerate(noise.tests) if t.split("/")[0] in keep_runs]
    scale = len(keep_runs) / len(all_runs)
    return Noise([noise.tests[i] for i in cols], noise.estimates[:, cols], noise.pairs[:, cols],
                 noise.seconds * scale)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--caps", type=float, nargs="+", default=[90.0, 120.0, 150.0])
    args = parser.parse_args()
    record = read_noise(args.folder / "noise.json")
    noise = Noise.of(record)
    toggles_on = {}
    for line in (args.folder / "results.jsonl").read_text().splitlines():
        raw = json.loads(line)
        on = [k for k, v in raw["plan"].items() if isinstance(v, dict) and v.get("state") == "on"]
        toggles_on[raw["run_id"].split("@")[0]] = len(on)
    by_toggles = sorted(toggles_on, key=toggles_on.get)
    all_runs = [by_toggles[0], by_toggles[-1], *by_toggles[1:-1]]
    print(f"noise: {record.host.describe()}, {record.load.condition or 'condition not named'}, {len(record.epochs)} "
          f"epochs, start-up {record.startup_s:.0f} s; {args.jobs} jobs per cell")
    print("design | cap s | A/A all same | A/A false word | +3% exit 1 | +5% exit 1 | A/A median s")
    for name, runs in DESIGNS.items():
        design = subset(noise, runs, all_runs)
        for cap in args.caps:
            aa = simulate(design, 0.0, args.jobs, DecisionRule(), cap, record.startup_s, seed=1)
            same = float(np.mean([all(w == "same" for w in j.words.values()) for j in aa]))
            r0 = row(0.0, aa)
            r3 = row(0.03, simulate(design, 0.03, args.jobs, DecisionRule(), cap, record.startup_s, seed=2))
            r5 = row(0.05, simulate(design, 0.05, args.jobs, DecisionRule(), cap, record.startup_s, seed=3))
            print(f"{name} | {cap:g} | {same:.1%} | {r0.false_word:.1%} | {r3.detected:.1%} | {r5.detected:.1%} | "
                  f"{r0.median_s:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
