"""`perfbench doctor`: the support matrix of this machine, and (`--check-ops`) every fast op vs its reference.

On an NPU machine `--check-ops` is the one command that verifies the torch_npu paths on real hardware; here
it checks the CPU implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import torch

from model.backend import Capabilities, detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.ops import attention, gdn, moe, norm, rope
from model.optimizations import TOGGLE_NAMES, resolve_plan
from model.parallel_config import ParallelConfig
from perfbench.errors import UserError
from perfbench.run.environment import emulation_label

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


@dataclass
class OpCheck:
    """A fast op against its reference on the same inputs. Inputs are drawn on the CPU (seeded), rounded to
    `dtype` and moved to the device the op runs on; the reference gets the same rounded values in fp32."""

    name: str
    ref: Callable
    fast: Callable
    make_inputs: Callable[[torch.Generator], tuple]
    tolerance: float
    dtype: torch.dtype = torch.float32
    # for ops on a right-padded batch: (args) -> [B, T] mask of the rows the op defines (padded rows are not)
    valid_rows: Callable[[tuple], torch.Tensor] | None = None

    def run(self, gen: torch.Generator, device: str) -> float:
        args = self.make_inputs(gen)
        fast_args = _place(args, device, self.dtype)
        ref_args = _place(_place(args, "cpu", self.dtype), device, torch.float32)
        expected = self.ref(*ref_args)
        got = self.fast(*fast_args)
        exp_t = expected if isinstance(expected, tuple) else (expected,)
        got_t = got if isinstance(got, tuple) else (got,)
        rows = self.valid_rows(args) if self.valid_rows is not None else None
        err = 0.0
        for e, g in zip(exp_t, got_t):
            if isinstance(e, torch.Tensor):
                diff = (e.float().cpu() - g.float().cpu()).abs()
                if rows is not None and diff.shape[:2] == rows.shape:
                    diff = diff[rows]
                err = max(err, diff.max().item())
        return err


def _place(value: Any, device: str, dtype: torch.dtype) -> Any:
    """Floating tensors to `dtype` on `device`, other tensors to `device`, containers element-wise."""
    if isinstance(value, torch.Tensor):
        return value.to(device, dtype) if value.is_floating_point() else value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_place(v, device, dtype) for v in value)
    return value


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def op_checks(device: str) -> list[OpCheck]:
    """One check per op family member with representative Qwen3.5 shapes (head_dim 256, rotary 64, GQA 8).

    On an NPU the fused attention and gated-delta-rule ops run in bfloat16 (they have no fp32), and the TND
    attention check uses head_dim 128 (TND's documented head dims are 128 and 192)."""
    npu = device == "npu"
    half = torch.bfloat16 if npu else torch.float32

    def l2(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)

    def norm_in(g):
        return _randn(g, 3, 37, 769), 1 + 0.1 * _randn(g, 769), 1e-6

    def add_norm_in(g):
        return _randn(g, 3, 37, 769), _randn(g, 3, 37, 769), 1 + 0.1 * _randn(g, 769), 1e-6

    def gated_in(g):
        return _randn(g, 2, 37, 8, 128), _randn(g, 2, 37, 8, 128), 1 + 0.1 * _randn(g, 128), 1e-6

    def rope_in(g):
        pos = torch.arange(37).expand(2, 37)
        inv = 1.0 / (1e7 ** (torch.arange(0, 64, 2).float() / 64))
        cos, sin = rope.rotary_cos_sin(pos, inv, torch.float32)
        return _randn(g, 2, 37, 16, 256), _randn(g, 2, 37, 2, 256), cos, sin

    def prefill_in(g, d: int = 256):
        return (_randn(g, 3, 70, 16, d), _randn(g, 3, 70, 2, d), _randn(g, 3, 70, 2, d),
                torch.tensor([70, 33, 1]), d ** -0.5)

    def decode_in(g, d: int = 256):
        # 128 cache rows: the paged TND path reads whole 128-token blocks
        return (_randn(g, 3, 1, 16, d), _randn(g, 3, 128, 2, d), _randn(g, 3, 128, 2, d),
                torch.tensor([128, 40, 1]), d ** -0.5)

    def prompt_rows(args: tuple) -> torch.Tensor:
        # right padding: row t of sequence b is defined for t < seq_lens[b]
        seq_lens, t = args[3], args[0].shape[1]
        return torch.arange(t)[None, :] < seq_lens[:, None]

    def gdr_rows(args: tuple) -> torch.Tensor:
        seq_lens, t = args[7], args[0].shape[1]
        return torch.arange(t)[None, :] < seq_lens[:, None]

    def gdr_in(g):
        b, t, hk, hv, dk, dv = 2, 130, 2, 4, 128, 128
        return (l2(_randn(g, b, t, hk, dk)), l2(_randn(g, b, t, hk, dk)), _randn(g, b, t, hv, dv),
                -torch.rand(b, t, hv, generator=g), torch.rand(b, t, hv, generator=g), dk ** -0.5,
                None, torch.tensor([130, 65]))

    def experts_in(g):
        n, h, e, i, k = 24, 256, 16, 128, 8
        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)])
        w = torch.rand(n, k, generator=g)
        return (_randn(g, n, h), ids, w / w.sum(-1, keepdim=True), [0.05 * _randn(g, e, 2 * i, h)],
                0.05 * _randn(g, e, h, i))

    # bf16 outputs of O(1) values carry about 1e-2 of rounding against an fp32 reference
    attn_tol, gdr_tol = (3e-2, 3e-2) if npu else (1e-4, 1e-3)
    dev = device
    checks = [
        OpCheck("rms_norm", norm.RMS_NORM["ref"], norm.RMS_NORM[dev], norm_in, 1e-4),
        OpCheck("add_rms_norm", norm.ADD_RMS_NORM["ref"], norm.ADD_RMS_NORM[dev], add_norm_in, 1e-4),
        OpCheck("gated_rms_norm", norm.GATED_RMS_NORM["ref"], norm.GATED_RMS_NORM[dev], gated_in, 1e-4),
        OpCheck("apply_rope", rope.APPLY_ROPE["ref"], rope.APPLY_ROPE[dev], rope_in, 1e-5),
        OpCheck("attention_prefill", attention.ATTENTION_PREFILL["ref"], attention.ATTENTION_PREFILL[dev],
                prefill_in, attn_tol, half, prompt_rows),
        OpCheck("attention_decode", attention.ATTENTION_DECODE["ref"], attention.ATTENTION_DECODE[dev],
                decode_in, attn_tol, half),
        OpCheck("gdr_prefill (chunk)", gdn.GDR_PREFILL["ref"], gdn.GDR_PREFILL[dev], gdr_in, gdr_tol, half,
                gdr_rows),
        OpCheck("experts_prefill (grouped)", moe.EXPERTS_PREFILL["ref"], moe.EXPERTS_PREFILL[dev], experts_in,
                1e-4),
        OpCheck("experts_decode (gathered)", moe.EXPERTS_DECODE["ref"], moe.EXPERTS_DECODE[dev], experts_in,
                1e-4),
    ]
    if f"{dev}_graph" in moe.EXPERTS_DECODE:
        checks.append(OpCheck("experts_decode (graph form)", moe.EXPERTS_DECODE["ref"],
                              moe.EXPERTS_DECODE[f"{dev}_graph"], experts_in, 1e-4))
    if npu:
        checks += [
            OpCheck("attention_prefill (TND)", attention.ATTENTION_PREFILL["ref"],
                    attention.ATTENTION_PREFILL["npu_tnd"], lambda g: prefill_in(g, 128), attn_tol, torch.bfloat16,
                    prompt_rows),
            OpCheck("attention_decode (TND, paged)", attention.ATTENTION_DECODE["ref"],
                    attention.ATTENTION_DECODE["npu_tnd"], lambda g: decode_in(g, 128), attn_tol, torch.bfloat16),
        ]
    return checks


def tensor_device(device: str) -> str:
    """Where the checks put their tensors: the device itself, or the CPU under the NPU emulator."""
    from perfbench.emulation.npu import tensor_device as emulated  # noqa: PLC0415

    return emulated(device)


def run_op_checks(device: str, seed: int = 0) -> tuple[str, bool]:
    gen = torch.Generator().manual_seed(seed)
    where = tensor_device(device)
    lines, ok = [f"{'op':<30} {'dtype':<9} {'max abs err':>12}  {'tolerance':>9}  verdict"], True
    for check in op_checks(device):
        dtype = str(check.dtype).removeprefix("torch.")
        try:
            err = check.run(gen, where)
            verdict = "ok" if err <= check.tolerance else "MISMATCH"
            ok &= err <= check.tolerance
            lines.append(f"{check.name:<30} {dtype:<9} {err:>12.3e}  {check.tolerance:>9.0e}  {verdict}")
        except Exception as exc:  # noqa: BLE001 - report every op, even the broken ones
            ok = False
            lines.append(f"{check.name:<30} {dtype:<9} {'-':>12}  {check.tolerance:>9.0e}  "
                         f"FAILED: {exc}".splitlines()[0])
    return "\n".join(lines), ok


def doctor(device: str = "auto", check_ops: bool = False) -> int:
    try:
        caps = detect_capabilities(device)
    except (ValueError, RuntimeError) as err:
        raise UserError(f"--device: {err}") from None
    click.echo(support_matrix(caps))
    if not check_ops:
        return 0
    text, ok = run_op_checks(caps.device)
    if caps.device == "npu" and emulation_label():
        text = f"op checks on {emulation_label()}: documented input rules and semantics, CPU kernels\n{text}"
    click.echo("\n" + text)
    return 0 if ok else 1
