"""perfbench gate on synthetic result folders: false alarms, planted regressions, deterministic checks, bad
input, coverage reporting."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.compare import match_runs
from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.gate.checks import ratio_pairs
from perfbench.gate.engine import ResultFolder, evaluate, load_folder, run_gate, save_baseline
from perfbench.gate.rules import RatioRule, default_rules, load_rules, parse_rules
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.records_kit import run_result, trace_record

REPO = Path(__file__).resolve().parents[3]
SMOKE_GATE = REPO / "gates" / "ci_smoke_gate.yaml"


def noisy(rng: np.random.Generator, median: float, n: int, cv: float = 0.06,
          outlier_rate: float = 0.03) -> list[float]:
    """Timing-like samples: lognormal noise around `median`, and a few 1.3-2x outliers (a preempted step)."""
    values = median * rng.lognormal(0.0, cv, size=n)
    outliers = rng.random(n) < outlier_rate
    values[outliers] *= rng.uniform(1.3, 2.0, size=int(outliers.sum()))
    return [float(v) for v in values]


def make_run(run_id: str, *, tpot: list[float] | None = None, ttft: list[float] | None = None,
             on: tuple[str, ...] = ("fused_rmsnorm", "graph_mode"), status: str = "ok",
             dtype: str = "float32", device: str = "cpu", batch_size: int = 1, input_len: int = 128,
             output_len: int = 16,
             ops: float | None = 120.0, op_counts: dict[str, float] | None = None,
             numerics: dict[str, Any] | None = None, summary: dict[str, float] | None = None,
             plan_override: dict[str, dict[str, Any]] | None = None) -> RunResult:
    spec = {"run_id": run_id, "scenario": "synthetic", "device": device, "dtype": dtype, "model": "tiny",
            "batch_size": batch_size, "input_len": input_len, "output_len": output_len,
            "toggles": {t: t in on for t in TOGGLE_NAMES}, "parallel": {"world_size": 1}}
    plan = {t: {"requested": t in on, "state": "on" if t in on else "off", "reason": "" if t in on else
                "not requested", "impl": "x" if t in on else ""} for t in TOGGLE_NAMES}
    plan.update(plan_override or {})
    samples = {}
    if tpot is not None:
        samples["tpot_ms"] = tpot
    if ttft is not None:
        samples["ttft_ms"] = ttft
    per_op = op_counts or {"aten::mm": 40.0, "aten::add": 80.0}
    trace = trace_record() if ops is None else trace_record(decode_ops_per_step=ops, op_counts_per_decode_step=per_op)
    return run_result(run_id, status=status, spec=RunSpec.from_dict(spec),
                      plan=RunPlan.from_dict(plan if status == "ok" else {}),
                      samples=samples, summary=summary or {}, trace=trace,
                      numerics=numerics if numerics is not None else {
                          "max_rel_error": 1e-6, "worst_phase": "prefill", "worst_layer": 0, "worst_branch": "moe",
                          "max_abs_logit_diff": 1e-5, "tokens_match": True},
                      error="RuntimeError: boom" if status != "ok" else None, env={"torch": "2.13.0"})


def folder(tmp_path: Path, name: str, runs: list[RunResult]) -> Path:
    path = tmp_path / name
    write_results(path, runs)
    return path


def in_memory(runs: list[RunResult], name: str = "mem") -> ResultFolder:
    return ResultFolder(Path(name), {r.run_id: r for r in runs})


def gate(*args: str) -> Any:
    """The gate without confirmation (whatever CI says): these tests are about the checks themselves."""
    return CliRunner().invoke(main, ["gate", "--no-confirm", *args])


def write_rules(tmp_path: Path, text: str, name: str = "gate.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- 1. A/A false alarms -------------------------------------------------------------------------

def test_default_timing_rule_false_alarm_rate_a_a() -> None:
    """Both sides resampled from one recorded sample set: the default rule must (almost) never fail."""
    rng = np.random.default_rng(20240601)
    # A recorded-looking run: 5 timed iterations x 16 decode steps of TPOT around 5 ms, TTFT around 40 ms.
    recorded_tpot = np.array(noisy(rng, 5.0, 400, cv=0.08, outlier_rate=0.03))
    recorded_ttft = np.array(noisy(rng, 40.0, 60, cv=0.08, outlier_rate=0.03))
    rules = default_rules()
    trials, failed, significant = 1000, 0, 0
    for _ in range(trials):
        runs = [make_run("r1", tpot=list(rng.choice(recorded_tpot, 80)),
                         ttft=list(rng.choice(recorded_ttft, 5))) for _ in range(2)]
        report = evaluate(in_memory([runs[0]]), in_memory([runs[1]]), rules)
        failed += report.exit_code == 1
        significant += any(c.details.get("p_value", 1.0) < 0.01 for c in report.checks if c.kind == "timing")
    assert failed / trials <= 0.01
    # The test alone (threshold aside) must be calibrated: about alpha per check, two checks per trial.
    assert significant / trials <= 0.03


# ---- 2. planted slowdown / speedup ---------------------------------------------------------------

@pytest.fixture()
def ab_folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(7)
    base_tpot = noisy(rng, 5.0, 20, cv=0.05, outlier_rate=0.0)
    ttft = noisy(rng, 40.0, 20, cv=0.05, outlier_rate=0.0)
    slower = [v * 1.15 for v in noisy(rng, 5.0, 20, cv=0.05, outlier_rate=0.0)]
    faster = [v / 1.15 for v in noisy(rng, 5.0, 20, cv=0.05, outlier_rate=0.0)]
    return (folder(tmp_path, "base", [make_run("abc123", tpot=base_tpot, ttft=ttft)]),
            folder(tmp_path, "slower", [make_run("abc123", tpot=slower, ttft=ttft)]),
            folder(tmp_path, "faster", [make_run("abc123", tpot=faster, ttft=ttft)]))


def test_planted_slowdown_fails_with_named_run_metric_ratio_p(ab_folders: tuple[Path, Path, Path],
                                                              tmp_path: Path) -> None:
    base, slower, _ = ab_folders
    summary = tmp_path / "gate.md"
    result = gate("--baseline", str(base), "--current", str(slower), "--summary", str(summary))
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("FAIL tpot_ms"))
    match = re.fullmatch(r"FAIL tpot_ms run=abc123: (1\.\d\d)x slower \(median ([\d.]+) ms vs ([\d.]+) ms\), "
                         r"p=([\d.e-]+) < 0\.01, threshold 10%; unpaired: the folders were timed at different "
                         r"times \(a suspect: `gate --confirm` decides it on pairs\); not confirmed on pairs \(run "
                         r"with --confirm: a suspect alone then never fails\)", line)
    assert match, line
    assert 1.10 < float(match[1]) < 1.25 and float(match[4]) < 0.01
    assert re.search(r"^PASS ttft_ms run=abc123", result.output, re.M)
    assert result.output.strip().splitlines()[-1].startswith("gate: FAIL (1 failed")
    assert "FAIL" in summary.read_text() and "tpot_ms" in summary.read_text()
    data = json.loads(summary.with_suffix(".json").read_text())
    assert data["exit_code"] == 1 and data["result"] == "fail"
    failing = [c for c in data["checks"] if c["status"] == "FAIL"]
    assert [(c["name"], c["run_id"]) for c in failing] == [("tpot_ms", "abc123")]
    assert failing[0]["details"]["p_value"] < 0.01


def test_planted_speedup_passes(ab_folders: tuple[Path, Path, Path]) -> None:
    base, _, faster = ab_folders
    result = gate("--baseline", str(base), "--current", str(faster))
    assert result.exit_code == 0, result.output
    assert re.search(r"^PASS tpot_ms run=abc123: 1\.\d\dx faster", result.output, re.M)


def test_slowdown_within_noise_or_threshold_passes() -> None:
    rng = np.random.default_rng(3)
    base = make_run("r", tpot=noisy(rng, 5.0, 20), ttft=noisy(rng, 40.0, 5))
    # 5 % slower: significant with 80 samples but under the 10 % threshold.
    cur = make_run("r", tpot=[v * 1.05 for v in noisy(rng, 5.0, 20)], ttft=base.samples["ttft_ms"])
    assert evaluate(in_memory([base]), in_memory([cur]), default_rules()).exit_code == 0
    # 30 % slower but only 2 samples a side that overlap: not significant.
    base2 = make_run("r", tpot=[5.0, 7.0], ttft=[40.0])
    cur2 = make_run("r", tpot=[6.5, 9.0], ttft=[40.0])
    report = evaluate(in_memory([base2]), in_memory([cur2]), default_rules())
    line = next(c.line() for c in report.checks if c.name == "tpot_ms")
    # beyond the threshold but not significant: neither a pass nor a failure
    assert report.exit_code == 3 and line.startswith("INCONCLUSIVE")
    assert "not significant" in line and "too few samples" in line


def test_throughput_and_threshold_only_metrics(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    tpot = noisy(rng, 5.0, 40, outlier_rate=0.0)
    base = make_run("r", tpot=tpot, summary={"compile_s": 10.0, "peak_mem_mb": 500.0})
    cur = make_run("r", tpot=[v * 1.2 for v in tpot], summary={"compile_s": 12.5, "peak_mem_mb": 450.0})
    rules = parse_rules({"rules": [{"kind": "timing", "metric": "decode_tok_s"},
                                   {"kind": "timing", "metric": "compile_s", "threshold": 0.2},
                                   {"kind": "timing", "metric": "peak_mem_mb"},
                                   {"kind": "timing", "metric": "tpot_ms_p90", "test": "bootstrap"}]},
                        "t.yaml")
    lines = {c.name: c for c in evaluate(in_memory([base]), in_memory([cur]), rules).checks}
    assert lines["decode_tok_s"].status == "FAIL" and "1.20x slower" in lines["decode_tok_s"].message
    assert "tok/s" in lines["decode_tok_s"].message
    assert lines["compile_s"].status == "FAIL" and "threshold only" in lines["compile_s"].message
    assert lines["peak_mem_mb"].status == "PASS" and "smaller" in lines["peak_mem_mb"].message
    assert lines["tpot_ms_p90"].status == "FAIL" and "CI of ratio" in lines["tpot_ms_p90"].message
    # Tokens per sample come from the summary (prompt tokens / median TTFT), so tok/s match the report.
    ttft = noisy(rng, 40.0, 5, outlier_rate=0.0)
    ragged = make_run("r", ttft=ttft, batch_size=2, input_len=128,
                      summary={"prefill_tok_s": 200 * 1000.0 / float(np.median(ttft)),
                               "ttft_ms_median": float(np.median(ttft))})
    prefill = parse_rules({"rules": [{"kind": "timing", "metric": "prefill_tok_s"}]}, "t.yaml")
    check = next(c for c in evaluate(in_memory([ragged]), in_memory([ragged]), prefill).checks
                 if c.kind == "timing")
    assert check.details["current"] == pytest.approx(ragged.summary.prefill_tok_s)
    # Throughput that went up passes.
    faster = make_run("r", tpot=[v / 1.2 for v in tpot])
    report = evaluate(in_memory([base]), in_memory([faster]), parse_rules(
        {"rules": [{"kind": "timing", "metric": "decode_tok_s"}]}, "t.yaml"))
    assert report.exit_code == 0


# ---- 3. deterministic gates ----------------------------------------------------------------------

def _with_rules(tmp_path: Path, base: list[RunResult], cur: list[RunResult], rules: str) -> Any:
    return gate("--baseline", str(folder(tmp_path, "b", base)), "--current", str(folder(tmp_path, "c", cur)),
                "--rules", str(write_rules(tmp_path, rules)))


def test_toggle_forced_off_fails(tmp_path: Path) -> None:
    inactive = {"graph_mode": {"requested": True, "state": "inactive", "reason": "torchair not available",
                               "impl": ""}}
    result = _with_rules(tmp_path, [make_run("r1")], [make_run("r1", plan_override=inactive)],
                         "rules: [{kind: toggles}]")
    assert result.exit_code == 1
    assert ("FAIL toggles run=r1: graph_mode was on in the baseline, now inactive (torchair not available)"
            in result.output)
    same = _with_rules(tmp_path, [make_run("r1")], [make_run("r1")], "rules: [{kind: toggles}]")
    assert same.exit_code == 0 and "PASS toggles run=r1: 2 toggle(s) on" in same.output


def test_op_count_growth_fails(tmp_path: Path) -> None:
    rules = "rules: [{kind: op_count, tolerance: 0}]"
    grown = _with_rules(tmp_path, [make_run("r1", ops=120)], [make_run("r1", ops=121)], rules)
    assert grown.exit_code == 1
    assert "FAIL op_count run=r1: decode ops per step grew: total 121 > 120" in grown.output
    split = make_run("r1", ops=120, op_counts={"aten::mm": 40.0, "aten::add": 70.0, "aten::mul": 10.0})
    new_op = _with_rules(tmp_path, [make_run("r1", ops=120)], [split], rules)
    assert new_op.exit_code == 1 and "aten::mul 0 -> 10" in new_op.output
    fewer = _with_rules(tmp_path, [make_run("r1", ops=120)], [make_run("r1", ops=100)], rules)
    assert fewer.exit_code == 0
    tolerated = _with_rules(tmp_path, [make_run("r1", ops=100, op_counts={"a": 100.0})],
                            [make_run("r1", ops=104, op_counts={"a": 104.0})],
                            "rules: [{kind: op_count, tolerance: 0.05}]")
    assert tolerated.exit_code == 0
    no_trace = _with_rules(tmp_path, [make_run("r1", ops=None)], [make_run("r1")], rules)
    assert no_trace.exit_code == 0
    assert "SKIP op_count run=r1: no decode op count in the baseline" in no_trace.output


def test_trace_plan_rule_fails_a_run_whose_trace_contradicts_its_plan() -> None:
    mismatch = "graph_mode on, but 2,470 eager aten ops per decode step (expected at most 200)"
    broken, fine, unprofiled = make_run("r1"), make_run("r2"), make_run("r3")
    broken.trace.plan_check = [{"toggle": "graph_mode", "state": "on", "ok": False, "line": mismatch},
                                  {"toggle": "fused_rmsnorm", "state": "on", "ok": True, "line": "ok"}]
    fine.trace.plan_check = [{"toggle": "graph_mode", "state": "on", "ok": True, "line": "ok"}]
    rules = parse_rules({"rules": [{"kind": "trace_plan"}]}, "test")

    report = evaluate(in_memory([broken, fine, unprofiled]), in_memory([broken, fine, unprofiled]), rules)

    lines = [c.line() for c in report.checks if c.kind == "trace_plan"]
    assert lines == [f"FAIL trace_plan run=r1: {mismatch}",
                     "PASS trace_plan run=r2: 1 toggle(s) match their trace signature"]


WHERE = {"worst_phase": "decode", "worst_layer": 3, "worst_branch": "mixer"}


@pytest.mark.parametrize("numerics,rules,expected", [
    ({"max_rel_error": 5e-3, **WHERE}, "rules: [{kind: numerics}]",
     "relative error 0.005 > 0.001 (float32) at decode layer 3 mixer"),
    ({"max_rel_error": math.nan, **WHERE}, "rules: [{kind: numerics}]", "relative error nan > 0.001"),
    ({"max_rel_error": 1e-6, **WHERE, "max_abs_logit_diff": 5e-3},
     "rules: [{kind: numerics, max_abs_logit_diff: {float32: 1.0e-3}}]", "max_abs_logit_diff 0.005 > 0.001"),
    ({"max_rel_error": 1e-6, **WHERE, "tokens_match": False, "first_mismatch_step": 2},
     "rules: [{kind: numerics, tokens_match: true}]", "greedy tokens differ from the reference from step 2"),
    ({"not_compared": "the reference cannot be replayed: it recorded no layer inputs"}, "rules: [{kind: numerics}]",
     "numerics not compared: the reference cannot be replayed: it recorded no layer inputs"),
    ({}, "rules: [{kind: numerics}]", "numerics not compared: no numerics recorded"),
], ids=["relative", "nan", "abs-bound", "tokens-rule", "not-compared", "empty"])
def test_numerics_violation_fails(tmp_path: Path, numerics: dict[str, Any], rules: str, expected: str) -> None:
    base = folder(tmp_path, "b", [make_run("r1")])
    cur = folder(tmp_path, "c", [make_run("r1", numerics=numerics)])
    summary = tmp_path / "gate.md"
    result = gate("--baseline", str(base), "--current", str(cur), "--rules", str(write_rules(tmp_path, rules)),
                  "--summary", str(summary))
    assert result.exit_code == 1 and f"FAIL numerics run=r1: {expected}" in result.output

    def reject(constant: str) -> None:
        raise AssertionError(f"bare {constant} in the JSON summary")

    json.loads(summary.with_suffix(".json").read_text(), parse_constant=reject)


@pytest.mark.parametrize(("dtype", "error", "status"), [
    ("bfloat16", 0.013, "PASS"), ("bfloat16", 0.015, "FAIL"), ("float32", 9e-4, "PASS"), ("float32", 1.1e-3, "FAIL"),
    ("float16", 2.9e-3, "PASS"), ("float16", 3.1e-3, "FAIL")])
def test_numerics_bound_per_dtype_default(dtype: str, error: float, status: str) -> None:
    """The default bounds are the calibrated ones (docs/numerics.md: bf16 1.4e-2, fp16 3e-3, fp32 1e-3); a
    greedy token that differs under replay is information by default, not a failure."""
    run = make_run("r1", dtype=dtype, numerics={"max_rel_error": error, **WHERE, "tokens_match": False})
    report = evaluate(in_memory([run]), in_memory([run]), default_rules())
    (check,) = [c for c in report.checks if c.kind == "numerics"]
    assert check.status == status


def test_a_run_whose_check_was_turned_off_is_skipped_saying_so() -> None:
    run = make_run("r1", numerics={})
    run.spec.numerics_check = False
    report = evaluate(in_memory([run]), in_memory([run]), default_rules())
    (check,) = [c for c in report.checks if c.kind == "numerics"]
    assert check.line() == ("SKIP numerics run=r1: numerics check turned off for this run "
                            "(perfbench.measure.numerics_check=false)")


def test_holm_correction_across_many_runs() -> None:
    """With many runs, a marginal p that passes alone is not enough under `correction: holm`; a clear
    slowdown still fails."""
    rng = np.random.default_rng(8)
    base_runs, cur_runs = [], []
    for i in range(30):
        tpot = noisy(rng, 5.0, 20, outlier_rate=0.0)
        base_runs.append(make_run(f"r{i:02d}", tpot=tpot))
        cur_runs.append(make_run(f"r{i:02d}", tpot=list(rng.permutation(tpot))))  # identical samples
    # 15 % slower with wide, overlapping samples: p about 1e-3, significant alone, not after Holm over 30.
    base_runs[0].samples["tpot_ms"] = list(np.linspace(4.0, 6.0, 20))
    cur_runs[0].samples["tpot_ms"] = list(np.linspace(4.0, 6.0, 20) * 1.15)
    cur_runs[1].samples["tpot_ms"] = [v * 1.5 for v in base_runs[1].samples["tpot_ms"]]
    plain = {"rules": [{"kind": "timing", "metric": "tpot_ms"}]}
    alone = evaluate(in_memory(base_runs), in_memory(cur_runs), parse_rules(plain, "t.yaml"))
    assert {c.run_id for c in alone.checks if c.status == "FAIL"} == {"r00", "r01"}
    holm = evaluate(in_memory(base_runs), in_memory(cur_runs),
                    parse_rules({**plain, "correction": "holm"}, "t.yaml"))
    failed = [c for c in holm.checks if c.status == "FAIL"]
    assert [c.run_id for c in failed] == ["r01"] and "holm-adjusted" in failed[0].message
    marginal = next(c for c in holm.checks if c.run_id == "r00")
    assert marginal.details["p_value"] < 0.01 <= marginal.details["p_adjusted"]


# ---- ratio rules (within the current folder) -----------------------------------------------------

def _ratio_sweep(graph_speedup: float) -> list[RunResult]:
    rng = np.random.default_rng(5)
    runs = []
    for input_len in (128, 512):
        for norm in ((), ("fused_rmsnorm",)):
            eager = noisy(rng, 10.0, 40, outlier_rate=0.0)
            runs.append(make_run(f"off-{input_len}-{len(norm)}", on=norm, tpot=eager, input_len=input_len))
            runs.append(make_run(f"on-{input_len}-{len(norm)}", on=(*norm, "graph_mode"), input_len=input_len,
                                 tpot=[v / graph_speedup for v in eager]))
    return runs


RATIO_YAML = """rules:
  - kind: ratio
    metric: tpot_ms_median
    numerator: {eff.graph_mode: off}
    denominator: {eff.graph_mode: "on"}
    min: 1.5
    match: [batch_size, input_len, output_len, dtype]
"""


def test_ratio_rule_pairs_and_reports_each_pair(tmp_path: Path) -> None:
    rules = load_rules(write_rules(tmp_path, RATIO_YAML))
    rule = rules.rules[0]
    assert isinstance(rule, RatioRule) and rule.numerator == {"eff.graph_mode": "off"}
    pairs = {(n.run_id, d.run_id) for n, d in ratio_pairs(rule, _ratio_sweep(2.0))}
    # Same shape and the same other toggles (fused_rmsnorm) only.
    assert pairs == {(f"off-{i}-{k}", f"on-{i}-{k}") for i in (128, 512) for k in (0, 1)}
    good = evaluate(in_memory([]), in_memory(_ratio_sweep(2.0)), rules)
    checks = [c for c in good.checks if c.kind == "ratio"]
    assert good.exit_code == 0 and [c.status for c in checks] == ["PASS"] * 4
    assert "2.00x >= 1.5" in checks[0].message and "run=off-128-0/on-128-0" in checks[0].line()
    bad = evaluate(in_memory([]), in_memory(_ratio_sweep(1.2)), rules)
    bad_checks = [c for c in bad.checks if c.kind == "ratio"]
    assert bad.exit_code == 1 and len(bad_checks) == 4
    assert all(c.status == "FAIL" and "1.20x < min 1.5" in c.message for c in bad_checks)


def test_ratio_rule_without_pairs_fails(tmp_path: Path) -> None:
    rules = load_rules(write_rules(tmp_path, RATIO_YAML.replace("dtype]", "dtype]\n    where: {input_len: "
                                                                           "{min: 4096}}")))
    report = evaluate(in_memory([]), in_memory(_ratio_sweep(2.0)), rules)
    ratio_checks = [c for c in report.checks if c.kind == "ratio"]
    assert report.exit_code == 1 and len(ratio_checks) == 1 and "no ok run pairs" in ratio_checks[0].message


def test_ci_smoke_gate_file(tmp_path: Path) -> None:
    rules = load_rules(SMOKE_GATE)
    assert [r.kind for r in rules.rules] == ["toggles", "numerics", "op_count", "ratio"]
    rng = np.random.default_rng(2)

    def sweep(name: str, off_ms: float, on_ms: float, cv: float) -> Path:
        runs = [make_run(f"gdr{int(chunk)}", on=("chunk_gdr",) if chunk else (), input_len=256,
                         tpot=noisy(rng, 5.0, 30), ttft=noisy(rng, on_ms if chunk else off_ms, 5, cv, 0.0))
                for chunk in (False, True)]
        return folder(tmp_path, name, runs)

    clear = sweep("clear", 60.0, 20.0, 0.03)
    result = gate("--baseline", str(clear), "--current", str(clear), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 0, result.output
    assert re.search(r"^PASS chunk_gdr prefill speedup run=gdr0/gdr1: \d\.\d\dx >= 1\.5", result.output, re.M)
    # 1.6x with 30 % noise on 5 samples a side: the CI spans 1.5, so the rule cannot decide
    noisy_run = sweep("noisy", 32.0, 20.0, 0.3)
    result = gate("--baseline", str(clear), "--current", str(noisy_run), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 3, result.output
    assert re.search(r"^INCONCLUSIVE chunk_gdr prefill speedup .*CI spans the bound 1.5", result.output, re.M)
    # no speed-up at all, measured tightly: a decided failure
    lost = sweep("lost", 20.0, 20.0, 0.03)
    result = gate("--baseline", str(clear), "--current", str(lost), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 1, result.output
    assert re.search(r"^FAIL chunk_gdr prefill speedup .*< min 1.5", result.output, re.M)


# ---- 4. input errors: exit 2, one line -----------------------------------------------------------

def test_missing_folder_exit_2(tmp_path: Path) -> None:
    result = gate("--baseline", str(tmp_path / "nope"), "--current", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "nope" in result.output
    with pytest.raises(UserError, match=r"^--baseline .*nope: no such folder$"):
        run_gate(tmp_path / "nope", tmp_path, None, None)


def test_folder_without_results_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    good = folder(tmp_path, "good", [make_run("r1")])
    result = gate("--baseline", str(empty), "--current", str(good))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: --baseline {empty}: no results.jsonl "
                                                  "(not a perfbench result or baseline folder)"]
    (empty / "results.jsonl").write_text('{"status": "ok"}\n')
    broken = gate("--baseline", str(empty), "--current", str(good))
    assert broken.exit_code == 2 and len(broken.output.strip().splitlines()) == 1
    assert "unreadable results.jsonl" in broken.output


@pytest.mark.parametrize("text,expected", [
    ("rules: [{kind: timing, metric: ttf_ms}]",
     "error: gate.yaml: rules[0].metric: unknown metric 'ttf_ms'; allowed: ttft_ms, tpot_ms, "),
    ("rules:\n  - {kind: toggles}\n  - {kind: timing, metric: tpot_ms, threshold: ten}",
     "error: gate.yaml: rules[1].threshold: expected a number, got 'ten'"),
    ("rules: [{kind: timing, threshold: 0.1}]",
     "error: gate.yaml: rules[0]: missing key 'metric' (kind timing)"),
    ("rules: [{kind: ratio, metric: tpot_ms, numerator: {eff.graph_mode: off}, denominator: {}}]",
     "error: gate.yaml: rules[0]: missing key 'min' (or 'max') (kind ratio)"),
    ("rules: [{kind: timing, metric: tpot_ms, treshold: 0.1}]",
     "error: gate.yaml: rules[0]: unknown key 'treshold' for kind timing; allowed: "),
    ("rules: [{kind: speed}]",
     "error: gate.yaml: rules[0].kind: unknown kind 'speed'; allowed: timing, speedup, ratio"),
    ("rules: [{kind: toggles, where: {batch: 1}}]",
     "error: gate.yaml: rules[0].where: unknown run field 'batch'"),
    ("rules: [{kind: toggles, where: {eff.graph_mode: maybe}}]",
     "error: gate.yaml: rules[0].where.eff.graph_mode: expected one of on, off, inactive, got 'maybe'"),
    ("rules: [{kind: timing, metric: tpot_ms, alpha: 2}]",
     "error: gate.yaml: rules[0].alpha: expected a number in (0, 1), got 2"),
    ("rules: []", "error: gate.yaml: rules: expected a non-empty list"),
    ("rules: [{kind: toggles}]\ncorrection: bonferroni",
     "error: gate.yaml: correction: unknown correction 'bonferroni'; allowed: none, holm"),
    ("- kind: toggles", "error: gate.yaml: expected a mapping with a `rules` list"),
    ("rules: [{kind: toggles}\n", "error: gate.yaml: invalid YAML at line "),
    ("rules:\n  - kind: timing\n    metric: tpot_ms\n    metric: ttft_ms\n",
     "error: gate.yaml: rules[0].metric: duplicate key (lines 3 and 4); keep one"),
], ids=["unknown-metric", "wrong-type", "missing-key", "ratio-bound", "unknown-key", "unknown-kind",
        "unknown-field", "bad-state", "alpha-range", "empty", "correction", "not-mapping", "syntax", "duplicate"])
def test_malformed_rules_exit_2(tmp_path: Path, text: str, expected: str) -> None:
    run = folder(tmp_path, "r", [make_run("r1")])
    result = gate("--baseline", str(run), "--current", str(run), "--rules", str(write_rules(tmp_path, text)))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_summary_must_be_markdown_path(tmp_path: Path) -> None:
    run = folder(tmp_path, "r", [make_run("r1")])
    result = gate("--baseline", str(run), "--current", str(run), "--summary", str(tmp_path / "gate.json"))
    assert result.exit_code == 2 and "give the markdown path" in result.output


# ---- 5. coverage: missing runs, other environments, statuses -------------------------------------

def test_missing_runs_and_environment_reported_not_compared(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    tpot, ttft = noisy(rng, 5.0, 40), noisy(rng, 40.0, 5)
    slow = [v * 2 for v in tpot]
    base = [make_run("same", tpot=tpot, ttft=ttft), make_run("dtype", tpot=tpot, ttft=ttft),
            make_run("device", tpot=tpot, ttft=ttft), make_run("gone", tpot=tpot, ttft=ttft),
            make_run("broke", tpot=tpot, ttft=ttft), make_run("was-broken", status="error")]
    cur = [make_run("same", tpot=tpot, ttft=ttft), make_run("dtype", tpot=slow, ttft=ttft, dtype="bfloat16"),
           make_run("device", tpot=slow, ttft=ttft, device="npu"), make_run("fresh", tpot=tpot, ttft=ttft),
           make_run("broke", status="timeout"), make_run("was-broken", tpot=tpot, ttft=ttft)]
    summary = tmp_path / "gate.md"
    base_dir, cur_dir = folder(tmp_path, "b", base), folder(tmp_path, "c", cur)
    result = gate("--baseline", str(base_dir), "--current", str(cur_dir), "--summary", str(summary))
    out = result.output
    # an ok baseline run the current folder lacks fails (a truncated sweep must not pass)
    assert "FAIL missing run=gone: in the baseline, missing from current" in out
    assert "SKIP new run=fresh: in current, not in the baseline" in out
    assert "SKIP environment run=dtype: different environment (dtype float32 -> bfloat16): not compared" \
        in out
    assert "SKIP environment run=device: different environment (device cpu -> npu): not compared" in out
    assert "SKIP status run=was-broken: baseline status error, current ok: not compared" in out
    assert "FAIL status run=broke: ok in the baseline, now timeout: RuntimeError: boom" in out
    # The doubled TPOT of the mismatched runs is never compared.
    assert not re.search(r"tpot_ms run=(dtype|device)", out)
    assert re.search(r"^PASS tpot_ms run=same", out, re.M)
    assert result.exit_code == 1  # because of `broke` and `gone`
    text = summary.read_text()
    assert "### Not compared" in text and "different environment" in text and "missing from current" in text


def test_nothing_comparable_fails() -> None:
    base = [make_run("r1", tpot=[5.0] * 10, dtype="float32")]
    cur = [make_run("r1", tpot=[5.0] * 10, dtype="bfloat16")]
    report = evaluate(in_memory(base), in_memory(cur), default_rules())
    assert report.exit_code == 1
    assert any(c.name == "comparable" and c.status == "FAIL" for c in report.checks)


def test_torch_version_difference_not_compared() -> None:
    base, cur = make_run("r1", tpot=[5.0] * 10), make_run("r1", tpot=[5.0] * 10)
    cur.env = {"torch": "2.14.0", "date": "tomorrow"}
    report = evaluate(in_memory([base]), in_memory([cur]), default_rules())
    assert [c.line() for c in report.checks if c.status == "SKIP"] == [
        "SKIP environment run=r1: different environment (torch 2.13.0 -> 2.14.0): not compared"]


# ---- baseline save -------------------------------------------------------------------------------

def test_baseline_save_and_gate_against_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    runs = [make_run(f"r{i}", tpot=noisy(rng, 5.0, 40), ttft=noisy(rng, 40.0, 5)) for i in (1, 2)]
    for i, run in enumerate(runs):
        run.env.update({"git_sha": "abc1234", "git_dirty": False, "date": f"2025-01-0{i + 1}T00:00:00+00:00"})
    source = folder(tmp_path, "run", runs)
    (source / "scenario.json").write_text(json.dumps({"name": "smoke"}))
    dest = tmp_path / "baselines" / "main"
    result = CliRunner().invoke(main, ["baseline", "save", str(source), str(dest)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in dest.iterdir()) == ["baseline.json", "results.csv", "results.jsonl",
                                                     "scenario.json"]
    meta = json.loads((dest / "baseline.json").read_text())
    assert meta["runs"] == 2 and meta["statuses"] == {"ok": 2} and meta["scenario"] == "smoke"
    # One environment: the run dates differ, nothing else.
    assert meta["environments"] == [{"env": {"torch": "2.13.0", "git_sha": "abc1234", "git_dirty": False},
                                     "run_ids": ["r1", "r2"]}]
    assert (meta["git_sha"], meta["git_sha_source"], meta["git_dirty"]) == ("abc1234", "runs", False)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*", meta["created_at"])
    assert load_folder(dest, "baseline").provenance == meta
    summary = tmp_path / "gate.md"
    assert gate("--baseline", str(dest), "--current", str(source), "--summary", str(summary)).exit_code == 0
    assert "saved " in summary.read_text()


def test_baseline_save_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["baseline", "save", str(empty), str(tmp_path / "dest")])
    assert result.exit_code == 2 and "no results.jsonl" in result.output
    source = folder(tmp_path, "run", [make_run("r1")])
    with pytest.raises(UserError, match="is FOLDER itself"):
        save_baseline(source, source)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        save_baseline(source, tmp_path / "file")


def test_a_run_judged_unstable_makes_timing_inconclusive() -> None:
    rng = np.random.default_rng(11)
    base = make_run("r", tpot=noisy(rng, 5.0, 20, outlier_rate=0.0), ttft=noisy(rng, 40.0, 20, outlier_rate=0.0))
    cur = make_run("r", tpot=[v * 1.5 for v in noisy(rng, 5.0, 20, outlier_rate=0.0)], ttft=base.samples["ttft_ms"])
    assert evaluate(in_memory([base]), in_memory([cur]), default_rules()).exit_code == 1
    cur.stability = {"stable": False, "reason": "load average of other work 3.00 above the 1 spare CPUs"}
    report = evaluate(in_memory([base]), in_memory([cur]), default_rules())
    line = next(c.line() for c in report.checks if c.name == "tpot_ms")
    assert report.exit_code == 3 and line.startswith("INCONCLUSIVE") and "unstable (load average" in line


def test_a_host_that_ran_at_another_speed_makes_timing_inconclusive() -> None:
    # a 1.5x TPOT slowdown on tight samples fails the gate while the probe read the same on both sides; with
    # the probe 0.42 vs 0.32 ms (two speed levels of a shared VM, 31% apart) the same numbers decide nothing,
    # in the gate and in `compare`
    rng = np.random.default_rng(12)
    base = make_run("r", tpot=noisy(rng, 5.0, 20, outlier_rate=0.0), ttft=noisy(rng, 40.0, 20, outlier_rate=0.0))
    cur = make_run("r", tpot=[v * 1.5 for v in noisy(rng, 5.0, 20, outlier_rate=0.0)], ttft=base.samples["ttft_ms"])
    base.samples["host_probe_ms"] = [0.32, 0.33, 0.32, 0.31, 0.32]
    cur.samples["host_probe_ms"] = [0.33, 0.32, 0.32, 0.34, 0.32]
    assert evaluate(in_memory([base]), in_memory([cur]), default_rules()).exit_code == 1
    cur.samples["host_probe_ms"] = [0.42, 0.41, 0.42, 0.43, 0.42]
    report = evaluate(in_memory([base]), in_memory([cur]), default_rules())
    line = next(c.line() for c in report.checks if c.name == "tpot_ms")
    assert report.exit_code == 3 and line.startswith("INCONCLUSIVE") and "host ran at another speed" in line
    for run in (base, cur):
        run.summary = {"tpot_ms_median": float(np.median(run.samples["tpot_ms"]))}
    (match,), _, _ = match_runs([base], [cur])
    tpot = next(c for c in match.changes() if c.metric == "tpot_ms_median")
    assert tpot.ratio > 1.4 and not tpot.significant and "0.42 ms" in tpot.undecided


def test_one_round_slowdown_inside_the_run_to_run_band_is_inconclusive() -> None:
    # 7 % slower on tight samples: beyond a 5 % threshold and significant, but inside the 8 % TPOT band
    base = make_run("r", tpot=[5.0 + 0.01 * i for i in range(20)], ttft=[40.0 + 0.1 * i for i in range(20)])
    cur = make_run("r", tpot=[(5.0 + 0.01 * i) * 1.07 for i in range(20)], ttft=base.samples["ttft_ms"])
    rules = parse_rules({"rules": [{"kind": "timing", "metric": "tpot_ms", "threshold": 0.05}]}, "t.yaml")
    line = next(c.line() for c in evaluate(in_memory([base]), in_memory([cur]), rules).checks
                if c.kind == "timing")
    assert line.startswith("INCONCLUSIVE") and "inside the run-to-run band" in line
