"""Item 2, ops: every NPU op the plan can bind, at each model's dims and dtype, against its pure-torch reference
(doctor's op checks, perfbench/tools/op_checks.py), then timed against that reference, its fallback.

A check is skipped when the model's all-on plan does not bind it (the toggle is inactive on this platform, or
the plan picks the other attention layout) or when torch_npu lacks one of its ops (the environment item
reports that). The multi-rank ops (npu_mm_all_reduce_base, MC2 dispatch/combine) are the parallel item's.
"""

from __future__ import annotations

import importlib

import torch

from model.optimizations import Plan, resolve_plan
from perfbench.tools.op_checks import OpCheck, OpShapes, op_checks
from perfbench.tools.verify.context import DTYPE, ModelUnderTest, VerifyContext, all_on
from perfbench.tools.verify.failures import NpuCallRecorder, failed_check
from perfbench.tools.verify.summary import FAIL, PASS, SKIPPED, Check

TND_OPS = ("npu_fused_infer_attention_score_v2", "npu_scatter_nd_update_")
BSH_OPS = ("npu_fused_infer_attention_score", "scatter_update_")
TIMED_CALLS = {True: 1, False: 10}  # per op and fallback: --quick, full


def unbound_reason(check: OpCheck, plan: Plan) -> str:
    """Why the plan does not bind this check's fast op ("" when it does)."""
    if check.toggle is not None and not plan.on(check.toggle):
        return f"{check.toggle} {plan.decisions[check.toggle].state}: {plan.decisions[check.toggle].reason}"
    tnd = plan.attention_variant.startswith("fia_v2")
    if tnd and any(op in BSH_OPS for op in check.npu_ops):
        return f"the plan binds {plan.attention_variant}"
    if not tnd and any(op in TND_OPS for op in check.npu_ops):
        return f"the plan binds {plan.attention_variant or 'no fused attention'}"
    return ""


def _check_one(ctx: VerifyContext, model: ModelUnderTest, check: OpCheck, plan: Plan, log: list[str]) -> Check:
    name = f"{model.name}/{check.name}"
    ops = ", ".join(check.npu_ops)
    reason = unbound_reason(check, plan)
    if reason:
        return Check(name, SKIPPED, f"not bound by the plan: {reason}", op=ops)
    torch_npu = importlib.import_module("torch_npu")
    missing = [op for op in check.npu_ops if not hasattr(torch_npu, op)]
    if missing:
        return Check(name, SKIPPED, f"torch_npu has no {missing[0]} (see the environment item)", op=missing[0])
    dtype = str(check.dtype).removeprefix("torch.")
    recorder = NpuCallRecorder()
    try:
        with recorder:
            err = check.run(torch.Generator().manual_seed(0), ctx.device)
    except Exception as exc:  # noqa: BLE001 - every check reports, the next one runs
        return failed_check(name, exc, log, recorder, op=ops, dtype=dtype)
    data: dict[str, object] = {"dtype": dtype, "max_error": err, "tolerance": check.tolerance}
    detail = f"{dtype}: max error {err:.2e} (tolerance {check.tolerance:.0e})"
    if err > check.tolerance or err != err:
        return Check(name, FAIL, detail, op=ops, error=f"max error {err:.3g} exceeds the tolerance "
                                                       f"{check.tolerance:.0e}", data=data)
    try:
        fast_s, ref_s = check.time(torch.Generator().manual_seed(1), ctx.device, TIMED_CALLS[ctx.options.quick],
                                   warm_up=False)  # `run` was the first call of each
        data.update(fast_ms=fast_s * 1e3, fallback_ms=ref_s * 1e3)
        timing = "emulated, CPU timings" if ctx.emulation else "device time"
        detail += f"; {fast_s * 1e3:.3f} ms vs fallback {ref_s * 1e3:.3f} ms ({timing})"
    except Exception as exc:  # noqa: BLE001 - numerics stand; the timing failure is logged
        log.append(f"--- {name}: timing failed: {exc}")
        detail += "; timing failed (see the log)"
    return Check(name, PASS, detail, op=ops, data=data)


def check_ops(ctx: VerifyContext, log: list[str]) -> list[Check]:
    checks = []
    for model in ctx.models:
        plan = resolve_plan(all_on(graph=False), ctx.caps, model=model.config,
                            dtype=str(DTYPE).removeprefix("torch."))
        for check in op_checks("npu", OpShapes.of(model.config), DTYPE):
            checks.append(_check_one(ctx, model, check, plan, log))
    return checks

