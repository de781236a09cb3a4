"""Trace files that are broken below the event level: text no UTF-8 writer could write back (a lone surrogate
escape), a gzip stream that is corrupt or cut, bytes that are not UTF-8, a top level that is no trace, and
timestamps of the wrong type. Each is one `error:` line naming the file, exit 2, never a traceback; the near
misses (a surrogate pair, an escaped backslash before `ud800`, a NaN among good events) still parse."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from perfbench.cli import main
from perfbench.profiling import load_trace
from tests.cli_helpers import one_error_line

GOOD = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 3}]


def trace_and_export(path: Path, tmp_path: Path) -> Result:
    return CliRunner().invoke(main, ["trace", str(path), "--out", str(tmp_path / "tables"),
                                     "--export", str(tmp_path / "export.json.gz")])


def kineto_text(name_json: str, extra: str = "") -> str:
    """A two-event Kineto trace whose first op's name is the raw JSON text `name_json` (escapes kept as written)."""
    return ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": ' + name_json + ', "pid": 1, "tid": 1, '
            '"ts": 10, "dur": 5' + extra + '}, {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, '
            '"tid": 1, "ts": 20, "dur": 3}]}')


@pytest.mark.parametrize("text", [
    kineto_text(r'"\ud800"'),  # a high surrogate alone
    kineto_text(r'"a\uDC00b"'),  # a low surrogate alone, upper-case hex
    kineto_text(r'"\ude00\ud83d"'),  # a pair in the wrong order
    kineto_text('"x"', r', "args": {"\ud800": 1}'),  # in a key
    kineto_text('"x"', r', "args": {"k": [1, "\udbff"]}'),  # inside a nested list
    kineto_text(r'"\ud800"').replace('"dur": 3', '"dur": NaN'),  # NaN: parsed by the stdlib, not orjson
    kineto_text(r'"\\\ud800"'),  # an escaped backslash, then the escape itself
], ids=["high", "low", "reversed-pair", "key", "nested", "with-nan", "after-escaped-backslash"])
def test_a_lone_surrogate_escape_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(text)
    line = one_error_line(trace_and_export(path, tmp_path))
    assert str(path) in line and "lone surrogate" in line
    assert not (tmp_path / "export.json.gz").exists()


@pytest.mark.parametrize(("name_json", "expected"), [
    (r'"\ud83d\ude00"', "\U0001F600"),  # a surrogate pair: one character, valid UTF-8
    (r'"\\ud800"', "\\ud800"),  # an escaped backslash followed by the text ud800
    (r'"\u00e9\uD7FF\uE000"', "\u00e9\ud7ff\ue000"),  # the code points either side of the surrogate range
], ids=["pair", "escaped-backslash", "edges"])
def test_near_misses_parse_and_export(tmp_path: Path, name_json: str, expected: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(kineto_text(name_json))
    assert expected in load_trace(path).events["name"].tolist()
    result = trace_and_export(path, tmp_path)
    assert result.exit_code == 0, result.output
    exported = json.loads(gzip.decompress((tmp_path / "export.json.gz").read_bytes()))
    assert expected in [e.get("name") for e in exported["traceEvents"]]


def gz_of_good() -> bytes:
    return gzip.compress(json.dumps({"traceEvents": GOOD}).encode(), mtime=0)


def corrupt_block_type(data: bytes) -> bytes:
    # byte 10 is the first of the deflate stream: 0xFF declares block type 3, which deflate reserves
    return data[:10] + b"\xff" + data[11:]


def bad_crc(data: bytes) -> bytes:
    return data[:-8] + bytes(b ^ 0xFF for b in data[-8:-4]) + data[-4:]


@pytest.mark.parametrize(("make", "said"), [
    (corrupt_block_type, "corrupt gzip data"),
    (lambda data: data[: len(data) // 2], "cannot read"),  # cut mid-stream
    (lambda data: data[:5], "cannot read"),  # cut inside the header
    (bad_crc, "cannot read"),
    (lambda data: json.dumps({"traceEvents": GOOD}).encode(), "cannot read"),  # plain JSON named .gz
], ids=["corrupt-deflate", "truncated", "truncated-header", "bad-crc", "not-gzip"])
def test_a_broken_gzip_is_one_line(tmp_path: Path, make: Callable[[bytes], bytes], said: str) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(make(gz_of_good()))
    line = one_error_line(trace_and_export(path, tmp_path))
    assert str(path) in line and said in line


def test_the_good_gzip_those_were_made_from_parses(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gz_of_good())
    assert sorted(load_trace(path).events["name"]) == ["aten::add", "aten::mm"]


@pytest.mark.parametrize("raw", [
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "\xff\xfe", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
    b'\xef\xbb\xbf{"traceEvents": []}'.replace(b"[]", b'[{"name": "\xc3\x28"}]'),  # an invalid 2-byte sequence
], ids=["invalid-start-byte", "invalid-continuation"])
def test_bytes_that_are_not_utf8_are_one_line(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    line = one_error_line(trace_and_export(path, tmp_path))
    assert str(path) in line


@pytest.mark.parametrize("top", ["5", '"text"', "null", "true", '{"traceEvents": {"0": {}}}', '{"other": []}'])
def test_a_top_level_that_is_no_trace_is_one_line(tmp_path: Path, top: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(top)
    line = one_error_line(trace_and_export(path, tmp_path))
    assert f"{path}: not a chrome trace" in line


@pytest.mark.parametrize(("field", "value"), [
    ("ts", "soon"), ("ts", True), ("ts", None), ("ts", [10]), ("ts", {"us": 10}),
    ("dur", "long"), ("dur", False), ("dur", [5]), ("dur", {"us": 5}),
])
def test_timestamps_of_the_wrong_type_are_one_line_when_nothing_else_is_usable(tmp_path: Path, field: str,
                                                                              value: object) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [{**GOOD[0], field: value}]}))
    line = one_error_line(trace_and_export(path, tmp_path))
    assert str(path) in line and "no usable trace event" in line and field in line


def test_a_wrongly_typed_timestamp_among_good_events_is_dropped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [*GOOD, {**GOOD[0], "name": "bad", "ts": True}]}))
    result = trace_and_export(path, tmp_path)
    assert result.exit_code == 0, result.output
    assert "1 unusable events dropped" in result.output
    assert "bad" not in load_trace(path).events["name"].tolist()
