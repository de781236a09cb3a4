"""The worker process of `perfbench ab`: it builds every run of the scenario for its arms, then times on request.

`python -m perfbench.measure.ab_worker --reply-fd N --specs FILE --out DIR --arm NAME=CHECKOUT [--arm ...]`.

- Two arms (the default, one process): each arm's `model/` is imported as its own set of modules
  (perfbench/measure/arm_modules.py), both built from the same restored process state, and their fingerprints of
  process-global state compared. If they differ, the worker answers {"fallback": reason} and ends: the parent
  then times the arms in two processes. Else it answers {"ready": {arm: {run_id: plan}}, "model": {arm: path}}
  and reads commands on stdin, one JSON line each:
  {"epoch": {"index": k, "pairs": n, "seed": s}} re-allocates both arms' weights (perfbench/measure/epochs.py; not
  before the first epoch), runs one untimed iteration of every run in each arm, then n pairs of every run in a
  seeded random order (run order shuffled per round, arm order random per pair), answering one {"pair": {...}}
  line per pair and {"epoch_done": {"recompiles": r, "relocated_mb": m}} at the end. Garbage collection is off
  while pairs are timed and runs between epochs.
- One arm (two processes): `model` is the arm's own from sys.path (the parent puts the arm's overlay first);
  {"ready": {arm: plans}, "model": {arm: path}} then {"iterate": run_id} answers one timed iteration.

Each iteration answers {"ttft_ms", "tpot_ms", "probe_ms"} (the host probe read just before the pair). The worker
ends when stdin closes. An error answers {"error": text, "arm": name, "stage": "startup" | "benchmark"} and
ends the process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import traceback
from pathlib import Path
from typing import IO, Any

from perfbench.measure.requests import requests, send_answer
from perfbench.results import RunSpec

ARMS = ("base", "head")
# which arm the worker is in and at what stage, so that an error names them (the parent records that arm failed)
WHERE: dict[str, str | None] = {"arm": None, "stage": "startup"}


def _timed(run: Any) -> dict[str, float | None]:
    it = run.iterate()
    tpot = sum(it.step_s) / len(it.step_s) * 1e3 if it.step_s else None
    return {"ttft_ms": it.ttft_s * 1e3, "tpot_ms": tpot}


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["stats"].values())) if "stats" in counters else 0


def serve_one_process(specs: list[RunSpec], out: Path, checkouts: dict[str, Path], reply: IO[str]) -> int:
    from perfbench.measure.arm_modules import ProcessState, RestorableState, load_arm
    from perfbench.measure.epochs import Relocator, relocatable
    from perfbench.measure.host_probe import HostProbe
    from perfbench.measure.thread_budget import fit_threads_to_host

    _allow_a_graph_per_run(2 * len(specs))
    if specs:
        fit_threads_to_host(specs[0].device)  # before the state both arms start from is saved
    start = RestorableState.save()
    arms, prepared, imported, built = {}, {}, {}, {}
    for name in ARMS:  # imports first: an arm that changes process state at import is caught before any build
        start.restore()
        WHERE.update(arm=name, stage="startup")
        arms[name] = load_arm(name, checkouts[name])
        imported[name] = ProcessState.capture()
    differ = imported["base"].differences(imported["head"])
    for name in ARMS if not differ else ():
        start.restore()  # both arms build from the same process state
        WHERE["arm"] = name
        with arms[name].active():
            measure = arms[name].module("perfbench.measure.run_steps")
            # both arms' runs live under one runs/ folder, so they share one compile cache (keyed by graph)
            prepared[name] = {s.run_id: measure.prepare_run(s, out / "runs" / name / s.run_id) for s in specs}
        built[name] = ProcessState.capture()
    differ = differ or built["base"].differences(built["head"])
    if differ:
        shown = "; ".join(differ[:3]) + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
        send_answer(reply, {"fallback": f"the arms leave process-global state differently ({shown})"})
        return 0
    relocators = {name: [Relocator(p.model, hash((name, rid)) & 0xFFFF) for rid, p in runs.items()
                         if relocatable(p.spec.device, "graph_mode" in p.result.plan.effective_on())]
                  for name, runs in prepared.items()}
    probe = HostProbe(specs[0].seed) if specs and specs[0].device == "cpu" else None
    send_answer(reply, {"ready": {name: {rid: p.result.plan.to_dict() for rid, p in runs.items()}
                            for name, runs in prepared.items()},
                  "model": {name: arm.model_path for name, arm in arms.items()}, "pid": os.getpid()})
    run_ids = [s.run_id for s in specs]
    for request in requests():
        epoch = request["epoch"]
        rng = random.Random(epoch["seed"])
        relocated = 0
        if epoch["index"] > 0:
            relocated = sum(r.relocate() for runs in relocators.values() for r in runs)
        WHERE["stage"] = "benchmark"
        for name in ARMS:  # untimed: the first iteration after a re-allocation runs cold
            WHERE["arm"] = name
            with arms[name].active():
                for rid in run_ids:
                    prepared[name][rid].iterate()
        compiled = _graphs_compiled()
        gc.collect()
        gc.disable()
        try:
            for index in range(epoch["pairs"]):
                for rid in rng.sample(run_ids, len(run_ids)):
                    base_first = rng.random() < 0.5
                    probe_ms = probe() if probe is not None else None
                    timed = {}
                    for name in (ARMS if base_first else ARMS[::-1]):
                        WHERE["arm"] = name
                        with arms[name].active():
                            timed[name] = {**_timed(prepared[name][rid]), "probe_ms": probe_ms}
                    send_answer(reply, {"pair": {"run_id": rid, "index": index, "base_first": base_first, **timed}})
        finally:
            gc.enable()
        send_answer(reply, {"epoch_done": {"recompiles": _graphs_compiled() - compiled,
                                     "relocated_mb": round(relocated / 2**20, 1)}})
    return 0


def serve_one_arm(specs: list[RunSpec], out: Path, name: str, reply: IO[str]) -> int:
    import model  # the arm's model package, from its own checkout
    from perfbench.measure.host_probe import HostProbe
    from perfbench.measure.run_steps import prepare_run
    from perfbench.measure.thread_budget import fit_threads_to_host

    WHERE.update(arm=name, stage="startup")
    if specs:
        fit_threads_to_host(specs[0].device)
    prepared = {s.run_id: prepare_run(s, out / "runs" / s.run_id) for s in specs}
    WHERE["stage"] = "benchmark"
    probe = HostProbe(specs[0].seed) if specs and specs[0].device == "cpu" else None
    send_answer(reply, {"ready": {name: {rid: p.result.plan.to_dict() for rid, p in prepared.items()}},
                  "model": {name: str(Path(model.__file__).resolve().parent)}, "pid": os.getpid()})
    for command in requests():
        probe_ms = probe() if probe is not None else None
        send_answer(reply, {**_timed(prepared[command["iterate"]]), "probe_ms": probe_ms})
    return 0


def _allow_a_graph_per_run(runs: int) -> None:
    """Every graph-mode model compiles its decode function for its own `self`; dynamo counts each as a
    recompile of that function (per arm: each arm's code is its own), and past its limit it would run eagerly."""
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, 8 * runs)


def _arm(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if name not in ARMS or not path:
        raise argparse.ArgumentTypeError(f"--arm: expected base=PATH or head=PATH, got {text!r}")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbench.measure.ab_worker", description=__doc__.splitlines()[0])
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--specs", type=Path, required=True, help="a JSON list of RunSpec objects")
    parser.add_argument("--out", type=Path, required=True, help="the folder for run folders and compile caches")
    parser.add_argument("--arm", type=_arm, action="append", required=True, help="NAME=CHECKOUT (one or both)")
    args = parser.parse_args(argv)
    from perfbench.emulation.npu import activate_from_env  # the runner's --emulate-npu, before the model loads

    activate_from_env()
    specs = [RunSpec.from_dict(raw) for raw in json.loads(args.specs.read_text())]
    checkouts = dict(args.arm)
    with os.fdopen(args.reply_fd, "w") as reply:
        try:
            if len(checkouts) == 2:
                return serve_one_process(specs, args.out, checkouts, reply)
            (name,) = checkouts
            return serve_one_arm(specs, args.out, name, reply)
        except Exception:  # noqa: BLE001 - the parent records the arm's failure and stops the job
            send_answer(reply, {"error": traceback.format_exc(), **WHERE})
            return 1


if __name__ == "__main__":
    sys.exit(main())
