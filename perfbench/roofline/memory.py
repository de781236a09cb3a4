"""Will a sweep's runs fit in this machine's memory? An estimate per run, checked before anything runs.

`perfbench run` (and `--dry-run`) calls `check_memory` once the plans are resolved, so a shape that cannot fit
is refused in one line naming the estimate and the free memory, instead of dying in the worker with a bare
MemoryError after the weights loaded. The estimate is per rank, from the same local sizes the layers allocate
(model/parallel.py `LocalSizes`; weights from model/cost.py `total_weight_bytes`):
- weights: every parameter the rank holds, in the run's dtype;
- state: the KV cache of the full-attention layers at prompt + output_len positions (model/cache.py), the GDN
  conv window and fp32 recurrent state of the linear-attention layers;
- activations: the peak of prefill over the padded [B, T] batch (hidden state and residual, the widest
  projection or expert intermediate, and the fp32 [B, heads, T, T] scores of the unfused attention that the
  all-off numerics reference and a fused_attention-off run use), plus the fp32 logits kept per generated token
  (twice with the numerics reference);
- taps (with numerics_check): the numerics replay's layer taps (model/replay.py), kept on the host: the all-off
  reference's inputs and branch outputs of every layer at every token (hidden state, residual; mixer, MoE: 4
  values of the hidden size per layer and token) and the replayed iteration's branch outputs (2 more), in the
  run's dtype; tokens = the padded prompt batch plus one per row and decode step. The device holds one decode
  step's tap at a time, and during prefill one layer's (streamed), which the activations cover.
CPU runs are checked whole: their ranks share this host's memory (MemAvailable of /proc/meminfo). Of a cuda or
npu run only the taps are checked, as they live on the host, and only where the device is present (a dry run
elsewhere says nothing of the host that will run it); the rest is the device's memory, which reports its own
out-of-memory error. Under
the NPU emulator (`--emulate-npu`) an npu run is on this host and checked whole, as a CPU run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from model.config import Qwen3_5MoeTextConfig
from model.cost import total_weight_bytes
from model.parallel import LocalSizes, ParallelLayout
from model.parallel_config import ParallelConfig
from perfbench.config.sweep import PlannedRun, SweepPlan, shape_label
from perfbench.emulation.npu import label
from perfbench.errors import UserError

MEMINFO = Path("/proc/meminfo")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one run needs on this host: per rank times the ranks that share the host."""

    weights: float
    state: float
    activations: float
    ranks: int = 1
    taps: float = 0.0  # the numerics replay's layer taps, on the host whatever the device
    device: str = "cpu"

    @property
    def total(self) -> float:
        """On this host: everything for a CPU run, the taps alone for a device run."""
        if self.device != "cpu":
            return self.taps * self.ranks
        return (self.weights + self.state + self.activations + self.taps) * self.ranks

    def describe(self) -> str:
        per = f", per rank x {self.ranks} ranks" if self.ranks > 1 else ""
        taps = f", numerics reference taps {size(self.taps)}" if self.taps else ""
        if self.device != "cpu":
            return f"{size(self.total)} of host memory (numerics reference taps {size(self.taps)}{per})"
        return (f"{size(self.total)} (weights {size(self.weights)}, KV cache + GDN state {size(self.state)}, "
                f"activations {size(self.activations)}{taps}{per})")


def size(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1: "23.4 GiB"."""
    value, unit = float(nbytes), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.3g} {unit}"


def estimate_run(config: Qwen3_5MoeTextConfig, parallel: ParallelConfig, planned: PlannedRun,
                 ranks_here: int = 1) -> MemoryEstimate:
    """The memory estimate of one planned run (see the module docstring for what is counted)."""
    spec = planned.spec
    e = DTYPE_BYTES.get(spec.dtype, 4)
    layout = ParallelLayout(parallel, 0)
    s = LocalSizes.of(config, layout)
    b, t, out = spec.batch_size, spec.input_len, spec.output_len
    positions = t + out
    full = sum(kind == "full_attention" for kind in config.layer_types)
    linear = len(config.layer_types) - full
    kv = full * 2 * b * positions * s.num_kv_heads * config.head_dim * e
    gdn = linear * b * (s.linear_conv_dim * (config.linear_conv_kernel_dim - 1) * e
                        + s.linear_v_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4)
    n = b * t  # prefill tokens, right-padded
    h, d = config.hidden_size, config.head_dim
    ep = layout.size("moe_ep")
    widest = max(
        n * (2 * s.num_heads * d + 2 * s.num_kv_heads * d) * e,                    # q (+gate), k, v
        n * (s.linear_conv_dim + 2 * s.linear_v_heads * config.linear_value_head_dim) * 4,  # GDN, fp32 inside
        n * config.num_experts_per_tok // ep * (h + 2 * s.moe_intermediate) * e,  # tokens copied per expert
        n * config.num_experts * 4,                                              # router logits, fp32
    )
    attention = planned.plan.decisions.get("fused_attention")
    unfused = spec.numerics_check or attention is None or attention.state != "on"
    if unfused:  # fp32 scores and their softmax, [B, heads, T, T]
        widest = max(widest, 2 * b * s.num_heads * t * t * 4)
    logits = b * out * config.vocab_size * 4 * (2 if spec.numerics_check else 1)
    activations = 2 * n * h * e + widest + logits
    return MemoryEstimate(weights=total_weight_bytes(config, parallel, e), state=float(kv + gdn),
                          activations=float(activations), ranks=ranks_here, taps=tap_bytes(config, planned),
                          device=spec.device)


TAP_VALUES = 6  # per layer and token: the reference's 2 inputs and 2 branch outputs, the replay's 2 outputs


def tap_bytes(config: Qwen3_5MoeTextConfig, planned: PlannedRun) -> float:
    """Bytes of the numerics replay's layer taps of one run (0 without numerics_check): every rank records and
    replays the full hidden size."""
    spec = planned.spec
    if not spec.numerics_check:
        return 0.0
    tokens = spec.batch_size * (spec.input_len + spec.output_len - 1)
    return float(TAP_VALUES * len(config.layer_types) * tokens * config.hidden_size * DTYPE_BYTES.get(spec.dtype, 4))


def available_bytes(meminfo: Path | None = None) -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where it cannot be read (not Linux)."""
    try:
        for line in (meminfo or MEMINFO).read_text().splitlines():
            key, _, rest = line.partition(":")
            if key == "MemAvailable":
                return int(rest.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(sweep: SweepPlan) -> None:
    """UserError (one line: the largest run's estimate and the free memory) when a run cannot fit here: a CPU run
    whole, a device run's numerics reference taps (kept on this host)."""
    emulated = label() is not None  # the NPU emulator (--emulate-npu): an npu run's device memory is this host's
    # a device run's taps live on the host that has the device: not this one when the device is absent (a dry run
    # elsewhere)
    runs = [p for p in sweep.runs
            if p.spec.device == "cpu" or emulated or (p.spec.numerics_check and sweep.device_present)]
    if not runs:
        return
    config = sweep.scenario.model_config_here()
    if config is None:  # the missing model is its own error (Scenario.model_missing)
        return
    free = available_bytes()
    if free is None:
        return
    parallel = sweep.scenario.parallel_config
    cluster = sweep.scenario.perfbench.cluster
    ranks_here = cluster.nproc_per_node or max(1, parallel.world_size // cluster.nnodes)
    estimates = [(estimate_run(config, parallel, p, ranks_here), p) for p in runs]
    if emulated:
        estimates = [(dataclasses.replace(e, device="cpu"), p) for e, p in estimates]
    worst, planned = max(estimates, key=lambda pair: pair[0].total)
    if worst.total > free:
        hint = ", or turn the numerics check off (perfbench.measure.numerics_check=false)" if worst.taps else ""
        raise UserError(f"{Path(sweep.scenario.source).name}: run {planned.spec.run_id} "
                        f"({shape_label(planned.spec)}) needs about {worst.describe()}, but this machine has "
                        f"{size(free)} available (MemAvailable); use smaller batch_sizes or input_lens, "
                        f"fewer layers or a smaller model{hint}")
