"""Result records: typed spec and plan, schema_version written and checked, unknown keys refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from model.toggles import ToggleDecision
from perfbench.cli import main
from perfbench.results import (
    SCHEMA_VERSION,
    RunPlan,
    RunResult,
    RunSpec,
    WorkloadShape,
    load_results,
    write_results,
)
from tests.records_kit import run_result

REPO = Path(__file__).resolve().parents[2]


def a_result() -> RunResult:
    spec = RunSpec(run_id="r1", scenario="s", batch_size=2, input_len=64, output_len=4,
                   toggles={"chunk_gdr": True, "mm_all_reduce": True}, parallel={"world_size": 2})
    plan = RunPlan({"chunk_gdr": ToggleDecision("chunk_gdr", True, "on", "", "chunked"),
                    "mm_all_reduce": ToggleDecision("mm_all_reduce", True, "inactive", "needs attn_tp_size > 1", ""),
                    "graph_mode": ToggleDecision("graph_mode", False, "off", "not requested", "")})
    return run_result("r1", spec=spec, plan=plan, samples={"tpot_ms": [1.0, float("inf"), 2.0]},
                      summary={"tpot_ms_median": 1.5})


def test_record_round_trips_with_its_schema_version(tmp_path):
    result = a_result()
    write_results(tmp_path, [result])
    raw = json.loads((tmp_path / "results.jsonl").read_text())
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["plan"]["chunk_gdr"] == {"name": "chunk_gdr", "requested": True, "state": "on", "reason": "",
                                        "impl": "chunked"}
    (back,) = load_results(tmp_path)
    assert back == result


def test_views_answer_from_the_typed_spec_and_plan():
    result = a_result()
    assert result.shape() == WorkloadShape(model="tiny", device="cpu", dtype="float32", world_size=2, batch_size=2,
                                           input_len=64, output_len=4, ragged=False)
    assert result.effective_on() == {"chunk_gdr"}
    assert result.spec.requested_on() == {"chunk_gdr", "mm_all_reduce"}
    assert result.selector_field("world_size") == 2
    assert result.selector_field("eff.mm_all_reduce") == "inactive"
    assert result.selector_field("req.mm_all_reduce") is True
    assert result.selector_field("batch_size") == 2
    assert result.finite_samples("tpot_ms") == [1.0, 2.0]
    no_plan = run_result("r2", status="error", spec=result.spec)
    assert no_plan.ran_on() == {"chunk_gdr", "mm_all_reduce"} and result.ran_on() == {"chunk_gdr"}


def test_a_version_1_record_is_migrated(tmp_path):
    raw = a_result().to_dict()
    del raw["schema_version"]
    del raw["spec"]["expected_plan"]
    del raw["stability"], raw["stop_reason"]
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (back,) = load_results(tmp_path)
    # before version 3, tpot_ms held every decode step (output_len 4: 3 steps per iteration, one iteration)
    expected = a_result()
    expected.samples = {"tpot_ms": [float("inf")], "tpot_steps_ms": [1.0, float("inf"), 2.0]}
    assert back == expected


def test_version_2_per_step_tpot_becomes_per_iteration_means(tmp_path):
    raw = a_result().to_dict()
    raw["schema_version"] = 2
    del raw["stability"], raw["stop_reason"]
    raw["samples"] = {"ttft_ms": [10.0, 12.0], "tpot_ms": [1.0, 2.0, 3.0, 5.0, 5.0, 5.0]}
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (back,) = load_results(tmp_path)
    assert back.samples == {"ttft_ms": [10.0, 12.0], "tpot_ms": [2.0, 5.0],
                            "tpot_steps_ms": [1.0, 2.0, 3.0, 5.0, 5.0, 5.0]}


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(schema_version=SCHEMA_VERSION + 1), "newer than this perfbench reads"),
    (lambda r: r.update(schema_version="2"), "schema_version must be a positive integer"),
    (lambda r: r.update(speed=1), "unknown key 'speed'"),
    (lambda r: r["spec"].update(batchsize=1), "spec: unknown key 'batchsize'"),
    (lambda r: r["plan"]["chunk_gdr"].update(why="x"), "plan.chunk_gdr: unknown key 'why'"),
    (lambda r: r["plan"]["chunk_gdr"].update(name="graph_mode"), "differs from its key"),
    (lambda r: r["plan"]["chunk_gdr"].pop("state"), "plan.chunk_gdr: missing key 'state'"),
    (lambda r: r["spec"].pop("scenario"), "spec: missing key 'scenario'"),
])
def test_bad_records_are_refused_naming_the_line_and_key(tmp_path, change, message):
    raw = a_result().to_dict()
    change(raw)
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    with pytest.raises(ValueError, match=message) as err:
        load_results(tmp_path)
    assert "results.jsonl:1" in str(err.value)


def test_a_newer_folder_is_a_one_line_error_in_the_cli(tmp_path):
    raw = a_result().to_dict()
    raw["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 2 and "newer than this perfbench reads" in out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1


def test_the_formerly_shipped_baseline_of_schema_4_loads_as_runs_timed_separately():
    # recorded before interleaved blocks existed (schema 4; tests/fixtures/SOURCES.md): it must keep loading, as
    # timed on their own
    folder = REPO / "tests/fixtures/baseline_schema4"
    raws = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert {r["schema_version"] for r in raws} == {4} and SCHEMA_VERSION == 7
    loaded = load_results(folder)
    assert len(loaded) == len(raws)
    assert all(not r.blocks and r.spec.timing == "separate" and r.spec.block_group == "" for r in loaded)
    assert RunResult.from_dict(loaded[0].to_dict()).to_dict() == loaded[0].to_dict()


def test_plan_mismatch_names_the_toggles_that_differ():
    result = a_result()
    spec = RunSpec(run_id="r1", scenario="s", expected_plan={"chunk_gdr": "on", "mm_all_reduce": "on",
                                                             "graph_mode": "off"})
    message = spec.plan_mismatch(result.plan)
    assert "mm_all_reduce on -> inactive" in message and "chunk_gdr" not in message
    assert spec.plan_mismatch(RunPlan({**result.plan.decisions,
                                       "mm_all_reduce": ToggleDecision("mm_all_reduce", True, "on", "", "")})) == ""
    assert RunSpec(run_id="r1", scenario="s").plan_mismatch(result.plan) == ""  # nothing expected: unchecked


def test_a_version_3_record_loads_without_expert_load_and_a_new_one_fills_the_csv(tmp_path):
    raw = a_result().to_dict()
    raw["schema_version"] = 3
    del raw["expert_load"]
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (back,) = load_results(tmp_path)
    assert not back.expert_load and back.csv_row()["moe_imbalance_prefill"] is None
    result = a_result()
    result.expert_load = {"experts_by_rank": [[0, 4]],
                          "counts": [{"phase": "prefill", "layer": 0, "experts": [3, 1, 0, 0]},
                                     {"phase": "prefill", "layer": 1, "experts": [1, 1, 1, 1]}]}
    write_results(tmp_path, [result])
    (back,) = load_results(tmp_path)
    assert back == result
    row = back.csv_row()
    assert row["moe_imbalance_prefill"] == 3.0 and row["moe_imbalance_decode"] is None  # max 3 / mean 1
