"""docs/measurements.md answers first and is a view of docs/measurements_log.md: at most 120 lines; every figure
row names a date, a host kind of the page's host table and a command; every command and every number on the page
is in the log (or, for a row that links another doc, in that doc); slots say that they are slots."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE, LOG = ROOT / "docs" / "measurements.md", ROOT / "docs" / "measurements_log.md"
MAX_LINES = 120
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
SLOT_WORDS = ("to be measured this session", "not measured")
FIGURE_HEADER = ["figure", "host", "date", "command", "result"]
LINK = re.compile(r"\]\(([\w./-]+\.md)\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every table of the page."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            block: list[list[str]] = []
            for x in lines[i:]:
                if not x.startswith("|"):
                    break
                block.append(_cells(x))
            found.append((block[0], [r for r in block[1:] if not set("".join(r)) <= set("-: ")]))
    return found


def _in(number: str, text: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)", text) is not None


def page_problems(page: str, log: str, docs: Path) -> list[str]:
    """What makes `page` more than a view of `log`, or a figure row without its date, host kind or command."""
    problems = []
    if len(page.splitlines()) > MAX_LINES:
        problems.append(f"{len(page.splitlines())} lines, more than {MAX_LINES}")
    all_tables = tables(page)
    hosts = {row[0] for header, rows in all_tables if header and header[0] == "host kind" for row in rows}
    figure_rows = [row for header, rows in all_tables if header == FIGURE_HEADER for row in rows]
    if not hosts or not figure_rows:
        problems.append("no host kinds table or no figure rows")
    for row in figure_rows:
        if len(row) != len(FIGURE_HEADER):
            problems.append(f"{row[0]}: {len(row)} cells")
            continue
        figure, host, date, command, result = row
        where = f"{figure} ({host}, {date})"
        if host not in hosts:
            problems.append(f"{where}: host kind {host!r} is not in the host kinds table")
        if any(word in result for word in SLOT_WORDS):
            continue  # a slot: the lead fills it, with its date and command
        if not DATE.fullmatch(date):
            problems.append(f"{where}: no date")
        sources = log + "".join((docs / name).read_text() for name in LINK.findall(result)
                                if (docs / name).is_file())
        commands = re.findall(r"`([^`]+)`", command)
        if not commands:
            problems.append(f"{where}: no command")
        problems += [f"{where}: command not in the log: {c}" for c in commands if c not in sources]
    for number in sorted(set(NUMBER.findall(DATE.sub("", page)))):
        if not _in(number, log):
            problems.append(f"{number}: on the page, not in the log")
    return problems


def test_the_page_is_a_short_view_of_the_log() -> None:
    assert page_problems(PAGE.read_text(), LOG.read_text(), PAGE.parent) == []


def test_a_figure_the_log_lacks_or_a_row_without_its_date_is_named(tmp_path: Path) -> None:
    log = "## AMD EPYC (2 cores), 2026-12-02\n\n`perfbench run --out /tmp/d5`: 4 min 09 s, 4 epochs\n"
    page = ("# p\n\n| host kind | model |\n|---|---|\n| AMD EPYC 2-core | AMD EPYC |\n\n"
            "| figure | host | date | command | result |\n|---|---|---|---|---|\n{row}\n")
    good = "| wall | AMD EPYC 2-core | 2026-12-02 | `perfbench run --out /tmp/d5` | 4 min 09 s, 4 epochs |"
    assert page_problems(page.format(row=good), log, tmp_path) == []
    assert page_problems(page.format(row=good.replace("09 s", "08 s")), log, tmp_path) == [
        "08: on the page, not in the log"]
    assert page_problems(page.format(row=good.replace("2026-12-02", "Tuesday")), log, tmp_path) == [
        "wall (AMD EPYC 2-core, Tuesday): no date"]
    assert page_problems(page.format(row=good.replace("/tmp/d5", "/tmp/d6")), log, tmp_path) == [
        "wall (AMD EPYC 2-core, 2026-12-02): command not in the log: perfbench run --out /tmp/d6",
        "6: on the page, not in the log"]
    assert page_problems(page.format(row=good.replace("AMD EPYC 2-core | 2026", "Intel Xeon 2-core | 2026")), log,
                         tmp_path) == ["wall (Intel Xeon 2-core, 2026-12-02): host kind 'Intel Xeon 2-core' is not "
                                       "in the host kinds table"]
    # a slot needs no date or command yet, and a figure from a linked doc is checked against that doc
    slot = "| calibrate | AMD EPYC 2-core | - | to be filled | to be measured this session |"
    assert page_problems(page.format(row=slot), log, tmp_path) == []
    (tmp_path / "numerics.md").write_text("`python benchmarks/numerics_calibration.py`")
    linked = ("| errors | AMD EPYC 2-core | 2026-12-02 | `python benchmarks/numerics_calibration.py` | "
              "[numerics.md](numerics.md) |")
    assert page_problems(page.format(row=linked), log, tmp_path) == []
    assert page_problems(page.format(row=good) + "\n" * MAX_LINES, log, tmp_path)[0].endswith(
        f"more than {MAX_LINES}")
