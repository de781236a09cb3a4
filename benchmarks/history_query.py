"""How fast the history store answers `show` for one series when it holds many folders (not a test).

    python benchmarks/history_query.py [--folders 10000] [--db PATH_OR_URL] [--reps 5]
    add --small for a quick check that it runs (200 folders; its timings mean nothing)

Fills a fresh store (default: a SQLite file in a temp folder) with `--folders` snapshots shaped like the default
CPU scenario's sweep (9 plans: 9 x 2 medians, 8 x 2 paired speed-ups, 9 x 2 compile / first-iteration figures per
folder, one commit each, three machines), through the store's own ingest in batches of 500 folders. Then times
`perfbench history show --family speedup --plan gdr --metric ttft_ms --machine ...` (the CLI's function: query,
grouping into series, the table) `--reps` times and prints each wall time and the median. The filling is not timed.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbench.history.commands import show_command
from perfbench.history.records import Point, Snapshot
from perfbench.history.series import Filters
from perfbench.history.store import ingest, open_store

PLANS = ("all off", "attn", "gdr", "gmm", "merged", "norm", "rope", "attn+gdr+gmm+merged+norm+rope",
         "attn+gdr+gmm+graph+merged+norm+rope")
MACHINES = ("cpu / AMD EPYC 7B13 / torch +cpu", "cpu / Intel Xeon / torch +cpu", "cpu / Other / torch +cpu")
SHAPE = "tiny cpu float32 ws=1 bs=1 in=128 out=16"


def _snapshot(i: int, rng: random.Random) -> Snapshot:
    points = []
    for plan in PLANS:
        for metric, base in (("ttft_ms", 128.0), ("tpot_ms", 6.5)):
            value = base * rng.uniform(0.9, 1.1)
            points.append(Point(family="median", run_id=plan, plan=plan, shape=SHAPE, metric=metric, value=value,
                                low=value * 0.97, high=value * 1.03, n=20, basis="iterations"))
            if plan != "all off":
                gain = math.exp(rng.gauss(0.3, 0.03))
                points.append(Point(family="speedup", run_id=plan, plan=plan, shape=SHAPE, metric=metric, value=gain,
                                    low=gain * 0.96, high=gain * 1.04, n=20, verdict="faster", basis="blocks"))
        points += [Point(family="once", run_id=plan, plan=plan, shape=SHAPE, metric=m, value=v, n=1)
                   for m, v in (("compile_s", 1.5), ("first_ttft_ms", 400.0))]
    return Snapshot(path=f"/results/sweep-{i:05d}", run_key=f"{i:064x}", content_hash=f"{i:064x}", kind="results",
                    sha=f"{i:040x}",
                    dirty=False, commit_order=i, scenario="default_cpu", machine_key=MACHINES[i % len(MACHINES)],
                    software_key="torch 2.13.0", emulated=False, recorded_at=f"2026-12-01T00:00:{i % 60:02d}+00:00",
                    points=points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", type=int, default=10_000)
    parser.add_argument("--db", help="Store (default: a SQLite file in a temp folder).")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    folders = 200 if args.small else args.folders
    db = args.db or str(Path(tempfile.mkdtemp(prefix="perfbench-history-")) / "history.sqlite")
    store = open_store(db)
    rng = random.Random(0)
    start = time.perf_counter()
    for first in range(0, folders, 500):
        ingest(store, [_snapshot(i, rng) for i in range(first, min(first + 500, folders))])
    print(f"filled {db}: {folders} folders in {time.perf_counter() - start:.1f} s (not part of the figure)")
    filters = Filters(family="speedup", plan="gdr", metric="ttft_ms", machine="AMD EPYC")
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        text = show_command(db, filters)
        times.append(time.perf_counter() - start)
    rows = len(text.splitlines()) - 3
    print(f"show one series ({rows} points): " + ", ".join(f"{t:.3f}" for t in times)
          + f" s; median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
