"""The profiled iteration: one separate, untimed iteration under the profiler, annotated with phase/step and,
outside graph mode, layer/module scopes; its trace parsed into tables, checked against the plan, and put next to
the roofline. It runs in the timed iterations' execution mode, which the record names (`mode`, and `emulation`
for an emulated NPU) and checks against the trace (`mode_check`). A failure here is recorded, never fatal: the
timed numbers stand."""

from __future__ import annotations

import os
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from model.backend import Capabilities
from model.cache import Qwen3_5MoeCache
from model.modeling import Qwen3_5MoeForCausalLM
from perfbench.measure.environment import emulation_label
from perfbench.measure.iteration import Workload, run_iteration
from perfbench.measure.node_launch import is_result_writer
from perfbench.results import RunSpec
from perfbench.results.cells import csv_cells

if TYPE_CHECKING:
    import pandas as pd

    from perfbench.profiling.loading import LoadedTrace


def profile_iteration(model: Qwen3_5MoeForCausalLM, ids: torch.Tensor, seq_lens: torch.Tensor,
                      cache: Qwen3_5MoeCache, workload: Workload, run_dir: Path, spec: RunSpec,
                      caps: Capabilities) -> dict[str, object]:
    """One annotated iteration under the profiler, parsed into tables; a failure here is recorded, not fatal.
    The iteration decodes `spec.profile_decode_steps` tokens where set (a smaller trace), else the workload's."""
    from perfbench.config.execution_mode import execution_mode
    from perfbench.profiling import capture_trace, load_trace
    from perfbench.profiling.across_ranks import cluster_record, per_rank_steps
    from perfbench.profiling.graph_mode import check_mode
    from perfbench.profiling.loading import rank_folder_events
    from perfbench.profiling.plan_check import check_plan, mismatches
    from perfbench.profiling.tables import ALL_OPS, op_counts_per_decode_step, write_tables

    rank = int(os.environ.get("RANK", "0"))
    # every rank runs the profiled iteration (its collectives need all ranks); each keeps its own trace and
    # the result's writer (local rank 0 of node 0) turns its trace into the run's tables, and every rank's on
    # its node into per_rank_steps.csv
    trace_dir = run_dir / "trace" / f"rank{rank}" if "RANK" in os.environ else run_dir / "trace"
    # Inside a compiled decode graph the layer scopes would force a recompile; phases and steps still show.
    layer_scopes = not model.plan.on("graph_mode")
    # The same model object, so the same compiled decode step the timed iterations ran: every graph variant
    # compiles with fullgraph=True, so a recompile past dynamo's limit or a graph break raises (recorded below as
    # the trace's error) instead of running eagerly; `check_mode` confirms the replays from the trace itself.
    mode = execution_mode(model.plan.device, model.plan.on("graph_mode"), model.plan.exe_mode)
    if spec.profile_decode_steps is not None:
        # output_len counts the prefill's token too: n decode steps make n + 1 tokens
        workload = replace(workload, output_len=min(workload.output_len, spec.profile_decode_steps + 1))
    emulation = emulation_label()
    try:
        # the plan's device: an emulated npu keeps tensors on the CPU but profiles through torch_npu.profiler
        with capture_trace(model.plan.device, trace_dir, spec.profile_export_type) as capture:
            with model.scopes.enable(layers=layer_scopes):
                run_iteration(model, ids, seq_lens, cache, workload.output_len)
        multi_rank = torch.distributed.is_available() and torch.distributed.is_initialized()
        if multi_rank:
            wait_for_every_rank(model.device)  # every rank's trace is written before rank 0 reads them all
        if not is_result_writer():
            return {"dir": str(trace_dir.relative_to(run_dir))}
        # the export the run asked for: its .db when it asked for db
        prefer = "db" if spec.profile_export_type == "db" else None
        loaded = load_trace(capture.paths[0], prefer)
        events = loaded.events
        tables = write_tables(events, run_dir / "tables", mode=mode, emulation=emulation)
        task_types = loaded.extra_tables.get("ascend_task_types")
        if task_types is not None:  # the advisor's aicpu-fallback reads it (Ascend traces only)
            tables.append(run_dir / "tables" / "ascend_task_types.csv")
            csv_cells(task_types).to_csv(tables[-1], index=False, float_format="%.3f")
        roofline_error = None
        try:
            tables += roofline_tables(model, events, workload, spec, caps, run_dir / "tables")
        except Exception:  # noqa: BLE001 - the roofline columns are extra; the trace tables stand
            roofline_error = traceback.format_exc(limit=2)
        counts = op_counts_per_decode_step(events)
        total = counts.pop(ALL_OPS, None)
        record: dict[str, object] = {"dir": str(trace_dir.relative_to(run_dir)), "decode_ops_per_step": total,
                                     "op_counts_per_decode_step": counts, "layer_scopes": layer_scopes,
                                     "mode": mode, "mode_check": check_mode(events, mode).to_dict()}
        if emulation:
            record["emulation"] = emulation
        if roofline_error:
            record["roofline_error"] = roofline_error
        record["decode_steps"] = workload.output_len - 1
        if spec.trace_export:
            record.update(export_for_viewers(capture.paths[0], run_dir, prefer, emulation, loaded))
        states = {name: decision.state for name, decision in model.plan.decisions.items()}
        # the plan's device: an emulated npu runs on CPU tensors but records the npu ops
        variants = {"chunk_gdr": model.plan.gdr_variant} if model.plan.gdr_variant else None
        checks = check_plan(events, states, model.plan.device, variants)
        record["plan_check"] = [c.to_dict() for c in checks]
        record["plan_mismatches"] = mismatches(checks)
        if multi_rank:
            steps = per_rank_steps(rank_folder_events(run_dir / "trace", prefer))
            tables.append(run_dir / "tables" / "per_rank_steps.csv")
            csv_cells(steps).to_csv(tables[-1], index=False, float_format="%.3f")
            record["cluster"] = cluster_record(steps)
        record["tables"] = [str(p.relative_to(run_dir)) for p in tables]
        return record
    except Exception:  # noqa: BLE001 - the timed numbers stand even if the trace cannot be taken
        return {"error": traceback.format_exc(limit=3)}


EXPORT_PATH = Path("trace") / "export" / "trace.json.gz"  # beside the raw profiler output, never inside it


def export_for_viewers(source: Path, run_dir: Path, prefer: str | None, emulation: str | None,
                       loaded: LoadedTrace) -> dict[str, str]:
    """The run's normalized chrome trace for Perfetto (docs/trace_analysis.md 3): `{"export": path}`, or
    `{"export_error": why}`; the raw profiler output is read, never changed."""
    from perfbench.profiling.export import export_trace

    try:
        export_trace(source, run_dir / EXPORT_PATH, prefer=prefer, trace=loaded, emulation=emulation)
    except Exception:  # noqa: BLE001 - a viewer's copy is extra; the tables and timings stand
        return {"export_error": traceback.format_exc(limit=2)}
    return {"export": str(EXPORT_PATH)}


def wait_for_every_rank(device: torch.device) -> None:
    """A barrier as an all_reduce of one element on the model's device: dist.barrier() asks torch for the
    machine's accelerator, which the NPU emulator's CPU-backed device does not register."""
    token = torch.zeros(1, device=device)
    torch.distributed.all_reduce(token)
    token.item()  # waits for the collective on an accelerator


def roofline_tables(model: Qwen3_5MoeForCausalLM, events: pd.DataFrame, workload: Workload, spec: RunSpec,
                    caps: Capabilities, out_dir: Path) -> list[Path]:
    """tables/roofline.csv: measured time per (phase, category) next to the roofline of the same work."""
    from model.parallel_config import ParallelConfig
    from perfbench.roofline.measured import peaks_for_run, write_roofline_table

    peaks = peaks_for_run(caps.device, caps.device_name, caps.npu_platform)
    path = write_roofline_table(events, model.config, ParallelConfig.from_dict(spec.parallel), model.plan,
                                [len(p) for p in workload.prompts], workload.output_len, spec.dtype, peaks, out_dir)
    return [path] if path is not None else []
