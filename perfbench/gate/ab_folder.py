"""The gate on a `perfbench ab` folder: timing rules decided from its pairs, toggles compared arm against arm.

Both arms ran in one job, interleaved (perfbench/run/ab.py), so the folder's own verdicts are the evidence: a
timing rule's metric maps to the pair verdict of its latency (TTFT for ttft_ms*, prefill_tok_s; TPOT for
tpot_ms*, decode_tok_s): a slower verdict that survives Holm's correction across the job fails, faster and same
pass, and the rest (inconclusive, or slower but not after Holm) is inconclusive. The verdict's band is the job's
`--band`; the rule's own threshold is reported beside it. A job that stopped on a failed arm or an interrupt is
an input error (exit 2), never a regression. A `toggles` rule compares the base
arm's plan with the head arm's per run. Rules on what an ab job does not measure (op counts, numerics, traces,
compile time, memory) are reported as not compared. A FAIL on a job run with `--ops` names the op groups and
branches that moved in that run (perfbench/analysis/op_ab.py; cost shifts inside a branch are not named).
"""

from __future__ import annotations

from pathlib import Path

from perfbench.analysis import paired
from perfbench.errors import UserError
from perfbench.gate.checks import FAIL, INCONCLUSIVE, PASS, SKIP, CheckResult, check_toggles, selects
from perfbench.gate.rules import GateRules, TimingRule, TogglesRule
from perfbench.results import ResultFolder, RunResult, load_folder
from perfbench.results.ab_record import ABRecord, ABVerdict, read_ab_record

LATENCY_OF = {"ttft_ms": "ttft_ms", "ttft_ms_median": "ttft_ms", "prefill_tok_s": "ttft_ms",
              "tpot_ms": "tpot_ms", "tpot_ms_median": "tpot_ms", "decode_tok_s": "tpot_ms"}
STATUS_OF = {paired.SLOWER: FAIL, paired.FASTER: PASS, paired.SAME: PASS, paired.INCONCLUSIVE: INCONCLUSIVE}


def arms(folder: ResultFolder) -> dict[str, tuple[RunResult, RunResult]]:
    """run_id -> (base arm's result, head arm's result)."""
    out: dict[str, tuple[RunResult, RunResult]] = {}
    for rid, r in folder.runs.items():
        run, _, arm = rid.rpartition("@")
        if arm == "base" and f"{run}@head" in folder.runs:
            out[run] = (r, folder.runs[f"{run}@head"])
    return out


def _status(verdict: ABVerdict) -> str:
    if verdict.verdict == paired.SLOWER:
        return FAIL if verdict.regression else INCONCLUSIVE
    return STATUS_OF[verdict.verdict]


def _timing(rule: TimingRule, record: ABRecord, pairs: dict[str, tuple[RunResult, RunResult]]
            ) -> list[CheckResult]:
    name = rule.name or rule.metric
    latency = LATENCY_OF.get(rule.metric)
    if latency is None:
        return [CheckResult(SKIP, "timing", name, None, f"{rule.metric}: an ab job times TTFT and TPOT only")]
    unit = "epochs" if record.mode == "one process" else "worker generations"
    out = []
    for rid, (_, head) in sorted(pairs.items()):
        if not selects(head, rule.where):
            continue
        verdict = record.verdicts.get(rid, {}).get(latency)
        if verdict is None:
            out.append(CheckResult(SKIP, "timing", name, rid, f"no {latency} pairs in the ab job"))
            continue
        text = (f"head/base {latency} {verdict.ratio:.3f}x, {verdict.level:.1%} CI [{verdict.ci_low:.3f}, "
                f"{verdict.ci_high:.3f}] over {verdict.pairs} pairs in {verdict.clusters} {unit} ({record.mode}, "
                f"interleaved): {verdict.verdict} against +-{verdict.band:.0%}")
        if verdict.verdict == paired.SLOWER and not verdict.regression:
            text += " (not after Holm's correction across the job: inconclusive)"
        if verdict.band != rule.threshold:
            text += f" (the rule's threshold is {rule.threshold:.0%}; the job decided with --band)"
        if _status(verdict) == FAIL and record.ops is not None and (behind := record.ops.moved_text(rid)):
            text += f"; ops that moved (ab --ops): {behind}"
        out.append(CheckResult(_status(verdict), "timing", name, rid, text,
                               {"metric": rule.metric, **verdict.model_dump(mode="json")}))
    return out


def evaluate_ab(path: Path, rules: GateRules) -> tuple[ResultFolder, list[CheckResult]]:
    """The ab folder and its checks."""
    name = f"--current {path}"
    record = read_ab_record(path, name)
    if record.status != "ok":
        raise UserError(f"{name}: the ab job did not finish ({record.status}: {record.stopped}); "
                        "nothing to gate")
    folder = load_folder(path, name)
    pairs = arms(folder)
    if not pairs:
        raise UserError(f"{name}: results.jsonl holds no base/head pair of runs")
    checks: list[CheckResult] = []
    for rule in rules.rules:
        if isinstance(rule, TimingRule):
            checks += _timing(rule, record, pairs)
        elif isinstance(rule, TogglesRule):
            checks += [check_toggles(rule, base, head) for base, head in pairs.values() if selects(head, rule.where)]
        else:
            checks.append(CheckResult(SKIP, rule.kind, rule.name or rule.kind, None,
                                      f"an ab job does not measure what a {rule.kind} rule reads"))
    if not any(c.kind == "timing" and c.status != SKIP for c in checks):
        checks.append(CheckResult(FAIL, "coverage", "comparable", None,
                                  "no timing rule compared any run of the ab job; a gate that compares nothing "
                                  "cannot pass"))
    return folder, checks
