"""SIGINT and SIGTERM alike: while a long command runs, either unwinds the command as an exception of its own, so
that what was measured is saved and its workers and worktrees are removed; the command then exits 128 + the
signal's number (130 for SIGINT, 143 for SIGTERM), never 0 or 1 (1 is a regression)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_as(make: Callable[[int, str], BaseException]) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM raise `make(128 + signum, signal name)`; the handlers before it are
    put back after (outside the main thread, where handlers cannot be set, nothing changes)."""

    def raise_interrupt(signum: int, frame: object) -> None:
        raise make(128 + signum, signal.Signals(signum).name)

    previous = {}
    try:
        for sig in INTERRUPTS:
            previous[sig] = signal.signal(sig, raise_interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
