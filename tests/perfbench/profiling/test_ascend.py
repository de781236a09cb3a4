from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from perfbench.errors import UserError
from perfbench.profiling.ascend import find_rank_folders, parse_ascend_dir
from perfbench.profiling.tables import compute_vs_communication

from .conftest import NPU_FIXTURES
from .synthetic import V2, V3, npu_trace_view, write_json, write_kernel_details

LEVEL1_OUTPUT = "msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _step_trace_fixtures() -> list:
    """Every NPU fixture folder with both step_trace_time.csv and kernel_details.csv."""
    found = sorted(p.parent for p in NPU_FIXTURES.rglob("step_trace_time.csv")
                   if (p.parent / "kernel_details.csv").is_file())
    return [pytest.param(p, id=str(p.relative_to(NPU_FIXTURES).parts[0])) for p in found]


@pytest.mark.parametrize("output", _step_trace_fixtures())
def test_compute_and_communication_agree_with_step_trace_time(output):
    """Acceptance: per step, our compute (union of non-comm kernels) and communication (sum of comm kernels)
    match the profiler's own step_trace_time.csv Computing and Communication within 0.01%."""
    profile = parse_ascend_dir(output)
    ours = compute_vs_communication(profile.events)
    checked = 0
    for row in profile.step_trace.itertuples(index=False):
        match = ours[(ours["rank"] == row.rank) & (ours["step"] == row.step)]
        assert len(match) == 1, f"no events for rank {row.rank} step {row.step}"
        assert match["compute_us"].iloc[0] == pytest.approx(row.computing_us, rel=1e-4)
        assert match["communication_us"].iloc[0] == pytest.approx(row.communication_us, rel=1e-4, abs=1e-6)
        checked += 1
    assert checked >= 1


def test_level1_fixture_overlap_and_free_match_step_trace_time(npu_fixtures):
    profile = parse_ascend_dir(npu_fixtures / "msinsight_pytorch_text_level1")
    ours = compute_vs_communication(profile.events).iloc[0]
    theirs = profile.step_trace.iloc[0]

    assert ours["overlapped_us"] == pytest.approx(theirs["overlapped_us"], rel=1e-4)
    assert ours["communication_not_overlapped_us"] == pytest.approx(
        theirs["communication_not_overlapped_us"], rel=1e-4)
    assert ours["free_us"] == pytest.approx(theirs["free_us"], rel=1e-4)


def test_level1_fixture_kernels_all_get_context_from_trace_view(npu_fixtures):
    profile = parse_ascend_dir(npu_fixtures / "msinsight_pytorch_text_level1" / "rank0_ascend_pt")

    with open(npu_fixtures / LEVEL1_OUTPUT / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))

    assert profile.level == "Level1" and profile.ranks == [0]
    trace = json.loads((npu_fixtures / LEVEL1_OUTPUT / "trace_view.json").read_text())
    host_ops = [e for e in trace if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                and not e["name"].startswith(("ProfilerStep#", "pb|"))]
    sides = profile.events["side"].value_counts()
    assert sides["device"] == len(rows) and sides["host"] == len(host_ops)
    assert profile.notes == [] and profile.missing_columns == []
    assert set(profile.events["category"]) >= {"communication", "matmul", "other"}
    device = profile.events.query("side == 'device'")
    assert device["category"].eq("communication").sum() == sum(
        r["Accelerator Core"].strip() in ("COMMUNICATION", "HCCL") for r in rows)
    assert profile.events.query("side == 'device'")["step"].notna().all()


def test_two_rank_run_folder_reads_both_ranks(npu_fixtures):
    profile = parse_ascend_dir(npu_fixtures / "msinsight_st_qwen3_0.6b_level2")

    assert profile.ranks == [0, 1] and profile.level == "Level2"
    assert set(profile.events["rank"]) == {0}  # rank 1 ships only step_trace_time.csv and communication.json
    assert sorted(profile.step_trace["rank"]) == [0, 1]
    assert any("rank 1: no kernel_details.csv or trace_view.json" in note for note in profile.notes)
    assert "rank 0: no trace_view.json: kernels have no phase/layer/module context" in profile.notes
    comm = profile.communication
    assert set(comm["kind"]) == {"collective", "p2p"} and set(comm["rank"]) == {0, 1}
    assert (comm["elapse_us"] > 0).all()
    assert set(profile.op_statistic.columns) >= {"op_type", "count", "total_us", "share_pct"}


@pytest.mark.parametrize("where", ["run", "output", "parent"])
def test_accepts_run_folder_output_folder_or_parent(tmp_path, where):
    run = tmp_path / "host_123_ascend_pt"
    write_kernel_details(run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V2)
    info = {"config": {"experimental_config": {"_profiler_level": "Level1"}}}
    write_json(run / "profiler_info_5.json", info)
    path = {"run": run, "output": run / "ASCEND_PROFILER_OUTPUT", "parent": tmp_path}[where]

    profile = parse_ascend_dir(path)

    assert profile.ranks == [5] and profile.level == "Level1"
    assert profile.events["rank"].tolist() == [5, 5, 5]


def test_rank_from_folder_name_and_from_rank_id(tmp_path):
    write_kernel_details(tmp_path / "rank_3_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V2)
    write_kernel_details(tmp_path / "node_b_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V2)
    write_json(tmp_path / "node_b_ascend_pt" / "profiler_info.json", {"rank_id": "1"})

    assert [f.rank for f in find_rank_folders(tmp_path)] == [1, 3]


def test_synthetic_trace_view_gives_phase_layer_module(tmp_path):
    output = tmp_path / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_kernel_details(output / "kernel_details.csv", V2)
    write_json(output / "trace_view.json", npu_trace_view())

    events = parse_ascend_dir(tmp_path).events.set_index("name")

    matmul = events.loc["aclnnMatmul_MatMulV3Common_MatMulV3"]
    assert (matmul["phase"], matmul["layer"], matmul["layer_type"], matmul["module"], matmul["step"]) == (
        "decode", 3, "full_attention", "attn", 2)
    assert events.loc["aclnnRmsNorm_RmsNormAiCore_RmsNorm", "module"] == "norm"
    allreduce = events.loc["hcom_allReduce__586_0_1"]
    assert allreduce["module"] == "moe" and allreduce["category"] == "communication"


def test_level0_folder_notes_na_types(tmp_path):
    compute_only = [
        {"Name": "aclnnMatmul_MatMulV3Common_MatMulV3", "Type": "MatMulV3", "Accelerator Core": "AI_CORE",
         "Start Time(us)": "100.000", "Duration(us)": "5", "Block": "1"},
    ]
    write_kernel_details(tmp_path / "kernel_details.csv", V3, compute_only, level0=True)

    profile = parse_ascend_dir(tmp_path)

    assert profile.level == "Level0"
    assert profile.missing_columns == ["Stream ID (rank 0)"]
    assert any("`Type` is N/A on every row" in n and "kernel names" in n for n in profile.notes)
    assert profile.events["category"].tolist() == ["matmul"]


def test_folder_without_profiler_output_is_a_user_error(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UserError, match="no Ascend profiler output"):
        parse_ascend_dir(tmp_path)


def test_step_trace_columns_are_unit_named(npu_fixtures):
    profile = parse_ascend_dir(npu_fixtures / "msinsight_st_qwen3_0.6b_level2" / "rank_0_ascend_pt")

    assert {"computing_us", "communication_us", "overlapped_us", "free_us", "step"} <= set(profile.step_trace)
    assert isinstance(profile.kernels, pd.DataFrame) and "start_ns" in profile.kernels


def test_trace_view_only_folder_reads_kernels_from_the_trace(tmp_path):
    write_json(tmp_path / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", npu_trace_view())

    profile = parse_ascend_dir(tmp_path)

    assert profile.events.query("side == 'device'").shape[0] == 4
    assert set(profile.events["side"]) == {"device", "host"}  # trace_view.json has the host ops too
    assert any("kernels read from trace_view.json" in n for n in profile.notes)
    norm = profile.events[profile.events["name"].str.contains("RmsNorm")].iloc[0]
    assert (norm["category"], norm["module"], norm["step"]) == ("norm", "norm", 2)


def test_folders_without_distinct_ranks_are_numbered_with_a_note(tmp_path):
    for name in ("a_ascend_pt", "b_ascend_pt"):
        write_kernel_details(tmp_path / name / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V2)
        write_json(tmp_path / name / "profiler_info_0.json", {})

    profile = parse_ascend_dir(tmp_path)

    assert profile.ranks == [0, 1]
    assert "rank 1: b_ascend_pt names no rank (or repeats one); numbered by order" in profile.notes
    assert not any(n.startswith("rank 0: a_ascend_pt") for n in profile.notes)
