"""`perfbench ab BASE [HEAD]`: did a change make it slower? Both arms in one job, interleaved, judged on pairs.

Each arm has a live worker (perfbench/run/ab_worker.py) that imports `model/` from the arm's checkout
(perfbench/run/arms.py) and holds every run of the scenario, built from the same seeded specs. A pair is one
timed iteration of a run in each arm, back to back, in a random order. A generation is one untimed iteration
of every run in each arm, then `pairs_per_process` pairs of every run; then both workers are replaced, so that
processes are sampled too (a generation is a cluster of the bootstrap, perfbench/analysis/paired.py).

The decision is sequential, as Chromium's Pinpoint decides: once every run has `min_pairs` pairs, after each
generation every (run, metric) gets a verdict on head / base; the job stops when none is inconclusive, or when
the next generation would pass `max_time_s`. Verdicts: slower / faster / same (the CI inside the threshold
band) / inconclusive (the cap came first). Exit codes as the gate's: 0 no regression, 1 regression, 2 input
error, 3 inconclusive.

The folder: results.jsonl (one result per run and arm, run ids "<run_id>@base" / "@head"), ab.json (the arms,
the settings, every pair, the decision trail and the verdicts), arms/<arm>/ (worker logs, compile caches) and
report.html. `perfbench gate --current DIR` reads it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from perfbench.analysis import paired
from perfbench.errors import UserError
from perfbench.results import RunPlan, RunResult, RunSpec, atomic_write_json, write_results
from perfbench.roofline.peaks import cache_dir
from perfbench.run.arms import Arm, ArmSet, check_out, repository_of
from perfbench.run.environment import emulation_label
from perfbench.run.launcher import start_in_group, stop_group

AB_FILE = "ab.json"
METRICS = ("ttft_ms", "tpot_ms")
EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE = 0, 1, 3
MIN_GENERATIONS = 2  # worker generations (processes per arm) before any verdict
READY_TIMEOUT_S = 900.0  # building and compiling every run of a scenario
ITERATION_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ABSettings:
    max_time_s: float = 110.0
    min_pairs: int = 10
    pairs_per_process: int = 8
    threshold: float = 0.03  # the band of "same", relative
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.max_time_s > 0:
            raise UserError(f"--max-time: must be positive, got {self.max_time_s}")
        if self.min_pairs < 2:
            raise UserError(f"--min-pairs: must be at least 2, got {self.min_pairs}")
        if self.pairs_per_process < 1:
            raise UserError(f"--pairs-per-process: must be at least 1, got {self.pairs_per_process}")
        if not 0 < self.threshold < 1:
            raise UserError(f"--threshold: must lie in (0, 1), got {self.threshold}")


@dataclass
class Pair:
    run_id: str
    generation: int
    index: int  # the pair's number within its run and generation
    base_first: bool
    base: dict[str, float | None]  # ttft_ms, tpot_ms, probe_ms
    head: dict[str, float | None]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class ArmWorker:
    """One arm's live worker process."""

    def __init__(self, arm: Arm, specs_path: Path, arm_out: Path, generation: int) -> None:
        self.arm = arm
        self.log_path = arm_out / f"worker-g{generation}.log"
        arm_out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(arm.overlay), *filter(None, [env.get("PYTHONPATH")])])
        # one inductor cache for every ab job of this user: its entries are keyed by the graph, so both arms and
        # every commit share it safely, and a fresh worker of a new job starts warm
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
        env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "perfbench.run.ab_worker", "--reply-fd", str(write_fd),
               "--specs", str(specs_path.absolute()), "--out", str(arm_out.absolute())]
        try:
            with open(self.log_path, "ab") as log:
                self.proc = start_in_group(cmd, env, log, cwd=arm.overlay, stdin=subprocess.PIPE,
                                           pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        self.reply: IO[str] = os.fdopen(read_fd, "r")

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            ready, _, _ = select.select([self.reply], [], [], min(max(deadline - time.monotonic(), 0), 1.0))
            if ready:
                line = self.reply.readline()
                if line.strip():
                    answer = json.loads(line)
                    if "error" in answer:
                        last = answer["error"].strip().splitlines()[-1]
                        raise UserError(f"{self.arm.name} arm: {last} (log: {self.log_path})")
                    return answer
            if self.proc.poll() is not None or (ready and not line):
                raise UserError(f"{self.arm.name} arm: its worker ended (exit {self.proc.poll()}); "
                                f"see {self.log_path}")
            if time.monotonic() > deadline:
                raise UserError(f"{self.arm.name} arm: no answer in {timeout_s:g} s; see {self.log_path}")

    def ready(self) -> dict[str, Any]:
        return self._answer(READY_TIMEOUT_S)

    def iterate(self, run_id: str) -> dict[str, float | None]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"iterate": run_id}) + "\n").encode())
        self.proc.stdin.flush()
        return self._answer(ITERATION_TIMEOUT_S)

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop_group(self.proc)
        self.reply.close()


def clusters(pairs: list[Pair], run_id: str, metric: str) -> dict[int, tuple[list[float], list[float]]]:
    """generation -> aligned (base, head) samples of one run and metric."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for p in pairs:
        b, h = p.base.get(metric), p.head.get(metric)
        if p.run_id == run_id and b is not None and h is not None:
            xs, ys = out.setdefault(p.generation, ([], []))
            xs.append(b)
            ys.append(h)
    return out


def verdicts(pairs: list[Pair], run_ids: list[str], threshold: float) -> dict[str, dict[str, paired.PairedRatio]]:
    """run_id -> metric -> head / base with its verdict. Pairs from one worker generation decide nothing: one
    process cannot show how far another would differ, so its CI is too narrow to trust (inconclusive)."""
    out: dict[str, dict[str, paired.PairedRatio]] = {}
    for rid in run_ids:
        for metric in METRICS:
            ratio = paired.paired_ratio(clusters(pairs, rid, metric), threshold, n_boot=1000)
            if ratio is not None and ratio.processes < MIN_GENERATIONS:
                ratio = dataclasses.replace(ratio, verdict=paired.INCONCLUSIVE)
            if ratio is not None:
                out.setdefault(rid, {})[metric] = ratio
    return out


def decided(found: dict[str, dict[str, paired.PairedRatio]]) -> bool:
    return bool(found) and all(r.verdict != paired.INCONCLUSIVE for per in found.values() for r in per.values())


def exit_code(found: dict[str, dict[str, paired.PairedRatio]]) -> int:
    values = [r.verdict for per in found.values() for r in per.values()]
    if paired.SLOWER in values:
        return EXIT_FAIL
    return EXIT_INCONCLUSIVE if (paired.INCONCLUSIVE in values or not values) else EXIT_PASS


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
    pairs: list[Pair] = field(default_factory=list)
    trail: list[dict[str, Any]] = field(default_factory=list)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> run_id -> plan
    models: dict[str, str] = field(default_factory=dict)  # arm -> the model package its worker imported
    stopped: str = ""

    def run(self) -> dict[str, dict[str, paired.PairedRatio]]:
        specs_path = self.out / "ab_specs.json"
        atomic_write_json(specs_path, [s.to_dict() for s in self.specs])
        rng = random.Random(self.settings.seed)
        run_ids = [s.run_id for s in self.specs]
        start = time.monotonic()
        found: dict[str, dict[str, paired.PairedRatio]] = {}
        generation = 0
        last_generation_s = 0.0
        while True:
            began = time.monotonic()
            workers = {arm.name: ArmWorker(arm, specs_path, self.out / "arms" / arm.name, generation)
                       for arm in (self.arms.base, self.arms.head)}
            try:
                for name, worker in workers.items():  # both build at once; nothing is timed yet
                    answer = worker.ready()
                    self.plans[name] = answer["ready"]
                    self.models[name] = answer["model"]
                for rid in run_ids:  # untimed: the first iterations after a build run cold (allocator, caches)
                    for worker in workers.values():
                        worker.iterate(rid)
                for index in range(self.settings.pairs_per_process):
                    for rid in rng.sample(run_ids, len(run_ids)):
                        base_first = rng.random() < 0.5
                        order = ("base", "head") if base_first else ("head", "base")
                        timed = {name: workers[name].iterate(rid) for name in order}
                        self.pairs.append(Pair(rid, generation, index, base_first, timed["base"], timed["head"]))
            finally:
                for worker in workers.values():
                    worker.close()
            last_generation_s = time.monotonic() - began
            generation += 1
            counts = [sum(p.run_id == rid for p in self.pairs) for rid in run_ids]
            elapsed = time.monotonic() - start
            if min(counts) >= self.settings.min_pairs:
                found = verdicts(self.pairs, run_ids, self.settings.threshold)
                self.trail.append({"generation": generation, "elapsed_s": round(elapsed, 1), "pairs": min(counts),
                                   "verdicts": {rid: {m: r.verdict for m, r in per.items()}
                                                for rid, per in found.items()}})
                _say(f"ab: generation {generation}, {min(counts)} pairs per run, {elapsed:.0f} s: "
                     + "; ".join(f"{rid} {m} {r.value:.3f}x {r.verdict}" for rid, per in found.items()
                                 for m, r in per.items()))
                if decided(found):
                    self.stopped = "decided"
                    break
            if elapsed + last_generation_s > self.settings.max_time_s:
                self.stopped = f"time cap ({self.settings.max_time_s:g} s)"
                found = verdicts(self.pairs, run_ids, self.settings.threshold)
                break
        return found

    def results(self) -> list[RunResult]:
        """One result per run and arm: the pooled samples of its pairs."""
        out = []
        for spec in self.specs:
            for arm in ("base", "head"):
                mine = [getattr(p, arm) for p in self.pairs if p.run_id == spec.run_id]
                samples = {key: [float(v) for m in mine if (v := m.get(src)) is not None]
                           for key, src in (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"),
                                            ("host_probe_ms", "probe_ms"))}
                rid = f"{spec.run_id}@{arm}"
                plan = RunPlan.from_dict(self.plans.get(arm, {}).get(spec.run_id, {}))
                arm_info = getattr(self.arms, arm)
                env = {"ab_arm": arm, "ab_ref": arm_info.ref, "git_sha": arm_info.sha or "working tree",
                       "model_package": self.models.get(arm, ""), "emulation": emulation_label()}
                out.append(RunResult(run_id=rid, status="ok", spec=spec.replace(combination=rid),
                                     plan=plan, samples=samples, env=env, stop_reason=self.stopped))
        return out


def ab_record(job: ABJob, found: dict[str, dict[str, paired.PairedRatio]], scenario: str) -> dict[str, Any]:
    return {
        "kind": "perfbench ab",
        "scenario": scenario,
        "emulation": emulation_label(),  # emulated npu: CPU timings of emulated ops, never a real NPU's
        "base": {"ref": job.arms.base.ref, "sha": job.arms.base.sha, "model": job.models.get("base")},
        "head": {"ref": job.arms.head.ref, "sha": job.arms.head.sha, "model": job.models.get("head"),
                 "dirty": job.arms.head.dirty},
        "settings": dataclasses.asdict(job.settings),
        "stopped": job.stopped,
        "exit_code": exit_code(found),
        "verdicts": {rid: {m: r.to_dict() for m, r in per.items()} for rid, per in found.items()},
        "trail": job.trail,
        "pairs": [dataclasses.asdict(p) for p in job.pairs],
    }


def verdict_lines(record: dict[str, Any]) -> list[str]:
    lines = []
    for rid, per in record["verdicts"].items():
        for metric, r in per.items():
            lines.append(f"{rid} {metric}: head/base {r['ratio']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
                         f"{r['verdict']} ({r['pairs']} pairs, {r['processes']} processes, band "
                         f"+-{r['band']:.0%})")
    return lines


def _save(job: ABJob, found: dict[str, dict[str, paired.PairedRatio]], scenario: dict[str, Any],
          out: Path) -> dict[str, Any]:
    """Everything measured so far: results.jsonl, scenario.json, ab.json."""
    record = ab_record(job, found, str(scenario.get("name", "")))
    write_results(out, job.results())
    atomic_write_json(out / "scenario.json", scenario)
    atomic_write_json(out / AB_FILE, record)
    return record


def run_ab(base: str, head: str | None, scenario: str | None, overrides: list[str], out_dir: str | None,
           settings: ABSettings, report: Callable[[Path], None] | None = None) -> int:
    from model.backend import detect_capabilities  # noqa: PLC0415
    from perfbench.config.scenario import load_scenario  # noqa: PLC0415
    from perfbench.config.sweep import plan_sweep  # noqa: PLC0415
    from perfbench.run.runner import default_out  # noqa: PLC0415

    sc = load_scenario(scenario or "ci_smoke", overrides)
    if sc.parallel_config.world_size > 1:
        raise UserError(f"{sc.name}: ab times single-process runs; world_size is {sc.parallel_config.world_size}")
    try:
        caps = detect_capabilities(sc.perfbench.device)
    except RuntimeError as err:
        raise UserError(f"{sc.name}: perfbench.device: {err}") from None
    specs = _ab_specs(plan_sweep(sc, caps, executor="ab").specs())
    out = Path(out_dir) if out_dir else default_out(f"ab-{sc.name}")
    if (out / AB_FILE).exists() or (out / "results.jsonl").exists():
        raise UserError(f"--out {out}: already holds results; choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    repo = repository_of(Path.cwd())
    arms = check_out(base, head, repo)
    _say(f"ab {sc.name}: {len(specs)} run{'s' * (len(specs) != 1)}; {arms.base.describe()}; "
         f"{arms.head.describe()}; results in {out}")
    job = ABJob(arms, specs, out, settings)
    try:
        found = job.run()
    except (UserError, KeyboardInterrupt) as err:
        job.stopped = f"stopped early: {' '.join(str(err).split()) or type(err).__name__}"
        _save(job, verdicts(job.pairs, [s.run_id for s in specs], settings.threshold), sc.as_dict(), out)
        raise
    finally:
        arms.close()
    record = _save(job, found, sc.as_dict(), out)
    if report is not None:
        report(out)
    for line in verdict_lines(record):
        print(line)
    word = {EXIT_PASS: "no regression", EXIT_FAIL: "REGRESSION", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}
    emulated = f" [{record['emulation']}: CPU timings]" if record["emulation"] else ""
    print(f"ab: {word[record['exit_code']]}{emulated} ({job.stopped}; {len(job.pairs)} pairs); results in {out}")
    return int(record["exit_code"])
