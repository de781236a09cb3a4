"""benchmarks/aa_runs.py on synthetic result folders: speed-up overlap, A/A false alarms, planted slowdown."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from perfbench.results import RunResult, RunSpec, write_results
from tests.records_kit import run_result

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "aa_runs.py"


@pytest.fixture(scope="module")
def aa():
    spec = importlib.util.spec_from_file_location("aa_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(run_id: str, toggles: dict[str, bool], ttft: list[float], tpot: list[float]) -> RunResult:
    return run_result(run_id, spec=RunSpec(run_id=run_id, scenario="aa", toggles=toggles),
                      samples={"ttft_ms": ttft, "tpot_ms": tpot},
                      summary={"ttft_ms_median": float(np.median(ttft)), "tpot_ms_median": float(np.median(tpot)),
                               "prefill_tok_s": 128 / np.median(ttft) * 1e3, "decode_tok_s": 1e3 / np.median(tpot)})


def test_slowed_scales_latencies_up_and_throughputs_down(aa):
    r = _run("x", {}, [10.0, 20.0], [2.0, 4.0])
    s = aa.slowed(r, 1.5)
    assert s.samples == {"ttft_ms": [15.0, 30.0], "tpot_ms": [3.0, 6.0]}
    assert s.summary.tpot_ms_median == pytest.approx(4.5)
    assert s.summary.decode_tok_s == pytest.approx(r.summary.decode_tok_s / 1.5)


def test_analysis_of_three_a_a_runs(aa, tmp_path):
    rng = np.random.default_rng(5)
    paths = []
    for k in range(3):
        def noisy(m: float) -> list[float]:
            return [float(v) for v in m * rng.lognormal(0.0, 0.02, 15)]
        runs = [_run("base", {}, noisy(100.0), noisy(10.0)),
                _run("gdr", {"chunk_gdr": True}, noisy(50.0), noisy(10.0))]
        paths.append(tmp_path / f"run-{k + 1}")
        write_results(paths[-1], runs)
    text = aa.analyze(paths)
    gdr_tpot = next(line for line in text.splitlines() if line.lstrip().startswith("gdr ") and "tpot_ms" in line)
    assert "overlap 2/2" in gdr_tpot  # nothing changed between runs
    gdr_ttft = next(line for line in text.splitlines() if line.lstrip().startswith("gdr ") and "ttft_ms" in line)
    assert gdr_ttft.count("2.0") >= 3  # ~2x faster prefill in each run
    section2 = text.split("2. A/A")[1].split("3. detection")[0]
    assert "compare tpot_ms_median   0/6" in section2  # 3 pairs x 2 combinations, none significant
    # one round a side, ratios within a few % of 1: every change of the 4 metrics is inside the 8-10% band
    assert "by the first reason that held: inside the run-to-run band 24" in section2
    section3 = text.split("3. detection")[1]
    assert "compare tpot_ms_median   6/6" in section3  # 15 % beyond the 8 % band, 2 % noise: always seen
    assert "gate    tpot_ms" in section3 and "gate    tpot_ms          6/6" in section3
    assert "not called significant" not in section3
    assert "need two or more" in aa.analyze(paths[:1])


def test_round_ratios_are_split_by_host_speed(aa, tmp_path):
    # two runs of two combinations: "base" at one host speed in both (medians 100 -> 110: 1.10), "gdr" with the
    # probe at 0.32 then 0.42 ms (medians 50 -> 70: 1.40)
    def run(run_id: str, median: float, probe: float) -> RunResult:
        r = _run(run_id, {"chunk_gdr": run_id == "gdr"}, [median] * 5, [median / 10] * 5)
        r.samples["host_probe_ms"] = [probe] * 5
        return r
    write_results(tmp_path / "run-1", [run("base", 100.0, 0.32), run("gdr", 50.0, 0.32)])
    write_results(tmp_path / "run-2", [run("base", 110.0, 0.33), run("gdr", 70.0, 0.42)])
    section4 = aa.analyze([tmp_path / "run-1", tmp_path / "run-2"]).split("4. one round's median")[1]
    assert "ttft_ms  same host speed  n=1    1.10 / 1.10 / 1.10" in section4
    assert "ttft_ms  other host speed n=1    1.40 / 1.40 / 1.40" in section4
