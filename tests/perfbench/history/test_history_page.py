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
def page(tmp_path_factory, sweep) -> tuple[Path, list[str], str, Path]:
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
    return out, shas, db, repo


def test_every_series_is_drawn_with_its_points_linked_and_changes_marked(page):
    out, shas, *_ = page
    text = out.read_text()
    charts = re.findall(r'<div class="series"[^>]*>', text)
    # 2 scenarios x (3 plans' medians + 2 plans' speed-ups) x 2 metrics
    assert len(charts) == 2 * (3 + 2) * 2
    assert text.count("<svg") == len(charts)
    assert len(re.findall(r'<a href="file://[^"]*"><title>commit ', text)) == len(charts) * 8  # each point
    changes = re.findall(r'<p class="change">([^<]*)</p>', text)
    assert any(c.startswith(f"gdr TTFT speed-up 2.20x -&gt; 1.70x between {shas[3][:10]} and {shas[4][:10]}")
               for c in changes)
    assert all("alpha" in c for c in re.findall(r'<div class="series"[^>]*>.*?</div>', text)
               if '<p class="change">' in c)  # beta's series are flat


def _changes_table(text: str) -> str:
    return text.split('<table id="t-changes">', 1)[1].split("</table>", 1)[0]


def test_the_list_of_changes_comes_first_and_links_both_commits(page):
    out, shas, *_ = page
    text = out.read_text()
    assert text.index('<table id="t-changes">') < text.index("<svg")  # before the first chart
    rows = re.findall(r"<tr data-scenario[^>]*>(.*?)</tr>", _changes_table(text))
    gdr_ttft = [r for r in rows if "<td>gdr</td><td>TTFT</td><td>speed-up</td>" in r]
    assert len(gdr_ttft) == 1
    assert (f'<a href="https://example.invalid/commit/{shas[3]}">{shas[3][:10]}</a> &rarr; '
            f'<a href="https://example.invalid/commit/{shas[4]}">{shas[4][:10]}</a>') in gdr_ttft[0]
    assert "-22.7% slower" in gdr_ttft[0] and "Test CPU 9000" in gdr_ttft[0]
    # the speed-ups come before the medians
    assert text.index('<section id="speed-ups">') < text.index('<section id="medians">')


def test_points_carry_their_values_on_hover(page):
    out, shas, *_ = page
    text = out.read_text()
    assert re.search(rf"<title>commit 8 {shas[7][:10]}: 1\.700x, 95% CI \[[0-9.]+, [0-9.]+\], [a-z ]+ · ", text)


def test_since_keeps_the_commits_from_a_ref_on(page, tmp_path):
    _, shas, db, repo = page
    runner = CliRunner()
    out = tmp_path / "since.html"
    args = ["history", "page", "--db", db, "--out", str(out), "--repo", str(repo)]
    assert runner.invoke(main, [*args, "--since", shas[4][:10]]).exit_code == 0
    text = out.read_text()
    orders = {int(o) for o in re.findall(r"<title>commit (\d+) ", text)}
    assert orders == {5, 6, 7, 8}  # shas[4] is the fifth commit: the step before it is gone, and its change
    assert "No change of 5% or more" in text and f"commits from {shas[4][:10]} on" in text
    # near miss: from the first commit on, every point and the change are there
    assert runner.invoke(main, [*args, "--since", shas[0]]).exit_code == 0
    text = out.read_text()
    assert {int(o) for o in re.findall(r"<title>commit (\d+) ", text)} == set(range(1, 9))
    assert '<table id="t-changes">' in text
    bad = runner.invoke(main, [*args, "--since", "no-such-ref"])
    assert bad.exit_code == 2 and "--since no-such-ref: not a stored commit" in bad.output


def test_the_page_loads_nothing_remote(page):
    text = page[0].read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", text)
    assert not re.search(r"url\((?!#)", text) and "@import" not in text  # url(#clip): the SVG's own clip paths


pytestmark_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                         reason="needs /usr/bin/chromium (apt-get install chromium)")


@pytest.mark.slow
@pytestmark_chromium
def test_the_page_filters_in_a_browser_without_errors_or_requests(page, tmp_path):
    out, *_ = page
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
