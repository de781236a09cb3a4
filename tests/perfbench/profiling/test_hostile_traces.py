"""Trace readers under hostile input: empty, truncated, garbage, non-finite and out-of-range traces give one
line naming the file (and the event); events that cannot be used are skipped and counted, never silently."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.profiling import load_trace
from tests.cli_helpers import one_error_line
from tests.perfbench.profiling.synthetic import KERNELS, V3, npu_trace_view, write_json, write_kernel_details


def cli_trace(path: Path, out: Path) -> Result:
    return CliRunner().invoke(main, ["trace", str(path), "--out", str(out)])



def op(name: str, ts: object, dur: object) -> dict[str, object]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def kineto(path: Path, events: list[object]) -> Path:
    # json.dumps writes NaN / Infinity as a profiler that recorded them would
    path.write_text(json.dumps({"traceEvents": events}))
    return path


# ---- empty and truncated files ---------------------------------------------------------------------

def test_empty_kernel_details_names_the_file(tmp_path: Path) -> None:
    csv = tmp_path / "prof_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    csv.parent.mkdir(parents=True)
    csv.write_bytes(b"")
    for target in (csv, tmp_path / "prof_ascend_pt"):
        line = one_error_line(cli_trace(target, tmp_path / "out"))
        assert f"{csv}: empty file (0 bytes)" in line


def test_truncated_kernel_details_skips_and_counts_the_cut_row(tmp_path: Path) -> None:
    csv = write_kernel_details(tmp_path / "out_dir" / "kernel_details.csv", V3)
    text = csv.read_text()
    csv.write_text(text[:text.rindex("\t")])  # the last row cut inside its start time: no duration left
    trace = load_trace(csv)
    assert len(trace.events) == len(KERNELS) - 1
    notes = [n for n in trace.notes if "skipped" in n]
    assert notes == [f"rank 0: kernel_details.csv: skipped 1 kernel row: Duration(us) is non-finite, negative "
                     f"or out of range (first: line 4 {KERNELS[2]['Name']!r})"]


def test_kernel_rows_with_non_finite_or_extreme_values_are_counted(tmp_path: Path) -> None:
    kernels = [dict(KERNELS[0]), {**KERNELS[1], "Duration(us)": "nan"}, {**KERNELS[2], "Duration(us)": "-5"},
               {**KERNELS[0], "Start Time(us)": "1e300"}, {**KERNELS[1], "Duration(us)": "inf"}]
    csv = write_kernel_details(tmp_path / "out_dir" / "kernel_details.csv", V3, kernels)
    result = cli_trace(csv, tmp_path / "tables")
    assert result.exit_code == 0, result.output
    assert "1 device / 0 host events" in result.output
    assert "skipped 3 kernel rows: Duration(us) is non-finite, negative or out of range (first: line 3" \
        in result.output
    assert "skipped 1 kernel row: Start Time(us) is negative or out of range (first: line 5" in result.output


def test_truncated_chrome_trace_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [op("aten::mm", 1, 2)]})[:30])
    assert one_error_line(cli_trace(path, tmp_path / "out")).startswith(f"error: {path}: not a JSON trace")


def test_empty_chrome_trace_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("")
    assert one_error_line(cli_trace(path, tmp_path / "out")) == f"error: {path}: empty file (0 bytes): not a trace"


# ---- garbage event lists ---------------------------------------------------------------------------

@pytest.mark.parametrize("events,first", [
    ([1, "x", None], "event #0 1"),
    ([{"foo": 1}, {"bar": 2}], "event #0 ''"),
    ([op("aten::mm", "yesterday", 1)], "event #0 'aten::mm'"),
    ([{**op("aten::mm", 1, 1), "args": [1, 2]}], "event #0 'aten::mm'"),
], ids=["not-objects", "no-phase", "text-ts", "args-a-list"])
def test_garbage_event_lists_are_one_line_naming_the_file_and_event(tmp_path: Path, events: list[object],
                                                                     first: str) -> None:
    path = kineto(tmp_path / "t.json", events)
    line = one_error_line(cli_trace(path, tmp_path / "out"))
    assert line.startswith(f"error: {path}: no usable trace event; skipped {len(events)} (") and first in line


def test_garbage_among_good_events_is_counted_not_dropped_silently(tmp_path: Path) -> None:
    path = kineto(tmp_path / "t.json", [op("aten::mm", 10, 5), 7, {"x": 1}, op("aten::add", 20, 3)])
    trace = load_trace(path)
    assert sorted(trace.events["name"]) == ["aten::add", "aten::mm"]
    assert trace.notes == ["t.json: skipped 1 event: not an object (first: event #1 7)",
                           "t.json: skipped 1 event: no ph (event phase) (first: event #2 '')"]


def test_trace_view_array_with_garbage_names_the_file(tmp_path: Path) -> None:
    path = write_json(tmp_path / "trace_view.json", [3, [4], "five"])
    line = one_error_line(cli_trace(path, tmp_path / "out"))
    assert line.startswith(f"error: {path}: no usable trace event; skipped 3 (not an object; first: event #0 3)")


def test_ascend_trace_view_that_is_not_an_array_names_the_file(tmp_path: Path) -> None:
    """My own case: a trace_view.json that holds an object (another tool's JSON) used to crash on .get."""
    out = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_kernel_details(out / "kernel_details.csv", V3)
    view = write_json(out / "trace_view.json", {"not": "events"})
    line = one_error_line(cli_trace(tmp_path / "run_ascend_pt", tmp_path / "tables"))
    assert line.startswith(f"error: {view}: malformed trace_view.json") and "expected a JSON array" in line


def test_ascend_trace_view_garbage_events_are_counted(tmp_path: Path) -> None:
    out = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_kernel_details(out / "kernel_details.csv", V3)
    write_json(out / "trace_view.json", [*npu_trace_view(), 1, {"ph": "X", "cat": "cpu_op", "name": "x"}])
    trace = load_trace(tmp_path / "run_ascend_pt")
    skipped = [n for n in trace.notes if "trace_view.json: skipped" in n]
    assert skipped == ["rank 0: trace_view.json: skipped 1 event: not an object (first: event #"
                       f"{len(npu_trace_view())} 1)",
                       "rank 0: trace_view.json: skipped 1 event: ts is missing or not a number (first: event #"
                       f"{len(npu_trace_view()) + 1} 'x')"]


# ---- NaN durations, extreme values -----------------------------------------------------------------

def test_nan_durations_are_skipped_with_a_note_and_no_numpy_warning(tmp_path: Path) -> None:
    path = kineto(tmp_path / "t.json", [op("aten::mm", 1, float("nan")), op("aten::add", 10, 4.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in cast" would fail here
        trace = load_trace(path)
    assert trace.events["name"].tolist() == ["aten::add"]
    assert trace.events["dur_us"].tolist() == [4.0]  # the NaN event is not a 0 µs op
    assert trace.notes == ["t.json: skipped 1 event: dur is non-finite, negative or out of range "
                           "(first: event #0 'aten::mm')"]


@pytest.mark.parametrize("ts,dur,reason", [
    (1e300, 1, "ts is non-finite, negative or out of range"),
    (10, 1e30, "dur is non-finite, negative or out of range"),
    (10, -3, "dur is non-finite, negative or out of range"),
    (float("inf"), 1, "ts is non-finite, negative or out of range"),
    ("99999999999999999999999", 1, "ts is negative or out of range"),
    (10, True, "dur is not a number"),
], ids=["huge-ts", "huge-dur", "negative-dur", "inf-ts", "huge-text-ts", "bool-dur"])
def test_extreme_values_are_skipped_and_named(tmp_path: Path, ts: object, dur: object, reason: str) -> None:
    path = kineto(tmp_path / "t.json", [op("aten::bad", ts, dur), op("aten::add", 20, 4.0)])
    result = cli_trace(path, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "0 device / 1 host events" in result.output
    assert f"note: t.json: skipped 1 event: {reason} (first: event #0 'aten::bad')" in result.output


# ---- folders report the file that failed -----------------------------------------------------------

def test_a_folder_whose_only_trace_fails_reports_that_file(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    bad = folder / "rank0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat"')
    line = one_error_line(cli_trace(folder, tmp_path / "out"))
    assert line.startswith(f"error: {bad}: not a JSON trace")


def test_a_folder_with_a_good_and_a_bad_trace_reads_the_good_one_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    kineto(folder / "a.json", [op("aten::mm", 1, 2)])
    (folder / "b.json").write_text("")
    result = cli_trace(folder, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "note: skipped b.json: empty file (0 bytes): not a trace" in result.output


def test_a_folder_of_other_json_is_still_not_a_trace(tmp_path: Path) -> None:
    folder = tmp_path / "analysis"
    folder.mkdir()
    write_json(folder / "summary.json", {"steps": 3})
    with pytest.raises(UserError, match="no trace in this folder"):
        load_trace(folder)
