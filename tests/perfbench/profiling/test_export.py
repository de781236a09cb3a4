"""The normalized chrome trace (`perfbench trace --export`): every trace fixture exports to a file that keeps
the format rules Perfetto needs, and perfbench reads the export back to the source's op totals."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.profiling.export import export_trace, normalize_chrome
from perfbench.profiling.loading import load_trace
from perfbench.profiling.trace_format import format_problems
from perfbench.profiling.track_nesting import disjoint_lanes, nesting_lanes
from tests.cli_helpers import one_error_line
from tests.perfbench.profiling.conftest import FIXTURES, require

_NOT_TRACES = ("plans.json", "communication", "profiler_info", "profiler_metadata", "cluster_analysis_output",
               "baseline_schema4", "noise")
CHROME_FILES = sorted(p for p in FIXTURES.rglob("*.json*") if not any(k in str(p) for k in _NOT_TRACES))
ASCEND = FIXTURES / "npu_profiler"
FOLDERS = [ASCEND / "msinsight_pytorch_text_level1" / "rank0_ascend_pt", ASCEND / "msinsight_st_qwen3_0.6b_level2",
           ASCEND / "msinsight_pytorch_db_level1" / "rank0_ascend_pt"]
TRACE_VIEW = ASCEND / "msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"


def _totals(events: pd.DataFrame) -> pd.DataFrame:
    return events.groupby(["side", "name"])["dur_us"].agg(["sum", "count"])


def _read(path: Path) -> dict | list:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def test_the_fixture_list_covers_every_kind_of_trace() -> None:
    # a glob that silently found nothing would make the parametrized tests below vacuous
    names = {p.name for p in CHROME_FILES}
    assert "trace_view.json" in names and "all_off.json.gz" in names and "triton_example.json" in names
    assert len(CHROME_FILES) >= 15


@pytest.mark.parametrize("path", CHROME_FILES + FOLDERS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_exports_to_a_well_formed_trace_with_the_source_op_totals(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.json.gz"
    export_trace(require(path), out)
    assert format_problems(_read(out)) == []
    source, back = _totals(load_trace(path).events), _totals(load_trace(out).events)
    assert list(back.index) == list(source.index)
    assert (back["count"] == source["count"]).all()
    assert back["sum"].to_numpy() == pytest.approx(source["sum"].to_numpy(), abs=1e-3)  # ns rounding only


def test_trace_view_json_needs_the_normalization() -> None:
    # the raw torch_npu file breaks the rules the export keeps: text epoch timestamps, flow ids beyond 2^53
    raw = json.loads(require(TRACE_VIEW).read_text())
    assert isinstance(raw[0]["ts"], str)
    assert max(int(e["id"]) for e in raw if e.get("ph") in ("s", "f")) > 2**53
    problems = format_problems(raw, limit=1000)
    assert any("not a non-negative number" in p for p in problems)
    exported, summary, _ = normalize_chrome(raw)
    assert format_problems(exported) == []
    assert summary.flow_ids == len({(e.get("cat"), str(e["id"])) for e in raw if e.get("ph") in ("s", "f")})
    ids = [e["id"] for e in exported if e.get("ph") in ("s", "f")]
    assert max(ids) < 2**53 and min(ids) >= 1


def test_timestamps_become_numbers_from_the_first_event_with_ns_kept() -> None:
    raw = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
           {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "1736408883688177.930", "dur": 2.5},
           {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": "1736408883688177.931", "dur": 1.0}]
    exported, _, _ = normalize_chrome(raw)
    assert [e["ts"] for e in exported if e.get("ph") == "X"] == [0.0, 0.001]  # 1 ns apart, as written


def test_a_partial_overlap_moves_to_an_extra_lane_with_its_flow() -> None:
    # b starts inside a and ends after it: drawn on a's track, a viewer would nest it wrongly
    raw = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 100.0, "dur": 10.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 105.0, "dur": 10.0, "args": {"stream": 7}},
        {"ph": "f", "cat": "ac2g", "name": "launch", "id": 3, "bp": "e", "pid": 0, "tid": 7, "ts": 105.0},
        {"ph": "s", "cat": "ac2g", "name": "launch", "id": 3, "pid": 0, "tid": 1, "ts": 101.0},
    ]}
    assert format_problems(raw) != []
    exported, summary, _ = normalize_chrome(raw)
    assert format_problems(exported) == []
    assert (summary.partial_overlaps, summary.moved_slices) == (1, 1)
    by_name = {e["name"]: e for e in exported["traceEvents"] if e.get("ph") == "X"}
    assert by_name["a"]["tid"] == 7 and by_name["b"]["tid"] != 7
    assert [e["dur"] for e in by_name.values()] == [10.0, 10.0]  # durations untouched
    flow_end = next(e for e in exported["traceEvents"] if e.get("ph") == "f")
    assert flow_end["tid"] == by_name["b"]["tid"]


def test_lanes_nest_and_disjoint_lanes_never_overlap() -> None:
    # [0,10] holds [2,4]; [5,12] crosses [0,10]'s end; [10,11] follows it
    starts, ends = [0, 2, 5, 10], [10, 4, 12, 11]
    assert nesting_lanes(starts, ends) == [0, 0, 1, 0]
    assert disjoint_lanes(starts, ends) == [0, 1, 1, 0]


def test_perfbench_tracks_show_the_run_phases_steps_and_layers(tmp_path: Path) -> None:
    # recorded with 4 layers and 4 new tokens: one prefill, decode steps 0-2 (tests/fixtures/SOURCES.md)
    out = tmp_path / "all_off.json.gz"
    export_trace(require(FIXTURES / "cpu_traces" / "all_off.json.gz"), out)
    events = _read(out)["traceEvents"]
    pid = next(e["pid"] for e in events
               if e.get("name") == "process_name" and e["args"]["name"] == "perfbench (rank 0)")
    slices = [e["name"] for e in events if e.get("pid") == pid and e.get("ph") == "X"]
    assert [s for s in slices if s.startswith("decode step") and "layer" not in s] == [
        "decode step 0", "decode step 0", "decode step 1", "decode step 1", "decode step 2", "decode step 2"]
    assert sum(s.startswith("layer ") for s in slices) == 4 * 4  # 4 layers in prefill and in each decode step
    assert "prefill" in slices


def test_cli_export_writes_findings_and_refuses_another_name(tmp_path: Path) -> None:
    trace = require(FIXTURES / "cpu_traces" / "all_off.json.gz")
    result = CliRunner().invoke(main, ["trace", str(trace), "--out", str(tmp_path / "t"),
                                       "--export", str(tmp_path / "x.json.gz")])
    assert result.exit_code == 0, result.output
    assert "export: " in result.output
    instants = [e for e in _read(tmp_path / "x.json.gz")["traceEvents"]
                if e.get("ph") == "i" and e.get("cat") == "perfbench"]
    # the eager CPU trace spends 59% of decode outside compute ops: the advisor's host-bound finding
    assert any("host-bound-decode" in e["name"] for e in instants)
    bad = CliRunner().invoke(main, ["trace", str(trace), "--out", str(tmp_path / "t2"),
                                    "--export", str(tmp_path / "x.json")])
    assert "*.json.gz" in one_error_line(bad)


def test_an_emulated_trace_says_so_in_the_export(tmp_path: Path) -> None:
    out = tmp_path / "emulated.json.gz"
    export_trace(require(FIXTURES / "npu_emulated" / "ep2_910b_rank0.json.gz"), out,
                 emulation="emulated npu (910b)")
    data = _read(out)
    assert data["perfbench"]["emulation"] == "emulated npu (910b): timings are CPU timings"
    names = [e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "process_name"]
    assert "perfbench (rank 0), emulated npu (910b): CPU timings" in names
