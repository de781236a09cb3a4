"""Measured time next to roofline time, per (phase, op category), for a run's profiled iteration.

The measured side is the trace's events table (perfbench/profiling/events.py: device kernel time when the trace
has device rows, else host self time), summed per phase and category; the roofline side is model/cost.py's
count of the same iteration (one prefill, output_len - 1 decode steps) priced on the device's peaks. Both use
the category names of perfbench/profiling/categories.py. Written as tables/roofline.csv beside the other trace
tables, so every run's latency tables and the report's breakdown carry it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from model.config import Qwen3_5MoeTextConfig
from model.cost import CostToggles, CostWorkload, model_cost
from model.optimizations import TOGGLE_NAMES, Plan
from model.parallel_config import ParallelConfig
from perfbench.profiling.events import primary_side
from perfbench.results.cells import csv_cells
from perfbench.roofline.peaks import DevicePeaks, cpu_peaks, load_peaks
from perfbench.roofline.pricing import estimate_phase

ALL = "(all)"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
COLUMNS = ["phase", "category", "side", "steps", "measured_us", "roofline_us", "compute_us", "memory_us",
           "comm_us", "flops", "bytes", "achieved_tflops", "achieved_GBps", "pct_of_roofline", "gap_us"]
# substrings of a CUDA device name -> device_peaks.yaml entry
CUDA_NAMES = {"H200": "h200-sxm", "H100": "h100-sxm", "A100": "a100-sxm-80gb"}
NPU_PLATFORMS = {"A2": "ascend910b", "A3": "ascend910_93"}


def peaks_for_run(device: str, device_name: str, npu_platform: str = "") -> DevicePeaks | None:
    """Peaks of the device a run used: measured for the CPU, documented for a known accelerator, else None."""
    if device == "cpu":
        return cpu_peaks()
    table = load_peaks()
    if device == "cuda":
        for key, name in CUDA_NAMES.items():
            if key in device_name:
                return table[name]
    if device == "npu" and npu_platform in NPU_PLATFORMS:
        return table[NPU_PLATFORMS[npu_platform]]
    return None


def roofline_table(events: pd.DataFrame, config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, plan: Plan,
                   prompt_lens: list[int], output_len: int, dtype: str, peaks: DevicePeaks) -> pd.DataFrame:
    """One row per (phase, category) present in either side, plus a per-phase `(all)` row; times in µs over
    the profiled iteration. pct_of_roofline = roofline / measured; gap_us = measured - roofline."""
    on = {name: plan.on(name) for name in TOGGLE_NAMES}
    cost = model_cost(config, parallel, CostWorkload(tuple(prompt_lens), output_len, DTYPE_BYTES[dtype]),
                      CostToggles.from_states(on), plan.device)
    side = primary_side(events) if len(events) else "host"
    rows = events[events["side"] == side]
    measured = rows.groupby(["phase", "category"])["dur_us"].sum() if len(rows) else pd.Series(dtype=float)
    phase_totals = measured.groupby(level=0).sum() if len(measured) else pd.Series(dtype=float)
    records = []
    for phase_cost in (cost.prefill, cost.decode):
        est = estimate_phase(phase_cost, peaks, dtype)
        steps = phase_cost.steps
        by_cat = {c.category: c for c in est.categories}
        cats = sorted(set(by_cat) | {cat for (ph, cat) in measured.index if ph == phase_cost.phase})
        for cat in [*cats, ALL]:
            if cat == ALL:
                roof, comp, mem, comm = est.roofline_s, est.compute_s, est.memory_s, est.comm_s
                flops, moved = phase_cost.total("flops"), phase_cost.total("bytes")
                meas = float(phase_totals.get(phase_cost.phase, np.nan))
            else:
                c = by_cat.get(cat)
                roof, comp, mem, comm = (c.roofline_s, c.compute_s, c.memory_s, c.comm_s) if c else (0.0,) * 4
                flops, moved = (c.flops, c.bytes) if c else (0.0, 0.0)
                meas = float(measured.get((phase_cost.phase, cat), np.nan))
            records.append(_row(phase_cost.phase, cat, side, steps, meas, roof, comp, mem, comm, flops, moved))
    return pd.DataFrame(records, columns=COLUMNS)


def _row(phase: str, category: str, side: str, steps: int, measured_us: float, roof_s: float, comp_s: float,
         mem_s: float, comm_s: float, flops: float, moved: float) -> list[object]:
    us = 1e6 * steps
    roofline_us = roof_s * us
    total_flops, total_bytes = flops * steps, moved * steps
    seconds = measured_us / 1e6 if measured_us and not np.isnan(measured_us) else np.nan
    return [phase, category, side, steps, measured_us, roofline_us, comp_s * us, mem_s * us, comm_s * us,
            total_flops, total_bytes, total_flops / seconds / 1e12 if seconds else np.nan,
            total_bytes / seconds / 1e9 if seconds else np.nan,
            100.0 * roofline_us / measured_us if seconds else np.nan,
            measured_us - roofline_us if seconds else np.nan]


def write_roofline_table(events: pd.DataFrame, config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, plan: Plan,
                         prompt_lens: list[int], output_len: int, dtype: str, peaks: DevicePeaks | None,
                         out_dir: Path) -> Path | None:
    """tables/roofline.csv, or None when the device's peaks are unknown."""
    if peaks is None:
        return None
    table = roofline_table(events, config, parallel, plan, prompt_lens, output_len, dtype, peaks)
    path = Path(out_dir) / "roofline.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    csv_cells(table).to_csv(path, index=False, float_format="%.6g")
    return path
