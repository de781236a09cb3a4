"""How fast perfbench parses a large chrome trace and builds its tables (not a test).

    python benchmarks/trace_parse.py [--events 1000000] [--no-kernels]

Writes a synthetic Kineto trace shaped like a profiled decode loop (ProfilerStep#N > pb|phase=decode|step=N >
pb|layer=..|module=.. > aten ops nested 2-3 deep, each leaf launching a CUDA kernel through cudaLaunchKernel)
into a temp folder, then times `parse_chrome_trace` and the tables and prints events/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from model.tracing import scope_name  # noqa: E402
from perfbench.profiling.chrome import parse_chrome_trace  # noqa: E402
from perfbench.profiling.tables import (  # noqa: E402
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

    def range(self, cat: str, name: str, body) -> None:  # noqa: ANN001 - a callable emitting children
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--no-kernels", action="store_true", help="CPU-only trace (no kernels / launches)")
    args = parser.parse_args()
    trace = synthetic_trace(args.events, kernels=not args.no_kernels)
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


if __name__ == "__main__":
    main()
