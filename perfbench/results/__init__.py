"""Result files: the schema every later stage (report, compare, gate) reads, written atomically.

A result folder holds
  results.jsonl   one `RunResult` object per line (raw samples included)
  results.csv     one row per run (`CSV_COLUMNS` + req./eff. toggle columns)
  runs/<run_id>/  result.json, worker.log, trace/ (profiler output), tables/*.csv (parsed trace tables)
  scenario.json   the validated scenario the runs came from
  compile_cache/  the sweep's shared compile cache (inductor; per combination on NPU); in the per-user cache
                  instead when the folder's path has a space or special character (measure/compile_cache.py)

Every record carries `schema_version` (versions.py): older records are migrated on load; newer ones, unknown
keys and wrong types are refused with one line naming the file, the record's line and the field, so a
committed baseline cannot drift without a clear error. The modules:
  records.py      the typed parts of a record (summary, numerics, trace, stability, env, blocks, expert load)
  run_record.py   RunSpec, RunPlan, RunResult, WorkloadShape
  expert_load.py  views on the expert-load record per layer and phase
  versions.py     SCHEMA_VERSION and the migration of older records
  validation.py   a pydantic error as one line
  files.py        atomic writes, load_results / load_folder / write_results
  env_allowlist.py  the environment variables a record may hold (exact names, values checked, the rest counted)
  cells.py        long text shortened in output tables
  ab_record.py    ab.json: the typed record of a `perfbench ab` job (version 1 records load too)
  op_group.py     an op group's name (branch | op | phase | layer type) for `perfbench ab --ops`
  op_ab_record.py the op-level part of ab.json: op epochs and the verdicts per op group and branch
"""

from perfbench.results.expert_load import LayerLoad, layer_loads, worst_imbalance
from perfbench.results.files import (
    ResultFolder,
    atomic_write_json,
    atomic_write_text,
    load_folder,
    load_results,
    write_results,
)
from perfbench.results.records import (
    FAILURE_KINDS,
    REL_ERROR_TOLERANCE,
    SUMMARY_KEYS,
    BlockPlacement,
    CodeOrigin,
    Environment,
    ExpertLoad,
    Failure,
    Numerics,
    Stability,
    Summary,
    TraceRecord,
)
from perfbench.results.run_record import CSV_COLUMNS, STATUSES, RunPlan, RunResult, RunSpec, WorkloadShape
from perfbench.results.versions import SCHEMA_VERSION, migrate

__all__ = [
    "CSV_COLUMNS", "FAILURE_KINDS", "REL_ERROR_TOLERANCE", "SCHEMA_VERSION", "STATUSES", "SUMMARY_KEYS",
    "BlockPlacement", "CodeOrigin", "Environment", "ExpertLoad", "Failure", "LayerLoad", "Numerics", "ResultFolder",
    "RunPlan",
    "RunResult", "RunSpec", "Stability", "Summary", "TraceRecord", "WorkloadShape", "atomic_write_json",
    "atomic_write_text", "layer_loads", "load_folder", "load_results", "migrate", "worst_imbalance",
    "write_results",
]
