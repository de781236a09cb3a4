"""Tensor and expert parallelism: parity with world_size 1, failure propagation, config validation, sharding.

The parity tests launch torchrun on loopback (gloo, CPU) once per world size; tests/model/parallel_worker.py
runs every layout of that world size in the one process group and writes each rank's tokens and logits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from model import Qwen3_5MoeForCausalLM
from model.backend import detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.layers.linear import Slot
from model.modeling import GenerateOutput
from model.optimizations import resolve_plan
from model.parallel import (
    LocalSizes,
    ParallelLayout,
    ProcessGroups,
    held_elsewhere,
    init_distributed,
    shard_slots,
    token_block,
)
from model.parallel_config import ParallelConfig, ParallelConfigError
from model.weights import init_dummy, load_checkpoint, model_slots
from tests.hf_reference import second_config

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("parallel_worker.py")
PROMPTS = [[5, 17, 300, 999, 12], [7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]]  # ragged; 3 < 4 ranks in decode
NEW_TOKENS = 4
TINY_LAYERS = 4  # three GDN layers and one full-attention layer
SECOND_LAYERS = 3


def layout(world: int, attn: int = 1, moe_tp: int = 1, embed: int = 1, lmhead: int = 1,
           shared: int = 1) -> dict[str, int]:
    return {"world_size": world, "attn_tp_size": attn, "moe_tp_size": moe_tp, "embed_tp_size": embed,
            "lmhead_tp_size": lmhead, "shared_tp_size": shared}


FUSED_EP = {"moe_dispatch_combine": True, "merged_projections": True, "grouped_moe": True}
CASES: dict[int, list[dict]] = {
    2: [
        {"name": "tiny-tp2", "model": "tiny", "parallel": layout(2, 2, 2, 2, 2, 2)},
        {"name": "tiny-tp2-merged", "model": "tiny", "parallel": layout(2, 2, 2, 2, 2, 2),
         "optimizations": {"merged_projections": True, "grouped_moe": True}},
        {"name": "tiny-ep2", "model": "tiny", "parallel": layout(2)},
        {"name": "tiny-ep2-dispatch", "model": "tiny", "parallel": layout(2), "optimizations": FUSED_EP},
        {"name": "tiny-ep2-attn-tp2", "model": "tiny", "parallel": layout(2, 2, 1, 2, 2)},
        {"name": "second-tp2", "model": "second", "parallel": layout(2, 2, 2, 2, 2, 2)},
        {"name": "second-ep2-attn-tp2-dispatch", "model": "second", "parallel": layout(2, 2, 1, 2, 2),
         "optimizations": FUSED_EP},
    ],
    4: [
        {"name": "tiny-tp4", "model": "tiny", "parallel": layout(4, 4, 4, 4, 4, 4)},  # 2 KV heads replicated
        {"name": "tiny-ep4", "model": "tiny", "parallel": layout(4)},
        {"name": "tiny-ep4-dispatch", "model": "tiny", "parallel": layout(4), "optimizations": FUSED_EP},
        {"name": "tiny-ep4-attn-tp2-shared-tp2-dispatch", "model": "tiny", "parallel": layout(4, 2, 1, 4, 2, 2),
         "optimizations": FUSED_EP},
        {"name": "tiny-ep4-attn-tp4", "model": "tiny", "parallel": layout(4, 4, 1, 4, 4)},
        {"name": "second-tp4-attn-tp2", "model": "second", "parallel": layout(4, 2, 4, 4, 4, 4)},
        {"name": "second-ep4-attn-tp2", "model": "second", "parallel": layout(4, 2, 1, 4, 4)},
        {"name": "second-ep4-attn-tp2-dispatch", "model": "second", "parallel": layout(4, 2, 1, 4, 4),
         "optimizations": FUSED_EP},
    ],
}


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("second")
    (folder / "config.json").write_text(json.dumps(second_config().to_hf_dict()))
    return {"tiny": "tiny", "second": str(folder)}


def num_layers(model: str) -> int:
    return TINY_LAYERS if model == "tiny" else SECOND_LAYERS


@pytest.fixture(scope="module")
def references(model_paths) -> dict[str, tuple[GenerateOutput, dict]]:
    """World size 1: the generated tokens and logits, and the MoE routing counts."""
    out = {}
    for name, path in model_paths.items():
        model = Qwen3_5MoeForCausalLM.from_pretrained(path, num_layers=num_layers(name), dummy_weights=True,
                                                      seed=0)
        with model.expert_counts.recording():
            generated = model.generate(PROMPTS, max_new_tokens=NEW_TOKENS)
        out[name] = generated, model.expert_counts.totals()
    return out


def torchrun(world: int, cases: list[dict], out: Path, *extra: str,
             timeout: float = 300) -> subprocess.CompletedProcess:
    spec = out / "cases.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "cases": cases}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
           "--monitor-interval", "0.5", str(WORKER), "--cases", str(spec), "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("world", sorted(CASES))
def test_layouts_match_world_size_1(world, model_paths, references, tmp_path):
    cases = [{**case, "model": model_paths[case["model"]], "num_layers": num_layers(case["model"]),
              "reference": case["model"]} for case in CASES[world]]
    proc = torchrun(world, cases, tmp_path)  # the ranks end with model.parallel.finish: no relaunch for aborts
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    for case in cases:
        ref, ref_counts = references[case["reference"]]
        first = None
        for rank in range(world):
            got = torch.load(tmp_path / case["name"] / f"rank{rank}.pt")
            where = f"{case['name']} rank {rank}"
            assert got["tokens"] == ref.tokens, f"{where}: greedy tokens differ from world_size 1"
            err = (got["logits"] - ref.logits).abs().max().item()
            assert err <= 1e-4, f"{where}: max abs logit diff {err:.3g} vs world_size 1"
            # EP ranks route disjoint token blocks and sum their counts; TP ranks route every token (no sum)
            assert got["expert_counts"] == ref_counts, f"{where}: MoE routing counts differ from world_size 1"
            if first is None:
                first = got
            else:
                assert torch.equal(got["logits"], first["logits"]), f"{where}: logits differ from rank 0"


@pytest.mark.slow
def test_failing_rank_fails_the_run_instead_of_hanging(tmp_path):
    # A rank that raises must end the whole run (the other rank would otherwise wait in a collective until the
    # timeout below, which then fails the test with TimeoutExpired).
    case = {"name": "fail", "model": "tiny", "num_layers": 1, "parallel": layout(2, 2, 2, 2, 2, 2)}
    proc = torchrun(2, [case], tmp_path, "--raise-on-rank", "1", timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # the failing rank's own traceback (finish prints it), not only torchrun's summary
    assert "RuntimeError: injected failure on rank 1" in output and "Traceback" in output, output[-4000:]


# ---- validation (in process) ------------------------------------------------------------------------
def kv_config(heads: int, kv_heads: int) -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(vocab_size=4096, hidden_size=64, num_hidden_layers=2, num_attention_heads=heads,
                                num_key_value_heads=kv_heads, head_dim=16, linear_num_key_heads=12,
                                linear_num_value_heads=12, linear_key_head_dim=8, linear_value_head_dim=8,
                                num_experts=12, num_experts_per_tok=2, moe_intermediate_size=24,
                                shared_expert_intermediate_size=24)


INVALID = {
    "zero-size": (dict(world_size=2, attn_tp_size=0), None, "attn_tp_size: must be a positive integer, got 0"),
    "not-dividing-world": (dict(world_size=4, attn_tp_size=3), None, "attn_tp_size: 3 does not divide world_size 4"),
    "mixed-moe-tp-ep": (dict(world_size=4, moe_tp_size=2), None, "mixed MoE TP and EP"),
    "heads": (dict(world_size=8, attn_tp_size=8), "tiny", "attn_tp_size: 8 does not divide num_attention_heads (4)"),
    "linear-key-heads": (dict(world_size=4, attn_tp_size=4), "second",
                         "attn_tp_size: 4 does not divide linear_num_key_heads (2)"),
    "experts": (dict(world_size=3), "tiny", "moe_ep_size 3 (world_size 3 // moe_tp_size 1) does not divide "
                                            "num_experts (16)"),
    "moe-intermediate": (dict(world_size=3, moe_tp_size=3), "tiny",
                         "moe_tp_size: 3 does not divide moe_intermediate_size (128)"),
    "shared-intermediate": (dict(world_size=4, moe_tp_size=4, shared_tp_size=4), "second-shared-90",
                            "shared_tp_size: 4 does not divide shared_expert_intermediate_size (90)"),
    "vocab": (dict(world_size=16, moe_tp_size=16, embed_tp_size=16), "second",
              "embed_tp_size: 16 does not divide vocab_size (1000)"),
    "lm-head-vocab": (dict(world_size=16, moe_tp_size=16, lmhead_tp_size=16), "second",
                      "lmhead_tp_size: 16 does not divide vocab_size (1000)"),
    "kv-replication": (dict(world_size=6, attn_tp_size=6), "kv-12-4",
                       "attn_tp_size: 6 must be a multiple of num_key_value_heads (4)"),
    "kv-split": (dict(world_size=4, attn_tp_size=4, moe_tp_size=4), "kv-12-6",
                 "attn_tp_size: 4 does not divide num_key_value_heads (6)"),
}


def config_named(name: str | None) -> Qwen3_5MoeTextConfig | None:
    if name is None:
        return None
    if name == "tiny":
        return Qwen3_5MoeTextConfig.tiny()
    if name == "second":
        return second_config()
    if name == "second-shared-90":
        cfg = second_config()
        cfg.shared_expert_intermediate_size = 90
        return cfg
    heads, kv = (int(n) for n in name.split("-")[1:])
    return kv_config(heads, kv)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_parallel_config_gives_one_clear_error(name):
    fields, model, message = INVALID[name]
    with pytest.raises(ParallelConfigError) as info:
        ParallelConfig(**fields).validate(config_named(model))
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("parallel_config")


def test_from_dict_rejects_unknown_keys_and_non_integers():
    with pytest.raises(ParallelConfigError, match=r"parallel_config\.tp: unknown key"):
        ParallelConfig.from_dict({"tp": 2})
    with pytest.raises(ParallelConfigError, match=r"world_size: must be a positive integer, got '2'"):
        ParallelConfig.from_dict({"world_size": "2"})


def test_from_pretrained_outside_torchrun_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match=r"not started by torchrun.*--nproc-per-node 2"):
        Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=1, parallel_config={"world_size": 2})


def test_world_size_must_match_the_running_job(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pytest.raises(ParallelConfigError, match=r"world_size: 2 does not match the 1 processes"):
            init_distributed(ParallelConfig(world_size=2), "cpu")
    finally:
        dist.destroy_process_group()


# ---- layout arithmetic and sharding (in process, no process group) ------------------------------------
def test_group_layout_follows_the_recipe():
    lay = ParallelLayout(ParallelConfig(world_size=8, attn_tp_size=4, embed_tp_size=2), rank=5)
    assert lay.all_groups("attn_tp") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert lay.group_ranks("embed_tp") == (4, 5) and lay.index("embed_tp") == 1
    assert lay.all_groups("moe_ep") == ((0, 1, 2, 3, 4, 5, 6, 7),) and lay.index("moe_ep") == 5
    tp = ParallelLayout(ParallelConfig(world_size=4, moe_tp_size=4), rank=2)
    assert tp.all_groups("moe_ep") == ((0,), (1,), (2,), (3,)) and tp.index("moe_tp") == 2


def test_token_blocks_cover_every_token_once():
    for n in (0, 1, 3, 7, 8, 27):
        for size in (2, 4):
            blocks = [token_block(n, size, r) for r in range(size)]
            assert [i for start, stop, _ in blocks for i in range(start, stop)] == list(range(n))
            assert all(stop - start <= per for start, stop, per in blocks)


def sharded_model(config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, rank: int,
                  optimizations: dict[str, bool], dummy: bool = True) -> Qwen3_5MoeForCausalLM:
    """A rank's model without a process group (groups None): enough to check what it holds."""
    plan = resolve_plan(optimizations, detect_capabilities("cpu"), parallel, config)
    model = Qwen3_5MoeForCausalLM(config, plan, groups=ProcessGroups(ParallelLayout(parallel, rank)))
    if dummy:
        init_dummy(model, seed=3)
    return model


@pytest.mark.parametrize("merged", [False, True], ids=["separate", "merged"])
@pytest.mark.parametrize("parallel", [
    ParallelConfig(4, 4, 4, 4, 4, 4), ParallelConfig(4, 2, 1, 4, 2, 2), ParallelConfig(2, 2, 2, 1, 2, 1),
], ids=["tp4", "ep4-attn-tp2", "tp2"])
def test_dummy_shards_are_slices_of_the_single_device_weights(parallel, merged):
    config = Qwen3_5MoeTextConfig.tiny().with_layers(4)
    toggles = {"merged_projections": merged}
    full = sharded_model(config, ParallelConfig(), 0, toggles)
    full_slots = full.slots()
    covered: dict[str, torch.Tensor] = {k: torch.zeros(s.shape, dtype=torch.bool) for k, s in full_slots.items()}
    for rank in range(parallel.world_size):
        model = sharded_model(config, parallel, rank, toggles)
        layout = model.groups.layout
        assert set(model.slots()) == {k for k in full_slots if not held_elsewhere(k, config, layout)}
        for key, slot in model_slots(model).items():
            whole = full_slots[key].param[full_slots[key].dest] if full_slots[key].dest else full_slots[key].param
            mine = slot.param[slot.dest] if slot.dest else slot.param
            expected = whole[slot.source] if slot.source else whole
            assert torch.equal(mine, expected), f"rank {rank}: {key} is not its block of the full tensor"
            covered[key][slot.source if slot.source else ...] = True
    missing = [k for k, mask in covered.items() if not bool(mask.all())]
    assert not missing, f"no rank holds part of {missing[0]}"


def test_gdn_qkv_block_takes_a_slice_of_each_of_q_k_v():
    config = Qwen3_5MoeTextConfig.tiny()
    lay = ParallelLayout(ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2), rank=1)
    sizes = LocalSizes.of(config, lay)
    param = torch.empty(sizes.linear_conv_dim, 8)
    slot = shard_slots({"model.layers.0.linear_attn.in_proj_qkv.weight": Slot(param)}, config, lay)
    rows = slot["model.layers.0.linear_attn.in_proj_qkv.weight"].source[0]
    key_dim, value_dim = config.linear_key_dim, config.linear_value_dim  # 128, 256
    expected = [*range(64, 128), *range(128 + 64, 256), *range(256 + 128, 512)]
    assert rows.tolist() == expected and key_dim == 128 and value_dim == 256


def test_checkpoint_loader_reads_only_this_ranks_block(tmp_path):
    from safetensors.torch import save_file

    config = Qwen3_5MoeTextConfig.tiny().with_layers(4)
    toggles = {"merged_projections": True}
    full = sharded_model(config, ParallelConfig(), 0, toggles)
    # our slot keys are the HF checkpoint keys (per-expert form), so the single-device slots are a checkpoint
    save_file({k: (s.param[s.dest] if s.dest else s.param).contiguous() for k, s in full.slots().items()},
              str(tmp_path / "model.safetensors"))
    parallel = ParallelConfig(4, 2, 1, 4, 2, 2)
    for rank in (0, 3):
        loaded = sharded_model(config, parallel, rank, toggles, dummy=False)
        load_checkpoint(loaded, tmp_path)
        expected = sharded_model(config, parallel, rank, toggles).state_dict()
        for key, value in loaded.state_dict().items():
            assert torch.equal(value, expected[key]), f"rank {rank}: {key} differs from its dummy-init block"
