"""The report's first screen: the forest plot of single-toggle speed-ups, a headline whose columns agree with its
verdicts, an environment table of distinct values, short plan names on the charts, and warnings that name the
setting that helps."""

from __future__ import annotations

import re

import numpy as np

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.folder_analysis import analyse
from perfbench.analysis.plan_warnings import failure_hint, more_blocks_hint, plan_warnings
from perfbench.pages.page import Svg, Text
from perfbench.pages.table import Table
from perfbench.report.ablation import ablation_section
from perfbench.report.breakdown import breakdown_section
from perfbench.report.forest import VERDICT_COLOURS, speedups_section
from perfbench.report.headline import headline_section
from perfbench.report.runs import environment_rows
from perfbench.results import RunPlan, RunResult, RunSpec
from tests.records_kit import run_result

DRIFT = (1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.0, 0.85, 1.15, 1.05)


def _blocked(run_id: str, on: tuple[str, ...], ratio: float, stable: bool = True) -> RunResult:
    """A run timed in interleaved blocks: every iteration `ratio` of the baseline's, the host's drift shared."""
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES})
    return run_result(run_id, spec=RunSpec(run_id=run_id, scenario="s", timing="blocks", block_group="g"),
                      plan=plan, samples={"ttft_ms": [50 * ratio * d for d in DRIFT],
                                          "tpot_ms": [10 * ratio * d for d in DRIFT]},
                      blocks={"group": "g", "process": "p1", "index": list(range(len(DRIFT))),
                              "epoch": [i // 2 for i in range(len(DRIFT))]},
                      stability={"stable": stable, "reason": "" if stable else "CI too wide"})


def _section_with_blocks(make_folder, tmp_path, **kwargs):
    from perfbench.analysis.folder_analysis import analyse_folder
    from perfbench.results import load_folder

    folder = make_folder(tmp_path / "r", traces=False, failed=False, **kwargs)
    analysis = analyse_folder(folder, load_folder(folder).results)
    return analysis, speedups_section(analysis)


def test_the_forest_plot_draws_each_single_toggle_with_its_verdict_colour(tmp_path, make_folder, planted):
    analysis, section = _section_with_blocks(make_folder, tmp_path, slowdown={"r-fused_rope": 1.5})
    (plot,) = [b for b in section.blocks if isinstance(b, Svg)]
    marks = re.findall(r"<g><title>([^<]*)</title>(.*?)</g>", plot.markup)
    # TTFT and TPOT of each toggle alone at bs=1, and of grouped_moe alone at bs=4 (against the bs=4 all-off run)
    assert len(marks) == 2 * (len(planted.speedups) + 1)
    by_label = {title.split(":")[0]: body for title, body in marks}
    assert f'fill="{VERDICT_COLOURS["slower"]}"' in by_label["+rope (fused_rope) · bs=1, TPOT (decode)"]
    assert f'fill="{VERDICT_COLOURS["faster"]}"' in by_label["+gmm (grouped_moe) · bs=1, TPOT (decode)"]
    # bs=4 against its own all-off run: the toggle's speed-up, not the batch's slow-down
    assert f'fill="{VERDICT_COLOURS["faster"]}"' in by_label["+gmm (grouped_moe) · bs=4, TTFT (prefill)"]
    bs4 = next(sb for sb in analysis.by_shape if sb.shape.batch_size == 4)
    moe = next(r for r in analysis.merged if r.run_id == "bs4-moe")
    assert f"bs=4, TTFT (prefill): {bs4.gains[moe.spec.combination_id]['ttft_ms'].value:.3f}x" in plot.markup
    # the hover text carries the numbers of the headline's speed-up
    attn = next(r for r in analysis.merged if r.run_id == "r-fused_attention")
    gain = analysis.gains[attn.spec.combination_id]["tpot_ms"]
    assert f"+attn (fused_attention) · bs=1, TPOT (decode): {gain.value:.3f}x" in plot.markup
    assert "<script" not in plot.markup and "href" not in plot.markup


def test_without_a_single_toggle_plan_every_plan_is_drawn(tmp_path, make_folder):
    # the grid without its one-toggle runs: only pairs and the all-on plan are left
    _, section = _section_with_blocks(make_folder, tmp_path, drop=("r-fused_rope", "r-fused_attention",
                                                                   "r-grouped_moe", "bs4-base", "bs4-moe"))
    (plot,) = [b for b in section.blocks if isinstance(b, Svg)]
    assert "each plan (no plan adds a single toggle)" in plot.caption
    assert len(re.findall(r"<g><title>", plot.markup)) == 2 * 4  # three pairs and all on, two metrics


def test_the_headline_has_no_stable_column_when_every_speed_up_comes_from_blocks():
    runs = [_blocked("base", (), 1.0), _blocked("gdr", ("chunk_gdr",), 0.5, stable=False)]
    (table,) = [b for b in headline_section(analyse(runs)).blocks if isinstance(b, Table)]
    assert table.rows[0]["tpot_ms_verdict"] == "faster" and table.rows[0]["basis"] == "blocks"
    assert "stable" not in [c.key for c in table.columns] and "stable" not in table.rows[0]


def test_the_headline_keeps_the_stable_column_for_runs_timed_separately():
    runs = [_blocked(run_id, on, ratio, stable) for run_id, on, ratio, stable in (
        ("base", (), 1.0, True), ("gdr", ("chunk_gdr",), 0.5, False))]
    separate = [r.model_copy(update={"spec": r.spec.model_copy(update={"timing": "separate", "block_group": ""}),
                                     "blocks": type(r.blocks)()}) for r in runs]
    (table,) = [b for b in headline_section(analyse(separate)).blocks if isinstance(b, Table)]
    assert table.rows[0]["basis"] != "blocks"
    assert "stable" in [c.key for c in table.columns] and table.rows[0]["stable"] == "no"


def test_the_environment_shows_each_key_once_with_dates_as_a_range():
    runs = [run_result(f"r{i}", env={"date": f"2026-11-30T18:0{min(i, 6)}:00", "torch": "2.13.0", "cann": None,
                                     "torch_npu": "", "hostname": "a" if i < 7 else "b"}) for i in range(10)]
    rows = {row["key"]: row for row in environment_rows(runs)}
    assert "cann" not in rows and "torch_npu" not in rows  # unknown on every run: left out
    assert rows["date"]["value"] == "2026-11-30T18:00:00 .. 2026-11-30T18:06:00 (7 values)"
    assert rows["hostname"]["value"] == "a (7 runs); b (3 runs)"  # not dates: each distinct value
    assert rows["torch"] == {"key": "torch", "value": "2.13.0", "runs": 10}


def test_a_key_one_run_knows_is_shown_with_that_one_run():
    runs = [run_result(f"r{i}", env={"cann": "8.0" if i == 0 else None}) for i in range(3)]
    assert environment_rows(runs) == [{"key": "cann", "value": "8.0", "runs": 1}]


def test_breakdown_bars_use_short_plan_names_with_a_legend(tmp_path, make_folder):
    from perfbench.analysis.folder_analysis import analyse_folder
    from perfbench.pages.page import Figure
    from perfbench.results import load_folder

    folder = make_folder(tmp_path / "r", failed=False)
    analysis = analyse_folder(folder, load_folder(folder).results)
    section = breakdown_section(analysis.first_round, analysis.trace_tables)
    assert any(isinstance(b, Figure) for b in section.blocks)
    legends = [b.text for b in section.blocks if isinstance(b, Text) and b.text.startswith("legend: ")]
    assert legends and all(line == "legend: rope fused_rope, attn fused_attention, gmm grouped_moe"
                           for line in legends)
    table = next(b for b in section.blocks if isinstance(b, Table) and b.name == "time_by_category")
    assert "fused_rope+fused_attention+grouped_moe" in {row["toggles_on"] for row in table.rows}  # CSV: full
    ablation = ablation_section(analysis)
    figures = [i for i, b in enumerate(ablation.blocks) if isinstance(b, Figure)]
    assert figures
    keys = [i for i, b in enumerate(ablation.blocks) if isinstance(b, Text) and b.text.startswith("legend: ")]
    # bs=1 charts all three toggles, bs=4 grouped_moe alone; TTFT and TPOT each
    assert [ablation.blocks[i].text for i in keys] == [
        "legend: rope fused_rope, attn fused_attention, gmm grouped_moe", "legend: gmm grouped_moe"] * 2
    assert all(any(f < k for f in figures) for k in keys)  # each legend follows its charts


def _inconclusive(stop_reason: str) -> list[str]:
    rng = np.random.default_rng(0)
    noise = rng.lognormal(0, 0.3, len(DRIFT))
    base = _blocked("base", (), 1.0)
    plan = _blocked("gdr", ("chunk_gdr",), 1.0).model_copy(update={"stop_reason": stop_reason, "samples": {
        "ttft_ms": [50 * d * n for d, n in zip(DRIFT, noise)], "tpot_ms": [10 * d * n for d, n in zip(DRIFT, noise)]}})
    analysis = analyse([base, plan])
    return [w for ws in plan_warnings(analysis.results, analysis.merged, analysis.baseline, analysis.gains).values()
            for w in ws]


def test_an_undecided_pair_names_the_setting_that_stopped_its_blocks():
    by_time = [w for w in _inconclusive("max_time") if " inconclusive: " in w]
    assert by_time and all(w.endswith("run more blocks: --set perfbench.measure.max_time_s=40") for w in by_time)
    by_cap = [w for w in _inconclusive("max_iterations") if " inconclusive: " in w]
    assert by_cap and all("--set perfbench.measure.max_iterations=" in w for w in by_cap)


def test_the_block_hint_doubles_what_the_run_had():
    run = _blocked("x", (), 1.0)
    timed = run.model_copy(update={"spec": run.spec.model_copy(update={"max_time_s": 20.0, "max_iterations": 30}),
                                   "stop_reason": "max_time"})
    assert more_blocks_hint([timed]) == "run more blocks: --set perfbench.measure.max_time_s=40"
    capped = timed.model_copy(update={"stop_reason": "max_iterations"})
    assert more_blocks_hint([capped]) == "run more blocks: --set perfbench.measure.max_iterations=60"


def test_a_timed_out_run_is_told_its_timeout_setting():
    run = run_result("t", status="timeout", spec=RunSpec(run_id="t", scenario="s", timeout_s=300.0))
    assert failure_hint(run) == "give it longer: --set perfbench.measure.timeout_s=600"
    crashed = run_result("c", status="error")
    assert "runs/c/" in failure_hint(crashed)


def test_an_ab_folder_opens_with_its_verdicts_not_a_forest_plot(tmp_path, make_folder):
    import json

    from perfbench.report import build_report

    record = {"kind": "perfbench ab", "scenario": "s", "emulation": None, "base": {"ref": "main", "sha": "a" * 40},
              "head": {"ref": "HEAD", "sha": "b" * 40}, "exit_code": 0,
              "verdicts": {"r1": {"tpot_ms": {"ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01, "pairs": 20,
                                              "processes": 3, "band": 0.03, "verdict": "same"}}}}
    folder = make_folder(tmp_path / "ab", traces=False, failed=False)
    sections = re.findall(r'<section id="([^"]+)"><h2>', build_report(folder).read_text())
    assert sections[0] == "speed-ups"  # near miss: the same folder without its ab.json
    (folder / "ab.json").write_text(json.dumps(record))
    sections = re.findall(r'<section id="([^"]+)"><h2>', build_report(folder).read_text())
    assert "speed-ups" not in sections and sections[0] == "findings" and sections[1].startswith("a-b-")
