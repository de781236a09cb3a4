"""Graph-mode honesty on perfbench's own CPU and CUDA traces: the mode each plan (plans.json) gives, the mode the
trace shows, the replay check (and a planted eager fallback), and the graph-mode tables that say what the graph
hides instead of attributing per layer."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.config.execution_mode import execution_mode, hidden_note, mode_text
from perfbench.profiling import parse_trace_path
from perfbench.profiling.graph_mode import check_mode, detect_mode
from perfbench.profiling.tables import trace_tables

from .conftest import FIXTURES, require

CPU_TRACES = require(FIXTURES / "cpu_traces")
CUDA_TRACES = require(FIXTURES / "cuda_traces")
GRAPH_TRACE = CPU_TRACES / "graph_all_on.json.gz"


def _planned(folder, name: str, device: str) -> str:
    plan = json.loads((folder / "plans.json").read_text())[name]
    return execution_mode(device, plan["graph_mode"] == "on")


@pytest.mark.parametrize(("folder", "device"), [(CPU_TRACES, "cpu"), (CUDA_TRACES, "cuda")], ids=["cpu", "cuda"])
def test_the_mode_a_trace_shows_is_its_plans(folder, device):
    names = json.loads((folder / "plans.json").read_text())
    for name in names:
        events = parse_trace_path(folder / name)
        assert detect_mode(events) == _planned(folder, name, device), name


def test_execution_mode_per_device():
    assert [execution_mode(d, True) for d in ("cpu", "cuda", "npu", "npu:3")] == [
        "inductor", "cuda_graphs", "ge_graph", "ge_graph"]
    assert execution_mode("npu", True, "npugraph_ex") == "npugraph_ex"
    assert {execution_mode(d, False, "npugraph_ex") for d in ("cpu", "cuda", "npu")} == {"eager"}
    assert mode_text("ge_graph", "emulated npu (910b)") == "ge_graph (graph mode; emulated npu (910b), CPU timings)"
    assert mode_text("eager") == "eager"


def test_the_graph_trace_replays_in_every_decode_step_and_a_planted_fallback_is_caught():
    events = parse_trace_path(GRAPH_TRACE)
    check = check_mode(events, "inductor")
    assert (check.ok, check.decode_steps, check.replay_steps) == (True, 3, 3)
    # the compiled decode step gone from step 1: that step ran eagerly
    fallback = events[~((events["step"] == 1) & (events["phase"] == "decode")
                        & events["name"].str.startswith("## Call CompiledFxGraph"))]
    broken = check_mode(fallback, "inductor")
    assert broken.ok is False and "1 of 3 profiled decode steps replayed no captured graph" in broken.line
    # an eager plan's compiled fused kernels are no whole-step replay
    eager = parse_trace_path(CPU_TRACES / "eager_all_on.json.gz")
    assert check_mode(eager, "inductor").ok is False
    assert check_mode(eager, "eager").ok is None


def test_a_cuda_graph_mode_without_graph_launches_is_a_contradiction():
    events = parse_trace_path(CUDA_TRACES / "eager_gdr_on.json.gz")
    assert check_mode(events, "cuda_graphs").ok is False


def test_graph_mode_tables_carry_the_note_and_no_per_layer_attribution():
    events = parse_trace_path(GRAPH_TRACE)
    eager_view = trace_tables(events)
    tables = trace_tables(events, "inductor")
    note = hidden_note("inductor")
    assert note.startswith("graph mode (inductor): per-layer attribution is hidden by the captured graph")
    assert tables["per_layer_type"].to_dict("records") == [{"mode": "inductor", "emulation": "", "note": note}]
    for stem in ("host_bound", "idle"):
        assert set(tables[stem]["layer_type"]) == {"(all)"} and set(tables[stem]["note"]) == {note}
    assert tables["host_bound"]["host_us_per_launch"].isna().all()
    # what stands is unchanged: per-op and per-phase times, and the whole-phase idle figures
    pd.testing.assert_frame_equal(tables["per_op"], eager_view["per_op"])
    whole = eager_view["idle"][eager_view["idle"]["layer_type"] == "(all)"].reset_index(drop=True)
    pd.testing.assert_frame_equal(tables["idle"].drop(columns=["note"]), whole)


def test_cli_trace_says_the_mode_and_writes_the_note(tmp_path):
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["trace", str(GRAPH_TRACE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == "mode: inductor (graph mode); detected from the trace's decode steps"
    assert lines[2].startswith("findings")  # findings come before the details
    assert "graph mode (inductor): per-layer attribution is hidden" in (out / "per_layer_type.csv").read_text()
    assert "idle and launch (idle.csv" in result.output
