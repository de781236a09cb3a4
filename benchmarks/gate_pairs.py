"""The gate on identical code, and on a planted slowdown, end to end (a benchmark: it times real runs).

    python benchmarks/gate_pairs.py [--pairs 10] [--hog] [--scenario ci_smoke] [--out /tmp/gate-pairs]
    python benchmarks/gate_pairs.py --planted 0.3 [--out /tmp/gate-planted]

Pairs: `perfbench run SCENARIO` twice back to back at this checkout's HEAD, then
`perfbench gate --baseline FIRST --current SECOND` as CI runs it (CI=true, so `--confirm` is on). With `--hog`,
a process spinning on one core runs during one run of each pair (the first run in even pairs, the second in odd
ones). Prints each pair's exit code and how its checks ended, then how many pairs exited 0; the same gate without
`--confirm` is run too, for comparison (what a gate that trusts absolute timings would have said).

Planted: a commit on top of HEAD whose model forward is slower by the factor (benchmarks/planted.py); the
scenario is run at HEAD (the baseline folder) and at the planted commit (the current folder), each from its own
worktree, then the gate with `--confirm` must exit 1 and name the ab pairs that confirmed the regression.

Needs a clean working tree (the folders record the commit they ran at) and a quiet machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from planted import commit_plant  # (this folder is on sys.path: the script runs from it)

REPO = Path(__file__).resolve().parents[1]


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        pass


def run_scenario(tree: Path, scenario: str, out: Path, hog: bool) -> float:
    """`perfbench run` from `tree`'s code (its commit is what the folder records); wall seconds."""
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True) if hog else None
    if spinner is not None:
        spinner.start()
    start = time.perf_counter()
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, "-m", "perfbench.cli", "run", scenario, "--out", str(out)], cwd=tree,
                              env=env, capture_output=True, text=True, check=False)
    finally:
        if spinner is not None:
            stop.set()
            spinner.join()
    if done.returncode != 0:
        raise SystemExit(f"perfbench run {scenario} --out {out} exited {done.returncode}:\n{done.stdout[-3000:]}"
                         f"\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def gate(baseline: Path, current: Path, confirm: bool) -> tuple[int, str]:
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "perfbench.cli", "gate", "--baseline", str(baseline), "--current",
                           str(current), "--confirm" if confirm else "--no-confirm"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def statuses(text: str) -> Counter[str]:
    """How the gate's checks ended, counted from its report lines (PASS/FAIL/INCONCLUSIVE/UNCONFIRMED ...)."""
    words = ("PASS", "FAIL", "INCONCLUSIVE", "UNCONFIRMED", "SKIP")
    return Counter(line.split()[0] for line in text.splitlines() if line.split() and line.split()[0] in words)


def pairs(args: argparse.Namespace) -> int:
    out = Path(args.out)
    passed = 0
    for pair in range(args.pairs):
        first, second = out / f"pair{pair}-a", out / f"pair{pair}-b"
        hog_first = args.hog and pair % 2 == 0
        hog_second = args.hog and pair % 2 == 1
        wall = (run_scenario(REPO, args.scenario, first, hog_first),
                run_scenario(REPO, args.scenario, second, hog_second))
        code, text = gate(first, second, confirm=True)
        plain, plain_text = gate(first, second, confirm=False)
        passed += code == 0
        hog = "first" if hog_first else "second" if hog_second else "none"
        print(f"pair {pair}: hog {hog}; runs {wall[0]:.0f} s, {wall[1]:.0f} s; gate --confirm exit {code} "
              f"{dict(statuses(text))}; without --confirm exit {plain} {dict(statuses(plain_text))}", flush=True)
        if code != 0:
            print(text[-4000:], flush=True)
    print(f"gate exit 0 in {passed} of {args.pairs} pairs")
    return 0 if passed == args.pairs else 1


def planted(args: argparse.Namespace) -> int:
    out = Path(args.out)
    parent, head = commit_plant(REPO, args.planted)
    print(f"planted +{args.planted:.0%} as {head[:12]} on {parent[:12]}", flush=True)
    with tempfile.TemporaryDirectory(prefix="perfbench-gate-") as tmp:
        trees = {}
        for name, sha in (("base", parent), ("head", head)):
            trees[name] = Path(tmp) / name
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(trees[name]), sha],
                           check=True)
        try:
            base_s = run_scenario(trees["base"], args.scenario, out / "base", hog=False)
            head_s = run_scenario(trees["head"], args.scenario, out / "head", hog=False)
            start = time.perf_counter()
            code, text = gate(out / "base", out / "head", confirm=True)
            gate_s = time.perf_counter() - start
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    print(text)
    print(f"runs {base_s:.0f} s and {head_s:.0f} s; gate --confirm exit {code} in {gate_s:.0f} s "
          f"(the planted commit {head} stays in the object store, on no branch)")
    return 0 if code == 1 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--hog", action="store_true", help="spin one core during one run of each pair")
    parser.add_argument("--planted", type=float, default=None, help="a planted slowdown factor (0.3: +30%%)")
    parser.add_argument("--scenario", default="ci_smoke")
    parser.add_argument("--out", default="/tmp/gate-pairs")
    args = parser.parse_args()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit("the working tree has uncommitted changes: the folders would record a dirty commit")
    return planted(args) if args.planted is not None else pairs(args)


if __name__ == "__main__":
    sys.exit(main())
