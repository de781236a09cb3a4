"""`compare_folders`: matching, ratios, significance wording, files written."""

from __future__ import annotations

import csv
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.analysis.compare import match_runs
from perfbench.cli import main
from perfbench.report.compare import compare_folders
from perfbench.results import load_results, write_results


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def by_run_metric(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["run"], r["metric"]): r for r in rows if r["metric"]}


@pytest.fixture(scope="module")
def compared(tmp_path_factory, make_folder, planted):
    """A: the synthetic folder minus one run; B: the same shapes re-measured with r-base 20 % slower,
    r-grouped_moe 25 % faster, one new run, and a run that now fails."""
    root = tmp_path_factory.mktemp("cmp")
    a = make_folder(root / "a", drop=("bs4-moe",), failed=False, traces=False, seed=1)
    b = make_folder(root / "b", slowdown={"r-base": 1.2, "r-grouped_moe": 0.8}, extra=("new-run",),
                    failed=False, traces=False, seed=2)
    broken = load_results(b)
    victim = next(r for r in broken if r.run_id == "r-fused_rope")
    victim.status, victim.error, victim.summary, victim.samples = "error", "RuntimeError: <b>oom</b>", {}, {}
    write_results(b, broken)
    out = root / "out"
    text = compare_folders(a, b, out)
    return a, b, out, text


def test_significant_changes_are_worded_and_tested(compared):
    _, _, out, _ = compared
    rows = by_run_metric(rows_of(out / "compare.csv"))
    slower = rows[("r-base", "tpot_ms_median")]
    assert float(slower["ratio"]) == pytest.approx(1.2, rel=0.02)
    assert float(slower["p_value"]) < 0.001
    assert float(slower["ci_lo"]) > 1.0
    assert slower["change"].endswith("x slower") and not slower["change"].startswith("~")
    assert slower["direction"] == "slower"
    faster = rows[("r-grouped_moe", "decode_tok_s")]  # a throughput: higher is faster
    assert float(faster["ratio"]) == pytest.approx(1.25, rel=0.02)
    assert faster["change"] == f"{float(faster['ratio']):.3f}x faster"
    assert float(faster["ci_lo"]) > 1.0


def test_unchanged_runs_are_marked_not_significant(compared):
    _, _, out, _ = compared
    rows = by_run_metric(rows_of(out / "compare.csv"))
    same = rows[("r-fused_attention", "tpot_ms_median")]
    assert same["change"].split()[1] in ("same", "inconclusive")  # one of the four words, never a change
    assert float(same["ci_lo"]) <= 1.0 <= float(same["ci_hi"]) or float(same["p_value"]) >= 0.05
    assert same["direction"] == ""


def test_runs_on_one_side_and_failures_are_listed(compared):
    _, _, out, text = compared
    unmatched = {(r["side"], r["run_id"]) for r in rows_of(out / "compare_unmatched.csv")}
    assert unmatched == {("B", "bs4-moe"), ("B", "new-run")}
    failed = [r for r in rows_of(out / "compare.csv") if r["run"] == "r-fused_rope"]
    assert [(r["metric"], r["change"], r["direction"]) for r in failed] == [("", "A ok, B error", "slower")]
    assert "only in B: bs4-moe, new-run" in text
    assert "only in A" not in text


def test_terminal_table_is_aligned(compared):
    _, _, _, text = compared
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("run "))
    table = lines[header:header + 5]
    change_at = table[0].index("change")
    assert all(len(line) > change_at and line[change_at - 2:change_at] == "  " for line in table[1:])
    assert any(line[change_at:].split()[1:2] in (["same"], ["inconclusive"]) for line in lines[header + 1:]
               if len(line) > change_at)
    assert any(line[change_at:].endswith("x slower") for line in lines[header + 1:] if len(line) > change_at)


def test_compare_html_tables_have_csvs_and_only_the_sorting_script(compared):
    _, _, out, _ = compared
    html = (out / "compare.html").read_text()

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[str] = []
            self.scripts = 0

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.ids.append(dict(attrs)["id"])
            self.scripts += tag == "script"

    parser = Tables()
    parser.feed(html)
    names = sorted(i.removeprefix("t-") for i in parser.ids)
    assert names == ["compare", "compare_summary", "compare_unmatched"]
    assert all((out / f"{i.removeprefix('t-')}.csv").is_file() for i in parser.ids)
    assert parser.scripts == 1


def test_runs_match_by_shape_and_toggles_when_ids_differ(tmp_path, make_folder, planted):
    a = make_folder(tmp_path / "a", failed=False, traces=False, drop=planted.run_ids[3:])
    b = make_folder(tmp_path / "b", failed=False, traces=False, drop=planted.run_ids[3:], seed=5)
    renamed = load_results(b)
    for r in renamed:
        r.run_id = "new-" + r.run_id
    write_results(b, renamed)
    matches, only_a, only_b = match_runs(load_results(a), load_results(b))
    assert sorted((m.a.run_id, m.b.run_id, m.matched_by) for m in matches) == sorted(
        (rid, "new-" + rid, "shape+toggles") for rid in planted.run_ids[:3])
    assert only_a == [] and only_b == []
    text = compare_folders(a, b, tmp_path / "out")
    assert "r-base -> new-r-base" in text


def test_nothing_matched_still_writes_both_files(tmp_path, make_folder, planted):
    a = make_folder(tmp_path / "a", ok=False)
    b = make_folder(tmp_path / "b", failed=False, traces=False, drop=planted.run_ids[1:])
    for r in load_results(a):
        assert r.status != "ok"
    text = compare_folders(a, b, tmp_path / "out")
    assert "(no matched runs)" in text
    assert rows_of(tmp_path / "out" / "compare.csv") == []
    assert "No runs matched." in (tmp_path / "out" / "compare.html").read_text()


def test_cli_compare(compared, tmp_path):
    a, b, _, _ = compared
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "x slower" in result.output and (tmp_path / "compare.html").is_file()
    result = CliRunner().invoke(main, ["compare", str(a), str(tmp_path)])
    assert result.exit_code == 2 and "no results.jsonl" in result.output


def test_a_run_timed_at_another_host_speed_is_not_decided(tmp_path, make_folder):
    # B: r-base 20% slower (significant in `compared`), but timed while the host's probe read 0.42 ms instead
    # of 0.32 ms: the change is left undecided and the terminal says why
    a = make_folder(tmp_path / "a", failed=False, traces=False, seed=1)
    b = make_folder(tmp_path / "b", slowdown={"r-base": 1.2}, failed=False, traces=False, seed=2)
    for folder in (a, b):
        runs = load_results(folder)
        for r in runs:
            r.samples["host_probe_ms"] = [0.42 if (folder == b and r.run_id == "r-base") else 0.32] * 5
        write_results(folder, runs)
    text = compare_folders(a, b, tmp_path / "out")
    row = by_run_metric(rows_of(tmp_path / "out" / "compare.csv"))[("r-base", "tpot_ms_median")]
    assert float(row["ratio"]) == pytest.approx(1.2, rel=0.02)
    assert "x inconclusive" in row["change"] and "not decided" in row["change"] and row["direction"] == ""
    assert "the host ran at another speed" in row["stable"]
    assert "r-base: the host ran at another speed: its probe took 0.42 ms in B vs 0.32 ms in A" in text
