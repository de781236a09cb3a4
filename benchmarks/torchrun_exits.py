"""Clean exits of multi-rank generation: torchrun starts two CPU ranks (gloo) that each build the tiny model under
EP2 or TP2, generate a few tokens, and exit; every rank must exit 0, N times in a row per layout.

    python benchmarks/torchrun_exits.py --runs 50

A rank can abort at exit ("terminate called without an active exception", SIGABRT, then torchrun SIGTERMs its
peer and exits 1). On 2026-12-04 (AMD EPYC 2-core VM) an atexit `destroy_process_group` did not stop the aborts
(docs/numerics.md, "Process group teardown"); every rank entry point now ends with `model.parallel.finish`
(barrier, destroy, gc, flush, done marker, os._exit). Each rank here is a user's script as model/parallel.py
documents it: `main()` generates and writes its tokens, then `finish(rc, flush=[...], done=...)`. The perfbench
sweep worker, verify's rank worker and the tests' rank workers end with the same call.

A run is clean when torchrun exits 0 and every rank left its tokens and its done marker ("0"). Not a timing
benchmark: it counts exit codes, prints each failure's exit codes and signals (or what is missing), then one line
per layout: clean runs of N.
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
MISSING = -1000  # the key of runs that exited 0 without every result file and done marker
LAYOUTS = {
    "EP2": {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 1, "embed_tp_size": 2, "lmhead_tp_size": 2,
            "shared_tp_size": 1},
    "TP2": {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2,
            "shared_tp_size": 2},
}
RANK = """
import json, os, sys
from pathlib import Path
import torch
from model import parallel
from model.modeling import Qwen3_5MoeForCausalLM


def main(results) -> int:
    torch.set_num_threads(1)
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=2, parallel_config={layout}, seed=0)
    out = model.generate([[3, 5, 7, 11], [2, 4]], max_new_tokens=3)
    assert len(out.tokens[0]) == 3
    results.write(json.dumps(out.tokens))
    return 0


if __name__ == "__main__":
    out, rank = Path(sys.argv[1]), os.environ["RANK"]
    results = open(out / f"rank{{rank}}.json", "w")  # left open: finish flushes it
    try:
        rc = main(results)
    except Exception as exc:
        parallel.finish(exc)
    parallel.finish(rc, flush=[results], done=out / f"rank{{rank}}.done")
"""


def missing_results(out: Path, ranks: int) -> list[str]:
    """What a clean job leaves in `out` and this one did not: each rank's tokens and its done marker "0"."""
    missing = []
    for rank in range(ranks):
        result, done = out / f"rank{rank}.json", out / f"rank{rank}.done"
        if not result.exists() or not result.read_text().startswith("[["):
            missing.append(f"{result.name} missing or empty")
        if not done.exists() or done.read_text() != "0\n":
            missing.append(f"{done.name} missing or not 0")
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--layouts", nargs="+", choices=sorted(LAYOUTS), default=sorted(LAYOUTS))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.layouts:
            script = Path(tmp) / f"rank_{name}.py"
            script.write_text(RANK.format(layout=LAYOUTS[name]))
            codes: Counter[int] = Counter()
            for number in range(args.runs):
                out = Path(tmp) / f"{name}-{number}"
                out.mkdir()
                proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                       "--nproc-per-node", "2", str(script), str(out)], env=env,
                                      capture_output=True, text=True, timeout=300)
                missing = missing_results(out, ranks=2)
                codes[proc.returncode if proc.returncode or not missing else MISSING] += 1
                if proc.returncode:
                    why = [line.strip() for line in proc.stderr.splitlines()
                           if any(w in line for w in ("exitcode", "Error", "error:", "terminate", "Signal"))]
                    print(f"{name}: exit {proc.returncode}: {' | '.join(why[-4:])[:400]}", flush=True)
                elif missing:
                    print(f"{name}: exit 0, but {'; '.join(missing)}", flush=True)
            failed = {("results missing" if code == MISSING else code): n for code, n in codes.items() if code}
            print(f"{name}: {codes[0]} of {args.runs} clean exits; failures by exit code: {failed or 'none'}",
                  flush=True)


if __name__ == "__main__":
    main()
