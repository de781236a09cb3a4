"""The decision of one timing job: its tests, judged together at planned looks over its time budget.

A *test* is one (run, metric) whose paired log ratio after / before is estimated per epoch
(perfbench/analysis/paired.py `cluster_estimate`). After each epoch the job asks `SequentialJob.after_epoch`;
at a planned look (`paired.LookPlan`: 1/k, 2/k, ... of the budget, and the last look before the budget runs out)
every test is judged by `paired.ratio_of_estimates`:

- each test at the family level (Bonferroni over the job's tests), so the words of one job hold jointly;
- interim looks at Haybittle-Peto's 99.9% (or the family level, if stricter), the last look at the family level;
- "slower" verdicts that survive Holm's step-down correction are the job's regressions (its exit code).

The job stops at the last look, or at the first look where every test is *settled*: "slower" or "faster", or
"same" with its estimate itself within the margin. A "same" whose estimate lies beyond the margin (an interval
[0.99, 1.045] around 1.017) is a true word, but the job goes on to see whether the change clears the margin: so
an A/A job stops early, and a 3% slowdown is not ended early as "same within 5%". This one function decides real
jobs (`perfbench ab`, the sweep's block groups, `gate --confirm`, `bisect`) and the simulated jobs of
`perfbench calibrate`, so what calibrate measures is what the jobs do.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from perfbench.analysis import paired
from perfbench.results.verdicts import (
    DEFAULT_BAND,
    DEFAULT_MARGIN,
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    check_widths,
)

Key = TypeVar("Key", bound=Hashable)
DEFAULT_LOOKS = 3


@dataclass(frozen=True)
class DecisionRule:
    """How a job's words are decided: the band of "same", the margin of "slower"/"faster", the planned looks."""

    band: float = DEFAULT_BAND
    margin: float = DEFAULT_MARGIN
    looks: int = DEFAULT_LOOKS

    def __post_init__(self) -> None:
        check_widths(self.band, self.margin)
        if self.looks < 1:
            raise ValueError(f"looks must be at least 1, got {self.looks}")


@dataclass(frozen=True)
class Judgement(Generic[Key]):
    """Every test's ratio at one look, which of them are regressions, and the level they were judged at."""

    ratios: dict[Key, paired.PairedRatio]
    regressions: dict[Key, bool]
    level: float
    final: bool

    @property
    def decided(self) -> bool:
        return bool(self.ratios) and all(r.verdict != INCONCLUSIVE for r in self.ratios.values())

    @property
    def settled(self) -> bool:
        return bool(self.ratios) and all(_settled(r) for r in self.ratios.values())

    @property
    def stops(self) -> bool:
        return self.final or self.settled

    @property
    def regressed(self) -> bool:
        return any(self.regressions.values())


def _settled(ratio: paired.PairedRatio) -> bool:
    if ratio.verdict in (SLOWER, FASTER):
        return True
    return ratio.verdict == SAME and abs(math.log(ratio.value)) <= math.log1p(ratio.margin)


def judge(estimates: Mapping[Key, Sequence[float]], pairs: Mapping[Key, int], rule: DecisionRule, tests: int,
          final: bool) -> Judgement[Key]:
    """Every test with at least one epoch, judged at the look's level for a family of `tests` tests."""
    level = paired.look_level(final, paired.family_level(tests))
    ratios = {key: paired.ratio_of_estimates(values, pairs.get(key, len(values)), rule.band, rule.margin, level)
              for key, values in estimates.items() if len(values)}
    flags = paired.regressions(list(ratios.values()))
    return Judgement(ratios, dict(zip(ratios, flags)), level, final)


@dataclass
class SequentialJob(Generic[Key]):
    """The looks of one job: `after_epoch` answers a judgement at a planned look, None between looks."""

    rule: DecisionRule
    max_time_s: float
    tests: int
    plan: paired.LookPlan = field(init=False)

    def __post_init__(self) -> None:
        self.plan = paired.LookPlan(self.max_time_s, self.rule.looks)

    def after_epoch(self, elapsed_s: float, next_epoch_s: float, estimates: Mapping[Key, Sequence[float]],
                    pairs: Mapping[Key, int]) -> Judgement[Key] | None:
        """After an epoch that ended `elapsed_s` into the budget, the next one expected to take `next_epoch_s`."""
        look, final = self.plan.due(elapsed_s, next_epoch_s)
        if not look:
            return None
        self.plan.done += 1
        return judge(estimates, pairs, self.rule, self.tests, final)

    def last_look(self, estimates: Mapping[Key, Sequence[float]], pairs: Mapping[Key, int]) -> Judgement[Key]:
        """The final look, taken when the budget ran out before the planned one (a deadline hit mid-epoch)."""
        self.plan.done += 1
        return judge(estimates, pairs, self.rule, self.tests, final=True)


