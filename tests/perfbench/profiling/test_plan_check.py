"""Traces checked against their plans: recorded CPU traces (tests/fixtures/cpu_traces) pass their own plan, and
mismatches planted by removing events from them are reported."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from perfbench.profiling.chrome import parse_chrome_trace
from perfbench.profiling.plan_check import check_plan, mismatches
from perfbench.profiling.signatures import COMPILED_GRAPH, SIGNATURES

from .conftest import FIXTURES, require

TRACES = FIXTURES / "cpu_traces"
CPU_TOGGLES = {name for name, devices in SIGNATURES.items() if "cpu" in devices}


def _plans() -> dict[str, dict[str, str]]:
    return json.loads(require(TRACES / "plans.json").read_text())


def _without(tmp_path: Path, trace: str, pattern: str) -> Path:
    """A copy of a recorded trace with every event whose name matches `pattern` removed."""
    data = json.loads(gzip.open(require(TRACES / trace)).read())
    data["traceEvents"] = [e for e in data["traceEvents"] if not re.search(pattern, str(e.get("name", "")))]
    path = tmp_path / trace.removesuffix(".gz")
    path.write_text(json.dumps(data))
    return path


# ep2_*: rank 0 of a two-rank CPU run (cpu_ep2 scenario: attention TP2 + MoE EP2), where the EP exchange is
# Double-Routing (all off) or the static-shape dispatch/combine (moe_dispatch_combine on)
@pytest.mark.parametrize("trace", ["all_off.json.gz", "eager_all_on.json.gz", "graph_all_on.json.gz",
                                   "ep2_all_off.json.gz", "ep2_dispatch_combine.json.gz"])
def test_recorded_traces_match_the_plans_they_ran(trace):
    plan = _plans()[trace]

    results = {r.toggle: r for r in check_plan(parse_chrome_trace(require(TRACES / trace)), plan, "cpu")}

    assert mismatches(list(results.values())) == []
    if plan["graph_mode"] == "off":  # layer scopes on: every toggle with a CPU signature is checked
        assert {t for t, r in results.items() if r.ok is True} == CPU_TOGGLES
    else:
        assert results["graph_mode"].ok is True


def test_every_signature_tells_on_from_off():
    """The all-off trace fails every CPU toggle's `on` signature, and the eager all-on trace every `off`
    (moe_dispatch_combine: the two-rank traces, the only ones with an EP exchange)."""
    plans = _plans()
    off_events = parse_chrome_trace(TRACES / "ep2_all_off.json.gz")
    on_events = parse_chrome_trace(TRACES / "ep2_dispatch_combine.json.gz")
    all_on = plans["ep2_dispatch_combine.json.gz"]
    all_off = plans["ep2_all_off.json.gz"]
    eager_toggles = CPU_TOGGLES - {"graph_mode"}

    assert {r.toggle for r in check_plan(off_events, all_on, "cpu") if r.ok is False} == eager_toggles
    assert {r.toggle for r in check_plan(on_events, all_off, "cpu") if r.ok is False} == eager_toggles


def test_graph_mode_without_a_compiled_graph_replay_is_reported(tmp_path):
    path = _without(tmp_path, "graph_all_on.json.gz", COMPILED_GRAPH)

    lines = mismatches(check_plan(parse_chrome_trace(path), _plans()["graph_all_on.json.gz"], "cpu"))

    assert lines == ["graph_mode on, but 0 compiled-graph replays per decode step (expected at least 1)"]


def test_graph_mode_on_an_eager_trace_reports_eager_ops_per_decode_step():
    events = parse_chrome_trace(TRACES / "all_off.json.gz")
    decode = events[(events["phase"] == "decode") & (events["side"] == "host")]
    per_step = decode["name"].str.startswith("aten::").sum() / decode["step"].nunique()
    plan = {**_plans()["all_off.json.gz"], "graph_mode": "on"}

    lines = mismatches(check_plan(events, plan, "cpu"))

    assert lines == ["graph_mode on, but 0 compiled-graph replays per decode step (expected at least 1); "
                     f"{per_step:,.0f} eager aten ops per decode step (expected at most 200)"]


def test_fused_attention_without_its_kernel_is_reported(tmp_path):
    path = _without(tmp_path, "eager_all_on.json.gz", r"scaled_dot_product")

    lines = mismatches(check_plan(parse_chrome_trace(path), _plans()["eager_all_on.json.gz"], "cpu"))

    assert lines == ["fused_attention on, but no fused attention ops in attention scopes"]


def test_double_routing_under_a_dispatch_combine_plan_is_reported(tmp_path):
    # the planted mismatch: the static dispatch's ops missing (and Double-Routing's present) while the plan
    # says moe_dispatch_combine on
    plan = {**_plans()["ep2_all_off.json.gz"], "moe_dispatch_combine": "on"}

    lines = mismatches(check_plan(parse_chrome_trace(TRACES / "ep2_all_off.json.gz"), plan, "cpu"))

    assert lines == ["moe_dispatch_combine on, but no static-shape dispatch (one_hot) ops in decode; "
                     "8 Double-Routing count (bincount) ops in decode"]  # 4 MoE layers x 2 decode steps


def test_dispatch_combine_without_its_dispatch_op_is_reported(tmp_path):
    path = _without(tmp_path, "ep2_dispatch_combine.json.gz", r"^aten::one_hot$")

    lines = mismatches(check_plan(parse_chrome_trace(path), _plans()["ep2_dispatch_combine.json.gz"], "cpu"))

    assert lines == ["moe_dispatch_combine on, but no static-shape dispatch (one_hot) ops in decode"]


def test_toggles_without_a_signature_are_not_checked():
    events = parse_chrome_trace(TRACES / "graph_all_on.json.gz")

    result = check_plan(events, {"mm_all_reduce": "off", "fused_attention": "on"}, "cpu")

    assert [r.ok for r in result] == [None, None]
    assert result[0].line == "mm_all_reduce: no trace signature on cpu"
    assert result[1].line == "fused_attention on: not checked (no attn scopes in the trace)"


EMULATED = FIXTURES / "npu_emulated" / "ep2_910b_rank0.json.gz"
EMULATED_PLAN = {"fused_rope": "on", "fused_attention": "on", "fused_rmsnorm": "on", "chunk_gdr": "inactive",
                 "mm_all_reduce": "on", "moe_dispatch_combine": "on", "graph_mode": "off",
                 "merged_projections": "on", "grouped_moe": "on"}  # tests/fixtures/SOURCES.md


def _emulated_without(tmp_path: Path, pattern: str) -> Path:
    data = json.loads(gzip.open(require(EMULATED)).read())
    data["traceEvents"] = [e for e in data["traceEvents"] if not re.search(pattern, str(e.get("name", "")))]
    path = tmp_path / "emulated.json"
    path.write_text(json.dumps(data))
    return path


def test_emulated_npu_trace_matches_its_plan():
    results = {r.toggle: r for r in check_plan(parse_chrome_trace(require(EMULATED)), EMULATED_PLAN, "npu")}

    assert mismatches(list(results.values())) == []
    assert {t for t, r in results.items() if r.ok is True} == {t for t, d in SIGNATURES.items() if "npu" in d}


@pytest.mark.parametrize("toggle, removed, line", [
    ("mm_all_reduce", r"npu_mm_all_reduce_base", "mm_all_reduce on, but no fused matmul+all_reduce ops in prefill"),
    ("moe_dispatch_combine", r"npu_moe_distribute_(dispatch|combine)_v2",
     "moe_dispatch_combine on, but no MC2 dispatch/combine ops in decode"),
])
def test_emulated_fused_comm_op_missing_is_reported(tmp_path, toggle, removed, line):
    events = parse_chrome_trace(_emulated_without(tmp_path, removed))

    assert mismatches(check_plan(events, EMULATED_PLAN, "npu")) == [line]


def test_emulated_unfused_attention_shows_its_host_softmax(tmp_path):
    # an emulated trace has host ops only: the unfused path's softmax is aten::_softmax, not a SoftmaxV2 kernel
    events = parse_chrome_trace(_emulated_without(tmp_path, r"npu_fused_infer_attention_score"))

    assert mismatches(check_plan(events, {**EMULATED_PLAN, "fused_attention": "off"}, "npu")) == []
    softmax_free = parse_chrome_trace(_emulated_without(tmp_path, r"npu_fused_infer_attention_score|softmax"))
    assert mismatches(check_plan(softmax_free, {**EMULATED_PLAN, "fused_attention": "off"}, "npu")) == [
        "fused_attention off, but no softmax kernels in attention scopes"]


def test_emulated_fused_comm_ops_under_an_off_plan_are_reported():
    plan = {**EMULATED_PLAN, "mm_all_reduce": "off", "moe_dispatch_combine": "inactive"}

    lines = mismatches(check_plan(parse_chrome_trace(require(EMULATED)), plan, "npu"))

    # 4 row-parallel prefill projections (3 GDN out_proj, 1 o_proj); dispatch + combine in 4 layers x 2 steps
    assert lines == ["mm_all_reduce off, but 4 fused matmul+all_reduce ops",
                     "moe_dispatch_combine off, but 16 MC2 dispatch/combine ops"]


CUDA_TRACES = FIXTURES / "cuda_traces"  # recorded on an H200, tests/fixtures/SOURCES.md
# chunk_gdr's own on/off pair, and the toggles both traces ran on (the others are inactive on one GPU)
CUDA_CHECKED = {"fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections", "grouped_moe",
                "graph_mode"}


def _cuda(trace: str) -> tuple[object, dict[str, str]]:
    plans = json.loads(require(CUDA_TRACES / "plans.json").read_text())
    return parse_chrome_trace(require(CUDA_TRACES / trace)), plans[trace]


@pytest.mark.parametrize("trace", ["eager_gdr_off.json.gz", "eager_gdr_on.json.gz"])
def test_recorded_cuda_traces_match_their_plans(trace):
    events, plan = _cuda(trace)

    results = {r.toggle: r for r in check_plan(events, plan, "cuda")}

    assert mismatches(list(results.values())) == []
    assert {t for t, r in results.items() if r.ok is True} == CUDA_CHECKED


def test_cuda_signatures_tell_on_from_off():
    """Each trace contradicts the plan with every checked eager toggle flipped: the CUDA kernels tell each
    toggle's two implementations apart."""
    for trace in ("eager_gdr_off.json.gz", "eager_gdr_on.json.gz"):
        events, plan = _cuda(trace)
        flipped = {t: ("off" if s == "on" else "on") if t in CUDA_CHECKED - {"graph_mode"} else s
                   for t, s in plan.items()}

        assert {r.toggle for r in check_plan(events, flipped, "cuda") if r.ok is False} == CUDA_CHECKED - {
            "graph_mode"}


def test_chunk_gdr_without_fla_has_no_cuda_signature():
    events, plan = _cuda("eager_gdr_off.json.gz")

    (result,) = check_plan(events, {"chunk_gdr": "on"}, "cuda", {"chunk_gdr": "cuda_torch"})

    assert result.ok is None and result.line == "chunk_gdr: no trace signature on cuda_torch"
