"""Bind a `Plan` to concrete callables, once, at build time. Layers only ever call what is in the `OpSet`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from model.layers.linear import Projections
from model.ops import attention, comm, gdn, graph, moe, norm, rope
from model.optimizations import Plan


@dataclass(frozen=True)
class OpSet:
    rms_norm: Callable[..., torch.Tensor]
    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    gated_rms_norm: Callable[..., torch.Tensor]
    apply_rope: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    attention_prefill: Callable[..., torch.Tensor]
    attention_decode: Callable[..., torch.Tensor]
    write_kv: Callable[..., None]
    gdr_prefill: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    gdr_decode: Callable[..., torch.Tensor]
    route: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    experts_prefill: Callable[..., torch.Tensor]
    experts_decode: Callable[..., torch.Tensor]
    # (x, weight, group | None) -> x W^T summed over the TP group: mm_all_reduce or matmul + all_reduce
    row_parallel_prefill: Callable[..., torch.Tensor]
    row_parallel_decode: Callable[..., torch.Tensor]
    # EP exchange (model/ops/comm.py): Double-Routing, or static/MC2 dispatch+combine (moe_dispatch_combine)
    moe_ep_prefill: Callable[..., torch.Tensor]
    moe_ep_decode: Callable[..., torch.Tensor]
    projections: Callable[..., Projections]  # (in_features, {part: out}, dtype, device) -> Projections
    compile_decode: Callable[..., Any]  # (fn, cache_dir | None) -> fn
    # KV cache lengths are rounded up to a multiple of this: the paged TND attention reads whole blocks
    kv_cache_multiple: int = 1


def _pick(table: dict[str, Callable], on: bool, device: str, variant: str = "") -> Callable:
    key = (variant or device) if on else "ref"
    if key not in table:
        raise ValueError(f"no {key!r} implementation in {sorted(table)}")
    return table[key]


def _attention_decode(plan: Plan, attn_key: str) -> Callable:
    fn = _pick(attention.ATTENTION_DECODE, plan.on("fused_attention"), plan.device, attn_key)
    if plan.device != "npu" or not plan.on("fused_attention"):
        return fn
    # the NPU FIA op is chosen here, outside any trace, by what will run the decode step
    ge_graph = plan.on("graph_mode") and plan.exe_mode == "ge_graph"
    return attention.bind_decode_fia(fn, v2=attn_key == "npu_tnd", ge_graph=ge_graph)


def _moe_ep_decode(plan: Plan) -> Callable:
    fn = _pick(comm.EP_EXCHANGE, plan.on("moe_dispatch_combine"), plan.device)
    if plan.device == "npu" and plan.on("moe_dispatch_combine"):
        # the MC2 argument contract differs per platform and between eager and graph mode
        return partial(fn, platform=plan.npu_platform, in_graph=plan.on("graph_mode"))
    return fn


def build_ops(plan: Plan) -> OpSet:
    d = plan.device
    npu_attention = "npu_tnd" if plan.attention_variant.startswith("fia_v2") else "npu"
    attn_key = npu_attention if d == "npu" else ""
    on = plan.on
    tnd = d == "npu" and on("fused_attention") and attn_key == "npu_tnd"
    return OpSet(
        rms_norm=_pick(norm.RMS_NORM, on("fused_rmsnorm"), d),
        add_rms_norm=_pick(norm.ADD_RMS_NORM, on("fused_rmsnorm"), d),
        gated_rms_norm=_pick(norm.GATED_RMS_NORM, on("fused_rmsnorm"), d),
        apply_rope=_pick(rope.APPLY_ROPE, on("fused_rope"), d),
        attention_prefill=_pick(attention.ATTENTION_PREFILL, on("fused_attention"), d, attn_key),
        attention_decode=_attention_decode(plan, attn_key),
        # the KV write is part of the attention op family; NPU writes with scatter_update_ on either path
        write_kv=_pick(attention.WRITE_KV, on("fused_attention") or d == "npu", d, attn_key),
        gdr_prefill=_pick(gdn.GDR_PREFILL, on("chunk_gdr"), d, plan.gdr_variant),
        # decode is one recurrent step on both paths (chunk_gdr is prefill only); NPU uses its recurrent op
        gdr_decode=_pick(gdn.GDR_DECODE, d == "npu", d),
        route=_pick(moe.ROUTE, on("grouped_moe") and d == "npu", d),
        experts_prefill=_pick(moe.EXPERTS_PREFILL, on("grouped_moe"), d),
        experts_decode=_pick(moe.EXPERTS_DECODE, on("grouped_moe"), d,
                             "cpu_graph" if d == "cpu" and on("graph_mode") else ""),
        row_parallel_prefill=_pick(comm.ROW_PARALLEL_LINEAR, on("mm_all_reduce"), d),
        row_parallel_decode=comm.ROW_PARALLEL_LINEAR["ref"],  # decode always all_reduces (npu_recipe.md 2.2)
        moe_ep_prefill=comm.EP_EXCHANGE["ref"],  # dispatch/combine is decode only (the recipe's choice)
        moe_ep_decode=_moe_ep_decode(plan),
        projections=partial(_projections, merged=on("merged_projections")),
        compile_decode=graph.graph_compiler(d, plan.exe_mode, tnd) if on("graph_mode") else graph.eager,
        kv_cache_multiple=attention.NPU_BLOCK_SIZE if tnd else 1,
    )


def _projections(in_features: int, parts: dict[str, int], dtype: torch.dtype, device: torch.device | str,
                 *, merged: bool) -> Projections:
    return Projections(in_features, parts, merged, dtype, device)
