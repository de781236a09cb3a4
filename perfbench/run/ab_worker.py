"""One arm's process in `perfbench ab`: it builds every run of the scenario once and then times one iteration
at a time, on request.

`python -m perfbench.run.ab_worker --reply-fd N --specs FILE --out DIR` runs with the arm's checkout first on
sys.path, so `model` is the arm's code while `perfbench` is the current harness (perfbench/run/arms.py). It
prepares every spec in FILE (perfbench/run/measure.py steps 1-2), answers one JSON line on fd N
({"ready": {run_id: plan states}, "model": path of the model package}), then reads commands on stdin, one JSON
line each: {"iterate": run_id} answers {"ttft_ms", "tpot_ms", "probe_ms"} of one timed iteration (the host probe
read just before it). It ends when stdin closes. An error answers {"error": text} and ends the process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import IO, Any

from perfbench.results import RunSpec


def _send(reply: IO[str], payload: dict[str, Any]) -> None:
    reply.write(json.dumps(payload) + "\n")
    reply.flush()


def serve(specs: list[RunSpec], out: Path, reply: IO[str]) -> int:
    import model  # noqa: PLC0415 - the arm's model package, from its own checkout
    from perfbench.run.host_probe import HostProbe  # noqa: PLC0415
    from perfbench.run.measure import prepare_run  # noqa: PLC0415

    prepared = {s.run_id: prepare_run(s, out / "runs" / s.run_id) for s in specs}
    probe = HostProbe(specs[0].seed) if specs and specs[0].device == "cpu" else None
    _send(reply, {"ready": {rid: p.result.plan.to_dict() for rid, p in prepared.items()},
                  "model": str(Path(model.__file__).resolve().parent), "pid": os.getpid()})
    for line in sys.stdin:
        command = json.loads(line)
        run = prepared[command["iterate"]]
        probe_ms = probe() if probe is not None else None
        it = run.iterate()
        tpot = sum(it.step_s) / len(it.step_s) * 1e3 if it.step_s else None
        _send(reply, {"ttft_ms": it.ttft_s * 1e3, "tpot_ms": tpot, "probe_ms": probe_ms})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbench.run.ab_worker", description=__doc__.splitlines()[0])
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--specs", type=Path, required=True, help="a JSON list of RunSpec objects")
    parser.add_argument("--out", type=Path, required=True, help="the arm's folder (compile cache, run folders)")
    args = parser.parse_args(argv)
    from perfbench.emulation.npu import activate_from_env  # the runner's --emulate-npu, before the model loads

    activate_from_env()
    specs = [RunSpec.from_dict(raw) for raw in json.loads(args.specs.read_text())]
    with os.fdopen(args.reply_fd, "w") as reply:
        try:
            return serve(specs, args.out, reply)
        except Exception:  # noqa: BLE001 - the parent records the arm's failure and stops the job
            _send(reply, {"error": traceback.format_exc()})
            return 1


if __name__ == "__main__":
    sys.exit(main())
