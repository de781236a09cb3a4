"""`perfbench ab BASE [HEAD]`: did a change make it slower? Both arms in one process, interleaved, judged on pairs.

Each arm is a git ref checked out as a worktree, or the working tree (perfbench/run/arms.py); every run of the
scenario is built from the same seeded specs in each arm.

One process (the default): one worker holds both arms, each arm's `model/` imported as its own set of modules
(perfbench/measure/ab_worker.py, arm_modules.py), so what a process does to timing (thread placement, library
layout, the host's speed state) hits both arms alike. A pair is one timed iteration of a run in each arm, back to
back, in a random order. An epoch is `pairs_per_epoch` pairs of every run after both arms' weights were moved to
new storage (perfbench/measure/epochs.py): the epoch is the cluster of the statistics. Two processes (the fallback,
with the reason printed: the arms leave process-global state differently, or both do not fit in memory, or
`--processes two`): one live worker per arm, both replaced after each generation of `pairs_per_process` pairs;
the generation is the cluster.

The decision (perfbench/analysis/paired.py): per (run, metric), t intervals over clusters, judged at planned
looks (Haybittle-Peto: 99.9% intervals at the interim looks, after 1/3 and 2/3 of `--max-time`, the nominal 95%
at the last), so the job may stop early and its verdicts stay valid; Holm's correction across (run, metric)
for the exit code. Verdicts: slower / faster (beyond the `margin`) / same (inside the `band`) / inconclusive,
with the clusters and seconds it would still need. Exit codes: 0 no regression, 1 regression, 2 input error
(an arm failed to build or run: recorded as failed), 3 inconclusive, 130 / 143 interrupted (what was measured is
saved, the worktrees and workers removed).

`--max-time` bounds the job's wall time: the build counts, and an epoch that does not answer by the deadline is
stopped with the worker.

The folder: results.jsonl (one result per run and arm, run ids "<run_id>@base" / "@head"), ab.json (the typed
`ABRecord`: the arms, mode, settings, every pair, the looks and the verdicts), runs/ (worker logs, compile
caches) and report.html. `perfbench gate --current DIR` reads it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfbench.analysis import paired
from perfbench.analysis.sequential import DecisionRule, Judgement, SequentialJob, judge
from perfbench.errors import UserError
from perfbench.lifecycle import exit_code_of, interrupt_line, sigterm_raises
from perfbench.measure.code_origin import CODE_ROOT, module_command
from perfbench.measure.compile_cache import shared_compile_cache
from perfbench.measure.environment import emulation_label
from perfbench.measure.epoch_engine import round_order
from perfbench.results import Failure, RunPlan, RunResult, RunSpec, atomic_write_json, write_results
from perfbench.results.ab_record import AB_FILE, ABArm, ABLook, ABPair, ABRecord, ABVerdict
from perfbench.results.env_allowlist import masked_values, torch_copied_credentials
from perfbench.results.op_ab_record import OpPair
from perfbench.results.verdicts import INCONCLUSIVE, words_line
from perfbench.run.ab_ops import TWO_PROCESSES_NOTE, op_epoch, ops_record, ops_table
from perfbench.run.arms import Arm, ArmSet, check_out, repository_of
from perfbench.run.folder_owner import owned
from perfbench.run.worker_process import WorkerProcess
from perfbench.terminal_text import echo

if TYPE_CHECKING:
    from perfbench.config.sweep import SweepPlan
    from perfbench.run.runner import ReportHook

METRICS = ("ttft_ms", "tpot_ms")
EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE = 0, 1, 2, 3
ONE_PROCESS, TWO_PROCESSES = "one process", "two processes"
STARTUP_ALLOWANCE_S = 600.0  # with budget_after_startup: the longest start-up waited for before the budget starts
# both arms' models must fit in this share of the memory free at the start (the sweep's rule for block groups)
MEMORY_SHARE = 0.5


class ArmFailed(UserError):
    """An arm's worker failed to build or to run an iteration."""

    def __init__(self, message: str, arm: str | None, stage: str) -> None:
        super().__init__(message)
        self.arm = arm
        self.stage = stage


@dataclass(frozen=True)
class ABSettings:
    max_time_s: float = 110.0
    pairs_per_epoch: int = 6  # pairs of every run between two re-allocations (one process)
    pairs_per_process: int = 8  # pairs of every run per worker generation (two processes)
    band: float = paired.DEFAULT_BAND  # "same": the whole interval within 1 +- band
    margin: float = paired.DEFAULT_MARGIN  # "slower" / "faster": the whole interval beyond 1 +- margin
    looks: int = 3  # planned looks: after each 1 / looks of --max-time
    processes: str = "auto"  # auto | one | two
    seed: int = 0
    # max_time_s counts from the end of the one-process start-up, not from the job's start: a confirmation
    # (gate --confirm) wants its pairs whatever the start-up costs (two worktrees, both arms built and compiled
    # cold: 90 s on a slow 2-core host, which left a 110 s job one epoch)
    budget_after_startup: bool = False
    ops: bool = False  # --ops: an op epoch after each timed epoch (perfbench/run/ab_ops.py)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_time_s) and self.max_time_s > 0):
            raise UserError(f"--max-time: must be a positive number of seconds, got {self.max_time_s}")
        if self.pairs_per_epoch < 1:
            raise UserError(f"--pairs-per-epoch: must be at least 1, got {self.pairs_per_epoch}")
        if self.pairs_per_process < 1:
            raise UserError(f"--pairs-per-process: must be at least 1, got {self.pairs_per_process}")
        if not 0 < self.band < 1:
            raise UserError(f"--band: must lie in (0, 1), got {self.band}")
        if not 0 <= self.margin < self.band:
            raise UserError(f"--margin: must lie in [0, band), got {self.margin} (band {self.band})")
        if self.looks < 1:
            raise UserError(f"--looks: must be at least 1, got {self.looks}")
        if self.processes not in ("auto", "one", "two"):
            raise UserError(f"--processes: auto, one or two, got {self.processes!r}")


def _say(text: str) -> None:
    echo(text, err=True)


def start_worker(arms: list[Arm], specs_path: Path, out: Path, log_path: Path, overlay: Path | None,
                 seed: int = 0) -> WorkerProcess:
    """A worker process of the job: both arms (measure/ab_worker.py serve_one_process), or one (`overlay`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for name in torch_copied_credentials(env):  # torch would write them into its compile cache
        del env[name]
    if overlay is not None:  # one arm: its model/ first on sys.path
        env["PYTHONPATH"] = os.pathsep.join([str(overlay), *filter(None, [env.get("PYTHONPATH")])])
    # one inductor cache for every ab job of this user and host kind: entries are keyed by the graph, so both arms
    # and every commit share it safely, and a new job starts warm
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(shared_compile_cache()))
    env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")

    # the worker imports this command's perfbench wherever it starts (perfbench/measure/code_origin.py): one arm's
    # worker from its overlay (its model/ and this perfbench/), both arms' from this code root (each arm's model/ is
    # loaded from its checkout by path, perfbench/measure/arm_modules.py)
    root = overlay if overlay is not None else CODE_ROOT

    def command(reply_fd: int) -> list[str]:
        return module_command(sys.executable, "perfbench.measure.ab_worker", "--reply-fd", str(reply_fd),
                              f"--specs={specs_path.absolute()}", f"--out={out.absolute()}",
                              *(f"--arm={arm.name}={arm.checkout}" for arm in arms), f"--seed={int(seed)}",
                              root=root)

    return WorkerProcess(command, env, log_path, cwd=overlay)


def answer_of(worker: WorkerProcess, deadline: float) -> dict[str, Any]:
    """The worker's next answer; ArmFailed on an error or a lost worker, TimeoutError at the deadline."""
    try:
        answer = worker.answer(deadline)
    except TimeoutError:
        raise TimeoutError(f"no answer by the --max-time deadline; see {worker.log_path}") from None
    if answer is None:
        raise ArmFailed(f"the worker ended (exit {worker.proc.poll()}); see {worker.log_path}", None, "benchmark")
    if "error" in answer:
        last = answer["error"].strip().splitlines()[-1]
        arm = answer.get("arm")
        raise ArmFailed(f"{arm or 'the'} arm: {last} (log: {worker.log_path})", arm,
                        answer.get("stage") or "benchmark")
    return answer


def clusters(pairs: list[ABPair], run_id: str, metric: str) -> dict[int, tuple[list[float], list[float]]]:
    """cluster -> aligned (base, head) samples of one run and metric."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for p in pairs:
        b, h = getattr(p.base, metric), getattr(p.head, metric)
        if p.run_id == run_id and b is not None and h is not None:
            xs, ys = out.setdefault(p.cluster, ([], []))
            xs.append(b)
            ys.append(h)
    return out


def epoch_estimates(pairs: list[ABPair], run_ids: list[str]
                    ) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], int]]:
    """(run, metric) -> each cluster's log-ratio estimate head / base, and the pairs behind them."""
    estimates: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], int] = {}
    for rid in run_ids:
        for metric in METRICS:
            logs = [x for x in (paired.log_ratios(b, h) for b, h in clusters(pairs, rid, metric).values()) if x.size]
            if logs:
                estimates[(rid, metric)] = [paired.cluster_estimate(x) for x in logs]
                counts[(rid, metric)] = sum(x.size for x in logs)
    return estimates, counts


def rule_of(settings: ABSettings) -> DecisionRule:
    return DecisionRule(settings.band, settings.margin, settings.looks)


def ab_verdicts(judgement: Judgement[tuple[str, str]], cluster_s: float | None = None
                ) -> dict[str, dict[str, ABVerdict]]:
    """run_id -> metric -> the judgement's ratio as a record, with, for an undecided one, the clusters (and
    seconds, at `cluster_s` each) it would still need."""
    out: dict[str, dict[str, ABVerdict]] = {}
    for (rid, metric), r in judgement.ratios.items():
        more = None
        if r.clusters_needed is not None and cluster_s is not None:
            more = round(max(r.clusters_needed - r.clusters, 0) * cluster_s, 1)
        out.setdefault(rid, {})[metric] = ABVerdict(
            ratio=r.value, ci_low=r.low, ci_high=r.high, pairs=r.pairs, clusters=r.clusters, band=r.band,
            margin=r.margin, level=r.level, method=r.method, verdict=r.verdict, p_slower=r.p_slower,
            regression=judgement.regressions[(rid, metric)], clusters_needed=r.clusters_needed,
            seconds_needed=more)
    return out


def verdicts(pairs: list[ABPair], run_ids: list[str], settings: ABSettings, final: bool = True,
             cluster_s: float | None = None) -> dict[str, dict[str, ABVerdict]]:
    """run_id -> metric -> head / base judged as the job's look would (perfbench/analysis/sequential.py)."""
    estimates, counts = epoch_estimates(pairs, run_ids)
    return ab_verdicts(judge(estimates, counts, rule_of(settings), len(run_ids) * len(METRICS), final), cluster_s)


def decided(found: dict[str, dict[str, ABVerdict]]) -> bool:
    return bool(found) and all(v.verdict != INCONCLUSIVE for per in found.values() for v in per.values())


def exit_code(found: dict[str, dict[str, ABVerdict]]) -> int:
    values = [v for per in found.values() for v in per.values()]
    if any(v.regression for v in values):
        return EXIT_FAIL
    return EXIT_INCONCLUSIVE if (not values or any(v.verdict == INCONCLUSIVE for v in values)) else EXIT_PASS


def _ab_specs(specs: list[RunSpec]) -> list[RunSpec]:
    """The specs as both arms time them: no numerics reference and no profile (not the question here), no
    expected plan (the arms may resolve plans differently: the toggles check reports that), one round."""
    return [s.replace(run_id=s.combination_id, round=1, rounds=1, combination="", profile=False,
                      numerics_check=False, expected_plan={}, timing="ab", block_group="")
            for s in specs if s.round <= 1]


@dataclass
class ABJob:
    arms: ArmSet
    specs: list[RunSpec]
    out: Path
    settings: ABSettings
    memory_refusal: str = ""  # why both arms cannot share one process ("" when they can)
    pairs: list[ABPair] = field(default_factory=list)
    trail: list[ABLook] = field(default_factory=list)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> run_id -> plan
    models: dict[str, str] = field(default_factory=dict)  # arm -> the model package its worker imported
    mode: str = ONE_PROCESS
    mode_reason: str = ""
    stopped: str = ""
    failed: ArmFailed | None = None
    cluster_s: list[float] = field(default_factory=list)
    startup_s: float | None = None
    compile_s: float | None = None  # of the start-up, the seconds the builds spent compiling
    epoch_seeds: list[int] = field(default_factory=list)  # each cluster's order seed: a replay draws the same
    found: dict[str, dict[str, ABVerdict]] = field(default_factory=dict)
    op_pairs: list[OpPair] = field(default_factory=list)  # --ops: every op epoch's pairs

    @property
    def run_ids(self) -> list[str]:
        return [s.run_id for s in self.specs]

    def run(self) -> dict[str, dict[str, ABVerdict]]:
        self.started = self.budget_start = time.monotonic()
        startup_allowance = STARTUP_ALLOWANCE_S if self.settings.budget_after_startup else 0.0
        self.deadline = self.started + self.settings.max_time_s + startup_allowance
        specs_path = self.out / "ab_specs.json"
        atomic_write_json(specs_path, [s.to_dict() for s in self.specs])
        self.mode, self.mode_reason = self._choose_mode()
        if self.mode == ONE_PROCESS:
            self._one_process(specs_path)
        if self.mode == TWO_PROCESSES:
            _say(f"ab: two processes ({self.mode_reason})")
            self._two_processes(specs_path)
        return self.found

    def _choose_mode(self) -> tuple[str, str]:
        if self.settings.processes == "two":
            return TWO_PROCESSES, "--processes two"
        if self.memory_refusal:
            if self.settings.processes == "one":
                raise UserError(f"--processes one: {self.memory_refusal}")
            return TWO_PROCESSES, self.memory_refusal
        return ONE_PROCESS, ""

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _budget_elapsed(self) -> float:
        """Seconds of the --max-time budget used: since the start (or, budget_after_startup, the start-up's end)."""
        return time.monotonic() - self.budget_start

    def _look(self, judgement: Judgement[tuple[str, str]] | None) -> bool:
        """Record a look's judgement (None: not a look); True when the job may stop (every test decided, or the
        last look)."""
        if judgement is None:
            return False
        mean_s = sum(self.cluster_s) / len(self.cluster_s) if self.cluster_s else None
        self.found = ab_verdicts(judgement, mean_s)
        per_run = [sum(p.run_id == rid for p in self.pairs) for rid in self.run_ids]
        clusters_now = len({p.cluster for p in self.pairs})
        self.trail.append(ABLook(look=len(self.trail) + 1, final=judgement.final,
                                 elapsed_s=round(self._elapsed(), 1), pairs=min(per_run), clusters=clusters_now,
                                 level=judgement.level,
                                 verdicts={rid: {m: v.verdict for m, v in per.items()}
                                           for rid, per in self.found.items()}))
        _say(f"ab: look {len(self.trail)}{' (last)' if judgement.final else ''} at {self._elapsed():.0f} s, "
             f"{clusters_now} clusters, {min(per_run)} pairs per run, {judgement.level:.1%} intervals: "
             + "; ".join(f"{rid} {m} {v.ratio:.3f}x {v.verdict}" for rid, per in self.found.items()
                         for m, v in per.items()))
        return judgement.stops

    def _after_cluster(self, job: SequentialJob[tuple[str, str]], elapsed_s: float) -> bool:
        estimates, counts = epoch_estimates(self.pairs, self.run_ids)
        return self._look(job.after_epoch(elapsed_s, max(self.cluster_s[-3:]), estimates, counts))

    def _last_look(self, job: SequentialJob[tuple[str, str]]) -> None:
        estimates, counts = epoch_estimates(self.pairs, self.run_ids)
        self._look(job.last_look(estimates, counts))

    def _sequential(self) -> SequentialJob[tuple[str, str]]:
        return SequentialJob(rule_of(self.settings), self.settings.max_time_s, len(self.run_ids) * len(METRICS))

    def _one_process(self, specs_path: Path) -> None:
        worker = start_worker([self.arms.base, self.arms.head], specs_path, self.out,
                              self.out / "logs" / "worker.log", None, seed=self.settings.seed)
        job = self._sequential()
        try:
            ready = answer_of(worker, self.deadline)
            if "fallback" in ready:
                if self.settings.processes == "one":
                    raise UserError(f"--processes one: {ready['fallback']}")
                self.mode, self.mode_reason = TWO_PROCESSES, ready["fallback"]
                return
            self.plans, self.models = ready["ready"], ready["model"]
            self.startup_s = self._elapsed()
            split = ready.get("startup") or {}
            self.compile_s = split.get("compile_s")
            labels = (("import_s", "imports"), ("build_s", "builds"), ("warmup_s", "warm-up"),
                      ("compile_s", "of it compiling"))
            parts = ", ".join(f"{label} {split[key]:.0f} s" for key, label in labels if key in split)
            _say(f"ab: start-up {self.startup_s:.0f} s" + (f" ({parts}; the rest: worktrees and the worker's start)"
                                                            if parts else ""))
            if self.settings.budget_after_startup:
                self.budget_start = time.monotonic()
                self.deadline = self.budget_start + self.settings.max_time_s
            rng = random.Random(self.settings.seed)
            epoch = 0
            while True:
                began = time.monotonic()
                seed = rng.randrange(2**31)
                worker.send({"epoch": {"index": epoch, "pairs": self.settings.pairs_per_epoch, "seed": seed}})
                while "epoch_done" not in (answer := answer_of(worker, self.deadline)):
                    self.pairs.append(ABPair(cluster=epoch, **answer["pair"]))
                if answer["epoch_done"]["recompiles"]:
                    _say(f"ab: epoch {epoch} compiled {answer['epoch_done']['recompiles']} graph(s) while timed")
                self.epoch_seeds.append(seed)
                if self.settings.ops:
                    self.op_pairs += op_epoch(worker.send, lambda: answer_of(worker, self.deadline), epoch, seed)
                self.cluster_s.append(time.monotonic() - began)
                if epoch == 0:
                    _say(f"ab: one process; first epoch done at {self._elapsed():.0f} s ({self.cluster_s[0]:.1f} s, "
                         f"{self.settings.pairs_per_epoch} pairs per run); looks after each "
                         f"{self.settings.max_time_s / self.settings.looks:.0f} s")
                epoch += 1
                if self._after_cluster(job, self._budget_elapsed()):
                    self.stopped = "decided" if decided(self.found) else f"time cap ({self.settings.max_time_s:g} s)"
                    return
        except TimeoutError as err:
            self.stopped = f"time cap ({self.settings.max_time_s:g} s): {err}"
            self._last_look(job)
        finally:
            worker.close(grace_s=10)

    def _two_processes(self, specs_path: Path) -> None:
        job = self._sequential()
        rng = random.Random(self.settings.seed)
        generation = 0
        while True:
            began = time.monotonic()
            workers = {arm.name: start_worker([arm], specs_path, self.out / "runs" / arm.name,
                                              self.out / "logs" / f"{arm.name}-g{generation}.log", arm.overlay)
                       for arm in (self.arms.base, self.arms.head)}
            try:
                for name, worker in workers.items():  # both build at once; nothing is timed yet
                    answer = answer_of(worker, self.deadline)
                    self.plans[name], self.models[name] = answer["ready"][name], answer["model"][name]
                if self.startup_s is None:
                    self.startup_s = time.monotonic() - began
                for rid in self.run_ids:  # untimed: the first iterations after a build run cold
                    for worker in workers.values():
                        worker.send({"iterate": rid})
                        answer_of(worker, self.deadline)
                # the engine's order (perfbench/measure/epoch_engine.py), each run a group of its two arms
                seed = rng.randrange(2**31)
                order = random.Random(seed)
                for index in range(self.settings.pairs_per_process):
                    timed: dict[str, dict[str, Any]] = {}
                    for _, (rid, name) in round_order(order, [[(rid, "base"), (rid, "head")]
                                                              for rid in self.run_ids]):
                        workers[name].send({"iterate": rid})
                        timed[name] = answer_of(workers[name], self.deadline)
                        if len(timed) == 2:
                            self.pairs.append(ABPair(run_id=rid, cluster=generation, index=index,
                                                     base_first=name == "head", base=timed["base"],
                                                     head=timed["head"]))
                            timed = {}
                self.epoch_seeds.append(seed)
            except TimeoutError as err:
                self.stopped = f"time cap ({self.settings.max_time_s:g} s): {err}"
                self._last_look(job)
                return
            finally:
                for worker in workers.values():
                    worker.close(grace_s=10)
            self.cluster_s.append(time.monotonic() - began)
            generation += 1
            if self._after_cluster(job, self._elapsed()):
                self.stopped = "decided" if decided(self.found) else f"time cap ({self.settings.max_time_s:g} s)"
                return

    def results(self) -> list[RunResult]:
        """One result per run and arm: the pooled samples of its pairs; a failed arm's runs are errors."""
        out = []
        for spec in self.specs:
            for arm in ("base", "head"):
                mine = [getattr(p, arm) for p in self.pairs if p.run_id == spec.run_id]
                samples = {key: [float(v) for m in mine if (v := getattr(m, src)) is not None]
                           for key, src in (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"),
                                            ("host_probe_ms", "probe_ms"))}
                rid = f"{spec.run_id}@{arm}"
                plan = RunPlan.from_dict(self.plans.get(arm, {}).get(spec.run_id, {}))
                arm_info = getattr(self.arms, arm)
                env = {"ab_arm": arm, "ab_ref": arm_info.ref, "git_sha": arm_info.sha or "working tree",
                       "model_package": self.models.get(arm, ""), "emulation": emulation_label()}
                failed = self.failed is not None and self.failed.arm in (arm, None)
                status, failure, error = "ok", Failure(), None
                if failed:
                    assert self.failed is not None
                    kind = "startup_fail" if self.failed.stage == "startup" else "benchmark_fail"
                    status, failure, error = "error", Failure(kind=kind, reason=str(self.failed)), str(self.failed)
                out.append(RunResult(run_id=rid, status=status, spec=spec.replace(combination=rid), plan=plan,
                                     samples=samples, env=env, stop_reason=self.stopped, failure=failure,
                                     error=error))
        return out


def memory_refusal(sweep: SweepPlan) -> str:
    """Why both arms' models cannot share one process here ("" when they fit): every run of both arms is alive
    at once, so their estimates (perfbench/roofline/memory.py) add up."""
    from perfbench.roofline.memory import available_bytes, estimate_run, size

    config = sweep.scenario.model_config_here()
    free = available_bytes()
    if config is None or free is None:
        return ""
    need = 2 * sum(estimate_run(config, sweep.scenario.parallel_config, p).total for p in sweep.runs)
    if need > MEMORY_SHARE * free:
        return f"both arms need about {size(need)}, over {MEMORY_SHARE:.0%} of the {size(free)} available"
    return ""


def ab_record(job: ABJob, scenario: str, status: str) -> ABRecord:
    return ABRecord(
        scenario=scenario, emulation=emulation_label(),
        base=ABArm(ref=job.arms.base.ref, sha=job.arms.base.sha, model=job.models.get("base")),
        head=ABArm(ref=job.arms.head.ref, sha=job.arms.head.sha, model=job.models.get("head"),
                   dirty=job.arms.head.dirty),
        mode=job.mode, mode_reason=job.mode_reason, settings=dataclasses.asdict(job.settings), status=status,
        stopped=job.stopped, startup_s=job.startup_s, compile_s=job.compile_s, epoch_seeds=job.epoch_seeds,
        cluster_seconds=[round(s, 2) for s in job.cluster_s],
        exit_code=EXIT_INPUT if status == "error" else exit_code(job.found),
        verdicts=job.found, trail=job.trail, pairs=job.pairs,
        ops=ops_record(job.op_pairs, rule_of(job.settings), "" if job.mode == ONE_PROCESS else TWO_PROCESSES_NOTE)
        if job.settings.ops else None)


def verdict_lines(record: ABRecord) -> list[str]:
    lines = []
    for rid, per in record.verdicts.items():
        for metric, v in per.items():
            unit = "epochs" if record.mode == ONE_PROCESS else "worker generations"
            needs = ""
            if v.verdict == INCONCLUSIVE and v.clusters_needed is not None:
                needs = f"; needs about {v.clusters_needed} {unit}"
                needs += f" (~{v.seconds_needed:.0f} s more)" if v.seconds_needed is not None else ""
            lines.append(f"{rid} {metric}: head/base {v.ratio:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}] "
                         f"{v.verdict}{' (regression after Holm)' if v.regression else ''} ({v.pairs} pairs, "
                         f"{v.clusters} {unit}, {v.level:.1%} t interval; same within +-{v.band:.0%}, a change "
                         f"beyond +-{v.margin:.0%}{needs})")
    return lines


def _save(job: ABJob, scenario: dict[str, Any], out: Path, status: str) -> ABRecord:
    """Everything measured so far: results.jsonl, scenario.json, ab.json."""
    record = ab_record(job, str(scenario.get("name", "")), status)
    write_results(out, job.results())
    atomic_write_json(out / "scenario.json", masked_values(scenario))
    atomic_write_json(out / AB_FILE, record.model_dump(mode="json"))
    return record


@dataclass(frozen=True)
class ABOutcome:
    """What an ab job hands its caller in memory: the record it saved, its folder and its exit code."""

    record: ABRecord
    folder: Path
    exit_code: int


def run_ab(base: str, head: str | None, scenario: str | None, overrides: list[str], out_dir: str | None,
           settings: ABSettings, report: ReportHook | None = None) -> int:
    """`ab_job`'s exit code (the commands that only need it)."""
    return ab_job(base, head, scenario, overrides, out_dir, settings, report).exit_code


def ab_job(base: str, head: str | None, scenario: str | None, overrides: list[str], out_dir: str | None,
           settings: ABSettings, report: ReportHook | None = None, say_noise: bool = True,
           cap_from_noise: bool = False) -> ABOutcome:
    """Run one ab job; `cap_from_noise`: take the cap this host's noise file recommends (perfbench calibrate)."""
    from model.backend import detect_capabilities
    from perfbench.config.scenario import load_scenario
    from perfbench.config.sweep import plan_sweep
    from perfbench.run.detectable import detect_line
    from perfbench.run.runner import default_out

    sc = load_scenario(scenario or "ci_smoke", overrides)
    if sc.parallel_config.world_size > 1:
        raise UserError(f"{sc.name}: ab times single-process runs; world_size is {sc.parallel_config.world_size}")
    try:
        caps = detect_capabilities(sc.perfbench.device)
    except RuntimeError as err:
        raise UserError(f"{sc.name}: perfbench.device: {err}") from None
    sweep = plan_sweep(sc, caps, executor="ab")
    specs = _ab_specs(sweep.specs())
    out = Path(out_dir) if out_dir else default_out(f"ab-{sc.name}")
    with owned(out):
        if (out / AB_FILE).exists() or (out / "results.jsonl").exists():
            raise UserError(f"--out {out}: already holds results; choose another folder")
        repo = repository_of(Path.cwd())
        arms = check_out(base, head, repo)
        if say_noise:  # once the arms are there: a bad ref is the one line it gets
            line, cap = detect_line(sc.name)
            if cap_from_noise and cap is not None:
                settings = dataclasses.replace(settings, max_time_s=cap)
                line += f"; cap {cap:g} s (decides 90% of A/A jobs here)"
            _say(f"ab: {line}")
        _say(f"ab {sc.name}: {len(specs)} run{'s' * (len(specs) != 1)}; {arms.base.describe()}; "
             f"{arms.head.describe()}; results in {out}")
        job = ABJob(arms, specs, out, settings, memory_refusal(sweep))
        try:
            with sigterm_raises():
                job.run()
        except KeyboardInterrupt as err:  # SIGINT, or SIGTERM (perfbench/lifecycle.py)
            job.stopped = f"stopped early: {interrupt_line(err, 'interrupted')}"
            record = _save(job, sc.as_dict(), out, "interrupted")
            _say(f"{interrupt_line(err, 'perfbench ab')}; {len(job.pairs)} pairs saved in {out}")
            return ABOutcome(record, out, exit_code_of(err))
        except ArmFailed as err:
            job.failed, job.stopped = err, f"stopped early: {err}"
            _save(job, sc.as_dict(), out, "error")
            raise
        finally:
            arms.close()
        record = _save(job, sc.as_dict(), out, "ok")
    if report is not None:
        report(out, None)  # the report reads the job's folder: its verdicts are in ab.json
    echo(words_line(settings.band, settings.margin))
    for line in verdict_lines(record):
        echo(line)
    for line in ops_table(record.ops) if record.ops is not None else []:
        echo(line)
    word = {EXIT_PASS: "no regression", EXIT_FAIL: "REGRESSION", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}
    emulated = f" [{record.emulation}: CPU timings]" if record.emulation else ""
    compiled = f", of which compiling {job.compile_s:.0f} s" if job.compile_s is not None else ""
    startup = f"start-up {job.startup_s:.0f} s{compiled}; " if job.startup_s is not None else ""
    echo(f"ab: {word[record.exit_code]}{emulated} ({record.mode}; {startup}{job.stopped}; {len(job.pairs)} pairs); "
          f"results in {out}")
    return ABOutcome(record, out, record.exit_code)
