"""The terminal table, the report's headline and its ablation lay out one folder analysis: for every toggle of a
default run (timed in interleaved blocks) they give the same speed-up and CI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.folder_analysis import analyse, analyse_folder
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.pages.table import Table
from perfbench.report.build import report_sections
from perfbench.results import RunPlan, RunResult, RunSpec, load_folder, write_results
from perfbench.run.summary_table import summary_table
from tests.records_kit import run_result

# toggle -> planted (TTFT, TPOT) speed-up: every iteration of its plan takes 1 / speed-up of the baseline's
PLANTED = {"fused_rope": (1.05, 1.10), "fused_attention": (1.20, 1.25), "grouped_moe": (1.00, 1.40)}
BLOCKS, EPOCH = 30, 5  # 30 blocks in epochs of 5: 6 clusters, so a t CI with 5 degrees of freedom


def _blocked(on: tuple[str, ...], drift: np.ndarray, rng: np.random.Generator) -> RunResult:
    """One plan timed in every block of one process. The existing builders (tests/perfbench/run/
    test_summary_table.py, tests/perfbench/history/conftest.py) plant noiseless pairs whose CI collapses to a
    point; here each iteration has its own 2% noise, so the CIs are real intervals to compare."""
    ttft_gain = float(np.prod([PLANTED[t][0] for t in on]))
    tpot_gain = float(np.prod([PLANTED[t][1] for t in on]))
    ttft = list(100.0 / ttft_gain * drift * np.exp(0.02 * rng.standard_normal(BLOCKS)))
    tpot = list(10.0 / tpot_gain * drift * np.exp(0.02 * rng.standard_normal(BLOCKS)))
    run_id = "+".join(on) or "base"
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES})
    return run_result(run_id, spec=RunSpec(run_id=run_id, scenario="default", timing="blocks", block_group="g"),
                      plan=plan, samples={"ttft_ms": ttft, "tpot_ms": tpot},
                      summary={"ttft_ms_median": float(np.median(ttft)), "tpot_ms_median": float(np.median(tpot))},
                      blocks={"group": "g", "process": "p1", "index": list(range(BLOCKS)),
                              "epoch": [i // EPOCH for i in range(BLOCKS)]})


@pytest.fixture(scope="module")
def default_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default run's folder: the baseline and each toggle alone, written by perfbench's own writer."""
    rng = np.random.default_rng(7)
    drift = np.exp(0.3 * rng.standard_normal(BLOCKS))  # the host's speed moves every plan of a block alike
    folder = tmp_path_factory.mktemp("default")
    write_results(folder, [_blocked(on, drift, rng) for on in [(), *((t,) for t in PLANTED)]])
    return folder


def _terminal_gains(text: str, label: str) -> tuple[tuple[float, float, float], ...]:
    """(value, low, high) of the TTFT and TPOT speed-ups in the end table's row of `label`."""
    row = next(line for line in text.splitlines() if line.split()[0] == label)
    found = re.findall(r"([\d.]+)x \[([\d.]+),([\d.]+)\]", row)
    assert len(found) == 2, row
    return tuple(tuple(float(x) for x in triple) for triple in found)


def test_terminal_table_headline_and_ablation_agree_on_every_toggle(default_folder: Path) -> None:
    results = load_folder(default_folder).results
    tables = {t.name: t for s in report_sections(default_folder, analyse_folder(default_folder, results))
              for t in s.tables
              if isinstance(t, Table)}
    headline = {row["plan"]: row for row in tables["headline"].rows}
    terminal = summary_table(analyse(results))
    for key, metric in (("ttft_ms", "ttft_ms_median"), ("tpot_ms", "tpot_ms_median")):
        ablation = {row["toggle"]: row for row in tables[f"marginal_{metric}"].rows}
        assert set(ablation) == set(PLANTED)
        for toggle, gains in PLANTED.items():
            label = TOGGLE_ABBREV[toggle]
            head = headline[label]
            value, low, high = head[f"{key}_speedup"], head[f"{key}_lo"], head[f"{key}_hi"]
            # an independent check that these are the paired estimate: the planted speed-up lies in the CI,
            # which is a real interval (2% noise per iteration)
            planted = gains[0] if key == "ttft_ms" else gains[1]
            assert head["basis"] == "blocks"
            assert low < value < high and low < planted < high
            row = ablation[toggle]
            assert (row["speedup"], row["ci_lo"], row["ci_hi"]) == pytest.approx((value, low, high), rel=1e-12)
            # the end table prints two decimals (perfbench/run/summary_table.py short_number)
            shown = _terminal_gains(terminal, label)[0 if key == "ttft_ms" else 1]
            assert shown == pytest.approx((value, low, high), abs=0.005 + 1e-9)
