"""Every op the model calls is registered under torch.ops.npu with torch_npu 2.14.0's exact schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from model.backend import NPU_OPS
from perfbench.emulation.npu import registry
from perfbench.emulation.npu.schemas import schema_strings

pytestmark = pytest.mark.npu_emulated
REPO = Path(__file__).resolve().parents[2]
NEVER_CALLED = {"npu_moe_re_routing"}  # probed by model/backend.NPU_OPS, called nowhere (not emulated)


def _alias(info: object) -> tuple | None:
    return None if info is None else (info.is_write, sorted(map(str, info.before_set)))


def _signature(schema: torch._C.FunctionSchema) -> tuple:
    args = tuple((a.name, str(a.type), a.kwarg_only, repr(a.default_value) if a.has_default_value() else None,
                  _alias(a.alias_info)) for a in schema.arguments)
    returns = tuple((str(r.type), _alias(r.alias_info)) for r in schema.returns)
    return schema.name, schema.overload_name, args, returns


@pytest.mark.parametrize("namespace", ["npu", "air"])
def test_registered_schema_equals_the_torch_npu_yaml(namespace: str) -> None:
    registry.register()
    for name, text in schema_strings()[namespace].items():
        registered = getattr(getattr(torch.ops, namespace), name).default._schema
        expected = torch._C.parse_schema(text)
        assert _signature(registered)[2:] == _signature(expected)[2:], name
        assert registered.name == f"{namespace}::{name}"


def test_every_op_the_code_calls_is_registered() -> None:
    # independent of the registry: what model/ and perfbench/ call, read from their source text
    called: set[str] = set()
    for path in [*REPO.joinpath("model").rglob("*.py"), *REPO.joinpath("perfbench").rglob("*.py")]:
        if "emulation" in path.parts:
            continue
        text = path.read_text()
        called |= set(re.findall(r"torch_npu\.((?:npu_)?\w+_?)\(", text))
        called |= set(re.findall(r"torch\.ops\.npu\.(\w+)", text))
    called |= set(NPU_OPS) - NEVER_CALLED
    called -= {"profiler"}
    assert {"npu_rms_norm", "scatter_update_", "npu_scatter_nd_update_"} <= called
    assert called <= set(schema_strings()["npu"]), called - set(schema_strings()["npu"])


def test_schema_file_is_self_describing() -> None:
    head = Path(registry.__file__).with_name("schemas.yaml").read_text().splitlines()[0]
    assert "torch_npu 2.14.0" in head
