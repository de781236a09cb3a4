"""Every advisor rule fires on its positive input and stays silent on its negative one; each pair is built from
one base and differs only in what the rule reads. Plus: every rule is documented in docs/advisor.md."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from model.toggles import TOGGLE_NAMES, ToggleDecision
from perfbench.analysis.advisor import (
    RULES,
    Finding,
    TraceFacts,
    aicpu_fallback,
    communication_not_overlapped,
    first_call_compile,
    host_bound_decode,
    moe_imbalance,
    ordered,
    slowest_link,
    slowest_rank,
    tail_spike,
    toggles_inactive,
    toggles_slower,
    trace_contradicts_plan,
)
from perfbench.analysis.folder_analysis import analyse
from perfbench.analysis.trace_tables import TraceTables
from perfbench.profiling.across_ranks import cluster_record
from perfbench.profiling.ascend import parse_ascend_dir
from perfbench.profiling.ascend_kernels import TASK_TYPE_COLUMNS, time_by_task_type
from perfbench.profiling.idle import COLUMNS as IDLE_COLUMNS
from perfbench.results import RunPlan, RunResult, RunSpec
from tests.records_kit import run_result, trace_record

DOCS = Path(__file__).resolve().parents[3] / "docs"
# msprof-analyze's advisor test data: 7 AI_CPU Cast tasks (tests/fixtures/SOURCES.md)
AICPU_FIXTURE = (Path(__file__).resolve().parents[2] / "fixtures" / "npu_profiler" / "msprof_analyze_ut"
                 / "advisor_backend_compute_advice")


def _plan(on: set[str], inactive: dict[str, str] | None = None) -> RunPlan:
    inactive = inactive or {}
    decisions = {}
    for t in TOGGLE_NAMES:
        if t in on:
            decisions[t] = ToggleDecision(t, True, "on", "", f"fast {t}")
        elif t in inactive:
            decisions[t] = ToggleDecision(t, True, "inactive", inactive[t], "")
        else:
            decisions[t] = ToggleDecision(t, False, "off", "not requested", "")
    return RunPlan(decisions)


def _run(run_id: str, on: set[str] = frozenset(), **fields) -> RunResult:
    spec = RunSpec(run_id=run_id, scenario="s", toggles={t: t in on for t in TOGGLE_NAMES})
    return run_result(run_id, spec=spec, plan=_plan(set(on)), **fields)


# ---- trace tables ---------------------------------------------------------------------------------------

def _idle(free_us: float, side: str = "device") -> pd.DataFrame:
    """idle.csv's decode rows: the phase row and one layer row over a 1000 µs span."""
    def row(layer_type: str, layer: int | None) -> dict:
        return {"rank": 0, "phase": "decode", "layer_type": layer_type, "layer": layer, "side": side,
                "windows": 4, "span_us": 1000.0, "busy_us": 1000.0 - free_us, "free_us": free_us,
                "free_share_pct": free_us / 10.0, "no_op_us": 0.0 if side == "host" else np.nan, "launches": 80,
                "gap_mean_us": 3.0, "gap_max_us": 9.0, "linked_launches": 80, "launch_delay_mean_us": 6.5,
                "launch_delay_max_us": 20.0, "host_bound": free_us / 10.0 >= 30}
    return pd.DataFrame([row("(all)", None), row("full_attention", 3)], columns=IDLE_COLUMNS)


def _compute_vs_communication(exposed_us: float) -> pd.DataFrame:
    return pd.DataFrame({"rank": [0, 0], "step": [0, 1], "side": ["device", "device"], "compute_us": [80.0, 80.0],
                         "communication_us": [40.0, 40.0], "overlapped_us": [40.0 - exposed_us] * 2,
                         "communication_not_overlapped_us": [exposed_us] * 2, "wall_us": [100.0, 100.0],
                         "free_us": [0.0, 0.0], "communication_share_pct": [33.3, 33.3]})


def _cluster(slow_step_us: float) -> dict:
    steps = pd.DataFrame({"rank": [0, 1, 2], "step": [0, 0, 0], "step_us": [100.0, 100.0, slow_step_us],
                          "compute_us": [60.0] * 3, "communication_us": [30.0] * 3,
                          "communication_not_overlapped_us": [30.0] * 3})
    return cluster_record(steps)


def _real_task_types(fallback: bool) -> pd.DataFrame:
    """The fixture's kernel time per task type; without the fallback, its AI_CPU tasks as AI_CORE ones."""
    table = time_by_task_type(parse_ascend_dir(AICPU_FIXTURE).kernels)
    return table if fallback else table.assign(task_type=table["task_type"].replace("AI_CPU", "AI_CORE"))


def _task_types(ai_cpu_task_us: float) -> pd.DataFrame:
    """100 AI_CPU tasks of `ai_cpu_task_us` each beside 1500 µs of AI_CORE work and 900 µs of HCCL."""
    rows = [(0, "AI_CORE", "MatMul_1", "MatMulV3", 30, 1500.0, 80.0),
            (0, "HCCL", "hcom_allReduce_1", "hcom", 3, 900.0, 300.0),
            (0, "AI_CPU", "Cast_7", "Cast", 100, 100 * ai_cpu_task_us, ai_cpu_task_us)]
    return pd.DataFrame(rows, columns=TASK_TYPE_COLUMNS)


def _links(slow_gb_s: float) -> pd.DataFrame:
    return pd.DataFrame({"link": ["0->1 (HCCS)", "0->2 (HCCS)", "0->3 (HCCS)", "1->2 (HCCS)"],
                         "bandwidth_gb_s": [10.0, 10.0, 10.0, slow_gb_s]})


# ---- results --------------------------------------------------------------------------------------------

def _expert_load(counts: list[int]) -> dict:
    return {"counted": "one iteration", "num_experts": 8, "top_k": 2, "ep_size": 1, "experts_by_rank": [[0, 8]],
            "counts": [{"phase": "prefill", "layer": 0, "experts": [43, 42, 42, 43, 42, 43, 42, 43]},
                       {"phase": "prefill", "layer": 1, "experts": counts}], "not_recorded": {}}


def _blocks_pair(plan_factor: float, toggle: str = "fused_rmsnorm") -> list[RunResult]:
    """An all-off baseline and one toggle, timed in 20 interleaved blocks of one process; the toggle's TPOT is
    `plan_factor` times the baseline's, its TTFT the same."""
    rng = np.random.default_rng(0)
    base_tpot = list(10.0 * (1 + 0.01 * rng.standard_normal(20)))
    base_ttft = list(40.0 * (1 + 0.01 * rng.standard_normal(20)))
    blocks = {"group": "g", "process": "p1", "index": list(range(20)), "epoch": [i // 5 for i in range(20)],
              "runs": 2, "blocks": 20}
    base = _run("base", samples={"ttft_ms": base_ttft, "tpot_ms": base_tpot}, blocks=blocks)
    other = _run("one", {toggle}, samples={"ttft_ms": list(base_ttft), "tpot_ms": [t * plan_factor for t in base_tpot]},
                 blocks=blocks)
    return [base, other]


def _steps_run(spike_ms: float) -> RunResult:
    """3 timed iterations of 4 decode steps (output_len 5), every step 10 ms but iteration 2's third."""
    steps = [10.0] * 12
    steps[4 + 2] = spike_ms
    spec = RunSpec(run_id="r", scenario="s", output_len=5, toggles={t: False for t in TOGGLE_NAMES})
    return run_result("r", spec=spec, plan=_plan(set()),
                      samples={"ttft_ms": [40.0] * 3, "tpot_ms": [10.0, (30.0 + spike_ms) / 4, 10.0],
                               "tpot_steps_ms": steps})


@dataclass(frozen=True)
class Case:
    rule: str
    check: Callable[[object], list[Finding]]
    positive: object
    negative: object
    evidence: str  # a number the positive finding's message must show


def _tables(**tables: pd.DataFrame) -> TraceFacts:
    return TraceFacts(tables=tables, label="", tables_dir="runs/r/tables/")



def _toggles_slower(runs: list[RunResult]) -> list[Finding]:
    """The rule on the speed-ups and marginals of the runs' folder analysis, as the report gets them."""
    analysis = analyse(runs)
    return toggles_slower(analysis.merged, analysis.by_shape, analysis.on_top)


def _folder_findings(runs: list[RunResult], tables: dict[str, dict[str, pd.DataFrame]]) -> list[Finding]:
    return list(analyse(runs, TraceTables(by_run=tables)).findings)

CASES = [
    Case("host-bound-decode", host_bound_decode, _tables(idle=_idle(450.0)), _tables(idle=_idle(100.0)), "45.0%"),
    Case("host-bound-decode", host_bound_decode, _tables(idle=_idle(620.0, "host")),
         _tables(idle=_idle(120.0, "host")), "62.0%"),
    Case("communication-not-overlapped", communication_not_overlapped,
         _tables(compute_vs_communication=_compute_vs_communication(25.0)),
         _tables(compute_vs_communication=_compute_vs_communication(2.0)), "25.0%"),
    Case("slowest-rank", slowest_rank, _cluster(130.0), _cluster(103.0), "30.0%"),
    Case("slowest-link", slowest_link, _links(6.0), _links(9.5), "40.0%"),
    # 340 assignments over 8 experts in layer 1 (mean 42.5): expert 0 gets 150 (3.53x) or 43 (1.01x)
    Case("moe-imbalance", moe_imbalance, _run("r", expert_load=_expert_load([150, 30, 30, 30, 30, 30, 30, 10])),
         _run("r", expert_load=_expert_load([43, 42, 42, 43, 42, 43, 42, 43])), "3.53x in prefill layer 1"),
    Case("toggle-inactive", lambda run: toggles_inactive([run]),
         _run("r").replace(plan=_plan(set(), {"graph_mode": "needs grouped_moe on"})),
         _run("r").replace(plan=_plan({"graph_mode"})), "needs grouped_moe on"),
    Case("trace-contradicts-plan", trace_contradicts_plan,
         _run("r", trace=trace_record(
             plan_mismatches=["fused_attention on, but no fused attention ops in attention scopes"],
             mode_check={"mode": "eager", "ok": None, "line": "eager: no replay to look for"})),
         _run("r", trace=trace_record(plan_mismatches=[],
                                      mode_check={"mode": "eager", "ok": None, "line": "eager"})),
         "no fused attention ops"),
    Case("trace-contradicts-plan", trace_contradicts_plan,
         _run("r", trace=trace_record(plan_mismatches=[], mode_check={
             "mode": "inductor", "ok": False,
             "line": "graph mode (inductor) planned, but 2 of 3 profiled decode steps replayed no captured graph "
                     "(they ran eagerly)"})),
         _run("r", trace=trace_record(plan_mismatches=[],
                                      mode_check={"mode": "inductor", "ok": True, "line": "replayed"})), "2 of 3"),
    Case("toggle-slower", _toggles_slower, _blocks_pair(1.25), _blocks_pair(0.8), "0.80x"),
    # 785.18 µs of AI_CPU among 50408.3 µs of non-HCCL task time (the CSV's sums): 1.6%; longest task 197.54 µs
    Case("aicpu-fallback", aicpu_fallback, _tables(ascend_task_types=_real_task_types(True)),
         _tables(ascend_task_types=_real_task_types(False)), "1.6% of device compute time, the longest 197.5 µs"),
    # by share alone: 500 of 2000 µs of compute (25%) with 5 µs tasks, against 100 of 1600 µs (6.2%), 1 µs tasks
    Case("aicpu-fallback", aicpu_fallback, _tables(ascend_task_types=_task_types(5.0)),
         _tables(ascend_task_types=_task_types(1.0)), "25.0% of device compute time"),
    Case("first-call-compile", first_call_compile,
         _run("r", summary={"first_ttft_ms": 400.0, "ttft_ms_median": 40.0}),
         _run("r", summary={"first_ttft_ms": 60.0, "ttft_ms_median": 40.0}), "10.0x the timed median TTFT"),
    # graph compile 2 s on a 10 ms step: the first step took 2010 ms (201x); 5 ms of compile: 15 ms (1.5x)
    Case("first-call-compile", first_call_compile,
         _run("r", summary={"compile_s": 2.0, "tpot_ms_median": 10.0}),
         _run("r", summary={"compile_s": 0.005, "tpot_ms_median": 10.0}), "201.0x the timed median step"),
    Case("tail-spike", tail_spike, _steps_run(45.0), _steps_run(25.0),
         "timed iteration 2, decode step 3 took 45.00 ms, 4.5x the median decode step 10.00 ms"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires_on_its_positive_and_stays_silent_on_its_negative(case):
    fired = case.check(case.positive)
    assert [f.rule for f in fired] == [case.rule], fired
    assert case.evidence in fired[0].message and fired[0].where
    assert fired[0].severity == RULES[case.rule].severity
    assert case.check(case.negative) == []


def test_every_rule_has_a_case_and_a_documented_section():
    assert {c.rule for c in CASES} == set(RULES)
    text = (DOCS / "advisor.md").read_text()
    documented = set(re.findall(r"^### `([a-z-]+)`", text, flags=re.M))
    assert documented == set(RULES)
    assert "advisor.md" in (DOCS / "README.md").read_text()


def test_a_toggle_added_to_a_plan_and_measured_slower_is_found():
    base, rope = _blocks_pair(0.8, "fused_rope")
    both = _run("both", {"fused_rope", "graph_mode"}).replace(samples={
        "ttft_ms": rope.samples["ttft_ms"], "tpot_ms": [t * 1.3 for t in rope.samples["tpot_ms"]]},
        blocks=rope.blocks)
    found = [f for f in _toggles_slower([base, rope, both]) if f.message.startswith("graph_mode added to")]
    assert len(found) == 1 and "TPOT speed-up 0.77x" in found[0].message


def test_folder_findings_order_by_severity_and_fold_past_the_cap():
    runs = [_run(f"r{i}", trace=trace_record(plan_mismatches=[f"grouped_moe on, but no grouped-matmul kernels ({i})"]))
            for i in range(5)]
    runs.append(_run("x").replace(plan=_plan(set(), {"chunk_gdr": "not used on Ascend 950"})))
    tables = {"r0": {"idle": _idle(500.0)}}
    findings = _folder_findings(runs, tables)
    assert [f.rule for f in findings] == ["trace-contradicts-plan"] * 4 + ["toggle-inactive", "host-bound-decode"]
    assert findings[3].message == "and 2 more like these"
    assert ordered([]) == []


def test_aicpu_ops_are_named_with_the_plan_that_brings_them():
    base, rope = _run("base"), _run("rope", {"fused_rope"})
    tables = {"base": {"ascend_task_types": _task_types(0.0).iloc[:2]},
              "rope": {"ascend_task_types": _task_types(5.0)}}
    found = [f for f in _folder_findings([base, rope], tables) if f.rule == "aicpu-fallback"]
    assert len(found) == 1 and "Cast (100 tasks, 500.0 µs, from fused_rope's plan)" in found[0].message
    tables["base"] = {"ascend_task_types": _task_types(5.0)}
    found = [f for f in _folder_findings([base, rope], tables) if f.rule == "aicpu-fallback"]
    assert found and all("already in the all-off plan" in f.message for f in found)
