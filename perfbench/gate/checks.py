"""One gate check per function: a rule applied to one run (or one pair of runs) gives one `CheckResult`.

Timing checks compare a run with the same run_id in the baseline (one-sided, by
`perfbench.analysis.effect`, the engine `perfbench compare` uses two-sided); ratio and numerics checks read the current
folder only; toggles and op-count checks are deterministic comparisons with the baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from model.toggles import TOGGLE_NAMES
from perfbench.analysis import noise_band, stats
from perfbench.analysis import paired as paired_stats
from perfbench.analysis.effect import effect
from perfbench.analysis.rounds import ROUND_PREFIX, tested_samples
from perfbench.analysis.speedup import Speedup
from perfbench.analysis.stability import contended, host_speed_differs
from perfbench.gate.rules import (
    METRICS,
    Metric,
    NumericsRule,
    OpCountRule,
    RatioRule,
    Selector,
    SpeedupRule,
    TimingRule,
    TogglesRule,
    TracePlanRule,
)
from perfbench.results import RunResult

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
# A timing check whose evidence cannot decide: the effect is within the noise, or the machine was contended.
# It is neither a pass nor a failure.
INCONCLUSIVE = "INCONCLUSIVE"
# A timing suspect (folders timed at different times) that no paired rerun could confirm: reported, never a
# failure and never a reason for exit 3 by itself (perfbench/gate/confirm.py).
UNCONFIRMED = "UNCONFIRMED"
_COUNT_SLACK = 1e-9  # op counts may be per-step averages (floats); ignore rounding noise


@dataclass
class CheckResult:
    status: str  # PASS | FAIL | INCONCLUSIVE | SKIP (not compared, with the reason)
    kind: str  # rule kind, or "status" / "coverage" for run bookkeeping
    name: str  # metric or check label
    run_id: str | None
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        run = f" run={self.run_id}" if self.run_id else ""
        return f"{self.status} {self.name}{run}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "kind": self.kind, "name": self.name, "run_id": self.run_id,
                "message": self.message, "details": self.details}


# ---- reading runs --------------------------------------------------------------------------------

def _value_matches(name: str, actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return any(_value_matches(name, actual, w) for w in wanted)
    if isinstance(wanted, dict):  # {min, max}, inclusive
        if not isinstance(actual, int | float) or isinstance(actual, bool):
            return False
        return wanted.get("min", -math.inf) <= actual <= wanted.get("max", math.inf)
    if name.startswith("eff.") and wanted == "off":
        return actual in ("off", "inactive")  # both run the unfused path
    return actual == wanted


def selects(result: RunResult, selector: Selector) -> bool:
    return all(_value_matches(name, result.selector_field(name), wanted) for name, wanted in selector.items())


def metric_samples(result: RunResult, metric: Metric, per_round: bool = False) -> list[float] | None:
    """Raw samples of a metric (ms latencies, or tok/s derived from them), None when not recorded; with
    `per_round`, the per-round medians of a merged result (perfbench/analysis/rounds.py)."""
    if metric.samples is None:
        return None
    raw = result.samples.get(ROUND_PREFIX + metric.samples if per_round else metric.samples)
    if not raw:
        return None
    if metric.tokens is None:
        return [float(v) for v in raw]
    return [_tokens(result, metric) * 1000.0 / float(v) for v in raw if v > 0]


def _tokens(result: RunResult, metric: Metric) -> float:
    """Tokens per latency sample: recovered from the summary (throughput x median latency, exact for ragged
    prompts too), else batch_size x input_len (prefill) or batch_size (decode)."""
    throughput = result.metric(metric.summary_key)
    latency = result.metric(f"{metric.samples}_median")
    if throughput and latency:
        return float(throughput) * float(latency) / 1000.0
    batch = result.spec.batch_size
    return float(batch * result.spec.input_len if metric.tokens == "prefill" else batch)


def _statistic(metric: Metric) -> Any:
    if metric.statistic == "median":
        return stats.median
    q = float(metric.statistic[1:])
    return lambda values: stats.percentile(values, q)


@dataclass(frozen=True)
class Paired:
    """Two runs' values of a metric from one estimator, the samples behind them and their basis."""

    first: float | None
    second: float | None
    first_samples: list[float] | None
    second_samples: list[float] | None
    basis: str  # "rounds" | "iterations" (perfbench.analysis.rounds.tested_samples)


def paired_values(first: RunResult, second: RunResult, metric: Metric, alpha: float = 0.05,
                  alternative: str = "two-sided") -> Paired:
    """The statistic of the raw samples when both runs have them, else both summary values (samples None), so
    the two sides never mix estimators. When both are merged results of enough rounds for a test at `alpha`,
    the samples are the per-round medians (a round is a process: the unit that carries process-to-process
    variation); see perfbench.analysis.rounds.tested_samples."""
    a, b, basis = tested_samples(first, second, lambda r, per_round: metric_samples(r, metric, per_round),
                                 alpha=alpha, alternative=alternative)
    if a and b:
        stat = _statistic(metric)
        return Paired(float(stat(a)), float(stat(b)), a, b, basis)
    return Paired(first.metric(metric.summary_key), second.metric(metric.summary_key), None, None, basis)


def fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _direction(metric: Metric, ratio: float) -> str:
    if round(ratio, 2) == 1.0:
        return "1.00x (unchanged)"
    if ratio >= 1.0:
        return f"{ratio:.2f}x {metric.worse}"
    return f"{1.0 / ratio:.2f}x {metric.better}" if ratio > 0 else f"{metric.better} (was 0)"


# ---- timing vs baseline --------------------------------------------------------------------------

def _worse(metric: Metric) -> str:
    """The one-sided alternative of a regression: after larger for a latency, smaller for a throughput."""
    return "less" if metric.higher_is_better else "greater"


def mann_whitney_p(rule: TimingRule, base: RunResult, cur: RunResult) -> float | None:
    """The raw one-sided p-value `check_timing` would use, None when it uses no U test (for corrections)."""
    metric = METRICS[rule.metric]
    paired = paired_values(base, cur, metric, rule.alpha, _worse(metric))
    before, after = paired.first_samples, paired.second_samples
    if rule.test != "mann_whitney" or not (before and after):
        return None
    change = effect(before, after, _worse(metric), rule.alpha, ci_level=None)
    return change.p_value if change.method == "mann-whitney" else None  # else no-overlap decides, not p


UNPAIRED = "unpaired: the folders were timed at different times (a suspect: `gate --confirm` decides it on pairs)"


def could_explain(base: RunResult, cur: RunResult) -> str:
    """Why a slowdown of `cur` against `base` may not be the code's ("" when nothing says so): the host ran at
    another speed (the probe), or only the current run was timed on a busy or unstable machine. Flags both
    sides share (a folder against a copy of itself) compare like with like and explain nothing."""
    if speed := host_speed_differs(base, cur, names=("for the baseline", "for the current run")):
        return speed
    if (busy := contended(cur)) and not contended(base):
        return busy
    return ""


def check_timing(rule: TimingRule, base: RunResult, cur: RunResult, p_adjusted: float | None = None,
                 correction: str = "") -> CheckResult:
    """One-sided: fails only when the metric is worse by more than `threshold` AND the test says it is no
    chance (Mann-Whitney p < alpha, or the bootstrap (1 - 2 alpha) CI of the ratio lies above 1). Metrics
    without raw samples on both sides use the threshold alone, and say so. `p_adjusted` (from a
    multiple-comparison `correction` across checks) replaces p in the decision; the raw p is still shown."""
    metric = METRICS[rule.metric]
    name = rule.name or rule.metric
    threshold_text = f"threshold {rule.threshold * 100:g}%"
    paired = paired_values(base, cur, metric, rule.alpha, _worse(metric))
    base_value, cur_value, before, after = paired.first, paired.second, paired.first_samples, paired.second_samples
    label = metric.statistic if before and after else "value"
    if base_value is None or cur_value is None:
        side = "baseline" if base_value is None else "current"
        return CheckResult(SKIP, "timing", name, cur.run_id, f"no {metric.summary_key} in the {side} run")
    if base_value <= 0 or cur_value <= 0:
        return CheckResult(SKIP, "timing", name, cur.run_id, f"non-positive {metric.summary_key}, no ratio")
    ratio = base_value / cur_value if metric.higher_is_better else cur_value / base_value
    values = f"{label} {fmt(cur_value)} {metric.unit} vs {fmt(base_value)} {metric.unit}"
    details: dict[str, Any] = {"metric": rule.metric, "ratio": ratio, "current": cur_value,
                               "baseline": base_value, "threshold": rule.threshold, "alpha": rule.alpha,
                               "test": rule.test,
                               "n_current": len(after or []), "n_baseline": len(before or [])}
    exceeds = ratio > 1.0 + rule.threshold
    if not (before and after):
        status = FAIL if exceeds else PASS
        return CheckResult(status, "timing", name, cur.run_id, f"{_direction(metric, ratio)} ({values}), "
                           f"{threshold_text} (no raw samples: threshold only)", details)
    if rule.test == "bootstrap":
        level = 1.0 - 2.0 * rule.alpha  # the bound on the worse side is then a one-sided (1 - alpha) bound
        change = effect(before, after, _worse(metric), rule.alpha, ci_level=level, stat=_statistic(metric))
        low, high = change.ci_low, change.ci_high  # current / baseline
        assert low is not None and high is not None  # asked with a ci_level
        if metric.higher_is_better:  # as the ratio above: > 1 is worse
            low, high = 1.0 / high, 1.0 / low
        significant = bool(change.ci_excludes_one)
        details.update(ci_low=low, ci_high=high, ci_level=level)
        evidence = (f"{level * 100:g}% CI of ratio [{low:.3f}, {high:.3f}] "
                    f"{'excludes' if significant else 'includes'} 1")
    else:
        change = effect(before, after, _worse(metric), rule.alpha, ci_level=None)
        significant = change.significant
        details.update(p_value=change.p_value, method=change.method)
        decisive_p = change.p_value
        evidence = f"p={change.p_value:.2g}"
        if p_adjusted is not None and change.method == "mann-whitney":
            decisive_p, significant = p_adjusted, p_adjusted < rule.alpha
            details.update(p_adjusted=p_adjusted, correction=correction)
            evidence += f" ({correction}-adjusted {p_adjusted:.2g})"
        evidence += f" {'<' if decisive_p < rule.alpha else '>='} {rule.alpha:g}"
        if change.method == "no-overlap":
            overlap = "no overlap" if significant else "samples overlap"
            evidence += f" ({overlap}: too few samples for the U test)"
    in_band = paired.basis == "iterations" and noise_band.inside(metric.summary_key, ratio)
    status = (FAIL if significant and not in_band else INCONCLUSIVE) if exceeds else PASS
    if exceeds and not significant:
        evidence += " (not significant: inconclusive)"
    elif exceeds and in_band:
        evidence += (f" (inside the run-to-run band of {metric.summary_key}, one round per side: inconclusive; "
                     "run more rounds)")
    # An instability flag blocks only a verdict it could change: a pass stands (a noisy or slow host makes the
    # current look slower, not faster), and a failure stands unless the host itself ran slower by enough to
    # explain the excess over the threshold.
    if status == FAIL and (why := could_explain(base, cur)):
        status = INCONCLUSIVE
        evidence += f" (not decided: {why})"
    elif busy := contended(base, cur):
        details["noted"] = busy
    return CheckResult(status, "timing", name, cur.run_id,
                       f"{_direction(metric, ratio)} ({values}), {evidence}, {threshold_text}; {UNPAIRED}", details)


# ---- paired speed-ups vs baseline ----------------------------------------------------------------

def check_speedup(rule: SpeedupRule, label: str, base: Speedup | None, cur: Speedup | None,
                  combination_id: str = "") -> CheckResult:
    """A plan's paired speed-up over its baseline, current against the baseline folder's. Both were measured
    within one folder's blocks, so host speed cancels in each; what is left is compared as two independent
    estimates (`paired.ratio_of_intervals`). FAIL when the speed-up fell by more than the threshold and the fall
    is significant at `alpha` (one-sided); INCONCLUSIVE when it fell that far but could be noise."""
    name = rule.name or f"{rule.metric} speed-up"
    if base is None or cur is None or base.basis != "blocks" or cur.basis != "blocks":
        side = "baseline" if base is None or base.basis != "blocks" else "current"
        return CheckResult(SKIP, "speedup", name, label, f"no paired (block-timed) speed-up in the {side} folder")
    # fell = baseline's speed-up / current's (> 1: the plan gained less over its baseline than before)
    fell, p = paired_stats.ratio_of_intervals((cur.value, cur.low, cur.high, cur.clusters),
                                              (base.value, base.low, base.high, base.clusters))
    details = {"metric": rule.metric, "baseline": base.value, "current": cur.value, "fell": fell, "p_value": p,
               "threshold": rule.threshold, "alpha": rule.alpha, "combination_id": combination_id}
    text = (f"speed-up {cur.ci_text()} vs {base.ci_text()} in the baseline folder (paired within each folder: "
            f"host speed cancels); fell {fell:.3f}x, p={p:.2g}, threshold {rule.threshold:.0%}")
    if fell <= 1.0 + rule.threshold:
        return CheckResult(PASS, "speedup", name, label, text, details)
    if p < rule.alpha:
        return CheckResult(FAIL, "speedup", name, label, text, details)
    return CheckResult(INCONCLUSIVE, "speedup", name, label, text + " (not significant: inconclusive)", details)


# ---- deterministic checks vs baseline ------------------------------------------------------------

def check_toggles(rule: TogglesRule, base: RunResult, cur: RunResult) -> CheckResult:
    """Every toggle effectively `on` in the baseline must still be `on` for the same run_id."""
    if not base.plan:
        return CheckResult(SKIP, "toggles", rule.name, cur.run_id, "baseline run has no plan")
    was_on = [t for t, d in base.plan.decisions.items() if d.state == "on"]
    lost = []
    for toggle in was_on:
        now = cur.plan.decisions.get(toggle)
        if now is None or now.state != "on":
            reason = f" ({now.reason})" if now is not None and now.reason else ""
            lost.append(f"{toggle} was on in the baseline, now {now.state if now else 'missing'}{reason}")
    details = {"was_on": was_on, "lost": lost}
    if lost:
        return CheckResult(FAIL, "toggles", rule.name, cur.run_id, "; ".join(lost), details)
    return CheckResult(PASS, "toggles", rule.name, cur.run_id,
                       f"{len(was_on)} toggle(s) on as in the baseline", details)


def check_op_count(rule: OpCountRule, base: RunResult, cur: RunResult) -> CheckResult:
    """Decode ops per step, in total and per op name, must not exceed baseline * (1 + tolerance); an op
    absent from the baseline counts as 0 there (a fused path that falls apart shows new op names)."""
    base_total, cur_total = base.trace.decode_ops_per_step, cur.trace.decode_ops_per_step
    if base_total is None or cur_total is None:
        side = "baseline" if base_total is None else "current"
        return CheckResult(SKIP, "op_count", rule.name, cur.run_id,
                           f"no decode op count in the {side} run (trace)")
    factor = 1.0 + rule.tolerance
    grown = []
    if float(cur_total) > float(base_total) * factor + _COUNT_SLACK:
        grown.append(f"total {cur_total:g} > {base_total:g}")
    if rule.per_op:
        base_ops = base.trace.op_counts_per_decode_step
        cur_ops = cur.trace.op_counts_per_decode_step
        if base_ops and cur_ops:
            for op in sorted(cur_ops):
                before = float(base_ops.get(op, 0))
                if float(cur_ops[op]) > before * factor + _COUNT_SLACK:
                    grown.append(f"{op} {before:g} -> {float(cur_ops[op]):g}")
    tolerance = f"tolerance {rule.tolerance * 100:g}%"
    details = {"baseline": base_total, "current": cur_total, "tolerance": rule.tolerance, "grown": grown}
    if grown:
        shown = ", ".join(grown[:6]) + (f", ... ({len(grown) - 6} more)" if len(grown) > 6 else "")
        return CheckResult(FAIL, "op_count", rule.name, cur.run_id,
                           f"decode ops per step grew: {shown} ({tolerance})", details)
    return CheckResult(PASS, "op_count", rule.name, cur.run_id,
                       f"decode ops per step {cur_total:g} vs {base_total:g} ({tolerance})", details)


# ---- current folder only -------------------------------------------------------------------------

def check_numerics(rule: NumericsRule, cur: RunResult) -> CheckResult:
    """The replayed run's relative error against the all-off reference (the worst layer branch or the logits) <=
    the bound for its dtype (and, where the rule sets them, max_abs_logit_diff and tokens_match). A run that asked
    for numerics and has none FAILs, naming why; only a run whose check was turned off is skipped."""
    numerics, dtype = cur.numerics, cur.spec.dtype
    if not cur.spec.numerics_check:
        return CheckResult(SKIP, "numerics", rule.name, cur.run_id,
                           "numerics check turned off for this run (perfbench.measure.numerics_check=false)")
    error, diff, tokens_match = numerics.max_rel_error, numerics.max_abs_logit_diff, numerics.tokens_match
    details = {"max_rel_error": error, "where": numerics.where if error is not None else None,
               "max_abs_logit_diff": diff, "tokens_match": tokens_match, "dtype": dtype,
               "bound": rule.max_rel_error.get(dtype, rule.max_rel_error.get("*"))}
    if error is None:
        why = numerics.not_compared or "no numerics recorded"
        return CheckResult(FAIL, "numerics", rule.name, cur.run_id, f"numerics not compared: {why}", details)
    problems, facts = [], []
    for name, value, bounds in (("relative error", error, rule.max_rel_error),
                                ("max_abs_logit_diff", diff, rule.max_abs_logit_diff)):
        bound = bounds.get(dtype, bounds.get("*"))
        if value is None or bound is None:
            continue
        if not float(value) <= bound:
            problems.append(f"{name} {float(value):.3g} > {bound:g} ({dtype}) at {numerics.where}")
        else:
            facts.append(f"{name} {float(value):.3g} <= {bound:g}")
    if rule.tokens_match and tokens_match is False:
        problems.append(f"greedy tokens differ from the reference from step {numerics.first_mismatch_step}")
    elif numerics.top1_agreement is not None:
        facts.append(f"top-1 agreement {numerics.top1_agreement:.3g}")
    if problems:
        return CheckResult(FAIL, "numerics", rule.name, cur.run_id, "; ".join(problems), details)
    return CheckResult(PASS, "numerics", rule.name, cur.run_id, ", ".join(facts), details)


def check_trace_plan(rule: TracePlanRule, cur: RunResult) -> CheckResult:
    """The run's profiled trace matched its effective plan (recorded by the worker as `trace.plan_check`)."""
    checks = cur.trace.plan_check
    if not checks:
        return CheckResult(SKIP, "trace_plan", rule.name, cur.run_id, "no trace checked against the plan")
    broken = [c.line for c in checks if c.ok is False]
    checked = sum(c.ok is True for c in checks)
    details = {"plan_check": [c.to_dict() for c in checks]}
    if broken:
        return CheckResult(FAIL, "trace_plan", rule.name, cur.run_id, "; ".join(broken), details)
    return CheckResult(PASS, "trace_plan", rule.name, cur.run_id,
                       f"{checked} toggle(s) match their trace signature", details)


def _selector_toggles(rule: RatioRule) -> set[str]:
    return {key.split(".", 1)[1] for key in (*rule.numerator, *rule.denominator) if "." in key}


def _other_toggles(result: RunResult, skip: set[str]) -> tuple[bool, ...]:
    ran = result.ran_on()
    return tuple(t in ran for t in TOGGLE_NAMES if t not in skip)


def ratio_pairs(rule: RatioRule, current: list[RunResult]) -> list[tuple[RunResult, RunResult]]:
    """(numerator, denominator) runs that differ in the selectors and agree on `match` (minus the fields the
    selectors name) and on every other toggle's effective state."""
    ok = [r for r in current if r.status == "ok" and selects(r, rule.where)]
    skip = _selector_toggles(rule)
    keys = [k for k in rule.match if k not in rule.numerator and k not in rule.denominator]

    def identity(r: RunResult) -> tuple[Any, ...]:
        return (*(r.selector_field(k) for k in keys), _other_toggles(r, skip))

    numerators = [r for r in ok if selects(r, rule.numerator)]
    denominators = [r for r in ok if selects(r, rule.denominator)]
    return [(n, d) for n in numerators for d in denominators
            if n.run_id != d.run_id and identity(n) == identity(d)]


def check_ratio_pair(rule: RatioRule, num: RunResult, den: RunResult) -> CheckResult:
    """metric(numerator) / metric(denominator) within [min, max]; the 95 % bootstrap CI is reported when
    both runs have raw samples (informative only: the bound applies to the point ratio)."""
    metric = METRICS[rule.metric]
    name = rule.name or f"{rule.metric} ratio"
    pair_id = f"{num.run_id}/{den.run_id}"
    paired = paired_values(num, den, metric)
    num_value, den_value, num_samples, den_samples = (paired.first, paired.second, paired.first_samples,
                                                      paired.second_samples)
    if num_value is None or den_value is None or den_value <= 0:
        return CheckResult(FAIL, "ratio", name, pair_id, f"no usable {metric.summary_key} in the pair")
    ratio = num_value / den_value
    details: dict[str, Any] = {"metric": rule.metric, "ratio": ratio, "numerator": num_value,
                               "denominator": den_value, "min": rule.min, "max": rule.max,
                               "numerator_run": num.run_id, "denominator_run": den.run_id}
    low = high = ratio  # without raw samples the point ratio alone decides
    ci = ""
    if num_samples and den_samples:
        change = effect(den_samples, num_samples, stat=_statistic(metric), n_boot=stats.N_BOOT)
        assert change.ci_low is not None and change.ci_high is not None  # asked with the default ci_level
        low, high = change.ci_low, change.ci_high
        details.update(ci_low=low, ci_high=high)
        ci = f", {stats.CI_LEVEL:.0%} CI [{low:.2f}, {high:.2f}]"
    bounds = " and ".join(b for b in (f">= {rule.min:g}" if rule.min is not None else "",
                                      f"<= {rule.max:g}" if rule.max is not None else "") if b)
    values = f"{fmt(num_value)} / {fmt(den_value)} {metric.unit}{ci}"
    # Decided only when the whole CI is on one side of each bound; a CI across a bound is inconclusive.
    outside = []
    if rule.min is not None and high < rule.min:
        outside.append(f"< min {rule.min:g}")
    if rule.max is not None and low > rule.max:
        outside.append(f"> max {rule.max:g}")
    straddled = [f"{b:g}" for b in (rule.min, rule.max) if b is not None and low < b <= high]
    if outside:
        # a contended machine could have made the pair look this way: it blocks a failure, never a pass
        if busy := contended(num, den):
            return CheckResult(INCONCLUSIVE, "ratio", name, pair_id,
                               f"{ratio:.2f}x {' and '.join(outside)}, not decided: {busy} ({values})", details)
        return CheckResult(FAIL, "ratio", name, pair_id, f"{ratio:.2f}x {' and '.join(outside)} ({values})",
                           details)
    if straddled:
        return CheckResult(INCONCLUSIVE, "ratio", name, pair_id,
                           f"{ratio:.2f}x, CI spans the bound {' and '.join(straddled)}: not decided ({values})",
                           details)
    return CheckResult(PASS, "ratio", name, pair_id, f"{ratio:.2f}x {bounds} ({values})", details)
