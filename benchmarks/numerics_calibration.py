"""Calibrate the numerics check: the relative logit error (perfbench/measure/numerics.py) of every legit toggle
against the all-off model, and of planted 2-5 % kernel faults in each fused op family, per preset and dtype.

    python benchmarks/numerics_calibration.py --presets tiny small --dtypes float32 bfloat16 float16

Every run replays the all-off reference's greedy tokens and expert choices (model/replay.py), as the
harness's check does. Prints one markdown table per (preset, dtype): legit toggles first (they must pass), then
the planted faults (they must fail), then a rounding-only change per family (must pass). Not a timing benchmark.
Writes nothing; copy the tables into docs/numerics.md with the date and the machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model.modeling import Qwen3_5MoeForCausalLM  # noqa: E402
from model.replay import Capture, Replay  # noqa: E402
from perfbench.measure.numerics import compare_replayed  # noqa: E402
from perfbench.results import REL_ERROR_TOLERANCE  # noqa: E402
from tests.planted_faults import planted  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SIX = ["fused_rmsnorm", "fused_rope", "fused_attention", "chunk_gdr", "grouped_moe", "merged_projections"]
REFERENCE_OUTPUTS: list[torch.Tensor] = []  # the reference's branch outputs per forward
SHAPES = {"tiny": (2, 64, 8), "small": (2, 192, 8)}  # batch, prompt, new tokens (the small preset's default run)


def replayed_error(preset: str, dtype: torch.dtype, toggles: dict[str, bool] | str, replay: Replay,
                   reference: torch.Tensor, ids: torch.Tensor, seq_lens: torch.Tensor, new: int
                   ) -> tuple[float, str, bool]:
    model = Qwen3_5MoeForCausalLM.from_pretrained(preset, dtype=dtype, optimizations=toggles, seed=0)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + new)
    capture = Capture()
    _, logits = model.generate_padded(ids, seq_lens, cache, new, replay=replay, capture=capture)
    on = toggles == "none" or all(model.plan.on(t) for t, v in dict(toggles).items() if v)  # type: ignore[arg-type]
    assert logits is not None
    agreement = compare_replayed([t.outputs for t in capture.taps], REFERENCE_OUTPUTS, logits, reference, seq_lens)
    return agreement.max_rel_error, agreement.where, on


def calibrate(preset: str, dtype_name: str, factors: list[float]) -> None:
    dtype = DTYPES[dtype_name]
    batch, prompt, new = SHAPES[preset]
    ref_model = Qwen3_5MoeForCausalLM.from_pretrained(preset, dtype=dtype, optimizations="none", seed=0)
    gen = torch.Generator().manual_seed(7)
    prompts = torch.randint(0, ref_model.config.vocab_size, (batch, prompt), generator=gen).tolist()
    ids, seq_lens = ref_model.pad_prompts(prompts)
    capture = Capture()
    with ref_model.routing_log.recording() as log:
        tokens, reference = ref_model.generate_padded(ids, seq_lens, ref_model.new_cache(batch, prompt + new), new,
                                                      capture=capture)
    assert reference is not None
    replay = Replay.of(tokens, list(log.calls), ref_model.config.num_hidden_layers,
                       layer_inputs=[t.inputs for t in capture.taps])
    REFERENCE_OUTPUTS[:] = [t.outputs for t in capture.taps]
    del ref_model
    bound = REL_ERROR_TOLERANCE[dtype_name]
    print(f"\n### {preset}, {dtype_name} (bound {bound:g})\n\n| run | largest relative error | where | verdict |\n"
          "|---|---|---|---|")

    def row(label: str, toggles: dict[str, bool], family: str | None = None, factor: float | None = None,
            expect_fail: bool = False) -> None:
        try:
            if family is None:
                error, where, on = replayed_error(preset, dtype, toggles, replay, reference, ids, seq_lens, new)
            else:
                with planted(family, factor):
                    error, where, on = replayed_error(preset, dtype, toggles, replay, reference, ids, seq_lens,
                                                      new)
        except RuntimeError as err:  # e.g. no fp64 grouped matmul on CPU: that row cannot be measured here
            print(f"| {label} | not run | {str(err).splitlines()[0][:80]} | - |", flush=True)
            return
        caught = not error <= bound
        verdict = ("caught" if caught else "MISSED") if expect_fail else ("FALSE ALARM" if caught else "pass")
        state = "" if on else " (toggle inactive here)"
        print(f"| {label}{state} | {error:.2e} | {where} | {verdict} |", flush=True)

    for toggle in SIX:
        row(toggle, {toggle: True})
    row("six eager toggles", dict.fromkeys(SIX, True))
    row("six + graph_mode", {**dict.fromkeys(SIX, True), "graph_mode": True})
    for family in [*SIX, "graph_mode"]:
        toggles = ({**dict.fromkeys(SIX, True), "graph_mode": True} if family == "graph_mode"
                   else {family: True})
        for factor in factors:
            row(f"{family} planted x{factor:g}", toggles, family, factor, expect_fail=True)
        if family not in ("graph_mode",):
            row(f"{family} one precision up (rounding only)", toggles, family, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"], choices=sorted(SHAPES))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--factors", nargs="+", type=float, default=[1.02, 0.95])
    args = parser.parse_args()
    torch.manual_seed(0)
    for preset in args.presets:
        for dtype in args.dtypes:
            calibrate(preset, dtype, args.factors)


if __name__ == "__main__":
    main()
