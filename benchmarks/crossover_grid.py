"""The crossover search against a dense grid, on this machine's CPU (a benchmark: it times real runs).

    python benchmarks/crossover_grid.py [--toggle chunk_gdr] [--over input_len] [--range 16:512] [--grid 9]
                                        [--points 6] [--out /tmp/crossover-grid]

1. `perfbench crossover ci_smoke --toggle T --over AXIS --range A:B --points N` (the adaptive search, timed);
2. the same sweep at `--grid` log-spaced points of the range (the dense grid), each point a sweep of the plan
   with and without T in interleaved blocks, as the search measures it;
3. the crossing the grid shows (analysis/crossover.py `crossing_from_points` on the grid's points) against the
   search's, per phase: they agree when their CIs overlap.

Prints one line per phase and the search's wall time (the target: under 3 minutes on a quiet 2-core CPU with the
tiny 4-layer preset). Not run in CI and not by the test suite: it needs a quiet machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from perfbench.analysis.crossover import crossing_from_points
from perfbench.run.crossover import PHASES, check_search, run_search, sweep_speedups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="ci_smoke")
    parser.add_argument("--toggle", default="chunk_gdr")
    parser.add_argument("--over", default="input_len", choices=["input_len", "batch", "output_len"])
    parser.add_argument("--range", default="16:512")
    parser.add_argument("--grid", type=int, default=9)
    parser.add_argument("--points", type=int, default=6)
    parser.add_argument("--out", default="/tmp/crossover-grid")
    args = parser.parse_args()
    out = Path(args.out)
    overrides: list[str] = []  # points are timed as `perfbench crossover` times them (run/crossover.py POINT_MEASURE)

    search = check_search(args.scenario, args.toggle, args.over, args.range, [], args.points, overrides)
    start = time.perf_counter()
    rows = run_search(search, out / "search", sweep_speedups(search, out / "search"))
    search_s = time.perf_counter() - start

    grid = check_search(args.scenario, args.toggle, args.over, args.range, [], args.grid, overrides)
    xs = sorted({round(math.exp(math.log(grid.lo) + i * (math.log(grid.hi) - math.log(grid.lo)) / (args.grid - 1)))
                 for i in range(args.grid)})
    measure = sweep_speedups(grid, out / "grid")
    points = {x: measure(x) for x in xs}
    for row in rows:
        dense = crossing_from_points([points[x][row.phase] for x in xs], row.crossing.threshold, grid.lo, grid.hi)
        agree = (row.crossing.found == dense.found and (not dense.found or (
            (row.crossing.low or grid.lo) <= (dense.high or grid.hi)
            and (dense.low or grid.lo) <= (row.crossing.high or grid.hi))))
        print(f"{row.phase}: search {row.crossing.text}; grid {dense.text}; {'agree' if agree else 'DISAGREE'}")
    print(f"search: {len(search.points[next(iter(PHASES))])} points in {search_s:.0f} s; grid: {len(xs)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
