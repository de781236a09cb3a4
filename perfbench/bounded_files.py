"""Reading files someone else wrote: a size cap checked before anything is read, and JSON whose nesting is capped
without recursion blowing up. Every refusal is a one-line UserError naming the file.

Size: the file's size (stat) against the cap, then a read of at most cap + 1 bytes (a file that grows, or a
.gz that inflates past the cap, is refused too), so a 2 GB sparse file costs no memory. Depth: a linear scan
of the raw text's brackets (outside strings) before parsing; Python's decoder would recurse once per level and the
code reading the result (repr, pandas) too.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import re
import zlib
from collections import Counter
from pathlib import Path
from typing import IO, Any

import numpy as np

from perfbench.errors import UserError

# NOTE: orjson parses ~25% faster than the stdlib; it is optional and gives the same result.
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

MiB = 1024**2
TRACE_BYTES = 1024 * MiB  # a profiler's trace or table (chrome trace, kernel_details.csv, communication.json)
METADATA_BYTES = 64 * MiB  # a small record (profiler_info.json, summary.json, scenario.json, baseline.json)
_CHUNK = 16 * MiB
MAX_DEPTH = 256  # a trace nests ~5 levels, a summary ~6; far below Python's recursion limit
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
# a \uD800-\uDFFF escape: half of a surrogate pair, or (alone) text no UTF-8 writer can write back
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def size_text(n: int) -> str:
    return f"{n / MiB:,.1f} MiB" if n >= MiB else f"{n:,} bytes"


def check_size(path: Path, cap: int) -> int:
    """The file's size; UserError when it is over `cap` (before a byte is read)."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None
    if size > cap:
        raise UserError(f"{path}: {size_text(size)}, over the {size_text(cap)} this reader takes")
    return size


def read_capped_stream(handle: IO[bytes] | gzip.GzipFile, cap: int, where: str) -> bytes:
    """At most `cap` bytes of an open stream (a .gz, a tar member); UserError past the cap."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = handle.read(min(_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        total += len(chunk)
        if total > cap:
            raise UserError(f"{where}: over the {size_text(cap)} this reader takes")


def hash_capped(path: Path, cap: int, digest: Any) -> None:
    """Feed `path`'s bytes to `digest` (a hashlib object) in chunks: its size is checked against `cap` first and
    the read stops past it (a file that grows), so hashing a 3 GB file costs one chunk of memory, not 3 GB."""
    check_size(path, cap)
    total = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(MiB):  # read(n) allocates n bytes up front, even at the end of a file
                total += len(chunk)
                if total > cap:
                    raise UserError(f"{path}: over the {size_text(cap)} this reader takes")
                digest.update(chunk)
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None


def read_capped(path: Path, cap: int) -> bytes:
    """The bytes of `path` (inflated, for a .gz), refused past `cap`."""
    check_size(path, cap)
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as handle:
            return read_capped_stream(handle, cap, str(path))
    except (OSError, EOFError) as err:
        raise UserError(f"{path}: cannot read ({err})") from None
    except zlib.error as err:  # a corrupt deflate stream inside a well-formed gzip header
        raise UserError(f"{path}: cannot read (corrupt gzip data: {err})") from None


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of JSON text nest, by a linear scan of its brackets outside strings (no
    recursion, no parse): escapes are dropped, then everything but quotes and brackets, then the brackets inside
    strings (after an odd number of quotes)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:  # the common case: too few brackets to nest that deep
        return 0
    kept = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    chars = np.frombuffer(kept, dtype=np.uint8)
    deepest, depth, inside = 0, 0, 0
    for begin in range(0, len(chars), _CHUNK):  # in chunks: a big trace's arrays stay small
        part = chars[begin:begin + _CHUNK]
        quoted = np.bitwise_xor.accumulate((part == ord('"')).view(np.uint8)) ^ inside  # 1 inside a string
        step = ((part == ord("[")) | (part == ord("{"))).view(np.int8) - \
            ((part == ord("]")) | (part == ord("}"))).view(np.int8)
        levels = np.cumsum(step * (quoted == 0), dtype=np.int32) + depth
        deepest = max(deepest, int(levels.max(initial=depth)))
        depth, inside = int(levels[-1]), int(quoted[-1])
    return deepest


def loads_json(raw: bytes | str, where: str, what: str = "JSON") -> Any:
    """Parsed JSON; UserError naming `where` for text that is not JSON (not `what`), nests deeper than
    MAX_DEPTH (checked before parsing: Python's decoder would recurse into it) or holds a lone surrogate escape
    ("\\ud800": valid JSON, but no string holding it can be written as UTF-8 again, so every table or export of
    it would fail later)."""
    data = raw.encode(errors="replace") if isinstance(raw, str) else raw
    if json_depth(data) > MAX_DEPTH:
        raise UserError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        if _orjson is not None:
            # orjson refuses lone surrogates itself; NaN / Infinity, which torch writes: the stdlib decides
            with contextlib.suppress(_orjson.JSONDecodeError):
                return _orjson.loads(raw)
        parsed = json.loads(raw)
    except RecursionError:  # belt and braces: the scan above should have refused it
        raise UserError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise UserError(f"{where}: not {what} ({str(err).splitlines()[0]})") from None
    if _SURROGATE_ESCAPE.search(data) is not None:  # rare: only then walk the parsed values
        lone = _lone_surrogate(parsed)
        if lone is not None:
            raise UserError(f"{where}: a string holds a lone surrogate escape (in \"{lone}\"): not Unicode text")
    return parsed


def _lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) of parsed JSON that cannot be encoded as UTF-8, shown with its surrogate
    escaped; None when every string can. Iterative: the depth is capped, but a walk need not recurse."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item[:40].encode("utf-8", "backslashreplace").decode("ascii", "replace")
    return None


def load_json(path: Path, cap: int = METADATA_BYTES) -> Any:
    """A JSON file, size-capped and depth-capped; every problem is one line naming the file."""
    return loads_json(read_capped(path, cap), str(path))


HEADER_BYTES = MiB  # a CSV header line longer than this is no profiler's


def csv_header(path: Path, cap: int = TRACE_BYTES) -> list[str]:
    """The header names of a CSV file, after its size is checked against `cap`; UserError for a header line
    over HEADER_BYTES or a name given twice (pandas renames duplicates in time quadratic in their count)."""
    check_size(path, cap)
    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as handle:
            line = handle.readline(HEADER_BYTES + 1)
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(line) > HEADER_BYTES:
        raise UserError(f"{path}: header line longer than {size_text(HEADER_BYTES)}: not a profiler's CSV")
    names = [name.strip() for name in next(csv.reader([line]), [])]
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        shown = ", ".join(repr(n[:40]) for n in twice[:3]) + (f" and {len(twice) - 3} more" if len(twice) > 3 else "")
        raise UserError(f"{path}: header names {shown} more than once: not a profiler's CSV")
    return names
