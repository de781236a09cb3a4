"""What a sweep means, printed at the end of `perfbench run`: one line per combination (named by its toggles),
TTFT and TPOT medians with their 95 % CIs, the speed-up against the baseline, and the stability verdict;
then the warnings (unstable runs with their reasons, failures)."""

from __future__ import annotations

from perfbench.analysis import stats
from perfbench.analysis.rounds import by_combination, merge_rounds, round_samples
from perfbench.analysis.speedup import Speedup, host_speed_reasons, speedup
from perfbench.results import RunResult

CI_LEVEL = 0.95


def plan_label(result: RunResult) -> str:
    """The combination by its effective toggle names: "all off", or "chunk_gdr+grouped_moe"."""
    return "+".join(sorted(result.ran_on())) or "all off"


def baseline_of(results: list[RunResult]) -> RunResult | None:
    """The all-off run (the fewest toggles on among ok runs of the first shape)."""
    ok = [r for r in results if r.status == "ok"]
    return min(ok, key=lambda r: len(r.ran_on())) if ok else None


def median_with_ci(result: RunResult, key: str) -> tuple[float, float, float] | None:
    """(median, ci_low, ci_high) over the unit samples: round medians with several rounds, else iterations."""
    values = round_samples(result, key) or result.finite_samples(key)
    if len(values) < 2:
        return None
    lo, hi = stats.bootstrap_ci(values, level=CI_LEVEL, n_boot=1000)
    return stats.median(values), lo, hi


def _fmt(triple: tuple[float, float, float] | None) -> str:
    if triple is None:
        return "-"
    mid, lo, hi = triple
    return f"{mid:.2f} [{lo:.2f}, {hi:.2f}]"


def speedups(results: list[RunResult]) -> dict[str, dict[str, Speedup | None]]:
    """combination id -> {"ttft_ms": ..., "tpot_ms": ...}: speed-up over the baseline, paired by round."""
    groups = by_combination(results)
    base = baseline_of(merge_rounds(results))
    if base is None:
        return {}
    base_rounds = groups[base.spec.combination_id]
    return {cid: {key: speedup(base_rounds, rounds, key) for key in ("ttft_ms", "tpot_ms")}
            for cid, rounds in groups.items()}


def _gain(value: Speedup | None) -> str:
    return "-" if value is None else value.text()


def warnings(results: list[RunResult]) -> dict[str, list[str]]:
    """combination id -> why it cannot be trusted: failed, judged unstable, or timed in a round where the host
    ran at another speed than for the baseline. Combinations without a warning are left out."""
    out: dict[str, list[str]] = {}
    merged = merge_rounds(results)
    for r in merged:
        if r.status != "ok":
            out.setdefault(r.run_id, []).append(f"{r.run_id} ({plan_label(r)}): {r.status}")
        elif r.is_stable() is False:
            out.setdefault(r.run_id, []).append(f"{r.run_id} ({plan_label(r)}): unstable: "
                                                f"{r.stability.get('reason')}")
    base = baseline_of(merged)
    if base is not None:
        groups = by_combination(results)
        base_rounds = groups[base.spec.combination_id]
        for cid, rounds in groups.items():
            if cid != base.spec.combination_id and (why := host_speed_reasons(base_rounds, rounds)):
                out.setdefault(cid, []).append(f"{cid} ({plan_label(rounds[0])}) against the baseline: "
                                               + "; ".join(why))
    return out


def compile_summary(results: list[RunResult]) -> str:
    """Graph compile time of runs that found the sweep's compile cache cold vs warm ("" when none compiled)."""
    groups: dict[str, list[float]] = {"cold": [], "warm": []}
    for r in results:
        seconds, warm = r.metric("compile_s"), r.metric("compile_cache_warm")
        if r.status == "ok" and seconds is not None and warm is not None:
            groups["warm" if warm else "cold"].append(seconds)
    parts = [f"{state} cache: median {stats.median(v):.1f} s over {len(v)} run{'s' * (len(v) != 1)}"
             for state, v in groups.items() if v]
    return f"graph compile: {'; '.join(parts)}" if parts else ""


def summary_table(results: list[RunResult]) -> str:
    merged = merge_rounds(results)
    base = baseline_of(merged)
    gains = speedups(results)
    header = ("plan", f"TTFT ms [{CI_LEVEL:.0%} CI]", "TTFT speed-up", f"TPOT ms [{CI_LEVEL:.0%} CI]",
              "TPOT speed-up", "stable")
    rows = []
    # baseline first, then by how many toggles a plan switches on (one-at-a-time before combined plans): the
    # order the runs ran in is a seeded shuffle when there are rounds
    base_id = base.spec.combination_id if base is not None else None
    merged.sort(key=lambda r: (r.spec.combination_id != base_id, len(r.plan.effective_on()), plan_label(r)))
    for r in merged:
        if r.status != "ok":
            rows.append((plan_label(r), r.status, "", "", "", ""))
            continue
        stable = {True: "yes", False: "NO", None: "?"}[r.is_stable()]
        gain = gains.get(r.spec.combination_id, {})
        is_base = base is not None and r.spec.combination_id == base.spec.combination_id
        rows.append((plan_label(r), _fmt(median_with_ci(r, "ttft_ms")),
                     "baseline" if is_base else _gain(gain.get("ttft_ms")), _fmt(median_with_ci(r, "tpot_ms")),
                     "baseline" if is_base else _gain(gain.get("tpot_ms")), stable))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in (header, *rows)]
    if base is not None:
        lines.append(f"speed-up: baseline ({plan_label(base)}) / this, {CI_LEVEL:.0%} CI; > 1 is faster; paired "
                     "by round when there are several rounds")
    compile_line = compile_summary(results)
    if compile_line:
        lines.append(compile_line)
    warn = warnings(results)
    if warn:
        lines.append(f"WARNING: {len(warn)} of {len(merged)} combinations cannot be trusted:")
        lines += [f"  {w}" for texts in warn.values() for w in texts]
    return "\n".join(lines)
