"""Text read from a file, made safe to print on a terminal.

A result folder, a verify bundle or a scenario is often someone else's (attached to an issue, committed as a
baseline), so its strings must not drive the reader's terminal: an escape sequence (ESC [2J clears the screen,
ESC ]0; retitles the window, ESC ]8; plants a hidden hyperlink) or a line break that forges a line of the output
("result: PASS ..."). Every string that comes from a file goes through `escaped` before it is printed: C0 and
C1 control characters, DEL, and the Unicode format characters that reorder or hide text (bidi overrides,
zero-width marks) are written as visible escapes, repr-style (\\x1b, \\n, \\u202e). `printable` does the same to a
whole block of output but keeps its line breaks and tabs: the last guard at the place a block is printed.
"""

from __future__ import annotations

import re
import unicodedata

import click

# C0 controls, DEL, C1 controls
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_KEEPING_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # tabs and line breaks kept
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def _hidden(text: str) -> bool:
    # Cf: format characters (U+202E right-to-left override, U+200B zero-width space, ...); Cs: lone surrogates
    return any(ord(c) > 0x9F and unicodedata.category(c) in ("Cf", "Cs") for c in text)


def _unhide(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if ord(c) > 0x9F and unicodedata.category(c) in ("Cf", "Cs") else c
                   for c in text)


def escaped(value: object) -> str:
    """`value` as one printable line: control characters, line breaks and hidden format characters escaped."""
    text = _CONTROL.sub(lambda m: _escape(m.group()), str(value))
    return _unhide(text) if _hidden(text) else text


def printable(value: object) -> str:
    """A block of output with its line breaks and tabs kept, every other control or hidden character escaped."""
    text = _CONTROL_KEEPING_LINES.sub(lambda m: _escape(m.group()), str(value))
    return _unhide(text) if _hidden(text) else text


def echo(text: object = "", err: bool = False, nl: bool = True) -> None:
    """`click.echo` of a block of output, through `printable`: the one way perfbench's commands print."""
    click.echo(printable(text), err=err, nl=nl)
