"""The emulation label of a report section whose numbers come from NPU-emulated runs (CPU timings)."""

from __future__ import annotations

from collections.abc import Sequence

from perfbench.pages.page import Text
from perfbench.results import RunResult


def emulation_note(results: Sequence[RunResult]) -> Text | None:
    """A note naming the emulation when any run was NPU-emulated ("emulated npu (910b)"), else None."""
    labels = sorted({r.env.emulation for r in results if r.env.emulation})
    if not labels:
        return None
    return Text(f"Emulation: {', '.join(labels)}. These numbers are CPU timings of the NPU emulator, not NPU "
                "measurements.")
