"""Result files: the schema every later stage (report, compare, gate) reads, written atomically.

A result folder holds
  results.jsonl   one `RunResult` object per line (raw samples included)
  results.csv     one row per run (`CSV_COLUMNS` + req./eff. toggle columns)
  runs/<run_id>/  result.json, worker.log, trace/ (profiler output), tables/*.csv (parsed trace tables)
  scenario.json   the validated scenario the runs came from
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from model.optimizations import TOGGLE_NAMES

STATUSES = ("ok", "error", "timeout", "killed")

SUMMARY_KEYS = (
    "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_median", "tpot_ms_p90", "tpot_ms_p99",
    "prefill_tok_s", "decode_tok_s", "compile_s", "compile_warm_s", "first_ttft_ms", "peak_mem_mb",
    "host_other_cores", "host_steal_cores", "host_spare_cores",
)

CSV_COLUMNS = (
    "run_id", "status", "error", "scenario", "device", "world_size", "dtype", "model", "batch_size", "input_len",
    "output_len", "ragged",
    *(f"req.{t}" for t in TOGGLE_NAMES), *(f"eff.{t}" for t in TOGGLE_NAMES),
    "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_median", "tpot_ms_p90", "tpot_ms_p99",
    "prefill_tok_s", "decode_tok_s", "compile_s", "compile_warm_s", "first_ttft_ms", "peak_mem_mb",
    "host_other_cores", "host_steal_cores", "host_spare_cores",
    "max_abs_logit_diff",
    "tokens_match", "decode_ops_per_step", "wall_s",
)


@dataclass
class RunSpec:
    """One run: a toggle combination x a workload shape, with everything needed to repeat it."""

    run_id: str
    scenario: str
    device: str = "cpu"
    dtype: str = "float32"
    model: str = "tiny"  # preset name or checkpoint folder
    num_layers: int | None = None
    with_ckpt: bool = False  # False: dummy random weights (seeded), even for a checkpoint folder's config
    seed: int = 0
    batch_size: int = 1
    input_len: int = 128
    output_len: int = 16
    ragged: bool = False  # prompts of different lengths (input_len is the longest)
    toggles: dict[str, bool] = field(default_factory=dict)  # requested
    parallel: dict[str, int] = field(default_factory=dict)  # ParallelConfig fields
    exe_mode: str = "ge_graph"
    enable_cache_compile: bool = False
    warmup: int = 1
    iterations: int = 5
    profile: bool = True
    numerics_check: bool = True
    timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return int(self.parallel.get("world_size", 1))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSpec:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})


@dataclass
class RunResult:
    run_id: str
    status: str  # one of STATUSES
    spec: dict[str, Any]
    error: str | None = None
    plan: dict[str, dict[str, Any]] = field(default_factory=dict)  # toggle -> requested/state/reason/impl
    # raw samples, milliseconds: ttft per timed iteration; tpot = every decode step of every timed iteration
    samples: dict[str, list[float]] = field(default_factory=dict)
    summary: dict[str, float | None] = field(default_factory=dict)  # SUMMARY_KEYS
    numerics: dict[str, Any] = field(default_factory=dict)  # max_abs_logit_diff, tokens_match, reference
    trace: dict[str, Any] = field(default_factory=dict)  # dir, decode_ops_per_step, op_counts_per_decode_step
    env: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunResult:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})

    def csv_row(self) -> dict[str, Any]:
        spec = self.spec
        row: dict[str, Any] = {
            "run_id": self.run_id, "status": self.status, "error": (self.error or "").splitlines()[-1:][0]
            if self.error else "",
            "scenario": spec.get("scenario"), "device": spec.get("device"),
            "world_size": int(spec.get("parallel", {}).get("world_size", 1)), "dtype": spec.get("dtype"),
            "model": spec.get("model"), "batch_size": spec.get("batch_size"), "input_len": spec.get("input_len"),
            "output_len": spec.get("output_len"), "ragged": spec.get("ragged"),
        }
        requested = spec.get("toggles", {})
        for t in TOGGLE_NAMES:
            row[f"req.{t}"] = bool(requested.get(t, False))
            row[f"eff.{t}"] = self.plan.get(t, {}).get("state", "")
        for key in SUMMARY_KEYS:
            row[key] = self.summary.get(key)
        row["max_abs_logit_diff"] = self.numerics.get("max_abs_logit_diff")
        row["tokens_match"] = self.numerics.get("tokens_match")
        row["decode_ops_per_step"] = self.trace.get("decode_ops_per_step")
        row["wall_s"] = round(self.wall_s, 3)
        return row


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename: readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def load_results(folder: str | Path) -> list[RunResult]:
    """Results of a folder, last record per run_id winning (a resumed sweep may have rewritten a run)."""
    path = Path(folder) / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.jsonl (is {folder} a perfbench result folder?)")
    by_id: dict[str, RunResult] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        result = RunResult.from_dict(raw)
        by_id[result.run_id] = result
    return list(by_id.values())


def write_results(folder: str | Path, results: list[RunResult]) -> None:
    """Rewrite results.jsonl and results.csv atomically from the full list."""
    folder = Path(folder)
    lines = "".join(json.dumps(r.to_dict(), default=str) + "\n" for r in results)
    atomic_write_text(folder / "results.jsonl", lines)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS))
    writer.writeheader()
    for r in results:
        writer.writerow(r.csv_row())
    atomic_write_text(folder / "results.csv", buf.getvalue())
