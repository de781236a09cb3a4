"""SIGINT and SIGTERM end a command alike: the stack unwinds (finally blocks stop workers, finished results are
already on disk), one line says what stopped it, and the exit code is the signal's own (128 + N: 130 for SIGINT,
143 for SIGTERM), never 0 (done) or 1 (regression / a run failed).

    with exit_on_signal("perfbench run"):      # the whole command: SIGTERM raises, any interrupt -> 130/143
        with sigterm_raises():                 # (re-entrant) only the SIGTERM -> exception part
            ...
    except KeyboardInterrupt as err: exit_code_of(err), interrupt_line(err)   # for code that stops by itself
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

from perfbench.terminal_text import escaped


class Interrupted(KeyboardInterrupt):
    """A signal that ends the command, raised where the program is; a KeyboardInterrupt so that every
    `except KeyboardInterrupt` (cleanup written for Ctrl-C) handles SIGTERM too."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def signum_of(err: BaseException) -> int:
    """The signal behind an interrupt: its own for Interrupted, SIGINT for a plain KeyboardInterrupt (Ctrl-C)."""
    return err.signum if isinstance(err, Interrupted) else int(signal.SIGINT)


def exit_code_of(err: BaseException) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended: 130 SIGINT, 143 SIGTERM."""
    return 128 + signum_of(err)


def signal_label(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def interrupt_line(err: BaseException, what: str = "perfbench") -> str:
    return f"{what}: interrupted by {signal_label(signum_of(err))} (exit {exit_code_of(err)})"


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises Interrupted(SIGTERM) like Ctrl-C raises KeyboardInterrupt; the
    previous handler comes back afterwards. Outside the main thread signal handling is left alone."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def exit_on_signal(what: str = "perfbench") -> Iterator[None]:
    """The command's outermost frame: SIGTERM raises, and an interrupt that reaches here (after the finally
    blocks inside have run) prints one line on stderr and exits with the signal's code."""
    with sigterm_raises():
        try:
            yield
        except KeyboardInterrupt as err:
            print(escaped(interrupt_line(err, what)), file=sys.stderr, flush=True)
            raise SystemExit(exit_code_of(err)) from None
