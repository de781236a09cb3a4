"""One rank of a parallel-parity run, started by torchrun from tests/model/test_parallel.py.

    python -m torch.distributed.run --nproc-per-node W tests/model/parallel_worker.py --cases cases.json --out DIR

Every case of cases.json ({name, model, num_layers, parallel, optimizations}) is built with the same dummy
weights (seed 0) and greedily generates from the same ragged prompts; rank r writes DIR/<name>/rank<r>.pt with
{"tokens", "logits", "expert_counts"} (the MoE routing counts, summed over the EP group).
The cases share one process group, so one launch covers several layouts.
`--raise-on-rank R` makes rank R fail after the model is built, while the others wait in a collective.
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
from model.parallel import finish


def run_case(case: dict, prompts: list[list[int]], new_tokens: int, out: Path) -> None:
    model = Qwen3_5MoeForCausalLM.from_pretrained(
        case["model"], num_layers=case.get("num_layers"), dummy_weights=True, seed=0,
        optimizations=case.get("optimizations", "none"), parallel_config=case["parallel"])
    with model.expert_counts.recording():
        result = model.generate(prompts, max_new_tokens=new_tokens)
    counts = model.expert_counts.totals()
    folder = out / case["name"]
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"tokens": result.tokens, "logits": result.logits, "expert_counts": counts},
               folder / f"rank{dist.get_rank()}.pt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--raise-on-rank", type=int, default=None)
    args = parser.parse_args()
    spec = json.loads(args.cases.read_text())
    torch.set_num_threads(1)
    for case in spec["cases"]:
        if args.raise_on_rank is not None:
            Qwen3_5MoeForCausalLM.from_pretrained(case["model"], num_layers=case.get("num_layers"),
                                                  dummy_weights=True, parallel_config=case["parallel"])
            if dist.get_rank() == args.raise_on_rank:
                raise RuntimeError(f"injected failure on rank {args.raise_on_rank}")
            dist.barrier()  # the other ranks block here until torchrun tears the job down
            continue
        run_case(case, spec["prompts"], spec["new_tokens"], args.out)


if __name__ == "__main__":
    # as a user's script ends (model/parallel.py, `finish`): a rank that raises exits 1 with its traceback; the
    # others meet, destroy the group and leave with os._exit, so no interpreter shutdown runs beside gloo's threads
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - any failure ends this rank, traceback printed, exit 1
        finish(exc)
    finish(0)
