"""A/A check of the harness: the same scenario run N times back to back, as separate processes.

    python benchmarks/aa_runs.py --runs 4 --out reports/aa [--scenario default_cpu] [--set KEY=VALUE ...]
    python benchmarks/aa_runs.py --out reports/aa --analyze-only      # re-read the folders of an earlier call

Reports, from folders out/run-1 .. out/run-N (each a full `perfbench run`; an existing one is reused):
1. each toggle's speed-up over the baseline with its 95 % CI in every run, and whether the CIs of
   back-to-back runs overlap (they should: nothing changed);
2. the A/A false-alarm rate per metric: over every pair of runs, the share that `perfbench compare` calls a
   significant change, and the share of `perfbench gate` (default rules) timing checks that FAIL;
3. the detection rate of a planted 15 % slowdown: the later run of each pair with every latency multiplied
   by 1.15 (throughputs divided), compared and gated the same way.
Under 2 and 3, why `compare` did not call the other changes significant: a run judged unstable, a host that ran
at another speed, a busy machine, inside the run-to-run band, or the test itself (p or CI).
4. how far the median of one round of a combination moves from that of another round of it in another run, for
   pairs timed at the same host speed and at different ones (perfbench/analysis/stability.py host_speed_differs).
The run-to-run band of perfbench/analysis/noise_band.py should be set from the spread printed under 2.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from perfbench.analysis.compare import COMPARED, Match, MetricChange, match_runs
from perfbench.analysis.rounds import ROUND_PREFIX
from perfbench.analysis.speedup import (
    Speedup,
    plan_label,
    speedups,
)
from perfbench.analysis.stability import host_speed_differs
from perfbench.gate.checks import FAIL
from perfbench.gate.engine import evaluate
from perfbench.gate.rules import default_rules
from perfbench.results import ResultFolder, RunResult, load_folder

PLANTED = 1.15
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "tpot_steps_ms")
THROUGHPUT_KEYS = ("prefill_tok_s", "decode_tok_s")


def run_folders(runs: int, out: Path, scenario: str, overrides: list[str]) -> list[Path]:
    """out/run-1 .. out/run-N, each one `perfbench run` in its own process (finished folders are reused)."""
    folders = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    for k in range(1, runs + 1):
        folder = out / f"run-{k}"
        if not (folder / "results.jsonl").is_file():
            cmd = [sys.executable, "-m", "perfbench.cli", "run", scenario, "--out", str(folder), "--no-report",
                   *(x for o in overrides for x in ("--set", o))]
            print(f"[{k}/{runs}] {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
            subprocess.run(cmd, env=env, check=False)
        folders.append(folder)
    return folders


def slowed(result: RunResult, factor: float) -> RunResult:
    """The run as if every latency were `factor` times longer (throughputs `factor` times lower)."""
    samples = {k: ([v * factor for v in vs] if k in LATENCY_KEYS or k.startswith(ROUND_PREFIX) else vs)
               for k, vs in result.samples.items()}
    summary = {k: (None if v is None else v * factor if k.startswith(("ttft_ms", "tpot_ms"))
                   else v / factor if k in THROUGHPUT_KEYS else v) for k, v in result.summary.to_dict().items()}
    return result.replace(samples=samples, summary=summary)


def speedup_table(folders: list[ResultFolder]) -> list[str]:
    per_run = [{plan_label(r[0]) if (r := [x for x in f.results if x.spec.combination_id == cid]) else cid: g
                for cid, g in speedups(f.results).items()} for f in folders]
    lines = ["1. speed-up over the baseline per run (95% CI); overlap: the CIs of runs k and k+1 overlap"]
    for plan in sorted(set().union(*per_run)):
        for key in ("ttft_ms", "tpot_ms"):
            cells: list[Speedup | None] = [run.get(plan, {}).get(key) for run in per_run]
            text = "  ".join("-" if s is None else f"{s.value:.2f}x [{s.low:.2f}, {s.high:.2f}]" for s in cells)
            overlaps = [a.low <= b.high and b.low <= a.high for a, b in itertools.pairwise(cells)
                        if a is not None and b is not None]
            lines.append(f"  {plan:<60} {key:<8} {text}  overlap {sum(overlaps)}/{len(overlaps)}")
    return lines


def _not_significant_because(match: Match, change: MetricChange) -> str:
    if match.a.is_stable() is False or match.b.is_stable() is False:
        return "an unstable run"
    if host_speed_differs(match.a, match.b):
        return "a host that ran at another speed"
    if change.undecided:
        return "a busy machine"
    if change.in_band:
        return "inside the run-to-run band"
    return "the test (p or CI)"


def _pair_rates(pairs: list[tuple[ResultFolder, ResultFolder]]
                ) -> tuple[dict[str, list[int]], dict[str, list[int]], Counter[str]]:
    """compare: metric -> [significant, compared]; gate: timing metric -> [FAIL, checks]; why compare's
    changes were not significant (reason -> count)."""
    compare: dict[str, list[int]] = {m: [0, 0] for m in COMPARED}
    gate: dict[str, list[int]] = {}
    why_not: Counter[str] = Counter()
    rules = default_rules()
    for a, b in pairs:
        matches, _, _ = match_runs(a.results, b.results, by_identity=False)
        for match, change in ((m, c) for m in matches for c in m.changes()):
            compare[change.metric][0] += bool(change.significant)
            compare[change.metric][1] += 1
            if not change.significant:
                why_not[_not_significant_because(match, change)] += 1
        for check in evaluate(a, b, rules).checks:
            if check.kind == "timing":
                counts = gate.setdefault(check.name, [0, 0])
                counts[0] += check.status == FAIL
                counts[1] += 1
    return compare, gate, why_not


def _rate_lines(title: str, compare: dict[str, list[int]], gate: dict[str, list[int]],
                why_not: Counter[str]) -> list[str]:
    lines = [title]
    lines += [f"  compare {m:<16} {n}/{total}" + (f" = {n / total:.0%}" if total else "")
              for m, (n, total) in compare.items()]
    lines += [f"  gate    {m:<16} {n}/{total}" + (f" = {n / total:.0%}" if total else "")
              for m, (n, total) in sorted(gate.items())]
    if why_not:
        lines.append("  compare's changes not called significant, by the first reason that held: "
                     + ", ".join(f"{reason} {n}" for reason, n in why_not.most_common()))
    return lines


def spread_lines(folders: list[ResultFolder]) -> list[str]:
    """Per metric, the largest |B/A - 1| between two runs of the same combination: the band to record."""
    worst: dict[str, float] = {m: 0.0 for m in COMPARED}
    for a, b in itertools.combinations(folders, 2):
        matches, _, _ = match_runs(a.results, b.results, by_identity=False)
        for change in (c for m in matches for c in m.changes()):
            worst[change.metric] = max(worst[change.metric], abs(change.ratio - 1.0))
    return ["  largest run-to-run |B/A - 1| (set noise_band.DEFAULT_BANDS near it): "
            + ", ".join(f"{m} {v:.1%}" for m, v in worst.items())]


def round_ratio_lines(folders: list[ResultFolder]) -> list[str]:
    """4. How far one round of a combination moves from another round of it in another run, split by whether the
    host ran at one speed for both (`host_speed_differs`): p5 / median / p95 of the ratio of their medians."""
    ratios: dict[tuple[str, bool], list[float]] = {}
    for a, b in itertools.combinations(folders, 2):
        for ra in (r for r in a.results if r.status == "ok"):
            for rb in (r for r in b.results if r.status == "ok" and r.spec.combination_id == ra.spec.combination_id):
                same_speed = not host_speed_differs(ra, rb)
                for key in ("ttft_ms", "tpot_ms"):
                    xa, xb = ra.finite_samples(key), rb.finite_samples(key)
                    if xa and xb:
                        ratios.setdefault((key, same_speed), []).append(float(np.median(xb) / np.median(xa)))
    lines = ["4. one round's median over another's, same combination, two runs (p5 / median / p95; the same host "
             "speed: probe medians within the tolerance)"]
    for (key, same_speed), values in sorted(ratios.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        p5, mid, p95 = np.percentile(values, [5, 50, 95])
        lines.append(f"  {key:<8} {'same host speed' if same_speed else 'other host speed':<16} n={len(values):<4} "
                     f"{p5:.2f} / {mid:.2f} / {p95:.2f}")
    return lines


def analyze(paths: list[Path]) -> str:
    folders = [load_folder(p) for p in paths if (p / "results.jsonl").is_file()]
    if len(folders) < 2:
        return f"need two or more finished runs, found {len(folders)} in {', '.join(map(str, paths))}"
    pairs = list(itertools.combinations(folders, 2))
    lines = speedup_table(folders)
    lines += _rate_lines(f"2. A/A false alarms over {len(pairs)} pairs of runs (should be near 0)", *_pair_rates(pairs))
    lines += spread_lines(folders)
    planted = [(a, ResultFolder(b.path, {k: slowed(r, PLANTED) for k, r in b.runs.items()}, b.scenario))
               for a, b in pairs]
    lines += _rate_lines(f"3. detection of a planted {PLANTED - 1:.0%} slowdown over {len(pairs)} pairs "
                         "(should be near 100%)", *_pair_rates(planted))
    lines += round_ratio_lines(folders)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4, help="back-to-back runs of the scenario (default 4)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (out/run-1 ...)")
    parser.add_argument("--scenario", default="default_cpu", help="scenario name or file (default default_cpu)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="scenario override passed to every run")
    parser.add_argument("--analyze-only", action="store_true", help="only read the folders already in --out")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error(f"--runs: an A/A check needs two or more runs, got {args.runs}")
    if args.analyze_only:
        paths = sorted(args.out.glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
    else:
        paths = run_folders(args.runs, args.out, args.scenario, args.overrides)
    print(analyze(paths))


if __name__ == "__main__":
    main()
