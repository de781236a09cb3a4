"""The report in a real browser: it renders, its script raises no error, and clicking a header sorts."""

from __future__ import annotations

import csv
import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perfbench.report import build_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0")
# What Chromium logs for console output and uncaught exceptions: `...:INFO:CONSOLE:12] "message", source: ...`
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium)"),
]


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    profile.mkdir()
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if CONSOLE.search(line)]


def test_console_errors_are_detected(tmp_path):
    """The check below can fail: a page with a broken script shows up in the log."""
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>")
    run = chromium(tmp_path, broken, "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in console_lines(run.stderr))


def test_report_renders_without_console_errors(tmp_path, make_folder):
    page = build_report(make_folder(tmp_path / "results"))
    shot = tmp_path / "report.png"
    run = chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1400,3000")
    assert run.returncode == 0, run.stderr[-2000:]
    assert not console_lines(run.stderr)
    assert shot.stat().st_size > 50_000  # a blank page is a few kB
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_clicking_a_header_sorts_numerically(tmp_path, make_folder):
    folder = make_folder(tmp_path / "results", traces=False)
    page = build_report(folder)
    # Click the TPOT median header of the latency table once, then list the run ids in their new order.
    probe = tmp_path / "probe.html"
    shutil.copy(page, probe)
    click = ("<script>var t = document.getElementById('t-latency');"
             "var col = Array.prototype.findIndex.call(t.tHead.rows[0].cells,"
             " function (c) { return c.textContent.indexOf('tpot_ms_median') === 0; });"
             "t.tHead.rows[0].cells[col].click();"
             "document.body.setAttribute('data-order', Array.prototype.map.call(t.tBodies[0].rows,"
             " function (r) { return r.cells[0].textContent; }).join(' '));</script>")
    probe.write_text(probe.read_text().replace("</body>", click + "</body>"))
    run = chromium(tmp_path, probe, "--dump-dom")
    assert not console_lines(run.stderr)
    order = re.search(r'data-order="([^"]*)"', run.stdout).group(1).split()
    with open(folder / "report" / "latency.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert order == [r["run_id"] for r in sorted(rows, key=lambda r: float(r["tpot_ms_median"]))]


# Laid out at 1400 x 900 px, what the first screen holds and whether the page scrolls sideways.
LAYOUT_PROBE = ("<script>var plot = document.querySelector('#speed-ups svg.chart');"
                "var box = plot ? plot.getBoundingClientRect() : null;"
                "var wrap = document.querySelector('#findings .table-wrap');"
                "document.body.setAttribute('data-layout', JSON.stringify({"
                "scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,"
                "findingsScroll: wrap.scrollWidth, findingsClient: wrap.clientWidth,"
                "plotBottom: box ? box.bottom : null, plotWidth: box ? box.width : null,"
                "screen: window.innerHeight}));</script>")


def layout(tmp_path: Path, page: Path, *, widen: str = "") -> dict:
    import json

    probe = tmp_path / "layout.html"
    probe.write_text(page.read_text().replace("</body>", widen + LAYOUT_PROBE + "</body>"))
    run = chromium(tmp_path, probe, "--dump-dom", "--window-size=1400,900")
    assert run.returncode == 0 and not console_lines(run.stderr), run.stderr[-2000:]
    return json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', run.stdout).group(1)))


# fused_rope planted slower than its fallback: the findings table has rows with long messages
SLOW_ROPE = {"r-fused_rope": 1.5}


def test_the_first_screen_at_1400_px_shows_the_forest_plot_without_sideways_scroll(tmp_path, make_folder):
    page = build_report(make_folder(tmp_path / "results", slowdown=SLOW_ROPE))
    seen = layout(tmp_path, page)
    assert seen["plotWidth"] and seen["plotWidth"] > 600
    assert seen["plotBottom"] <= seen["screen"]  # the whole plot on the first screen
    assert seen["scroll"] <= seen["client"]
    assert seen["findingsScroll"] <= seen["findingsClient"]  # the findings wrap: no scroll inside the table


def test_the_layout_probe_sees_sideways_scroll(tmp_path, make_folder):
    """Near miss: the same page with one unbreakable element wider than the window scrolls, and findings cells
    that may not wrap overflow their table; both are caught."""
    page = build_report(make_folder(tmp_path / "results", slowdown=SLOW_ROPE))
    seen = layout(tmp_path, page, widen='<div style="width:3000px;height:4px"></div>'
                                        "<style>td.wrap { white-space: nowrap; }</style>")
    assert seen["scroll"] > seen["client"]
    assert seen["findingsScroll"] > seen["findingsClient"]
