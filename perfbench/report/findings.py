"""The report's opening section: the advisor's findings (perfbench/analysis/advisor.py) over the folder's runs
and their trace tables, most severe first, each with its evidence and where to look; an empty list says so."""

from __future__ import annotations

from perfbench.analysis.folder_analysis import FolderAnalysis
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table

NO_FINDINGS = "No findings: every rule of docs/advisor.md stayed silent on these runs."


def findings_section(analysis: FolderAnalysis) -> Section:
    section = Section("Findings")
    findings = analysis.findings
    if findings:
        rows = [f.to_dict() for f in findings]
        columns = [Column("severity", mark_key="severity"), Column("rule"), Column("message", wrap=True),
                   Column("where", wrap=True)]
        section.blocks.append(Table("findings", columns, rows,
                                    caption=f"{len(findings)} findings, most severe first"))
    else:
        section.blocks.append(Text(NO_FINDINGS))
    section.blocks.append(Text("Each finding is a documented rule over the results and the trace tables: what "
                               "triggers it, its threshold and why are in docs/advisor.md. The details follow.",
                               note=True))
    return section
