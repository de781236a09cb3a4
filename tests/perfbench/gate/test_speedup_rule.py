"""The gate's `speedup` rule: each plan's paired speed-up over its baseline, current folder against baseline
folder. Host speed cancels inside each folder's pairs, so a whole folder timed 1.5x slower passes, and a plan that
lost its gain fails (synthetic block-timed folders; nothing is timed)."""

from __future__ import annotations

import numpy as np

from perfbench.gate.engine import evaluate
from perfbench.gate.rules import GateRules, SpeedupRule
from tests.perfbench.gate.test_gate import in_memory, make_run

RULES = GateRules((SpeedupRule(metric="ttft_ms"), SpeedupRule(metric="tpot_ms")), "test rules")


def _folder(plan_factor: float, host: float = 1.0, noise: float = 0.01, seed: int = 0):
    """An all-off run and a chunk_gdr run timed in 20 interleaved blocks (4 epochs of 5) of one process; every
    block's host speed is shared by both runs, the plan takes `plan_factor` of the baseline's time."""
    rng = np.random.default_rng(seed)
    drift = host * rng.uniform(0.7, 1.4, 20)  # the host's speed from block to block
    blocks = {"group": "g", "process": f"p{seed}", "index": list(range(20)), "epoch": [i // 5 for i in range(20)],
              "runs": 2, "blocks": 20}
    base_ttft = list(100.0 * drift)
    plan_ttft = [v * plan_factor * float(np.exp(rng.normal(0, noise))) for v in base_ttft]
    base = make_run("base", ttft=base_ttft, tpot=[v / 10 for v in base_ttft], on=())
    plan = make_run("gdr", ttft=plan_ttft, tpot=[v / 10 for v in plan_ttft], on=("chunk_gdr",))
    for run in (base, plan):
        run.blocks = blocks
    return in_memory([base, plan])


def _statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks if c.kind == "speedup"}


def test_a_folder_timed_on_a_slower_host_keeps_its_speedups():
    report = evaluate(_folder(0.5), _folder(0.5, host=1.5, seed=1), RULES)
    assert _statuses(report) == {"ttft_ms speed-up": "PASS", "tpot_ms speed-up": "PASS"}
    assert report.exit_code == 0


def test_a_plan_that_lost_its_gain_fails():
    # 2.0x before, 1.43x now: the speed-up fell 1.4x, far beyond 10% and the epochs' spread
    report = evaluate(_folder(0.5), _folder(0.7, seed=1), RULES)
    assert _statuses(report) == {"ttft_ms speed-up": "FAIL", "tpot_ms speed-up": "FAIL"}
    line = next(c.line() for c in report.checks if c.status == "FAIL")
    assert "fell 1.40" in line and "(gdr)" in line, line


def test_a_fall_within_noise_is_inconclusive_not_a_failure():
    # a 12% fall measured with 40% pair noise over 4 epochs: beyond the threshold, not beyond the noise
    report = evaluate(_folder(0.5, noise=0.4, seed=2), _folder(0.56, noise=0.4, seed=3), RULES)
    assert "FAIL" not in _statuses(report).values()
