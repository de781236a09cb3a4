"""Typed YAML sections on pydantic: the YAML loader, the section base model, one-line errors, `--set` overrides.

A section is a pydantic model deriving from `Section`, with a `PATH` (its YAML key path); each field's help text
is its `Field(description=...)`, its choices a `Literal`, its bounds `Field` constraints. Values are validated
strictly (no "yes" for true, no 4.0 for 4), so a section built from YAML or from Python is checked the same way,
and every error is a one-line `UserError` that starts with the full key path and names the bad value.
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticUndefined

from model.parallel_config import FIELDS as PARALLEL_FIELDS
from perfbench.errors import UserError

# parallel_config keys the recipe has that ParallelConfig accepts and ignores
PARALLEL_RECIPE_ONLY = ("dense_tp_size", "o_proj_tp_size", "cp_size", "offline_prefill_dp_group_size")


class ValueAt(ValueError):
    """A validator's finding: `message`, at `suffix` below the key being validated (".chunk_gdr", "[1]")."""

    def __init__(self, message: str, suffix: str = "") -> None:
        super().__init__(message)
        self.message, self.suffix = message, suffix


def text_value(value: Any) -> Any:
    """A number given for a string option stands for its text (platform_version: 950, OMP_NUM_THREADS: 4);
    a YAML boolean does not (true is rarely meant as the text "true")."""
    if isinstance(value, bool):
        raise ValueAt(f"must be a string, got {value!r} (quote it: \"{str(value).lower()}\")")
    return str(value) if isinstance(value, int | float) else value


def _one_or_many(value: Any) -> Any:
    return value if value is None or isinstance(value, list) else [value]  # a scalar: a one-element list


Text = Annotated[str, BeforeValidator(text_value)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
OneOrMany = BeforeValidator(_one_or_many)


class Section(BaseModel):
    """Base of every YAML section. Subclasses set PATH and may list RECIPE_ONLY keys: keys the
    cann-recipes-infer schema has that perfbench accepts and keeps in `recipe_extras` without acting on them.
    A null container (list, mapping, section) stands for its default. `from_yaml` turns pydantic's
    ValidationError into the one-line `UserError`; building a section in Python raises ValidationError."""

    model_config = ConfigDict(extra="forbid", strict=True)
    PATH: ClassVar[str] = ""
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_yaml(cls, raw: Any) -> typing.Self:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise UserError(f"{cls.PATH}: must be a mapping, got {raw!r}")
        try:
            return cls.model_validate(raw)
        except ValidationError as err:
            raise UserError(one_line(cls, err)) from None

    @model_validator(mode="before")
    @classmethod
    def _recipe_only_keys_and_nulls(cls, raw: Any) -> Any:
        """RECIPE_ONLY keys move into recipe_extras; a null list, mapping or section is left to its default."""
        if not isinstance(raw, dict):
            return raw
        out: dict[Any, Any] = {}
        extras: dict[str, Any] = {}
        for key, value in raw.items():
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if key in cls.RECIPE_ONLY:
                extras[key] = value
            elif value is None and field is not None and field.default_factory is not None:
                continue
            else:
                out[key] = value
        if extras:
            out["recipe_extras"] = extras
        return out

    @classmethod
    def keys(cls) -> list[str]:
        return [name for name in cls.model_fields if name != "recipe_extras"]


def _bare(tp: Any) -> Any:
    """The type under Optional[...] and Annotated[...]."""
    while True:
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) in (Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _section_of(tp: Any) -> type[Section] | None:
    tp = _bare(tp)
    if typing.get_origin(tp) is list:
        tp = _bare(typing.get_args(tp)[0])
    return tp if isinstance(tp, type) and issubclass(tp, Section) else None


def _owner(cls: type[Section], loc: list[Any]) -> type[Section]:
    """The section that holds the last key of `loc` (a pydantic error location below `cls`)."""
    for part in loc[:-1]:
        field = cls.model_fields.get(part) if isinstance(part, str) else None
        inner = _section_of(field.annotation) if field is not None else None
        if inner is not None:
            cls = inner
    return cls


def _expected(kind: str, ctx: dict[str, Any]) -> str:
    """What a value must be, for pydantic error type `kind`."""
    if kind == "greater_than_equal":
        named = {1: "a positive integer", 0: "a non-negative integer"}  # bounds of integer options
        return named[ctx["ge"]] if type(ctx["ge"]) is int and ctx["ge"] in named else f">= {ctx['ge']}"
    if kind == "greater_than":
        return "a positive number" if ctx["gt"] == 0 else f"> {ctx['gt']}"
    if kind == "less_than_equal":
        return f"<= {ctx['le']}"
    if kind == "literal_error":
        return "one of " + ", ".join(re.findall(r"'([^']*)'", ctx["expected"]))
    return {"bool_type": "true or false", "int_type": "an integer", "float_type": "a number",
            "string_type": "a string", "list_type": "a list", "dict_type": "a mapping of name: value",
            "model_type": "a mapping", "model_attributes_type": "a mapping"}.get(kind, "")


def one_line(cls: type[Section], err: ValidationError) -> str:
    """pydantic's first error as `<full key path>: <what it must be>, got <bad value>`."""
    first = err.errors()[0]
    loc = list(first["loc"])
    kind, value, ctx = first["type"], first.get("input"), first.get("ctx") or {}
    if loc and loc[-1] == "[key]":  # a mapping key that is not a string: (..., key, "[key]")
        path = cls.PATH + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[:-2])
        return f"{path}.{value}: keys must be strings, got {value!r} (quote it)"
    path = cls.PATH + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    if kind == "extra_forbidden":
        owner = _owner(cls, loc)
        return f"{path}: unknown key; allowed: {', '.join(owner.keys() + list(owner.RECIPE_ONLY))}"
    error = ctx.get("error")
    if isinstance(error, ValueAt):
        return f"{path}{error.suffix}: {error.message}"
    if isinstance(error, ValueError):
        return f"{path}: {error}"
    expected = _expected(kind, ctx)
    if expected:
        return f"{path}: must be {expected}, got {value!r}"
    return f"{path}: {first['msg']}, got {value!r}"


def options(cls: type[Section]) -> Iterator[tuple[str, str, str]]:
    """(key path, default as JSON, help) of every option of a section and the sections inside it."""
    for name, field in cls.model_fields.items():
        if name == "recipe_extras":
            continue
        inner = _section_of(field.annotation)
        if inner is not None and typing.get_origin(_bare(field.annotation)) is not list:
            yield f"{cls.PATH}.{name}", "", str(field.description)
            yield from options(inner)
            continue
        default = field.default_factory() if field.default is PydanticUndefined else field.default
        tp = _bare(field.annotation)
        choices = f" (one of {', '.join(typing.get_args(tp))})" if typing.get_origin(tp) is Literal else ""
        yield f"{cls.PATH}.{name}", json.dumps(default), f"{field.description}{choices}"


# ---- YAML ------------------------------------------------------------------------------------------------
def check_duplicate_keys(node: yaml.Node, path: str) -> None:
    """UserError for a mapping that repeats a key (safe_load would keep the last one silently)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            sub = f"{path}.{key}" if path else str(key)
            if key is not None and key != "<<":
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise UserError(f"{sub}: duplicate key (lines {seen[key]} and {line}); keep one")
                seen[key] = line
            check_duplicate_keys(value_node, sub)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            check_duplicate_keys(item, f"{path}[{i}]")


def parse_yaml(text: str) -> Any:
    """safe_load, with duplicate keys and syntax errors reported as one line (with the line number)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            check_duplicate_keys(node, "")
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(err.problem or err.context or "syntax error").split())
        raise UserError(f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise UserError(f"invalid YAML: {' '.join(str(err).split())}") from None


def read_yaml(path: Path) -> Any:
    """The YAML document in `path` (scenarios and gate rules alike); errors are one-line `UserError`s."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read: {err}") from None
    return parse_yaml(text)


# ---- --set overrides -------------------------------------------------------------------------------------
def _check_override_path(parts: list[str], sections: dict[str, type[Section] | None], key: str) -> None:
    top = parts[0]
    if top not in sections:
        raise UserError(f"--set {key}: unknown section {top!r}; sections are {', '.join(sections)}")
    cls = sections[top]
    if cls is None:  # parallel_config: flat integers
        allowed = list(PARALLEL_FIELDS) + list(PARALLEL_RECIPE_ONLY)
        if len(parts) != 2 or parts[1] not in allowed:
            raise UserError(f"--set {key}: unknown key path; parallel_config keys are {', '.join(allowed)}")
        return
    path = top
    for i, part in enumerate(parts[1:], 1):
        allowed = cls.keys() + list(cls.RECIPE_ONLY)
        if part not in allowed:
            raise UserError(f"--set {key}: unknown key path; {path} keys are {', '.join(allowed)}")
        last = i == len(parts) - 1
        if part in cls.RECIPE_ONLY:
            if not last:
                raise UserError(f"--set {key}: {path}.{part} takes a whole value")
            return
        tp = _bare(cls.model_fields[part].annotation)
        if typing.get_origin(tp) is dict:
            if len(parts) > i + 2:
                raise UserError(f"--set {key}: {path}.{part} holds name: value pairs, one level deep")
            return  # names inside (toggles, env vars) are checked by the section itself
        if isinstance(tp, type) and issubclass(tp, Section):
            cls, path = tp, f"{path}.{part}"
            if last:
                return
            continue
        if not last:
            raise UserError(f"--set {key}: {path}.{part} is a value, not a section")


def with_overrides(raw: Any, overrides: list[str], sections: dict[str, type[Section] | None]) -> Any:
    """Apply `key.path=value` overrides (value parsed as YAML) to a copy of the raw document."""
    if not overrides:
        return raw
    out = copy.deepcopy(raw) if raw is not None else {}
    if not isinstance(out, dict):
        return out  # the top-level error is reported by validation
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. perfbench.device=cpu")
        parts = key.split(".")
        _check_override_path(parts, sections, key)
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as err:
            why = getattr(err, "problem", None) or err
            raise UserError(f"--set {key}: cannot parse value {text!r} as YAML ({why})") from None
        node = out
        for j, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UserError(f"--set {key}: {'.'.join(parts[:j + 1])} is not a mapping, got {child!r}")
            node = child
        node[parts[-1]] = value
    return out
