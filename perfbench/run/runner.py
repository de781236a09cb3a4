"""`perfbench run`: a scenario's runs, each in a fresh process (or, for the single-process CPU runs of a round,
one worker process per round), with timeouts, failure records and resume.

Result folder: scenario.json, results.jsonl + results.csv (rewritten atomically after every run, so an
interrupted sweep loses nothing already measured), runs/<run_id>/{spec.json, worker.log, result.json, ranks/}.
"""

from __future__ import annotations

import datetime
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from model.backend import Capabilities, detect_capabilities
from perfbench.analysis.folder_analysis import FolderAnalysis, analyse_folder
from perfbench.config.scenario import Scenario, load_scenario
from perfbench.config.sweep import PlannedRun, SweepPlan, compact, plan_sweep, shape_label
from perfbench.errors import UserError
from perfbench.lifecycle import exit_code_of, interrupt_line
from perfbench.measure.environment import collect_environment
from perfbench.measure.node_launch import NodeLaunch, launch_for
from perfbench.output_paths import check_output_dir
from perfbench.results import RunResult, atomic_write_json, load_results, write_results
from perfbench.results.env_allowlist import masked_values
from perfbench.results.timestamps import utc_timestamp
from perfbench.run.detectable import detect_line
from perfbench.run.executors.base import Executor
from perfbench.run.executors.local import LocalExecutor
from perfbench.run.folder_owner import check_identity, owned
from perfbench.run.summary_table import summary_table
from perfbench.terminal_text import printable

# renders a result folder after the runs, from the analysis of the runs in memory (None: read the folder)
ReportHook = Callable[[Path, FolderAnalysis | None], None]
RETRIED = ("killed", "timeout")  # statuses --resume measures again


def _say(text: str, end: str = "\n") -> None:
    print(printable(text), end=end, file=sys.stderr, flush=True)


def _now() -> str:
    return utc_timestamp()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def capabilities_for(scenario: Scenario, dry_run: bool) -> tuple[Capabilities, bool]:
    """(capabilities, device present); a dry run without the device here gets stand-in capabilities."""
    device = scenario.perfbench.device
    try:
        return detect_capabilities(device), True
    except RuntimeError as err:
        if dry_run:
            return Capabilities(device=device, device_name="(not present here)"), False
        raise UserError(f"{Path(scenario.source).name}: perfbench.device: {err}; run with "
                        f"--set perfbench.device=cpu, or --dry-run to see the plans") from None


def default_out(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return Path("reports") / f"{safe}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def previous_results(out: Path, resume: bool, out_given: bool) -> list[RunResult]:
    has_results = (out / "results.jsonl").is_file()
    if resume and not out_given:
        raise UserError("--resume needs --out <the folder of the sweep to continue>")
    if not resume:
        if has_results:
            raise UserError(f"--out {out}: already holds results.jsonl; add --resume to continue that sweep, "
                            f"or choose another folder")
        return []
    if not has_results:
        return []
    try:
        return load_results(out)
    except (ValueError, TypeError) as err:
        raise UserError(f"--resume: {' '.join(str(err).split())}") from None


def run_sweep(sweep: SweepPlan, out: Path, previous: list[RunResult],
              executor: Executor | None = None) -> list[RunResult]:
    """Run what `previous` lacks; rewrite the result files after each run. Returns this sweep's results."""
    executor = executor or LocalExecutor()
    device = sweep.runs[0].spec.device if sweep.runs else sweep.caps.device
    env = collect_environment(device, executor.name)
    # a run killed or timed out (the machine, a signal) is measured again; one that ran and failed is kept
    results = [r for r in previous if r.status not in RETRIED]
    done = {r.run_id for r in results}
    atomic_write_json(out / "scenario.json", masked_values(sweep.scenario.as_dict()))  # no credential written
    for planned in sweep.runs:
        if planned.spec.run_id not in done:
            atomic_write_json(out / "runs" / planned.spec.run_id / "spec.json", planned.spec.to_dict())
    total = len(sweep.runs)
    todo = [p for p in sweep.runs if p.spec.run_id not in done]
    number = {p.spec.run_id: k for k, p in enumerate(sweep.runs, 1)}
    _say(f"{sweep.scenario.name}: {total} run{'s' * (total != 1)} on {device} ({executor.name} executor), "
         f"{total - len(todo)} already recorded, {len(todo)} to run; results in {out}")
    start = time.monotonic()
    failures = 0

    def announce(planned: PlannedRun) -> None:
        spec = planned.spec
        _say(f"[{number[spec.run_id]}/{total}] {spec.run_id} {shape_label(spec)} {compact(planned.plan)} ... "
             f"{executor.started_word}")

    for planned, result, wall in executor.run(todo, out, env, announce):
        results.append(result)
        write_results(out, results)
        failures += result.status != "ok"
        # a run timed in blocks is judged by its pairs with the group's other runs (the end table), not by the
        # spread of its own iterations, which carries the host's speed changes that the pairs cancel
        judged_alone = result.spec.timing != "blocks" and result.is_stable() is False
        unstable = f", UNSTABLE: {result.stability.reason}" if judged_alone else ""
        _say(f"[{number[planned.spec.run_id]}/{total}] {planned.spec.run_id} {result.status} {wall:.1f}s "
             f"(elapsed {_duration(time.monotonic() - start)}, failures {failures}){unstable}")
        if result.failure:
            _say(f"    {result.failure.kind}: {result.failure.reason}")
        elif result.status != "ok" and result.error:
            _say(f"    {result.error.strip().splitlines()[-1][:200]}")
        for line in result.trace.plan_mismatches:
            _say(f"    trace vs plan: {line}")
    ids = {p.spec.run_id for p in sweep.runs}
    return [r for r in results if r.run_id in ids]


def make_executor(name: str, address: str | None, launch: NodeLaunch) -> Executor:
    if name == "ray":
        from perfbench.run.executors.ray_executor import RayExecutor

        return RayExecutor(address, launch)
    if address is not None:
        raise UserError("--address: only with --executor ray")
    return LocalExecutor(launch if launch.multi_node else None)


def run_scenario(scenario: str | None, out_dir: str | None, overrides: list[str], dry_run: bool,
                 resume: bool, report: ReportHook | None = None, executor: str = "local",
                 address: str | None = None) -> int:
    """Validate, expand and run a scenario; `report` renders the folder afterwards (the cli hands it in: the run
    stage does not import the report stage). Exit code: 0 all runs ok, 1 some run failed, 130 / 143 interrupted
    by SIGINT / SIGTERM (perfbench/lifecycle.py)."""
    sc = load_scenario(scenario, overrides)
    launch = launch_for(sc.perfbench.cluster, sc.parallel_config.world_size,
                        need_endpoint=executor == "local" and not dry_run)
    if executor == "ray" and launch.node_rank:
        raise UserError("perfbench.cluster.node_rank: the ray executor starts every node itself; run it once, "
                        "without --node-rank")
    caps, present = capabilities_for(sc, dry_run)
    sweep = plan_sweep(sc, caps, device_present=present, executor=executor)
    # refused in --dry-run as in a real run: a CI check that validates with --dry-run must fail on these
    missing = sc.model_missing()
    if missing:
        raise UserError(f"{Path(sc.source).name}: {missing}")
    if executor == "local":  # runs here share this host's memory; ray places them on other hosts
        from perfbench.roofline.memory import check_memory  # kept beside its one call

        check_memory(sweep)
    if dry_run:
        print(printable(sweep.describe()))
        if launch.multi_node:
            print(printable(f"cluster: each run on {launch.nnodes} nodes x {launch.nproc_per_node} ranks "
                            f"(c10d rendezvous at {launch.rdzv_endpoint or 'an endpoint given at run time'})"))
        return 0
    out = Path(out_dir) if out_dir else default_out(sc.name)
    if launch.node_rank:
        from perfbench.run.executors.follower import follow_sweep

        return follow_sweep(sweep, out, launch, resume)
    check_output_dir(out, "--out")  # before anything runs: an unwritable folder loses no measurement later
    with owned(out):
        return _run_owned(sc, sweep, out, scenario, overrides, resume, report, executor, address, launch,
                          out_dir is not None)


def stage_line(results: list[RunResult], wall_s: float) -> str:
    """Where the sweep's wall time went, summed over its runs (a block group's timing counted once); the rest is
    the workers' start-up (imports, thread setup), the report and the runner itself."""
    totals = {"reference": 0.0, "build": 0.0, "warm-up and compile": 0.0, "timing": 0.0, "numerics": 0.0,
              "expert load": 0.0, "profile": 0.0}
    groups: set[tuple[str, str]] = set()
    for r in results:
        s = r.stages
        for name, value in (("reference", s.reference_s), ("build", s.build_s), ("warm-up and compile", s.warmup_s),
                            ("numerics", s.numerics_s), ("expert load", s.expert_load_s), ("profile", s.profile_s)):
            totals[name] += value or 0.0
        key = (r.blocks.process, r.blocks.group) if r.blocks else (r.run_id, "")
        if s.timing_s is not None and key not in groups:
            groups.add(key)
            totals["timing"] += s.timing_s
    rest = max(wall_s - sum(totals.values()), 0.0)
    parts = ", ".join(f"{name} {value:.0f} s" for name, value in totals.items() if value >= 0.5)
    return f"time by stage: {parts}, start-up and the rest {rest:.0f} s; wall {wall_s:.0f} s"


def _run_owned(sc: Scenario, sweep: SweepPlan, out: Path, scenario: str | None, overrides: list[str],
               resume: bool, report: ReportHook | None, executor: str, address: str | None, launch: NodeLaunch,
               out_given: bool) -> int:
    """The sweep, with the folder's lock held (perfbench/run/folder_owner.py)."""
    began = time.perf_counter()
    previous = previous_results(out, resume, out_given)
    check_identity(out, sc.as_dict(), resume)
    # the noise file describes `ab`'s design on this scenario (its tests, pairs and cap), not this sweep's blocks
    _say(f"perfbench run: {detect_line(sc.name, f'`perfbench ab` on {sc.name}')[0]}")
    try:
        results = run_sweep(sweep, out, previous, make_executor(executor, address, launch))
    except KeyboardInterrupt as err:
        again = " ".join(["perfbench run", *([scenario] if scenario else []),
                          *(f"--set {o}" for o in overrides),
                          *([f"--executor {executor}"] if executor != "local" else []),
                          *([f"--address {address}"] if address else []), f"--out {out} --resume"])
        _say(f"\n{interrupt_line(err, 'perfbench run')}; finished runs are in {out}/results.jsonl; "
             f"continue with: {again}")
        return exit_code_of(err)
    # analysed once, from the results in memory and the trace tables the workers wrote: the report and the end
    # table lay it out, and nothing this process wrote is read back
    analysis = analyse_folder(out, results)
    if report is not None:
        report(out, analysis)
    print(printable(summary_table(analysis)))
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "error", "timeout", "killed")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "ok")
    # runs timed in blocks are judged by their pairs (the table's verdicts), not by their own spread
    unstable = sum(r.is_stable() is False and r.spec.timing != "blocks" for r in results)
    if unstable:
        tally += f" ({unstable} timed separately and unstable: see the warnings above)"
    print(printable(f"{len(results)} run{'s' * (len(results) != 1)}: {tally}; results in {out}/results.jsonl"))
    print(printable(stage_line(results, time.perf_counter() - began)))
    return 0 if results and counts["ok"] == len(results) else 1
