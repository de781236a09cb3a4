"""What `gate` and `ab` leave for CI: a markdown summary appended to $GITHUB_STEP_SUMMARY (when set), a JUnit
file with one test case per check (--junit), and a short "what changed" text for a pull-request comment, written
only when something regressed (--comment).

The gate's checks come as its `GateReport`; an ab job's as its ab.json record (perfbench/results/ab_record.py),
one check per run and metric: slower is a failure, inconclusive is reported as skipped with its reason (the exit
code, 3, says it did not pass), faster and same pass.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from perfbench.analysis.stats import CI_LEVEL
from perfbench.gate.checks import FAIL, INCONCLUSIVE, PASS, SKIP
from perfbench.gate.engine import GateReport
from perfbench.results import atomic_write_text, verdicts
from perfbench.results.ab_record import ABRecord
from perfbench.results.verdicts import FASTER, SAME, SLOWER

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
AB_STATUS = {SLOWER: FAIL, FASTER: PASS, SAME: PASS, verdicts.INCONCLUSIVE: INCONCLUSIVE}


class CICheck(BaseModel):
    """One check as CI shows it."""

    model_config = ConfigDict(frozen=True)

    status: str  # PASS | FAIL | INCONCLUSIVE | SKIP
    suite: str  # the rule kind, or the run of an ab job
    name: str
    message: str


def gate_checks(report: GateReport) -> list[CICheck]:
    return [CICheck(status=c.status, suite=c.kind, name=f"{c.name}" + (f" [{c.run_id}]" if c.run_id else ""),
                    message=c.message) for c in report.checks]


def ab_checks(record: ABRecord) -> list[CICheck]:
    out = []
    for rid, per in sorted(record.verdicts.items()):
        for metric, v in sorted(per.items()):
            out.append(CICheck(status=AB_STATUS.get(v.verdict, INCONCLUSIVE), suite=rid, name=f"{rid} {metric}",
                               message=f"head/base {v.ratio:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}] {v.verdict} "
                                       f"({v.pairs} pairs)"))
    return out


def _levels(record: ABRecord) -> str:
    """The confidence level(s) the verdicts were decided at ("95%"; an interrupted job's interim look: "99.9%")."""
    levels = sorted({v.level for v in record.ratios()}) or [CI_LEVEL]
    return "/".join(f"{level:.1%}".replace(".0%", "%") for level in levels)


def ab_markdown(record: ABRecord) -> str:
    checks = ab_checks(record)
    failed = sum(c.status == FAIL for c in checks)
    verdict = "REGRESSION" if failed else ("INCONCLUSIVE" if any(c.status == INCONCLUSIVE for c in checks)
                                           else "no regression")
    emulated = f" ({record.emulation}: CPU timings)" if record.emulation else ""
    lines = [f"## perfbench ab: {verdict}{emulated}", "",
             f"scenario `{record.scenario}` · base `{record.base.ref}` ({(record.base.sha or '?')[:10]}) · head "
             f"`{record.head.ref}` ({(record.head.sha or '?')[:10]}{', dirty' if record.head.dirty else ''})", "",
             f"| run | metric | head/base | {_levels(record)} CI | verdict | pairs |", "|---|---|---|---|---|---|"]
    for rid, per in sorted(record.verdicts.items()):
        for metric, v in sorted(per.items()):
            lines.append(f"| {rid} | {metric} | {v.ratio:.3f}x | [{v.ci_low:.3f}, {v.ci_high:.3f}] | {v.verdict} | "
                         f"{v.pairs} |")
    return "\n".join([*lines, ""])


def junit_xml(suite_name: str, checks: list[CICheck]) -> str:
    """JUnit XML: one testsuite per suite (rule kind, or ab run), one testcase per check."""
    root = ET.Element("testsuites", name=suite_name, tests=str(len(checks)),
                      failures=str(sum(c.status == FAIL for c in checks)))
    suites: dict[str, ET.Element] = {}
    for check in checks:
        suite = suites.get(check.suite)
        if suite is None:
            suite = suites[check.suite] = ET.SubElement(root, "testsuite", name=f"{suite_name}.{check.suite}")
        case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.{check.suite}", name=check.name)
        if check.status == FAIL:
            ET.SubElement(case, "failure", message=check.message).text = check.message
        elif check.status in (INCONCLUSIVE, SKIP):
            word = "inconclusive" if check.status == INCONCLUSIVE else "not compared"
            ET.SubElement(case, "skipped", message=f"{word}: {check.message}")
    for suite in suites.values():
        cases = list(suite)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(case.find("failure") is not None for case in cases)))
        suite.set("skipped", str(sum(case.find("skipped") is not None for case in cases)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def what_changed(title: str, checks: list[CICheck]) -> str | None:
    """A few lines for a CI comment: the failed checks only; None when nothing regressed."""
    failed = [c for c in checks if c.status == FAIL]
    if not failed:
        return None
    shown = [f"- **{c.name}**: {c.message}" for c in failed[:10]]
    more = [f"- ... and {len(failed) - 10} more"] if len(failed) > 10 else []
    return "\n".join([f"**{title}: {len(failed)} regression{'s' * (len(failed) != 1)}**", "", *shown, *more, ""])


def append_step_summary(markdown: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """Append to the file GitHub Actions names in $GITHUB_STEP_SUMMARY; nothing when it is not set."""
    target = env.get(SUMMARY_ENV)
    if not target:
        return None
    path = Path(target)
    with path.open("a") as fh:  # appended: other steps of the job write there too
        fh.write(markdown.rstrip("\n") + "\n\n")
    return path


def write_ci_outputs(title: str, markdown: str, checks: list[CICheck], junit: Path | None,
                     comment: Path | None) -> list[str]:
    """Every CI output asked for; returns one line per file written (the comment only when something regressed)."""
    written = []
    if (path := append_step_summary(markdown)) is not None:
        written.append(f"step summary: {path}")
    if junit is not None:
        atomic_write_text(junit, junit_xml(title, checks))
        written.append(f"junit: {junit}")
    if comment is not None:
        text = what_changed(title, checks)
        if text is not None:
            atomic_write_text(comment, text)
            written.append(f"what changed: {comment}")
        else:
            comment.unlink(missing_ok=True)  # a stale comment from an earlier run must not be posted
    return written
