"""The report opens with the speed-up forest plot, then the advisor's findings, before every detail, and says
"No findings" when none fire; the plan table names each run's execution mode."""

from __future__ import annotations

import re

from perfbench.report import build_report
from perfbench.report.findings import NO_FINDINGS
from perfbench.report.runs import plan_section
from perfbench.results import RunPlan, RunSpec
from tests.records_kit import run_result


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"><h2>', page)


def _findings_html(page: str) -> str:
    return page.split('<section id="findings">', 1)[1].split("</section>", 1)[0]


def test_findings_come_first_and_carry_the_planted_slower_toggle(tmp_path, make_folder):
    # fused_rope alone planted 1.5x slower than its 1.10x speed-up: 1.36x the baseline's time
    folder = make_folder(tmp_path / "slow", failed=False, slowdown={"r-fused_rope": 1.5})
    page = build_report(folder).read_text()
    sections = _sections(page)
    assert sections[:2] == ["speed-ups", "findings"]
    assert {"headline", "time-breakdown", "effective-plan"} <= set(sections[2:])
    findings = _findings_html(page)
    assert "toggle-slower" in findings and "fused_rope measured slower than its fallback" in findings
    csv = (folder / "report" / "findings.csv").read_text()
    assert csv.startswith("severity,rule,message,where") and "toggle-slower" in csv


def test_an_empty_findings_list_says_so(tmp_path, make_folder):
    folder = make_folder(tmp_path / "plain")
    page = build_report(folder).read_text()
    assert _sections(page)[:2] == ["speed-ups", "findings"]
    assert NO_FINDINGS in _findings_html(page) and NO_FINDINGS.startswith("No findings")
    assert not (folder / "report" / "findings.csv").exists()


def test_the_plan_table_names_the_execution_mode():
    spec = RunSpec(run_id="g", scenario="s", device="npu", toggles={"graph_mode": True, "grouped_moe": True})
    plan = RunPlan.from_dict({"graph_mode": {"requested": True, "state": "on", "impl": "torchair npugraph_ex"},
                              "grouped_moe": {"requested": True, "state": "on"}})
    emulated = run_result("g", spec=spec, plan=plan, env={"emulation": "emulated npu (950)"})
    eager = run_result("e", plan=RunPlan.from_dict({}))
    (table,) = [b for b in plan_section([emulated, eager]).blocks if getattr(b, "name", "") == "plan"]
    assert [row["mode"] for row in table.rows] == [
        "npugraph_ex (graph mode; emulated npu (950), CPU timings)", "eager"]
