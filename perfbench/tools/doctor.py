"""`perfbench doctor`: the support matrix of this machine, and (`--check-ops`) every fast op vs its reference.

On an NPU machine `--check-ops` is the one command that verifies the torch_npu paths on real hardware; here
it checks the CPU implementations.
"""

from __future__ import annotations

import torch

from model.backend import Capabilities, detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.optimizations import TOGGLE_NAMES, resolve_plan
from model.parallel_config import ParallelConfig
from perfbench.errors import UserError
from perfbench.measure.environment import emulation_label
from perfbench.terminal_text import echo
from perfbench.tools.op_checks import OpCheck, op_checks, run_op_checks

__all__ = ["LAYOUTS", "OpCheck", "doctor", "op_checks", "support_matrix"]  # the op checks live in op_checks.py

LAYOUTS = {
    "1 device": ParallelConfig(),
    "TP2": ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2, embed_tp_size=2, lmhead_tp_size=2),
    "EP2": ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=1, embed_tp_size=2, lmhead_tp_size=2),
}


def support_matrix(caps: Capabilities) -> str:
    plans = {name: resolve_plan("all", caps, layout, Qwen3_5MoeTextConfig.tiny()) for name, layout in LAYOUTS.items()}
    absent_npu = Capabilities(device="npu", device_name="(not present)")
    npu_plan = None if caps.device == "npu" else resolve_plan("all", absent_npu, LAYOUTS["1 device"])
    width = max(map(len, TOGGLE_NAMES))
    lines = [f"device: {caps.device} ({caps.device_name}); torch {torch.__version__}; "
             f"torch_npu {'yes' if caps.torch_npu else 'no'}; torchair {'yes' if caps.torchair else 'no'}",
             "", f"{'toggle':<{width}}  " + "  ".join(f"{n:<10}" for n in LAYOUTS) + "  implementation / reason"]
    for toggle in TOGGLE_NAMES:
        states = [plans[n].decisions[toggle] for n in LAYOUTS]
        cells = "  ".join(f"{d.state:<10}" for d in states)
        on = next((d for d in states if d.on), None)
        detail = on.impl if on else states[0].reason
        if on and any(not d.on for d in states):
            detail += f" (elsewhere: {next(d.reason for d in states if not d.on)})"
        lines.append(f"{toggle:<{width}}  {cells}  {detail}")
    if npu_plan is not None:
        lines += ["", "on an Ascend NPU this environment would report:"]
        lines += [f"  {d.name:<{width}}  inactive: {d.reason}" for d in npu_plan.decisions.values()]
    return "\n".join(lines)


def doctor(device: str = "auto", check_ops: bool = False) -> int:
    try:
        caps = detect_capabilities(device)
    except (ValueError, RuntimeError) as err:
        raise UserError(f"--device: {err}") from None
    echo(support_matrix(caps))
    if not check_ops:
        return 0
    text, ok = run_op_checks(caps.device)
    if caps.device == "npu" and emulation_label():
        text = f"op checks on {emulation_label()}: documented input rules and semantics, CPU kernels\n{text}"
    echo("\n" + text)
    return 0 if ok else 1
