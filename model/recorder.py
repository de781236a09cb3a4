"""A recorder that the model's layers call on every forward and that does nothing until a harness switches it on.

The model's recorders (routing counts, the routing log) share this switch: `record` tests `enabled` first and
returns, so a recorder costs one attribute test when off; `recording()` empties it and turns it on for a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

R = TypeVar("R", bound="Recorder")


class Recorder:
    enabled: bool = False

    def clear(self) -> None:
        """Forget what was recorded."""
        raise NotImplementedError

    @contextlib.contextmanager
    def recording(self: R) -> Iterator[R]:
        """Records start empty and accumulate until the block ends; they stay readable after it."""
        self.clear()
        previous = self.enabled
        self.enabled = True
        try:
            yield self
        finally:
            self.enabled = previous
