from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from model.tracing import scope_name
from perfbench.errors import UserError
from perfbench.profiling.chrome import parse_chrome_trace
from perfbench.profiling.events import ALL_COLUMNS, COLUMNS, DTYPES

from .conftest import require

GDN_SCOPE = scope_name(phase="decode", step=0, layer=1, layer_type="linear_attention", module="gdn")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    """A real torch.profiler CPU trace: ops in the model's annotation ranges, a nested range, one outside."""
    path = tmp_path_factory.mktemp("cpu") / "trace.json"
    x, w = torch.randn(8, 32), torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        torch.relu(x)
        with record_function(GDN_SCOPE):
            y = torch.nn.functional.linear(x, w)
            torch.sigmoid(y)
            with record_function(scope_name(module="norm")):
                torch.rsqrt(y.abs() + 1)
    prof.export_chrome_trace(str(path))
    return path


def _naive_self_us(trace_events: list[dict]) -> dict[tuple, float]:
    """Independent O(n^2) exclusive time: duration minus the direct child cpu_ops on the same thread."""
    ops = [e for e in trace_events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    out = {}
    for op in ops:
        end = op["ts"] + op["dur"]
        inside = [c for c in ops if c is not op and c["tid"] == op["tid"] and op["ts"] <= c["ts"]
                  and c["ts"] + c["dur"] <= end and (c["ts"], -c["dur"]) > (op["ts"], -op["dur"])]
        direct = [c for c in inside if not any(
            o is not c and o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"]
            and (o["ts"], -o["dur"]) < (c["ts"], -c["dur"]) for o in inside)]
        out[(op["name"], op["ts"])] = op["dur"] - sum(c["dur"] for c in direct)
    return out


def test_real_cpu_trace_recovers_annotation_columns(cpu_trace):
    events = parse_chrome_trace(cpu_trace)

    assert list(events.columns) == list(ALL_COLUMNS)
    assert {c: str(events[c].dtype) for c in COLUMNS} == DTYPES
    assert events["input_shapes"].isna().all()  # recorded without record_shapes
    assert not events["name"].str.startswith("pb|").any()
    mm = events[events["name"] == "aten::mm"].iloc[0]
    assert (mm["phase"], mm["step"], mm["layer"], mm["layer_type"], mm["module"]) == (
        "decode", 0, 1, "linear_attention", "gdn")
    assert mm["category"] == "matmul" and mm["side"] == "host"
    assert events[events["name"] == "aten::sigmoid"]["category"].tolist() == ["gdn"]
    rsqrt = events[events["name"] == "aten::rsqrt"].iloc[0]
    assert (rsqrt["module"], rsqrt["layer"], rsqrt["phase"]) == ("norm", 1, "decode")
    assert rsqrt["category"] == "norm"
    relu = events[events["name"] == "aten::relu"].iloc[0]
    assert pd.isna(relu["phase"]) and pd.isna(relu["layer"]) and relu["category"] == "other"
    assert events["start_us"].min() >= 0.0


def test_host_times_are_exclusive(cpu_trace):
    raw = json.loads(cpu_trace.read_text())["traceEvents"]
    expected = _naive_self_us(raw)
    events = parse_chrome_trace(cpu_trace)
    origin = min(e["ts"] for e in raw if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"))

    assert len(events) == len(expected)
    for row in events.itertuples():
        assert row.dur_us == pytest.approx(_lookup(expected, row.name, row.start_us + origin), abs=2e-3)
    linear = events[events["name"] == "aten::linear"].iloc[0]
    linear_inclusive = next(e["dur"] for e in raw if e.get("name") == "aten::linear")
    assert linear["dur_us"] < linear_inclusive


def _lookup(expected: dict[tuple, float], name: str, ts: float) -> float:
    return next(v for (n, t), v in expected.items() if n == name and abs(t - ts) < 2e-3)


def _handmade(base_relative: bool) -> dict:
    """One parent op with two children (one with a grandchild) under a transparent annotation, plus a kernel
    launched by the grandchild. Same instants in both time bases."""
    t0 = 1_700_000_000_000_000 if not base_relative else 5_000_000

    def x(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": tid, "ts": t0 + ts, "dur": dur,
                "args": args}

    events = [
        x("user_annotation", "ProfilerStep#3", 0, 200),
        x("user_annotation", scope_name(phase="prefill", layer=0, layer_type="full_attention", module="attn"),
          1, 150),
        x("cpu_op", "aten::linear", 2, 100, **{"External id": 1}),
        x("cpu_op", "aten::t", 10, 20, **{"External id": 2}),
        x("user_annotation", "[param|inner]", 35, 30),
        x("cpu_op", "aten::mm", 40, 20, **{"External id": 3}),
        x("cpu_op", "aten::resolve_conj", 45, 5, **{"External id": 4}),
        x("cuda_runtime", "cudaLaunchKernel", 51, 4, **{"External id": 3, "correlation": 77}),
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": t0 + 60,
         "dur": 8, "args": {"correlation": 77, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": t0 + 70, "dur": 5,
         "args": {"External id": 1, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "orphan_kernel", "pid": 0, "tid": 7, "ts": t0 + 80, "dur": 1,
         "args": {"stream": 7}},
    ]
    trace = {"traceEvents": events, "distributedInfo": {"rank": 3}}
    if base_relative:
        trace["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    return trace


def test_exclusive_times_context_and_kernel_links_on_a_handmade_trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_handmade(base_relative=False)))
    events = parse_chrome_trace(path).set_index("name")

    assert events.loc["aten::linear", "dur_us"] == 60.0  # 100 - t(20) - mm(20); the annotation is transparent
    assert events.loc["aten::mm", "dur_us"] == 11.0  # 20 - resolve_conj(5) - cudaLaunchKernel(4)
    assert events.loc["aten::resolve_conj", "dur_us"] == 5.0
    assert events.loc["sm90_xmma_gemm_bf16", "side"] == "device"
    gemm = events.loc["sm90_xmma_gemm_bf16"]  # via correlation -> cudaLaunchKernel
    assert (gemm["phase"], gemm["step"], gemm["layer"], gemm["module"], gemm["category"], gemm["stream"]) == (
        "prefill", 3, 0, "attn", "matmul", "7")
    assert events.loc["flash_fwd_kernel", "category"] == "attention"  # via External id -> aten::linear
    assert events.loc["flash_fwd_kernel", "step"] == 3
    # no launch links it to an op, but it ran inside ProfilerStep#3's window
    assert pd.isna(events.loc["orphan_kernel", "phase"]) and events.loc["orphan_kernel", "step"] == 3
    assert set(events["rank"]) == {3}
    assert events.loc["aten::linear", "start_us"] == 2.0  # relative to the first event (ProfilerStep)


def test_absolute_and_base_relative_timestamps_give_the_same_table(tmp_path):
    absolute, relative = tmp_path / "a.json", tmp_path / "r.json.gz"
    absolute.write_text(json.dumps(_handmade(base_relative=False)))
    with gzip.open(relative, "wt") as f:
        json.dump(_handmade(base_relative=True), f)

    pd.testing.assert_frame_equal(parse_chrome_trace(absolute), parse_chrome_trace(relative))


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a JSON trace"),
    ('{"foo": 1}', "no `traceEvents`"),
])
def test_bad_files_are_user_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        parse_chrome_trace(path)


def test_cuda_fixture_kernels_take_the_step_of_their_launching_op(torch_fixtures):
    events = parse_chrome_trace(require(torch_fixtures / "hta_tests" / "event_sync_trace.json"))
    device = events[events["side"] == "device"]

    assert len(device) == 5
    assert device["step"].tolist() == [100] * 5  # ProfilerStep#100 lives on the host thread only


def test_rocm_fixture_gemm_kernels_are_matmul(torch_fixtures):
    path = require(torch_fixtures / "hta_tests" / "mi250_minitoy_train_ROCm6_2_kineto.json")
    events = parse_chrome_trace(path)
    device = events[events["side"] == "device"]

    assert device["name"].str.startswith("Cijk_").sum() == 2
    assert set(device[device["name"].str.startswith("Cijk_")]["category"]) == {"matmul"}

def test_rocm_fixture_backward_kernels_count_in_the_step_that_holds_them(torch_fixtures):
    """Autograd's thread has no ProfilerStep range: its kernels take the step whose window holds them, so the
    step's device time is every kernel/memcpy inside ProfilerStep#1's window, summed from the raw file."""
    path = require(torch_fixtures / "hta_tests" / "mi250_minitoy_train_ROCm6_2_kineto.json")
    raw = json.loads(path.read_text())["traceEvents"]
    window = next(e for e in raw if e.get("name") == "ProfilerStep#1" and e.get("cat") == "user_annotation")
    inside = [e["dur"] for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and window["ts"] <= e["ts"] < window["ts"] + window["dur"]]

    device = parse_chrome_trace(path).query("side == 'device'")

    assert device.loc[device["step"] == 1, "dur_us"].sum() == pytest.approx(sum(inside), abs=1e-6)
    assert device["step"].notna().all()


def test_cpu_only_fixture_counts_gloo_collectives_as_communication(torch_fixtures):
    path = require(torch_fixtures / "hta_tests" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json")
    events = parse_chrome_trace(path)

    comm = events[events["category"] == "communication"]
    assert len(comm) == 10 and set(comm["name"]) == {"gloo:all_reduce"}
    assert set(events["side"]) == {"host"} and set(events["rank"]) == {34}


def test_malformed_event_is_a_user_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 1}]}))
    # the only event has no ts: skipped and named, and a trace with nothing usable is an error
    with pytest.raises(UserError, match=r"no usable trace event; skipped 1 \(ts is missing .*'aten::mm'"):
        parse_chrome_trace(path)
