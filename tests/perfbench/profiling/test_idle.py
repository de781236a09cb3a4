"""idle.csv: device free time, kernel gaps and launch delays per phase and layer on hand-built events (values
counted by hand in the comments), the CPU dispatch overhead, NPU launch delays from async_npu flows, and the
decode free share and launch delay of a real CUDA trace recomputed here from its raw JSON."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from perfbench.profiling import parse_trace_path
from perfbench.profiling.events import events_from_columns
from perfbench.profiling.idle import ALL_LAYERS, idle
from perfbench.profiling.trace_view import trace_view_events

from .conftest import FIXTURES, require
from .synthetic import npu_trace_view


def _device_events() -> pd.DataFrame:
    # decode step 0: layer 0 runs k0 [10,14) and k1 [16,18) on stream 7 and k2 [13,15) on stream 8; layer 1 runs
    # k3 [20,25) on stream 7. decode step 1: k4 [110,112) (layer 0), k5 [115,116) (layer 1). prefill: p0 [0,3).
    # launches (host call starts): k0 8, k1 9, k3 12, k4 100, k5 101; k2 and p0 are not linked. A host op is
    # ignored (device rows are the primary side).
    return events_from_columns({
        "name": ["p0", "k0", "k1", "k2", "k3", "k4", "k5", "aten::mm"],
        "phase": ["prefill"] + ["decode"] * 7,
        "step": [None, 0, 0, 0, 0, 1, 1, 0],
        "layer": [None, 0, 0, 0, 1, 0, 1, 0],
        "layer_type": [None] + ["linear_attention"] * 3 + ["full_attention", "linear_attention",
                                                              "full_attention", "linear_attention"],
        "side": ["device"] * 7 + ["host"],
        "start_us": [0.0, 10.0, 16.0, 13.0, 20.0, 110.0, 115.0, 9.0],
        "dur_us": [3.0, 4.0, 2.0, 2.0, 5.0, 2.0, 1.0, 1.0],
        "stream": ["7", "7", "7", "8", "7", "7", "7", "1"],
        "launch_us": [None, 8.0, 9.0, None, 12.0, 100.0, 101.0, None],
    })


def _row(table: pd.DataFrame, phase: str, layer_type: str = ALL_LAYERS) -> pd.Series:
    rows = table[(table["phase"] == phase) & (table["layer_type"] == layer_type)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_device_free_time_gaps_and_launch_delays_per_phase():
    table = idle(_device_events())
    decode = _row(table, "decode")
    # step 0: span 25 - 10 = 15, union [10,15) + [16,18) + [20,25) = 12; step 1: span 6, union 3
    assert (decode["windows"], decode["span_us"], decode["busy_us"], decode["free_us"]) == (2, 21.0, 15.0, 6.0)
    assert decode["free_share_pct"] == pytest.approx(100 * 6 / 21) and not decode["host_bound"]  # 28.6% < 30%
    # stream 7 gaps: 14 -> 16, 18 -> 20 (step 0), 112 -> 115 (step 1); stream 8 has one kernel
    assert (decode["gap_mean_us"], decode["gap_max_us"]) == (pytest.approx(7 / 3), 3.0)
    # launch -> start: 2, 7, 8, 10, 14
    assert (decode["linked_launches"], decode["launch_delay_max_us"]) == (5, 14.0)
    assert decode["launch_delay_mean_us"] == pytest.approx(41 / 5)
    assert (decode["launches"], decode["side"]) == (6, "device")
    prefill = _row(table, "prefill")
    assert (prefill["span_us"], prefill["free_us"], prefill["linked_launches"]) == (3.0, 0.0, 0)
    assert pd.isna(prefill["launch_delay_mean_us"]) and pd.isna(prefill["gap_mean_us"])


def test_device_free_time_per_layer():
    table = idle(_device_events())
    gdn, attn = _row(table, "decode", "linear_attention"), _row(table, "decode", "full_attention")
    # layer 0: step 0 span 18 - 10 = 8, union 7; step 1 span 2, union 2
    assert (gdn["layer"], gdn["span_us"], gdn["busy_us"], gdn["free_us"]) == (0, 10.0, 9.0, 1.0)
    assert gdn["free_share_pct"] == pytest.approx(10.0)
    assert (gdn["gap_mean_us"], gdn["linked_launches"], gdn["launch_delay_max_us"]) == (2.0, 3, 10.0)
    assert gdn["launch_delay_mean_us"] == pytest.approx((2 + 7 + 10) / 3)
    # layer 1: k3 alone in step 0, k5 alone in step 1: no free time, no gap on a stream within a window
    assert (attn["layer"], attn["span_us"], attn["free_us"], attn["launch_delay_mean_us"]) == (1, 6.0, 0.0, 11.0)
    assert pd.isna(attn["gap_mean_us"])
    # rows come phase first, then its layers; prefill's kernel has no layer: it counts in the phase row only
    assert list(zip(table["phase"], table["layer_type"])) == [
        ("prefill", ALL_LAYERS), ("decode", ALL_LAYERS), ("decode", "linear_attention"),
        ("decode", "full_attention")]


def test_cpu_dispatch_overhead_on_the_busiest_host_thread():
    # thread 1: linear [0, +1 self), addmm [1, +5), view [8, +1), mul [10, +2); thread 2: one add (1 µs self)
    events = events_from_columns({
        "name": ["aten::linear", "aten::addmm", "aten::view", "aten::mul", "aten::add"],
        "phase": ["decode"] * 5, "step": [0] * 5, "layer": [0] * 5, "layer_type": ["full_attention"] * 5,
        "side": ["host"] * 5, "start_us": [0.0, 1.0, 8.0, 10.0, 3.0], "dur_us": [1.0, 5.0, 1.0, 2.0, 1.0],
        "stream": ["1", "1", "1", "1", "2"],
    })
    decode = _row(idle(events), "decode")
    # span 12 - 0; compute = linear + addmm + mul = 8 (view is bookkeeping); no op ran in 12 - 9 self = 3
    assert (decode["side"], decode["span_us"], decode["busy_us"], decode["free_us"]) == ("host", 12.0, 8.0, 4.0)
    assert decode["no_op_us"] == 3.0 and decode["launches"] == 4
    assert decode["free_share_pct"] == pytest.approx(100 / 3) and decode["host_bound"]
    assert pd.isna(decode["launch_delay_mean_us"]) and decode["linked_launches"] == 0


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach, start = 0.0, None, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            if reach is not None:
                total += reach - start
            start, reach = s, e
        else:
            reach = max(reach, e)
    return total + (reach - start if reach is not None else 0.0)


def test_decode_free_share_and_launch_delay_of_a_real_cuda_trace():
    path = require(FIXTURES / "cuda_traces" / "eager_gdr_on.json.gz")
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    # decode steps: the model's `pb|phase=decode|step=N` host ranges (Kineto mirrors them on the GPU timeline as
    # gpu_user_annotation); a kernel belongs to the step whose range holds the runtime call that launched it
    # (same correlation id)
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("ph") == "X" and e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("pb|phase=decode|step=")]
    launch = {e["args"]["correlation"]: e["ts"] for e in raw
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    kernels = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    per_step: dict[int, list] = {}
    for k in kernels:
        at = launch.get(k["args"].get("correlation"))
        for i, (lo, hi) in enumerate(steps):
            if at is not None and lo <= at <= hi:
                per_step.setdefault(i, []).append(k)
    spans = [max(k["ts"] + k["dur"] for k in ks) - min(k["ts"] for k in ks) for ks in per_step.values()]
    busy = [_union([(k["ts"], k["ts"] + k["dur"]) for k in ks]) for ks in per_step.values()]
    delays = [k["ts"] - launch[k["args"]["correlation"]] for ks in per_step.values() for k in ks]

    decode = _row(idle(parse_trace_path(path)), "decode")

    assert len(steps) == 15 and decode["windows"] == len(per_step) == 15
    assert decode["free_share_pct"] == pytest.approx(100 * (1 - sum(busy) / sum(spans)), abs=1e-3)
    assert decode["span_us"] == pytest.approx(sum(spans), abs=0.05)
    assert decode["linked_launches"] == len(delays) == sum(len(ks) for ks in per_step.values())
    assert decode["launch_delay_mean_us"] == pytest.approx(sum(delays) / len(delays), abs=1e-3)
    assert decode["host_bound"]  # a small model on an H200: the device idles most of each decode step


def test_free_share_of_a_trace_without_annotations():
    # HTA's simple add benchmark (no phases, one profiler window): four kernels over one span
    path = require(FIXTURES / "torch_profiler" / "hta_tests" / "benchmark_simple_add_trace.json")
    raw = json.loads(path.read_text())["traceEvents"]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in raw
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    span = max(e for _, e in kernels) - min(s for s, _ in kernels)

    whole = _row(idle(parse_trace_path(path)), "(none)")

    assert whole["span_us"] == pytest.approx(span)
    assert whole["free_share_pct"] == pytest.approx(100 * (1 - _union(kernels) / span))


def test_npu_launch_delays_follow_the_async_npu_flows():
    device = trace_view_events(npu_trace_view()).query("side == 'device'").set_index("name")
    delay = device["start_us"] - device["launch_us"]
    # device start - issuing cpu_op start, from the flows' two ends (synthetic.npu_trace_view)
    assert delay["aclnnMatmul_MatMulV3Common_MatMulV3"] == pytest.approx(643.212 - 31.5)
    assert delay["aclnnRmsNorm_RmsNormAiCore_RmsNorm"] == pytest.approx(843.213 - 101.0)
    assert delay["hcom_allReduce__586_0_1"] == pytest.approx(899.999 - 410.0)
    assert pd.isna(device.loc["aclnnCast_CastAiCore_Cast", "launch_us"])  # no flow: not linked
