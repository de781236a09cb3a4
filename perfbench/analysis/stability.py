"""Is a run's timing trustworthy? A stability verdict per metric and per run, each with its reason.

A metric (TTFT, TPOT: one sample per timed iteration) is unstable when the 95 % CI of its median is wider than
`MAX_REL_CI` of the median, or when more than `MAX_OUTLIER_SHARE` of its samples lie outside
`OUTLIER_MADS` scaled median absolute deviations (a bimodal or spiky sample). A run is unstable when any of
its metrics is, or when the machine was not quiet while it was timed:
- other processes' CPU load beyond the spare cores (`contention`, which also covers hypervisor steal);
- the run queue while timing above the CPU count (from the 1-minute load average of /proc/loadavg read before and
  after, with the average's decay undone, so load that ended before the run does not count: `loadavg_during`);
- the CPU clock spread across the timed iterations above `MAX_FREQ_SPREAD` (throttling or a governor changing
  the clock, read from /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq);
- memory pressure: /proc/pressure/memory "some avg10" above `MAX_MEM_PRESSURE` %, or less than
  `MIN_MEM_AVAILABLE` of the memory available (/proc/meminfo).
Where Linux does not expose a counter, that criterion gives no verdict (never a false alarm).

The host-speed probe's spread inside one run (`host_speed_change`, perfbench/measure/host_probe.py) is recorded
beside these but is not a criterion: a few readings per run spread ~12% on steady runs too. Its *level* does
decide between two runs: `contended(a, b)` also holds a pair whose probe medians differ by more than
`HOST_SPEED_TOLERANCE` (the host ran at another speed, so their times differ whatever the code did; see
`host_speed_differs`).

Judgements only: the figures come from perfbench/measure/host_signals.py and perfbench/measure/host_load.py, read around
the timed iterations; this module reads recorded results, so the offline stages (gate, compare, report) use it
without the run stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfbench.analysis import stats
from perfbench.analysis.stats import CI_LEVEL

if TYPE_CHECKING:
    from perfbench.results import RunResult, Summary

MAX_REL_CI = 0.10  # CI width of the median / median
MAX_OUTLIER_SHARE = 0.2
OUTLIER_MADS = 5.0  # |x - median| / (1.4826 MAD) beyond this is an outlier
MAX_FREQ_SPREAD = 0.10  # (max - min) / max of the mean CPU clock sampled before and after timing
# Probe medians of two runs further apart than this: the host ran at another speed. On the 2-core AMD VM of
# 2026-12-01 the probe sat at two levels, 0.32 and 0.42 ms (31% apart), while the medians of runs within one
# level spread up to 10% (benchmarks/host_speed.py --iterations 300; docs/design.md, "Host speed").
HOST_SPEED_TOLERANCE = 0.15
MAX_MEM_PRESSURE = 10.0  # percent of the last 10 s some task stalled on memory
MIN_MEM_AVAILABLE = 0.05  # share of MemTotal
PROBE_SAMPLES = "host_probe_ms"  # the probe readings of a run (perfbench/measure/run_steps.py)

# Other processes may use the cores the run does not need plus this much of one core before the run counts as
# contended: below it, the interference is within what a quiet machine's own daemons cause.
SPARE_CORE_MARGIN = 0.25
# Steal above this (in cores, averaged over the interval) means the hypervisor took time from this machine.
STEAL_LIMIT = 0.1


@dataclass(frozen=True)
class Stability:
    stable: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def to_dict(self) -> dict[str, object]:
        return {"stable": self.stable, "reason": self.reason}


def rel_ci_width(values: list[float], level: float = CI_LEVEL) -> float | None:
    """(hi - lo) / median of the bootstrap CI of the median; None for fewer than 3 samples or a zero median."""
    if len(values) < 3:
        return None
    mid = stats.median(values)
    if mid <= 0:
        return None
    lo, hi = stats.bootstrap_ci(values, level=level, n_boot=stats.N_BOOT)
    return (hi - lo) / mid


def outlier_share(values: list[float]) -> float:
    """Share of samples more than OUTLIER_MADS robust standard deviations (1.4826 MAD) from the median."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 3:
        return 0.0
    mid = float(np.median(arr))
    mad = 1.4826 * float(np.median(np.abs(arr - mid)))
    if mad == 0.0:  # most samples equal: any other value is an outlier
        return float(np.mean(arr != mid))
    return float(np.mean(np.abs(arr - mid) / mad > OUTLIER_MADS))


def metric_stability(name: str, values: list[float]) -> Stability:
    """The sample criteria of one metric (see the module docstring)."""
    reasons = []
    width = rel_ci_width(values)
    if width is None:
        reasons.append(f"{name}: {len(values)} samples, too few for a CI")
    elif width > MAX_REL_CI:
        reasons.append(f"{name}: {CI_LEVEL:.0%} CI of the median spans {width:.0%} of it (limit {MAX_REL_CI:.0%})")
    share = outlier_share(values)
    if share > MAX_OUTLIER_SHARE:
        reasons.append(f"{name}: {share:.0%} of samples are outliers (limit {MAX_OUTLIER_SHARE:.0%})")
    return Stability(not reasons, reasons)


def host_reasons(summary: Summary) -> list[str]:
    """Why the machine was not quiet while timing, from the recorded host figures ([] when it was or when
    nothing was recorded)."""
    reasons = []
    load = contention(summary)
    if load:
        reasons.append(load)
    loadavg, cpus = summary.host_loadavg_1m, summary.host_cpus
    if loadavg is not None and cpus and loadavg > cpus:
        reasons.append(f"load average of other work {loadavg:.2f} above the {cpus:g} spare CPUs")
    lo, hi = summary.host_cpu_mhz_min, summary.host_cpu_mhz_max
    if lo is not None and hi and (hi - lo) / hi > MAX_FREQ_SPREAD:
        reasons.append(f"CPU clock varied {lo:.0f}-{hi:.0f} MHz while timing")
    pressure = summary.host_mem_pressure_avg10
    if pressure is not None and pressure > MAX_MEM_PRESSURE:
        reasons.append(f"memory pressure: tasks stalled on memory {pressure:.1f}% of the time")
    available = summary.host_mem_available_frac
    if available is not None and available < MIN_MEM_AVAILABLE:
        reasons.append(f"only {available:.1%} of memory available")
    return reasons


def run_stability(summary: Summary, samples: dict[str, list[float]],
                  metrics: tuple[str, ...] = ("ttft_ms", "tpot_ms")) -> tuple[Stability, dict[str, Stability]]:
    """(the run's verdict, each metric's verdict). A host reason makes every metric unstable too."""
    host = host_reasons(summary)
    per_metric = {}
    for name in metrics:
        if name not in samples:
            continue
        own = metric_stability(name, list(samples[name]))
        reasons = own.reasons + host
        per_metric[name] = Stability(not reasons, reasons)
    reasons = [r for m in per_metric.values() for r in m.reasons if r not in host] + host
    return Stability(not reasons, reasons), per_metric


def host_speed_differs(a: RunResult, b: RunResult, tolerance: float = HOST_SPEED_TOLERANCE,
                       names: tuple[str, str] | None = None) -> str:
    """Why two runs' times are not comparable because the host ran at another speed ("" when they are, or when
    either run has no probe readings: accelerator runs, older records). Compared are the medians of the probe
    readings taken before each timed iteration. `names` calls the runs (a, b) in the text (default: their
    run ids, or A and B when the ids are the same)."""
    probe_a, probe_b = a.finite_samples(PROBE_SAMPLES), b.finite_samples(PROBE_SAMPLES)
    if not probe_a or not probe_b:
        return ""
    level_a, level_b = stats.median(probe_a), stats.median(probe_b)
    if level_a <= 0 or level_b <= 0:
        return ""
    ratio = level_b / level_a
    if 1.0 / (1.0 + tolerance) <= ratio <= 1.0 + tolerance:
        return ""
    first, second = names or (("in A", "in B") if a.run_id == b.run_id else (f"in {a.run_id}", f"in {b.run_id}"))
    return (f"the host ran at another speed: its probe took {level_b:.3g} ms {second} vs {level_a:.3g} ms "
            f"{first} ({ratio:.2f}x, tolerance {tolerance:.0%})")


def contended(*runs: RunResult) -> str:
    """Why the timings of these runs cannot decide ("" when they can): a run judged unstable (noisy samples or
    a busy machine), or, for a record without a verdict, a busy machine; for a pair, also a host that ran at
    another speed (`host_speed_differs`)."""
    def why(r: RunResult) -> str:
        if r.is_stable() is False:
            return f"unstable ({r.stability.reason or 'no reason recorded'})"
        return contention(r.summary)

    reasons = [f"{r.run_id}: {reason}" for r in runs if (reason := why(r))]
    if len(runs) == 2 and (speed := host_speed_differs(*runs)):
        reasons.append(speed)
    return "; ".join(reasons)


def contention(summary: Summary) -> str:
    """Why a run's timings cannot be trusted because of the machine ("" when they can or nothing was recorded)."""
    other, spare = summary.host_other_cores, summary.host_spare_cores
    steal = summary.host_steal_cores
    reasons = []
    if other is not None and spare is not None and other > spare + SPARE_CORE_MARGIN:
        reasons.append(f"other processes kept {other:.2f} cores busy while timing ({spare:g} spare)")
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append(f"the hypervisor stole {steal:.2f} cores")
    return "; ".join(reasons)
