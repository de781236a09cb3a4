"""How much of the speed-up each toggle is responsible for.

Runs are grouped by workload shape; inside a shape every run is a *cell* keyed by its effective toggle set
(state "on" counts as on, "off" and "inactive" as off: an inactive toggle changed nothing that ran).

All effects live in log space of the metric's cost (log of a latency; minus the log of a throughput), so an
effect is the log of a speed-up factor: exp(effect) = time without / time with. Log space makes speed-ups
compose by addition, which is what lets marginal effects, leave-one-out losses and Shapley values of
independent toggles agree exactly, and it makes an interaction the part of a pair's joint speed-up that the
product of the two single speed-ups does not explain.

Designs and what they allow:
  one-at-a-time (baseline + each toggle alone)  -> `marginal_effects`
  cumulative (baseline, +a, +a+b, ...)          -> `cumulative_waterfall`
  leave-one-out (all on + all on minus one)     -> `leave_one_out`
  the four on/off corners of a pair             -> `interactions`
  the full 2^k factorial of the varied toggles  -> `shapley_values` (and everything above)
A function whose design is absent returns `Unavailable` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import cast

from model.toggles import TOGGLE_NAMES
from perfbench.analysis import stats
from perfbench.analysis.speedup import paired_ratio_ci, paired_speedup
from perfbench.analysis.stats import CI_LEVEL
from perfbench.errors import UserError
from perfbench.results import SUMMARY_KEYS, RunResult, WorkloadShape

# Metrics whose raw samples are kept (milliseconds per iteration / per decode step), so that a bootstrap CI
# of a ratio of medians can be computed. Other metrics get point estimates only.
SAMPLE_KEYS: dict[str, str] = {"ttft_ms_median": "ttft_ms", "tpot_ms_median": "tpot_ms"}
HIGHER_IS_BETTER: frozenset[str] = frozenset({"prefill_tok_s", "decode_tok_s"})


def higher_is_better(metric: str) -> bool:
    return metric in HIGHER_IS_BETTER


@dataclass(frozen=True)
class Unavailable:
    """An analysis the results' design does not support, and why."""

    reason: str


def toggle_order(toggles: Iterable[str]) -> list[str]:
    """Toggles in registry order (stable tables and plots)."""
    wanted = set(toggles)
    return [t for t in TOGGLE_NAMES if t in wanted] + sorted(wanted - set(TOGGLE_NAMES))


def combo_label(on: Iterable[str]) -> str:
    names = toggle_order(on)
    return "+".join(names) if names else "(all off)"


@dataclass(frozen=True)
class Cell:
    """The runs of one shape with one effective toggle set.

    value: median over the runs of the metric; samples: the runs' raw samples pooled (empty when the metric
    keeps none); by_round: (round, the metric's value in that round) of runs from interleaved rounds, which
    toggle effects pair with the same round of the other cell.
    """

    on: frozenset[str]
    value: float
    samples: tuple[float, ...]
    run_ids: tuple[str, ...]
    by_round: tuple[tuple[int, float], ...] = ()
    results: tuple[RunResult, ...] = ()  # the runs themselves: block-timed ones are compared on their pairs

    @property
    def runs(self) -> str:
        return ",".join(self.run_ids)


@dataclass
class Design:
    """The cells of one workload shape for one metric."""

    shape: WorkloadShape
    metric: str
    cells: dict[frozenset[str], Cell] = field(default_factory=dict)

    def cost(self, cell: Cell) -> float:
        """Log cost: smaller is faster whatever the metric's direction."""
        return -math.log(cell.value) if higher_is_better(self.metric) else math.log(cell.value)

    @property
    def varied(self) -> list[str]:
        """Toggles on in some cell and off in another: the only ones the results say anything about."""
        sets = list(self.cells)
        union = frozenset().union(*sets)
        common = frozenset.intersection(*sets) if sets else frozenset()
        return toggle_order(union - common)

    @property
    def constant_on(self) -> frozenset[str]:
        sets = list(self.cells)
        return frozenset.intersection(*sets) if sets else frozenset()

    @property
    def baseline(self) -> Cell | None:
        """The cell with every varied toggle off (the all-off run when no toggle is on everywhere)."""
        return self.cells.get(self.constant_on)

    @property
    def full(self) -> Cell | None:
        """The cell with every varied toggle on."""
        return self.cells.get(self.constant_on | frozenset(self.varied))

    def effect(self, without: frozenset[str], toggle_set: Iterable[str]) -> float | None:
        """Log speed-up of switching `toggle_set` on on top of `without`; None when a cell is missing."""
        before = self.cells.get(without)
        after = self.cells.get(without | frozenset(toggle_set))
        if before is None or after is None:
            return None
        return self.cost(before) - self.cost(after)


def designs(results: Sequence[RunResult], metric: str) -> list[Design]:
    """Group ok runs that report `metric` into one `Design` per workload shape (sorted by shape)."""
    if metric not in SUMMARY_KEYS:
        raise UserError(f"unknown metric `{metric}`; metrics are {', '.join(SUMMARY_KEYS)}")
    grouped: dict[WorkloadShape, dict[frozenset[str], list[RunResult]]] = {}
    for r in results:
        value = r.metric(metric)
        if r.status != "ok" or value is None or not math.isfinite(value) or value <= 0:
            continue
        grouped.setdefault(r.shape(), {}).setdefault(r.effective_on(), []).append(r)
    sample_key = SAMPLE_KEYS.get(metric)
    out = []
    for shape in sorted(grouped):
        design = Design(shape, metric)
        for on, runs in grouped[shape].items():
            samples = tuple(x for r in runs for x in r.finite_samples(sample_key)) if sample_key else ()
            # every grouped run has the metric (checked above)
            values = [cast(float, r.metric(metric)) for r in runs]
            by_round = tuple((r.spec.round, v) for r, v in zip(runs, values) if r.spec.rounds > 1)
            design.cells[on] = Cell(on=on, value=stats.median(values),
                                    samples=samples, run_ids=tuple(r.run_id for r in runs), by_round=by_round,
                                    results=tuple(runs))
        out.append(design)
    return out


@dataclass(frozen=True)
class ToggleEffect:
    """Switching `toggle` on in the context of `context` (the other toggles that were on).

    speedup = value_without / value_with for latencies (inverse for throughputs); > 1 means faster. Runs timed
    in the same blocks: the paired estimate and its CI instead (perfbench/analysis/speedup.py `paired_speedup`).
    ci_low/ci_high: else a t CI over paired rounds, or a bootstrap CI of the ratio of sample medians, when both
    cells keep raw samples.
    """

    toggle: str
    context: frozenset[str]
    value_without: float
    value_with: float
    log_effect: float
    runs_without: str
    runs_with: str
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def speedup(self) -> float:
        return math.exp(self.log_effect)


def _toggle_effect(design: Design, toggle: str, without: Cell, with_: Cell) -> ToggleEffect:
    log_effect = design.cost(without) - design.cost(with_)
    sample_key = SAMPLE_KEYS.get(design.metric)
    # runs timed in the same blocks: the headline's paired estimator (speedup.paired_speedup), value and CI both,
    # so that a toggle's speed-up reads the same in the headline, the ablation and the terminal table
    blocks = paired_speedup(list(without.results), list(with_.results), sample_key) if sample_key else None
    if blocks is not None:
        return ToggleEffect(toggle=toggle, context=without.on, value_without=without.value,
                            value_with=with_.value, log_effect=math.log(blocks.value), runs_without=without.runs,
                            runs_with=with_.runs, ci_low=blocks.low, ci_high=blocks.high)
    lo = hi = None
    paired = dict(with_.by_round)
    # interleaved rounds: the ratio within each round (both measured minutes apart), the round as the unit
    flip = higher_is_better(design.metric)  # a speed-up is without / with for latencies, with / without else
    ratios = [(paired[k] / v if flip else v / paired[k])
              for k, v in without.by_round if k in paired and v > 0 and paired[k] > 0]
    if len(ratios) >= 2:
        _, lo, hi = paired_ratio_ci(ratios)
    elif len(without.samples) >= 2 and len(with_.samples) >= 2:
        # ratio_ci gives median(after) / median(before); "after" = without makes it a speed-up of a latency.
        before, after = (without, with_) if higher_is_better(design.metric) else (with_, without)
        _, lo, hi = stats.ratio_ci(before.samples, after.samples, level=CI_LEVEL)
    return ToggleEffect(toggle=toggle, context=without.on, value_without=without.value,
                        value_with=with_.value, log_effect=log_effect,
                        runs_without=without.runs, runs_with=with_.runs, ci_low=lo, ci_high=hi)


def marginal_effects(design: Design) -> list[ToggleEffect] | Unavailable:
    """Speed-up of each toggle alone against the baseline (one-at-a-time design)."""
    base = design.baseline
    if base is None:
        return Unavailable("no baseline run (every varied toggle off) for this shape")
    effects = [_toggle_effect(design, t, base, design.cells[base.on | {t}])
               for t in design.varied if base.on | {t} in design.cells]
    return effects or Unavailable("no run switches on a single toggle on top of the baseline")


@dataclass(frozen=True)
class WaterfallStep:
    """One addition of a cumulative design: `effect` is this step's, cumulative_speedup is against the
    baseline."""

    effect: ToggleEffect
    cumulative_speedup: float


def _chain(design: Design, start: frozenset[str], goal: frozenset[str], order: list[str]) -> list[str] | None:
    """Toggles to add one at a time from `start` to `goal`, every intermediate cell present; preference
    follows `order` (depth first, so a cumulative design's unique chain is found)."""
    dead_ends: set[frozenset[str]] = set()

    def walk(current: frozenset[str]) -> list[str] | None:
        if current == goal:
            return []
        for t in order:
            nxt = current | {t}
            if t in current or nxt not in design.cells or nxt in dead_ends:
                continue
            rest = walk(nxt)
            if rest is not None:
                return [t, *rest]
            dead_ends.add(nxt)
        return None

    return walk(start)


def cumulative_waterfall(design: Design,
                         order: Sequence[str] | None = None) -> list[WaterfallStep] | Unavailable:
    """Each toggle's step from the baseline to all varied toggles on, adding one at a time.

    The chain follows `order` where the results allow a choice (a factorial); a cumulative design has only
    one chain. Without `order`, registry order breaks ties.
    """
    base, full = design.baseline, design.full
    if base is None or full is None or base is full:
        return Unavailable("needs both the baseline and the all-varied-on run of this shape")
    preference = [t for t in (order or []) if t in design.varied]
    preference += [t for t in design.varied if t not in preference]
    chain = _chain(design, base.on, full.on, preference)
    if chain is None:
        return Unavailable("no chain of runs adds the toggles one at a time from the baseline to all on")
    steps, current, total = [], base, 0.0
    for t in chain:
        nxt = design.cells[current.on | {t}]
        effect = _toggle_effect(design, t, current, nxt)
        total += effect.log_effect
        steps.append(WaterfallStep(effect=effect, cumulative_speedup=math.exp(total)))
        current = nxt
    return steps


def leave_one_out(design: Design) -> list[ToggleEffect] | Unavailable:
    """What each toggle still buys with every other toggle on: the loss when it alone is removed."""
    full = design.full
    if full is None or not design.varied:
        return Unavailable("no run with every varied toggle on for this shape")
    effects = [_toggle_effect(design, t, design.cells[full.on - {t}], full)
               for t in design.varied if full.on - {t} in design.cells]
    return effects or Unavailable("no run switches off a single toggle from the all-on run")


@dataclass(frozen=True)
class Interaction:
    """log_interaction = effect(a and b) - effect(a) - effect(b), averaged over every context (set of the
    other toggles) where all four corners were measured. > 0: the pair together beats the product of their
    single speed-ups (synergy); < 0: they overlap. factor = exp(log_interaction)."""

    a: str
    b: str
    effect_a: float
    effect_b: float
    effect_ab: float
    log_interaction: float
    contexts: int

    @property
    def factor(self) -> float:
        return math.exp(self.log_interaction)


def interactions(design: Design) -> list[Interaction] | Unavailable:
    """Pairwise interactions wherever a pair's four on/off corners exist (a 2^k factorial has all pairs)."""
    found = []
    for a, b in combinations(design.varied, 2):
        per_context = []
        for ctx in design.cells:
            if a in ctx or b in ctx:
                continue
            e_a, e_b, e_ab = (design.effect(ctx, s) for s in ({a}, {b}, {a, b}))
            if e_a is not None and e_b is not None and e_ab is not None:
                per_context.append((e_a, e_b, e_ab))
        if per_context:
            n = len(per_context)
            mean_a, mean_b, mean_ab = (sum(c[i] for c in per_context) / n for i in range(3))
            found.append(Interaction(a=a, b=b, effect_a=mean_a, effect_b=mean_b, effect_ab=mean_ab,
                                     log_interaction=mean_ab - mean_a - mean_b, contexts=n))
    if not found:
        return Unavailable("no pair of toggles has all four on/off combinations measured")
    return found


@dataclass(frozen=True)
class ShapleyValue:
    """The toggle's exact Shapley value of the log speed-up from baseline to all on.

    The values sum to the total log speed-up; an interaction is split equally between its pair.
    share_pct: the value as a percentage of that total.
    """

    toggle: str
    log_value: float
    share_pct: float | None

    @property
    def speedup(self) -> float:
        return math.exp(self.log_value)


def shapley_values(design: Design) -> list[ShapleyValue] | Unavailable:
    """Exact Shapley values over the varied toggles, with v(S) = log speed-up of S over the baseline.

    phi_i = sum over S not containing i of |S|! (k-|S|-1)! / k! * (v(S + i) - v(S)). Needs all 2^k cells.
    """
    players = design.varied
    k = len(players)
    if k == 0:
        return Unavailable("every run of this shape has the same effective toggles")
    base_on = design.constant_on
    subsets = [base_on | {p for bit, p in enumerate(players) if mask >> bit & 1} for mask in range(1 << k)]
    missing = sum(s not in design.cells for s in subsets)
    if missing:
        return Unavailable(f"needs all {1 << k} on/off combinations of the {k} varied toggles; "
                           f"{missing} missing")
    base_cost = design.cost(design.cells[base_on])
    value = [base_cost - design.cost(design.cells[s]) for s in subsets]
    weight = [math.factorial(s) * math.factorial(k - s - 1) / math.factorial(k) for s in range(k)]
    total = value[(1 << k) - 1]
    out = []
    for bit, p in enumerate(players):
        phi = sum(weight[bin(mask).count("1")] * (value[mask | 1 << bit] - value[mask])
                  for mask in range(1 << k) if not mask >> bit & 1)
        share = 100.0 * phi / total if total != 0 else None
        out.append(ShapleyValue(toggle=p, log_value=phi, share_pct=share))
    return out


@dataclass
class Attribution:
    """Every analysis of one shape and metric; each entry is its rows or why the design does not allow it."""

    design: Design
    marginal: list[ToggleEffect] | Unavailable
    waterfall: list[WaterfallStep] | Unavailable
    leave_one_out: list[ToggleEffect] | Unavailable
    interactions: list[Interaction] | Unavailable
    shapley: list[ShapleyValue] | Unavailable


def attribute(results: Sequence[RunResult], metric: str,
              order: Sequence[str] | None = None) -> list[Attribution]:
    """All analyses for every workload shape that has at least two distinct effective toggle sets."""
    out = []
    for design in designs(results, metric):
        if len(design.cells) < 2:
            continue
        out.append(Attribution(design=design, marginal=marginal_effects(design),
                               waterfall=cumulative_waterfall(design, order),
                               leave_one_out=leave_one_out(design), interactions=interactions(design),
                               shapley=shapley_values(design)))
    return out
