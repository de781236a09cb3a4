"""One rank of the emulated-HCCL test (tests/emulation/test_npu_hccl.py), started by torchrun:
`python mc2_worker.py PLATFORM OUT`. Runs the MC2 ops over dist backend "hccl" (gloo under the emulator) and
writes what it got next to what the documented semantics give, computed locally from every rank's seeded
inputs (no collective involved in the expected values)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from perfbench.emulation import npu

BS, K, EXPERTS = 3, 2, 4


def rank_inputs(rank: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(BS, hidden, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:K] for _ in range(BS)]).to(torch.int32)
    weights = torch.rand(BS, K, generator=gen)
    active = torch.arange(BS) < BS - rank  # rank 1 has one inactive (pad) row at the end
    return x, ids, weights, active


def main() -> None:
    platform, out_dir = sys.argv[1], sys.argv[2]
    npu.activate(platform)
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(world)))
    name = group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    result: dict[str, object] = {"comm_name": name}
    if platform == "950":
        gen = torch.Generator().manual_seed(7)
        x1 = [torch.randn(2, 3, 8, generator=gen).to(torch.bfloat16) for _ in range(world)]
        x2 = [torch.randn(5, 8, generator=gen).to(torch.bfloat16) for _ in range(world)]
        y = torch.ops.npu.npu_mm_all_reduce_base(x1[rank], x2[rank].t(), name, reduce_op="sum")
        expected = sum((a.float() @ b.float().t()).to(torch.bfloat16).float() for a, b in zip(x1, x2))
        result["max_err"] = (y.float() - expected).abs().max().item()
    else:
        hidden = 1024  # A3 documents H in [1024, 8192]
        x, ids, weights, active = rank_inputs(rank, hidden)
        a2 = platform == "910b"
        common = dict(group_ep=name, ep_world_size=world, ep_rank_id=rank, moe_expert_num=EXPERTS,
                      global_bs=BS * world, **({} if a2 else {"group_tp": name, "tp_world_size": 1,
                                                              "shared_expert_num": 0}))
        outs = torch.ops.npu.npu_moe_distribute_dispatch_v2(
            x=x, expert_ids=ids, x_active_mask=active, expert_scales=weights if a2 else None, **common)
        expand_x, _, assist, counts, ep_recv, tp_recv, expand_scales = outs
        # "experts": local expert e multiplies its rows by (its global id + 1)
        local = EXPERTS // world
        factors = torch.repeat_interleave(torch.arange(local) + rank * local + 1.0, counts)
        y = expand_x.clone()
        y[: len(factors)] = (expand_x[: len(factors)].float() * factors[:, None]).to(torch.bfloat16)
        out = torch.ops.npu.npu_moe_distribute_combine_v2(
            expand_x=y, expert_ids=ids, assist_info_for_combine=assist, ep_send_counts=ep_recv,
            expert_scales=weights, tp_send_counts=tp_recv, x_active_mask=active,
            **({"expand_scales": expand_scales} if a2 else {}), **common)
        expected = (weights[..., None] * (ids.float() + 1)[..., None] * x.float()[:, None]).sum(1)
        expected[~active] = 0
        result["max_err"] = (out.float() - expected).abs().max().item()
        result["scale"] = expected.abs().max().item()
        received = sum(int(((rank_inputs(r, hidden)[1] // local == rank) & rank_inputs(r, hidden)[3][:, None])
                           .sum()) for r in range(world))
        result["received"], result["counted"] = received, int(counts.sum())
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    from model.parallel import finish

    main()
    finish(0)  # barrier (a CPU all_reduce on the emulated hccl), destroy the groups, flush, os._exit
