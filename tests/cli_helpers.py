"""Assertions shared by the CLI tests."""

from __future__ import annotations

from click.testing import Result


def one_error_line(result: Result) -> str:
    """The CLI's single `error:` line on stderr with exit code 2; fails on anything else (a traceback, several
    lines, another exit code)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]
