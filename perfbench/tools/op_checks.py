"""Every fast op against its pure-torch reference on the same seeded inputs: `perfbench doctor --check-ops` and
`perfbench verify`'s ops item.

    checks = op_checks("npu")                                   # doctor: representative Qwen3.5 shapes
    checks = op_checks("npu", OpShapes.of(config), torch.bfloat16)   # verify: the model's dims and dtype
    err = checks[0].run(torch.Generator().manual_seed(0), tensor_device("npu"))

Each check knows the toggle that binds it (None: bound on every NPU plan) and the torch_npu ops it calls, so a
caller can skip what the plan does not bind and name the op that failed.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from model.backend import timed
from model.config import Qwen3_5MoeTextConfig
from model.ops import attention, gdn, moe, norm, rope

# bf16 outputs of O(1) values carry about 1e-2 of rounding against an fp32 reference (one rounding of values up to
# ~6: half an ulp is 2^-9 relative); the tolerances below leave about twice that
HALF_TOLERANCE = 3e-2
MOE_OPS = ("npu_moe_init_routing_v2", "npu_grouped_matmul", "npu_swiglu", "npu_moe_finalize_routing")


@dataclass(frozen=True)
class OpShapes:
    """The dims the checks draw their inputs at. The defaults are doctor's representative Qwen3.5 shapes (an odd
    hidden size for the norms, head_dim 256, rotary 64, GQA 8, GDN 128/128); `of(config)` takes a model's."""

    hidden: int = 769
    heads: int = 16
    kv_heads: int = 2
    head_dim: int = 256
    rotary_dim: int = 64
    rope_theta: float = 1e7
    gdn_key_heads: int = 2
    gdn_value_heads: int = 4
    gdn_key_dim: int = 128
    gdn_value_dim: int = 128
    moe_hidden: int = 256
    experts: int = 16
    moe_intermediate: int = 128
    top_k: int = 8

    @classmethod
    def of(cls, config: Qwen3_5MoeTextConfig) -> OpShapes:
        return cls(hidden=config.hidden_size, heads=config.num_attention_heads, kv_heads=config.num_key_value_heads,
                   head_dim=config.head_dim, rotary_dim=config.rotary_dim, rope_theta=config.rope_theta,
                   gdn_key_heads=config.linear_num_key_heads, gdn_value_heads=config.linear_num_value_heads,
                   gdn_key_dim=config.linear_key_head_dim, gdn_value_dim=config.linear_value_head_dim,
                   moe_hidden=config.hidden_size, experts=config.num_experts,
                   moe_intermediate=config.moe_intermediate_size, top_k=config.num_experts_per_tok)

    @property
    def tnd_head_dim(self) -> int:
        """TND's documented head dims are 128 and 192 (npu_ops.md 1.3): the model's if it is one, else 128."""
        return self.head_dim if self.head_dim in (128, 192) else 128


@dataclass
class OpCheck:
    """A fast op against its reference on the same inputs (the error: `run`). Inputs are drawn on the CPU
    (seeded), rounded to `dtype` and moved to the device the op runs on; the reference gets the same rounded
    values in fp32."""

    name: str
    ref: Callable
    fast: Callable
    make_inputs: Callable[[torch.Generator], tuple]
    tolerance: float
    dtype: torch.dtype = torch.float32
    # for ops on a right-padded batch: (args) -> [B, T] mask of the rows the op defines (padded rows are not)
    valid_rows: Callable[[tuple], torch.Tensor] | None = None
    toggle: str | None = None  # the toggle whose plan binds the fast op; None: every NPU plan binds it
    npu_ops: tuple[str, ...] = ()  # the torch_npu ops the fast op calls on an NPU
    fp32_args: tuple[int, ...] = ()  # positions of floating arguments that stay fp32 (the fp32 GDN state)

    def _place(self, args: tuple, device: str, dtype: torch.dtype) -> tuple:
        return tuple(_place(a, device, torch.float32 if i in self.fp32_args else dtype) for i, a in enumerate(args))

    def run(self, gen: torch.Generator, device: str) -> float:
        """The largest relative error of any output: max |fast - ref| over max |ref| (NaN or inf: not finite)."""
        args = self.make_inputs(gen)
        fast_args = self._place(args, device, self.dtype)
        ref_args = _place(self._place(args, "cpu", self.dtype), device, torch.float32)
        expected = self.ref(*ref_args)
        got = self.fast(*fast_args)
        exp_t = expected if isinstance(expected, tuple) else (expected,)
        got_t = got if isinstance(got, tuple) else (got,)
        rows = self.valid_rows(args) if self.valid_rows is not None else None
        err = 0.0
        for e, g in zip(exp_t, got_t):
            if isinstance(e, torch.Tensor):
                e, g = e.float().cpu(), g.float().cpu()
                diff = (e - g).abs()
                if rows is not None and diff.shape[:2] == rows.shape:
                    diff, e = diff[rows], e[rows]
                # relative to the largest reference value, whatever the outputs' scale: a kernel 5 % off is 5 % off
                # on outputs of ~0.03 too (an absolute floor of 1 would read it as 0.0015)
                scale = e.abs().max().clamp_min(torch.finfo(torch.float32).tiny).item()
                err = max(err, diff.max().item() / scale)
        return err

    def time(self, gen: torch.Generator, device: str, repeats: int, warm_up: bool = True) -> tuple[float, float]:
        """Median seconds of the fast op and of its reference (the fallback), both on `device` in `dtype`, after
        one untimed call each (`warm_up`; a caller that just ran `run` has had it); bounded by device
        synchronization (model.backend.timed)."""
        args = self._place(self.make_inputs(gen), device, self.dtype)
        medians = []
        for fn in (self.fast, self.ref):
            if warm_up:
                fn(*args)
            medians.append(statistics.median(timed(device.split(":")[0], functools.partial(fn, *args))[1]
                                             for _ in range(repeats)))
        return medians[0], medians[1]


def _place(value: Any, device: str, dtype: torch.dtype) -> Any:
    """Floating tensors to `dtype` on `device`, other tensors to `device`, containers element-wise; always a copy,
    so ops that write their inputs (KV cache, GDN state) never share them with the reference."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.to(device, dtype, copy=True)
        return value.to(device, copy=True)
    if isinstance(value, list | tuple):
        return type(value)(_place(v, device, dtype) for v in value)
    return value


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def _writes(write: Callable[..., None]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """A KV-cache write as a function of its result: the two caches it wrote."""

    def run(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
        write(k_cache, v_cache, k, v, positions)
        return k_cache, v_cache

    return run


def op_checks(device: str, shapes: OpShapes | None = None, dtype: torch.dtype | None = None) -> list[OpCheck]:
    """One check per op family member at `shapes`. `dtype` (a model's) is the dtype of every check; None keeps
    fp32 where the op has it.

    On an NPU the fused attention and gated-delta-rule ops run in bfloat16 (they have no fp32), and the TND
    attention check uses head_dim 128 unless the model's is 128 or 192 (TND's documented head dims)."""
    s = shapes or OpShapes()
    npu = device == "npu"
    half = dtype or (torch.bfloat16 if npu else torch.float32)
    plain = dtype or torch.float32
    plain_tol = 1e-4 if plain == torch.float32 else HALF_TOLERANCE

    def l2(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)

    def norm_in(g: torch.Generator) -> tuple[Any, ...]:
        return _randn(g, 3, 37, s.hidden), 1 + 0.1 * _randn(g, s.hidden), 1e-6

    def add_norm_in(g: torch.Generator) -> tuple[Any, ...]:
        return _randn(g, 3, 37, s.hidden), _randn(g, 3, 37, s.hidden), 1 + 0.1 * _randn(g, s.hidden), 1e-6

    def gated_in(g: torch.Generator) -> tuple[Any, ...]:
        v, d = s.gdn_value_heads, s.gdn_value_dim
        return _randn(g, 2, 37, v, d), _randn(g, 2, 37, v, d), 1 + 0.1 * _randn(g, d), 1e-6

    def rope_in(g: torch.Generator) -> tuple[Any, ...]:
        pos = torch.arange(37).expand(2, 37)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, s.rotary_dim, 2).float() / s.rotary_dim))
        cos, sin = rope.rotary_cos_sin(pos, inv, torch.float32)
        return _randn(g, 2, 37, s.heads, s.head_dim), _randn(g, 2, 37, s.kv_heads, s.head_dim), cos, sin

    def prefill_in(g: torch.Generator, d: int = s.head_dim) -> tuple[Any, ...]:
        return (_randn(g, 3, 70, s.heads, d), _randn(g, 3, 70, s.kv_heads, d), _randn(g, 3, 70, s.kv_heads, d),
                torch.tensor([70, 33, 1]), d ** -0.5)

    def decode_in(g: torch.Generator, d: int = s.head_dim) -> tuple[Any, ...]:
        # 128 cache rows: the paged TND path reads whole 128-token blocks
        return (_randn(g, 3, 1, s.heads, d), _randn(g, 3, 128, s.kv_heads, d), _randn(g, 3, 128, s.kv_heads, d),
                torch.tensor([128, 40, 1]), d ** -0.5)

    def write_in(g: torch.Generator, d: int = s.head_dim) -> tuple[Any, ...]:
        # a prefill-sized write at each row's own offset; rows end at 4, 64 and 128 (the last cache row)
        return (_randn(g, 3, 128, s.kv_heads, d), _randn(g, 3, 128, s.kv_heads, d), _randn(g, 3, 4, s.kv_heads, d),
                _randn(g, 3, 4, s.kv_heads, d), torch.tensor([0, 60, 124]))

    def prompt_rows(args: tuple) -> torch.Tensor:
        # right padding: row t of sequence b is defined for t < seq_lens[b]
        seq_lens, t = args[3], args[0].shape[1]
        return torch.arange(t)[None, :] < seq_lens[:, None]

    def gdr_rows(args: tuple) -> torch.Tensor:
        seq_lens, t = args[7], args[0].shape[1]
        return torch.arange(t)[None, :] < seq_lens[:, None]

    def gdr_in(g: torch.Generator) -> tuple[Any, ...]:
        b, t, hk, hv, dk, dv = 2, 130, s.gdn_key_heads, s.gdn_value_heads, s.gdn_key_dim, s.gdn_value_dim
        return (l2(_randn(g, b, t, hk, dk)), l2(_randn(g, b, t, hk, dk)), _randn(g, b, t, hv, dv),
                -torch.rand(b, t, hv, generator=g), torch.rand(b, t, hv, generator=g), dk ** -0.5,
                None, torch.tensor([130, 65]))

    def gdr_step_in(g: torch.Generator) -> tuple[Any, ...]:
        b, hk, hv, dk, dv = 3, s.gdn_key_heads, s.gdn_value_heads, s.gdn_key_dim, s.gdn_value_dim
        return (l2(_randn(g, b, hk, dk)), l2(_randn(g, b, hk, dk)), _randn(g, b, hv, dv),
                -torch.rand(b, hv, generator=g), torch.rand(b, hv, generator=g), dk ** -0.5,
                0.1 * _randn(g, b, hv, dk, dv))

    def route_in(g: torch.Generator) -> tuple[Any, ...]:
        return _randn(g, 24, s.experts), s.top_k

    def experts_in(g: torch.Generator) -> tuple[Any, ...]:
        n, h, e, i, k = 24, s.moe_hidden, s.experts, s.moe_intermediate, s.top_k
        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)])
        w = torch.rand(n, k, generator=g)
        return (_randn(g, n, h), ids, w / w.sum(-1, keepdim=True), [0.05 * _randn(g, e, 2 * i, h)],
                0.05 * _randn(g, e, h, i))

    attn_tol, gdr_tol = (HALF_TOLERANCE, HALF_TOLERANCE) if half != torch.float32 else (1e-4, 1e-3)
    dev = device
    rms, fia, fia2 = ("npu_rms_norm",), ("npu_fused_infer_attention_score",), ("npu_fused_infer_attention_score_v2",)
    checks = [
        OpCheck("rms_norm", norm.RMS_NORM["ref"], norm.RMS_NORM[dev], norm_in, plain_tol, plain,
                toggle="fused_rmsnorm", npu_ops=rms),
        OpCheck("add_rms_norm", norm.ADD_RMS_NORM["ref"], norm.ADD_RMS_NORM[dev], add_norm_in, plain_tol, plain,
                toggle="fused_rmsnorm", npu_ops=("npu_add_rms_norm",)),
        OpCheck("gated_rms_norm", norm.GATED_RMS_NORM["ref"], norm.GATED_RMS_NORM[dev], gated_in, plain_tol, plain,
                toggle="fused_rmsnorm", npu_ops=rms),
        OpCheck("apply_rope", rope.APPLY_ROPE["ref"], rope.APPLY_ROPE[dev], rope_in,
                1e-5 if plain == torch.float32 else HALF_TOLERANCE, plain, toggle="fused_rope",
                npu_ops=("npu_rotary_mul",)),
        OpCheck("attention_prefill", attention.ATTENTION_PREFILL["ref"], attention.ATTENTION_PREFILL[dev],
                prefill_in, attn_tol, half, prompt_rows, toggle="fused_attention", npu_ops=fia),
        OpCheck("attention_decode", attention.ATTENTION_DECODE["ref"], attention.ATTENTION_DECODE[dev],
                decode_in, attn_tol, half, toggle="fused_attention", npu_ops=fia),
        OpCheck("gdr_prefill (chunk)", gdn.GDR_PREFILL["ref"], gdn.GDR_PREFILL[dev], gdr_in, gdr_tol, half,
                gdr_rows, toggle="chunk_gdr", npu_ops=("npu_chunk_gated_delta_rule",)),
        OpCheck("experts_prefill (grouped)", moe.EXPERTS_PREFILL["ref"], moe.EXPERTS_PREFILL[dev], experts_in,
                plain_tol, plain, toggle="grouped_moe", npu_ops=MOE_OPS),
        OpCheck("experts_decode (gathered)", moe.EXPERTS_DECODE["ref"], moe.EXPERTS_DECODE[dev], experts_in,
                plain_tol, plain, toggle="grouped_moe", npu_ops=MOE_OPS),
    ]
    if f"{dev}_graph" in moe.EXPERTS_DECODE:
        checks.append(OpCheck("experts_decode (graph form)", moe.EXPERTS_DECODE["ref"],
                              moe.EXPERTS_DECODE[f"{dev}_graph"], experts_in, plain_tol, plain, toggle="grouped_moe"))
    # ops whose device implementation is the reference itself off the NPU are checked where they differ
    if gdn.GDR_DECODE[dev] is not gdn.GDR_DECODE["ref"]:
        checks.append(OpCheck("gdr_decode (recurrent)", gdn.GDR_DECODE["ref"], gdn.GDR_DECODE[dev], gdr_step_in,
                              gdr_tol, half, fp32_args=(6,), npu_ops=("npu_recurrent_gated_delta_rule",)))
    if moe.ROUTE[dev] is not moe.ROUTE["ref"]:
        checks.append(OpCheck("route (gating top-k)", moe.ROUTE["ref"], moe.ROUTE[dev], route_in, plain_tol, plain,
                              toggle="grouped_moe", npu_ops=("npu_moe_gating_top_k_softmax",)))
    if attention.WRITE_KV[dev] is not attention.WRITE_KV["ref"]:
        checks.append(OpCheck("write_kv", _writes(attention.WRITE_KV["ref"]), _writes(attention.WRITE_KV[dev]),
                              write_in, 0.0, half, npu_ops=("scatter_update_",)))
    if npu:
        d = s.tnd_head_dim
        checks += [
            OpCheck("attention_prefill (TND)", attention.ATTENTION_PREFILL["ref"],
                    attention.ATTENTION_PREFILL["npu_tnd"], lambda g: prefill_in(g, d), attn_tol, torch.bfloat16,
                    prompt_rows, toggle="fused_attention", npu_ops=fia2),
            OpCheck("attention_decode (TND, paged)", attention.ATTENTION_DECODE["ref"],
                    attention.ATTENTION_DECODE["npu_tnd"], lambda g: decode_in(g, d), attn_tol, torch.bfloat16,
                    toggle="fused_attention", npu_ops=fia2),
            OpCheck("write_kv (TND, paged)", _writes(attention.WRITE_KV["ref"]),
                    _writes(attention.WRITE_KV["npu_tnd"]), lambda g: write_in(g, d), 0.0, torch.bfloat16,
                    toggle="fused_attention", npu_ops=("npu_scatter_nd_update_",)),
        ]
    return checks


def tensor_device(device: str) -> str:
    """Where the checks put their tensors: the device itself, or the CPU under the NPU emulator."""
    from perfbench.emulation.npu import tensor_device as emulated

    return emulated(device)


def run_op_checks(device: str, seed: int = 0) -> tuple[str, bool]:
    """doctor's table: one line per check with its max relative error, tolerance and verdict; and whether all
    passed."""
    gen = torch.Generator().manual_seed(seed)
    where = tensor_device(device)
    lines, ok = [f"{'op':<30} {'dtype':<9} {'max error':>12}  {'tolerance':>9}  verdict"], True
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
