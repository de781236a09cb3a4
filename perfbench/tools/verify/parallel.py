"""Item 4, parallel (--devices 2 or more): TP2 and EP2 on two devices against world size 1, all toggles
requested, so the plan turns on npu_mm_all_reduce_base (TP) and MC2 dispatch/combine (EP) where the platform
allows them. One torchrun job of two ranks (rank_worker.py) runs every case; each rank replays the all-off
model's tokens, experts and layer inputs at world size 1, and its layer outputs and logits are judged by a run's
numerics and bound (numerics.py): every rank must be within it.

--quick: TP2 and EP2 all on, eager; the full run adds both all off (the layouts alone) and all on with graph
mode. A rank that dies ends the job; it is reported with its exit code and the call it was making.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

import perfbench
from perfbench.measure.code_origin import module_command
from perfbench.measure.routing_flips import routing_to_tensors
from perfbench.tools.verify.context import DTYPE, ModelUnderTest, VerifyContext, all_on
from perfbench.tools.verify.failures import failed_check
from perfbench.tools.verify.numerics import PROMPTS, ROUTING_FILE, Forced, agreement
from perfbench.tools.verify.summary import FAIL, PASS, SKIPPED, Check

WORLD = 2
TP2 = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2,
       "shared_tp_size": 2}
EP2 = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 1, "embed_tp_size": 2, "lmhead_tp_size": 2,
       "shared_tp_size": 1}
COMM_TOGGLE = {"tp2": "mm_all_reduce", "ep2": "moe_dispatch_combine"}
TIMEOUT_S = {True: 600, False: 3600}  # quick, full
REPO_ROOT = Path(perfbench.__file__).resolve().parents[1]


def parallel_cases(quick: bool) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = [
        {"name": f"{layout}-all-on", "parallel": p, "toggles": all_on(graph=False), "exe_mode": "eager"}
        for layout, p in (("tp2", TP2), ("ep2", EP2))]
    if not quick:
        for layout, p in (("tp2", TP2), ("ep2", EP2)):
            cases += [{"name": f"{layout}-all-off", "parallel": p, "toggles": {}, "exe_mode": "eager"},
                      {"name": f"{layout}-all-on-ge-graph", "parallel": p, "toggles": all_on(graph=True),
                       "exe_mode": "ge_graph"}]
    return cases


def _run_torchrun(spec_path: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, output) of the two-rank job; on timeout every process of it is killed."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    # torchrun and each rank import this code (REPO_ROOT), whatever folder verify runs in (measure/code_origin.py)
    rank = module_command(sys.executable, "perfbench.tools.verify.rank_worker",
                          str(spec_path.absolute()), root=REPO_ROOT)  # absolute: a folder named "-x" stays a path
    cmd = module_command(sys.executable, "torch.distributed.run", "--standalone", "--nproc-per-node", str(WORLD),
                         "--monitor-interval", "0.5", "--no-python", *rank, root=REPO_ROOT)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output
    except KeyboardInterrupt:  # SIGINT / SIGTERM to verify: its own session would outlive it otherwise
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def dead_rank(output: str) -> tuple[int, int] | None:
    """(rank, exit code) of torchrun's "Root Cause" (the first rank that failed), if it printed one."""
    root = output.rsplit("Root Cause", 1)[-1] if "Root Cause" in output else ""
    rank = re.search(r"rank\s*:\s*(\d+)", root)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", root)
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            pass
    return f"exit code {code}"


def _job_failure(out: Path, code: int | None, output: str, timeout_s: float) -> Check:
    if code is None:
        return Check("torchrun", FAIL, "the two-rank job", op="torch.distributed",
                     error=f"the job did not finish within {timeout_s:.0f} s (killed)")
    died = dead_rank(output)
    if died is None:
        return Check("torchrun", FAIL, "the two-rank job", op="torch.distributed",
                     error=f"torchrun ended with {_exit_text(code)}")
    rank, rank_code = died
    stage = out / f"rank{rank}.stage"
    call = stage.read_text() if stage.is_file() else ""
    injected = next((line.strip() for line in output.splitlines() if "injected fault" in line), "")
    return Check(f"rank {rank}", FAIL, "the two-rank job", op="torch.distributed (HCCL)", call=call,
                 error=f"rank {rank} died: {_exit_text(rank_code)}" + (f" ({injected})" if injected else ""))


def _case_check(case: dict, out: Path, model: ModelUnderTest, want: Forced) -> Check | None:
    name = f"{model.name}/{case['name']}"
    errors = sorted(out.glob(f"{case['name']}.rank*.error.json"))
    if errors:
        record = json.loads(errors[0].read_text())
        return Check(name, FAIL, f"rank {record['rank']}", op=record["op"], call=record["call"],
                     error=record["error"])
    rank_paths = [out / f"{case['name']}.rank{rank}.pt" for rank in range(WORLD)]
    if not all(p.is_file() for p in rank_paths):
        return None
    plan = json.loads((out / f"{case['name']}.json").read_text())
    comm = COMM_TOGGLE[case["name"].split("-", 1)[0]]
    state = plan[comm]
    comm_text = f"{comm} {state['state']}" + (f" ({state['reason']})" if state["state"] == "inactive" else "")
    graph = plan["graph_mode"]
    if case["exe_mode"] != "eager" and graph["state"] != "on":  # it ran eagerly: the graph is not verified
        return Check(name, SKIPPED, f"graph_mode {graph['state']}: {graph['reason']}")
    dtype = str(DTYPE).removeprefix("torch.")
    ranks = []
    for path in rank_paths:  # every rank by the run's numerics and bound against world size 1
        saved = torch.load(path)
        ranks.append(agreement(Forced(saved["logits"], list(saved["outputs"]), []), want, dtype))
    worst = max(range(WORLD), key=lambda r: (not ranks[r].ok, ranks[r].max_rel_error))
    a = ranks[worst]
    data = {"plan": {t: d["state"] for t, d in plan.items()}, **a.to_dict(), "rank": worst,
            "rank_errors": [r.max_rel_error for r in ranks]}
    detail = f"{comm_text}; rank {worst}: {a.line()} against world size 1"
    if not all(r.ok for r in ranks):
        return Check(name, FAIL, detail, error=f"rank {worst} outside the run's numerics bound against world "
                                               f"size 1: {a.line()}", data=data)
    return Check(name, PASS, detail, data=data)


def check_parallel(ctx: VerifyContext, log: list[str]) -> list[Check]:
    if ctx.options.devices < WORLD:
        return [Check("TP2, EP2", SKIPPED, f"needs --devices {WORLD} or more (this run: --devices "
                                           f"{ctx.options.devices})")]
    checks = []
    for model in ctx.models:
        try:
            ref = ctx.reference(model)
        except Exception as exc:  # noqa: BLE001
            checks.append(failed_check(f"{model.name}/world size 1 (reference)", exc, log))
            continue
        out = ctx.work_dir / "parallel" / model.name
        out.mkdir(parents=True, exist_ok=True)
        cases = parallel_cases(ctx.options.quick)
        spec = out / "spec.json"
        # the reference's routing and layer inputs, which every rank replays (a file the ranks read as data, never
        # as options)
        taps = {f"tap.{i}.inputs": x.contiguous() for i, x in enumerate(ref.forced.inputs)}
        save_file({**routing_to_tensors(ref.routing), **taps, "tap.count": torch.tensor(len(ref.forced.inputs))},
                  str(out / ROUTING_FILE))
        spec.write_text(json.dumps({"model": str(model.path), "prompts": PROMPTS, "tokens": ref.tokens,
                                    "cases": cases, "out": str(out)}))
        timeout_s = TIMEOUT_S[ctx.options.quick]
        code, output = _run_torchrun(spec, timeout_s)
        log.append(f"--- {model.name}: torchrun exit {code}\n{output}")
        results = [_case_check(case, out, model, ref.forced) for case in cases]
        finished = [c for c in results if c is not None]
        checks += finished
        if code != 0 and not any(c.status == FAIL for c in finished):
            checks.append(_job_failure(out, code, output, timeout_s))
        not_run = [case["name"] for case, c in zip(cases, results) if c is None]
        if not_run:  # after a failure the job ends; a clean job without a result is a failure of its own
            checks.append(Check(f"{model.name}/not run", SKIPPED if code != 0 else FAIL,
                                f"no result: {', '.join(not_run)}",
                                error="" if code != 0 else "the job ended cleanly without these results"))
    return checks
