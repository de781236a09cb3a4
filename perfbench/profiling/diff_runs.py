"""What `perfbench diff A B` compares, and its output: two traces, two run folders, or two result folders.

A and B are each a trace (anything `load_trace` reads), a run folder (`runs/<run_id>/`, whose `trace/` is
read) or a result folder (results.jsonl). Two result folders are matched run by run as `compare` matches them
(`analysis.compare.match_runs`: run_id, then shape + effective toggles), and each matched pair whose runs both
have a trace is diffed; runs on one side only, and pairs without traces, are listed. A result folder against
anything else is refused. The diff itself is diff.py; its terminal form diff_render.py.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfbench.analysis.attribution import combo_label
from perfbench.analysis.compare import Match, match_runs
from perfbench.errors import UserError
from perfbench.profiling.diff import DEFAULT_BY, NUMBERS, OpDiff, op_diff
from perfbench.profiling.diff_render import TOP, WIDTH, diff_lines
from perfbench.profiling.loading import LoadedTrace, load_trace
from perfbench.results import ResultFolder, RunResult, atomic_write_text, load_folder
from perfbench.results.cells import csv_cells

CSV_NAME = "diff.csv"
PAIR_TOP = 10  # movers per side shown for each run pair of two result folders


@dataclass
class TraceDiff:
    """One diffed pair: `label` names the run pair ("" for two traces); `problem` says why there is no diff."""

    label: str
    a: Path | None
    b: Path | None
    diff: OpDiff | None = None
    problem: str = ""
    headers: list[str] = field(default_factory=list)  # what each side's trace is
    notes: list[str] = field(default_factory=list)


def input_kind(path: Path) -> str:
    """"results" (a result folder), "run" (one run's folder) or "trace" (anything else: load_trace decides)."""
    if path.is_dir() and (path / "results.jsonl").is_file():
        return "results"
    if path.is_dir() and (path / "result.json").is_file():
        return "run"
    return "trace"


def default_out(b: Path) -> Path:
    """Where diff.csv goes without --out: B's folder, or the folder holding B when it is a file."""
    return b if b.is_dir() else b.parent


def _header(side: str, trace: LoadedTrace) -> str:
    sides = trace.events["side"].value_counts()
    what = "Ascend profiler folder" if trace.kind == "ascend" else "chrome trace"
    return (f"{side}: {trace.path} ({what}; {int(sides.get('device', 0))} device / {int(sides.get('host', 0))} "
            "host events)")


def trace_device(trace: LoadedTrace) -> str:
    """What kind of device a trace was taken on, as far as the trace tells: an Ascend profiler folder is an NPU's;
    a chrome trace with device kernels a GPU's (or an accelerator's); one with host ops only a CPU run's."""
    if trace.kind == "ascend":
        return "an Ascend NPU"
    if (trace.events["side"] == "device").any():
        return "a GPU (device kernels)"
    return "a CPU (host ops only)"


def device_note(device_a: str | None, device_b: str | None) -> list[str]:
    """A note when A and B were measured on different devices: their op times answer different questions."""
    if not device_a or not device_b or device_a == device_b:
        return []
    return [f"A and B come from different devices (A: {device_a}; B: {device_b}): op times differ by the device, "
            "not only by the change; op names and counts may differ too"]


def diff_traces(a: Path, b: Path, by: Sequence[str] = DEFAULT_BY, label: str = "",
                devices: tuple[str | None, str | None] | None = None) -> TraceDiff:
    """The diff of trace `b` against trace `a` (UserError from load_trace for one that is not a trace); `devices`
    (the runs' recorded device names) say where each was measured, else the traces themselves tell."""
    trace_a, trace_b = load_trace(a), load_trace(b)
    notes = [f"A: {n}" for n in trace_a.notes] + [f"B: {n}" for n in trace_b.notes]
    notes += device_note(*(devices or (trace_device(trace_a), trace_device(trace_b))))
    return TraceDiff(label, a, b, op_diff(trace_a.events, trace_b.events, by),
                     headers=[_header("A", trace_a), _header("B", trace_b)], notes=notes)


def run_trace(folder: ResultFolder, result: RunResult) -> Path | None:
    """The trace folder of a run of `folder`; for a result merged from rounds, that of its first round that
    has one (only the first round is profiled). None when the run kept no trace."""
    candidates = [result.run_id] + [r.run_id for r in sorted(folder.results, key=lambda r: r.spec.round)
                                    if r.spec.combination_id == result.run_id and r.run_id != result.run_id]
    for run_id in candidates:
        trace = folder.path / "runs" / run_id / "trace"
        if trace.exists() and any(trace.iterdir()):
            return trace
    return None


def _note_lines(notes: Sequence[str]) -> list[str]:
    return [line for n in notes for line in textwrap.wrap(f"note: {n}", WIDTH, subsequent_indent="  ")]


def _pair_label(m: Match) -> str:
    return f"{m.label} ({m.b.shape().label()}; {combo_label(m.b.effective_on())})"


def pair_diffs(folder_a: ResultFolder, folder_b: ResultFolder, matches: Sequence[Match],
               by: Sequence[str] = DEFAULT_BY) -> list[TraceDiff]:
    """A TraceDiff per matched pair: the diff where both runs have a readable trace, else the problem."""
    out = []
    for m in matches:
        a, b = run_trace(folder_a, m.a), run_trace(folder_b, m.b)
        if a is None or b is None:
            missing = " and ".join(side for side, trace in (("A", a), ("B", b)) if trace is None)
            out.append(TraceDiff(m.label, a, b, problem=f"no trace in {missing} (runs/<run_id>/trace)"))
            continue
        try:
            out.append(diff_traces(a, b, by, m.label, (_device_of(m.a), _device_of(m.b))))
        except UserError as err:
            out.append(TraceDiff(m.label, a, b, problem=f"trace not readable: {err}"))
    return out


def _device_of(result: RunResult) -> str | None:
    env = result.env
    return " ".join(str(x) for x in (env.device, env.device_name, env.emulation) if x) or None


def diff_table(diffs: Sequence[TraceDiff]) -> pd.DataFrame:
    """Every row of every diff; a leading `run` column when the diffs are run pairs."""
    frames = [d.diff.rows.assign(run=d.label) for d in diffs if d.diff is not None]
    if not frames:
        return pd.DataFrame(columns=["run", *NUMBERS, "present"])
    table = pd.concat(frames, ignore_index=True)
    columns = ["run", *(c for c in table.columns if c != "run")]
    return table[columns] if any(d.label for d in diffs) else table.drop(columns=["run"])


def _folder_lines(a: ResultFolder, b: ResultFolder, by: Sequence[str]) -> tuple[list[str], list[TraceDiff]]:
    matches, only_a, only_b = match_runs(a.results, b.results)
    diffs = pair_diffs(a, b, matches, by)
    lines = [f"A: {a.path} ({len(a.runs)} runs)", f"B: {b.path} ({len(b.runs)} runs)",
             f"{len(matches)} matched run pair{'s' if len(matches) != 1 else ''}, "
             f"{sum(d.diff is not None for d in diffs)} with traces on both sides"]
    labels = {m.label: _pair_label(m) for m in matches}
    for d in diffs:
        if d.diff is None:
            continue
        lines += ["", f"== run {labels[d.label]}", *diff_lines(d.diff, PAIR_TOP), *_note_lines(d.notes)]
    problems = [f"  {labels[d.label]}: {d.problem}" for d in diffs if d.diff is None]
    if problems:
        lines += ["", "not diffed:", *problems]
    for side, runs in (("A", only_a), ("B", only_b)):
        if runs:
            lines.append(f"only in {side} (no match): {', '.join(r.run_id for r in runs)}")
    return lines, diffs


def diff_command(a: Path, b: Path, out: Path | None, by: Sequence[str] = DEFAULT_BY, top: int = TOP) -> str:
    """What `perfbench diff` prints; writes `out`/diff.csv (default `default_out(b)`)."""
    a, b = Path(a), Path(b)
    kinds = input_kind(a), input_kind(b)
    if (kinds[0] == "results") != (kinds[1] == "results"):
        which = "A" if kinds[0] == "results" else "B"
        raise UserError(f"{which} is a result folder and the other is not: give two result folders (matched run "
                        "by run), or two traces or run folders")
    if kinds[0] == "results":
        lines, diffs = _folder_lines(load_folder(a, "A"), load_folder(b, "B"), by)
    else:
        traces = [p / "trace" if kind == "run" else p for p, kind in zip((a, b), kinds)]
        for side, kind, trace in zip("AB", kinds, traces):
            if kind == "run" and not trace.exists():
                raise UserError(f"{side} {trace.parent}: a run folder without a trace/ (the run was not profiled)")
        diffs = [diff_traces(traces[0], traces[1], by)]
        assert diffs[0].diff is not None  # two traces always give a diff
        lines = [*diffs[0].headers, *diff_lines(diffs[0].diff, top), *_note_lines(diffs[0].notes)]
    path = (Path(out) if out is not None else default_out(b)) / CSV_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, csv_cells(diff_table(diffs)).to_csv(index=False, float_format="%.3f"))
    return "\n".join([*lines, f"{CSV_NAME}: {path}"])
