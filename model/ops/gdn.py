"""Gated delta rule (the Qwen3.5 Gated DeltaNet core): token-recurrence reference, chunked CPU path, fla on
CUDA, torch_npu on Ascend.

Per v-head, with state S [Dk, Dv] (our layout, the HF/FLA one) and log-decay g_t <= 0, beta_t in (0, 1):

    S   = S * exp(g_t)                              # decay
    S  += k_t (outer) (beta_t * (v_t - k_t^T S))    # delta-rule write
    o_t = scale * q_t^T S

q and k arrive L2-normalised (x * rsqrt(sum(x^2) + 1e-6), as HF) and unscaled; `scale` (Dk**-0.5) is
explicit. v-head j reads k-head j // (Hv // Hk) (repeat_interleave semantics). States are fp32 [B, Hv, Dk, Dv]
everywhere in perfbench; the NPU wrappers convert to and from the NPU layout (B, Nv, Dv, Dk) bf16
(npu_ops.md 1.4).

Shape letters: B batch, T tokens, Hk key heads, Hv value heads, Dk key dim, Dv value dim.
Batches are right-padded; `seq_lens` [B] gives the valid length of each row (None = all T).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from model.ops.inductor import fused_call


def chunk_size(head_k_dim: int) -> int:
    """Tokens per chunk in `gdr_prefill_cpu`. Smaller chunks halve the intra-chunk work per token (C x C
    blocks, the triangular solves) but double the sequential per-chunk state updates ([Dk, Dk] x [Dk, Dv]),
    so the best size grows with the head dim. Measured here (`python benchmarks/gdr_chunk.py`, T 512-2048,
    B 1-4, 2 cores, three runs): at Dk = 32, 32/64 time ratios of 0.82-0.92 except B=1 T=512 (0.87-1.04, within
    noise); at Dk = 64 and 128, 1.05-1.54."""
    return 32 if head_k_dim <= 32 else 64


# Decay factors below e^LOG_DECAY_FLOOR are flushed to exactly 0 in the chunked path (see `_decay_exp_`).
LOG_DECAY_FLOOR = -30.0
_DECAY_FLUSH = math.exp(LOG_DECAY_FLOOR) * 1.001  # exp(floor) as computed in fp32, with margin
# C x C entries per slab of chunks in `gdr_prefill_cpu` (1 MiB per fp32 C x C tensor; 2^17..2^19 measured
# within 10% of each other here, 2^20 slower from cache misses).
SLAB_ELEMS = 1 << 18


def _valid_mask(seq_lens: Tensor | None, B: int, T: int, device: torch.device) -> Tensor | None:
    """[B, T] bool, True where t < seq_lens[b]; None when every position is valid."""
    if seq_lens is None:
        return None
    return torch.arange(T, device=device)[None, :] < seq_lens.to(device)[:, None]


# ----------------------------------------------------------------------------------------------------
# Reference: the token recurrence (the unfused baseline of the `chunk_gdr` toggle)
# ----------------------------------------------------------------------------------------------------


def gdr_prefill_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float,
    initial_state: Tensor | None = None,
    seq_lens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Gated delta rule over a right-padded batch, one token at a time (vectorised over B and heads).

    Follows the per-step formula of torch_npu.npu_chunk_gated_delta_rule (npu_ops.md 2.6) in our state layout.

    Args:
        q, k: [B, T, Hk, Dk], L2-normalised, unscaled.
        v: [B, T, Hv, Dv]; Hv a multiple of Hk.
        g: [B, T, Hv] log-decay (<= 0). beta: [B, T, Hv] in (0, 1).
        scale: multiplies q (Dk**-0.5 for Qwen3.5).
        initial_state: [B, Hv, Dk, Dv] or None (zeros).
        seq_lens: [B] int valid lengths or None (all T). Positions t >= seq_lens[b] leave row b's state as is.

    Returns:
        o: [B, T, Hv, Dv] in v.dtype (values at padded positions are unspecified but finite).
        final_state: [B, Hv, Dk, Dv] fp32, the state after each row's last valid token.
    """
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    r = Hv // Hk
    # Everything in fp32; q/k heads expanded to the v heads they serve.
    qf = q.float().repeat_interleave(r, dim=2) * scale
    kf = k.float().repeat_interleave(r, dim=2)
    vf, gf, bf = v.float(), g.float(), beta.float()
    S = (torch.zeros(B, Hv, Dk, Dv, device=q.device) if initial_state is None
         else initial_state.float().clone())
    valid = _valid_mask(seq_lens, B, T, q.device)
    o = torch.empty(B, T, Hv, Dv, device=q.device)
    for t in range(T):
        k_t = kf[:, t]                                                        # [B, Hv, Dk]
        S_dec = S * gf[:, t].exp()[..., None, None]
        err = vf[:, t] - torch.einsum("bhk,bhkv->bhv", k_t, S_dec)            # v_t - k_t^T S
        S_new = S_dec + k_t[..., :, None] * (bf[:, t, :, None] * err)[..., None, :]
        # Padded steps keep the previous state, so the final state is the one after the last valid token.
        S = S_new if valid is None else torch.where(valid[:, t, None, None, None], S_new, S)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", qf[:, t], S)
    return o.to(v.dtype), S


def gdr_decode_ref(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, state: Tensor
) -> Tensor:
    """One decode token of the gated delta rule; `state` is updated in place.

    Used for decode on CPU and CUDA in both plans (`chunk_gdr` only affects prefill), so it is kept to a few
    ops and traces under torch.compile(fullgraph=True): no host syncs, no data-dependent control flow.

    Args:
        q, k: [B, Hk, Dk], L2-normalised, unscaled.
        v: [B, Hv, Dv]. g, beta: [B, Hv].
        scale: multiplies q.
        state: [B, Hv, Dk, Dv] fp32, contiguous; updated in place.

    Returns:
        o: [B, Hv, Dv] in v.dtype.
    """
    B, Hk, Dk = k.shape
    Hv, Dv = v.shape[1], v.shape[2]
    r = Hv // Hk
    # NOTE: viewing the v heads as [Hk, r] lets q/k broadcast over the r v-heads they serve, so no
    # repeat_interleave copy is made; `view` (not reshape) makes a non-contiguous state fail loudly instead of
    # silently updating a copy.
    S = state.view(B, Hk, r, Dk, Dv)
    qf, kf = q.float(), k.float()
    decay = g.float().exp().view(B, Hk, r, 1)
    # One matmul reads the old state for both k^T S and q^T S; the decay is applied to the products.
    kS, qS = torch.matmul(torch.stack((kf, qf), dim=2).unsqueeze(2), S).unbind(-2)    # [B, Hk, r, Dv] each
    delta = beta.float().view(B, Hk, r, 1) * (v.float().view(B, Hk, r, Dv) - decay * kS)
    # q^T S_new = decay * q^T S + (q . k) * delta, so the output needs no second pass over the state.
    qk = (qf * kf).sum(-1).view(B, Hk, 1, 1)
    o = scale * (decay * qS + qk * delta)
    S.mul_(decay.unsqueeze(-1)).addcmul_(kf.view(B, Hk, 1, Dk, 1), delta.unsqueeze(-2))
    return o.reshape(B, Hv, Dv).to(v.dtype)


# ----------------------------------------------------------------------------------------------------
# CPU: chunked (WY / UT transform) algorithm
# ----------------------------------------------------------------------------------------------------


def _decay_exp_(log_decay: Tensor) -> Tensor:
    """exp of log-decays (<= 0, or -inf) in place, with values below e^LOG_DECAY_FLOOR flushed to exactly 0.

    NOTE: within a chunk, log-decays reach hundreds for fast-forgetting heads (Qwen3.5's g goes below -10 per
    token), and exp then lands in or below the fp32 subnormal range, where x86 arithmetic is slow (measured
    here: bmm 80x, exp 40x; exp is 4x slower even for -inf and for results that underflow to 0). So the
    argument is clamped at the floor, where exp is still a normal number, and the clamped entries are zeroed
    after. Flushing at e^-30 (~1e-13, a millionth of an fp32 ulp relative to the undecayed terms) also keeps
    products of two decay factors normal; the token recurrence multiplies by e^g <= 1 per step and never
    forms these products.
    """
    # F.threshold_ exists at run time; torch's stubs omit it
    F.threshold_(log_decay, LOG_DECAY_FLOOR, LOG_DECAY_FLOOR).exp_()  # type: ignore[attr-defined]
    return F.threshold_(log_decay, _DECAY_FLUSH, 0.0)  # type: ignore[attr-defined]


def gdr_prefill_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float,
    initial_state: Tensor | None = None,
    seq_lens: Tensor | None = None,
    *,
    chunk_terms: Callable[..., tuple[Tensor, ...]] | None = None,
) -> tuple[Tensor, Tensor]:
    """Chunked gated delta rule (chunks of `chunk_size(Dk)` tokens) in eager torch; same contract as
    `gdr_prefill_ref`. Any device (the CUDA path when fla is not installed). `chunk_terms` replaces
    `_chunk_terms` (the compiled form in `gdr_prefill_cpu`).

    Within a chunk of C tokens with inclusive log-decay prefix sums G_i and chunk-start state S0, the writes
    u_i = beta_i (v_i - k_i^T S_{i-1}') solve the unit-lower-triangular system

        (I + A) U = beta V - (beta e^G K) S0,   A_ij = beta_i e^(G_i - G_j) (k_i . k_j)   (j < i)

    so U = U' - W S0 with W = (I + A)^-1 (beta e^G K) and U' = (I + A)^-1 (beta V), both independent of S0 and
    computed for all chunks at once. Then, with P_ij = scale e^(G_i - G_j) (q_i . k_j) (j <= i):

        O    = scale e^G Q S0 + P (U' - W S0)
        S_C  = (e^(G_C) I - Kd^T W) S0 + Kd^T U',   Kd_j = e^(G_C - G_j) k_j

    The only sequential part is one baddbmm per chunk on [Dk, Dk] x [Dk, Dv] (the chunk-start states); all
    else is batched over B, heads and chunks. q.k and k.k products are formed once per k-head and shared by
    its Hv/Hk v-heads. Ragged rows: padded positions get g = 0 and beta = 0, which leaves the state unchanged
    (u = 0, no decay). Differs from the reference only in rounding, and in flushing decay factors below
    e^LOG_DECAY_FLOOR to 0 (see `_decay_exp_`).
    """
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    r = Hv // Hk
    C = chunk_size(Dk)
    Nc = (T + C - 1) // C
    pad = Nc * C - T
    dev = q.device

    gf, bf = g.float(), beta.float()
    valid = _valid_mask(seq_lens, B, T, dev)
    if valid is not None:
        gf = gf * valid[..., None]
        bf = bf * valid[..., None]

    def chunked(x: Tensor, heads: tuple[int, int]) -> Tensor:
        # [B, T, H, (D)] -> [B, Hk, r or 1, Nc, C, (D)], zero-padded along T (zero g and beta: inert steps).
        x = x.float().movedim(1, 2)
        x = F.pad(x, (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x, (0, pad))
        return x.reshape(B, heads[0], heads[1], Nc, C, *x.shape[3:])

    qc, kc = chunked(q, (Hk, 1)), chunked(k, (Hk, 1))                  # [B, Hk, 1, Nc, C, Dk]
    vc = chunked(v, (Hk, r))                                            # [B, Hk, r, Nc, C, Dv]
    gc, bc = chunked(gf, (Hk, r)), chunked(bf, (Hk, r))                 # [B, Hk, r, Nc, C]

    S = (torch.zeros(B * Hv, Dk, Dv, device=dev) if initial_state is None
         else initial_state.float().reshape(B * Hv, Dk, Dv))
    # NOTE: chunks are processed in slabs of about SLAB_ELEMS C x C entries: the slab's C x C blocks stay
    # cache-sized and memory stays bounded on long prompts, for a few dozen extra op calls per slab.
    per_slab = max(1, SLAB_ELEMS // (B * Hv * C * C))
    terms_of = chunk_terms or _chunk_terms
    outs = []
    for c0 in range(0, Nc, per_slab):
        sl = slice(c0, c0 + per_slab)
        M, N, Qs, PU = terms_of(qc[:, :, :, sl], kc[:, :, :, sl], vc[:, :, :, sl], gc[:, :, :, sl], bc[:, :, :, sl],
                                scale)
        o, S = _chunk_outputs(M, N, Qs, PU, S)
        outs.append(o.view(B, Hk, r, -1, C, Dv))
    o = outs[0] if len(outs) == 1 else torch.cat(outs, dim=3)          # [B, Hk, r, Nc, C, Dv]
    # One copy back to [B, T, Hv, Dv], casting on the way.
    out = torch.empty(B, T, Hv, Dv, dtype=v.dtype, device=dev)
    out.copy_(o.reshape(B, Hv, Nc * C, Dv)[:, :, :T].transpose(1, 2))
    return out, S.reshape(B, Hv, Dk, Dv)


def gdr_prefill_cpu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float,
    initial_state: Tensor | None = None,
    seq_lens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """`gdr_prefill_chunked` with the state-independent chunk terms compiled by inductor: the decay, mask and
    scaling passes fuse into a few loops (the matmuls and triangular solves stay library calls), which matters
    once the slab's C x C blocks outgrow the cache (`python benchmarks/gdr_chunk.py`: 0.82-0.94x the eager
    time over its six shapes). The inter-chunk recurrence stays eager, so the graph has no loop over chunks;
    shapes compile in dynamo's automatic mode (static kernels for the first shape, one dynamic recompile when
    the prompt length or batch changes). The first call pays the compile (~5 s here, less with a warm inductor
    cache)."""
    return gdr_prefill_chunked(q, k, v, g, beta, scale, initial_state, seq_lens,
                               chunk_terms=_chunk_terms_compiled)


def _chunk_terms_compiled(*args: Any) -> tuple[Tensor, ...]:
    return fused_call(_chunk_terms, *args, dynamic=None)


def _chunk_terms(
    qc: Tensor, kc: Tensor, vc: Tensor, gc: Tensor, bc: Tensor, scale: float
) -> tuple[Tensor, ...]:
    """Everything about a slab of consecutive chunks that does not depend on the chunk-start states.

    Args: qc, kc [B, Hk, 1, n, C, Dk]; vc [B, Hk, r, n, C, Dv]; gc, bc [B, Hk, r, n, C] (fp32).
    Returns, with the (B, Hk, r) heads flattened to BH = B * Hv and X = BH * n chunk blocks:
        M [BH, n, Dk, Dk] and N [BH, n, Dk, Dv]: S_end = M S_start + N per chunk;
        Qs [X, C, Dk] and PU [X, C, Dv]: o = Qs S0 + PU (Qs = Qg - P W, PU = P U').
    """
    B, Hk, r, n, C = gc.shape
    Dk, Dv = kc.shape[-1], vc.shape[-1]
    BH, X = B * Hk * r, B * Hk * r * n
    G = gc.cumsum(-1)
    G_last = G[..., -1:]
    eG = _decay_exp_(G.clone())
    # Decay and score matrices are built transposed ([.., j, i]) and used through .mT views: the transposed
    # A is then already in the column-major layout LAPACK's triangular solve wants (no copy of the C x C
    # blocks), and bmm takes the transposed operand for free. Masking before exp keeps the (positive)
    # differences above the causal triangle from overflowing into inf * 0 = nan. The C x C blocks are the
    # largest tensors here, so they are updated in place rather than reallocated.
    # NOTE: the -inf mask is added (masked_fill_ is ~4x slower here); -inf + finite stays -inf, never nan.
    anti_causal = torch.full((C, C), float("-inf"), device=gc.device).tril_(-1)
    decay_t = _decay_exp_((G[..., None, :] - G[..., :, None]).add_(anti_causal))
    P = ((kc @ qc.mT).mul_(scale) * decay_t).mT                         # [B, Hk, r, n, C, C]
    # A0[i, j] = beta_i (k_i . k_j) and A[i, j] = A0[i, j] e^(G_i - G_j); only strict lower triangles are read.
    A0 = ((kc @ kc.mT) * bc[..., None, :]).mT
    A = decay_t.mul_(A0.mT).mT
    # NOTE: W = (I + A)^-1 (beta e^G K) = e^G (I + A0)^-1 (beta K) (A = D A0 D^-1 with D = diag(e^G)), so W is
    # solved without decays and scaled after. Solving with e^G inside instead chains decay products below
    # the fp32 normal range (solution rows ~ e^G_i, G_i down to hundreds): subnormal operands made the solve
    # and every matmul that reads W 3-4x slower (measured at Qwen3.5-like g; FTZ/DAZ only reaches the
    # calling thread, not the OpenMP workers). U' = (I + A)^-1 (beta V) stays O(1).
    # The right-hand sides are built transposed too (.mT views of contiguous [.., D, C]): the solve then copies
    # them into its column-major result without a transposing pass.
    W = torch.linalg.solve_triangular(A0, (kc.mT * bc[..., None, :]).mT, upper=False, unitriangular=True)
    U = torch.linalg.solve_triangular(A, (vc.mT * bc[..., None, :]).mT, upper=False, unitriangular=True)

    # Flatten (B, Hk, r, n) into one batch dim X = (B*Hv, n) in that order (views: every batch block is whole).
    W, U, P = W.reshape(X, C, Dk), U.reshape(X, C, Dv), P.reshape(X, C, C)
    dC = _decay_exp_(G_last.clone()).reshape(X, 1, 1)
    # Transition M = e^(G_C) I - Kd^T W = e^(G_C) (I - K^T W0) with W0 the undecayed solution (Kd_j e^(G_j) =
    # e^(G_C) k_j), so no product of two decay factors is formed; write N = Kd^T U'.
    M = torch.bmm(kc.expand(B, Hk, r, n, C, Dk).reshape(X, C, Dk).mT, W).mul_(-dC)
    M.diagonal(dim1=-2, dim2=-1).add_(dC[..., 0])
    Kd = (_decay_exp_(G_last - G)[..., None] * kc).reshape(X, C, Dk)
    N = torch.bmm(Kd.mT, U)
    W.mul_(eG.reshape(X, C, 1))                                         # W = e^G W0
    Qg = ((scale * eG)[..., None] * qc).reshape(X, C, Dk)
    # o = Qg S0 + P (U' - W S0) = (Qg - P W) S0 + P U': both factors are state-independent, so they are formed
    # here and the outputs need one matmul per chunk on the start states.
    Qs = torch.baddbmm(Qg, P, W, alpha=-1)
    PU = torch.bmm(P, U)
    return M.view(BH, n, Dk, Dk), N.view(BH, n, Dk, Dv), Qs, PU


def _chunk_outputs(M: Tensor, N: Tensor, Qs: Tensor, PU: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    """The chunk-start states of a slab (one baddbmm per chunk from S [BH, Dk, Dv], the state before its
    first chunk), then every output from its chunk's start state S0: o = Qs S0 + PU.
    Returns (o [X, C, Dv], S after the slab)."""
    BH, n, Dk, Dv = N.shape
    starts = torch.empty(BH, n, Dk, Dv, device=S.device)
    for c in range(n):
        starts[:, c] = S
        S = torch.baddbmm(N[:, c], M[:, c], S)
    return PU.baddbmm_(Qs, starts.view(BH * n, Dk, Dv)), S


# ----------------------------------------------------------------------------------------------------
# CUDA: flash-linear-attention
# ----------------------------------------------------------------------------------------------------


def gdr_prefill_cuda(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float,
    initial_state: Tensor | None = None,
    seq_lens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """fla's Triton `chunk_gated_delta_rule`; same contract as `gdr_prefill_ref`.

    NOTE: needs fla-core >= 0.6, whose kernel takes q/k with Hk heads and v/g/beta with Hv heads (GVA,
    Hv % Hk == 0) and a state [N, Hv, Dk, Dv] in our layout, so no layout change or repeat_interleave is made.
    Ragged rows use the same masking as `gdr_prefill_cpu` (g = 0, beta = 0 at padded positions) on the padded
    batch instead of packing tokens for `cu_seqlens`: no host sync, no gather/scatter copies, static shapes
    (CUDA-graph friendly), at the cost of computing the padded positions. Without fla the plan binds
    `gdr_prefill_cpu` (plain torch, any device) and says so; this function never switches silently.
    """
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError as e:
        raise RuntimeError("gdr_prefill_cuda needs flash-linear-attention; `pip install fla-core` "
                           "or bind gdr_prefill_cpu (pure torch) for this device") from e
    valid = _valid_mask(seq_lens, q.shape[0], q.shape[1], q.device)
    if valid is not None:
        g = g * valid[..., None]
        beta = beta * valid[..., None]
    h0 = None if initial_state is None else initial_state.float()
    # The kernel's dots take operands of one dtype; the layer hands q/k normalised in fp32 beside v in the
    # model dtype, so q, k and beta follow v.
    o, final_state = chunk_gated_delta_rule(
        q.to(v.dtype), k.to(v.dtype), v, g.float(), beta.to(v.dtype), scale=scale, initial_state=h0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=False,
    )
    return o.to(v.dtype), final_state.float()


# ----------------------------------------------------------------------------------------------------
# Ascend NPU: torch_npu ops, and pure-torch references of those ops' documented semantics
# ----------------------------------------------------------------------------------------------------


def _gdr_steps_vk(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, S: Tensor
) -> tuple[Tensor, Tensor]:
    """Token steps of one sequence in the NPU layout: q, k [L, Nv, Dk] (per v-head, q already scaled),
    v [L, Nv, Dv], g, beta [L, Nv], S [Nv, Dv, Dk], all fp32. Returns (o [L, Nv, Dv], S)."""
    o = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for t in range(v.shape[0]):
        S = S * g[t].exp()[:, None, None]
        err = v[t] - torch.einsum("hvk,hk->hv", S, k[t])
        S = S + (beta[t][:, None] * err)[:, :, None] * k[t][:, None, :]
        o[t] = torch.einsum("hvk,hk->hv", S, q[t])
    return o, S


def chunk_gated_delta_rule_ref(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    beta: Tensor,
    initial_state: Tensor,
    actual_seq_lengths: Tensor,
    scale: float,
    g: Tensor,
) -> tuple[Tensor, Tensor]:
    """torch_npu.npu_chunk_gated_delta_rule semantics (npu_ops.md 2.6), as a token loop per sequence.

    Args:
        query, key: (T, Nk, Dk) packed tokens (TND). value: (T, Nv, Dv). beta, g: (T, Nv).
        initial_state: (B, Nv, Dv, Dk) (the NPU layout: transposed relative to ours).
        actual_seq_lengths: (B,) per-sequence lengths (not cumulative), summing to T.
        scale: multiplies the query.

    Returns:
        out (T, Nv, Dv) in value.dtype; final_state (B, Nv, Dv, Dk) in initial_state.dtype.
    """
    r = value.shape[1] // query.shape[1]
    qf = query.float().repeat_interleave(r, dim=1) * scale
    kf = key.float().repeat_interleave(r, dim=1)
    vf, gf, bf = value.float(), g.float(), beta.float()
    out = torch.empty(value.shape, dtype=torch.float32, device=value.device)
    final = initial_state.float().clone()
    start = 0
    for b, L in enumerate(actual_seq_lengths.tolist()):
        s = slice(start, start + L)
        out[s], final[b] = _gdr_steps_vk(qf[s], kf[s], vf[s], gf[s], bf[s], final[b])
        start += L
    return out.to(value.dtype), final.to(initial_state.dtype)


def recurrent_gated_delta_rule_ref(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    state: Tensor,
    *,
    beta: Tensor,
    scale: float,
    actual_seq_lengths: Tensor,
    ssm_state_indices: Tensor,
    num_accepted_tokens: Tensor | None = None,
    g: Tensor | None = None,
    gk: Tensor | None = None,
) -> Tensor:
    """torch_npu.npu_recurrent_gated_delta_rule semantics (npu_ops.md 2.7); `state` is updated in place.

    Args:
        query, key: (T, Nk, Dk). value: (T, Nv, Dv). beta, g: (T, Nv) (g None = no decay).
        state: (BlockNum, Nv, Dv, Dk). actual_seq_lengths: (B,) tokens per sequence.
        ssm_state_indices: (T,) state slot per token: sequence i starting at token s reads slot
            ssm_state_indices[s + num_accepted_tokens[i] - 1] (or [s] when None) and writes each token's new
            state to ssm_state_indices[t].
        gk: per-key decay; not modelled here (Qwen3.5 does not use it).

    Returns:
        out (T, Nv, Dv) in value.dtype.
    """
    if gk is not None:
        raise ValueError("recurrent_gated_delta_rule_ref models `gk=None` only (Qwen3.5 has no per-key "
                         "decay)")
    r = value.shape[1] // query.shape[1]
    qf = query.float().repeat_interleave(r, dim=1) * scale
    kf = key.float().repeat_interleave(r, dim=1)
    vf, bf = value.float(), beta.float()
    gf = torch.zeros_like(bf) if g is None else g.float()
    idx = ssm_state_indices.tolist()
    accepted = [1] * len(actual_seq_lengths) if num_accepted_tokens is None else num_accepted_tokens.tolist()
    out = torch.empty(value.shape, dtype=torch.float32, device=value.device)
    start = 0
    for i, L in enumerate(actual_seq_lengths.tolist()):
        S = state[idx[start + accepted[i] - 1]].float()
        for t in range(start, start + L):
            o_t, S = _gdr_steps_vk(qf[t:t + 1], kf[t:t + 1], vf[t:t + 1], gf[t:t + 1], bf[t:t + 1], S)
            out[t] = o_t[0]
            state[idx[t]] = S.to(state.dtype)
        start += L
    return out.to(value.dtype)


def _gdr_prefill_tnd(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float,
    initial_state: Tensor | None, seq_lens: Tensor | None, chunk_op: Callable[..., tuple[Tensor, Tensor]],
) -> tuple[Tensor, Tensor]:
    """Pack a right-padded batch to TND, call `chunk_op` with npu_chunk_gated_delta_rule's arguments, unpack.

    Separate from `gdr_prefill_npu` so the packing, dtypes and transposes are tested on CPU against
    `chunk_gated_delta_rule_ref`.
    """
    B, T = q.shape[0], q.shape[1]
    Hv, Dv, Dk = v.shape[2], v.shape[3], q.shape[3]
    bf16 = torch.bfloat16
    if seq_lens is None:
        lens = torch.full((B,), T, dtype=torch.int32, device=q.device)
        rows = None
    else:
        lens = seq_lens.to(device=q.device, dtype=torch.int32)
        # NOTE: packing makes the token count data-dependent (host sync); acceptable in eager prefill.
        valid = _valid_mask(lens, B, T, q.device)
        assert valid is not None  # lens is given
        rows = valid.reshape(-1).nonzero().squeeze(1)

    def pack(x: Tensor) -> Tensor:
        x = x.reshape(B * T, *x.shape[2:])
        return x if rows is None else x.index_select(0, rows)

    s0 = (torch.zeros(B, Hv, Dv, Dk, dtype=bf16, device=q.device) if initial_state is None
          else initial_state.transpose(-1, -2).to(bf16).contiguous())
    out, s1 = chunk_op(
        pack(q).to(bf16), pack(k).to(bf16), pack(v).to(bf16),
        beta=pack(beta).to(bf16), initial_state=s0, actual_seq_lengths=lens, scale=scale, g=pack(g).float(),
    )
    if rows is None:
        o = out.view(B, T, Hv, Dv)
    else:
        o = out.new_zeros(B * T, Hv, Dv).index_copy_(0, rows, out).view(B, T, Hv, Dv)
    return o.to(v.dtype), s1.transpose(-1, -2).float().contiguous()


def _gdr_decode_bnvd(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, state: Tensor,
    recurrent_op: Callable[..., Tensor],
) -> Tensor:
    """Call `recurrent_op` with npu_recurrent_gated_delta_rule's decode arguments, one token per row.

    NOTE: our fp32 [B, Hv, Dk, Dv] state is converted to a bf16 (B, Nv, Dv, Dk) copy and written back after
    the op: two extra passes over the state per GDN layer per step (read 4 B + write 2 B, then read 2 B +
    write 4 B per element, about 3x the op's own state traffic), and the state is rounded to bf16 each step,
    as in the recipe.
    A deployment keeps the state in the NPU layout; perfbench keeps one layout so plans stay comparable.
    """
    B = q.shape[0]
    bf16 = torch.bfloat16
    s = state.transpose(-1, -2).to(bf16).contiguous()
    o = recurrent_op(
        q.to(bf16), k.to(bf16), v.to(bf16), s, beta=beta.to(bf16), scale=scale,
        actual_seq_lengths=torch.ones(B, dtype=torch.int32, device=q.device),
        ssm_state_indices=torch.arange(B, dtype=torch.int32, device=q.device), g=g.float(),
    )
    state.copy_(s.transpose(-1, -2))
    return o.to(v.dtype)


def gdr_prefill_npu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float,
    initial_state: Tensor | None = None,
    seq_lens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """torch_npu.npu_chunk_gated_delta_rule (npu_ops.md 2.6); same contract as `gdr_prefill_ref`.

    Differs from the reference in precision: q, k, v, beta and the initial state go in as bf16 (the op's
    dtypes on A2/A3), g as fp32; the final state comes back bf16 and is widened to fp32. The padded batch is
    packed to TND with per-sequence `actual_seq_lengths` (not cumulative, npu_ops.md 1.4).
    NOTE: the op documents -1 <= g <= 0 as its accuracy domain; Qwen3.5's g can be below -1 (npu_ops.md 1.4),
    so compare against `gdr_prefill_ref` on hardware before trusting long prompts.
    """
    import torch_npu

    return _gdr_prefill_tnd(q, k, v, g, beta, scale, initial_state, seq_lens,
                            torch_npu.npu_chunk_gated_delta_rule)


def gdr_decode_npu(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, state: Tensor
) -> Tensor:
    """torch_npu.npu_recurrent_gated_delta_rule (npu_ops.md 2.7); same contract as `gdr_decode_ref`.

    bf16 inputs and state (see `_gdr_decode_bnvd` for the cost of keeping our fp32 state in sync).
    """
    import torch_npu

    return _gdr_decode_bnvd(q, k, v, g, beta, scale, state, torch_npu.npu_recurrent_gated_delta_rule)


# Device (or plan variant) -> implementation, for the plan binder. The eager chunked kernel serves CUDA when fla
# is not installed ("cuda_torch") and CPU without a C++ compiler ("cpu_eager": no inductor-compiled chunk terms);
# decode uses the lean recurrence off-NPU in every plan.
GDR_PREFILL: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "ref": gdr_prefill_ref,
    "cpu": gdr_prefill_cpu,
    "cuda": gdr_prefill_cuda,
    "cuda_torch": gdr_prefill_chunked,
    "cpu_eager": gdr_prefill_chunked,
    "npu": gdr_prefill_npu,
}
GDR_DECODE: dict[str, Callable[..., Tensor]] = {
    "ref": gdr_decode_ref,
    "cpu": gdr_decode_ref,
    "cuda": gdr_decode_ref,
    "npu": gdr_decode_npu,
}
