"""The trace export under odd input: pids / tids that are not ids (1.5, true, null, 2^70) are renumbered, an
export onto its own source is refused however the path is spelled, a stream with more than 100 lanes keeps
its tids to itself, and the events are reused and written in batches, not copied."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.profiling.events import events_from_columns
from perfbench.profiling.export import _json_batches, events_to_chrome, export_trace, normalize_chrome
from perfbench.profiling.loading import load_trace
from perfbench.profiling.trace_format import format_problems
from tests.cli_helpers import one_error_line


def op(name: str, ts: float, tid: Any, pid: Any = 1, dur: float = 2.0) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def read_export(path: Path) -> list[dict[str, Any]]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


# ---- odd pids and tids --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("odd", "shown"), [(1.5, "1.5"), (True, "true"), (None, "null"),
                                            (2**70, "1.1805916207174113e+21"), (1.0, "1.0"),
                                            (-(2**60), "-1152921504606846976")])
def test_an_odd_tid_is_renumbered_to_an_unused_integer_named_after_it(tmp_path: Path, odd: Any, shown: str) -> None:
    source = tmp_path / "trace.json"
    source.write_text(json.dumps({"traceEvents": [op("odd", 10, odd), op("one", 20, 1), op("odd2", 30, odd)]}))
    out = tmp_path / "export.json.gz"
    summary = export_trace(source, out)
    assert summary.track_ids == 1 and "1 odd pids/tids renumbered" in summary.line()
    events = read_export(out)
    tids = {e["name"]: e["tid"] for e in events if e.get("cat") == "cpu_op"}
    assert tids["one"] == 1  # an ordinary tid stays
    assert tids["odd"] == tids["odd2"] and type(tids["odd"]) is int and tids["odd"] not in (0, 1)
    assert {"ph": "M", "name": "thread_name", "pid": 1, "tid": tids["odd"],
            "args": {"name": f"tid {shown} (renumbered)"}} in events
    assert format_problems(read_export(out)) == []
    assert sorted(load_trace(out).events["name"]) == ["odd", "odd2", "one"]


def test_true_and_one_stay_two_tracks_and_a_named_odd_track_keeps_its_name() -> None:
    raw = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": True, "args": {"name": "worker"}},
        op("on-true", 10, True, dur=10), op("on-one", 12, 1, dur=10)]}  # crossing, but on different tracks
    exported, summary, _ = normalize_chrome(raw)
    events = exported["traceEvents"]
    by_name = {e["name"]: e for e in events if e.get("ph") == "X"}
    assert by_name["on-true"]["tid"] != by_name["on-one"]["tid"] == 1
    assert (summary.track_ids, summary.moved_slices) == (1, 0)  # no overlap: they never shared a track
    names = [e["args"]["name"] for e in events if e.get("ph") == "M"]
    assert names == ["worker"]  # the trace's own name moved with the track, none added


def test_an_odd_pid_is_renumbered_and_its_tids_follow() -> None:
    raw = [op("a", 1, 5, pid=1.5), op("b", 2, 5, pid=None), op("c", 3, 5, pid=1.5), op("d", 4, 5, pid=7)]
    exported, summary, _ = normalize_chrome(raw)
    pids = {e["name"]: e["pid"] for e in exported if e.get("ph") == "X"}
    assert pids["a"] == pids["c"] and len({pids["a"], pids["b"], pids["d"]}) == 3 and pids["d"] == 7
    assert all(type(p) is int for p in pids.values()) and summary.track_ids == 2
    assert {e["args"]["name"] for e in exported if e.get("name") == "process_name"} == {
        "pid 1.5 (renumbered)", "pid null (renumbered)"}


def test_text_tids_and_integers_below_2_53_are_kept_as_they_are() -> None:
    # the near miss: Kineto writes text tids ("stream 7") and large thread ids
    raw = [op("a", 1, "stream 7"), op("b", 2, 2**53 - 1), op("c", 3, -1), op("d", 4, 0)]
    exported, summary, _ = normalize_chrome(raw)
    assert [e["tid"] for e in exported] == ["stream 7", 2**53 - 1, -1, 0]
    assert summary.track_ids == 0 and "pids/tids" not in summary.line()


def test_an_integer_beyond_64_bits_in_args_is_written_as_a_double(tmp_path: Path) -> None:
    # with a NaN in the file the stdlib reader keeps 2^70 exact, which orjson refuses to write
    source = tmp_path / "trace.json"
    source.write_text(json.dumps({"traceEvents": [{**op("a", 1, 1), "args": {"x": 2**70}},
                                                  op("nan", 2, 1, dur=float("nan"))], "meta": [-(2**80)]}))
    out = tmp_path / "export.json.gz"
    export_trace(source, out)
    data = json.loads(gzip.decompress(out.read_bytes()))
    assert data["meta"] == [float(-(2**80))]
    assert next(e for e in data["traceEvents"] if e.get("name") == "a")["args"] == {"x": float(2**70)}


# ---- the export's own source --------------------------------------------------------------------------------

def source_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [op("a", 1, 1), op("b", 5, 1)]}).encode()))
    return path


def export_via_cli(source: Path, export: Path | str, tmp_path: Path) -> Any:
    return CliRunner().invoke(main, ["trace", str(source), "--out", str(tmp_path / "tables"),
                                     "--export", str(export)])


@pytest.mark.parametrize("spelling", ["same", "dotdot", "symlink-to-source", "hard-link", "source-is-symlink"])
def test_an_export_onto_its_own_source_is_refused(tmp_path: Path, spelling: str) -> None:
    source = source_trace(tmp_path)
    before = source.read_bytes()
    (tmp_path / "sub").mkdir()
    read_from, export = source, source
    if spelling == "dotdot":
        export = tmp_path / "sub" / ".." / source.name
    elif spelling == "symlink-to-source":
        export = tmp_path / "link.json.gz"
        export.symlink_to(source)
    elif spelling == "hard-link":
        export = tmp_path / "sub" / "hard.json.gz"
        os.link(source, export)
    elif spelling == "source-is-symlink":
        read_from = tmp_path / "sub" / "link.json.gz"
        read_from.symlink_to(source)
    line = one_error_line(export_via_cli(read_from, export, tmp_path))
    assert "is the trace being exported" in line
    assert source.read_bytes() == before
    assert not (tmp_path / "tables").exists()  # refused before any table was written
    with pytest.raises(UserError, match="is the trace being exported"):
        export_trace(read_from, export)  # the library call refuses too (profiled runs call it directly)


def test_an_export_beside_the_source_is_written(tmp_path: Path) -> None:
    source = source_trace(tmp_path)
    before = source.read_bytes()
    result = export_via_cli(source, tmp_path / "trace.export.json.gz", tmp_path)
    assert result.exit_code == 0, result.output
    assert source.read_bytes() == before and (tmp_path / "trace.export.json.gz").exists()


# ---- tids of the events route, and how the events are written -------------------------------------------------

def test_a_stream_with_more_than_100_lanes_keeps_its_tids_to_itself() -> None:
    # 150 host ops at one instant need 150 lanes; the next stream's tids used to start at 100
    n = 150
    events = events_from_columns({"name": [f"op{i}" for i in range(n)] + ["other"],
                                  "side": ["host"] * (n + 1), "stream": ["1"] * n + ["2"],
                                  "start_us": [0.0] * n + [0.0], "dur_us": [1.0] * (n + 1)})
    data, _ = events_to_chrome(events)
    slices = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    first = {e["tid"] for e in slices if e["name"] != "other"}
    other = {e["tid"] for e in slices if e["name"] == "other"}
    assert len(first) == n and not first & other
    labels = [e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "thread_name"]
    assert len(labels) == len(set(labels)) == n + 1


def test_the_events_are_reused_not_copied_and_batches_join_to_one_array() -> None:
    raw = {"traceEvents": [op(f"op{i}", 3 * i, 1) for i in range(10)]}
    originals = list(raw["traceEvents"])
    exported, _, _ = normalize_chrome(raw)
    assert len(exported["traceEvents"]) == 10
    assert all(any(e is o for o in originals) for e in exported["traceEvents"])
    batches = b"".join(_json_batches(exported["traceEvents"], batch=3))
    assert orjson.loads(b"[" + batches + b"]") == exported["traceEvents"]
