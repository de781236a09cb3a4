"""Gate rules on the tail and the cold start: a folder passes against itself and fails against a copy whose
decode-step tail and compile time are 1.5x, both folders written by perfbench's own writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.tail import decode_step_summary
from perfbench.cli import main
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.records_kit import run_result

RULES = """rules:
  - kind: timing
    metric: decode_step_ms_p99
    test: bootstrap
    threshold: 0.2
  - kind: timing
    metric: compile_s
    threshold: 0.2
  - kind: timing
    metric: first_ttft_ms
    threshold: 0.2
"""


def _run(steps: list[float], compile_s: float, first_ttft_ms: float) -> RunResult:
    on = {"graph_mode", "grouped_moe"}
    spec = RunSpec(run_id="r", scenario="s", output_len=17, toggles={t: t in on for t in TOGGLE_NAMES})
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off", "reason": "",
                                  "impl": ""} for t in TOGGLE_NAMES})
    summary = {"compile_s": compile_s, "first_ttft_ms": first_ttft_ms, "ttft_ms_median": 40.0,
               "tpot_ms_median": float(np.median(steps)), **decode_step_summary(steps)}
    return run_result("r", spec=spec, plan=plan, summary=summary,
                      samples={"tpot_steps_ms": steps, "ttft_ms": [40.0] * 20,
                               "tpot_ms": [float(np.mean(steps[i:i + 16])) for i in range(0, 320, 16)]})


def test_tail_and_compile_rules_pass_a_folder_against_itself_and_fail_a_slower_tail(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    steps = [float(v) for v in 10.0 * rng.lognormal(0.0, 0.05, 320)]  # 20 iterations x 16 decode steps
    base = _run(steps, compile_s=10.0, first_ttft_ms=900.0)
    cut = float(np.percentile(steps, 95))
    tail = [s * 1.5 if s >= cut else s for s in steps]  # the top 5% of steps 1.5x: p99 1.5x, p50 unchanged
    slower = _run(tail, compile_s=15.0, first_ttft_ms=1350.0)
    assert slower.summary.decode_step_ms_p99 / base.summary.decode_step_ms_p99 == pytest.approx(1.5)
    write_results(tmp_path / "base", [base])
    write_results(tmp_path / "same", [base])
    write_results(tmp_path / "slower", [slower])
    rules = tmp_path / "gate.yaml"
    rules.write_text(RULES)

    def gate(current: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(tmp_path / "base"), "--current",
                                           str(tmp_path / current), "--rules", str(rules)])
        return result.exit_code, result.output

    code, output = gate("same")
    assert code == 0, output
    code, output = gate("slower")
    assert code == 1, output
    failed = [line for line in output.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 3, output
    assert any("decode_step_ms_p99" in line and "1.50x" in line for line in failed), output
    assert any("compile_s" in line for line in failed) and any("first_ttft_ms" in line for line in failed)
