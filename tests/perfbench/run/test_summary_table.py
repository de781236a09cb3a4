"""The end-of-run table: plans by toggle names, medians with CIs, speed-ups, stability, warnings."""

from __future__ import annotations

from perfbench.results import RunPlan, RunResult, RunSpec
from perfbench.run.summary_table import compile_summary, summary_table


def _run(run_id: str, on: bool, ttft: float, tpot: float, stable: bool = True,
         compile_s: float | None = None, warm: float | None = None) -> RunResult:
    plan = RunPlan.from_dict({"chunk_gdr": {"requested": on, "state": "on" if on else "off"}})
    return RunResult(run_id=run_id, status="ok", spec=RunSpec(run_id=run_id, scenario="s"), plan=plan,
                     samples={"ttft_ms": [ttft, ttft * 1.01, ttft * 0.99], "tpot_ms": [tpot] * 3},
                     summary={"compile_s": compile_s, "compile_cache_warm": warm},
                     stability={"stable": stable, "reason": "" if stable else "other processes kept 1.50 cores"})


def test_table_names_plans_by_toggles_and_warns_about_unstable_runs():
    text = summary_table([_run("a", False, 100.0, 10.0), _run("b", True, 50.0, 10.0, stable=False)])
    lines = text.splitlines()
    assert lines[0].split()[0] == "plan"
    base = next(line for line in lines if line.startswith("all off"))
    gdr = next(line for line in lines if line.startswith("chunk_gdr"))
    assert "100.00 [" in base and "yes" in base and "baseline" in base
    assert "2.00x" in gdr and "NO" in gdr and "unstable" in gdr
    assert "WARNING: 1 of 2 combinations cannot be trusted:" in text
    assert "b (chunk_gdr): unstable: other processes kept 1.50 cores" in text


def test_a_plan_timed_at_another_host_speed_than_the_baseline_is_warned_about():
    base, gdr = _run("a", False, 100.0, 10.0), _run("b", True, 50.0, 10.0)
    base.samples["host_probe_ms"], gdr.samples["host_probe_ms"] = [0.32] * 3, [0.33] * 3
    assert "WARNING" not in summary_table([base, gdr])
    gdr.samples["host_probe_ms"] = [0.42] * 3
    text = summary_table([base, gdr])
    assert "WARNING: 1 of 2 combinations cannot be trusted:" in text
    assert ("b (chunk_gdr) against the baseline: the host ran at another speed: its probe took 0.42 ms "
            "for this plan vs 0.32 ms for the baseline (1.31x" in text)
    assert "unstable" in next(line for line in text.splitlines() if line.startswith("chunk_gdr"))


def test_compile_times_are_reported_cold_and_warm_apart():
    runs = [_run("a", False, 1.0, 1.0, compile_s=30.0, warm=0.0), _run("b", True, 1.0, 1.0, compile_s=2.0, warm=1.0),
            _run("c", True, 1.0, 1.0, compile_s=4.0, warm=1.0)]
    assert compile_summary(runs) == ("graph compile: cold cache: median 30.0 s over 1 run; "
                                     "warm cache: median 3.0 s over 2 runs")
    assert compile_summary([_run("a", False, 1.0, 1.0)]) == ""
