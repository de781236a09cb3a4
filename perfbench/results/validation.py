"""A pydantic error on a result record as perfbench's one line: `<where>.<field path>: <what it must be>, got ...`.

The record came from a file: the line names the file, the record's line and the field, so a user can fix it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

_EXPECTED = {
    "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number", "bool_type": "true or false",
    "string_type": "a string", "list_type": "a list", "tuple_type": "a list", "dict_type": "an object",
    "model_type": "an object", "model_attributes_type": "an object", "dataclass_type": "an object",
    "is_instance_of": "an object",
}


def json_kind(value: Any) -> str:
    """How JSON calls the type of a parsed value ("a string", "an integer", ...)."""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _path(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model that holds the last key of `loc` ([] when it is not a model)."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        inner = field.annotation if field is not None else None
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            model = inner
        elif field is not None:
            return []
    return list(model.model_fields)


def record_error(err: ValidationError, where: str, model: type[BaseModel]) -> str:
    """pydantic's first error on `model` as one line starting with `where`."""
    first = err.errors()[0]
    loc, kind, value, ctx = tuple(first["loc"]), first["type"], first.get("input"), first.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        listed = f" (known keys: {', '.join(known)})" if known else ""
        return f"{where}{_path(loc[:-1])}: unknown key {loc[-1]!r}{listed}"
    if kind == "missing":
        return f"{where}{_path(loc[:-1])}: missing key {loc[-1]!r}"
    if kind == "literal_error":
        options = ", ".join(re.findall(r"'([^']*)'", ctx.get("expected", "")))
        return f"{where}{_path(loc)}: expected one of {options}, got {value!r}"
    if kind == "value_error" and ctx.get("error") is not None:  # a validator's own sentence names the value
        return f"{where}{_path(loc)}: {ctx['error']}"
    expected = _EXPECTED.get(kind)
    if expected:
        return f"{where}{_path(loc)}: expected {expected}, got {json_kind(value)} {value!r:.40}"
    return f"{where}{_path(loc)}: {first['msg']}, got {value!r:.40}"
