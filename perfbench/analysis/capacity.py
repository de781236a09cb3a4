"""Capacity across batch sizes, per plan: the throughput-latency trade (Pareto) and the largest batch that
meets the latency targets.

    tokens/s/user    = 1000 / TPOT median (ms)                 decode tokens per second one sequence sees
    tokens/s/device  = batch x 1000 / TPOT median / world_size  decode tokens per second of one device

Both with CIs from the bootstrap CI of the TPOT median (both are monotone in it). A point is on the Pareto
frontier of its shape (every key but the batch size) when no other run of that shape, of any plan, has at
least its tokens/s/device and tokens/s/user and more of one.

Targets (scenario `perfbench.targets`): TTFT p90 and decode-step p99, each a percentile of the run's samples
(TTFT per iteration, every decode step) with a bootstrap CI (analysis/stats.py). A batch meets the targets
when both estimates are at or below them; "surely" when both CIs' upper ends are, "maybe" when both lower
ends are. The largest batch per plan: the largest measured batch that meets them, with the CI [the largest
that surely meets, the largest that maybe meets].
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from perfbench.analysis import stats
from perfbench.analysis.attribution import combo_label
from perfbench.analysis.rounds import merge_rounds
from perfbench.results import RunResult


class Targets(BaseModel):
    """The latency targets (ms); None: not set."""

    model_config = ConfigDict(extra="forbid")

    ttft_p90_ms: float | None = None
    decode_step_p99_ms: float | None = None


class CapacityPoint(BaseModel):
    """One run (merged over rounds) as a point of the throughput-latency plane, with its latency percentiles."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    plan: str
    shape: str  # every key but the batch size
    batch_size: int
    tok_s_device: float
    tok_s_device_ci: tuple[float, float] | None
    tok_s_user: float
    tok_s_user_ci: tuple[float, float] | None
    pareto: bool = False
    ttft_p90_ms: float | None = None
    ttft_p90_ci: tuple[float, float] | None = None
    decode_step_p99_ms: float | None = None
    decode_step_p99_ci: tuple[float, float] | None = None


class PlanCapacity(BaseModel):
    """A plan's largest batch (of one shape) that meets the targets, with its CI."""

    model_config = ConfigDict(extra="forbid")

    plan: str
    shape: str
    batches: list[int]
    largest: int | None  # None: no measured batch meets the targets
    largest_surely: int | None
    largest_maybe: int | None
    text: str


def _shape(result: RunResult) -> str:
    s = result.shape()
    return f"{s.model} {s.device} {s.dtype} ws={s.world_size} in={s.input_len} out={s.output_len}" + (
        " ragged" if s.ragged else "")


def _percentile_ci(values: list[float], p: float) -> tuple[float | None, tuple[float, float] | None]:
    if not values:
        return None, None
    point = stats.percentile(values, p)
    if len(values) < 2:
        return point, None
    if min(values) == max(values):  # every resample the same: the bootstrap is degenerate
        return point, (point, point)
    return point, stats.bootstrap_ci(values, stat=lambda v: stats.percentile(v, p))


def capacity_points(results: Sequence[RunResult]) -> list[CapacityPoint]:
    """Every ok run with a TPOT median as a point, its Pareto flag set within its shape."""
    points = []
    for r in merge_rounds(list(results)):
        tpot = r.summary.tpot_ms_median
        if r.status != "ok" or not tpot:
            continue
        batch, ranks = r.spec.batch_size, max(r.shape().world_size, 1)
        samples = r.finite_samples("tpot_ms")
        ci = stats.bootstrap_ci(samples) if len(samples) >= 2 and min(samples) != max(samples) else None
        ttft, ttft_ci = _percentile_ci(r.finite_samples("ttft_ms"), 90.0)
        step, step_ci = _percentile_ci(r.finite_samples("tpot_steps_ms"), 99.0)
        points.append(CapacityPoint(
            run_id=r.run_id, plan=combo_label(r.ran_on()), shape=_shape(r), batch_size=batch,
            tok_s_device=batch * 1e3 / tpot / ranks,
            tok_s_device_ci=None if ci is None else (batch * 1e3 / ci[1] / ranks, batch * 1e3 / ci[0] / ranks),
            tok_s_user=1e3 / tpot, tok_s_user_ci=None if ci is None else (1e3 / ci[1], 1e3 / ci[0]),
            ttft_p90_ms=ttft if ttft is not None else r.summary.ttft_ms_p90, ttft_p90_ci=ttft_ci,
            decode_step_p99_ms=step if step is not None else r.summary.decode_step_ms_p99,
            decode_step_p99_ci=step_ci))
    for p in points:
        p.pareto = not any(
            q.shape == p.shape and q.tok_s_device >= p.tok_s_device and q.tok_s_user >= p.tok_s_user
            and (q.tok_s_device > p.tok_s_device or q.tok_s_user > p.tok_s_user) for q in points)
    return sorted(points, key=lambda p: (p.shape, p.plan, p.batch_size))


def _meets(p: CapacityPoint, targets: Targets, which: int | None) -> bool:
    """Both targets met by the estimates (which None), the CIs' lower ends (0) or upper ends (1); a target
    not set is met; a percentile not measured misses a target that is set."""
    for target, value, ci in ((targets.ttft_p90_ms, p.ttft_p90_ms, p.ttft_p90_ci),
                              (targets.decode_step_p99_ms, p.decode_step_p99_ms, p.decode_step_p99_ci)):
        if target is None:
            continue
        if value is None:
            return False
        bound = value if which is None or ci is None else ci[which]
        if bound > target:
            return False
    return True


def plan_capacities(points: Sequence[CapacityPoint], targets: Targets) -> list[PlanCapacity]:
    """Per (shape, plan): the largest batch that meets the targets, with its CI (module docstring)."""
    groups: dict[tuple[str, str], list[CapacityPoint]] = {}
    for p in points:
        groups.setdefault((p.shape, p.plan), []).append(p)
    out = []
    for (shape, plan), group in sorted(groups.items()):
        group.sort(key=lambda p: p.batch_size)

        def largest(which: int | None, members: list[CapacityPoint] = group) -> int | None:
            return max((p.batch_size for p in members if _meets(p, targets, which)), default=None)

        best, surely, maybe = largest(None), largest(1), largest(0)
        batches = [p.batch_size for p in group]
        if best is None:
            text = f"no measured batch ({', '.join(map(str, batches))}) meets the targets"
        else:
            text = (f"batch {best} (CI [{surely if surely is not None else 'none'}, {maybe}]) of "
                    f"{', '.join(map(str, batches))}")
        out.append(PlanCapacity(plan=plan, shape=shape, batches=batches, largest=best, largest_surely=surely,
                                largest_maybe=maybe, text=text))
    return out
