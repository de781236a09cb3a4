"""HCCL on gloo: under the emulator, dist backend "hccl" creates gloo process groups, and the HCCL
communicator name the MC2 ops take maps back to its process group.

The name comes from the same call torch_npu uses, `group._get_backend(torch.device("npu"))
.get_hccl_comm_name(rank)` (torch.device("npu") is the renamed PrivateUse1 device; see runtime.py). Like
torch_npu's, the method lives on the backend object; here it is added to gloo's backend class, which is
harmless off the emulator (nothing else calls it).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from perfbench.emulation.npu import faults, rules

NAME_PREFIX = "emulated_hccl:"
_registered: list[bool] = []


def _create_gloo(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> dist.ProcessGroupGloo:
    faults.check_rank_alive(rank)  # rank_dies:R (a test hook) ends rank R here
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _get_hccl_comm_name(backend: object, rank: int, init_comm: bool = True) -> str:
    """The communicator name of the process group `backend` belongs to (its group name)."""
    world = dist.distributed_c10d._world
    for pg, name in world.pg_names.items():
        for device in ("npu", "cpu"):
            try:
                if pg._get_backend(torch.device(device)) is backend:
                    return f"{NAME_PREFIX}{name}"
            except RuntimeError:
                continue
    raise RuntimeError("get_hccl_comm_name: this backend belongs to no live process group")


def install() -> None:
    """Register "hccl" as a gloo-backed dist backend (once per process) and the comm-name method."""
    if not _registered:
        dist.Backend.register_backend("hccl", _create_gloo, devices=["cpu", "npu"])
        _registered.append(True)
    dist.ProcessGroupGloo.get_hccl_comm_name = _get_hccl_comm_name  # type: ignore[attr-defined]


def group_of(comm_name: str, op: str, world_size: int | None = None, rank: int | None = None
             ) -> dist.ProcessGroup:
    """The process group a communicator name stands for; checks the op's world size / rank against it."""
    if not comm_name.startswith(NAME_PREFIX):
        rules.fail(op, f"unknown HCCL communicator {comm_name!r} (get it from "
                       "group._get_backend(torch.device('npu')).get_hccl_comm_name(rank))")
    wanted = comm_name.removeprefix(NAME_PREFIX)
    for pg, name in dist.distributed_c10d._world.pg_names.items():
        if name == wanted:
            if world_size is not None and dist.get_world_size(pg) != world_size:
                rules.fail(op, f"ep_world_size {world_size} differs from the communicator's "
                               f"{dist.get_world_size(pg)} ranks")
            if rank is not None and dist.get_rank(pg) != rank:
                rules.fail(op, f"ep_rank_id {rank} differs from this rank's {dist.get_rank(pg)} in the communicator")
            return pg
    rules.fail(op, f"HCCL communicator {comm_name!r} names no live process group")
    raise AssertionError  # fail() raised


def all_gather_rows(group: dist.ProcessGroup, tensors: Sequence[Tensor]) -> list[list[Tensor]]:
    """Every rank's `tensors` (same shapes on every rank), as [rank][i]."""
    size = dist.get_world_size(group)
    gathered: list[list[Tensor]] = [[] for _ in range(size)]
    for t in tensors:
        wire = _to_wire(t)
        parts = [torch.empty_like(wire) for _ in range(size)]
        dist.all_gather(parts, wire, group=group)
        for r, p in enumerate(parts):
            gathered[r].append(_from_wire(p, t.dtype))
    return gathered


def _to_wire(t: Tensor) -> Tensor:
    # gloo takes neither bool nor int16; 16-bit floats travel as fp32 (exact both ways)
    if t.dtype == torch.bool:
        return t.to(torch.int64)
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    return t.contiguous()


def _from_wire(t: Tensor, dtype: torch.dtype) -> Tensor:
    if dtype == torch.bool:
        return t.bool()
    return t.to(dtype) if dtype in (torch.float16, torch.bfloat16) else t
