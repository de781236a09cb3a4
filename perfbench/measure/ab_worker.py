"""The worker process of `perfbench ab`: it builds every run of the scenario for its arms, then times on request.

`python -m perfbench.measure.ab_worker --reply-fd N --specs FILE --out DIR --arm NAME=CHECKOUT [--arm ...] [--seed S]`.

- Two arms (the default, one process): each arm's `model/` is imported as its own set of modules
  (perfbench/measure/arm_modules.py), both built from the same restored process state, and their fingerprints of
  process-global state compared. If they differ, the worker answers {"fallback": reason} and ends: the parent
  then times the arms in two processes. Else it answers {"ready": {arm: {run_id: plan}}, "model": {arm: path},
  "startup": {"import_s", "build_s", "warmup_s", "compile_s"}} and reads commands on stdin, one JSON line each:
  {"epoch": {"index": k, "pairs": n, "seed": s}} runs one epoch of the engine (perfbench/measure/epoch_engine.py:
  each run is a group of its two arms; re-allocation, an untimed iteration, then n rounds in the order the seed
  draws, GC off), answering one {"pair": {...}} line per pair and {"epoch_done": {"recompiles": r,
  "relocated_mb": m, "seed": s, "seconds": t}} at the end. `perfbench ab --ops` adds {"op_epoch": {"index": k,
  "seed": s}}: one profiled iteration of every (run, arm), answered by {"op_pair": ...} lines
  (perfbench/measure/op_epochs.py).
- One arm (two processes): `model` is the arm's own from sys.path (the parent puts the arm's overlay first);
  {"ready": {arm: plans}, "model": {arm: path}} then {"iterate": run_id} answers one timed iteration.

Each iteration answers {"ttft_ms", "tpot_ms", "probe_ms"} (the host probe read just before the pair). The worker
ends when stdin closes. An error answers {"error": text, "arm": name, "stage": "startup" | "benchmark"} and
ends the process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from perfbench.measure.requests import requests, send_answer
from perfbench.results import RunSpec

if TYPE_CHECKING:
    from perfbench.measure.iteration import Iteration

ARMS = ("base", "head")
# which arm the worker is in and at what stage, so that an error names them (the parent records that arm failed)
WHERE: dict[str, str | None] = {"arm": None, "stage": "startup"}


def _timed(it: Iteration) -> dict[str, float | None]:
    return {"ttft_ms": it.ttft_ms, "tpot_ms": it.tpot_ms}


def serve_one_process(specs: list[RunSpec], out: Path, checkouts: dict[str, Path], reply: IO[str],
                      seed: int = 0) -> int:
    from perfbench.measure.arm_modules import ProcessState, RestorableState, load_arm
    from perfbench.measure.epoch_engine import EpochEngine, TimedUnit, allow_a_graph_per_unit
    from perfbench.measure.epochs import relocatable
    from perfbench.measure.host_probe import HostProbe
    from perfbench.measure.op_epochs import ProfiledUnit, serve_op_epoch
    from perfbench.measure.thread_budget import fit_threads_to_host

    allow_a_graph_per_unit(2 * len(specs))
    if specs:
        fit_threads_to_host(specs[0].device)  # before the state both arms start from is saved
    start = RestorableState.save()
    arms, prepared, imported, built = {}, {}, {}, {}
    import_began = time.perf_counter()
    for name in ARMS:  # imports first: an arm that changes process state at import is caught before any build
        start.restore()
        WHERE.update(arm=name, stage="startup")
        arms[name] = load_arm(name, checkouts[name])
        imported[name] = ProcessState.capture()
    import_s = time.perf_counter() - import_began
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
    send_answer(reply, {"ready": {name: {rid: p.result.plan.to_dict() for rid, p in runs.items()}
                                  for name, runs in prepared.items()},
                        "model": {name: arm.model_path for name, arm in arms.items()}, "pid": os.getpid(),
                        "startup": _startup_split(import_s, [p for runs in prepared.values() for p in runs.values()])})
    groups = [[TimedUnit(f"{rid}@{name}", prepared[name][rid].iterate,
                         prepared[name][rid].model if relocatable(
                             prepared[name][rid].spec.device,
                             "graph_mode" in prepared[name][rid].result.plan.effective_on()) else None,
                         arms[name].active)
               for name in ARMS] for rid in [s.run_id for s in specs]]

    def failed(unit: TimedUnit, err: BaseException, stage: str) -> None:
        WHERE.update(arm=unit.key.rpartition("@")[2], stage=stage)
        raise err

    probe = HostProbe(specs[0].seed) if specs and specs[0].device == "cpu" else None
    # relocation spacers follow from the job's seed (the parent's --seed), so a job can be replayed
    engine: EpochEngine[TimedUnit] = EpochEngine(groups, seed=seed, probe=probe, on_error=failed)
    profiled = {f"{rid}@{name}": ProfiledUnit(p.model, p.spec.device, out / "runs" / name / rid / "op_trace")
                for name, runs in prepared.items() for rid, p in runs.items()}
    for request in requests():
        if "op_epoch" in request:  # ab --ops (perfbench/measure/op_epochs.py)
            WHERE["stage"] = "benchmark"
            serve_op_epoch(engine, profiled, request["op_epoch"], reply)
            continue
        epoch = request["epoch"]
        WHERE["stage"] = "benchmark"
        half: dict[tuple[int, int], dict[str, Any]] = {}
        for sample in engine.epoch(epoch["pairs"], epoch["seed"]):
            rid, _, name = sample.unit.rpartition("@")
            timed = {**_timed(sample.iteration), "probe_ms": sample.probe_ms}
            other = half.pop((sample.round, sample.group), None)
            if other is None:
                half[(sample.round, sample.group)] = {"name": name, "timed": timed}
                continue
            send_answer(reply, {"pair": {"run_id": rid, "index": sample.round, "base_first": other["name"] == "base",
                                         name: timed, other["name"]: other["timed"]}})
        done = engine.epochs[-1]
        send_answer(reply, {"epoch_done": {"recompiles": done.recompiles, "relocated_mb": done.relocated_mb,
                                           "seed": done.seed, "seconds": round(done.seconds, 3)}})
    return 0


def _startup_split(import_s: float, runs: Iterable[Any]) -> dict[str, float]:
    """Where the worker's start-up went: importing both arms, building the models, their warm-up iterations, and
    of the warm-up the decode graphs' compile (the first decode step's excess)."""
    runs = list(runs)
    return {"import_s": round(import_s, 1),
            "build_s": round(sum(p.result.stages.build_s or 0.0 for p in runs), 1),
            "warmup_s": round(sum(p.result.stages.warmup_s or 0.0 for p in runs), 1),
            "compile_s": round(sum(p.result.summary.compile_s or 0.0 for p in runs), 1)}


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
        send_answer(reply, {**_timed(prepared[command["iterate"]].iterate()), "probe_ms": probe_ms})
    return 0


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
    parser.add_argument("--seed", type=int, default=0, help="the job's seed (relocation spacers)")
    args = parser.parse_args(argv)
    from perfbench.emulation.npu import activate_from_env  # the runner's --emulate-npu, before the model loads

    activate_from_env()
    specs = [RunSpec.from_dict(raw) for raw in json.loads(args.specs.read_text())]
    checkouts = dict(args.arm)
    with os.fdopen(args.reply_fd, "w") as reply:
        try:
            if len(checkouts) == 2:
                return serve_one_process(specs, args.out, checkouts, reply, args.seed)
            (name,) = checkouts
            return serve_one_arm(specs, args.out, name, reply)
        except Exception:  # noqa: BLE001 - the parent records the arm's failure and stops the job
            send_answer(reply, {"error": traceback.format_exc(), **WHERE})
            return 1


if __name__ == "__main__":
    sys.exit(main())
