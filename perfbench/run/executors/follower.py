"""A node other than node 0 in a multi-node run: it starts its ranks and records only how its process ended.

Node 0 owns the results folder (results.jsonl, result.json, report); node r keeps its logs under
runs/<run_id>/node<r>/ (so a results folder on a shared filesystem holds every node's logs side by side) and a
node<r>.json with its exit status. `--resume` on node r skips the runs that hold such a record, as node 0
skips the runs in its results.jsonl.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from perfbench.config.sweep import PlannedRun, SweepPlan
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import atomic_write_json
from perfbench.run.launcher import ProcessOutcome, child_env, run_process, worker_command
from perfbench.terminal_text import printable


def node_dir(out: Path, run_id: str, node_rank: int) -> Path:
    return out / "runs" / run_id / f"node{node_rank}"


def run_node_share(planned: PlannedRun, out: Path, launch: NodeLaunch, base_env: dict[str, str] | None = None,
                   executor: str = "local") -> ProcessOutcome:
    """This node's ranks of one run (torchrun joins node 0's rendezvous); returns how they ended."""
    spec = planned.spec
    run_dir = node_dir(out, spec.run_id, launch.node_rank)
    spec_path = run_dir / "spec.json"
    atomic_write_json(spec_path, spec.to_dict())
    outcome = run_process(worker_command(spec, spec_path, run_dir, launch=launch),
                          child_env(spec, base_env, launch, executor), run_dir / "worker.log", spec.timeout_s)
    atomic_write_json(run_dir.parent / f"node{launch.node_rank}.json", asdict(outcome))
    return outcome


def follow_sweep(sweep: SweepPlan, out: Path, launch: NodeLaunch, resume: bool) -> int:
    """Node r's share of every run, in node 0's order. Exit code 0 when every share ended with code 0."""
    runs = [p for p in sweep.runs
            if not (resume and (out / "runs" / p.spec.run_id / f"node{launch.node_rank}.json").is_file())]
    print(printable(f"{sweep.scenario.name}: node {launch.node_rank} of {launch.nnodes}, {len(runs)} run share(s) "
                    f"to run; node 0 ({launch.rdzv_endpoint}) writes the results"), file=sys.stderr, flush=True)
    failed = 0
    for k, planned in enumerate(runs, 1):
        outcome = run_node_share(planned, out, launch)
        failed += outcome.returncode != 0
        state = "timeout" if outcome.timed_out else f"exit {outcome.returncode}"
        print(printable(f"[{k}/{len(runs)}] {planned.spec.run_id} node {launch.node_rank}: {state} "
                        f"{outcome.wall_s:.1f}s"),
              file=sys.stderr, flush=True)
    return 1 if failed else 0
