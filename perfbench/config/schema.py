"""Typed YAML sections: field declaration, validation, YAML reading and `--set` overrides.

A section is a dataclass deriving from `Section`, with a `PATH` (its YAML key path) and fields declared
with `opt(default, help, **constraints)`. `Section.__post_init__` checks and normalises every field from its
type hint and constraints, so a section built from YAML or from Python is validated the same way. Every
error is a one-line `UserError` that starts with the key path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Union

import yaml

from model.parallel_config import FIELDS as PARALLEL_FIELDS
from perfbench.errors import UserError

# parallel_config keys the recipe has that ParallelConfig accepts and ignores
PARALLEL_RECIPE_ONLY = ("dense_tp_size", "o_proj_tp_size", "cp_size", "offline_prefill_dp_group_size")


def opt(default: Any, help: str, **constraints: Any) -> Any:  # noqa: A002 - the metadata key is `help`
    """A section field. `default` may be a factory (list, dict, a Section class). Constraints: choices, min,
    max, gt (checked on the value, or on each element of a list)."""
    meta = {"help": help, **constraints}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _expected(tp: Any, meta: dict[str, Any]) -> str:
    if "choices" in meta:
        return f"one of {', '.join(map(str, meta['choices']))}"
    if tp is bool:
        return "true or false"
    if tp is int:
        return {1: "a positive integer", 0: "a non-negative integer"}.get(meta.get("min"), "an integer")
    if tp is float:
        return "a positive number" if meta.get("gt") == 0 else "a number"
    if tp is str:
        return "a string"
    return getattr(tp, "__name__", str(tp))


def _scalar(value: Any, tp: Any, meta: dict[str, Any], path: str) -> Any:
    def bad(extra: str = "") -> UserError:
        return UserError(f"{path}: must be {_expected(tp, meta)}, got {value!r}{extra}")

    if tp is bool:
        if not isinstance(value, bool):
            raise bad()
    elif tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad()
    elif tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad()
        value = float(value)
    elif tp is str:
        if isinstance(value, bool):
            raise bad(f" (quote it: \"{str(value).lower()}\")")
        if isinstance(value, (int, float)):
            value = str(value)  # e.g. platform_version: 950, OMP_NUM_THREADS: 4
        if not isinstance(value, str):
            raise bad()
    elif tp is not Any:
        raise TypeError(f"unsupported field type {tp!r}")  # a schema bug, not user input
    if "choices" in meta and value not in meta["choices"]:
        raise bad()
    if "min" in meta and value < meta["min"]:
        raise bad() if tp is int else UserError(f"{path}: must be >= {meta['min']}, got {value!r}")
    if "gt" in meta and value <= meta["gt"]:
        raise bad() if meta["gt"] == 0 else UserError(f"{path}: must be > {meta['gt']}, got {value!r}")
    if "max" in meta and value > meta["max"]:
        raise UserError(f"{path}: must be <= {meta['max']}, got {value!r}")
    return value


def coerce(value: Any, tp: Any, meta: dict[str, Any], path: str) -> Any:
    """Check `value` against type hint `tp` (+ constraints in `meta`) and return it normalised."""
    tp, nullable = _optional(tp)
    if value is None and nullable:
        return None
    origin = typing.get_origin(tp)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if value is None:
            return []
        if not isinstance(value, list):
            return [coerce(value, item_tp, meta, path)]  # a scalar stands for a one-element list
        return [coerce(v, item_tp, meta, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, value_tp = typing.get_args(tp)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise UserError(f"{path}: must be a mapping of name: value, got {value!r}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UserError(f"{path}.{key}: keys must be strings, got {key!r} (quote it)")
            out[key] = coerce(item, value_tp, {}, f"{path}.{key}")
        return out
    if isinstance(tp, type) and issubclass(tp, Section):
        if isinstance(value, tp):
            return value
        try:
            return tp.from_yaml(value)
        except UserError as err:  # list items share one PATH ("a.b[]"); put the index in
            msg = str(err)
            return _reraise(msg.replace(tp.PATH, path, 1) if tp.PATH.endswith("[]") else msg)
    return _scalar(value, tp, meta, path)


def _reraise(msg: str) -> typing.NoReturn:
    raise UserError(msg) from None


class Section:
    """Base of every YAML section dataclass. Subclasses set PATH and may list RECIPE_ONLY keys: keys the
    cann-recipes-infer schema has that perfbench accepts and keeps in `recipe_extras` without acting on
    them."""

    PATH: ClassVar[str] = ""
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            path = f"{self.PATH}.{f.name}"
            setattr(self, f.name, coerce(getattr(self, f.name), hints[f.name], dict(f.metadata), path))

    @classmethod
    def from_yaml(cls, raw: Any) -> Section:
        return parse_section(cls, raw)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "recipe_extras"]  # type: ignore[arg-type]


def parse_section(cls: type[Section], raw: Any) -> Any:
    """Build section `cls` from its raw YAML mapping; unknown keys are errors, RECIPE_ONLY keys are kept."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{cls.PATH}: must be a mapping, got {raw!r}")
    allowed = cls.keys()
    kwargs: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key, value in raw.items():
        if key in allowed:
            kwargs[key] = value
        elif key in cls.RECIPE_ONLY:
            extras[key] = value
        else:
            known = ", ".join(allowed + list(cls.RECIPE_ONLY))
            raise UserError(f"{cls.PATH}.{key}: unknown key; allowed: {known}")
    if extras:
        kwargs["recipe_extras"] = extras
    return cls(**kwargs)


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
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = " ".join(str(err.problem or err.context or "syntax error").split())
        raise UserError(f"{where}invalid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise UserError(f"invalid YAML: {' '.join(str(err).split())}") from None


def read_yaml(path: Path) -> Any:
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
        tp, _ = _optional(_hints(cls)[part])
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
