"""Typed YAML sections on pydantic: the YAML loader, the section base model, one-line errors, `--set` overrides.

A section is a pydantic model deriving from `Section`, with a `PATH` (its YAML key path); each field's help text
is its `Field(description=...)`, its choices a `Literal`, its bounds `Field` constraints. Values are validated
strictly (no "yes" for true, no 4.0 for 4), so a section built from YAML or from Python is checked the same way,
and every error is a one-line `UserError` that starts with the full key path and names the bad value.

YAML is read once, by `parse_yaml`, under limits (MAX_YAML_BYTES, MAX_YAML_VALUES and MAX_YAML_EXPANDED_BYTES
after alias expansion, MAX_YAML_DEPTH), with duplicate keys and self-containing structures refused, and YAML 1.2
floats (`1e-3`).
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from model.parallel_config import FIELDS as PARALLEL_FIELDS
from perfbench.errors import UserError
from perfbench.terminal_text import escaped

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


# control characters (C0, DEL, C1) and the format characters that reorder or hide text (U+202E, U+200B, ...)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def name_value(value: Any) -> Any:
    """A name that lands in file names, every output line and the report: printable text only."""
    value = text_value(value)
    if isinstance(value, str) and (found := _UNPRINTABLE.search(value)):
        raise ValueAt(f"must be printable text, got the control character {escaped(found.group())} (at "
                      f"{found.start()}); use letters, digits, - and _")
    return value


Text = Annotated[str, BeforeValidator(text_value)]
Name = Annotated[str, BeforeValidator(name_value)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
OneOrMany = BeforeValidator(_one_or_many)


_SectionT = TypeVar("_SectionT", bound="Section")


class Section(BaseModel):
    """Base of every YAML section. Subclasses set PATH and may list RECIPE_ONLY keys: keys the
    cann-recipes-infer schema has that perfbench accepts and keeps in `recipe_extras` without acting on them.
    A null container (list, mapping, section) stands for its default. `from_yaml` turns pydantic's
    ValidationError into the one-line `UserError`; building a section in Python raises ValidationError."""

    model_config = ConfigDict(extra="forbid", strict=True)
    PATH: ClassVar[str] = ""
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_yaml(cls: type[_SectionT], raw: Any) -> _SectionT:
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
        default = field.get_default(call_default_factory=True)
        tp = _bare(field.annotation)
        choices = f" (one of {', '.join(typing.get_args(tp))})" if typing.get_origin(tp) is Literal else ""
        yield f"{cls.PATH}.{name}", json.dumps(default), f"{field.description}{choices}"


# ---- YAML ------------------------------------------------------------------------------------------------
# Limits of the one YAML loader (scenarios, gate rules, --set values). A scenario or gate.yaml is a few KB; the
# limits only stop hostile or broken input before it costs minutes or gigabytes.
MAX_YAML_BYTES = 2 * 1024 * 1024  # document size: the pure-Python parser takes about 1 s per MB
MAX_YAML_VALUES = 100_000  # values (scalars, lists, mappings) after alias expansion: stops an alias bomb
MAX_YAML_DEPTH = 64  # nesting of lists and mappings
# text of the scalars after alias expansion: 2,000 aliases of one 1.5 MB string are 2,001 values (under
# MAX_YAML_VALUES) but 3 GB once written out (scenario.json, sweep.json). Without aliases a document's scalars
# hold at most its own size, so 8x MAX_YAML_BYTES refuses only a document that multiplies text through aliases.
MAX_YAML_EXPANDED_BYTES = 8 * MAX_YAML_BYTES

# YAML 1.2 core-schema floats: `1e-3` and `1.0e3` are numbers (YAML 1.1, PyYAML's default, wants a dot and a
# signed exponent, and reads them as text). Integers are matched first by PyYAML's own resolver.
_FLOAT_TAG = "tag:yaml.org,2002:float"
_YAML12_FLOAT = re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                               |[-+]?\.(?:inf|Inf|INF)
                               |\.(?:nan|NaN|NAN))$""", re.X)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats (see `_YAML12_FLOAT`); everything else as SafeLoader."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_FLOAT_TAG, _YAML12_FLOAT, list("-+0123456789."))


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def check_node_tree(node: yaml.Node, path: str = "", depth: int = 0,
                    sizes: dict[int, tuple[int, int]] | None = None,
                    open_nodes: set[int] | None = None) -> tuple[int, int]:
    """UserError for a mapping that repeats a key (safe_load would keep the last one silently), a structure
    that contains itself, nesting deeper than MAX_YAML_DEPTH, or, once aliases are expanded, more than
    MAX_YAML_VALUES values or more than MAX_YAML_EXPANDED_BYTES of scalar text. Returns the expanded value count
    and scalar text length (characters) of `node`.

    An aliased node is the same object wherever it is used, so each distinct node is walked once (`sizes`):
    the walk is linear in the document, never in its expansion."""
    sizes = {} if sizes is None else sizes
    open_nodes = set() if open_nodes is None else open_nodes
    key = id(node)
    if key in sizes:
        return sizes[key]
    where = path or "the document"
    if key in open_nodes:
        raise UserError(f"{where} (line {_line(node)}): an alias refers to its own anchor (a structure "
                        "that contains itself); write the values out")
    if depth > MAX_YAML_DEPTH:
        raise UserError(f"{where} (line {_line(node)}): nested deeper than {MAX_YAML_DEPTH} levels")
    open_nodes.add(key)
    size, text = 1, 0
    if isinstance(node, yaml.ScalarNode):
        text = len(node.value)
    elif isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            sub = f"{path}.{name}" if path else str(name)
            if name is not None and name != "<<":
                if name in seen:
                    raise UserError(f"{sub}: duplicate key (lines {seen[name]} and {_line(key_node)}); keep one")
                seen[name] = _line(key_node)
            for child in (key_node, value_node):
                values, chars = check_node_tree(child, sub, depth + 1, sizes, open_nodes)
                size, text = size + values, text + chars
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            values, chars = check_node_tree(item, f"{path}[{i}]", depth + 1, sizes, open_nodes)
            size, text = size + values, text + chars
    open_nodes.discard(key)
    if size > MAX_YAML_VALUES:
        raise UserError(f"{where} (line {_line(node)}): expands to more than {MAX_YAML_VALUES} values through "
                        "aliases (*name); write the values out or use fewer aliases")
    if text > MAX_YAML_EXPANDED_BYTES:
        raise UserError(f"{where} (line {_line(node)}): expands to more than {MAX_YAML_EXPANDED_BYTES // 2**20} MB "
                        "of text through aliases (*name) (MAX_YAML_EXPANDED_BYTES); write the values out or use "
                        "fewer aliases")
    sizes[key] = (size, text)
    return size, text


def parse_yaml(text: str) -> Any:
    """The YAML document in `text`, parsed once under the limits above (MAX_YAML_*) and checked by
    `check_node_tree` before any Python object is built; every problem is a one-line UserError (syntax errors
    with their line number)."""
    if len(text) > MAX_YAML_BYTES:
        raise UserError(f"the document is {len(text) / 2**20:.1f} MB; the limit is "
                        f"{MAX_YAML_BYTES // 2**20} MB (MAX_YAML_BYTES)")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_node_tree(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(err.problem or err.context or "syntax error").split())
        raise UserError(f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise UserError(f"invalid YAML: {' '.join(str(err).split())}") from None
    except RecursionError:  # the parser itself recurses per nesting level
        raise UserError(f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()


def read_yaml(path: Path) -> Any:
    """The YAML document in `path` (scenarios and gate rules alike); errors are one-line `UserError`s. At most
    MAX_YAML_BYTES are read, so a huge file (or one that never ends) is refused before it is parsed."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            raise UserError(f"larger than the {MAX_YAML_BYTES // 2**20} MB limit of a YAML document "
                            "(MAX_YAML_BYTES); a scenario or gate.yaml is a few KB")
        text = data.decode("utf-8-sig")
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
            value = parse_yaml(text) if text.strip() else None  # the same loader and limits as the file
        except UserError as err:
            why = str(err).removeprefix("invalid YAML: ")
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
