"""The four words every perfbench command says about a change in latency, each with one definition.

A verdict judges an interval [low, high] of the latency ratio after / before (> 1: slower) against two
relative widths: the *margin*, below which a change is too small to name, and the *band*, within which two
codes count as the same speed.

- *slower*: the whole interval lies above 1 + margin.
- *faster*: the whole interval lies below 1 / (1 + margin).
- *same*: the whole interval lies within [1 / (1 + band), 1 + band].
- *inconclusive*: anything else; the job says how much longer it would need.

"slower" and "faster" are checked first: an interval inside the band that also clears the margin ([1.02, 1.04])
is a change of 2-4%, measured, and is called one; "same" is an interval inside the band that does not clear the
margin. An interval that straddles the band's edge is never "same". These are the only words: `ab`, `run`'s end
table, `compare`, `gate`, `bisect` and the report import them from here.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Verdict = Literal["slower", "faster", "same", "inconclusive"]
SLOWER: Final = "slower"
FASTER: Final = "faster"
SAME: Final = "same"
INCONCLUSIVE: Final = "inconclusive"
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# "same": the whole interval within +-5% (a 2-core CPU host's honest reach in about two minutes, see
# docs/measurement_engine.md); "slower"/"faster": the whole interval beyond +-1%
DEFAULT_BAND = 0.05
DEFAULT_MARGIN = 0.01

DEFINITIONS: dict[Verdict, str] = {
    SLOWER: "the whole interval lies above 1 + margin",
    FASTER: "the whole interval lies below 1 / (1 + margin)",
    SAME: "the whole interval lies within 1 +- band (and does not clear the margin)",
    INCONCLUSIVE: "anything else (printed with the time it would still need)",
}


def check_widths(band: float, margin: float) -> None:
    """ValueError unless 0 <= margin < band."""
    if not band > 0:
        raise ValueError(f"band must be positive, got {band!r}")
    if not 0 <= margin < band:
        raise ValueError(f"margin must lie in [0, band), got {margin!r} (band {band!r})")


def decide(low: float, high: float, band: float = DEFAULT_BAND, margin: float = DEFAULT_MARGIN) -> Verdict:
    """The verdict on a latency ratio after / before whose interval is [low, high]."""
    check_widths(band, margin)
    if low > 1.0 + margin:
        return SLOWER
    if high < 1.0 / (1.0 + margin):
        return FASTER
    if 1.0 / (1.0 + band) <= low and high <= 1.0 + band:
        return SAME
    return INCONCLUSIVE


def decide_speedup(low: float, high: float, band: float = DEFAULT_BAND, margin: float = DEFAULT_MARGIN) -> Verdict:
    """The verdict on a speed-up before / after (> 1: faster) whose interval is [low, high]: the same rule on the
    inverted interval."""
    def inverse(x: float) -> float:
        return float("inf") if x == 0 else 1.0 / x

    return decide(inverse(high), inverse(low), band, margin)


def words_line(band: float = DEFAULT_BAND, margin: float = DEFAULT_MARGIN) -> str:
    """The four words in one line, with the widths they were judged by (end tables, reports, ab)."""
    return (f"faster/slower: the whole interval beyond +-{margin:.0%}; same: the whole interval within "
            f"+-{band:.0%}; inconclusive: anything else")
