"""Write an Ascend text export (kernel_details.csv + trace_view.json) as the `export_type=db` file.

    python benchmarks/ascend_text_to_db.py ASCEND_PROFILER_OUTPUT OUT.db

The .db follows the documented schema of ascend_pytorch_profiler_{rank}.db (docs/profiler_formats.md 6): the
tables perfbench reads (STRING_IDS, ENUM_API_TYPE, TASK, COMPUTE_TASK_INFO, COMMUNICATION_OP, PYTORCH_API,
CONNECTION_IDS, STEP_TIME, TASK_PMU_INFO). It lets the tests check that the text and the .db readers give one
events table for one capture (tests/perfbench/profiling/test_ascend_db.py) and lets trace_parse.py time both
readers on one large capture. It reads the text files with csv / json / decimal only, never with perfbench's
parsers, so a misreading there is not repeated here.

Mapping: every kernel_details row becomes a TASK row; a collective (`hcom_*` name or an HCCL/COMMUNICATION
core) a COMMUNICATION_OP row instead, the others a COMPUTE_TASK_INFO row. Every trace_view `cpu_op` becomes a
PYTORCH_API row of type `op` (times as TEXT, as torch_npu writes them), and each `async_npu` flow a
CONNECTION_IDS row from the issuing op to the device row that starts where the flow ends (within 1 ns: the two
files round some HCCL starts differently). `ProfilerStep#N` ranges become STEP_TIME rows, the AI Core metric
columns of a compute row TASK_PMU_INFO rows.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

COMMUNICATION_CORES = ("HCCL", "COMMUNICATION")
API_TYPES = {5000: "runtime", 5500: "hccl", 10000: "node", 15000: "model", 20000: "acl", 50001: "op",
             50002: "queue", 50003: "trace", 50004: "mstx"}
SCHEMA = {
    "STRING_IDS": "id INTEGER PRIMARY KEY, value TEXT",
    "ENUM_API_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "TASK": ("startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER, "
             "globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, "
             "modelId INTEGER"),
    "COMPUTE_TASK_INFO": ("name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER, mixBlockDim INTEGER, "
                          "taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, "
                          "inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER, "
                          "outputShapes INTEGER, attrInfo INTEGER"),
    "COMMUNICATION_OP": ("opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER, "
                         "opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER, "
                         "algType INTEGER, count NUMERIC, opType INTEGER"),
    "PYTORCH_API": ("startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER, "
                    "sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, "
                    "callchainId INTEGER, type INTEGER"),
    "CONNECTION_IDS": "id INTEGER, connectionId INTEGER",
    "STEP_TIME": "id INTEGER, startNs INTEGER, endNs INTEGER",
    "TASK_PMU_INFO": "globalTaskId INTEGER, name INTEGER, value NUMERIC",
}
PMU_PREFIXES = ("aicore_time", "aic_", "aiv_")  # kernel_details' AI Core metric columns (Level1 and 2)


def us_to_ns(text: str | float) -> int:
    """µs (text with ns digits, a TAB or quotes around it, or a number) to integer ns, exactly."""
    return int((Decimal(str(text).strip().strip('"').strip()) * 1000).to_integral_value())


class Strings:
    """STRING_IDS: one id per distinct string, from 0."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str | None) -> int | None:
        if value is None:
            return None
        return self.ids.setdefault(value, len(self.ids))


def _cell(row: dict[str, str], column: str) -> str | None:
    value = (row.get(column) or "").strip()
    return value or None


def _number(value: str | None) -> bool:
    try:
        float(value or "")
    except ValueError:
        return False
    return True


def text_to_db(output_dir: Path, db_path: Path) -> Path:
    """Write `output_dir`'s kernel_details.csv and trace_view.json as `db_path` (replaced if it exists)."""
    output_dir, db_path = Path(output_dir), Path(db_path)
    with open(output_dir / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        kernels = list(csv.DictReader(f))
    trace = json.loads((output_dir / "trace_view.json").read_text())
    strings = Strings()
    ops = [e for e in trace if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    op_at: dict[tuple, int] = {}  # (pid, tid, start ns) -> op index; the innermost (shortest) where several
    for i in sorted(range(len(ops)), key=lambda i: -float(ops[i].get("dur", 0))):
        op_at[(ops[i]["pid"], ops[i]["tid"], us_to_ns(ops[i]["ts"]))] = i
    flow_start, flow_end = {}, {}
    for e in trace:
        if isinstance(e, dict) and e.get("cat") == "async_npu" and e.get("ph") in ("s", "f"):
            where = (e["pid"], e["tid"], us_to_ns(e["ts"]))
            (flow_start if e["ph"] == "s" else flow_end)[e["id"]] = where
    starts = [us_to_ns(k["Start Time(us)"]) for k in kernels]
    row_at = {s: i for i, s in enumerate(starts)}
    issuer: dict[int, int] = {}  # kernel row -> op index
    for flow, end in flow_end.items():
        row = next((row_at[end[2] + d] for d in (0, -1, 1) if end[2] + d in row_at), None)
        op = op_at.get(flow_start.get(flow)) if flow in flow_start else None
        if row is not None and op is not None:
            issuer[row] = op
    # one CONNECTION_IDS id per issuing op; one connectionId per device row
    link_of_op = {op: n for n, op in enumerate(dict.fromkeys(issuer[r] for r in sorted(issuer)))}
    tasks, compute, collectives, connections, pmu = [], [], [], [], []
    for i, (k, start) in enumerate(zip(kernels, starts)):
        end = start + us_to_ns(k["Duration(us)"])
        conn = i if i in issuer else None
        if conn is not None:
            connections.append((link_of_op[issuer[i]], conn))
        core, name = _cell(k, "Accelerator Core"), k["Name"].strip()
        if core in COMMUNICATION_CORES or name.startswith("hcom_"):
            collectives.append((strings(name), start, end, conn, None, i, 0, 0, None, None, None,
                                strings(_cell(k, "Type"))))
            continue
        stream = _cell(k, "Stream ID")
        tasks.append((start, end, 0, conn, i, 0, None, None, int(stream) if stream else None, None, None))
        compute.append((strings(name), i, None, None, strings(core), strings(_cell(k, "Type")), None, None,
                        strings(_cell(k, "Input Shapes")), None, None, None, None))
        pmu += [(i, strings(column), float(value)) for column, value in k.items()
                if column.startswith(PMU_PREFIXES) and _number(value)]
    api, steps = [], []
    for i, e in enumerate(ops):
        start = us_to_ns(e["ts"])
        end = start + round(float(e.get("dur", 0)) * 1000)
        api.append((str(start), str(end), (int(e["pid"]) << 32) | int(e["tid"]), link_of_op.get(i),
                    strings(str(e.get("name", ""))), None, None, None, None, None, 50001))
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            steps.append((int(e["name"].split("#", 1)[1]), start, end))
    db_path.unlink(missing_ok=True)
    conn = sqlite3.connect(db_path)
    try:
        for table, columns in SCHEMA.items():
            conn.execute(f"CREATE TABLE {table} ({columns})")
        rows = {"STRING_IDS": [(i, v) for v, i in strings.ids.items()], "ENUM_API_TYPE": list(API_TYPES.items()),
                "TASK": tasks, "COMPUTE_TASK_INFO": compute, "COMMUNICATION_OP": collectives, "PYTORCH_API": api,
                "CONNECTION_IDS": connections, "STEP_TIME": steps, "TASK_PMU_INFO": pmu}
        pmu_columns = [c for c in (kernels[0] if kernels else {}) if c.startswith(PMU_PREFIXES)]
        if not pmu_columns:  # a Level0 export has no AI Core metrics, and no such table
            conn.execute("DROP TABLE TASK_PMU_INFO")
        for table, values in rows.items():
            if values:
                conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(values[0]))})", values)
        conn.commit()
    finally:
        conn.close()
    return db_path


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    print(text_to_db(Path(sys.argv[1]), Path(sys.argv[2])))
