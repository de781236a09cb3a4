"""An emulated graph-mode NPU run (910b, torchair GE under the emulator), measured in-process: its trace records
the mode the timed iterations ran, labelled emulated, the profiled decode steps replay the captured graph, and
its tables say what the graph hides instead of attributing time per layer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from model.config import Qwen3_5MoeTextConfig
from perfbench.cli import main
from perfbench.config.execution_mode import planned_mode
from perfbench.profiling import parse_trace_path
from perfbench.results import RunSpec, atomic_write_json

pytestmark = [pytest.mark.npu_emulated, pytest.mark.slow]  # dynamo captures the decode graph (~10 s of CPU)
LABEL = "emulated npu (910b)"


def test_emulated_graph_mode_run_records_its_mode_and_hides_per_layer_attribution(emulate, tmp_path: Path) -> None:
    emulate("910b")
    from perfbench.measure.run_steps import measure_run  # after the emulator is in place

    # the head dims the NPU ops document (GDN 128/128; attention 256 takes FIA v1 BSH, which GE graphs run)
    config = dataclasses.replace(Qwen3_5MoeTextConfig.tiny(), head_dim=256, linear_key_head_dim=128,
                                 linear_value_head_dim=128)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    toggles = {"fused_rope": True, "fused_attention": True, "fused_rmsnorm": True, "chunk_gdr": True,
               "grouped_moe": True, "merged_projections": True, "graph_mode": True}
    spec = RunSpec(run_id="graph", scenario="emulated", device="npu", dtype="bfloat16",
                   model=str(tmp_path / "config.json"), num_layers=2, batch_size=1, input_len=8, output_len=3,
                   toggles=toggles, warmup=1, iterations=1, numerics_check=False)
    run_dir = tmp_path / "runs" / spec.run_id

    result = measure_run(spec, run_dir)
    atomic_write_json(run_dir / "result.json", result.to_dict())

    assert result.status == "ok", result.error
    assert result.env.emulation == LABEL
    # the timed iterations ran the plan's mode: graph_mode on through torchair GE, compiled in the warm-up
    timed = planned_mode(result)
    assert timed == "ge_graph" and result.plan.decisions["graph_mode"].impl == "torchair ge_graph"
    assert result.summary.compile_s > 0
    trace = result.trace
    assert trace.error is None, trace.error
    assert (trace.mode, trace.emulation) == (timed, LABEL)
    assert trace.mode_check.ok is True
    assert trace.mode_check.replay_steps == trace.mode_check.decode_steps == 2
    # no eager per-layer attribution anywhere: the trace has no layer annotations, and the per-layer tables
    # carry the note (emulation included) instead of rows per layer
    assert parse_trace_path(run_dir / "trace")["layer"].isna().all()
    tables = run_dir / "tables"
    per_layer = pd.read_csv(tables / "per_layer_type.csv")
    assert list(per_layer.columns) == ["mode", "emulation", "note"] and len(per_layer) == 1
    note = per_layer["note"].iloc[0]
    assert note.startswith(f"graph mode (ge_graph, {LABEL}): per-layer attribution is hidden by the captured graph")
    for stem in ("host_bound", "idle"):
        table = pd.read_csv(tables / f"{stem}.csv")
        assert set(table["layer_type"]) == {"(all)"} and set(table["note"]) == {note}, stem
    assert pd.read_csv(tables / "idle.csv")["layer"].isna().all()
    # `perfbench trace` on the run's trace says the mode, emulated, from the run's record
    out = CliRunner().invoke(main, ["trace", str(run_dir / "trace"), "--out", str(tmp_path / "again")])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[1] == (f"mode: ge_graph (graph mode; {LABEL}, CPU timings); recorded by the run, "
                                          "result.json")
