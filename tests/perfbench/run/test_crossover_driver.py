"""perfbench crossover's driver on synthetic paired runs (no model, no timing): per-phase speed-ups from the
within-block pairs, the crossings, the CSVs and the page; the roofline prior on a shipped scenario; bad input."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.crossover import SpeedupPoint
from perfbench.cli import main
from perfbench.config.scenario import load_scenario
from perfbench.measure.blocks import EPOCH_BLOCKS
from perfbench.report.crossover import write_crossover_page
from perfbench.results import RunPlan, RunResult, RunSpec
from perfbench.run.crossover import (
    POINT_MEASURE,
    check_search,
    environ_defaults,
    point_overrides,
    point_speedups,
    roofline_prior,
    run_search,
)
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result

TOGGLE = "fused_attention"


def _pair(x: int, tpot_speedup: float, rng: np.random.Generator, blocks: int = 12) -> list[RunResult]:
    """The plan without and with the toggle at input_len x, timed in `blocks` interleaved blocks: TTFT the same
    both ways, TPOT `tpot_speedup` times shorter with it; 1% noise per iteration."""
    runs = []
    for on in (False, True):
        toggles = {t: (t == TOGGLE and on) for t in TOGGLE_NAMES}
        spec = RunSpec(run_id=f"{x}-{on}", scenario="s", input_len=x, output_len=9, toggles=toggles)
        plan = RunPlan.from_dict({t: {"requested": toggles[t], "state": "on" if toggles[t] else "off",
                                      "reason": "", "impl": ""} for t in TOGGLE_NAMES})
        tpot = 10.0 / (tpot_speedup if on else 1.0)
        samples = {"ttft_ms": list(40.0 * (1 + 0.01 * rng.standard_normal(blocks))),
                   "tpot_ms": list(tpot * (1 + 0.01 * rng.standard_normal(blocks)))}
        runs.append(run_result(spec.run_id, spec=spec, plan=plan, samples=samples,
                               blocks={"group": f"g{x}", "process": f"p{x}", "index": list(range(blocks)),
                                       "runs": 2, "blocks": blocks}))
    return runs


def _curve_point(x: int, rng: np.random.Generator) -> dict[str, SpeedupPoint]:
    """TPOT speed-up 1 + 0.3 ln(256 / x) (falls through 1 at 256), TTFT 1, end to end = (40 + 80) / (40 + 80 / s);
    each with 2% noise and a CI of +- 4%."""
    s = 1.0 + 0.3 * math.log(256 / x)
    out = {}
    for phase, value in (("ttft", 1.0), ("tpot", s), ("e2e", 120 / (40 + 80 / s))):
        noisy = value * (1 + 0.02 * float(rng.standard_normal()))
        out[phase] = SpeedupPoint(x=x, value=noisy, low=noisy * 0.96, high=noisy * 1.04)
    return out


def test_search_shares_one_budget_finds_the_crossings_and_writes_csv_and_page(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    measured: list[int] = []

    def speedups_at(x: int) -> dict[str, SpeedupPoint]:
        measured.append(x)
        return _curve_point(x, rng)

    search = check_search("ci_smoke", TOGGLE, "input_len", "16:4096", [], 10, [])
    rows = run_search(search, tmp_path, speedups_at)
    by_phase = {r.phase: r.crossing for r in rows}
    assert len(measured) == len(set(measured)) == 10  # one budget, each point's sweep once
    assert by_phase["tpot"].found and by_phase["tpot"].low <= 256 <= by_phase["tpot"].high
    # end to end crosses 1 where TPOT does (s = 1 there)
    assert by_phase["e2e"].found and by_phase["e2e"].low <= 256 <= by_phase["e2e"].high
    assert by_phase["tpot"].high / by_phase["tpot"].low < 4  # narrowed from the range's 256x
    points = list(csv.DictReader(open(tmp_path / "crossover.csv")))
    assert {p["phase"] for p in points} == {"ttft", "tpot", "e2e"} and len(points) == 3 * 10
    crossings = list(csv.DictReader(open(tmp_path / "crossings.csv")))
    assert [c["phase"] for c in crossings] == ["ttft", "tpot", "e2e"]
    html = write_crossover_page(tmp_path, search, rows, {"tpot": {16: 1.5, 4096: 0.9}})
    assert "roofline prior" in html.read_text() and (tmp_path / "report" / "crossings.csv").is_file()


def test_point_speedups_are_without_over_with() -> None:
    gains = point_speedups(_pair(64, 1.25, np.random.default_rng(1), blocks=20), TOGGLE, 64)
    assert gains["tpot"].value == pytest.approx(1.25, rel=0.02) and gains["tpot"].low < 1.25 < gains["tpot"].high
    assert gains["ttft"].value == pytest.approx(1.0, rel=0.02)
    # end to end: (40 + 8 * 10) / (40 + 8 * 8) = 120 / 104
    assert gains["e2e"].value == pytest.approx(120 / 104, rel=0.02)


def test_a_point_sweeps_the_two_plans_at_its_shape_without_a_trace() -> None:
    search = check_search("ci_smoke", TOGGLE, "batch", None, [1.1], 6, ["perfbench.seed=3"])
    assert (search.lo, search.hi, search.thresholds) == (1, 64, [1.0, 1.1])
    assert point_overrides(search, 8) == [*POINT_MEASURE, "perfbench.seed=3", "perfbench.workload.batch_sizes=[8]",
                                          "perfbench.sweep.design=explicit",
                                          "perfbench.sweep.runs=[{fused_attention: false}, {fused_attention: true}]",
                                          "perfbench.measure.profile=false"]


def test_a_point_is_timed_in_epochs_even_where_the_scenario_fixes_five_iterations_and_set_wins() -> None:
    # ci_smoke times 5 iterations: one epoch, whose pairs are one cluster, which never decides a speed-up
    plain = load_scenario("ci_smoke", point_overrides(check_search("ci_smoke", TOGGLE, "batch", None, [], 6, []), 2))
    measure = plain.perfbench.measure
    assert measure.iterations is None and measure.min_iterations >= 3 * EPOCH_BLOCKS
    assert measure.numerics_check is False and measure.profile is False
    asked = check_search("ci_smoke", TOGGLE, "batch", None, [], 6, ["perfbench.measure.max_time_s=9"])
    assert load_scenario("ci_smoke", point_overrides(asked, 2)).perfbench.measure.max_time_s == 9


def test_roofline_prior_on_a_device_scenario() -> None:
    # qwen3_5_35b_ep8 prices on a documented Ascend device (no CPU measurement); graph_mode is host overhead
    # outside the roofline, fused_attention changes no counted work: the prior must exist and be finite
    search = check_search("qwen3_5_35b_ep8", "grouped_moe", "batch", "1:8", [], 4, [])
    prior = roofline_prior(search, [1, 8])
    assert set(prior["tpot"]) == {1, 8} and all(math.isfinite(v) and v > 0 for v in prior["tpot"].values())


@pytest.mark.parametrize("args,needle", [
    (["--toggle", "nope", "--over", "batch"], "unknown toggle"),
    (["--toggle", TOGGLE, "--over", "batch", "--range", "8:2"], "1 <= a < b"),
    (["--toggle", TOGGLE, "--over", "batch", "--range", "x"], "expected a:b"),
    (["--toggle", TOGGLE, "--over", "batch", "--points", "2"], "at least 3"),
    # past the model's limits: refused before the first point is measured, not after it
    (["--toggle", TOGGLE, "--over", "input_len", "--range", "16:100000000"], "max_position_embeddings"),
    (["--toggle", TOGGLE, "--over", "batch", "--range", "1:100000000000"], "2**31 - 1"),
])
def test_bad_input_is_one_error_line(args: list[str], needle: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["crossover", "ci_smoke", *args, "--out", str(tmp_path / "c")])
    assert needle in one_error_line(result)


def test_the_command_wires_search_prior_tables_and_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sweeps replaced by the synthetic curve (no model, no timing); the prior by a fixed curve
    import perfbench.run.crossover as driver

    rng = np.random.default_rng(2)
    monkeypatch.setattr(driver, "sweep_speedups", lambda search, out: lambda x: _curve_point(x, rng))
    monkeypatch.setattr(driver, "roofline_prior", lambda search, xs: {"tpot": {x: 1.2 for x in xs}})
    out = tmp_path / "c"
    result = CliRunner().invoke(main, ["crossover", "ci_smoke", "--toggle", TOGGLE, "--over", "input_len",
                                       "--range", "16:4096", "--threshold", "1.1", "--points", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "tpot: speed-up falls through 1 at" in result.output
    assert "tpot: speed-up falls through 1.1 at" in result.output
    points = list(csv.DictReader(open(out / "crossover.csv")))
    assert {p["roofline_speedup"] for p in points if p["phase"] == "tpot"} == {"1.2000"}
    assert (out / "crossover.html").is_file()


def test_a_result_folder_is_refused_as_out_before_anything_is_measured(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import perfbench.run.crossover as driver

    measured: list[int] = []
    rng = np.random.default_rng(2)
    def point(x: int):  # noqa: ANN202
        measured.append(x)
        return _curve_point(x, rng)

    monkeypatch.setattr(driver, "sweep_speedups", lambda search, out: point)
    monkeypatch.setattr(driver, "roofline_prior", lambda search, xs: {})
    args = ["crossover", "ci_smoke", "--toggle", TOGGLE, "--over", "input_len", "--range", "16:4096", "--points", "4"]
    for name in ("results.jsonl", "ab.json", "baseline.json"):
        sweep = tmp_path / name.split(".")[0]
        sweep.mkdir()
        (sweep / name).write_text("{}\n")
        line = one_error_line(CliRunner().invoke(main, [*args, "--out", str(sweep)]))
        assert f"holds {name}" in line and measured == []
        assert sorted(p.name for p in sweep.iterdir()) == [name]
    # the near miss: a crossover's own folder is taken again (its points are reused)
    out = tmp_path / "c"
    for _ in range(2):
        result = CliRunner().invoke(main, [*args, "--out", str(out)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("code", "signal_name"), [(143, "SIGTERM"), (130, "SIGINT")])
def test_a_signal_during_a_point_exits_with_its_own_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int,
                                                         signal_name: str) -> None:
    # the point's sweep saves what it measured and returns the signal's code: the search stops with it (not 2)
    monkeypatch.setattr("perfbench.run.runner.run_scenario", lambda *args, **kwargs: code)
    result = CliRunner().invoke(main, ["crossover", "ci_smoke", "--toggle", TOGGLE, "--over", "batch", "--range",
                                       "1:4", "--points", "3", "--out", str(tmp_path / "c")])
    assert result.exit_code == code, result.output
    assert f"interrupted by {signal_name}" in result.stderr and "error:" not in result.stderr


def test_environ_defaults_sets_only_what_is_unset_and_removes_it_after_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PB_TEST_SET", "the user's")
    monkeypatch.delenv("PB_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError, match="inside"), \
            environ_defaults({"PB_TEST_SET": "default", "PB_TEST_UNSET": "default"}):
        assert os.environ["PB_TEST_SET"] == "the user's"  # a value already set wins
        assert os.environ["PB_TEST_UNSET"] == "default"
        raise RuntimeError("inside")
    assert os.environ["PB_TEST_SET"] == "the user's"  # kept: this did not add it
    assert "PB_TEST_UNSET" not in os.environ  # removed although the block raised
