"""The chunked gated delta rule on CPU: eager at chunk sizes 32 and 64, and the plan's `gdr_prefill_cpu` (chunk
terms compiled by inductor, chunk size from `gdn.chunk_size`), side by side in one process.

    python benchmarks/gdr_chunk.py [--reps 15]

Shapes: the tiny preset's GDN core (Hk 4, Hv 8, Dk = Dv = 32) and wider heads (Dk = Dv = 64 and 128), at
T 512 and 2048, with per-token log-decays g ~ -U(0, 3) (Qwen3.5-like fast-forgetting heads: within a chunk the
decay products span hundreds of e-folds, the regime where fp32 subnormals used to appear). Prints the median
time per candidate, the ratio 32 / 64 (what `gdn.chunk_size` encodes) and compiled / eager at the picked size.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _timing import interleaved, median_ms, table

from model.ops import gdn

SHAPES = [  # (B, T, Hk, Hv, D)
    (1, 512, 4, 8, 32), (4, 512, 4, 8, 32), (1, 2048, 4, 8, 32),
    (1, 512, 4, 8, 64), (1, 512, 2, 4, 128), (1, 2048, 2, 4, 128),
]


def inputs(B: int, T: int, Hk: int, Hv: int, D: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "q": F.normalize(torch.randn(B, T, Hk, D, generator=g), dim=-1),
        "k": F.normalize(torch.randn(B, T, Hk, D, generator=g), dim=-1),
        "v": torch.randn(B, T, Hv, D, generator=g),
        "g": -3.0 * torch.rand(B, T, Hv, generator=g),
        "beta": torch.rand(B, T, Hv, generator=g),
    }


def run_at(size: int, x: dict[str, torch.Tensor], D: int):
    def fn() -> None:
        original = gdn.chunk_size
        gdn.chunk_size = lambda _dk: size
        try:
            gdn.gdr_prefill_chunked(**x, scale=D ** -0.5)
        finally:
            gdn.chunk_size = original
    return fn


def run_compiled(x: dict[str, torch.Tensor], D: int):
    return lambda: gdn.gdr_prefill_cpu(**x, scale=D ** -0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    rows = []
    for B, T, Hk, Hv, D in SHAPES:
        x = inputs(B, T, Hk, Hv, D)
        s = interleaved({"C32": run_at(32, x, D), "C64": run_at(64, x, D), "compiled": run_compiled(x, D)},
                        reps=args.reps, warmup=2)
        c32, c64, comp = median_ms(s["C32"]), median_ms(s["C64"]), median_ms(s["compiled"])
        picked = gdn.chunk_size(D)
        rows.append([B, T, Hk, Hv, D, f"{c32:.2f}", f"{c64:.2f}", f"{c32 / c64:.2f}", picked, f"{comp:.2f}",
                     f"{comp / (c32 if picked == 32 else c64):.2f}"])
        print(table(rows[-1:], HEADER), flush=True)
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.reps} alternating reps")
    print(table(rows, HEADER))


HEADER = ["B", "T", "Hk", "Hv", "Dk=Dv", "eager C32 ms", "eager C64 ms", "C32/C64", "chunk_size() picks",
          "compiled ms", "compiled/eager"]

if __name__ == "__main__":
    main()
