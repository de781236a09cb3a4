"""How long `perfbench trace --export` takes on a trace whose slices partially overlap (not a test).

    python benchmarks/trace_export_scale.py [--slices 100000] [--small]

Writes a Kineto trace of `--slices` cpu_op slices on one track, each starting inside the one before and ending
after it (slice i: ts i µs, dur slices + i µs), the worst case for the overlap repair: every slice crosses
every other, so the export needs one extra lane per slice. Half the slices also carry a flow start. Then runs
what `perfbench trace X --export Y` runs (tables, advisor, export) once and prints its wall time, the export's
own wall time and the process's peak memory. The target (issue 45): within 30 s at 100k slices on a 2-core VM;
an overlap repair that tries lane after lane takes minutes there. `--small`: 2,000 slices, to check that it runs.
"""

from __future__ import annotations

import argparse
import gzip
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import orjson  # noqa: E402

from perfbench.profiling import analyze_trace  # noqa: E402
from perfbench.profiling.export import export_trace  # noqa: E402
from perfbench.profiling.trace_format import format_problems  # noqa: E402


def crossing_trace(slices: int) -> dict[str, object]:
    """`slices` cpu_op slices on one track, each crossing every other, and a flow start on every second one."""
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for i in range(slices):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1,
                       "ts": float(i), "dur": float(slices + i), "args": {"External id": i}})
        if i % 2 == 0:
            events.append({"ph": "s", "cat": "ac2g", "name": "launch", "id": i, "pid": 1, "tid": 1, "ts": float(i)})
    return {"schemaVersion": 1, "traceEvents": events}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=100_000)
    parser.add_argument("--small", action="store_true", help="2,000 slices: a check that it runs")
    args = parser.parse_args()
    slices = 2_000 if args.small else args.slices
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "crossing.json.gz"
        trace.write_bytes(gzip.compress(orjson.dumps(crossing_trace(slices)), compresslevel=5))
        print(f"{slices:,} crossing slices: {trace.stat().st_size / 1024:,.0f} KiB gzipped")
        began = time.perf_counter()
        summary = analyze_trace(trace, folder / "tables", folder / "export.json.gz")
        whole = time.perf_counter() - began
        began = time.perf_counter()
        export_trace(trace, folder / "again.json.gz")
        export_only = time.perf_counter() - began
        print(summary.splitlines()[-1])
        problems = format_problems(orjson.loads(gzip.decompress((folder / "export.json.gz").read_bytes())))
        print(f"trace --export: {whole:.1f} s; the export alone: {export_only:.1f} s; "
              f"peak memory {peak_rss_mib():,.0f} MiB; format problems in the export: {len(problems)}")


if __name__ == "__main__":
    main()
