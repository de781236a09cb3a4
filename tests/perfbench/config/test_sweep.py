"""Sweep designs -> RunSpecs: combinations, shapes, merging of equal effective plans, stable ids."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from model.backend import Capabilities
from model.toggles import TOGGLE_NAMES
from perfbench.config.scenario import build_scenario
from perfbench.config.sweep import combinations, expand, plan_sweep
from perfbench.errors import UserError

CPU = Capabilities(device="cpu", device_name="test cpu")
ALL_OFF = dict.fromkeys(TOGGLE_NAMES, False)


def scenario(sweep: dict, toggles: dict | None = None, **perfbench):
    pb = {"device": "cpu", "toggles": {**ALL_OFF, **(toggles or {})}, "sweep": sweep, **perfbench}
    return build_scenario({"perfbench": pb}, source="sweep_test.yaml")


def on(toggles: dict[str, bool]) -> set[str]:
    return {t for t, v in toggles.items() if v}


def test_none_is_the_base_request():
    combos = combinations(scenario({"design": "none"}, {"chunk_gdr": True}))
    assert [on(c.toggles) for c in combos] == [{"chunk_gdr"}]


def test_grid_is_the_cartesian_product_over_swept_toggles():
    sc = scenario({"design": "grid", "toggles": ["chunk_gdr", "graph_mode"]}, {"fused_rope": True})
    combos = combinations(sc)
    assert [on(c.toggles) for c in combos] == [
        {"fused_rope"}, {"fused_rope", "graph_mode"}, {"fused_rope", "chunk_gdr"},
        {"fused_rope", "chunk_gdr", "graph_mode"}]


def test_one_at_a_time_starts_all_off_then_each_alone():
    # the base has both swept toggles on: the baseline still switches them off; unswept fused_rope stays on
    combos = combinations(scenario({"design": "one_at_a_time", "toggles": ["chunk_gdr", "graph_mode"]},
                                   {"fused_rope": True, "chunk_gdr": True, "graph_mode": True}))
    assert [c.label for c in combos] == ["baseline", "+chunk_gdr", "+graph_mode"]
    assert [on(c.toggles) for c in combos] == [{"fused_rope"}, {"fused_rope", "chunk_gdr"},
                                               {"fused_rope", "graph_mode"}]


def test_leave_one_out_starts_all_on_then_removes_each():
    swept = ["chunk_gdr", "graph_mode", "grouped_moe"]
    combos = combinations(scenario({"design": "leave_one_out", "toggles": swept}))
    assert [on(c.toggles) for c in combos] == [
        {"chunk_gdr", "graph_mode", "grouped_moe"}, {"graph_mode", "grouped_moe"},
        {"chunk_gdr", "grouped_moe"}, {"chunk_gdr", "graph_mode"}]


def test_cumulative_adds_in_the_given_order():
    order = ["graph_mode", "chunk_gdr", "fused_rope"]
    combos = combinations(scenario({"design": "cumulative", "order": order}))
    assert [on(c.toggles) for c in combos] == [set(), {"graph_mode"}, {"graph_mode", "chunk_gdr"},
                                               {"graph_mode", "chunk_gdr", "fused_rope"}]


def test_explicit_runs_sit_on_top_of_the_base_and_carry_their_env():
    runs = [{}, {"chunk_gdr": True, "env": {"PERFBENCH_FAULT": "raise"}}]
    sc = scenario({"design": "explicit", "runs": runs}, {"fused_rope": True},
                  env={"HCCL_DETERMINISTIC": "true"})
    specs = expand(sc, CPU)
    assert [on(s.toggles) for s in specs] == [{"fused_rope"}, {"fused_rope", "chunk_gdr"}]
    assert specs[0].env == {"HCCL_DETERMINISTIC": "true"}
    assert specs[1].env == {"HCCL_DETERMINISTIC": "true", "PERFBENCH_FAULT": "raise"}


def test_runs_differing_only_in_env_are_kept_apart():
    sc = scenario({"design": "explicit", "runs": [{"env": {"PERFBENCH_FAULT": "raise"}},
                                                  {"env": {"PERFBENCH_FAULT": "exit"}}]})
    specs = expand(sc, CPU)
    assert len(specs) == 2 and specs[0].run_id != specs[1].run_id


def test_shapes_cross_with_combinations():
    sc = scenario({"design": "one_at_a_time", "toggles": ["chunk_gdr"]},
                  workload={"batch_sizes": [1, 2], "input_lens": [16, 32], "output_len": 4})
    specs = expand(sc, CPU)
    assert len(specs) == 8
    assert {(s.batch_size, s.input_len) for s in specs} == {(1, 16), (1, 32), (2, 16), (2, 32)}
    assert all(s.output_len == 4 for s in specs)


def test_equal_effective_plans_run_once_and_say_what_they_stand_for():
    # mm_all_reduce is inactive on CPU (and at world_size 1): its request equals the baseline
    plan = plan_sweep(scenario({"design": "one_at_a_time", "toggles": ["chunk_gdr", "mm_all_reduce"]}), CPU)
    assert [r.label for r in plan.runs] == ["baseline", "+chunk_gdr"]
    assert plan.runs[0].stands_for == ["+mm_all_reduce"] and plan.requested == 3
    assert "also stands for +mm_all_reduce" in plan.describe()


def test_duplicate_shapes_are_merged():
    specs = expand(scenario({"design": "none"}, workload={"batch_sizes": [1, 1]}), CPU)
    assert len(specs) == 1


def test_run_ids_are_stable_readable_and_distinct():
    sc = scenario({"design": "grid", "toggles": ["chunk_gdr", "grouped_moe"]}, workload={"input_lens": [128],
                                                                                          "output_len": 16})
    ids = [s.run_id for s in expand(sc, CPU)]
    assert ids == [s.run_id for s in expand(sc, CPU)]
    assert len(set(ids)) == 4 and all(re.fullmatch(r"b1-i128-o16-[0-9a-f]{8}", i) for i in ids)
    reseeded = scenario({"design": "grid", "toggles": ["chunk_gdr", "graph_mode"]}, seed=1,
                        workload={"input_lens": [128], "output_len": 16})
    assert not set(ids) & {s.run_id for s in expand(reseeded, CPU)}


@pytest.mark.slow
def test_run_ids_are_identical_in_another_process():
    code = ("import json; from model.backend import Capabilities; "
            "from perfbench.config.scenario import load_scenario; from perfbench.config.sweep import expand; "
            "print(json.dumps([s.run_id for s in expand(load_scenario('default_cpu'), "
            "Capabilities(device='cpu', device_name='x'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    from perfbench.config.scenario import load_scenario

    here = [s.run_id for s in expand(load_scenario("default_cpu"), CPU)]
    assert json.loads(out.stdout) == here


def test_spec_carries_the_scenario_settings():
    sc = build_scenario({"model_config": {"exe_mode": "ge_graph", "enable_cache_compile": True},
                         "perfbench": {"device": "cpu", "num_layers": 2, "seed": 7,
                                       "measure": {"warmup": 2, "iterations": 3, "timeout_s": 9,
                                                   "profile": False},
                                       "workload": {"ragged": True, "batch_sizes": [2]}}}, source="s.yaml")
    (spec,) = expand(sc, CPU)
    assert (spec.device, spec.dtype, spec.model) == ("cpu", "float32", "tiny")
    assert (spec.num_layers, spec.seed) == (2, 7)
    assert (spec.warmup, spec.iterations, spec.timeout_s, spec.profile) == (2, 3, 9.0, False)
    assert spec.exe_mode == "ge_graph" and spec.enable_cache_compile and spec.ragged
    assert spec.parallel == {"world_size": 1, "attn_tp_size": 1, "moe_tp_size": 1, "embed_tp_size": 1,
                             "lmhead_tp_size": 1, "shared_tp_size": 1}
    assert spec.toggles["graph_mode"] is True  # exe_mode ge_graph: the recipe runs decode as a graph


def test_absent_device_dry_run_shows_inactive_reasons_without_merging():
    sc = scenario({"design": "one_at_a_time", "toggles": ["chunk_gdr", "graph_mode"]}, device="npu")
    stand_in = Capabilities(device="npu", device_name="(not present here)")
    plan = plan_sweep(sc, stand_in, device_present=False)
    assert len(plan.runs) == 3  # requests stay apart: the device itself decides what merges
    assert plan.runs[1].plan.decisions["chunk_gdr"].reason == "torch_npu not available"
    assert all(r.spec.dtype == "bfloat16" and r.spec.device == "npu" for r in plan.runs)
    assert "torch_npu not available" in plan.describe()


def test_profile_export_type_reaches_the_run_spec_and_db_needs_an_npu():
    npu = Capabilities(device="npu", device_name="(not present here)")
    specs = plan_sweep(scenario({"design": "none"}, device="npu", measure={"profile_export_type": "db"}), npu,
                       device_present=False).specs()
    assert [s.profile_export_type for s in specs] == ["db"]
    assert plan_sweep(scenario({"design": "none"}), CPU).specs()[0].profile_export_type == "text"

    auto_on_cpu = scenario({"design": "none"}, device="auto", measure={"profile_export_type": "db"})
    with pytest.raises(UserError, match=r"profile_export_type: db is the torch_npu profiler's export and the "
                                        r"runs go to cpu here \(device auto\)"):
        plan_sweep(auto_on_cpu, CPU)


def test_the_trace_export_is_on_for_npu_by_default_and_follows_the_setting():
    """A CPU or CUDA Kineto trace opens in Perfetto as it is; torch_npu's trace_view.json needs the normalized
    copy (docs/trace_analysis.md): so the default differs by device, and the setting overrides it."""
    npu = Capabilities(device="npu", device_name="(not present here)")
    on_npu = plan_sweep(scenario({"design": "none"}, device="npu"), npu, device_present=False).specs()
    assert [s.trace_export for s in on_npu] == [True]
    assert plan_sweep(scenario({"design": "none"}), CPU).specs()[0].trace_export is False
    asked = plan_sweep(scenario({"design": "none"}, measure={"trace_export": True}), CPU).specs()[0]
    assert asked.trace_export is True


def test_profile_decode_steps_reaches_the_run_spec():
    spec = plan_sweep(scenario({"design": "none"}, measure={"profile_decode_steps": 4}), CPU).specs()[0]
    assert spec.profile_decode_steps == 4
    assert plan_sweep(scenario({"design": "none"}), CPU).specs()[0].profile_decode_steps is None
