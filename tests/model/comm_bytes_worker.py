"""One rank of the cost-model communication check, started by torchrun from tests/model/test_cost_comm.py.

    python -m torch.distributed.run --nproc-per-node 2 tests/model/comm_bytes_worker.py --spec spec.json --out f.json

Builds the tiny preset with the spec's parallel layout and toggles, records every collective of one prefill and
of one decode step with model/ops/comm.record_comm, and (rank 0) writes {phase: {op: [calls, payload bytes]}}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a script

from model import Qwen3_5MoeForCausalLM
from model.ops import comm
from model.parallel import finish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spec = json.loads(args.spec.read_text())
    torch.set_num_threads(1)
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=spec["num_layers"], dummy_weights=True,
                                                  seed=0, optimizations=spec["optimizations"],
                                                  parallel_config=spec["parallel"])
    ids, seq_lens = model.pad_prompts(spec["prompts"])
    cache = model.new_cache(ids.shape[0], ids.shape[1] + 2)
    with comm.record_comm() as prefill:
        tokens = model.prefill(ids, seq_lens, cache).argmax(-1)
    with comm.record_comm() as decode:
        model.decode_step(tokens, cache)
    if dist.get_rank() == 0:
        out = {phase: {op: [calls, nbytes] for op, (calls, nbytes, _) in log.totals().items()}
               for phase, log in (("prefill", prefill), ("decode", decode))}
        args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
    finish(0)  # barrier, destroy the group, flush, os._exit (model/parallel.py)
