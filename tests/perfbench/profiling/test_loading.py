from __future__ import annotations

import gzip
import json
import shutil

import pytest

from perfbench.errors import UserError
from perfbench.profiling.loading import load_trace, parse_trace_path

from .conftest import FIXTURES, TORCH_FIXTURES, require
from .synthetic import V2, npu_trace_view, write_json, write_kernel_details


def _kineto(rank: int | None = None) -> dict:
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
         "args": {}},
    ]}
    if rank is not None:
        trace["distributedInfo"] = {"rank": rank}
    return trace


def test_json_and_gz_files_are_chrome_traces(tmp_path):
    plain = write_json(tmp_path / "a.json", _kineto())
    packed = tmp_path / "b.pt.trace.json.gz"
    with gzip.open(packed, "wt") as f:
        json.dump(_kineto(), f)

    assert parse_trace_path(plain)["name"].tolist() == ["aten::mm"]
    assert load_trace(packed).kind == "chrome"


def test_a_trace_view_file_and_a_kernel_details_file(tmp_path):
    assert set(parse_trace_path(write_json(tmp_path / "trace_view.json", npu_trace_view()))["side"]) == {
        "host", "device"}
    csv_path = write_kernel_details(tmp_path / "out" / "kernel_details.csv", V2)
    loaded = load_trace(csv_path)
    assert loaded.kind == "ascend" and len(loaded.events) == 3


def test_folder_of_rank_traces(tmp_path):
    write_json(tmp_path / "rank0.pt.trace.json", _kineto(rank=0))
    write_json(tmp_path / "rank1.pt.trace.json", _kineto(rank=1))
    (tmp_path / "README.json").write_text('{"not": "a trace"}')

    loaded = load_trace(tmp_path)

    assert sorted(loaded.events["rank"]) == [0, 1]
    assert loaded.notes == ["skipped README.json: not a chrome trace (no `traceEvents` list)"]


def test_folder_of_traces_without_distinct_ranks_numbers_them(tmp_path):
    write_json(tmp_path / "a.json", _kineto())
    write_json(tmp_path / "b.json", _kineto())

    loaded = load_trace(tmp_path)

    assert sorted(loaded.events["rank"]) == [0, 1] and loaded.ranks == [0, 1]


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing.json", "no such file"),
    (lambda p: (p / "notes.txt", (p / "notes.txt").write_text("x"))[0], "not a trace"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no trace in this folder"),
])
def test_anything_else_is_a_one_line_user_error(tmp_path, make, message):
    with pytest.raises(UserError, match=message) as err:
        load_trace(make(tmp_path))
    assert "\n" not in str(err.value)


def test_multi_rank_run_trace_folder_reads_every_rank(tmp_path):
    source = TORCH_FIXTURES / "hta_tests" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json"
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
        shutil.copy(source, tmp_path / f"rank{rank}" / "trace.json")

    loaded = load_trace(tmp_path)

    single = load_trace(source).events
    assert loaded.ranks == [0, 1]
    assert loaded.events.groupby("rank").size().tolist() == [len(single), len(single)]


def test_emulated_npu_rank_folders_read_their_host_trace(tmp_path):
    # the NPU emulator writes rank<N>/<host>_ascend_pt/emulated_host_trace.json (no Ascend tables)
    trace = gzip.open(require(FIXTURES / "npu_emulated" / "ep2_910b_rank0.json.gz")).read()
    for rank in (0, 1):
        folder = tmp_path / "trace" / f"rank{rank}" / f"vm_{rank}_ascend_pt"
        folder.mkdir(parents=True)
        (folder / "emulated_host_trace.json").write_bytes(trace)

    one = load_trace(tmp_path / "trace" / "rank0")
    both = load_trace(tmp_path / "trace")

    assert len(one.events) > 0 and (one.events["side"] == "host").all()
    assert both.ranks == [0, 1] and len(both.events) == 2 * len(one.events)
