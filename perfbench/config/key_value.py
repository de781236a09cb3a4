"""`KEY=NUMBER` values of repeatable command-line options (`compare --band`, `estimate --peak`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfbench.errors import UserError


def parse_key_number(text: str, option: str, keys: Sequence[str], form: str, valid: Callable[[float], bool],
                     requirement: str) -> tuple[str, float]:
    """(key, number) from `text`, or a one-line UserError naming `option`, the text and what is wrong.

    form: how the value is spelled in messages, e.g. "METRIC=FRACTION" (its left part names the key);
    valid / requirement: the check of the number and how a message states it ("must be positive")."""
    key, sep, value = text.partition("=")
    if not sep or key not in keys:
        name = form.partition("=")[0]
        raise UserError(f"{option} {text!r}: expected {form} with {name} one of {', '.join(keys)}")
    try:
        number = float(value)
    except ValueError:
        raise UserError(f"{option} {text!r}: {value!r} is not a number") from None
    if not valid(number):
        raise UserError(f"{option} {text!r}: {requirement}, got {number:g}")
    return key, number
