"""The installed torch_npu's op schemas against torch_npu 2.14.0's, the ones the project was built against
(perfbench/emulation/npu/schemas.yaml): which ops are missing, which schemas changed, and how.

The installed schemas come from the wheel's own schema file (`npu_native_functions_by_codegen.yaml`, its `func:`
entries) where the wheel ships it, else from the ops torch_npu registered (`torch.ops.npu.<op>`). Under the
emulator the installed torch_npu is the emulator's, so the second source applies and the result says so.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from perfbench.emulation.npu.schemas import schema_strings

SCHEMA_FILE = "npu_native_functions_by_codegen.yaml"


@dataclass(frozen=True)
class SchemaDiff:
    op: str  # "npu_rms_norm" or "air::npu_fused_infer_attention_score"
    problem: str  # one line: missing, or what changed
    expected: str


def _funcs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "func" and isinstance(value, str):
                yield value
            else:
                yield from _funcs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _funcs(value)


def schema_file() -> Path | None:
    """The installed wheel's schema file, if it ships one."""
    spec = importlib.util.find_spec("torch_npu")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    direct = root / "csrc" / "aten" / SCHEMA_FILE
    return direct if direct.is_file() else next(root.rglob(SCHEMA_FILE), None)


def _file_schemas(path: Path) -> dict[str, str]:
    """{op name: schema} of the file's overload-free `func:` entries."""
    out = {}
    for text in _funcs(yaml.safe_load(path.read_text())):
        name = text.split("(", 1)[0].strip()
        if "." not in name:
            out[name] = text.strip()
    return out


def _registered(namespace: str, op: str) -> str | None:
    packet = getattr(getattr(torch.ops, namespace), op, None)
    overload = getattr(packet, "default", None)
    return str(overload._schema).split("::", 1)[-1] if overload is not None else None


def installed_schemas() -> tuple[dict[str, str | None], str]:
    """({op: schema, or None when torch_npu lacks the op}, where the schemas were read) for every op of the
    2.14.0 reference; `air::` ops (torchair's attention ops) are keyed "air::<op>"."""
    torch_npu = importlib.import_module("torch_npu")
    path = schema_file()
    from_file = _file_schemas(path) if path is not None else {}
    source = f"{path}" if path is not None else "the ops torch_npu registered (torch.ops.npu)"
    if getattr(torch_npu, "__emulated__", None):
        source += f" [{torch_npu.__emulated__}: the emulator's torch_npu]"
    found: dict[str, str | None] = {}
    for op in schema_strings()["npu"]:
        present = hasattr(torch_npu, op)
        found[op] = (from_file.get(op) or _registered("npu", op)) if present else None
    torchair = sys.modules.get("torchair")
    for op in schema_strings()["air"]:
        try:
            getattr(torchair.ops, op)  # type: ignore[union-attr]  # registers torchair's air:: ops
            found[f"air::{op}"] = _registered("air", op)
        except AttributeError:
            found[f"air::{op}"] = None
    return found, source


def _signature(text: str) -> tuple[dict[str, tuple[str, bool, str | None]], list[str]]:
    schema = torch._C.parse_schema(text)
    args = {a.name: (str(a.type), a.kwarg_only, repr(a.default_value) if a.has_default_value() else None)
            for a in schema.arguments}
    return args, [str(r.type) for r in schema.returns]


def _changes(expected: str, got: str) -> list[str]:
    (want_args, want_ret), (got_args, got_ret) = _signature(expected), _signature(got)
    changes = [f"argument {name} removed" for name in want_args if name not in got_args]
    changes += [f"new argument {name} ({got_args[name][0]})" for name in got_args if name not in want_args]
    for name in want_args.keys() & got_args.keys():
        (t0, k0, d0), (t1, k1, d1) = want_args[name], got_args[name]
        if t0 != t1:
            changes.append(f"argument {name}: type {t0} -> {t1}")
        if k0 != k1:
            changes.append(f"argument {name}: {'keyword-only' if k1 else 'positional'} now")
        if d0 != d1:
            changes.append(f"argument {name}: default {d0} -> {d1}")
    if want_ret != got_ret:
        changes.append(f"returns ({', '.join(want_ret)}) -> ({', '.join(got_ret)})")
    return changes


def compare(installed: dict[str, str | None]) -> list[SchemaDiff]:
    """Every op of the 2.14.0 reference that the installed torch_npu lacks or whose schema changed."""
    reference = {**schema_strings()["npu"], **{f"air::{op}": s for op, s in schema_strings()["air"].items()}}
    diffs = []
    for op, expected in reference.items():
        got = installed.get(op)
        if got is None:
            diffs.append(SchemaDiff(op, "missing from the installed torch_npu", expected))
            continue
        changes = _changes(expected, got)
        if changes:
            diffs.append(SchemaDiff(op, "schema changed: " + "; ".join(changes), expected))
    return diffs
