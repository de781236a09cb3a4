"""Reports of result folders: report.html + CSVs (`build_report`) and before/after comparison
(`perfbench.report.compare.compare_folders`)."""

from perfbench.report.build import build_report

__all__ = ["build_report"]
