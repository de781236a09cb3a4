"""Tensor and expert parallelism from a `parallel_config`: which ranks form each group, what each rank holds.

Group layout (npu_recipe.md 3.2, the recipe's CommManager):
- `attn_tp`, `embed_tp`, `lmhead_tp`, `shared_tp`, `moe_tp`: contiguous blocks of ranks ([0, 1], [2, 3], ...).
- `moe_ep`: the stride layout, every (world_size / moe_ep_size)-th rank. Mixed MoE TP+EP is rejected by
  `ParallelConfig.validate`, so in practice `moe_ep` is the whole world or absent.
A single-rank group is None (the layer then runs no collective); `build_process_groups` is the one place that
creates groups.

Attention-DP: when attn_tp_size < world_size the attn_tp groups are replicas. Every replica receives the same
batch and computes the same hidden states, so activations are identical on all ranks outside a TP region and
no batch split or gather is needed around attention. This keeps results identical to world_size 1 at the price
of repeated attention compute (the recipe has no attention-DP path for Qwen3.5 either).

Sharding is declared in `SHARDING_PLAN` (checkpoint-key globs -> strategy and group) and applied to the
model's weight `Slot`s by `shard_slots`; the loader in weights.py copies `checkpoint[slot.source]` into each
slot, and dummy init slices the full-size tensor the same way, so a rank's shard equals the slice of the
single-device tensor. Layers only ever allocate local sizes (`LocalSizes`); they never slice a weight.
"""

from __future__ import annotations

import atexit
import dataclasses
import fnmatch
import gc
import logging
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, NoReturn, Protocol

import torch
import torch.distributed as dist

from model.backend import dist_backend
from model.config import Qwen3_5MoeTextConfig
from model.layers.linear import Slot
from model.parallel_config import ParallelConfig, ParallelConfigError

GroupKind = Literal["attn_tp", "moe_tp", "moe_ep", "embed_tp", "lmhead_tp", "shared_tp"]
GROUP_KINDS: tuple[GroupKind, ...] = ("attn_tp", "moe_tp", "moe_ep", "embed_tp", "lmhead_tp", "shared_tp")

Strategy = Literal["column", "row", "kv_column", "packed_column", "vocab", "expert"]


# ---- layout: pure rank arithmetic, no process group needed ---------------------------------------------
@dataclass(frozen=True)
class ParallelLayout:
    """This rank's place in every group of a `ParallelConfig`."""

    parallel: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    rank: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.parallel.world_size:
            raise ParallelConfigError(f"rank {self.rank} is outside world_size {self.parallel.world_size}")

    @property
    def world_size(self) -> int:
        return self.parallel.world_size

    def size(self, kind: GroupKind) -> int:
        p = self.parallel
        sizes = {"attn_tp": p.attn_tp_size, "moe_tp": p.moe_tp_size, "moe_ep": p.moe_ep_size,
                 "embed_tp": p.embed_tp_size, "lmhead_tp": p.lmhead_tp_size, "shared_tp": p.shared_tp_size}
        return sizes[kind]

    def all_groups(self, kind: GroupKind) -> tuple[tuple[int, ...], ...]:
        """Every group of this kind, as rank tuples, in the same order on every rank."""
        size, world = self.size(kind), self.world_size
        if kind == "moe_ep":
            stride = world // size
            return tuple(tuple(start + i * stride for i in range(size)) for start in range(stride))
        return tuple(tuple(range(g * size, (g + 1) * size)) for g in range(world // size))

    def group_ranks(self, kind: GroupKind) -> tuple[int, ...]:
        return next(ranks for ranks in self.all_groups(kind) if self.rank in ranks)

    def index(self, kind: GroupKind) -> int:
        """This rank's position inside its group of `kind` (its TP rank or EP rank)."""
        return self.group_ranks(kind).index(self.rank)


@dataclass(frozen=True)
class LocalSizes:
    """The per-rank sizes layers allocate (equal to the model's sizes at world_size 1)."""

    num_heads: int
    num_kv_heads: int
    linear_k_heads: int
    linear_v_heads: int
    linear_conv_dim: int
    num_experts: int
    first_expert: int
    moe_intermediate: int
    shared_intermediate: int
    embed_vocab: int
    embed_vocab_start: int
    lmhead_vocab: int

    @classmethod
    def of(cls, config: Qwen3_5MoeTextConfig, layout: ParallelLayout) -> LocalSizes:
        attn_tp = layout.size("attn_tp")
        k_heads = config.linear_num_key_heads // attn_tp
        v_heads = config.linear_num_value_heads // attn_tp
        experts = config.num_experts // layout.size("moe_ep")
        embed_vocab = config.vocab_size // layout.size("embed_tp")
        return cls(
            num_heads=config.num_attention_heads // attn_tp,
            # KV heads are replicated when tp > kv heads (npu_recipe.md 1.4)
            num_kv_heads=max(config.num_key_value_heads // attn_tp, 1),
            linear_k_heads=k_heads,
            linear_v_heads=v_heads,
            linear_conv_dim=2 * k_heads * config.linear_key_head_dim + v_heads * config.linear_value_head_dim,
            num_experts=experts,
            first_expert=layout.index("moe_ep") * experts,
            moe_intermediate=config.moe_intermediate_size // layout.size("moe_tp"),
            shared_intermediate=config.shared_expert_intermediate_size // layout.size("shared_tp"),
            embed_vocab=embed_vocab,
            embed_vocab_start=layout.index("embed_tp") * embed_vocab,
            lmhead_vocab=config.vocab_size // layout.size("lmhead_tp"),
        )


# ---- the sharding plan ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardRule:
    """Checkpoint keys matching `pattern` (fnmatch glob) are split by `strategy` across the `group`.

    column: output rows (dim 0) in equal blocks; row: input columns (dim 1) in equal blocks;
    kv_column: column over min(tp, kv heads) blocks, so KV heads are replicated when tp > kv heads;
    packed_column: dim 0 is [Q | K | V] (GDN in_proj_qkv and its conv channels): block r of each part;
    vocab: vocabulary rows (column math; the embedding masks ids outside its block);
    expert: whole per-expert tensors live on the moe_ep rank that owns the expert (E / ep experts each).
    """

    pattern: str
    strategy: Strategy
    group: GroupKind


SHARDING_PLAN: tuple[ShardRule, ...] = (
    ShardRule("model.embed_tokens.weight", "vocab", "embed_tp"),
    ShardRule("lm_head.weight", "column", "lmhead_tp"),
    ShardRule("*.self_attn.q_proj.weight", "column", "attn_tp"),  # rows per head are [q_h | gate_h]
    ShardRule("*.self_attn.k_proj.weight", "kv_column", "attn_tp"),
    ShardRule("*.self_attn.v_proj.weight", "kv_column", "attn_tp"),
    ShardRule("*.self_attn.o_proj.weight", "row", "attn_tp"),
    ShardRule("*.linear_attn.in_proj_qkv.weight", "packed_column", "attn_tp"),
    ShardRule("*.linear_attn.conv1d.weight", "packed_column", "attn_tp"),
    ShardRule("*.linear_attn.in_proj_z.weight", "column", "attn_tp"),
    ShardRule("*.linear_attn.in_proj_b.weight", "column", "attn_tp"),
    ShardRule("*.linear_attn.in_proj_a.weight", "column", "attn_tp"),
    ShardRule("*.linear_attn.dt_bias", "column", "attn_tp"),
    ShardRule("*.linear_attn.A_log", "column", "attn_tp"),
    ShardRule("*.linear_attn.out_proj.weight", "row", "attn_tp"),
    ShardRule("*.mlp.shared_expert.gate_proj.weight", "column", "shared_tp"),
    ShardRule("*.mlp.shared_expert.up_proj.weight", "column", "shared_tp"),
    ShardRule("*.mlp.shared_expert.down_proj.weight", "row", "shared_tp"),
    # routed experts: MoE TP splits every expert's intermediate dim; EP places whole experts (never both)
    ShardRule("*.mlp.experts.*.gate_proj.weight", "column", "moe_tp"),
    ShardRule("*.mlp.experts.*.up_proj.weight", "column", "moe_tp"),
    ShardRule("*.mlp.experts.*.down_proj.weight", "row", "moe_tp"),
    ShardRule("*.mlp.experts.*", "expert", "moe_ep"),
)
# Everything else (norms, q_norm/k_norm, the gated norm, router and shared-expert gate) is replicated.

_EXPERT_ID = re.compile(r"\.mlp\.experts\.(\d+)\.")


def shard_rules(key: str) -> tuple[ShardRule, ...]:
    return tuple(rule for rule in SHARDING_PLAN if fnmatch.fnmatchcase(key, rule.pattern))


def expert_owner(key: str, config: Qwen3_5MoeTextConfig, layout: ParallelLayout) -> int | None:
    """The moe_ep index holding a per-expert checkpoint key (None for keys that are not per-expert)."""
    match = _EXPERT_ID.search(key)
    if match is None:
        return None
    return int(match[1]) // (config.num_experts // layout.size("moe_ep"))


def held_elsewhere(key: str, config: Qwen3_5MoeTextConfig, layout: ParallelLayout) -> bool:
    """True for a routed expert's tensor that another EP rank holds (the loader skips it silently)."""
    owner = expert_owner(key, config, layout)
    return owner is not None and owner != layout.index("moe_ep")


def _packed_rows(config: Qwen3_5MoeTextConfig, size: int, index: int) -> torch.Tensor:
    """Row indices of block `index` of each part of a [Q | K | V] packed dim (Q, K: key dim; V: value dim)."""
    key_dim, value_dim = config.linear_key_dim, config.linear_value_dim
    parts = []
    for offset, total in ((0, key_dim), (key_dim, key_dim), (2 * key_dim, value_dim)):
        block = total // size
        parts.append(torch.arange(offset + index * block, offset + (index + 1) * block))
    return torch.cat(parts)


def _shard(rule: ShardRule, key: str, local: torch.Size, config: Qwen3_5MoeTextConfig,
           layout: ParallelLayout) -> tuple[tuple, tuple[int, ...]]:
    """(source index into the full tensor, full shape) of this rank's block of a tensor with local shape."""
    size, index = layout.size(rule.group), layout.index(rule.group)
    shape = tuple(local)
    if rule.strategy in ("column", "vocab"):
        n = shape[0]
        return (slice(index * n, (index + 1) * n),), (n * size, *shape[1:])
    if rule.strategy == "row":
        n = shape[1]
        return (slice(None), slice(index * n, (index + 1) * n)), (shape[0], n * size, *shape[2:])
    if rule.strategy == "kv_column":
        blocks = min(size, config.num_key_value_heads)
        block = index // (size // blocks)  # tp ranks tp/kv apart share one KV head
        n = shape[0]
        return (slice(block * n, (block + 1) * n),), (n * blocks, *shape[1:])
    if rule.strategy == "packed_column":
        rows = _packed_rows(config, size, index)
        if rows.numel() != shape[0]:
            raise AssertionError(f"{key}: local rows {shape[0]} != packed block {rows.numel()}")
        return (rows,), (config.linear_conv_dim, *shape[1:])
    raise AssertionError(f"{key}: strategy {rule.strategy} has no block arithmetic")


def shard_slots(slots: dict[str, Slot], config: Qwen3_5MoeTextConfig,
                layout: ParallelLayout) -> dict[str, Slot]:
    """The model's slots with `source` and `full_shape` set for every tensor this rank holds a block of.

    At world_size 1 every group has size 1 and the slots come back unchanged.
    """
    out: dict[str, Slot] = {}
    for key, slot in slots.items():
        for rule in shard_rules(key):
            if layout.size(rule.group) == 1:
                continue
            if rule.strategy == "expert":
                if held_elsewhere(key, config, layout):
                    raise AssertionError(f"{key}: declared on moe_ep rank {layout.index('moe_ep')}, which "
                                         f"does not own it")
                continue  # whole tensor, no block
            source, full_shape = _shard(rule, key, slot.shape, config, layout)
            slot = dataclasses.replace(slot, source=source, full_shape=full_shape)
        out[key] = slot
    return out


# ---- process groups ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcessGroups:
    """The groups this rank belongs to; None where the group has one rank (no collective runs)."""

    layout: ParallelLayout = dataclasses.field(default_factory=ParallelLayout)
    attn_tp: dist.ProcessGroup | None = None
    moe_tp: dist.ProcessGroup | None = None
    moe_ep: dist.ProcessGroup | None = None
    embed_tp: dist.ProcessGroup | None = None
    lmhead_tp: dist.ProcessGroup | None = None
    shared_tp: dist.ProcessGroup | None = None
    # MC2 dispatch/combine needs an EP communicator that runs no other op (npu_ops.md 2.14); NPU only
    moe_ep_dispatch: dist.ProcessGroup | None = None
    moe_ep_dispatch_name: str = ""  # its HCCL name, asked once here (never inside a compiled decode step)

    @property
    def rank(self) -> int:
        return self.layout.rank


def hccl_comm_name(group: dist.ProcessGroup) -> str:
    """The HCCL communicator name the MC2 fused ops take (npu_ops.md 2.9), asked with this rank's rank in the
    group (the global rank names another rank's communicator in a sub-group).

    Call it outside any traced function: dynamo cannot trace `_get_backend` on a process group."""
    backend = group._get_backend(torch.device("npu"))
    return backend.get_hccl_comm_name(dist.get_rank(group))  # type: ignore[attr-defined]  # torch_npu adds it


def build_process_groups(layout: ParallelLayout, device: str = "cpu") -> ProcessGroups:
    """Create every group of the layout. Collective: every rank must call it, with the same layout.

    `dist.new_group` must be entered by all ranks for every group, members or not, in the same order, so each
    kind walks all its groups; identical rank sets share one communicator and the whole world reuses the
    default group.
    """
    if layout.world_size == 1:
        return ProcessGroups(layout)
    if not dist.is_initialized():
        raise RuntimeError("build_process_groups needs the default process group (call init_distributed)")
    created: dict[tuple[int, ...], dist.ProcessGroup] = {}

    def group_for(ranks: tuple[int, ...]) -> dist.ProcessGroup:
        if len(ranks) == layout.world_size:
            return dist.group.WORLD  # type: ignore[return-value]
        if ranks not in created:
            created[ranks] = dist.new_group(list(ranks))
        return created[ranks]

    mine: dict[str, dist.ProcessGroup | None] = {}
    for kind in GROUP_KINDS:
        mine[kind] = None
        if layout.size(kind) == 1:
            continue
        for ranks in layout.all_groups(kind):
            group = group_for(ranks)
            if layout.rank in ranks:
                mine[kind] = group
    dispatch_name = ""
    if device == "npu" and layout.size("moe_ep") > 1 and layout.size("moe_tp") == 1:
        for ranks in layout.all_groups("moe_ep"):
            group = dist.new_group(list(ranks))  # a fresh communicator, never the shared one
            if layout.rank in ranks:
                mine["moe_ep_dispatch"] = group
                dispatch_name = hccl_comm_name(group)
    return ProcessGroups(layout, **mine, moe_ep_dispatch_name=dispatch_name)


TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init_distributed(parallel: ParallelConfig, device: str) -> ParallelLayout:
    """This process's layout; joins the default process group for world_size > 1.

    The group is initialized from the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) with
    the device's backend (gloo, nccl, hccl) unless the caller already did. world_size 1 touches nothing.
    """
    world = parallel.world_size
    if world == 1:
        return ParallelLayout(parallel, 0)
    if not dist.is_available():
        raise RuntimeError("parallel_config.world_size > 1 needs torch.distributed, which this torch lacks")
    if not dist.is_initialized():
        missing = [name for name in TORCHRUN_ENV if name not in os.environ]
        if missing:
            raise RuntimeError(
                f"parallel_config.world_size is {world} but this process was not started by torchrun "
                f"(${missing[0]} is not set); run it with `python -m torch.distributed.run "
                f"--nproc-per-node {world} ...`")
        if device in ("cuda", "npu"):
            set_local_device(device)
        dist.init_process_group(backend=dist_backend(device))
        # NOTE: no atexit teardown any more. An atexit `destroy_process_group` (the previous round) still let
        # ranks abort (docs/numerics.md, "Process group teardown"): it runs as interpreter shutdown begins, while
        # the caller's model, tensors and work handles are alive, and a gloo thread that releases one of them
        # after finalization started takes the GIL and C++ calls terminate. `finish` ends the entry point
        # instead: the group is destroyed while the interpreter is whole, and no shutdown follows.
    actual = dist.get_world_size()
    if actual != world:
        raise ParallelConfigError(f"parallel_config.world_size: {world} does not match the {actual} "
                                  f"processes of the running job; launch {world} ranks or set world_size "
                                  f"{actual}")
    return ParallelLayout(parallel, dist.get_rank())


def _barrier() -> None:
    """Every rank of the default group gets here before any goes on. A backend that takes CPU tensors (gloo,
    and "hccl" under perfbench's emulator, whose `dist.barrier` asks for a device hook it lacks) all-reduces
    one CPU element; the others (nccl, hccl) use `dist.barrier` on the current device."""
    if "cpu" in dist.Backend.backend_capability.get(str(dist.get_backend()), []):
        dist.all_reduce(torch.zeros(1))
    else:
        dist.barrier()


class _Flushable(Protocol):
    def flush(self) -> object: ...


THREAD_JOIN_S = 10.0  # the most `finish` waits for this process's own threads to end


def _join_threads(within_s: float) -> None:
    """Wait, as interpreter exit would, for the process's non-daemon threads, within `within_s` seconds in all.
    First the shutdown hooks threading keeps for interpreter exit: an idle ThreadPoolExecutor's workers (a
    library's pool, inductor's among them) wait on their queue until those hooks tell them to stop, so a bare
    join() would wait forever (a rank then hung until its run's timeout killed it)."""
    for hook in list(getattr(threading, "_threading_atexits", ())):
        try:
            hook()
        except Exception:  # noqa: BLE001 - a library's exit hook that fails leaves its threads to the deadline
            pass
    deadline = time.monotonic() + within_s
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(deadline - time.monotonic(), 0.0))


def finish(status: int | BaseException = 0, *, flush: Iterable[_Flushable] = (),
           done: str | os.PathLike[str] | None = None,
           barrier: bool | Callable[[], object] = True) -> NoReturn:
    """End this process cleanly; the last call of a torchrun rank's entry point (any process may call it).

        def main() -> int:
            model = Qwen3_5MoeForCausalLM.from_pretrained(..., parallel_config={...})
            ...  # write results
            return 0

        if __name__ == "__main__":
            try:
                rc = main()  # model, tensors and work handles die with main's frame
            except Exception as exc:
                model.parallel.finish(exc)  # traceback on stderr, exit 1, no barrier
            model.parallel.finish(rc, flush=[results_file], done=out / "rank0.done")

    `status` is the exit code, or the exception that failed this rank (its traceback goes to stderr, exit 1).
    On exit code 0, in order: join this process's non-daemon threads (as interpreter exit would, after its
    shutdown hooks stop idle thread pools; at most `THREAD_JOIN_S` in all); `barrier`
    (True: every rank of the default group meets, see `_barrier`; a callable: that instead; False: none) so no
    rank leaves while another still talks to it; gc.collect() (drops cycles holding tensors and work
    handles); destroy the default process group and every group made from it; gc.collect(). A failing rank
    skips those steps, which wait for its peers (they may be stuck in a collective, and gloo's destructor would
    wait for their work; torchrun stops them once this rank has exited).
    Then always: the atexit functions, the `flush` objects, logging's handlers, the `done` marker (the exit
    code and a newline, written and closed), stdout and stderr; and `os._exit`.

    Why `os._exit`: a rank that returns into interpreter shutdown with gloo's threads alive can abort there
    ("terminate called without an active exception", SIGABRT): a gloo thread releasing a tensor takes the GIL
    after finalization began. With os._exit no finalization runs; what shutdown would have written is written
    above. Objects only the interpreter's teardown would finalize (an open file not passed in `flush`) are
    not; close or pass them. (Measured: docs/numerics.md, "Process group teardown".)
    """
    if isinstance(status, BaseException):
        traceback.print_exception(status, file=sys.stderr)
        rc = 1
    else:
        rc = int(status)
    try:
        if rc == 0:
            _join_threads(THREAD_JOIN_S)
            grouped = dist.is_available() and dist.is_initialized()
            if grouped and callable(barrier):
                barrier()
            elif grouped and barrier:
                _barrier()
            gc.collect()
            if grouped:
                dist.destroy_process_group()
            gc.collect()
    except BaseException as exc:  # noqa: BLE001 - a teardown that fails fails the rank, with its traceback
        traceback.print_exception(exc, file=sys.stderr)
        rc = 1
    try:
        atexit._run_exitfuncs()
        for stream in flush:
            stream.flush()
        logging.shutdown()
        if done is not None:
            with open(done, "w") as marker:
                marker.write(f"{rc}\n")
    except BaseException as exc:  # noqa: BLE001 - a result that cannot be written fails the rank
        traceback.print_exception(exc, file=sys.stderr)
        rc = rc or 1
    for std in (sys.stdout, sys.stderr):
        try:
            std.flush()
        except (OSError, ValueError):  # closed or broken: nothing more can be said on it
            pass
    os._exit(rc)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def set_local_device(device: str) -> None:
    """Bind this process to accelerator LOCAL_RANK (one rank per device, as torchrun lays them out)."""
    if device == "cuda":
        torch.cuda.set_device(local_rank())
    elif device == "npu":
        torch.npu.set_device(local_rank())  # type: ignore[attr-defined]


def rank_device(device: str, layout: ParallelLayout) -> str:
    """The device string this rank runs on: cpu stays cpu; an accelerator gets the LOCAL_RANK index."""
    if layout.world_size == 1 or device == "cpu" or ":" in device:
        return device
    set_local_device(device)
    return f"{device}:{local_rank()}"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def token_block(num_tokens: int, size: int, index: int) -> tuple[int, int, int]:
    """Contiguous token split for EP: (start, stop, tokens_per_rank) of block `index` of `num_tokens` rows.

    Every rank gets ceil(N / size) rows except the last ones, which may get fewer or none; the all_gather
    after combine pads to tokens_per_rank so all ranks exchange equal shapes.
    """
    per = ceil_div(num_tokens, size)
    start = min(index * per, num_tokens)
    return start, min(start + per, num_tokens), per


__all__ = [
    "GROUP_KINDS", "SHARDING_PLAN", "LocalSizes", "ParallelLayout", "ProcessGroups", "ShardRule",
    "build_process_groups", "ceil_div", "expert_owner", "finish", "held_elsewhere",
    "init_distributed", "rank_device", "shard_rules", "shard_slots", "token_block",
]
