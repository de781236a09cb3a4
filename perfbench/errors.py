"""User-facing errors: the CLI prints these as one line (`error: ...`) and exits 2, never a traceback."""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user (scenario, path, option). The message names what is wrong and, if possible, the fix."""
