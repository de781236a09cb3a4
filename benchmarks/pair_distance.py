"""How much of a block pair's noise do the pairs cancel, and would adjacent pairs cancel more?

    python benchmarks/pair_distance.py RESULT_FOLDER

Reads a block-timed result folder (one process, `RunResult.blocks.position` recorded: the iteration's place in
its block's random order) and prints, per latency, the spread of each plan's log ratio against the baseline
(the run with the fewest toggles on) by the distance in places between the two iterations of a pair, and each
plan's own iteration spread. Both are demeaned per plan and epoch, so neither the effect nor an epoch's level
counts as spread. If pairs cancelled host drift, their spread would be well below sqrt(2) x the iteration
spread, and smallest at distance 1 (the baseline timed next to the plan). A benchmark: it reads timings, it
asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from perfbench.results import RunResult, load_folder


def _demeaned(groups: dict[int, list[tuple[int, float]]]) -> list[tuple[int, float]]:
    out = []
    for values in groups.values():
        mean = float(np.mean([v for _, v in values]))
        out.extend((d, v - mean) for d, v in values)
    return out


def _sd(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def pair_spread(results: list[RunResult], key: str) -> tuple[dict[int, list[float]], list[float]]:
    """distance -> demeaned pair log ratios, and each plan's iteration SD (log, demeaned per epoch)."""
    base = min(results, key=lambda r: len(r.spec.requested_on()))
    at = {b: (i, p) for i, (b, p) in enumerate(zip(base.blocks.index, base.blocks.position))}
    by_distance: dict[int, list[float]] = defaultdict(list)
    iteration_sd = []
    for run in results:
        own: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for x, epoch in zip(run.samples[key], run.blocks.epoch):
            own[epoch].append((0, math.log(x)))
        iteration_sd.append(_sd([v for _, v in _demeaned(own)]))
        if run is base:
            continue
        pairs: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for x, block, place, epoch in zip(run.samples[key], run.blocks.index, run.blocks.position, run.blocks.epoch):
            i, base_place = at[block]
            pairs[epoch].append((abs(place - base_place), math.log(x / base.samples[key][i])))
        for distance, value in _demeaned(pairs):
            by_distance[distance].append(value)
    return by_distance, iteration_sd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    args = parser.parse_args()
    results = [r for r in load_folder(Path(args.folder)).results if r.status == "ok" and r.blocks.position]
    if len(results) < 2:
        sys.exit(f"{args.folder}: needs two or more block-timed runs with recorded positions")
    for key in ("ttft_ms", "tpot_ms"):
        by_distance, iteration_sd = pair_spread(results, key)
        near = by_distance.get(1, [])
        far = [v for d, values in by_distance.items() if d >= 3 for v in values]
        cells = "  ".join(f"d{d} {_sd(v):.3f} (n {len(v)})" for d, v in sorted(by_distance.items()))
        print(f"{key}: pair SD by distance: {cells}")
        print(f"{key}: distance 1 {_sd(near):.3f} (n {len(near)}), distance >= 3 {_sd(far):.3f} (n {len(far)}); "
              f"iteration SD {float(np.median(iteration_sd)):.3f} (median over plans), x sqrt(2) = "
              f"{float(np.median(iteration_sd)) * math.sqrt(2):.3f}")


if __name__ == "__main__":
    main()
