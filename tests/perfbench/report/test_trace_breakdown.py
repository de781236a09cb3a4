"""The time-breakdown section over per-run trace tables, including tables it does not know or cannot read."""

from __future__ import annotations

import pytest

from perfbench.analysis.trace_tables import read_trace_tables
from perfbench.pages.page import Figure, Text
from perfbench.pages.table import Table
from perfbench.report.breakdown import TOP_OPS, breakdown_section
from perfbench.results import load_results


@pytest.fixture
def two_runs(tmp_path, make_folder, planted):
    folder = make_folder(tmp_path, failed=False, drop=planted.run_ids[2:])
    return folder, load_results(folder)


def _section(folder, results):
    """The section as the report builds it: the ok runs' trace tables read once, then laid out."""
    return breakdown_section(results, read_trace_tables(folder, [r for r in results if r.status == "ok"]))


def tables_of(section) -> dict[str, Table]:
    return {b.name: b for b in section.blocks if isinstance(b, Table)}


def notes_of(section) -> list[str]:
    return [b.text for b in section.blocks if isinstance(b, Text)]


def test_breakdowns_sum_over_other_columns_and_keep_missing_labels(two_runs):
    folder, results = two_runs
    run_id = results[0].run_id
    (folder / "runs" / run_id / "tables" / "per_category.csv").write_text(
        "category,phase,total_us\nmatmul,prefill,100\nmatmul,decode,250.5\n,decode,7\nnorm,decode,3\n")
    section = _section(folder, results)
    row = next(r for r in tables_of(section)["time_by_category"].rows if r["run_id"] == run_id)
    assert (row["us.matmul"], row["us.norm"], row["us.(none)"], row["total_us"]) == (350.5, 3.0, 7.0, 360.5)
    assert sum(isinstance(b, Figure) for b in section.blocks) == 3  # category, layer type, phase


def test_top_ops_keep_the_biggest_per_run(two_runs):
    folder, results = two_runs
    run_id = results[0].run_id
    lines = ["name,count,total_us"] + [f"op{i},1,{i}" for i in range(TOP_OPS + 5)]
    (folder / "runs" / run_id / "tables" / "per_op.csv").write_text("\n".join(lines) + "\n")
    rows = [r for r in tables_of(_section(folder, results))["top_ops"].rows if r["run_id"] == run_id]
    assert [r["total_us"] for r in rows] == list(range(TOP_OPS + 4, 4, -1))


def test_unknown_tables_are_shown_and_broken_ones_reported(two_runs):
    folder, results = two_runs
    first, second = (r.run_id for r in results)
    (folder / "runs" / first / "tables" / "memory.csv").write_text("pool,peak_mb\nkv,12.5\n")
    (folder / "runs" / first / "tables" / "per_phase.csv").write_text("phase,dur\nprefill,3\n")
    (folder / "runs" / second / "tables" / "empty.csv").write_text("")
    section = _section(folder, results)
    memory = tables_of(section)["trace_memory"]
    assert memory.rows == [{"run_id": first, "toggles_on": "(all off)", "pool": "kv",
                            "peak_mb": 12.5}]
    notes = notes_of(section)
    assert f"per_phase.csv lacks a `phase` or `total_us` column in runs {first}." in notes
    assert any(n.startswith(f"{second}/empty.csv: unreadable") for n in notes)
    phase_rows = tables_of(section)["time_by_phase"].rows
    assert [r["run_id"] for r in phase_rows] == [second]


def test_no_tables_at_all_is_explained(tmp_path, make_folder, planted):
    folder = make_folder(tmp_path, failed=False, traces=False, drop=planted.run_ids[2:])
    section = _section(folder, load_results(folder))
    assert not tables_of(section)
    assert notes_of(section)[0].startswith("No trace tables found")


def test_host_and_device_time_are_never_added(two_runs, planted):
    folder, results = two_runs
    section = _section(folder, results)
    base = next(r for r in results if r.run_id == "r-base")
    scale = base.summary.tpot_ms_median / planted.base_tpot_ms
    row = next(r for r in tables_of(section)["time_by_phase"].rows if r["run_id"] == "r-base")
    assert row["side"] == "device"
    assert row["total_us"] == pytest.approx((900 + 300 + 50 + 120) * scale)
    assert {r["side"] for r in tables_of(section)["top_ops"].rows} == {"device"}
    # a host-only trace (CPU) uses the host rows
    (folder / "runs" / "r-base" / "tables" / "per_phase.csv").write_text(
        "side,phase,total_us\nhost,prefill,40\nhost,decode,60\n")
    row = next(r for r in tables_of(_section(folder, results))["time_by_phase"].rows
               if r["run_id"] == "r-base")
    assert (row["side"], row["total_us"], row["us.decode"]) == ("host", 100.0, 60.0)


def test_a_trace_that_failed_to_parse_is_named(two_runs, planted):
    folder, results = two_runs
    results[1].trace = {"error": f"Traceback (most recent call last):\n  ...\nKeyError: '{planted.injection}'"}
    notes = notes_of(_section(folder, results))
    assert f"{results[1].run_id}: the trace was not parsed (KeyError: '{planted.injection}')." in notes
