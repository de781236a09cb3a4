"""Does this host hold its speed? The tiny model's iterations next to the host-speed probe, in one process.

    python benchmarks/host_speed.py [--iterations 30] [--threads N] [--toggles none|all]

Prints per iteration the TTFT, the TPOT (mean decode step) and the probe of perfbench/measure/host_probe.py timed
just before it; then each series' spread (p90 / p10 - 1) and the rank correlation of the probe with TTFT and
TPOT. On a quiet machine of its own every spread is a few percent. When the host changes speed under other
tenants, the model's times and the probe should move together: the spreads large and the correlations
positive. This is the check a probe must pass before its spread can decide a run's stability verdict.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch
from scipy.stats import spearmanr

from model.backend import detect_capabilities
from perfbench.measure.environment import cpu_model
from perfbench.measure.host_probe import HostProbe, speed_change
from perfbench.measure.run_steps import build_model, make_workload, run_iteration
from perfbench.results import RunSpec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--toggles", choices=("none", "all"), default="none")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"host: {cpu_model()} ({platform.machine()}), torch {torch.__version__}, {args.threads} threads; "
          f"tiny preset, B=1, prompt 256, 16 new tokens, toggles {args.toggles}")
    spec = RunSpec(run_id="host_speed", scenario="host_speed", input_len=256, exe_mode="eager")
    model = build_model(spec, detect_capabilities("cpu"), args.toggles)
    workload = make_workload(spec, model.config.vocab_size)
    ids, seq_lens = model.pad_prompts(workload.prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + workload.output_len)
    probe = HostProbe()
    for _ in range(2):
        run_iteration(model, ids, seq_lens, cache, workload.output_len)
    rows: list[tuple[float, float, float]] = []
    print(f"{'iter':>4} {'probe ms':>9} {'TTFT ms':>9} {'TPOT ms':>9}")
    for i in range(args.iterations):
        probe_ms = probe()
        it = run_iteration(model, ids, seq_lens, cache, workload.output_len)
        rows.append((probe_ms, it.ttft_s * 1e3, sum(it.step_s) / len(it.step_s) * 1e3))
        print(f"{i:>4} {rows[-1][0]:>9.2f} {rows[-1][1]:>9.1f} {rows[-1][2]:>9.2f}", flush=True)
    probe_ms, ttft, tpot = (list(col) for col in zip(*rows, strict=True))
    for name, values in (("probe", probe_ms), ("TTFT", ttft), ("TPOT", tpot)):
        print(f"{name:>5}: spread (p90/p10 - 1) {speed_change(values):.1%}, min {min(values):.2f}, "
              f"max {max(values):.2f}")
    for name, values in (("TTFT", ttft), ("TPOT", tpot)):
        rho, p = spearmanr(probe_ms, values)
        print(f"probe vs {name}: Spearman rho {rho:+.2f} (p = {p:.2g})")


if __name__ == "__main__":
    main()
