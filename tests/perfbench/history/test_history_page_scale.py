"""The trend page at a team's scale: 5,000 folders (5 machines x 1,000 commits, each folder a sweep of three plans)
give a page under 50 MB that Chromium renders, with the changes listed before the first chart, thinned charts that
say so, and a chart cap that says what it left out. Timing is measured by benchmarks/history_page_scale.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from perfbench.history import page as trend
from perfbench.history.changes import Change
from perfbench.history.series import Series, SeriesKey, SeriesPoint

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0")
PLANS = ("gdr", "rope")  # speed-ups over "all off"; medians of all three
STEP_AT = 600  # gdr's TTFT speed-up drops here on machine 0


def synthetic_series(machines: int, commits: int) -> list[Series]:
    """machines x commits folders' worth of series, values from a fixed pattern (no randomness needed)."""
    found = []
    for m in range(machines):
        for family, plans in (("speedup", PLANS), ("median", ("all off", *PLANS))):
            for plan in plans:
                for metric in ("ttft_ms", "tpot_ms"):
                    key = SeriesKey(family=family, scenario="syn", machine_key=f"machine-{m}", software_key="sw",
                                    emulated=False, shape="tiny bs=1", plan=plan, metric=metric)
                    points = []
                    for i in range(1, commits + 1):
                        level = 2.0 if family == "speedup" else 10.0
                        if (m, plan, metric, family) == (0, "gdr", "ttft_ms", "speedup") and i >= STEP_AT:
                            level = 1.6
                        value = level * (1 + 0.01 * ((i * 7919) % 13 - 6) / 6)
                        points.append(SeriesPoint(sha=f"{i:040x}", dirty=False, commit_order=i,
                                                  folder=f"/nonexistent/m{m}/c{i}", kind="result",
                                                  recorded_at=f"2026-12-01T00:00:{i % 60:02d}", value=value,
                                                  low=value * 0.98, high=value * 1.02, n=10, verdict="faster"))
                    found.append(Series(key=key, points=points))
    return found


def planted_change(series: Series) -> Change:
    """The change the page is given for gdr's TTFT on machine 0 (change detection itself is tested in
    test_history_changes.py; here only the page's layout of it)."""
    return Change(key=series.key, before=2.0, after=1.6, size=-0.2, p_value=1e-9, sha_before=f"{STEP_AT - 1:040x}",
                  sha_after=f"{STEP_AT:040x}", order_before=STEP_AT - 1, order_after=STEP_AT,
                  commits_before=STEP_AT - 1, commits_after=1001 - STEP_AT, folder_after="/nonexistent")


@pytest.fixture(scope="module")
def big_page(tmp_path_factory) -> tuple[Path, list[Series]]:
    found = synthetic_series(5, 1000)
    stepped = next(i for i, s in enumerate(found) if s.key.machine_key == "machine-0" and s.key.plan == "gdr"
                   and s.key.metric == "ttft_ms" and s.key.family == "speedup")
    out = tmp_path_factory.mktemp("scale") / "trend.html"
    out.write_text(trend.render(found, {stepped: [planted_change(found[stepped])]}, 0.05,
                                "https://example.invalid/commit/{sha}"))
    return out, found


def test_5000_folders_make_a_small_page_with_the_changes_first(big_page):
    out, found = big_page
    assert sum(len(s.points) for s in found) == 5 * 1000 * (2 * 2 + 3 * 2)
    assert out.stat().st_size < 50_000_000
    text = out.read_text()
    assert text.index('<table id="t-changes">') < text.index("<svg")
    charts = re.findall(r'<div class="series".*?</div>\n', text, flags=re.S)
    assert len(charts) == len(found)
    for chart in charts:
        assert chart.count("<circle") == trend.MAX_DRAWN
        assert "1,000 points thinned to 200 marks" in chart
        assert "the table lists the newest 30 of 1,000 points" in chart


def test_a_series_that_fits_is_drawn_point_by_point():
    """Near miss of the thinning: MAX_DRAWN points are drawn as they are, with their CIs and links."""
    (series, *_) = synthetic_series(1, trend.MAX_DRAWN)
    drawn = trend.thinned(series, series.ordered)
    assert [p.value for p in drawn] == [p.value for p in series.ordered]
    assert all(p.link and p.link.startswith("file://") for p in drawn)
    (bigger, *_) = synthetic_series(1, trend.MAX_DRAWN + 1)
    assert len(trend.thinned(bigger, bigger.ordered)) == trend.MAX_DRAWN


def test_thinning_keeps_a_step_visible():
    (series, *_) = [s for s in synthetic_series(1, 1000) if s.key.plan == "gdr" and s.key.family == "speedup"
                    and s.key.metric == "ttft_ms"]
    drawn = trend.thinned(series, series.ordered)
    assert max(p.value for p in drawn if p.x < STEP_AT - 5) > 1.9
    assert max(p.value for p in drawn if p.x > STEP_AT + 5) < 1.7


def test_the_chart_cap_says_what_it_left_out(monkeypatch):
    found = synthetic_series(2, 10)
    monkeypatch.setattr(trend, "MAX_SERIES", 5)
    stepped = len(found) - 1  # the last series, which would be cut without its change
    text = trend.render(found, {stepped: [planted_change(found[stepped])]}, 0.05, None)
    assert len(re.findall(r'<div class="series"', text)) == 5
    assert f"{len(found) - 5} of {len(found)} series are not drawn (at most 5 charts per page" in text
    assert f'id="s{stepped}"' in text  # a series with a change is never the one left out


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium)")
def test_chromium_renders_the_5000_folder_page(big_page, tmp_path):
    out, found = big_page
    probe = tmp_path / "probe.html"
    script = ("<script>var first = document.querySelector('svg.chart').getBoundingClientRect().top;"
              "var list = document.getElementById('t-changes').getBoundingClientRect().top;"
              "document.body.setAttribute('data-seen', JSON.stringify({charts: "
              "document.querySelectorAll('svg.chart').length, listFirst: list < first, "
              "height: document.documentElement.scrollHeight}));</script>")
    probe.write_text(out.read_text().replace("</body>", script + "</body>"))
    profile = tmp_path / "profile"
    profile.mkdir()
    # a generous bound: the 10 s render budget is measured by benchmarks/history_page_scale.py, not here
    run = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", "--window-size=1400,900",
                          probe.as_uri()], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(re.search(r'data-seen="([^"]*)"', run.stdout).group(1).replace("&quot;", '"'))
    assert seen["charts"] == len(found) and seen["listFirst"] and seen["height"] > 100 * len(found)


def test_stored_strings_reach_the_page_escaped():
    hostile = '<script>alert(1)</script>"'
    (series, *_) = synthetic_series(1, 5)
    key = series.key.model_copy(update={"plan": hostile, "machine_key": hostile, "scenario": hostile})
    points = [p.model_copy(update={"folder": f"/tmp/{hostile}", "verdict": hostile, "sha": hostile})
              for p in series.points]
    bad = Series(key=key, points=points)
    change = planted_change(bad).model_copy(update={"sha_before": hostile})
    text = trend.render([bad], {0: [change]}, 0.05, "https://example.invalid/commit/{sha}")
    assert "<script>alert" not in text and 'data-plan="&lt;script&gt;alert(1)&lt;/script&gt;&quot;"' in text
