"""Multi-node runs: the `perfbench.cluster` section, torchrun's node arguments, and two nodes emulated on loopback
(two torchruns of one process each meeting at a c10d rendezvous on 127.0.0.1, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model import Qwen3_5MoeForCausalLM
from perfbench.config.scenario import load_scenario
from perfbench.errors import UserError
from perfbench.measure.node_launch import NodeLaunch, is_result_writer, launch_for
from perfbench.results import load_results
from perfbench.run.launcher import PROJECT_DIR, free_port
from tests.model.test_parallel import PROMPTS, WORKER, layout

TP2 = layout(2, 2, 2, 2, 2, 2)
LAYERS = 2
NEW_TOKENS = 3


def two_rank_scenario(tmp_path: Path) -> Path:
    doc = {"parallel_config": TP2,
           "perfbench": {"device": "cpu", "model": "tiny", "num_layers": 1,
                         # all off: no inductor-compiled CPU kernels, so a rank spends its time on the launch
                         "toggles": dict.fromkeys(["fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr",
                                                   "merged_projections", "grouped_moe"], False),
                         "workload": {"batch_sizes": [1], "input_lens": [8], "output_len": 2},
                         "measure": {"warmup": 0, "iterations": 1, "profile": False, "timeout_s": 300}}}
    path = tmp_path / "two_ranks.yaml"
    path.write_text(json.dumps(doc))
    return path


# ---- the section and the node arguments --------------------------------------------------------------------
def test_cluster_section_defaults_to_one_node_and_derives_ranks_per_node(tmp_path):
    path = str(two_rank_scenario(tmp_path))
    sc = load_scenario(path)
    assert launch_for(sc.perfbench.cluster, 2) == NodeLaunch(1, 2, 0, None)
    sc = load_scenario(path, ["perfbench.cluster.nnodes=2", "perfbench.cluster.rdzv_endpoint=10.1.2.3:29400"])
    assert launch_for(sc.perfbench.cluster, 2) == NodeLaunch(2, 1, 0, "10.1.2.3:29400")


@pytest.mark.parametrize(("overrides", "message"), [
    (["perfbench.cluster.nnodes=3"], "perfbench.cluster.nnodes: 3 does not divide parallel_config.world_size 2"),
    (["perfbench.cluster.nnodes=2", "perfbench.cluster.nproc_per_node=2"],
     "perfbench.cluster.nproc_per_node: nnodes 2 x nproc_per_node 2 must equal parallel_config.world_size 2"),
    (["perfbench.cluster.nnodes=2", "perfbench.cluster.node_rank=2"],
     "perfbench.cluster.node_rank: must be below nnodes (2), got 2"),
    (["perfbench.cluster.rdzv_endpoint=node0"], "perfbench.cluster.rdzv_endpoint: must be HOST:PORT"),
    (["perfbench.cluster.nnodes=0"], "perfbench.cluster.nnodes: must be a positive integer, got 0"),
])
def test_bad_cluster_settings_name_the_key(tmp_path, overrides, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(str(two_rank_scenario(tmp_path)), overrides)


def test_multi_node_without_endpoint_needs_one_unless_ray_picks_it(tmp_path):
    sc = load_scenario(str(two_rank_scenario(tmp_path)), ["perfbench.cluster.nnodes=2"])
    with pytest.raises(UserError, match="perfbench.cluster.rdzv_endpoint: nnodes 2 needs"):
        launch_for(sc.perfbench.cluster, 2)
    assert launch_for(sc.perfbench.cluster, 2, need_endpoint=False).rdzv_endpoint is None


def test_torchrun_node_arguments():
    single = NodeLaunch(1, 2).torchrun_args("run1", 29999)
    assert single == ["--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                      "--master-port", "29999"]
    args = " ".join(NodeLaunch(2, 8, 1, "10.0.0.1:29400").torchrun_args("run1", 0))
    for part in ("--nnodes 2", "--nproc-per-node 8", "--node-rank 1", "--rdzv-backend c10d",
                 "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-id=run1", "--rdzv-conf is_host=0"):
        assert part in args
    assert "is_host=1" in " ".join(NodeLaunch(2, 8, 0, "10.0.0.1:29400").torchrun_args("run1", 0))


@pytest.mark.parametrize(("env", "writes"), [({}, True), ({"LOCAL_RANK": "0"}, True), ({"LOCAL_RANK": "1"}, False),
                                             ({"LOCAL_RANK": "0", "PERFBENCH_NODE_RANK": "1"}, False)])
def test_result_writer_is_local_rank_zero_of_node_zero(monkeypatch, env, writes):
    for name in ("LOCAL_RANK", "PERFBENCH_NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_result_writer() is writes


# ---- two nodes on loopback ---------------------------------------------------------------------------------
def start_node(launch: NodeLaunch, cases: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(PROJECT_DIR.absolute()),
           "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", *launch.torchrun_args("parity", 0), "--max-restarts", "0",
           str(WORKER), "--cases", str(cases), "--out", str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_nodes_on_loopback_match_world_size_1(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "cases": [
        {"name": "tp2", "model": "tiny", "num_layers": LAYERS, "parallel": TP2}]}))
    launch = NodeLaunch(nnodes=2, nproc_per_node=1, rdzv_endpoint=f"127.0.0.1:{free_port()}")
    nodes = [start_node(launch.with_rank(rank), cases, tmp_path) for rank in (1, 0)]  # node 1 first: order is free
    logs = [node.communicate(timeout=300)[0] for node in nodes]
    assert all(node.returncode == 0 for node in nodes), "\n".join(log[-3000:] for log in logs)
    ref = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=LAYERS, dummy_weights=True, seed=0).generate(
        PROMPTS, max_new_tokens=NEW_TOKENS)
    for rank in (0, 1):
        got = torch.load(tmp_path / "tp2" / f"rank{rank}.pt")
        assert got["tokens"] == ref.tokens, f"rank {rank}: greedy tokens differ from world_size 1"
        err = (got["logits"] - ref.logits).abs().max().item()
        assert err <= 1e-4, f"rank {rank}: max abs logit diff {err:.3g} vs world_size 1"


@pytest.mark.slow
def test_plain_multi_node_launch_node_zero_writes_the_results(tmp_path):
    path = two_rank_scenario(tmp_path)
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(PROJECT_DIR.absolute()),
           "GLOO_SOCKET_IFNAME": "lo"}
    outs = [tmp_path / "node0", tmp_path / "node1"]  # separate folders: nodes without a shared filesystem
    nodes = [subprocess.Popen([sys.executable, "-m", "perfbench.cli", "run", str(path), "--out", str(outs[rank]),
                               "--no-report", "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    logs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(log[-3000:] for log in logs)
    (result,) = load_results(outs[0])
    assert result.status == "ok" and result.numerics.tokens_match is True
    recorded = result.env.env
    assert recorded["WORLD_SIZE"] == "2" and recorded["GROUP_WORLD_SIZE"] == "2"
    assert recorded["PERFBENCH_NODE_RANK"] == "0" and recorded["GLOO_SOCKET_IFNAME"] == "lo"
    assert recorded["MASTER_ADDR"] and result.env.executor == "local"
    assert not (outs[1] / "results.jsonl").exists() and not (outs[1] / "runs" / result.run_id / "result.json").exists()
    share = json.loads((outs[1] / "runs" / result.run_id / "node1.json").read_text())
    assert share["returncode"] == 0 and not share["timed_out"]
