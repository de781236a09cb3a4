"""The cost model's collective payloads against what the model itself sends (model/ops/comm.record_comm), for
tensor-parallel layouts where every payload is fixed by the shapes (no routing-dependent all_to_all)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.config import load_config
from model.cost import CostToggles, CostWorkload, model_cost
from model.parallel_config import ParallelConfig

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("comm_bytes_worker.py")
PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8]]  # ragged: prefill runs the padded [2, 5] batch


@pytest.mark.slow
def test_tensor_parallel_collective_bytes_match_the_model(tmp_path: Path) -> None:
    parallel = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2,
                "shared_tp_size": 2}
    spec = tmp_path / "spec.json"
    out = tmp_path / "comm.json"
    spec.write_text(json.dumps({"num_layers": 4, "optimizations": "none", "parallel": parallel,
                                "prompts": PROMPTS}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--monitor-interval", "0.5", str(WORKER), "--spec", str(spec), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    recorded = json.loads(out.read_text())

    config = load_config("tiny", 4)
    cost = model_cost(config, ParallelConfig(**parallel), CostWorkload((5, 3), 2, dtype_bytes=4), CostToggles(),
                      "cpu")
    for phase in (cost.prefill, cost.decode):
        expected: dict[str, list[float]] = {}
        for op in phase.ops:
            for kind, payload in op.comm.items():
                entry = expected.setdefault(kind, [0, 0.0])
                entry[0] += 1
                entry[1] += payload
        got = recorded[phase.phase]
        assert set(got) == set(expected), (phase.phase, got, expected)
        for kind, (calls, payload) in expected.items():
            assert got[kind][0] == calls, (phase.phase, kind)
            assert got[kind][1] == pytest.approx(payload), (phase.phase, kind)
