"""analyze_trace and `perfbench trace` on every real fixture, plus the CLI's error path."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from perfbench.analysis.expert_load import load_record
from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.profiling import analyze_trace, default_tables_dir, load_trace
from perfbench.profiling.events import ALL_COLUMNS

from .conftest import FIXTURES, NPU_FIXTURES, TORCH_FIXTURES, require
from .synthetic import V3, write_kernel_details

TABLES = {"per_op.csv", "per_category.csv", "per_phase.csv", "per_layer_type.csv",
          "compute_vs_communication.csv", "op_counts_per_decode_step.csv"}


def _fixture_paths() -> list:
    """Every trace-shaped thing under the fixtures: chrome/trace_view files, Ascend output folders, their run
    folders, and the multi-rank run folders."""
    paths = set(TORCH_FIXTURES.rglob("*.json")) | set(NPU_FIXTURES.rglob("trace_view.json"))
    for name in ("kernel_details.csv", "trace_view.json", "step_trace_time.csv", "ascend_pytorch_profiler_*.db"):
        for file in NPU_FIXTURES.rglob(name):
            paths.add(file.parent)
            if file.parent.name == "ASCEND_PROFILER_OUTPUT":
                paths.add(file.parent.parent)
    paths |= {p.parent for p in NPU_FIXTURES.rglob("*_ascend_pt")}
    return [pytest.param(p, id=str(p.relative_to(FIXTURES))) for p in sorted(paths)]


@pytest.mark.parametrize("path", _fixture_paths())
def test_every_fixture_parses(path):
    loaded = load_trace(path)

    assert list(loaded.events.columns) == list(ALL_COLUMNS)
    assert len(loaded.events) > 0 or not loaded.extra_tables["ascend_step_trace_time"].empty
    assert set(loaded.events["side"]) <= {"host", "device"}
    assert (loaded.events["dur_us"] >= 0).all()


def test_cluster_summary_folder_is_not_a_trace():
    cluster = require(NPU_FIXTURES / "msprof_analyze_ut" / "cluster_analysis_output")
    with pytest.raises(UserError, match="no trace in this folder"):
        load_trace(cluster)


@pytest.mark.parametrize("relative", [
    "npu_profiler/msinsight_st_qwen3_0.6b_level2",
    "npu_profiler/msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",
    "torch_profiler/hta_tests/triton_example.json",
    "torch_profiler/hta_tests/rank-34.Jul_15_10_52_41.1074.pt.trace.json",
])
def test_cli_trace_writes_tables(tmp_path, relative):
    path = require(FIXTURES / relative)
    out = tmp_path / "tables"

    result = CliRunner().invoke(main, ["trace", str(path), "--out", str(out)])

    assert result.exit_code == 0, result.output
    assert TABLES <= {p.name for p in out.iterdir()}
    assert f"tables: {out}" in result.output
    assert "by category" in result.output and "compute" in result.output


def test_cli_summary_of_the_npu_run_reports_categories_and_step_trace(tmp_path):
    path = require(NPU_FIXTURES / "msinsight_st_qwen3_0.6b_level2")
    result = CliRunner().invoke(main, ["trace", str(path), "--out", str(tmp_path)])

    assert "Level2, ranks 0, 1" in result.output
    assert "communication" in result.output and "attention" in result.output
    assert "note: rank 1: no kernel_details.csv or trace_view.json" in result.output
    step_trace = pd.read_csv(tmp_path / "ascend_step_trace_time.csv")
    assert sorted(step_trace["rank"]) == [0, 1]


def test_cli_non_trace_path_exits_2_with_one_line(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a trace")

    result = CliRunner().invoke(main, ["trace", str(path)])

    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "not a trace" in lines[0]


def test_default_output_next_to_the_input_and_missing_columns_line(tmp_path):
    run = tmp_path / "rank_0_ascend_pt"
    write_kernel_details(run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V3, level0=True)

    summary = analyze_trace(run, None)

    assert default_tables_dir(run) == run / "perfbench-tables"
    assert TABLES <= {p.name for p in (run / "perfbench-tables").iterdir()}
    assert "missing columns: Stream ID (rank 0)" in summary
    trace_file = TORCH_FIXTURES / "hta_tests" / "triton_example.json"
    if trace_file.exists():
        copy = shutil.copy(trace_file, tmp_path / "t.json")
        analyze_trace(copy, None)
        assert (tmp_path / "t.json-tables" / "per_op.csv").is_file()


def test_cli_trace_of_a_run_folder_prints_the_runs_expert_load(tmp_path):
    run = tmp_path / "runs" / "r1"
    trace = run / "trace" / "rank0" / "trace.json.gz"
    trace.parent.mkdir(parents=True)
    shutil.copy(require(FIXTURES / "cpu_traces" / "ep2_all_off.json.gz"), trace)
    load = load_record({"prefill": {0: [1, 0, 3, 2]}}, num_experts=4, top_k=2, ep_size=2, counted="one iteration")
    (run / "result.json").write_text(json.dumps({"run_id": "r1", "expert_load": load}))

    result = CliRunner().invoke(main, ["trace", str(trace), "--out", str(tmp_path / "tables")])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("MoE expert load (one iteration; 4 experts, top-2, EP size 2)")
    assert lines[start + 1] == ("  prefill layer   0: 6 assignments, max/mean per expert 3/1.5 = 2.00, hottest "
                                "expert 2; per EP rank 1, 5")
    plain = CliRunner().invoke(main, ["trace", str(require(FIXTURES / "cpu_traces" / "all_off.json.gz")),
                                      "--out", str(tmp_path / "plain")])
    assert plain.exit_code == 0 and "MoE expert load" not in plain.output
