"""One rank of verify's parallel item, started by torchrun (parallel.py):

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m perfbench.tools.verify.rank_worker SPEC

SPEC (JSON) names the model's config.json, the prompts, the all-off model's greedy tokens and the cases
({name, parallel, toggles, exe_mode}). Every rank builds each case's model on its devices and decodes the tokens
teacher-forced, replaying the reference's experts and layer inputs; each rank writes `<case>.rank<R>.pt` (logits
and layer outputs), rank 0 `<case>.json` (plan). A failing case writes
`<case>.rank<R>.error.json` (op, call, error, traceback) and ends the job: the other ranks would wait in a
collective. Each rank keeps the call it is about to make in `rank<R>.stage`, so a rank that dies is reported
with what it was doing.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from model.backend import detect_capabilities, dist_backend
from model.modeling import Qwen3_5MoeForCausalLM
from model.parallel import finish, local_rank, set_local_device
from perfbench.emulation.npu import activate_from_env, tensor_device
from perfbench.measure.routing_flips import routing_from_tensors
from perfbench.tools.verify.failures import NpuCallRecorder, describe
from perfbench.tools.verify.numerics import ROUTING_FILE, forced_pass


def _stage(out: Path, rank: int, text: str) -> None:
    (out / f"rank{rank}.stage").write_text(text)


def main(spec_path: Path) -> int:
    activate_from_env()  # PERFBENCH_EMULATE_NPU: the emulator (and its injected faults) before the model
    spec = json.loads(spec_path.read_text())
    out = Path(spec["out"])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    caps = detect_capabilities("npu")
    _stage(out, rank, f"init_process_group(backend={dist_backend('npu')!r})")
    set_local_device("npu")
    dist.init_process_group(backend=dist_backend("npu"))
    tensors = load_file(str(out / ROUTING_FILE))
    routing = routing_from_tensors(tensors)
    layer_inputs = [tensors[f"tap.{i}.inputs"] for i in range(int(tensors["tap.count"]))]
    for case in spec["cases"]:
        recorder = NpuCallRecorder() if case["exe_mode"] == "eager" else None
        call = (f"Qwen3_5MoeForCausalLM.from_pretrained(..., optimizations={case['toggles']}, "
                f"parallel_config={case['parallel']}, exe_mode={case['exe_mode']!r})")
        try:
            _stage(out, rank, f"{case['name']}: {call}")
            exe_mode = "ge_graph" if case["exe_mode"] == "eager" else case["exe_mode"]
            model = Qwen3_5MoeForCausalLM.from_pretrained(
                spec["model"], dtype=torch.bfloat16, device=tensor_device("npu"), optimizations=case["toggles"],
                parallel_config=case["parallel"], dummy_weights=True, seed=0, caps=caps, exe_mode=exe_mode)
            _stage(out, rank, f"{case['name']}: teacher-forced decode of {len(spec['tokens'])} prompts")
            with recorder or contextlib.nullcontext():
                forced = forced_pass(model, spec["tokens"], spec["prompts"], routing, layer_inputs)
            # every rank's logits and layer outputs: each is compared with world size 1 (parallel.py)
            torch.save({"logits": forced.logits, "outputs": forced.outputs}, out / f"{case['name']}.rank{rank}.pt")
            if rank == 0:
                plan = {n: {"state": d.state, "reason": d.reason, "impl": d.impl}
                        for n, d in model.plan.decisions.items()}
                (out / f"{case['name']}.json").write_text(json.dumps(plan))
            del model
            gc.collect()
        except Exception as exc:  # noqa: BLE001 - recorded for the parent, then the job ends
            failure = describe(exc, recorder)
            record = {"case": case["name"], "rank": rank, "op": failure.op, "call": failure.call,
                      "error": failure.error, "traceback": traceback.format_exc()}
            (out / f"{case['name']}.rank{rank}.error.json").write_text(json.dumps(record))
            sys.stderr.write(record["traceback"])
            return 1  # the job ends: finish skips the barrier, torchrun stops the ranks waiting for this one
    _stage(out, rank, "done: finish (final all_reduce, group destroyed)")
    return 0


def _barrier() -> None:
    # every rank is done before any leaves (dist.barrier asks for an accelerator the emulator does not register)
    dist.all_reduce(torch.zeros(1, device=tensor_device(f"npu:{local_rank()}")))


if __name__ == "__main__":
    # model.parallel.finish: barrier, destroy the group, flush, os._exit, so no interpreter shutdown runs beside a
    # live gloo thread (a rank aborted there now and then: "terminate called without an active exception")
    finish(main(Path(sys.argv[1])), barrier=_barrier)
