"""Stability verdicts: the sample criteria, the host criteria on recorded numbers, the /proc and /sys readers,
and a real run with a CPU hog beside it flagged in the CSV, the terminal and the report."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfbench.analysis import stability
from perfbench.analysis.stability import host_reasons, metric_stability, outlier_share, run_stability
from perfbench.measure import host_signals
from perfbench.results import Summary, load_results
from perfbench.run.launcher import PROJECT_DIR
from tests.records_kit import run_result

QUIET = {"host_other_cores": 0.2, "host_spare_cores": 1.0, "host_steal_cores": 0.0, "host_loadavg_1m": 0.3,
         "host_cpus": 1.0, "host_cpu_mhz_min": 2400.0, "host_cpu_mhz_max": 2450.0,
         "host_mem_pressure_avg10": 0.0, "host_mem_available_frac": 0.6}


def test_tight_samples_are_stable_and_a_wide_spread_is_not():
    assert metric_stability("tpot_ms", [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02]).stable
    wide = metric_stability("ttft_ms", [250.0, 4950.0, 900.0, 2600.0, 400.0, 3100.0])
    assert not wide.stable and "CI of the median spans" in wide.reason


def test_outlier_share_by_hand():
    values = [9.0, 10.0, 11.0, 10.0, 9.0, 11.0, 10.0, 60.0, 70.0, 80.0]
    # median 10, deviations 1,0,1,0,1,1,0,50,60,70 -> MAD 1, scaled 1.4826: 50/1.48 > 5, 1/1.48 < 5
    assert outlier_share(values) == pytest.approx(0.3)
    assert not metric_stability("tpot_ms", values).stable
    assert "30% of samples are outliers" in metric_stability("tpot_ms", values).reason


def test_too_few_samples_cannot_be_called_stable():
    assert "too few for a CI" in metric_stability("ttft_ms", [1.0, 2.0]).reason


def test_a_quiet_machine_gives_no_host_reason():
    assert host_reasons(Summary(**QUIET)) == []
    assert host_reasons(Summary()) == []  # nothing recorded (an old result, or not Linux): no verdict
    # the host-speed probe's spread is recorded, not judged (stability.py says why)
    assert host_reasons(Summary(**QUIET, host_speed_change=0.3)) == []


def test_recorded_contention_makes_every_metric_unstable():
    busy = {**QUIET, "host_other_cores": 1.6}  # 1 spare core: 0.6 beyond it is more than the 0.25 margin
    verdict, per_metric = run_stability(Summary(**busy), {"ttft_ms": [10.0] * 6, "tpot_ms": [2.0] * 6})
    assert not verdict.stable and "other processes kept 1.60 cores busy" in verdict.reason
    assert all(not m.stable for m in per_metric.values())
    verdict, per_metric = run_stability(Summary(**QUIET), {"ttft_ms": [10.0] * 6, "tpot_ms": [2.0] * 6})
    assert verdict.stable and all(m.stable for m in per_metric.values())


def _with_probe(run_id: str, probe_ms: list[float]):
    return run_result(run_id, samples={"ttft_ms": [10.0] * 5, stability.PROBE_SAMPLES: probe_ms})


def test_host_speed_differs_beyond_the_tolerance_only():
    slow = _with_probe("b", [0.42, 0.41, 0.43])
    assert "0.42 ms in b vs 0.32 ms in a (1.31x" in stability.host_speed_differs(_with_probe("a", [0.32] * 3), slow)
    # medians 0.32 and 0.36: 1.125x, inside 15% either way round
    assert stability.host_speed_differs(_with_probe("a", [0.32] * 3), _with_probe("b", [0.36] * 3)) == ""
    assert stability.host_speed_differs(_with_probe("a", [0.36] * 3), _with_probe("b", [0.32] * 3)) == ""
    assert stability.host_speed_differs(_with_probe("a", []), slow) == ""  # no readings (an accelerator run)
    assert "another speed" in stability.contended(_with_probe("a", [0.32] * 3), slow)
    assert stability.contended(_with_probe("a", [0.32] * 3)) == ""  # one run has nothing to differ from


@pytest.mark.parametrize(("change", "expected"), [
    ({"host_loadavg_1m": 3.5}, "load average of other work 3.50 above the 1 spare CPUs"),
    ({"host_cpu_mhz_min": 1200.0}, "CPU clock varied 1200-2450 MHz"),
    ({"host_mem_pressure_avg10": 25.0}, "tasks stalled on memory 25.0%"),
    ({"host_mem_available_frac": 0.01}, "only 1.0% of memory available"),
    ({"host_steal_cores": 0.5}, "the hypervisor stole 0.50 cores"),
])
def test_each_host_criterion_names_its_reason(change, expected):
    assert any(expected in r for r in host_reasons(Summary(**{**QUIET, **change})))


def test_signals_are_read_from_proc_and_sys(tmp_path):
    proc, sys_cpu = tmp_path / "proc", tmp_path / "sys"
    (proc / "pressure").mkdir(parents=True)
    (proc / "loadavg").write_text("2.50 1.00 0.50 3/400 12345\n")
    (proc / "pressure" / "memory").write_text("some avg10=12.50 avg60=1.00 avg300=0.00 total=1\n"
                                              "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (proc / "meminfo").write_text("MemTotal:       8000 kB\nMemFree: 100 kB\nMemAvailable:   2000 kB\n")
    for cpu, khz in (("cpu0", 2000000), ("cpu1", 3000000)):
        (sys_cpu / cpu / "cpufreq").mkdir(parents=True)
        (sys_cpu / cpu / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    signals = host_signals.read_signals(proc, sys_cpu)
    assert signals == host_signals.HostSignals(2.5, 2500.0, 12.5, 0.25)
    summary = host_signals.signals_summary(signals, signals, run_threads=1, cpus=4)
    # the same reading twice spans no time: the load average cannot speak for the interval
    assert summary["host_loadavg_1m"] is None and summary["host_cpus"] == 3.0  # the run's own thread taken off
    # nothing there: no signal, no verdict
    assert host_signals.read_signals(tmp_path / "none", tmp_path / "none") == host_signals.HostSignals(None, None, None,
                                                                                                  None)


def _tiny_scenario(tmp_path: Path) -> Path:
    doc = {"perfbench": {"device": "cpu", "model": "tiny", "num_layers": 1,
                         "workload": {"batch_sizes": [1], "input_lens": [8], "output_len": 3},
                         "measure": {"warmup": 1, "iterations": 20, "profile": False, "numerics_check": False},
                         "sweep": {"design": "none"}}}
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(doc))
    return path


def _run_tiny(tmp_path: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "perfbench.cli", "run", str(_tiny_scenario(tmp_path)),
                           "--out", str(out)], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = list(csv.DictReader((out / "results.csv").open()))
    return proc, row


# Parallel-safe: whatever else runs beside it only adds to the other processes' cores, so what it asserts (the
# hogs recorded and flagged) holds the more; the hogs slow the test beside them, which is why it shares an xdist
# group with the smoke scenario's timing gate (tests/conftest.py) and never runs beside it.
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux /proc")
def test_a_run_beside_a_cpu_hog_records_the_hogs_cores_and_is_flagged_unstable_everywhere(tmp_path):
    """Only what the hogs change: their CPU time is recorded as other processes' and the run is flagged in the
    CSV, the terminal and the report. What a quiet host records on its own (steal, drift) is not asserted; that
    the run's own process group never counts as "other" is tests/perfbench/measure/test_host_load.py's."""
    # one spinner more than CPUs, each in its own session (outside the run's process group): with one per CPU the
    # scheduler's share for the run left the others at 1.2-1.33 cores on 2 CPUs, at the 1.25 threshold
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range((os.cpu_count() or 1) + 1)]
    try:
        proc, row = _run_tiny(tmp_path, tmp_path / "beside_hog")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    (beside,) = load_results(tmp_path / "beside_hog")
    summary = beside.summary
    assert summary.host_other_cores is not None and summary.host_spare_cores is not None
    assert summary.host_other_cores > summary.host_spare_cores, summary
    assert any("other processes kept" in r for r in host_reasons(summary))
    assert row["stable"] == "False" and "other processes kept" in row["unstable_reason"]
    terminal = proc.stdout + proc.stderr
    assert "UNSTABLE" in terminal and "need a second look" in terminal and "other processes kept" in terminal
    report = (tmp_path / "beside_hog" / "report.html").read_text()
    assert "WARNING" in report and "other processes kept" in report


def kernel_loadavg(start: float, run_queue: list[float]) -> float:
    """The 1-minute load average after len(run_queue) of Linux's 5-second updates, each with that run-queue length
    (kernel/sched/loadavg.c's exponential filter, in floating point)."""
    decay = math.exp(-5 / 60)
    load = start
    for n in run_queue:
        load = load * decay + n * (1 - decay)
    return load


@pytest.mark.parametrize("start,run_queue,expected", [
    (1.0, [3.0] * 12, 3.0),        # a steady queue of 3 over a minute, after a load of 1
    (2.0, [0.0] * 4, 0.0),         # heavy load that ended as the run began (the CI case): nothing during it
    (0.0, [1.0, 3.0] * 3, 2.0),    # an uneven queue: its mean over the interval
])
def test_loadavg_during_undoes_the_kernels_decay(start, run_queue, expected):
    seconds = 5.0 * len(run_queue)
    after = kernel_loadavg(start, run_queue)
    assert host_signals.loadavg_during(start, after, seconds) == pytest.approx(expected, abs=0.05)


def test_loadavg_gives_no_verdict_for_short_intervals_or_missing_readings():
    assert host_signals.loadavg_during(3.0, 3.0, host_signals.LOADAVG_MIN_INTERVAL_S - 1) is None
    assert host_signals.loadavg_during(None, 3.0, 60.0) is None


def test_a_quiet_run_right_after_other_work_has_no_load_reason():
    # the parallel tests left a load average of 3; a 20 s run starts as they end, with only its own thread running
    before = host_signals.HostSignals(3.0, None, None, None, read_at_s=100.0)
    after = host_signals.HostSignals(kernel_loadavg(3.0, [1.0] * 4), None, None, None, read_at_s=120.0)
    summary = host_signals.signals_summary(before, after, run_threads=1, cpus=2)
    assert summary["host_loadavg_1m"] == pytest.approx(0.0, abs=0.05)
    assert after.loadavg_1m - 1 > summary["host_cpus"]   # what the raw reading would have flagged
    assert not any("load average" in r for r in host_reasons(Summary(**{**QUIET, **summary})))
