"""The profiled iteration after timing: how many decode steps it takes, and whether it writes the export."""

from __future__ import annotations

from pathlib import Path

from perfbench.measure.run_steps import measure_run
from perfbench.profiling import parse_trace_path
from perfbench.results import RunSpec


def _spec(**fields: object) -> RunSpec:
    return RunSpec(run_id="p", scenario="profiled", model="tiny", num_layers=1, input_len=8, output_len=5,
                   warmup=1, iterations=1, numerics_check=False, **fields)


def _decode_steps_in(trace_dir: Path) -> int:
    events = parse_trace_path(trace_dir)
    return int(events.loc[events["phase"] == "decode", "step"].nunique())


def test_a_shorter_profiled_iteration_and_the_export_when_asked(tmp_path: Path) -> None:
    run_dir = tmp_path / "short"
    result = measure_run(_spec(profile_decode_steps=2, trace_export=True), run_dir)
    assert result.status == "ok", result.error
    assert result.trace.error is None, result.trace.error
    # counted in the trace itself: 2 decode steps, where the timed iterations decoded output_len - 1 = 4
    assert _decode_steps_in(run_dir / "trace") == result.trace.decode_steps == 2
    assert result.trace.export is not None and (run_dir / result.trace.export).is_file()


def test_by_default_the_profiled_iteration_decodes_what_was_timed_and_a_cpu_run_writes_no_export(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "full"
    result = measure_run(_spec(), run_dir)
    assert result.status == "ok", result.error
    assert _decode_steps_in(run_dir / "trace") == 4
    assert result.trace.export is None and not (run_dir / "trace" / "export").exists()
