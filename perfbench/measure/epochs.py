"""Re-allocation epochs: the cheap cluster of a paired measurement inside one process.

One process is one sample of memory layout: where the weights landed (page offsets, 2 MB alignment for
transparent huge pages, cache-set conflicts) stays fixed for all its pairs, so pairs alone cannot show how much
the layout moves a comparison (Curtsinger & Berger, "Stabilizer", ASPLOS 2013). Every few pairs (an epoch),
each arm's parameters and buffers are copied to new storage behind spacers of random size (one of up to 2 MB
first, for huge-page alignment, then up to 4 KB before each tensor, for page offsets), which puts them at other
offsets; the spacers are kept until the next epoch so the shift holds (a few MB per arm). The data and the
module structure are unchanged (the same Parameter objects hold the new storage), so compiled graphs that take
the weights as inputs do not recompile; the caller runs one untimed iteration of each arm after it.
"""

from __future__ import annotations

import random

import torch

FIRST_SPACER_BYTES = 1 << 21  # up to one 2 MB huge page
SPACER_BYTES = 1 << 12  # up to one 4 KB page between tensors


def relocatable(device: str, graph_mode: bool) -> bool:
    """Whether a model's weights may move between epochs: on CPU (inductor takes the weights as graph inputs), and
    eager on an accelerator. A captured accelerator graph may hold the weights' addresses (torchair's
    frozen_parameter on NPU, CUDA graphs' static inputs): moving them would make it replay on freed memory, or
    record again every epoch, so those runs keep their layout (one sample per process, as before epochs)."""
    return device == "cpu" or not graph_mode


class Relocator:
    """Moves one model's weights to fresh storage each epoch; holds the spacers of the current epoch."""

    def __init__(self, module: torch.nn.Module, seed: int) -> None:
        self.module = module
        self.rng = random.Random(seed)
        self.spacers: list[torch.Tensor] = []

    def relocate(self) -> int:
        """New storage for every parameter and buffer; returns the bytes moved."""
        old, self.spacers = self.spacers, []
        moved = 0
        with torch.no_grad():
            for i, tensor in enumerate((*self.module.parameters(), *self.module.buffers())):
                size = self.rng.randrange(64, FIRST_SPACER_BYTES if i == 0 else SPACER_BYTES)
                self.spacers.append(torch.empty(size, dtype=torch.uint8, device=tensor.device))
                tensor.data = tensor.data.clone()
                moved += tensor.numel() * tensor.element_size()
        del old  # the previous epoch's spacers go only now, so their holes do not take the new copies
        return moved
