"""The trend page: every series with CIs and change points, links, filters; offline in a real browser."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0")
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught")  # Chromium's log of console output and uncaught exceptions


@pytest.fixture(scope="module")
def page(tmp_path_factory, sweep) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("page")
    repo = tmp / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas, folders = [], []
    for i in range(8):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
        folders.append(str(sweep(tmp / f"a{i}", sha=shas[-1], gdr=2.2 if i < 4 else 1.7, scenario="alpha")))
        folders.append(str(sweep(tmp / f"b{i}", sha=shas[-1], scenario="beta")))
    db = str(tmp / "h.sqlite")
    runner = CliRunner()
    assert runner.invoke(main, ["history", "ingest", *folders, "--db", db, "--repo", str(repo)]).exit_code == 0
    out = tmp / "trend.html"
    result = runner.invoke(main, ["history", "page", "--db", db, "--out", str(out), "--commit-url",
                                  "https://example.invalid/commit/{sha}"])
    assert result.exit_code == 0, result.output
    return out, shas


def test_every_series_is_drawn_with_its_points_linked_and_changes_marked(page):
    out, shas = page
    text = out.read_text()
    sections = re.findall(r'<section class="series"[^>]*>', text)
    # 2 scenarios x (3 plans' medians + 2 plans' speed-ups) x 2 metrics
    assert len(sections) == 2 * (3 + 2) * 2
    assert text.count("<svg") == len(sections)
    assert len(re.findall(r'<a xlink:href="file://', text)) == len(sections) * 8  # each point to its folder
    assert text.count(f'href="https://example.invalid/commit/{shas[0]}"') == len(sections)
    changes = re.findall(r'<p class="change">([^<]*)</p>', text)
    assert any(c.startswith(f"gdr TTFT speed-up 2.20x -&gt; 1.70x between {shas[3][:10]} and {shas[4][:10]}")
               for c in changes)
    assert all("alpha" in c for c in changes)  # beta's series are flat


def test_the_page_loads_nothing_remote(page):
    text = page[0].read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", text)
    assert not re.search(r"url\((?!#)", text) and "@import" not in text  # url(#clip): the SVG's own clip paths


pytestmark_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                         reason="needs /usr/bin/chromium (apt-get install chromium)")


@pytest.mark.slow
@pytestmark_chromium
def test_the_page_filters_in_a_browser_without_errors_or_requests(page, tmp_path):
    out, _ = page
    probe = tmp_path / "probe.html"
    # pick scenario beta, then record what is shown and every resource the page fetched
    script = ("<script>var s = document.querySelector('select[data-filter=scenario]'); s.value = 'beta';"
              "s.dispatchEvent(new Event('change'));"
              "document.body.setAttribute('data-shown', document.getElementById('shown').textContent);"
              "document.body.setAttribute('data-fetched', performance.getEntriesByType('resource').length);"
              "</script>")
    probe.write_text(out.read_text().replace("</body>", script + "</body>"))
    profile = tmp_path / "profile"
    profile.mkdir()
    run = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert not [line for line in run.stderr.splitlines() if CONSOLE.search(line)]
    assert re.search(r'data-shown="(\d+)"', run.stdout).group(1) == "10"  # beta's series only
    assert re.search(r'data-fetched="(\d+)"', run.stdout).group(1) == "0"


def test_a_broken_script_would_show_in_the_log(tmp_path):
    """The console check above can fail."""
    if not CHROMIUM.exists():
        pytest.skip("needs /usr/bin/chromium")
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>")
    profile = tmp_path / "profile"
    profile.mkdir()
    run = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", broken.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    assert any("Uncaught ReferenceError" in line for line in run.stderr.splitlines() if CONSOLE.search(line))
