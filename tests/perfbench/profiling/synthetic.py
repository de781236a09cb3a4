"""Hand-written profiler outputs for tests: kernel_details.csv in each header variant, trace_view.json."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from model.tracing_names import scope_name

# Header variants of kernel_details.csv (profiler_formats.md 3.1), PMU tails shortened.
V1 = ("Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
      "Wait Time(us),Block Dim,Mix Block Dim,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
      "Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles,aic_mac_fp16_ratio")
V2 = ("Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),"
      "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,"
      "Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles,"
      "aic_mac_time(us),aic_mac_ratio,cube_utilization(%)")
V3 = "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim"
V4 = ("Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
      "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,"
      "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),"
      "aic_total_cycles,aic_mac_time(us),aic_mac_ratio,cube_utilization(%)")
BLOCK_NUM = ("Step ID,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,"
             "Start Time(us),Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes,"
             "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats")
VARIANTS = {"V1": V1, "V2": V2, "V3": V3, "V4": V4, "BlockNum": BLOCK_NUM}

# Three kernels: a matmul, an RmsNorm and an all-reduce (start µs as written by the profiler: TAB, ns digits).
KERNELS = [
    {"Name": "aclnnMatmul_MatMulV3Common_MatMulV3", "Type": "MatMulV3", "Accelerator Core": "AI_CORE",
     "Start Time(us)": "1736408883704643.212\t", "Duration(us)": "100.5", "Stream ID": "2", "Block": "20",
     "Input Shapes": '"1,4096;4096,1024"'},
    {"Name": "aclnnRmsNorm_RmsNormAiCore_RmsNorm", "Type": "RmsNorm", "Accelerator Core": "AI_VECTOR_CORE",
     "Start Time(us)": "1736408883704843.213\t", "Duration(us)": "10.25", "Stream ID": "2", "Block": "40",
     "Input Shapes": '"1,4096;4096"'},
    {"Name": "hcom_allReduce__586_0_1", "Type": "hcom_allReduce_", "Accelerator Core": "HCCL",
     "Start Time(us)": "1736408883704900.000\t", "Duration(us)": "50", "Stream ID": "N/A", "Block": "0",
     "Input Shapes": "N/A"},
]


def write_kernel_details(path: Path, header: str, kernels: list[dict[str, str]] = KERNELS, *,
                         level0: bool = False, step: str = "7") -> Path:
    """Write kernel_details.csv with `header`; cells the kernels do not give are "N/A" (or plausible numbers).

    level0: Type and Accelerator Core are N/A except on communication rows (as observed at Level0).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = header.split(",")
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for kernel in kernels:
            row = []
            for col in columns:
                if col in ("Step Id", "Step ID"):
                    row.append(step)
                elif col in ("Block Dim", "Block Num"):
                    row.append(kernel["Block"])
                elif col in ("Type", "Accelerator Core") and level0 and kernel["Accelerator Core"] != "HCCL":
                    row.append("N/A")
                elif col in kernel:
                    row.append(kernel[col])
                elif col in ("Device_id", "Mix Block Dim", "Mix Block Num", "Wait Time(us)"):
                    row.append("0")
                else:
                    row.append("N/A")
            writer.writerow(row)
    return path


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def npu_trace_view() -> list[dict]:
    """A torch_npu trace_view.json in miniature: the model's pb ranges as cpu_ops on the Python thread, two
    kernels and one collective issued from inside them (async_npu flows), one kernel without a flow, one
    EVENT_WAIT task and one HCCL plane task (neither is an op). Device starts match `KERNELS` (the collective
    1 ns off, as the profiler's HCCL rows sometimes are)."""
    py, hw, hccl = 3096504, 3170820512, 3170820576
    meta = [
        {"ph": "M", "name": "process_name", "pid": py, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": hw, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_name", "pid": hccl, "tid": 0, "args": {"name": "HCCL"}},
        {"ph": "M", "name": "thread_name", "pid": hccl, "tid": 0, "args": {"name": "Group 0 Communication"}},
        {"ph": "M", "name": "thread_name", "pid": hccl, "tid": 1, "args": {"name": "Plane 0"}},
    ]

    def cpu(name: str, ts: str, dur: float) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": py, "tid": py, "ts": ts, "dur": dur,
                "args": {}}

    def flow(flow_id: int, host_ts: str, pid: int, tid: int, dev_ts: str) -> list[dict]:
        return [{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": flow_id, "pid": py, "tid": py,
                 "ts": host_ts, "cat": "async_npu"},
                {"ph": "f", "bp": "e", "name": "torch_to_npu", "id": flow_id, "pid": pid, "tid": tid,
                 "ts": dev_ts, "cat": "async_npu"}]

    def task(name: str, ts: str, dur: float, task_type: str, pid: int = hw, tid: int = 2) -> dict:
        return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": {"Task Type": task_type, "Physic Stream Id": tid}}

    host = [
        cpu("ProfilerStep#7", "1736408883704000.000", 1000.0),
        cpu(scope_name(phase="decode", step=2), "1736408883704010.000", 900.0),
        cpu(scope_name(layer=3, layer_type="full_attention", module="attn"), "1736408883704020.000", 300.0),
        cpu("aten::linear", "1736408883704030.000", 50.0),
        cpu("aclnnMatmul", "1736408883704031.500", 20.0),  # issues the matmul
        cpu(scope_name(module="norm"), "1736408883704100.000", 40.0),
        cpu("aclnnRmsNorm", "1736408883704101.000", 10.0),  # issues the norm
        cpu(scope_name(layer=3, layer_type="full_attention", module="moe"), "1736408883704400.000", 300.0),
        cpu("HcclAllreduce", "1736408883704410.000", 30.0),  # issues the collective
    ]
    device = [
        task("aclnnMatmul_MatMulV3Common_MatMulV3", "1736408883704643.212", 100.5, "AI_CORE"),
        task("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "1736408883704843.213", 10.25, "AI_VECTOR_CORE"),
        {"ph": "X", "name": "hcom_allReduce__586_0_1", "pid": hccl, "tid": 0, "ts": "1736408883704899.999",
         "dur": 50.0, "args": {"connection_id": 1}},
        task("aclnnCast_CastAiCore_Cast", "1736408883704960.000", 3.0, "AI_VECTOR_CORE"),  # no flow
        task("EVENT_WAIT_SQE", "1736408883704970.000", 5.0, "EVENT_WAIT_SQE"),
        {"ph": "X", "name": "Notify_Wait", "pid": hccl, "tid": 1, "ts": "1736408883704901.000", "dur": 5.0,
         "args": {}},
    ]
    flows = (flow(1, "1736408883704031.500", hw, 2, "1736408883704643.212")
             + flow(2, "1736408883704101.000", hw, 2, "1736408883704843.213")
             + flow(3, "1736408883704410.000", hccl, 0, "1736408883704899.999"))
    return meta + host + device + flows
