"""Report section "Capacity": tokens/s/device against tokens/s/user across batch sizes per plan (a Pareto table
and plot), and each plan's largest batch that meets the scenario's latency targets (analysis/capacity.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfbench.analysis.capacity import Targets, capacity_points, plan_capacities
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.scenario import TargetsSection
from perfbench.pages.page import Figure, Section, Text
from perfbench.pages.table import Column, Table
from perfbench.report.emulation import emulation_note
from perfbench.report.plots import scatter_frontier
from perfbench.report.runs import read_scenario
from perfbench.results import RunResult


def folder_targets(folder: Path) -> tuple[Targets, str]:
    """The targets of the folder's scenario.json (`perfbench.targets`), and a note when there are none."""
    raw, why = read_scenario(folder)
    section = ((raw or {}).get("perfbench") or {}).get("targets") or {}
    try:
        targets = TargetsSection.model_validate(section)
    except ValueError as err:
        return Targets(), f"perfbench.targets in scenario.json is not valid ({str(err).splitlines()[0]})"
    if targets.ttft_p90_ms is None and targets.decode_step_p99_ms is None:
        return Targets(), why or ("No latency targets: set perfbench.targets.ttft_p90_ms and "
                                  "perfbench.targets.decode_step_p99_ms for the largest batch that meets them.")
    return Targets(ttft_p90_ms=targets.ttft_p90_ms, decode_step_p99_ms=targets.decode_step_p99_ms), ""


def _ci(pair: tuple[float, float] | None, side: int) -> float | None:
    return None if pair is None else pair[side]


def capacity_section(folder: Path, results: Sequence[RunResult]) -> Section:
    section = Section("Capacity")
    if (emulated := emulation_note(results)) is not None:
        section.blocks.append(emulated)
    points = capacity_points(results)
    if len({p.batch_size for p in points}) < 2:
        section.blocks.append(Text("Capacity needs runs of two batch sizes or more (perfbench.workload.batch_sizes);"
                                   " this folder has fewer.", note=True))
        return section
    section.blocks.append(Text(
        "Decode throughput per device (batch x 1000 / TPOT median / world size) against throughput per user "
        f"(1000 / TPOT median), per plan and batch size, with {CI_LEVEL:.0%} CIs from the TPOT median's; pareto: no "
        "run of the "
        "same shape (any plan) has at least both and more of one.", note=True))
    rows = [{**p.model_dump(exclude={"tok_s_device_ci", "tok_s_user_ci", "ttft_p90_ci", "decode_step_p99_ci"}),
             "dev_lo": _ci(p.tok_s_device_ci, 0), "dev_hi": _ci(p.tok_s_device_ci, 1),
             "user_lo": _ci(p.tok_s_user_ci, 0), "user_hi": _ci(p.tok_s_user_ci, 1),
             "ttft_lo": _ci(p.ttft_p90_ci, 0), "ttft_hi": _ci(p.ttft_p90_ci, 1),
             "step_lo": _ci(p.decode_step_p99_ci, 0), "step_hi": _ci(p.decode_step_p99_ci, 1),
             "pareto": "yes" if p.pareto else ""} for p in points]
    section.blocks.append(Table("pareto", [
        Column("shape"), Column("plan"), Column("batch_size"), Column("tok_s_device", ci=("dev_lo", "dev_hi")),
        Column("tok_s_user", ci=("user_lo", "user_hi")), Column("pareto"),
        Column("ttft_p90_ms", ci=("ttft_lo", "ttft_hi")), Column("decode_step_p99_ms", ci=("step_lo", "step_hi")),
        Column("run_id")], rows))
    for shape in sorted({p.shape for p in points}):
        of_shape = [p for p in points if p.shape == shape]
        series = {plan: ([p.tok_s_user for p in of_shape if p.plan == plan],
                         [p.tok_s_device for p in of_shape if p.plan == plan],
                         [f"b{p.batch_size}" for p in of_shape if p.plan == plan])
                  for plan in sorted({p.plan for p in of_shape})}
        front = sorted((p for p in of_shape if p.pareto), key=lambda p: p.tok_s_user)
        section.blocks.append(Figure(scatter_frontier(
            series, ([p.tok_s_user for p in front], [p.tok_s_device for p in front]), "tokens/s per user",
            "tokens/s per device", shape), f"{shape}: throughput per device against per user; dashed: the Pareto "
            "frontier"))
    targets, note = folder_targets(folder)
    if note:
        section.blocks.append(Text(note, note=True))
        return section
    wanted = ", ".join(f"{name} <= {value:g} ms" for name, value in (("TTFT p90", targets.ttft_p90_ms),
                       ("decode-step p99", targets.decode_step_p99_ms)) if value is not None)
    section.blocks.append(Text(
        f"Largest batch per plan meeting {wanted} (the estimates); CI: [largest whose CIs' upper ends meet, largest "
        "whose lower ends meet].", note=True))
    section.blocks.append(Table("capacity", [
        Column("shape"), Column("plan"), Column("largest"), Column("largest_surely"), Column("largest_maybe"),
        Column("text")], [c.model_dump() for c in plan_capacities(points, targets)]))
    return section
