"""The run-to-run band: how far the same benchmark moves between two processes on a quiet machine.

Iterations inside one process share its memory layout, thread placement and compiled code, so a test on
iteration samples under-states the variation between two runs of the same code. When a comparison has too
few rounds per side for a test on the round medians (fewer than four: perfbench/analysis/rounds.py
tested_samples), a difference inside this band is "no significant change" whatever the iteration-level test
says. With enough rounds the round medians are the samples and the band is not needed.

Measure the band on the machine the comparisons run on, with back-to-back A/A runs of the default scenario:

    python benchmarks/aa_runs.py --runs 6 --out reports/aa

which prints, per metric, the spread of the ratio between two runs of the same code; set the band to about
the largest |ratio - 1| it reports, either here (the recorded defaults) or per invocation with
`perfbench compare --band METRIC=FRACTION` (and the gate's `band` key of a timing rule).
"""

from __future__ import annotations

from perfbench.config.key_value import parse_key_number

# relative half-width: a ratio B/A in [1 / (1 + band), 1 + band] is inside the band. Defaults for a CPU host;
# a dedicated accelerator host is usually quieter.
DEFAULT_BANDS: dict[str, float] = {
    "ttft_ms_median": 0.10,
    "tpot_ms_median": 0.08,
    "prefill_tok_s": 0.10,
    "decode_tok_s": 0.08,
}


def inside(metric: str, ratio: float, bands: dict[str, float] | None = None) -> bool:
    """Is B/A = `ratio` within the run-to-run band of `metric`? (False for a metric without a band.)"""
    band = (bands or DEFAULT_BANDS).get(metric, DEFAULT_BANDS.get(metric))
    if band is None or ratio <= 0:
        return False
    return 1.0 / (1.0 + band) <= ratio <= 1.0 + band


def parse_band(text: str) -> tuple[str, float]:
    """"METRIC=FRACTION" (e.g. tpot_ms_median=0.05) as (metric, fraction); UserError naming what is wrong."""
    return parse_key_number(text, "--band", list(DEFAULT_BANDS), "METRIC=FRACTION",
                            lambda fraction: 0.0 <= fraction < 1.0, "the fraction must be in [0, 1)")
