"""How big the trend page gets and how long Chromium takes to render it at a team's scale (not a test).

    python benchmarks/history_page_scale.py [--machines 5] [--commits 1000] [--plans 8] [--reps 3] [--out trend.html]
    add --small for a quick check that it runs (2 machines x 50 commits; its timings mean nothing)

Builds `--machines` x `--commits` folders' worth of series in memory, shaped like a sweep of `--plans` plans beside
all off (the default CPU scenario's 8: their speed-ups and all 9 medians, TTFT and TPOT each, 34 series per machine,
one point per folder and series), with a 20% step in one speed-up series. Renders the page with
perfbench/history/page.py (its change list given that one change: change detection is timed by
benchmarks/history_query.py's store, not here), prints the page's size and the render time, then loads it `--reps`
times in headless Chromium (`--dump-dom` after a script that reads every chart's layout, so the timing includes
layout of all charts) and prints each wall time and the median. The issue's budget: under 50 MB, and within 10 s in
Chromium at 5,000 folders (the page's size there, 5 machines x 1,000 commits x 34 series: 9.5 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbench.history.changes import Change  # noqa: E402
from perfbench.history.page import render  # noqa: E402
from perfbench.history.series import Series, SeriesKey, SeriesPoint  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync")
LAYOUT = ("<script>var h = 0; document.querySelectorAll('svg.chart').forEach(function (s) {"
          " h += s.getBoundingClientRect().height; }); document.body.setAttribute('data-charts', h);</script>")


def sha_of(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def series_of(machines: int, commits: int, plans: int = 2) -> tuple[list[Series], dict[int, list[Change]]]:
    names = ("gdr", "rope", "attn", "gmm", "merged", "norm", "mmar", "graph", "disp")[:plans]
    found: list[Series] = []
    changes: dict[int, list[Change]] = {}
    step = commits * 3 // 5
    for m in range(machines):
        for family, plan_names, level in (("speedup", names, 2.0), ("median", ("all off", *names), 9.0)):
            for plan in plan_names:
                for metric in ("ttft_ms", "tpot_ms"):
                    key = SeriesKey(family=family, scenario="default", machine_key=f"cpu / machine {m} / torch",
                                    software_key="torch 2.13", emulated=False, shape="tiny cpu float32 bs=1",
                                    plan=plan, metric=metric)
                    stepped = (m, family, plan, metric) == (0, "speedup", "gdr", "ttft_ms")
                    points = []
                    for i in range(1, commits + 1):
                        value = level * (0.8 if stepped and i >= step else 1.0) * (1 + 0.01 * ((i * 7919) % 13 - 6) / 6)
                        points.append(SeriesPoint(sha=sha_of(i), dirty=False, commit_order=i,
                                                  folder=f"/results/m{m}/c{i}", kind="result",
                                                  recorded_at="2026-12-01T00:00:00", value=value, low=value * 0.97,
                                                  high=value * 1.03, n=10, verdict="faster"))
                    if stepped:
                        changes[len(found)] = [Change(
                            key=key, before=level, after=0.8 * level, size=-0.2, p_value=1e-9,
                            sha_before=sha_of(step - 1), sha_after=sha_of(step), order_before=step - 1,
                            order_after=step, commits_before=step - 1, commits_after=commits - step + 1,
                            folder_after=f"/results/m{m}/c{step}")]
                    found.append(Series(key=key, points=points))
    return found, changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=5)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--plans", type=int, default=8, help="plans beside all off (at most 9)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, help="keep the page here (default: a temp folder)")
    parser.add_argument("--small", action="store_true", help="2 machines x 50 commits, one rep")
    args = parser.parse_args()
    machines, commits, reps = (2, 50, 1) if args.small else (args.machines, args.commits, args.reps)
    found, changes = series_of(machines, commits, args.plans)
    started = time.perf_counter()
    text = render(found, changes, 0.05, "https://example.invalid/commit/{sha}")
    render_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "trend.html"
        out.write_text(text.replace("</body>", LAYOUT + "</body>"))
        print(f"{machines * commits} folders, {sum(len(s.points) for s in found)} points, {len(found)} series: "
              f"page {out.stat().st_size / 1e6:.1f} MB, rendered by perfbench in {render_s:.2f} s")
        walls = []
        for rep in range(reps):
            profile = Path(tmp) / f"profile-{rep}"
            started = time.perf_counter()
            done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                                   "--window-size=1400,900", out.as_uri()], capture_output=True, text=True,
                                  timeout=600, check=False)
            walls.append(time.perf_counter() - started)
            laid_out = "data-charts=" in done.stdout
            print(f"chromium load {rep + 1}: {walls[-1]:.2f} s (exit {done.returncode}, charts laid out: {laid_out})")
        print(f"chromium median: {statistics.median(walls):.2f} s")


if __name__ == "__main__":
    main()
