"""Analytic cost of one prefill and one decode step of Qwen3.5-MoE on one rank: FLOPs, bytes moved and bytes
exchanged per collective, per op, from the same local sizes and sharding plan the layers are built from.

Why here and not in perfbench/: the counts follow the model's structure (which projections a layer makes,
which group each weight is split over, which collective a layer issues, what the merged/grouped/EP toggles
change), so they belong next to the layers and change in the same commit as them; the harness only prices
them on a device (perfbench/roofline/). Nothing here allocates a tensor: sizes come from `LocalSizes` and
`SHARDING_PLAN` (model/parallel.py), so a 397B config costs milliseconds without weights.

Counting rules (docs/roofline.md has the full list):
- Everything is per rank. Attention-DP replicas (attn_tp < world) repeat the same work, so they cost the same.
- A GEMM [N, in] x [in, out] is 2*N*in*out FLOPs, reads its weight once (in*out*e bytes), reads its input
  (N*in*e) and writes its output (N*out*e). e is the model dtype's size; GDN recurrent state is fp32.
- Separate projections (merged_projections off) read the same input once per part and launch once per part.
- Prefill runs over the right-padded [B, T] batch (T = longest prompt), as the model does; attention and the
  GDN recurrence count each prompt's own length (causal: l(l+1)/2 query-key pairs).
- Decode is one step at the mean KV length of the output (prompt + output_len / 2), exact for counts that
  are linear in the KV length; there are output_len - 1 decode steps (prefill makes the first token).
- Routed experts read the weights of the experts that are hit: E_r * (1 - (1 - K/E)^N) expected distinct
  experts for N tokens drawing K of E uniformly (E_r: this rank's experts), except the gathered decode kernels
  (cuda, cpu graph) that read one expert per (token, k) pair. Expert FLOPs follow the pairs a rank computes
  (N*K, or N*K/ep under EP with balanced routing).
- Collective payloads follow model/ops/comm.py's `CommEvent`: all_reduce the tensor, all_gather the local
  block, all_to_all the rows addressed to other ranks. Wire bytes (what a link carries per rank) are
  2(n-1)/n of the payload for a ring all_reduce and (n-1) blocks for all_gather.
- Elementwise work is counted where it moves an activation (norms, RoPE, gates, conv, beta and decay); the
  routing weights' scaling inside the expert kernels is not. Host time (launches, syncs) is not a roofline quantity:
  it is reported as a launch count beside the roofline.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from model.config import Qwen3_5MoeTextConfig
from model.parallel import SHARDING_PLAN, LocalSizes, ParallelLayout, ceil_div
from model.parallel_config import ParallelConfig

# Op categories, the same names perfbench/profiling/categories.py gives measured ops, so estimates and
# measurements join on (phase, category).
CATEGORIES = ("attention", "gdn", "moe-routing", "moe-experts", "norm", "rope", "matmul", "communication",
              "other")
GDR_CHUNK = 64  # chunk length of the chunked delta rule (npu_chunk_gated_delta_rule, fla, the CPU kernel)
DEVICES = ("npu", "cuda", "cpu")  # the plan binds different expert and EP kernels per device


class CostError(ValueError):
    """A workload or layout the cost model cannot describe; the message names the field."""


@dataclass(frozen=True)
class CostWorkload:
    """One batch: prompt lengths (ragged allowed), decode steps, element size of the model dtype."""

    prompt_lens: tuple[int, ...]
    output_len: int
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        if not self.prompt_lens or any(n < 1 for n in self.prompt_lens):
            raise CostError(f"prompt_lens must be positive lengths, got {self.prompt_lens}")
        if self.output_len < 1:
            raise CostError(f"output_len must be >= 1, got {self.output_len}")
        if self.dtype_bytes not in (1, 2, 4):
            raise CostError(f"dtype_bytes must be 1, 2 or 4, got {self.dtype_bytes}")

    @classmethod
    def uniform(cls, batch: int, prompt_len: int, output_len: int, dtype_bytes: int = 2) -> CostWorkload:
        return cls((prompt_len,) * batch, output_len, dtype_bytes)

    @classmethod
    def ragged(cls, batch: int, prompt_len: int, output_len: int, dtype_bytes: int = 2) -> CostWorkload:
        """Lengths spread evenly from prompt_len/4 to prompt_len, as perfbench's ragged workload makes them."""
        if batch == 1:
            return cls.uniform(1, prompt_len, output_len, dtype_bytes)
        lo = max(1, prompt_len // 4)
        lens = tuple(round(prompt_len - i * (prompt_len - lo) / (batch - 1)) for i in range(batch))
        return cls(lens, output_len, dtype_bytes)

    @property
    def batch(self) -> int:
        return len(self.prompt_lens)

    @property
    def padded_len(self) -> int:
        return max(self.prompt_lens)


@dataclass(frozen=True)
class CostToggles:
    """The effective toggles that change counted work (the plan's `on` states)."""

    merged_projections: bool = False
    fused_rmsnorm: bool = False
    chunk_gdr: bool = False
    mm_all_reduce: bool = False
    moe_dispatch_combine: bool = False
    grouped_moe: bool = False
    graph_mode: bool = False

    @classmethod
    def from_states(cls, on: Mapping[str, bool]) -> CostToggles:
        return cls(**{name: bool(on.get(name, False)) for name in cls.__dataclass_fields__})


@dataclass
class OpCost:
    """One op (or a group of identical ops) of one phase. Bytes are HBM traffic: weights, activations and
    persistent state (KV cache, GDN conv/recurrent state) read plus written. `comm` holds payload bytes per
    collective, `wire` the bytes the rank's links carry; `overlap` marks an op whose collective runs fused
    with its matmul (mm_all_reduce), so the two overlap."""

    phase: str
    layer_type: str  # full_attention | linear_attention | "" (outside the layers)
    category: str
    op: str
    flops: float = 0.0
    weight_bytes: float = 0.0
    act_bytes: float = 0.0
    state_bytes: float = 0.0
    comm: dict[str, float] = field(default_factory=dict)
    wire: dict[str, float] = field(default_factory=dict)
    launches: float = 0.0
    overlap: bool = False

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.act_bytes + self.state_bytes

    @property
    def comm_bytes(self) -> float:
        return sum(self.comm.values())

    @property
    def wire_bytes(self) -> float:
        return sum(self.wire.values())



@dataclass(frozen=True)
class PhaseCost:
    """Every op of one phase (prefill: the whole prompt; decode: one step)."""

    phase: str
    ops: tuple[OpCost, ...]
    steps: int  # how many times the phase runs per request batch (1 prefill, output_len - 1 decode steps)

    def total(self, attr: str) -> float:
        return sum(getattr(op, attr) for op in self.ops)



@dataclass(frozen=True)
class ModelCost:
    prefill: PhaseCost
    decode: PhaseCost


# ---- helpers ------------------------------------------------------------------------------------------
def expected_distinct_experts(num_experts: int, top_k: int, tokens: int, local_experts: int | None = None) -> float:
    """Expected number of this rank's experts hit when `tokens` tokens each pick top_k distinct of num_experts
    uniformly: each expert is missed by one token with probability 1 - K/E."""
    local = num_experts if local_experts is None else local_experts
    return local * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def _group_size(parallel: ParallelConfig, weight_key: str) -> int:
    """The size of the group a checkpoint key is split over (1 when replicated), from SHARDING_PLAN."""
    layout = ParallelLayout(parallel, 0)
    for rule in SHARDING_PLAN:
        if fnmatch.fnmatchcase(weight_key, rule.pattern) and rule.strategy != "expert":
            return layout.size(rule.group)
    return 1


def _all_reduce(payload: float, n: int) -> tuple[dict[str, float], dict[str, float]]:
    if n <= 1:
        return {}, {}
    return {"all_reduce": payload}, {"all_reduce": 2.0 * (n - 1) / n * payload}


def _all_gather(block: float, n: int) -> tuple[dict[str, float], dict[str, float]]:
    if n <= 1:
        return {}, {}
    return {"all_gather": block}, {"all_gather": (n - 1) * block}


class _Builder:
    """Collects the ops of one phase for one configuration."""

    def __init__(self, config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, workload: CostWorkload,
                 toggles: CostToggles, phase: str, device: str) -> None:
        self.c, self.p, self.w, self.t, self.phase = config, parallel, workload, toggles, phase
        self.device = device
        self.layout = ParallelLayout(parallel, 0)
        self.sizes = LocalSizes.of(config, self.layout)
        self.e = workload.dtype_bytes
        self.prefill = phase == "prefill"
        # tokens the dense parts process: the padded [B, T] batch in prefill, B in decode
        self.n = workload.batch * (workload.padded_len if self.prefill else 1)
        self.ops: list[OpCost] = []

    def add(self, layer_type: str, category: str, op: str, **kw: object) -> OpCost:
        if category not in CATEGORIES:
            raise AssertionError(f"{op}: category {category!r} is not one of {CATEGORIES}")
        cost = OpCost(self.phase, layer_type, category, op, **kw)  # type: ignore[arg-type]
        self.ops.append(cost)
        return cost

    # one GEMM (or its separate parts) of n rows
    def projection(self, layer_type: str, op: str, rows: int, in_features: int, outs: Iterable[int]) -> None:
        outs = list(outs)
        parts = 1 if self.t.merged_projections else len(outs)
        total_out = sum(outs)
        self.add(layer_type, "matmul", op, flops=2.0 * rows * in_features * total_out,
                 weight_bytes=float(in_features * total_out * self.e),
                 act_bytes=float((parts * rows * in_features + rows * total_out) * self.e), launches=parts)

    def row_parallel(self, layer_type: str, op: str, rows: int, in_features: int, out_features: int,
                     group: int) -> None:
        """Row-parallel output projection + all_reduce over its group (fused and overlapped with
        mm_all_reduce, a prefill-only toggle)."""
        comm, wire = _all_reduce(float(rows * out_features * self.e), group)
        fused = self.t.mm_all_reduce and self.prefill and group > 1
        self.add(layer_type, "matmul", op, flops=2.0 * rows * in_features * out_features,
                 weight_bytes=float(in_features * out_features * self.e),
                 act_bytes=float((rows * in_features + rows * out_features) * self.e), launches=1,
                 comm=comm if fused else {}, wire=wire if fused else {}, overlap=fused)
        if comm and not fused:
            self.add(layer_type, "communication", f"{op} all_reduce", comm=comm, wire=wire, launches=1)

    def add_rms_norm(self, layer_type: str, op: str, rows: int, width: int, with_residual: bool = True) -> None:
        """(residual add +) RMSNorm over [rows, width]. Fused: one pass reads x (and the residual), writes
        the normed x (and the new residual). Unfused: the add is its own pass (read 2, write 1) and the
        norm reads the sum again."""
        elems = rows * width
        flops = 4.0 * elems + (elems if with_residual else 0)
        if not with_residual:
            act = 2 * elems
            launches = 1
        elif self.t.fused_rmsnorm:
            act = 4 * elems
            launches = 1
        else:
            act = 3 * elems + 2 * elems
            launches = 2
        self.add(layer_type, "norm", op, flops=flops, weight_bytes=float(width * self.e),
                 act_bytes=float(act * self.e), launches=launches)

    # ---- layers -----------------------------------------------------------------------------------
    def attention_layer(self) -> None:
        c, s, e, n, lt = self.c, self.sizes, self.e, self.n, "full_attention"
        d, nh, nkv = c.head_dim, s.num_heads, s.num_kv_heads
        self.projection(lt, "q/k/v proj", n, c.hidden_size, (nh * 2 * d, nkv * d, nkv * d))
        qk_elems = n * (nh + nkv) * d
        self.add(lt, "norm", "q/k norm", flops=4.0 * qk_elems, weight_bytes=float(2 * d * e),
                 act_bytes=float(2 * qk_elems * e), launches=2)
        rd = c.rotary_dim
        rot = n * (nh + nkv) * rd
        self.add(lt, "rope", "rope", flops=3.0 * rot, act_bytes=float((2 * rot + 2 * n * rd) * e), launches=1)
        kv_new = n * 2 * nkv * d
        self.add(lt, "attention", "kv cache write", act_bytes=float(kv_new * e), state_bytes=float(kv_new * e),
                 launches=1)
        if self.prefill:
            pairs = sum(length * (length + 1) // 2 for length in self.w.prompt_lens)
            flops = 4.0 * nh * d * pairs  # q.k and p.v, 2 FLOPs per multiply-add each
            act = n * (2 * nh * d + 2 * nkv * d) * e  # read q, k, v; write out (no score matrix)
            self.add(lt, "attention", "attention core", flops=flops, act_bytes=float(act), launches=1)
        else:
            kv = self.decode_kv_lens()
            flops = 4.0 * nh * d * sum(kv)
            self.add(lt, "attention", "attention core", flops=flops,
                     act_bytes=float(n * 2 * nh * d * e), state_bytes=float(2 * nkv * d * sum(kv) * e),
                     launches=1)
        self.add(lt, "attention", "output gate", flops=2.0 * n * nh * d, act_bytes=float(3 * n * nh * d * e),
                 launches=1)
        self.row_parallel(lt, "o_proj", n, nh * d, c.hidden_size,
                          _group_size(self.p, "model.layers.0.self_attn.o_proj.weight"))

    def gdn_layer(self) -> None:
        c, s, e, n, lt = self.c, self.sizes, self.e, self.n, "linear_attention"
        hk, hv, dk, dv = s.linear_k_heads, s.linear_v_heads, c.linear_key_head_dim, c.linear_value_head_dim
        kd, vd, conv = hk * dk, hv * dv, s.linear_conv_dim
        taps, b = c.linear_conv_kernel_dim, self.w.batch
        self.projection(lt, "in_proj qkv/z/b/a", n, c.hidden_size, (conv, vd, hv, hv))
        conv_state = b * conv * (taps - 1) * e
        # prefill writes each prompt's last K-1 inputs; decode reads the window and writes it shifted
        state = conv_state if self.prefill else 2 * conv_state
        self.add(lt, "gdn", "causal conv1d + silu", flops=2.0 * taps * n * conv + n * conv,
                 weight_bytes=float(conv * taps * e), act_bytes=float(2 * n * conv * e), state_bytes=float(state),
                 launches=1)
        # beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias): per value head, reads dt_bias and A_log
        self.add(lt, "gdn", "beta + decay gates", flops=6.0 * n * hv, weight_bytes=float(2 * hv * e),
                 act_bytes=float(n * 2 * hv * (e + 4)), launches=2)
        qk = n * 2 * kd
        self.add(lt, "gdn", "q/k l2 norm", flops=3.0 * qk, act_bytes=float(qk * e + qk * 4), launches=1)
        state_size = b * hv * dk * dv * 4  # fp32 recurrent state of the batch
        io = float(n * (2 * kd + 2 * vd) * 4)  # q, k, v in, out (fp32 inside the rule)
        if not self.prefill:
            self.add(lt, "gdn", "gated delta rule (recurrent step)", flops=7.0 * n * hv * dk * dv, act_bytes=io,
                     state_bytes=float(2 * state_size), launches=1)
        else:
            real = sum(self.w.prompt_lens)
            if self.t.chunk_gdr:
                # per token: q.S, k.S, the chunk's state update (2 FLOPs each per dk*dv) and the intra-chunk
                # q.k^T and attn.v terms (2 FLOPs per chunk position per dk and dv); state read and written
                # once per chunk
                chunks = sum(ceil_div(length, GDR_CHUNK) for length in self.w.prompt_lens)
                flops = real * hv * (6.0 * dk * dv + 2.0 * GDR_CHUNK * (dk + dv))
                state_traffic = chunks * hv * dk * dv * 4 * 2
                name = "gated delta rule (chunked)"
            else:
                # token recurrence over the padded length: decay, k.S, outer update, q.S per token, the
                # state read and written every token
                flops = 7.0 * self.n * hv * dk * dv
                state_traffic = self.w.padded_len * 2 * state_size
                name = "gated delta rule (token recurrence)"
            self.add(lt, "gdn", name, flops=flops, act_bytes=io, state_bytes=float(state_traffic), launches=1)
        self.add(lt, "norm", "gated rms norm", flops=6.0 * n * vd, weight_bytes=float(dv * e),
                 act_bytes=float(3 * n * vd * e), launches=1)
        self.row_parallel(lt, "out_proj", n, vd, c.hidden_size,
                          _group_size(self.p, "model.layers.0.linear_attn.out_proj.weight"))

    def moe_layer(self, layer_type: str) -> None:
        c, s, e, n, p = self.c, self.sizes, self.e, self.n, self.p
        h, k, lt = c.hidden_size, c.num_experts_per_tok, layer_type
        ep = self.layout.size("moe_ep")
        shared_tp = self.layout.size("shared_tp")
        local = ceil_div(n, ep) if ep > 1 else n  # tokens this rank routes (its EP block)
        split_shared = ep > 1 and shared_tp == 1
        gate_rows = local if (ep == 1 or split_shared) else n
        self.projection(lt, "router + shared-expert gate", gate_rows, h, (c.num_experts, 1))
        self.add(lt, "moe-routing", "softmax + top-k", flops=3.0 * local * c.num_experts,
                 act_bytes=float(local * c.num_experts * 4 + local * k * (4 + 8)), launches=2)
        # routed experts: pairs this rank computes, weights of the experts they hit
        pairs = n * k / ep
        inter = s.moe_intermediate
        hit = expected_distinct_experts(c.num_experts, k, n, s.num_experts)
        gemms = 2 if self.t.merged_projections else 3  # merged w13 + down, or gate, up, down
        slab = 3 * h * inter * e  # one expert's gate, up and down
        act = pairs * (h + 2 * inter + inter + h) * e
        gathered = self.t.grouped_moe and not self.prefill and (
            self.device == "cuda" or (self.device == "cpu" and self.t.graph_mode))
        if gathered:  # one slab per (token, k) pair; CUDA copies the slabs first (written, then read by bmm)
            weights = pairs * slab
            act += 2 * pairs * slab if self.device == "cuda" else 0
        else:
            weights = hit * slab
        self.add(lt, "moe-experts", "routed experts", flops=6.0 * pairs * h * inter, weight_bytes=weights,
                 act_bytes=act, launches=(gemms + 2) if self.t.grouped_moe else hit * (gemms + 3) + 1)
        moe_tp = self.layout.size("moe_tp")
        if moe_tp > 1:
            comm, wire = _all_reduce(float(n * h * e), moe_tp)
            self.add(lt, "communication", "moe all_reduce", comm=comm, wire=wire, launches=1)
        if ep > 1:
            self.ep_exchange_ops(lt, local, k, ep)
        sh_rows = local if split_shared else n
        si = s.shared_intermediate
        self.projection(lt, "shared expert gate/up", sh_rows, h, (si, si))
        self.add(lt, "other", "shared expert swiglu + sigmoid gate", flops=5.0 * sh_rows * si + 2.0 * sh_rows * h,
                 act_bytes=float((3 * sh_rows * si + 3 * sh_rows * h) * e), launches=2)
        self.row_parallel(lt, "shared expert down", sh_rows, si, h,
                          _group_size(p, "model.layers.0.mlp.shared_expert.down_proj.weight"))
        if ep > 1:
            comm, wire = _all_gather(float(local * h * e), ep)
            self.add(lt, "communication", "moe gather tokens", comm=comm, wire=wire, launches=1)

    def ep_exchange_ops(self, lt: str, local: int, k: int, ep: int) -> None:
        """Rows a rank sends to the other EP ranks, and back (model/ops/comm.py)."""
        h, e = self.c.hidden_size, self.e
        remote_rows = local * k * (ep - 1) / ep  # balanced routing: 1/ep of the pairs stay on this rank
        use_dc = self.t.moe_dispatch_combine and not self.prefill
        if use_dc and self.device != "npu":
            er = self.c.num_experts // ep
            capacity = local * min(k, er)
            rows = (ep - 1) * capacity * (h * e + 8)  # fixed-capacity block per peer, int64 id column
            both = 2.0 * rows
            self.add(lt, "communication", "dispatch/combine (static)", comm={"all_to_all": both},
                     wire={"all_to_all": both}, launches=2)
        elif use_dc:
            # comm.py records every routed row of the block (dispatch_v2 and combine_v2 notes); only the rows
            # bound for other ranks cross a link
            self.add(lt, "communication", "dispatch/combine (MC2)", comm={"dispatch_combine": 2.0 * local * k * h * e},
                     wire={"dispatch_combine": 2.0 * remote_rows * h * e}, launches=2)
        else:
            counts = float(self.c.num_experts * 8 * (ep - 1) / ep)  # int64 per-expert counts
            both = 2.0 * remote_rows * h * e + counts
            self.add(lt, "communication", "double-routing all_to_all", comm={"all_to_all": both},
                     wire={"all_to_all": both}, launches=3)

    def decode_kv_lens(self) -> list[float]:
        """KV length per sequence at the mean decode step: prompt + output_len / 2 (steps see prompt + 1 ..
        prompt + output_len - 1)."""
        return [length + self.w.output_len / 2 for length in self.w.prompt_lens]

    def embedding(self) -> None:
        c, e, n = self.c, self.e, self.n
        group = self.layout.size("embed_tp")
        self.add("", "other", "embedding", weight_bytes=float(n * c.hidden_size * e),
                 act_bytes=float(n * c.hidden_size * e), launches=1 if group == 1 else 3)
        comm, wire = _all_reduce(float(n * c.hidden_size * e), group)
        if comm:
            self.add("", "communication", "embedding all_reduce", comm=comm, wire=wire, launches=1)

    def lm_head(self) -> None:
        c, e, b = self.c, self.e, self.w.batch
        vocab = self.sizes.lmhead_vocab
        self.add("", "matmul", "lm_head", flops=2.0 * b * c.hidden_size * vocab,
                 weight_bytes=float(c.hidden_size * vocab * e), act_bytes=float((b * c.hidden_size + b * vocab) * e),
                 launches=1)
        comm, wire = _all_gather(float(b * vocab * e), self.layout.size("lmhead_tp"))
        if comm:
            self.add("", "communication", "lm_head all_gather", comm=comm, wire=wire, launches=1)

    def build(self) -> PhaseCost:
        c, n = self.c, self.n
        self.embedding()
        for index, layer_type in enumerate(c.layer_types):
            self.add_rms_norm(layer_type, "input norm", n, c.hidden_size, with_residual=index > 0)
            if layer_type == "full_attention":
                self.attention_layer()
            else:
                self.gdn_layer()
            self.add_rms_norm(layer_type, "post-attention norm", n, c.hidden_size)
            self.moe_layer(layer_type)
        self.add_rms_norm("", "final norm", n, c.hidden_size)
        self.lm_head()
        steps = 1 if self.prefill else self.w.output_len - 1
        return PhaseCost(self.phase, tuple(self.ops), steps)


def model_cost(config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, workload: CostWorkload,
               toggles: CostToggles, device: str = "npu") -> ModelCost:
    """Prefill and one (mean) decode step on rank 0.

    `device` picks the kernels the plan binds there (model/ops/moe.py, model/ops/comm.py): moe_dispatch_combine is
    MC2 on npu (the routed rows only) and a fixed-capacity all_to_all elsewhere; grouped_moe decode reads each
    hit expert once on npu (grouped matmul) and on cpu eager (sorted grouped matmul), but one expert slab per
    (token, k) pair on cuda (gathered copy, then bmm) and on cpu under graph_mode (gather-reduce in place).
    """
    if device not in DEVICES:
        raise CostError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    parallel.validate(config)
    return ModelCost(
        prefill=_Builder(config, parallel, workload, toggles, "prefill", device).build(),
        decode=_Builder(config, parallel, workload, toggles, "decode", device).build(),
    )


def total_weight_bytes(config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, dtype_bytes: int) -> float:
    """Bytes of weights one rank holds (every expert it owns), for the memory-fits check."""
    s = LocalSizes.of(config, ParallelLayout(parallel, 0))
    h, d = config.hidden_size, config.head_dim
    attn = h * (s.num_heads * 2 * d + 2 * s.num_kv_heads * d) + s.num_heads * d * h + 2 * d
    vd = s.linear_v_heads * config.linear_value_head_dim
    gdn = h * (s.linear_conv_dim + vd + 2 * s.linear_v_heads) + s.linear_conv_dim * config.linear_conv_kernel_dim \
        + vd * h + 2 * s.linear_v_heads + config.linear_value_head_dim
    moe = h * (config.num_experts + 1) + s.num_experts * 3 * h * s.moe_intermediate + 3 * h * s.shared_intermediate
    layers = sum((attn if t == "full_attention" else gdn) + moe + 2 * h for t in config.layer_types)
    return float((layers + s.embed_vocab * h + s.lmhead_vocab * h + h) * dtype_bytes)




__all__ = [
    "CATEGORIES", "DEVICES", "GDR_CHUNK", "CostError", "CostToggles", "CostWorkload", "ModelCost", "OpCost",
    "PhaseCost", "expected_distinct_experts", "model_cost", "total_weight_bytes",
]
