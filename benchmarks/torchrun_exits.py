"""Clean exits of multi-rank generation: torchrun starts two CPU ranks (gloo) that each build the tiny model under
EP2 or TP2, generate a few tokens, and exit; every rank must exit 0, N times in a row per layout.

    python benchmarks/torchrun_exits.py --runs 50

A rank can abort at exit ("terminate called without an active exception", SIGABRT, then torchrun SIGTERMs its
peer and exits 1). model/parallel.py destroys the group it made at exit; on 2026-12-04 (AMD EPYC 2-core VM) that
alone did not stop the aborts (docs/numerics.md, "Process group teardown"). Not a timing benchmark: it counts
exit codes, and prints each failure's exit codes and signals, then one line per layout: clean runs of N.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {
    "EP2": {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 1, "embed_tp_size": 2, "lmhead_tp_size": 2,
            "shared_tp_size": 1},
    "TP2": {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2,
            "shared_tp_size": 2},
}
RANK = """
import sys, torch
from model.modeling import Qwen3_5MoeForCausalLM
torch.set_num_threads(1)
model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=2, parallel_config={layout}, seed=0)
out = model.generate([[3, 5, 7, 11], [2, 4]], max_new_tokens=3)
assert len(out.tokens[0]) == 3
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        for name, layout in LAYOUTS.items():
            script = Path(tmp) / f"rank_{name}.py"
            script.write_text(RANK.format(layout=layout))
            codes: Counter[int] = Counter()
            for _ in range(args.runs):
                proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                       "--nproc-per-node", "2", str(script)], env=env, capture_output=True,
                                      text=True, timeout=300)
                codes[proc.returncode] += 1
                if proc.returncode:
                    why = [line.strip() for line in proc.stderr.splitlines()
                           if any(w in line for w in ("exitcode", "Error", "error:", "terminate", "Signal"))]
                    print(f"{name}: exit {proc.returncode}: {' | '.join(why[-4:])[:400]}", flush=True)
            failed = {code: n for code, n in codes.items() if code}
            print(f"{name}: {codes[0]} of {args.runs} clean exits; failures by exit code: {failed or 'none'}",
                  flush=True)


if __name__ == "__main__":
    main()
