"""Capacity across batch sizes on synthetic result folders: tokens/s per device and per user, the Pareto
frontier, the largest batch meeting the scenario's targets with its CI, and the report section."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.capacity import Targets, capacity_points, plan_capacities
from perfbench.config.scenario import load_scenario
from perfbench.report.build import build_report
from perfbench.results import RunPlan, RunResult, RunSpec, atomic_write_json, write_results
from tests.records_kit import run_result

BATCHES = (1, 2, 4, 8, 16)


def _run(batch: int, on: set[str], tpot_ms: float, ttft_ms: float, step_tail_ms: float,
         rng: np.random.Generator) -> RunResult:
    """20 timed iterations: TPOT and TTFT with 0.5% noise; 8 decode steps each, the last step of every
    iteration `step_tail_ms` (so the decode-step p99 is close to it)."""
    toggles = {t: t in on for t in TOGGLE_NAMES}
    spec = RunSpec(run_id=f"b{batch}-{'+'.join(sorted(on)) or 'off'}", scenario="s", batch_size=batch,
                   input_len=64, output_len=9, toggles=toggles)
    plan = RunPlan.from_dict({t: {"requested": toggles[t], "state": "on" if toggles[t] else "off", "reason": "",
                                  "impl": ""} for t in TOGGLE_NAMES})
    tpot = [tpot_ms * (1 + 0.005 * rng.standard_normal()) for _ in range(20)]
    steps = [s for t in tpot for s in [t] * 7 + [step_tail_ms]]
    ttft = [ttft_ms * (1 + 0.005 * rng.standard_normal()) for _ in range(20)]
    return run_result(spec.run_id, spec=spec, plan=plan,
                      samples={"tpot_ms": tpot, "ttft_ms": ttft, "tpot_steps_ms": steps},
                      summary={"tpot_ms_median": float(np.median(tpot)), "ttft_ms_median": float(np.median(ttft))})


def _runs() -> list[RunResult]:
    """Two plans. all off: TPOT 10 ms + 1 ms per sequence; graph_mode: 6 ms + 1.6 ms per sequence (cheaper
    steps, dearer per sequence). TTFT 30 ms per sequence either way; the tail step 2x TPOT."""
    rng = np.random.default_rng(4)
    runs = []
    for b in BATCHES:
        for on, base, per in ((set(), 10.0, 1.0), ({"graph_mode"}, 6.0, 1.6)):
            tpot = base + per * b
            runs.append(_run(b, on, tpot, 30.0 * b, 2 * tpot, rng))
    return runs


def test_tokens_per_second_and_the_pareto_frontier() -> None:
    points = {(p.plan, p.batch_size): p for p in capacity_points(_runs())}
    # graph_mode at batch 8: TPOT 6 + 12.8 = 18.8 ms -> 53.2 tok/s per user, 425.5 per device
    p = points[("graph_mode", 8)]
    assert p.tok_s_user == pytest.approx(1000 / 18.8, rel=0.01)
    assert p.tok_s_device == pytest.approx(8000 / 18.8, rel=0.01)
    assert p.tok_s_device_ci[0] < p.tok_s_device < p.tok_s_device_ci[1]
    # TPOT by batch 1 2 4 8 16, off: 11 12 14 18 26; graph: 7.6 9.2 12.4 18.8 31.6. (per user, per device):
    # graph b1 (131.6, 131.6), b2 (108.7, 217.4), b4 (80.6, 322.6) are dominated by nothing; off b8 (55.6, 444.4)
    # and b16 (38.5, 615.4) neither; every other point has a point of the same batch faster in both.
    on_front = {key for key, point in points.items() if point.pareto}
    assert on_front == {("graph_mode", 1), ("graph_mode", 2), ("graph_mode", 4), ("(all off)", 8), ("(all off)", 16)}


def test_largest_batch_meeting_the_targets_with_its_ci() -> None:
    points = capacity_points(_runs())
    # TTFT p90 <= 300 ms: batch <= 10 (30 ms a sequence); decode-step p99 <= 40 ms: the tail step 2 x TPOT,
    # so TPOT <= 20: off up to batch 8 (18 -> 36 ms), graph up to 8 (18.8 -> 37.6 ms); batch 16 fails both
    caps = {c.plan: c for c in plan_capacities(points, Targets(ttft_p90_ms=300.0, decode_step_p99_ms=40.0))}
    assert caps["(all off)"].largest == 8 and caps["graph_mode"].largest == 8
    assert caps["graph_mode"].largest_surely == 8 and caps["graph_mode"].largest_maybe == 8
    # a target between batch 4 and 8's tails (graph: 24.8 and 37.6 ms): 4
    tight = {c.plan: c for c in plan_capacities(points, Targets(decode_step_p99_ms=30.0))}
    assert tight["graph_mode"].largest == 4 and tight["(all off)"].largest == 4  # off: 28 and 36 ms
    none = plan_capacities(points, Targets(ttft_p90_ms=10.0))
    assert all(c.largest is None and c.text.startswith("no measured batch") for c in none)


def test_report_shows_pareto_and_capacity_from_the_scenario_targets(tmp_path: Path) -> None:
    folder = tmp_path / "cap"
    write_results(folder, _runs())
    scenario = load_scenario("ci_smoke", ["perfbench.targets.ttft_p90_ms=300",
                                          "perfbench.targets.decode_step_p99_ms=40"])
    atomic_write_json(folder / "scenario.json", scenario.as_dict())
    build_report(folder)
    capacity = (folder / "report" / "capacity.csv").read_text()
    assert "graph_mode" in capacity and (folder / "report" / "pareto.csv").is_file()
    rows = [line.split(",") for line in capacity.splitlines()]
    assert rows[0][:5] == ["shape", "plan", "largest", "largest_surely", "largest_maybe"]
    assert {row[1]: row[2] for row in rows[1:]} == {"(all off)": "8", "graph_mode": "8"}
    # the cold-start section sits beside it: one row per run, and the graph_mode toggle's break-even pairs
    assert len((folder / "report" / "cold_start.csv").read_text().splitlines()) == 1 + len(BATCHES) * 2


def test_emulated_runs_are_labelled_in_the_cold_start_and_capacity_sections(tmp_path: Path) -> None:
    from perfbench.report.capacity import capacity_section
    from perfbench.report.cold_start import cold_start_section

    runs = [r.replace(env={"emulation": "emulated npu (910b)"}) for r in _runs()]
    for section in (cold_start_section(runs), capacity_section(tmp_path, runs)):
        assert "Emulation: emulated npu (910b)" in section.blocks[0].text
    assert not any(getattr(b, "text", "").startswith("Emulation") for b in cold_start_section(_runs()).blocks)
