"""`perfbench diff A B`: op-level diff of two traces, run folders or result folders.

The ops one side only ran are checked against counts made here from the raw files (gzip + json for chrome
traces, csv for kernel_details.csv), never through perfbench's parsers; the per-side totals against per_op.
"""

from __future__ import annotations

import collections
import csv
import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.profiling import load_trace
from perfbench.profiling.diff import BOTH, op_diff
from perfbench.profiling.diff_render import WIDTH
from perfbench.profiling.tables import per_op
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result

from .conftest import FIXTURES, NPU_FIXTURES, require

CUDA = FIXTURES / "cuda_traces"
CPU = FIXTURES / "cpu_traces"
LEVEL1 = NPU_FIXTURES / "msinsight_pytorch_text_level1"
LEVEL2 = NPU_FIXTURES / "msinsight_st_qwen3_0.6b_level2"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # the device events of a Kineto trace


@pytest.fixture(scope="module")
def events() -> dict[str, pd.DataFrame]:
    paths = {"gdr_off": CUDA / "eager_gdr_off.json.gz", "gdr_on": CUDA / "eager_gdr_on.json.gz",
             "all_off": CPU / "all_off.json.gz", "all_on": CPU / "eager_all_on.json.gz", "level1": LEVEL1,
             "level2": LEVEL2}
    return {name: load_trace(require(path)).events for name, path in paths.items()}


def _raw_names(path: Path, cats: tuple[str, ...]) -> collections.Counter:
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    return collections.Counter(e["name"] for e in trace["traceEvents"]
                               if e.get("ph") == "X" and e.get("cat") in cats)


def _only(a: collections.Counter, b: collections.Counter) -> dict[str, int]:
    return {name: count for name, count in a.items() if name not in b}


def _listed(ops: pd.DataFrame, side: str) -> dict[str, int]:
    return dict(zip(ops.loc[ops["side"] == side, "op"], ops.loc[ops["side"] == side, "count"]))


@pytest.mark.parametrize("name", ["all_off", "gdr_on", "level1", "level2"])
def test_a_trace_against_itself_has_no_change(events, name):
    diff = op_diff(events[name], events[name])
    assert not diff.changed
    assert (diff.rows["present"] == BOTH).all() and (diff.rows["delta_us"] == 0).all()
    assert (diff.rows["ratio"] == 1.0).all() and (diff.rows["count_a"] == diff.rows["count_b"]).all()
    assert diff.only_a.empty and diff.only_b.empty
    assert (diff.totals["ratio"].dropna() == 1.0).all()


def test_cuda_toggles_name_the_kernels_one_side_only_ran(events):
    """chunk_gdr off vs on: the kernels (by name, with their counts) only one trace has."""
    raw_off = _raw_names(require(CUDA / "eager_gdr_off.json.gz"), DEVICE_CATS)
    raw_on = _raw_names(require(CUDA / "eager_gdr_on.json.gz"), DEVICE_CATS)
    diff = op_diff(events["gdr_off"], events["gdr_on"])

    assert _listed(diff.only_a, "device") == _only(raw_off, raw_on) != {}
    assert _listed(diff.only_b, "device") == _only(raw_on, raw_off) != {}
    assert any(name.startswith("chunk_gated_delta_rule") for name in _only(raw_on, raw_off))  # fla's kernels


COMPILED = ("## Call CompiledFxGraph", "Torch-Compiled Region")  # names with per-compile ids (op_family)


def test_cpu_toggles_name_the_host_ops_one_side_only_ran(events):
    raw_off = _raw_names(require(CPU / "all_off.json.gz"), ("cpu_op",))
    raw_on = _raw_names(require(CPU / "eager_all_on.json.gz"), ("cpu_op",))
    diff = op_diff(events["all_off"], events["all_on"])

    def plain(ops: dict[str, int]) -> dict[str, int]:
        return {name: n for name, n in ops.items() if not name.startswith(COMPILED)}

    assert plain(_listed(diff.only_a, "host")) == plain(_only(raw_off, raw_on))
    assert plain(_listed(diff.only_b, "host")) == plain(_only(raw_on, raw_off)) != {}
    # the compiled graphs of chunk_gdr: one op per graph whatever its content hash, counted over all hashes
    compiled = sum(n for name, n in raw_on.items() if name.startswith("## Call CompiledFxGraph"))
    assert _listed(diff.only_b, "host")["## Call CompiledFxGraph ##"] == compiled > 0


def _kernel_names(output: Path) -> collections.Counter:
    """kernel_details.csv names, a collective's per-call suffix (`hcom_allReduce__586_0_1`) cut at `__`."""
    with open(output / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        return collections.Counter(r["Name"].split("__")[0] if r["Name"].startswith("hcom_") else r["Name"]
                                   for r in csv.DictReader(f))


def test_ascend_level1_against_level2_names_the_kernels_one_side_only_ran(events):
    raw_1 = _kernel_names(require(LEVEL1 / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"))
    raw_2 = _kernel_names(require(LEVEL2 / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"))
    diff = op_diff(events["level1"], events["level2"])
    assert _listed(diff.only_a, "device") == _only(raw_1, raw_2) != {}
    assert _listed(diff.only_b, "device") == _only(raw_2, raw_1) != {}


@pytest.mark.parametrize(("a", "b"), [("gdr_off", "gdr_on"), ("all_off", "all_on"), ("level1", "level2")])
@pytest.mark.parametrize("by", [("phase", "module", "shape"), ("layer", "layer_type", "step")])
def test_each_sides_totals_are_its_per_op_table(events, a, b, by):
    rows = op_diff(events[a], events[b], by).rows
    for side, suffix in ((events[a], "_a"), (events[b], "_b")):
        summed = rows.groupby(["side", "op", "category"])[[f"count{suffix}", f"total_us{suffix}"]].sum()
        summed = summed[summed[f"count{suffix}"] > 0]
        summed.columns = ["count", "total_us"]
        expected = per_op(side).set_index(["side", "name", "category"])[["count", "total_us"]]
        expected.index.names = ["side", "op", "category"]
        pd.testing.assert_frame_equal(summed.sort_index(), expected.sort_index(), check_names=False,
                                      check_exact=False, rtol=1e-12, check_dtype=False)


def test_rows_come_biggest_mover_first(events):
    rows = op_diff(events["gdr_off"], events["gdr_on"]).rows
    moves = rows["delta_us"].abs().tolist()
    assert moves == sorted(moves, reverse=True)
    only_b = rows[rows["present"] == "only B"]
    assert (only_b["count_a"] == 0).all() and (only_b["ratio"] == float("inf")).all()


# ---- the command ----

def _cli(*args: str):
    return CliRunner().invoke(main, ["diff", *args])


def _width_ok(output: str) -> None:
    """Every line but those naming the inputs (a path is as long as it is) fits WIDTH columns."""
    assert max(len(line) for line in output.splitlines() if not line.startswith(("A: ", "B: "))) <= WIDTH


def test_cli_on_two_traces_prints_a_narrow_table_and_writes_diff_csv(tmp_path):
    result = _cli(str(require(CUDA / "eager_gdr_off.json.gz")), str(require(CUDA / "eager_gdr_on.json.gz")),
                  "--out", str(tmp_path / "out"), "--top", "5")
    assert result.exit_code == 0, result.output
    _width_ok(result.output)
    assert "device (kernel time): A" in result.output and "only in B (" in result.output
    table = pd.read_csv(tmp_path / "out" / "diff.csv")
    assert list(table.columns[:6]) == ["side", "op", "category", "phase", "module", "input_shapes"]
    assert {"only A", "only B", "both"} == set(table["present"])


def test_cli_self_diff_and_default_out_beside_b(tmp_path):
    trace = tmp_path / "all_off.json.gz"
    shutil.copy(require(CPU / "all_off.json.gz"), trace)
    result = _cli(str(trace), str(trace))
    assert result.exit_code == 0, result.output
    assert "no change: every op ran as often and as long in both" in result.output
    assert (pd.read_csv(tmp_path / "diff.csv")["delta_us"] == 0).all()


def test_cli_on_ascend_folders_and_a_db(tmp_path):
    result = _cli(str(require(LEVEL1)), str(require(NPU_FIXTURES / "msinsight_pytorch_db_level1")),
                  "--out", str(tmp_path), "--by", "shape")
    assert result.exit_code == 0, result.output
    _width_ok(result.output)
    assert "Ascend profiler folder; 191 device / 859 host events" in result.output
    assert list(pd.read_csv(tmp_path / "diff.csv").columns[:4]) == ["side", "op", "category", "input_shapes"]


def _run(run_id: str, on: set[str], batch_size: int = 1) -> RunResult:
    spec = {"run_id": run_id, "scenario": "diff", "device": "cpu", "dtype": "float32", "model": "tiny",
            "batch_size": batch_size, "input_len": 32, "output_len": 4, "parallel": {"world_size": 1},
            "toggles": {t: t in on for t in TOGGLE_NAMES}}
    plan = {t: {"requested": t in on, "state": "on" if t in on else "off", "reason": "", "impl": ""}
            for t in TOGGLE_NAMES}
    return run_result(run_id, spec=RunSpec.from_dict(spec), plan=RunPlan.from_dict(plan),
                      samples={"ttft_ms": [1.0, 1.1], "tpot_ms": [0.5, 0.6]},
                      summary={"ttft_ms_median": 1.05, "tpot_ms_median": 0.55})


def _folder(root: Path, runs: dict[str, tuple[set[str], int, str | None]]) -> Path:
    """A result folder; each run's trace copied from cpu_traces/<name> (None: no trace)."""
    write_results(root, [_run(run_id, on, bs) for run_id, (on, bs, _) in runs.items()])
    for run_id, (_, _, trace) in runs.items():
        (root / "runs" / run_id).mkdir(parents=True)
        (root / "runs" / run_id / "result.json").write_text("{}")
        if trace:
            (root / "runs" / run_id / "trace").mkdir()
            shutil.copy(require(CPU / trace), root / "runs" / run_id / "trace" / trace)
    return root


def test_result_folders_are_matched_run_by_run(tmp_path):
    rope = {"fused_rope"}
    a = _folder(tmp_path / "a", {"base": (set(), 1, "all_off.json.gz"), "rope-a": (rope, 1, "all_off.json.gz"),
                                 "bs2": (set(), 2, None), "gone": ({"chunk_gdr"}, 1, None)})
    b = _folder(tmp_path / "b", {"base": (set(), 1, "eager_all_on.json.gz"),
                                 "rope-b": (rope, 1, "all_off.json.gz"), "bs2": (set(), 2, "all_off.json.gz"),
                                 "new": ({"grouped_moe"}, 1, None)})
    result = _cli(str(a), str(b), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    _width_ok(result.output)
    out = result.output
    assert "3 matched run pairs, 2 with traces on both sides" in out
    assert "== run base (" in out and "== run rope-a -> rope-b (" in out  # by run_id, then by shape + toggles
    assert "bs2 (" in out and "no trace in A" in out
    assert "only in A (no match): gone" in out and "only in B (no match): new" in out
    table = pd.read_csv(tmp_path / "out" / "diff.csv")
    assert set(table["run"]) == {"base", "rope-a -> rope-b"}
    assert (table.loc[table["run"] == "rope-a -> rope-b", "delta_us"] == 0).all()  # the same trace both sides


def test_run_folders_read_their_trace(tmp_path):
    a = _folder(tmp_path / "a", {"base": (set(), 1, "all_off.json.gz")})
    b = _folder(tmp_path / "b", {"base": (set(), 1, "eager_all_on.json.gz")})
    result = _cli(str(a / "runs" / "base"), str(b / "runs" / "base"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "host (host self time)" in result.output and "only in B (" in result.output


def test_bad_inputs_are_one_line(tmp_path):
    folder = _folder(tmp_path / "a", {"base": (set(), 1, None)})
    line = one_error_line(_cli(str(folder), str(require(CPU / "all_off.json.gz")), "--out", str(tmp_path)))
    assert "A is a result folder and the other is not" in line
    line = one_error_line(_cli(str(folder / "runs" / "base"), str(require(CPU / "all_off.json.gz")), "--out",
                               str(tmp_path)))
    assert "a run folder without a trace/" in line
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    line = one_error_line(_cli(str(other), str(require(CPU / "all_off.json.gz")), "--out", str(tmp_path)))
    assert str(other) in line and "not a trace" in line
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_error_line(_cli(str(require(CPU / "all_off.json.gz")), str(require(CPU / "all_off.json.gz")),
                               "--out", str(blocker / "out")))
    assert line.startswith(f"error: --out {blocker / 'out'}: ") and "is a file, not a folder" in line
