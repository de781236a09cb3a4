"""`--executor ray` on a local Ray cluster of two simulated nodes (one CPU each, so two runs at a time): the same
results folder as the local executor, runs in parallel, failing and hanging runs recorded, resume after the
driver is killed. One small cluster for the module; tiny model, one layer, two new tokens."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from perfbench.errors import UserError
from perfbench.measure import worker
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import RunResult, load_results
from perfbench.run.executors.ray_executor import RayExecutor, task_options, visible_devices
from perfbench.run.launcher import PROJECT_DIR
from perfbench.run.runner import run_scenario
from tests.perfbench.run.test_runner import alive_with

OBJECT_STORE = 80 * 2**20  # Ray's floor is 75 MiB; the runs pass only small results


@pytest.fixture(scope="module")
def ray_address():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
    cluster.wait_for_nodes()
    yield cluster.address
    ray.shutdown()
    cluster.shutdown()


def sweep_scenario(tmp_path: Path, runs: list[dict], timeout_s: float = 60, name: str = "ray_sweep") -> Path:
    off = ["fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections", "grouped_moe"]
    doc = {"perfbench": {"name": name, "device": "cpu", "model": "tiny", "num_layers": 1,
                         "toggles": dict.fromkeys(off, False),
                         "workload": {"batch_sizes": [1], "input_lens": [8], "output_len": 2},
                         "measure": {"warmup": 0, "iterations": 1, "profile": False, "timeout_s": timeout_s},
                         "sweep": {"design": "explicit", "runs": runs}}}
    path = tmp_path / f"{name}-{len(runs)}.yaml"
    path.write_text(json.dumps(doc))
    return path


# toggles without inductor-compiled CPU kernels: a run is process start + a tiny model, no compile
OK_RUNS = [{}, {"merged_projections": True}]
FAULT_RUNS = [{"fused_rope": True, "env": {worker.FAULT_ENV: "raise"}},
              {"chunk_gdr": True, "env": {worker.FAULT_ENV: "hang"}}]


def window(result: RunResult) -> tuple[float, float]:
    start = datetime.datetime.fromisoformat(str(result.started_at)).timestamp()
    return start, start + float(result.wall_s or 0)


def shape(value: object) -> object:
    """The key structure of a result (values left out)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return type(value).__name__ if value is not None else None


# ---- pieces ------------------------------------------------------------------------------------------------
def test_each_device_asks_ray_for_its_own_resource():
    assert task_options("cpu", 2) == {"num_cpus": 2}
    assert task_options("cuda", 8) == {"num_cpus": 0, "num_gpus": 8}
    assert task_options("npu", 8) == {"num_cpus": 0, "resources": {"NPU": 8}}


def test_visible_devices_follow_the_ids_ray_assigned():
    assert visible_devices({"NPU": ["2", "3"], "GPU": []}) == {"ASCEND_RT_VISIBLE_DEVICES": "2,3"}
    assert visible_devices({"GPU": ["1"]}) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert visible_devices({}) == {}


def test_missing_ray_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(UserError, match=r'Ray is not installed here; install the extra: pip install -e "\.\[ray\]"'):
        RayExecutor(None, NodeLaunch())


# ---- on a two-node Ray cluster -----------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_sweep_matches_local_runs_in_parallel_and_records_failures(ray_address, tmp_path):
    ray_out, local_out = tmp_path / "ray", tmp_path / "local"
    # the hanging run first: its timeout (long enough for an ok run on a loaded 2-core machine) overlaps the rest
    rc = run_scenario(str(sweep_scenario(tmp_path, FAULT_RUNS[::-1] + OK_RUNS)), str(ray_out), [], dry_run=False,
                      resume=False, report=None, executor="ray", address=ray_address)
    assert rc == 1  # two runs fail on purpose
    got = {r.run_id: r for r in load_results(ray_out)}
    statuses = sorted(r.status for r in got.values())
    assert statuses == ["error", "ok", "ok", "timeout"], {i: (r.status, r.error) for i, r in got.items()}
    failed = next(r for r in got.values() if r.status == "error")
    assert "injected fault" in (failed.error or "")
    assert all(r.env.executor == "ray" for r in got.values())

    # the runs overlap in time: two nodes run two at a time, so a run starts while the hanging one still runs
    # (start times are whole seconds, hence the one-second margins)
    windows = sorted(window(r) for r in got.values())
    assert any(a[0] + 1.0 < b[0] < a[1] - 1.0 for i, a in enumerate(windows) for b in windows[i + 1:]), windows

    # timed separately here too (the ray executor always is), so both records have the same fields
    assert run_scenario(str(sweep_scenario(tmp_path, OK_RUNS)), str(local_out), ["perfbench.sweep.timing=separate"],
                        dry_run=False, resume=False, report=None) == 0
    local = {r.run_id: r for r in load_results(local_out)}
    assert local.keys() <= got.keys(), "the same runs get the same ids under either executor"
    assert json.loads((ray_out / "results.jsonl").read_text().splitlines()[0]).keys() == \
        json.loads((local_out / "results.jsonl").read_text().splitlines()[0]).keys()
    for run_id, mine in local.items():
        theirs = got[run_id]
        assert theirs.status == "ok"
        # the recorded launcher variables differ by nature (Ray sets OMP_NUM_THREADS per task, for example);
        # everything else has the same structure
        ray_record, local_record = theirs.to_dict(), mine.to_dict()
        assert set(ray_record["env"]["env"]) >= set(local_record["env"]["env"]) - {"OMP_NUM_THREADS"}
        ray_record["env"]["env"] = local_record["env"]["env"] = {}
        # the note on fewer threads records the host's load as each run started (Ray runs two at a time)
        ray_record["env"]["threads_note"] = local_record["env"]["threads_note"] = None
        assert shape(ray_record) == shape(local_record)
        # same tokens and reference; the logit difference itself depends on the intra-op thread count (Ray pins
        # a task to its CPUs), so it agrees to rounding, not bit for bit
        rounded = {"max_abs_logit_diff", "max_rel_error", "max_rel_logit_error", "worst_phase", "worst_layer",
                   "worst_branch"}  # two processes round alike only up to their threads' order
        assert {k: v for k, v in theirs.numerics.to_dict().items() if k not in rounded} == \
            {k: v for k, v in mine.numerics.to_dict().items() if k not in rounded}
        assert theirs.numerics.max_abs_logit_diff == pytest.approx(mine.numerics.max_abs_logit_diff, abs=1e-5)
        assert theirs.numerics.max_rel_error == pytest.approx(mine.numerics.max_rel_error, abs=1e-5)
        assert theirs.plan == mine.plan and theirs.spec == mine.spec
    header = [(folder / "results.csv").read_text().splitlines()[0] for folder in (ray_out, local_out)]
    assert header[0] == header[1]


@pytest.mark.slow
def test_killed_ray_driver_resumes_with_the_same_run_ids(ray_address, tmp_path):
    runs = [{}, {"merged_projections": True}, {"grouped_moe": True}]
    path = sweep_scenario(tmp_path, runs, timeout_s=120, name="ray_resume")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute()), "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "perfbench.cli", "run", str(path), "--out", str(out),
                               "--no-report", "--executor", "ray", "--address", ray_address],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jsonl = out / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (jsonl.is_file() and jsonl.read_text().strip()) and driver.poll() is None:
        assert time.monotonic() < deadline, "the first run never finished"
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = {r.run_id: r.to_dict() for r in load_results(out)}
    assert 1 <= len(before) < 3, "killed mid-way"
    while alive_with(str(out)):  # Ray stops a dead driver's tasks, and their workers die with them
        assert time.monotonic() < deadline, "a run outlived its killed driver"
        time.sleep(0.2)

    assert run_scenario(str(path), str(out), [], dry_run=False, resume=True, report=None, executor="ray",
                        address=ray_address) == 0
    ids = [json.loads(line)["run_id"] for line in jsonl.read_text().splitlines() if line.strip()]
    planned = sorted(p.name for p in (out / "runs").iterdir())
    assert sorted(ids) == planned and len(ids) == 3
    after = {r.run_id: r.to_dict() for r in load_results(out)}
    assert all(after[i] == before[i] for i in before), "finished runs were not redone"


@pytest.mark.slow
def test_two_node_run_gets_a_spread_placement_group(ray_address, tmp_path):
    doc = json.loads(sweep_scenario(tmp_path, [{}], timeout_s=240, name="ray_two_nodes").read_text())
    doc["parallel_config"] = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2,
                              "lmhead_tp_size": 2}
    doc["perfbench"]["cluster"] = {"nnodes": 2}  # one rank per simulated node; Ray picks the rendezvous
    path = tmp_path / "two_nodes.yaml"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert run_scenario(str(path), str(out), [], dry_run=False, resume=False, report=None, executor="ray",
                        address=ray_address) == 0
    (result,) = load_results(out)
    assert result.status == "ok" and result.numerics.tokens_match is True
    recorded = result.env.env
    assert recorded["WORLD_SIZE"] == "2" and recorded["GROUP_WORLD_SIZE"] == "2" and recorded["LOCAL_WORLD_SIZE"] == "1"
    assert recorded["PERFBENCH_NODE_RANK"] == "0" and result.env.executor == "ray"
    share = json.loads((out / "runs" / result.run_id / "node1.json").read_text())
    assert share["returncode"] == 0
