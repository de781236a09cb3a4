"""How fast perfbench parses a large trace and builds its tables (not a test).

    python benchmarks/trace_parse.py [--events 1000000] [--no-kernels]     # a chrome trace
    python benchmarks/trace_parse.py --ascend [--kernels 200000] [--reps 3]  # Ascend text vs .db export
    add --small to either for a quick check that it runs (tiny inputs; its timings mean nothing)

Chrome: writes a synthetic Kineto trace shaped like a profiled decode loop (ProfilerStep#N > pb|phase=decode|
step=N > pb|layer=..|module=.. > aten ops nested 2-3 deep, each leaf launching a CUDA kernel through
cudaLaunchKernel) into a temp folder, then times `parse_chrome_trace` and the tables and prints events/s.

Ascend: replicates the real Level1 capture of tests/fixtures (191 kernel rows, 860 host ops per step) step after
step up to `--kernels` kernel rows, as a text export (kernel_details.csv + trace_view.json without the events
perfbench does not read: counters, Python functions, queue flows) and, through ascend_text_to_db.py, as the .db
export of the same capture, both in one folder. Then reads it with each reader in alternation (A B A B ..., so a
drifting machine favours neither), checks that both give the same events table, and prints the medians and the
ratio. At the default 200k kernel rows the text export's trace_view.json is about 1.2 GB: the text reader then
needs several GB of memory.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ascend_text_to_db import text_to_db

from model.tracing import scope_name
from perfbench.profiling.ascend import parse_ascend_dir
from perfbench.profiling.chrome import parse_chrome_trace
from perfbench.profiling.tables import (
    compute_vs_communication,
    op_counts_per_decode_step,
    per_category,
    per_layer_type,
    per_op,
    per_phase,
)

try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None

PID, TID = 4242, 4242
# (module, [(parent op, [child ops])]) per layer type; leaves launch kernels
LAYER_MODULES = {
    "linear_attention": [
        ("norm", [("aten::rms_norm", ["aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"])]),
        ("gdn", [("aten::linear", ["aten::t", "aten::mm"]), ("aten::conv1d", ["aten::convolution"]),
                 ("aten::silu", []), ("aten::mul", []), ("aten::linear", ["aten::t", "aten::mm"])]),
    ],
    "full_attention": [
        ("norm", [("aten::rms_norm", ["aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"])]),
        ("attn", [("aten::linear", ["aten::t", "aten::mm"]), ("aten::mul", []), ("aten::cat", []),
                  ("aten::scaled_dot_product_attention",
                   ["aten::_scaled_dot_product_flash_attention_for_cpu"]),
                  ("aten::linear", ["aten::t", "aten::mm"])]),
    ],
}
MOE_MODULES = [
    ("router", [("aten::linear", ["aten::t", "aten::mm"]), ("aten::softmax", ["aten::_softmax"]),
                ("aten::topk", [])]),
    ("experts", [("aten::index_select", []), ("aten::bmm", []), ("aten::silu", []), ("aten::bmm", []),
                 ("aten::index_add_", [])]),
    ("shared_expert", [("aten::linear", ["aten::t", "aten::mm"]), ("aten::linear", ["aten::t", "aten::mm"])]),
]


class TraceWriter:
    """Emits nested X events on one thread with a moving clock (µs), kernels on stream 7."""

    def __init__(self, kernels: bool) -> None:
        self.events: list[dict] = []
        self.clock = 1000.0
        self.next_id = 1
        self.kernels = kernels
        self.gpu_clock = 1000.0

    def _x(self, cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": round(ts, 3),
                 "dur": round(dur, 3), "args": args}
        self.events.append(event)
        return event

    def range(self, cat: str, name: str, body) -> None:  # a callable emitting children
        start = self.clock
        self.clock += 0.5
        event = self._x(cat, name, start, 0.0, **{"External id": self._id()})
        body()
        self.clock += 0.5
        event["dur"] = round(self.clock - start, 3)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def leaf(self, name: str) -> None:
        ext = self._id()
        start = self.clock
        self.clock += 1.0
        if self.kernels:
            corr = self._id()
            self._x("cuda_runtime", "cudaLaunchKernel", self.clock, 2.0,
                    **{"External id": ext, "correlation": corr})
            self.gpu_clock = max(self.gpu_clock, self.clock + 3.0)
            self.events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{name.split('::')[-1]}",
                                "pid": 0, "tid": 7, "ts": round(self.gpu_clock, 3), "dur": 4.0,
                                "args": {"External id": ext, "correlation": corr, "stream": 7}})
            self.gpu_clock += 4.5
            self.clock += 2.0
        self.clock += 3.0
        self._x("cpu_op", name, start, self.clock - start, **{"External id": ext})
        self.clock += 0.2

    def op(self, name: str, children: list[str]) -> None:
        if not children:
            self.leaf(name)
            return
        start = self.clock
        self.clock += 1.0
        ext = self._id()
        for child in children:
            self.leaf(child)
        self.clock += 1.0
        self._x("cpu_op", name, start, self.clock - start, **{"External id": ext})


def synthetic_trace(target_events: int, kernels: bool, num_layers: int = 8) -> dict:
    """A Kineto-shaped trace with about `target_events` X events."""
    writer = TraceWriter(kernels)
    step = 0

    def module_ops(ops: list[tuple[str, list[str]]]):
        return lambda: [writer.op(name, children) for name, children in ops]

    def layer(index: int):
        layer_type = "full_attention" if index % 4 == 3 else "linear_attention"

        def body() -> None:
            for module, ops in LAYER_MODULES[layer_type] + MOE_MODULES:
                writer.range("user_annotation", scope_name(module=module), module_ops(ops))
        return lambda: writer.range(
            "user_annotation", scope_name(layer=index, layer_type=layer_type), body)

    while len(writer.events) < target_events:
        def step_body(s: int = step) -> None:
            writer.range("user_annotation", scope_name(phase="decode", step=s),
                         lambda: [layer(i)() for i in range(num_layers)])
        writer.range("user_annotation", f"ProfilerStep#{step}", step_body)
        step += 1
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            "traceEvents": writer.events, "distributedInfo": {"rank": 0, "world_size": 1}}


def chrome_benchmark(events: int, kernels: bool) -> None:
    trace = synthetic_trace(events, kernels=kernels)
    n_events = len(trace["traceEvents"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_bytes(orjson.dumps(trace) if orjson is not None else json.dumps(trace).encode())
        del trace
        size_mb = path.stat().st_size / 1e6
        # CPU seconds beside wall seconds: on a shared machine the wall clock also counts other processes.
        t0, c0 = time.perf_counter(), time.process_time()
        events = parse_chrome_trace(path)
        t1, c1 = time.perf_counter(), time.process_time()
        per_op(events), per_category(events), per_phase(events), per_layer_type(events)
        compute_vs_communication(events), op_counts_per_decode_step(events)
        t2, c2 = time.perf_counter(), time.process_time()
    print(f"trace: {n_events} X events, {size_mb:.0f} MB -> {len(events)} table rows")
    print(f"parse_chrome_trace: {t1 - t0:6.2f} s wall, {c1 - c0:6.2f} s CPU ({n_events / (t1 - t0):,.0f} events/s)")
    print(f"tables:             {t2 - t1:6.2f} s wall, {c2 - c1:6.2f} s CPU")
    print(f"total:              {t2 - t0:6.2f} s wall, {c2 - c0:6.2f} s CPU ({n_events / (t2 - t0):,.0f} events/s)")


ASCEND_FIXTURE = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "npu_profiler"
                  / "msinsight_pytorch_text_level1" / "rank0_ascend_pt")
UNREAD = {"python_function", "HostToDevice", "enqueue", "dequeue", "async_task_queue", "fwdbwd"}  # trace_view cats


def _shift_us(text: str, offset_ns: int) -> str:
    """A µs timestamp as the profiler writes it (ns digits, maybe a TAB), moved by `offset_ns`."""
    return f"{Decimal(text.strip()) + Decimal(offset_ns) / 1000:.3f}"


def replicate_ascend(dest: Path, kernels: int) -> tuple[int, int]:
    """Write the Level1 fixture's step again and again (each a step later: ProfilerStep#N+k, Step Id N+k, times
    moved on by the capture's span) into dest/ASCEND_PROFILER_OUTPUT as text, then as .db. Returns (kernel
    rows, trace_view events)."""
    output = dest / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    source = ASCEND_FIXTURE / "ASCEND_PROFILER_OUTPUT"
    with open(source / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    trace = [e for e in json.loads((source / "trace_view.json").read_text())
             if e.get("ph") in ("M", "X", "s", "f") and e.get("cat") not in UNREAD]
    stamps = [int(Decimal(str(e["ts"])) * 1000) for e in trace if "ts" in e]
    period_ns = max(stamps) - min(stamps) + 1_000_000  # the capture's span and a 1 ms gap
    copies = max(1, -(-kernels // len(rows)))
    with open(output / "kernel_details.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        for k in range(copies):
            for row in rows:
                writer.writerow({**row, "Start Time(us)": _shift_us(row["Start Time(us)"], k * period_ns) + "\t",
                                 "Step Id": str(int(row["Step Id"]) + k)})
    events = 0
    with open(output / "trace_view.json", "w") as f:
        f.write("[")
        for k in range(copies):
            for event in trace:
                if event.get("ph") == "M" and k:
                    continue
                event = dict(event)
                if "ts" in event:
                    event["ts"] = _shift_us(str(event["ts"]), k * period_ns)
                if "id" in event:
                    event["id"] = f"{event['id']}-{k}"
                if str(event.get("name", "")).startswith("ProfilerStep#"):
                    event["name"] = f"ProfilerStep#{int(event['name'].split('#')[1]) + k}"
                f.write(("," if events else "") + json.dumps(event))
                events += 1
        f.write("]")
    for info in ASCEND_FIXTURE.glob("profiler_info*.json"):
        (dest / info.name).write_text(info.read_text())
    text_to_db(output, output / "ascend_pytorch_profiler_0.db")
    return copies * len(rows), events


def ascend_benchmark(kernels: int, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "rank0_ascend_pt"
        rows, events = replicate_ascend(root, kernels)
        output = root / "ASCEND_PROFILER_OUTPUT"
        sizes = {name: (output / name).stat().st_size / 1e6
                 for name in ("kernel_details.csv", "trace_view.json", "ascend_pytorch_profiler_0.db")}
        readers = {"text": lambda: parse_ascend_dir(root), "db": lambda: parse_ascend_dir(root, prefer="db")}
        wall: dict[str, list[float]] = {name: [] for name in readers}
        cpu: dict[str, list[float]] = {name: [] for name in readers}
        tables = {}
        for rep in range(reps):
            for name in (list(readers) if rep % 2 == 0 else list(readers)[::-1]):  # A B, then B A
                t0, c0 = time.perf_counter(), time.process_time()
                tables[name] = readers[name]().events
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        same = tables["text"].sort_values(["side", "start_us", "name"], kind="stable").reset_index(drop=True).equals(
            tables["db"].sort_values(["side", "start_us", "name"], kind="stable").reset_index(drop=True))
    print(f"capture: {rows} kernel rows; text export {sizes['kernel_details.csv']:.1f} MB kernel_details.csv + "
          f"{sizes['trace_view.json']:.1f} MB trace_view.json ({events} events); .db "
          f"{sizes['ascend_pytorch_profiler_0.db']:.1f} MB")
    print(f"same events table from both readers: {'yes' if same else 'NO'} ({len(tables['db'])} rows)")
    for name in readers:
        print(f"{name:>4} reader: median {statistics.median(wall[name]):6.2f} s wall, "
              f"{statistics.median(cpu[name]):6.2f} s CPU over {reps} reads")
    ratio = statistics.median(wall["text"]) / statistics.median(wall["db"])
    print(f"text / db (wall medians): {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="chrome: X events in the synthetic trace")
    parser.add_argument("--no-kernels", action="store_true", help="chrome: CPU-only trace (no kernels / launches)")
    parser.add_argument("--ascend", action="store_true", help="time the Ascend text and .db readers instead")
    parser.add_argument("--kernels", type=int, default=200_000, help="ascend: kernel rows of the capture")
    parser.add_argument("--reps", type=int, default=3, help="ascend: reads per reader, alternating")
    parser.add_argument("--small", action="store_true", help="tiny inputs: a quick check that it runs")
    args = parser.parse_args()
    if args.ascend:
        ascend_benchmark(2_000 if args.small else args.kernels, 1 if args.small else args.reps)
    else:
        chrome_benchmark(20_000 if args.small else args.events, kernels=not args.no_kernels)


if __name__ == "__main__":
    main()
