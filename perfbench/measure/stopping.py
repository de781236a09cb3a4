"""When to stop timing: adaptive iteration counts, as pyperf and criterion do.

Timing continues until the 95 % CI of the median of every watched metric (one sample per iteration) is
within `target_rel_ci` of that median, or a limit is reached; the reason is recorded with the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfbench.analysis.stability import rel_ci_width

CONVERGED = "converged"
MAX_ITERATIONS = "max_iterations"
MAX_TIME = "max_time"


@dataclass(frozen=True)
class StoppingRule:
    min_iterations: int = 5
    max_iterations: int = 50
    max_time_s: float | None = 30.0  # None: no time cap
    target_rel_ci: float | None = 0.05  # CI width of the median / median; None: run to a cap

    @classmethod
    def fixed(cls, iterations: int) -> StoppingRule:
        return cls(iterations, iterations, None, None)

    def __post_init__(self) -> None:
        if self.min_iterations < 1 or self.max_iterations < self.min_iterations:
            raise ValueError(f"need 1 <= min_iterations <= max_iterations, got {self.min_iterations} and "
                             f"{self.max_iterations}")

    def stop_reason(self, samples: dict[str, list[float]], elapsed_s: float) -> str | None:
        """Why to stop after the iterations in `samples` (each list one value per iteration), None to go on.

        The minimum always runs; then convergence of every metric, the iteration cap, the time cap, in order.
        """
        n = min((len(v) for v in samples.values()), default=0)
        if n < self.min_iterations:
            return None
        if self.target_rel_ci is not None:
            widths = [rel_ci_width(v) for v in samples.values() if v]
            if widths and all(w is not None and w <= self.target_rel_ci for w in widths):
                return CONVERGED
        if n >= self.max_iterations:
            return MAX_ITERATIONS
        if self.max_time_s is not None and elapsed_s >= self.max_time_s:
            return MAX_TIME
        return None
