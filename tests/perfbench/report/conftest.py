"""Synthetic result folders for the report tests: planted speed-ups, raw samples from a seeded RNG, fake
trace tables, and hostile strings wherever user or trace text reaches the page."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.records_kit import run_result

INJECTION = "<script>alert(1)</script>"
# toggle -> planted decode speed-up (time without / time with)
SPEEDUPS = {"fused_rope": 1.10, "fused_attention": 1.25, "grouped_moe": 1.40}
BASE_TTFT_MS = 40.0
BASE_TPOT_MS = 12.0


def plan_for(on: set[str], inactive: set[str]) -> dict[str, dict]:
    plan = {}
    for t in TOGGLE_NAMES:
        if t in on:
            plan[t] = {"requested": True, "state": "on", "reason": "", "impl": f"fast {t}"}
        elif t in inactive:
            plan[t] = {"requested": True, "state": "inactive", "reason": "needs attn_tp_size > 1", "impl": ""}
        else:
            plan[t] = {"requested": False, "state": "off", "reason": "not requested", "impl": ""}
    return plan


def synthetic_run(run_id: str, on: set[str], rng: np.random.Generator, *, batch_size: int = 1,
                  inactive: set[str] = frozenset(), slowdown: float = 1.0) -> RunResult:
    factor = slowdown / float(np.prod([SPEEDUPS[t] for t in on])) if on else slowdown
    ttft = list(BASE_TTFT_MS * batch_size * factor * (1 + 0.01 * rng.standard_normal(5)))
    tpot = list(BASE_TPOT_MS * factor * (1 + 0.01 * rng.standard_normal(40)))
    t = dict(zip(("median", "p90", "p99"), np.percentile(ttft, [50, 90, 99])))
    d = dict(zip(("median", "p90", "p99"), np.percentile(tpot, [50, 90, 99])))
    summary = {"ttft_ms_median": t["median"], "ttft_ms_p90": t["p90"], "ttft_ms_p99": t["p99"],
               "tpot_ms_median": d["median"], "tpot_ms_p90": d["p90"], "tpot_ms_p99": d["p99"],
               "prefill_tok_s": batch_size * 32 / (t["median"] / 1000),
               "decode_tok_s": batch_size / (d["median"] / 1000),
               "compile_s": 0.0, "peak_mem_mb": 123.5}
    spec = {"run_id": run_id, "scenario": "synthetic", "device": "cpu", "dtype": "float32", "model": "tiny",
            "batch_size": batch_size, "input_len": 32, "output_len": 8, "parallel": {"world_size": 1},
            "toggles": {t: t in on or t in inactive for t in TOGGLE_NAMES}}
    return run_result(run_id, spec=RunSpec.from_dict(spec),
                      plan=RunPlan.from_dict(plan_for(on, inactive)),
                      samples={"ttft_ms": ttft, "tpot_ms": tpot}, summary=summary,
                      numerics={"max_rel_error": 1e-6 * len(on), "max_abs_logit_diff": 1.5e-6 * len(on),
                                "tokens_match": True,
                                "reference": "r-base"},
                      env={"torch": "2.13.0", "hostname": f"box{INJECTION}",
                           "device": "cpu", "device_name": "cpu", "device_count": 1},
                      wall_s=1.0)


def failed_run(run_id: str, error: str, on: set[str] = frozenset()) -> RunResult:
    spec = {"run_id": run_id, "scenario": INJECTION, "device": "cpu", "dtype": "float32", "model": "tiny",
            "batch_size": 2, "input_len": 32, "output_len": 8, "parallel": {"world_size": 1},
            "toggles": {t: t in on for t in TOGGLE_NAMES}}
    return run_result(run_id, status="error", spec=RunSpec.from_dict(spec), error=error,
                      plan=RunPlan.from_dict(plan_for(set(on), set())))


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def write_trace_tables(folder: Path, run: RunResult) -> None:
    """Fake trace tables in perfbench.profiling's layout (a `side` column; host self time beside device kernel
    time, never to be added), device times shrinking with the run's toggles by the planted factor."""
    scale = run.summary.tpot_ms_median / BASE_TPOT_MS
    tables = folder / "runs" / run.run_id / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    # name, category, phase, layer_type, count, device total_us; host rows take 3x the device time
    ops = [("aten::mm", "matmul", "decode", "linear_attention", 64, 900.0),
           ("aten::bmm", "attention", "decode", "full_attention", 16, 300.0),
           (INJECTION, "other", "prefill", "(none)", 2, 50.0),
           ("aten::rms_norm", "norm", "prefill", "full_attention", 8, 120.0)]
    per_op, by = [], {"category": {}, "phase": {}, "layer_type": {}}
    for side, factor in (("device", scale), ("host", 3.0)):
        for name, category, phase, layer_type, count, total in ops:
            total *= factor
            mean = total / count
            per_op.append([side, name, category, count, total, mean, mean, mean, 0.0])
            for key, label in (("category", category), ("phase", phase), ("layer_type", layer_type)):
                by[key][(side, label)] = by[key].get((side, label), 0.0) + total
    op_header = ["side", "name", "category", "count", "total_us", "mean_us", "min_us", "max_us", "share_pct"]
    _write_csv(tables / "per_op.csv", op_header, per_op)
    for key, stem in (("category", "per_category"), ("phase", "per_phase"), ("layer_type", "per_layer_type")):
        rows = [[side, label, 1, total, 0.0] for (side, label), total in by[key].items()]
        _write_csv(tables / f"{stem}.csv", ["side", key, "count", "total_us", "share_pct"], rows)
    comm_header = ["rank", "step", "side", "compute_us", "communication_us", "wall_us",
                   "communication_share_pct"]
    _write_csv(tables / "compute_vs_communication.csv", comm_header,
               [[0, 0, "device", 1200.5 * scale, 0.0, 1300.25 * scale, 0.0]])


FACTORIAL = [(), ("fused_rope",), ("fused_attention",), ("grouped_moe",), ("fused_rope", "fused_attention"),
             ("fused_rope", "grouped_moe"), ("fused_attention", "grouped_moe"),
             ("fused_rope", "fused_attention", "grouped_moe")]
RUN_COMBOS = {  # run_id -> (toggles on, batch size); bs=1 holds a 2^3 factorial, bs=4 a one-at-a-time pair
    **{"r-" + ("-".join(sorted(c)) or "base"): (set(c), 1) for c in FACTORIAL},
    "bs4-base": (set(), 4),
    "bs4-moe": ({"grouped_moe"}, 4),
}

TRACEBACK = ('Traceback (most recent call last):\n  File "worker.py", line 42, in run\n'
             f"RuntimeError: kernel failed {INJECTION} & more")


@pytest.fixture(scope="session")
def make_folder() -> Callable[..., Path]:
    """make_folder(path, ok=True, failed=True, traces=True, slowdown={run_id: factor}, drop=(), seed=0)."""

    def make(path: Path, *, ok: bool = True, failed: bool = True, traces: bool = True,
             slowdown: dict[str, float] | None = None, drop: tuple[str, ...] = (), seed: int = 0,
             extra: tuple[str, ...] = ()) -> Path:
        rng = np.random.default_rng(seed)
        results = []
        if ok:
            for run_id, (on, bs) in RUN_COMBOS.items():
                if run_id not in drop:
                    results.append(synthetic_run(run_id, on, rng, batch_size=bs,
                                                 slowdown=(slowdown or {}).get(run_id, 1.0)))
            for run_id in extra:
                results.append(synthetic_run(run_id, {"fused_rope"}, rng, batch_size=2))
        if failed:
            results.append(failed_run("r-crash", TRACEBACK, {"graph_mode"}))
            results.append(failed_run("r-timeout", ""))
        write_results(path, results)
        if traces:
            for r in results:
                if r.status == "ok":
                    write_trace_tables(path, r)
        scenario = {"name": f"synthetic {INJECTION}", "model": {"preset": "tiny"},
                    "perfbench": {"design": "grid", "toggles": list(SPEEDUPS)}}
        (path / "scenario.json").write_text(json.dumps(scenario))
        return path

    return make


@dataclass(frozen=True)
class Planted:
    """What the synthetic folders contain, for the assertions."""

    injection: str
    speedups: dict[str, float]
    run_ids: tuple[str, ...]  # the ok runs make_folder writes by default
    base_tpot_ms: float  # the all-off TPOT the device trace times scale with


@pytest.fixture(scope="session")
def planted() -> Planted:
    return Planted(injection=INJECTION, speedups=dict(SPEEDUPS), run_ids=tuple(RUN_COMBOS),
                   base_tpot_ms=BASE_TPOT_MS)
