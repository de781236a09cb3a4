"""How long `perfbench history changes` takes over a long history (not a test).

    python benchmarks/history_scale.py [--commits 5000] [--db PATH_OR_URL] [--reps 3]
    add --small for a quick check that it runs (200 commits; its timings mean nothing)

Fills a fresh store (default: a SQLite file in a temp folder) with one folder per commit, `--commits` commits on
one machine, each shaped like the default CPU scenario's sweep: 9 plans, so 9 x 2 median series and 8 x 2 paired
speed-up series (34 series of `--commits` points each, every one that `changes` analyses), each point with a 95%
CI of +-3 to 5%, and a 10% step planted in every speed-up series at a quarter and at three quarters of the
history. The filling goes through the store's own ingest in batches of 500 folders and is not timed. Then times
`perfbench history changes` over every series (the CLI's function: the query, the grouping into series, the
change detection, the text) `--reps` times, and prints each wall time, the median, and how many changes it found
(32 planted: two in each of the 16 speed-up series).

The issue's bar: within 60 s for 5,000 commits on a 2-core VM. Measure on an idle machine.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbench.history.commands import changes_command  # noqa: E402
from perfbench.history.records import Point, Snapshot  # noqa: E402
from perfbench.history.series import Filters  # noqa: E402
from perfbench.history.store import ingest, open_store  # noqa: E402

PLANS = ("all off", "attn", "gdr", "gmm", "merged", "norm", "rope", "attn+gdr+gmm+merged+norm+rope",
         "attn+gdr+gmm+graph+merged+norm+rope")
MACHINE = "cpu / AMD EPYC 7B13 / torch +cpu"
SHAPE = "tiny cpu float32 ws=1 bs=1 in=128 out=16"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _point(family: str, plan: str, metric: str, value: float, rng: random.Random, df: float | None) -> Point:
    half = rng.uniform(0.03, 0.05)
    noisy = value * math.exp(rng.gauss(0.0, half / 1.96))
    return Point(family=family, run_id=plan, plan=plan, shape=SHAPE, metric=metric, value=noisy,
                 low=noisy / (1 + half), high=noisy * (1 + half), n=20, df=df,
                 verdict="faster" if family == "speedup" else "", basis="blocks" if df else "iterations")


def _snapshot(i: int, commits: int, rng: random.Random) -> Snapshot:
    step = 0.9 ** ((i >= commits // 4) + (i >= 3 * commits // 4))
    points = []
    for plan in PLANS:
        for metric, base in (("ttft_ms", 128.0), ("tpot_ms", 6.5)):
            points.append(_point("median", plan, metric, base, rng, None))
            if plan != "all off":
                points.append(_point("speedup", plan, metric, 1.35 * step, rng, 9.0))
    sha = f"{i:040x}"
    return Snapshot(path=f"/results/sweep-{i:05d}", run_key=sha, content_hash=f"{i:064x}", kind="results", sha=sha,
                    dirty=False, commit_order=i + 1, commit_date=(START + timedelta(hours=i)).isoformat(),
                    scenario="default_cpu", machine_key=MACHINE, software_key="torch 2.13.0", emulated=False,
                    recorded_at=f"2026-12-01T00:00:{i % 60:02d}+00:00", points=points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=5_000)
    parser.add_argument("--db", help="Store (default: a SQLite file in a temp folder).")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    commits = 200 if args.small else args.commits
    db = args.db or str(Path(tempfile.mkdtemp(prefix="perfbench-history-")) / "history.sqlite")
    store = open_store(db)
    rng = random.Random(0)
    start = time.perf_counter()
    for first in range(0, commits, 500):
        ingest(store, [_snapshot(i, commits, rng) for i in range(first, min(first + 500, commits))])
    print(f"filled {db}: {commits} commits in {time.perf_counter() - start:.1f} s (not part of the figure)")
    times, text = [], ""
    for _ in range(args.reps):
        start = time.perf_counter()
        text = changes_command(db, Filters(), None, 0.05, Path.cwd(), as_json=False)
        times.append(time.perf_counter() - start)
    found = sum(1 for line in text.splitlines() if " between " in line)
    print(f"history changes over every series ({commits} commits): " + ", ".join(f"{t:.2f}" for t in times)
          + f" s; median {statistics.median(times):.2f} s; {found} changes found (32 planted)")


if __name__ == "__main__":
    main()
