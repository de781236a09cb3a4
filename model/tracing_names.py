"""Names of the model's profiler ranges, without torch (trace parsers read them offline).

Every range is named `pb|key=value|key=value` so a trace parser can recover phase, layer, layer type and module
from the enclosing ranges of any op.
"""

from __future__ import annotations

PREFIX = "pb|"


def scope_name(**fields: object) -> str:
    return PREFIX + "|".join(f"{k}={v}" for k, v in fields.items())


def parse_scope(name: str) -> dict[str, str]:
    """`pb|phase=decode|step=3` -> {"phase": "decode", "step": "3"}; {} for other names."""
    if not name.startswith(PREFIX):
        return {}
    out: dict[str, str] = {}
    for part in name[len(PREFIX):].split("|"):
        key, _, value = part.partition("=")
        if key:
            out[key] = value
    return out
