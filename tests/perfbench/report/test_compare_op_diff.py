"""The compare page's op-level diff: per matched run pair with traces, the biggest movers (profiling/diff.py)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from perfbench.profiling import load_trace
from perfbench.profiling.diff import op_diff
from perfbench.report.compare import compare_folders

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_traces"
KEPT = ("r-base", "r-fused_rope", "r-grouped_moe")


def _trace(folder: Path, run_id: str, name: str) -> None:
    trace = folder / "runs" / run_id / "trace"
    trace.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / name, trace / name)


@pytest.fixture(scope="module")
def compared(tmp_path_factory, make_folder, planted):
    """r-base: all_off in A, eager_all_on in B; r-fused_rope: a trace in A only; r-grouped_moe: none."""
    root = tmp_path_factory.mktemp("opdiff")
    drop = tuple(r for r in planted.run_ids if r not in KEPT)
    a = make_folder(root / "a", drop=drop, failed=False, traces=False, seed=1)
    b = make_folder(root / "b", drop=drop, failed=False, traces=False, seed=2)
    _trace(a, "r-base", "all_off.json.gz")
    _trace(b, "r-base", "eager_all_on.json.gz")
    _trace(a, "r-fused_rope", "all_off.json.gz")
    compare_folders(a, b, root / "out")
    return root / "out"


def test_the_page_has_the_op_diff_of_the_pair_with_traces(compared):
    page = (compared / "compare.html").read_text()
    assert 'id="op-level-diff"' in page and 'id="t-compare_op_diff"' in page
    assert "r-fused_rope: not diffed: no trace in B" in page
    section = page.split('id="op-level-diff"')[1].split("</section>")[0]
    assert "r-grouped_moe" not in section and "1 matched pair without a trace on either side" in section

    with open(compared / "compare_op_diff.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    expected = op_diff(load_trace(FIXTURES / "all_off.json.gz").events,
                       load_trace(FIXTURES / "eager_all_on.json.gz").events).rows.head(20)
    assert {r["run"] for r in rows} == {"r-base"} and len(rows) == 20
    assert [r["op"] for r in rows] == expected["op"].tolist()
    assert [float(r["delta_us"]) for r in rows] == pytest.approx(expected["delta_us"].tolist())
    assert {r["direction"] for r in rows} <= {"faster", "slower"}


def test_folders_without_traces_have_no_op_diff_section(tmp_path, make_folder, planted):
    drop = tuple(r for r in planted.run_ids if r not in KEPT)
    a = make_folder(tmp_path / "a", drop=drop, failed=False, traces=False, seed=1)
    b = make_folder(tmp_path / "b", drop=drop, failed=False, traces=False, seed=2)
    compare_folders(a, b, tmp_path / "out")
    assert 'id="op-level-diff"' not in (tmp_path / "out" / "compare.html").read_text()
    assert not (tmp_path / "out" / "compare_op_diff.csv").exists()
