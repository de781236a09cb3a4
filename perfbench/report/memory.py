"""Report section: each run's peak memory and what holds it (measure/memory_split.py), against the same shape's
run with the fewest toggles on, so a toggle's memory cost reads off one column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfbench.analysis.attribution import combo_label
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results import RunResult

FIELDS = ("peak_mem_mb", "mem_weights_mb", "mem_state_mb", "mem_rest_mb", "mem_graph_pool_mb")


def memory_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    ok = [r for r in results if r.status == "ok" and r.summary.peak_mem_mb is not None]
    fewest: dict[Any, RunResult] = {}
    for r in ok:
        held = fewest.get(r.shape())
        if held is None or len(r.effective_on()) < len(held.effective_on()):
            fewest[r.shape()] = r
    rows = []
    for r in sorted(ok, key=lambda r: (r.shape(), combo_label(r.effective_on()), r.run_id)):
        base = fewest[r.shape()]
        row: dict[str, Any] = {"run_id": r.run_id, "shape": r.shape().label(),
                               "toggles_on": combo_label(r.effective_on()), "device": r.spec.device}
        row.update(r.summary.model_dump(include=set(FIELDS)))
        peak, base_peak = r.summary.peak_mem_mb, base.summary.peak_mem_mb
        row["peak_vs_fewest_mb"] = None if base is r or base_peak is None or peak is None else peak - base_peak
        rows.append(row)
    return rows


def memory_section(results: Sequence[RunResult]) -> Section:
    section = Section("Memory")
    rows = memory_rows(results)
    if not rows:
        section.blocks.append(Text("No run recorded its peak memory.", note=True))
        return section
    section.blocks.append(Text(
        "Peak memory of the measured model (MB): the device allocator's peak on CUDA and NPU, the process's "
        "peak resident set on CPU. weights (parameters and buffers) and state (KV cache, GDN conv and recurrent "
        "state) are counted from the tensors; rest = peak - weights - state: activations and workspace, and on "
        "CPU the Python process itself (runs timed in one block group share a process, so on CPU they share its "
        "peak). graph pool: CUDA graph private pools (empty where the device does not "
        "report them). peak_vs_fewest: against the same shape's run with the fewest toggles on.", note=True))
    columns = [Column("run_id"), Column("shape"), Column("toggles_on"), Column("device"),
               *(Column(key) for key in FIELDS), Column("peak_vs_fewest_mb")]
    section.blocks.append(Table("memory", columns, rows))
    return section
