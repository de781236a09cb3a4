"""`build_report` on synthetic result folders: sections, CSV beside every table, escaping, degradation."""

from __future__ import annotations

import csv
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from model.toggles import ToggleDecision
from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.pages.page import SCRIPT
from perfbench.pages.table import format_number
from perfbench.report import build_report
from perfbench.results import Numerics, load_results, write_results
from tests.perfbench.report.conftest import synthetic_run
from tests.records_kit import run_result

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


class PageParser(HTMLParser):
    """Collects script elements, element attributes, table ids and the text of every table cell."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.table_ids: list[str] = []
        self.cell_texts: list[str] = []
        self._in_script = False
        self._in_cell = 0

    def handle_starttag(self, tag, attrs):
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
        elif tag == "table":
            self.table_ids.append(dict(attrs).get("id", ""))
        elif tag in ("td", "th"):
            self._in_cell += 1
            self.cell_texts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False
        elif tag in ("td", "th"):
            self._in_cell -= 1

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        elif self._in_cell:
            self.cell_texts[-1] += data


def parse(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text())
    return parser


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def full_report(tmp_path_factory, make_folder) -> Path:
    """One report of the full synthetic folder (factorial + one-at-a-time shapes, failures, traces), shared by
    the tests that only read it."""
    return build_report(make_folder(tmp_path_factory.mktemp("full")))


def test_report_has_every_section_and_a_csv_per_table(full_report):
    path, folder = full_report, full_report.parent
    assert path == folder / "report.html"
    page = parse(path)
    text = path.read_text()
    for title in ("Environment and scenario", "Effective plan", "Latency", "Ablation", "Time breakdown",
                  "Numerics", "Failures"):
        assert f"<h2>{title}</h2>" in text
    csvs = {p.stem for p in (folder / "report").glob("*.csv")}
    assert {t.removeprefix("t-") for t in page.table_ids} == csvs
    analyses = ("marginal", "waterfall", "leave_one_out", "interactions", "shapley")
    ablation = {f"{a}_tpot_ms_median" for a in analyses}
    assert {"environment", "scenario", "plan", "latency", "time_by_category", "time_by_layer_type",
            "time_by_phase", "top_ops", "numerics", "failures"} | ablation <= csvs
    assert text.count("data:image/png;base64,") >= 6  # marginal + waterfall plots, three breakdowns


def test_every_number_in_a_table_is_in_a_csv(full_report):
    folder = full_report.parent
    page = parse(full_report)
    csv_tokens = set()
    for path in (folder / "report").glob("*.csv"):
        csv_tokens |= set(NUMBER.findall(path.read_text()))
    # the CSV keeps full precision; the page shows format_number of the same value
    shown_forms = csv_tokens | {format_number(float(t)) for t in csv_tokens}
    page_numbers = [n for text in page.cell_texts for n in NUMBER.findall(text)]
    assert len(page_numbers) > 500
    missing = sorted({n for n in page_numbers if n not in shown_forms})
    assert not missing, f"numbers on the page but in no CSV: {missing[:10]}"


def test_hostile_strings_stay_text(full_report, planted):
    path = full_report
    page = parse(path)
    assert page.scripts == [SCRIPT]  # only the page's own sorting script
    assert not [a for a in page.attrs if a[1].startswith("on")]
    text = path.read_text()
    assert planted.injection not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # scenario, env, error and an op name
    # the failed run's error, its full traceback under <details>, and the op name from a trace table
    assert "kernel failed &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text


def test_the_page_is_self_contained(full_report):
    page = parse(full_report)
    urls = [v for tag, k, v in page.attrs if k in ("src", "href") and v]
    assert urls and all(u.startswith(("data:image/png;base64,", "#")) for u in urls)
    assert "http://" not in "".join(page.scripts) and "https://" not in "".join(page.scripts)


def test_latency_table_medians_and_bootstrap_ci(full_report):
    folder = full_report.parent
    results = {json.loads(line)["run_id"]: json.loads(line) for line in (folder / "results.jsonl").open()}
    rows = csv_rows(folder / "report" / "latency.csv")
    assert {r["run_id"] for r in rows} == {k for k, v in results.items() if v["status"] == "ok"}
    for row in rows:
        summary = results[row["run_id"]]["summary"]
        for prefix in ("ttft_ms", "tpot_ms"):
            median = float(row[f"{prefix}_median"])
            assert median == pytest.approx(summary[f"{prefix}_median"])
            assert float(row[f"{prefix}_ci_lo"]) <= median <= float(row[f"{prefix}_ci_hi"])
        assert (int(row["ttft_ms_n"]), int(row["tpot_ms_n"])) == (5, 40)


def test_ablation_recovers_the_planted_speedups(full_report, planted):
    folder = full_report.parent
    for name in ("marginal", "shapley"):
        rows = csv_rows(folder / "report" / f"{name}_tpot_ms_median.csv")
        rows = [r for r in rows if "bs=1 " in r["shape"]]
        assert {r["toggle"]: float(r["speedup"]) for r in rows} == pytest.approx(planted.speedups, rel=0.02)
    interactions = csv_rows(folder / "report" / "interactions_tpot_ms_median.csv")
    assert len(interactions) == 3  # every pair of the bs=1 factorial; none in the one-toggle bs=4 shape
    assert all(abs(float(r["log_interaction"])) < 0.02 for r in interactions)
    text = (folder / "report.html").read_text()
    assert "Pairwise interactions: not available for this design, no pair of toggles" in text


def test_one_at_a_time_design_says_why_there_are_no_shapley_values(tmp_path, make_folder, planted):
    keep = ("r-base", "r-fused_rope", "r-fused_attention", "r-grouped_moe")
    folder = make_folder(tmp_path, drop=tuple(k for k in planted.run_ids if k not in keep), failed=False)
    text = build_report(folder).read_text()
    assert "Shapley values: not available for this design, needs all 8 on/off combinations" in text
    assert "Leave-one-out losses: not available" in text
    assert not (folder / "report" / "shapley_tpot_ms_median.csv").exists()
    assert (folder / "report" / "marginal_tpot_ms_median.csv").exists()


def test_plan_matrix_colours_states_and_gives_reasons(tmp_path, make_folder, planted):
    folder = make_folder(tmp_path, failed=False, drop=planted.run_ids[2:])
    results = load_results(folder)
    results[0].plan.decisions["mm_all_reduce"] = ToggleDecision("mm_all_reduce", requested=True, state="inactive",
                                                                reason="needs attn_tp_size > 1", impl="")
    write_results(folder, results)
    text = build_report(folder).read_text()
    assert 'class="mark mark-inactive" title="needs attn_tp_size &gt; 1">inactive</td>' in text
    assert 'class="mark mark-on" title="fast fused_rope">on</td>' in text
    row = next(r for r in csv_rows(folder / "report" / "plan.csv") if r["run_id"] == results[0].run_id)
    assert (row["mm_all_reduce"], row["mm_all_reduce.why"]) == ("inactive", "needs attn_tp_size > 1")


def test_only_failed_runs_still_render(tmp_path, make_folder):
    folder = make_folder(tmp_path, ok=False)
    text = build_report(folder).read_text()
    assert "No run finished ok, so there are no latencies to show" in text
    assert "nothing to attribute" in text
    assert "No trace tables found" in text
    assert "No run recorded a numerics check" in text
    assert "The runs carry no environment metadata." in text
    assert {p.stem for p in (folder / "report").glob("*.csv")} == {"scenario", "plan", "failures"}
    assert len(csv_rows(folder / "report" / "failures.csv")) == 2


def test_no_traces_and_no_scenario(tmp_path, make_folder, planted):
    drop = tuple(k for k in planted.run_ids if k not in ("r-base", "r-grouped_moe"))
    folder = make_folder(tmp_path, traces=False, failed=False, drop=drop)
    (folder / "scenario.json").unlink()
    text = build_report(folder).read_text()
    assert "No trace tables found" in text
    assert "No scenario.json in this folder." in text
    assert "All 2 runs finished ok and measured what they were asked." in text


def test_damaged_scenario_json_is_reported_not_fatal(tmp_path, make_folder):
    folder = make_folder(tmp_path, ok=False)
    (folder / "scenario.json").write_text("{not json")
    assert "scenario.json could not be read" in build_report(folder).read_text()


def test_a_second_report_removes_tables_it_no_longer_has(tmp_path, make_folder, planted):
    folder = make_folder(tmp_path, drop=planted.run_ids[1:])
    build_report(folder)
    assert (folder / "report" / "top_ops.csv").exists()
    for tables in (folder / "runs").glob("*/tables"):
        for f in tables.iterdir():
            f.unlink()
    build_report(folder)
    assert not (folder / "report" / "top_ops.csv").exists()


def test_bad_folders_are_one_line_user_errors(tmp_path):
    with pytest.raises(UserError, match="no results.jsonl"):
        build_report(tmp_path)
    (tmp_path / "results.jsonl").write_text(
        '{"run_id": "a", "status": "ok", "spec": {"run_id": "a", "scenario": "s"}}\n{oops\n')
    with pytest.raises(UserError, match=r"unreadable results.jsonl \(.*:2: not valid JSON"):
        build_report(tmp_path)


def test_cli_report(tmp_path, make_folder):
    folder = make_folder(tmp_path, ok=False)
    result = CliRunner().invoke(main, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"report: {folder / 'report.html'}"
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["report", str(empty)])
    assert result.exit_code == 2
    assert "error:" in result.output and "no results.jsonl" in result.output


def test_an_empty_result_folder_renders(tmp_path):
    write_results(tmp_path, [])
    text = build_report(tmp_path).read_text()
    assert text.count("No runs in this folder.") == 2  # plan and failures
    assert "No run finished ok" in text


def test_environment_lists_each_distinct_value_once(tmp_path):
    from perfbench.pages.table import Table
    from perfbench.report.runs import environment_section

    runs = [run_result(f"r{i}", env={"date": f"2026-11-30T18:0{i}:00", "torch": "2.13.0"}) for i in range(3)]
    (table,) = [b for b in environment_section(tmp_path, runs).blocks if isinstance(b, Table)]
    assert table.rows == [
        {"key": "date", "value": "2026-11-30T18:00:00 .. 2026-11-30T18:02:00 (3 values)", "runs": 3},
        {"key": "torch", "value": "2.13.0", "runs": 3}]


def test_the_numerics_section_names_a_run_that_was_not_compared_and_one_past_its_bound(tmp_path):
    rng = np.random.default_rng(3)
    passed, failed, missing = (synthetic_run(f"r{i}", {"fused_rope"}, rng) for i in range(3))
    failed.numerics.max_rel_error = 0.5                      # float32 bound 1e-3
    missing.numerics = Numerics(not_compared="the reference cannot be replayed: planted")
    folder = tmp_path / "f"
    write_results(folder, [passed, failed, missing])
    text = build_report(folder).read_text()
    assert "NOT COMPARED (1 runs, a gate FAIL): r2" in text
    rows = {r["run_id"]: r for r in csv_rows(folder / "report" / "numerics.csv")}
    assert (rows["r0"]["verdict"], rows["r1"]["verdict"], rows["r2"]["verdict"]) == ("pass", "FAIL", "NOT COMPARED")
    assert rows["r2"]["where"] == "the reference cannot be replayed: planted"
