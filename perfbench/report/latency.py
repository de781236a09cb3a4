"""The latency table: TTFT and TPOT (median with a bootstrap CI, p90, p99) and throughputs per run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfbench.analysis import stats
from perfbench.analysis.attribution import combo_label
from perfbench.analysis.stats import CI_LEVEL
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results import RunResult

# (summary prefix, raw sample key) of the two latencies the worker times.
LATENCIES = (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"))


def latency_stats(result: RunResult, prefix: str, sample_key: str) -> dict[str, Any]:
    """median/p90/p99 from the summary (from the samples where the summary lacks them), n, and a percentile
    bootstrap CI of the median from the raw samples (needs two samples or more)."""
    samples = result.finite_samples(sample_key)
    out: dict[str, Any] = {f"{prefix}_n": len(samples)}
    derived = {"median": stats.median, "p90": lambda v: stats.percentile(v, 90),
               "p99": lambda v: stats.percentile(v, 99)}
    for name, estimator in derived.items():
        value = result.metric(f"{prefix}_{name}")
        out[f"{prefix}_{name}"] = value if value is not None or not samples else estimator(samples)
    if len(samples) >= 2:
        out[f"{prefix}_ci_lo"], out[f"{prefix}_ci_hi"] = stats.bootstrap_ci(samples, level=CI_LEVEL)
    return out


def realised_lengths(result: RunResult) -> str:
    """The prompt lengths a run drew from its length distribution, and what it decoded ("" without one)."""
    spec = result.spec
    if not spec.prompt_lens:
        return ""
    asked = ",".join(map(str, spec.requested_output_lens or []))
    return (f"prompts {','.join(map(str, spec.prompt_lens))}; {spec.output_len} tokens each (asked {asked}: "
            "no early stop)")


def latency_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    ok = sorted((r for r in results if r.status == "ok"),
                key=lambda r: (r.shape(), combo_label(r.effective_on()), r.run_id))
    rows = []
    for r in ok:
        row: dict[str, Any] = {"run_id": r.run_id, "shape": r.shape().label(),
                               "toggles_on": combo_label(r.effective_on()), "lengths": realised_lengths(r)}
        for prefix, sample_key in LATENCIES:
            row.update(latency_stats(r, prefix, sample_key))
        row.update(r.summary.model_dump(include={"prefill_tok_s", "decode_tok_s", "compile_s", "first_ttft_ms",
                                                 "peak_mem_mb"}))
        row["stable"] = {True: "yes", False: "no", None: ""}[r.is_stable()]
        row["unstable_reason"] = r.stability.reason
        row["stop_reason"] = r.stop_reason
        rows.append(row)
    return rows


def latency_section(results: Sequence[RunResult]) -> Section:
    section = Section("Latency")
    rows = latency_rows(results)
    if not rows:
        section.blocks.append(Text("No run finished ok, so there are no latencies to show; see Failures.",
                                   note=True))
        return section
    section.blocks.append(Text(
        "TTFT: time to first token (prefill), per timed iteration. TPOT: time per output token, the mean of the "
        f"decode steps of each timed iteration (one sample per iteration). Brackets: {CI_LEVEL:.0%} "
        "percentile-bootstrap CI of the median from the samples; n: number of samples. stable: the run's "
        "stability verdict (CI width, outliers, machine load), with its reason when it is not.", note=True))
    columns = [Column("run_id"), Column("shape"), Column("toggles_on")]
    if any(row["lengths"] for row in rows):  # drawn from perfbench.workload.lengths: the realised lengths
        columns.append(Column("lengths", "realised lengths"))
    for prefix, _ in LATENCIES:
        columns += [Column(f"{prefix}_median", ci=(f"{prefix}_ci_lo", f"{prefix}_ci_hi")),
                    Column(f"{prefix}_p90"), Column(f"{prefix}_p99"), Column(f"{prefix}_n")]
    columns += [Column("prefill_tok_s"), Column("decode_tok_s"), Column("compile_s"), Column("first_ttft_ms"),
                Column("peak_mem_mb"), Column("stop_reason"), Column("stable"), Column("unstable_reason")]
    section.blocks.append(Table("latency", columns, rows))
    return section
