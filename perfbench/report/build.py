"""`perfbench report DIR`: DIR/report.html (one self-contained file) and DIR/report/<table>.csv."""

from __future__ import annotations

import sys
from pathlib import Path

from perfbench.analysis.folder_analysis import FolderAnalysis, analyse_folder
from perfbench.pages.page import Section, write_page
from perfbench.report.ab import ab_section
from perfbench.report.ab_ops import ops_section
from perfbench.report.ablation import ablation_section
from perfbench.report.breakdown import breakdown_section
from perfbench.report.capacity import capacity_section
from perfbench.report.cold_start import cold_start_section
from perfbench.report.expert_load import expert_load_section
from perfbench.report.findings import findings_section
from perfbench.report.forest import speedups_section
from perfbench.report.headline import headline_section
from perfbench.report.latency import latency_section
from perfbench.report.memory import memory_section
from perfbench.report.runs import environment_section, failures_section, numerics_section, plan_section
from perfbench.results import load_folder
from perfbench.results.ab_record import read_ab_record
from perfbench.terminal_text import escaped, printable


def report_sections(folder: Path, analysis: FolderAnalysis) -> list[Section]:
    """The report's sections; the folder is analysed once (perfbench/analysis/folder_analysis.py) and every
    section that shows a speed-up, a warning, a finding or a trace table lays that analysis out."""
    results = list(analysis.results)
    # the trace of one round per combination is enough: the profiled iteration is not a timed one
    first_round = analysis.first_round
    ab = ab_section(folder)  # a `perfbench ab` folder's verdicts come right after the findings
    ops = ops_section(read_ab_record(folder).ops) if ab is not None else None  # ab --ops: which ops moved
    # first the picture that answers (each toggle's speed-up; an ab job's answer is its verdicts, after the
    # findings), then the findings and the numbers behind them
    opening = [speedups_section(analysis)] if ab is None else []
    return [*opening, findings_section(analysis), *([ab] if ab is not None else []),
            *([ops] if ops is not None else []), headline_section(analysis),
            environment_section(folder, results), plan_section(results), latency_section(results),
            cold_start_section(results), capacity_section(folder, results), memory_section(results),
            ablation_section(analysis),
            breakdown_section(first_round, analysis.trace_tables), expert_load_section(first_round),
            numerics_section(results), failures_section(results)]


def build_report(folder: Path, analysis: FolderAnalysis | None = None) -> Path:
    """Render the report of a result folder; returns the path of report.html. `analysis`: the folder's runs
    analysed already (at the end of `perfbench run`, from the results in memory); None reads the folder."""
    folder = Path(folder)
    if analysis is None:
        analysis = analyse_folder(folder, load_folder(folder).results)
    results = list(analysis.results)
    ok = sum(r.status == "ok" for r in results)
    subtitle = f"{folder.resolve()} - {len(results)} runs, {ok} ok"
    html_path = folder / "report.html"
    write_page(html_path, folder / "report", f"perfbench report: {folder.name}", subtitle,
               report_sections(folder, analysis))
    return html_path


def report_after_run(folder: Path, analysis: FolderAnalysis | None = None) -> None:
    """Render the report at the end of `perfbench run` / `ab`: the runs are saved already, so a report that fails
    prints one line with the command to retry, never a traceback."""
    try:
        print(printable(f"report: {build_report(folder, analysis)}"))
    except Exception as err:  # noqa: BLE001 - the runs are saved; a report bug must not hide them
        print(escaped(f"report: failed ({type(err).__name__}: {' '.join(str(err).split())}); rerun with "
                      f"`perfbench report {folder}`"), file=sys.stderr)
