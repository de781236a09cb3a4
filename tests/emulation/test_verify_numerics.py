"""verify judges numerics as runs do: the model item by the run's replay numerics and per-dtype bound (every layer
and the logits), the op items by relative errors whatever the outputs' scale. Each planted fault fails its item;
the legit model and ops pass (in this process, on the NPU emulator)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from model.ops import gdn
from model.optimizations import resolve_plan
from perfbench.emulation import npu
from perfbench.tools.op_checks import OpShapes, op_checks
from perfbench.tools.verify.context import DTYPE, VerifyContext, VerifyOptions, all_on
from perfbench.tools.verify.model_check import Case, run_case
from perfbench.tools.verify.ops import _check_one
from perfbench.tools.verify.summary import FAIL, PASS, Check
from tests.planted_faults import planted, scaled

pytestmark = pytest.mark.npu_emulated


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VerifyContext]:
    npu.activate("910b")
    try:
        work = tmp_path_factory.mktemp("verify")
        yield VerifyContext.create(VerifyOptions(quick=True), work, work / "bundle")
    finally:
        npu.deactivate()


def _all_on(ctx: VerifyContext) -> object:
    model = ctx.models[0]
    return run_case(ctx, model, Case("all on", all_on(graph=False), "eager"), ctx.reference(model), [],
                    free_run=False)


def test_the_model_item_passes_the_legit_model(ctx: VerifyContext) -> None:
    check = _all_on(ctx)
    assert check.status == PASS, check.error  # type: ignore[attr-defined]


def test_a_three_percent_fault_in_every_rmsnorm_fails_the_model_item(ctx: VerifyContext) -> None:
    # within one standard deviation of the logits (the old rule), so the old item passed it
    with planted("fused_rmsnorm", 1.03):
        check = _all_on(ctx)
    assert check.status == FAIL and "numerics bound" in check.error, check.detail  # type: ignore[attr-defined]
    assert check.data["max_rel_error"] > check.data["bound"]  # type: ignore[attr-defined]


@contextlib.contextmanager
def gdr_decode_scaled(factor: float) -> Iterator[None]:
    """Every fused recurrent GDN decode kernel with its output times `factor` (its outputs are ~0.035)."""
    saved = dict(gdn.GDR_DECODE)
    try:
        for key, fn in saved.items():
            if key != "ref" and fn is not saved["ref"]:
                gdn.GDR_DECODE[key] = scaled(fn, factor)
        yield
    finally:
        gdn.GDR_DECODE.update(saved)


def _gdr_decode_item(ctx: VerifyContext, factor: float | None) -> tuple[Check, float]:
    model = ctx.models[0]
    plan = resolve_plan(all_on(graph=False), ctx.caps, model=model.config, dtype=str(DTYPE).removeprefix("torch."))
    with gdr_decode_scaled(factor) if factor is not None else contextlib.nullcontext():
        check = next(c for c in op_checks("npu", OpShapes.of(model.config), DTYPE)
                     if c.name == "gdr_decode (recurrent)")
        ref = check.ref(*check._place(check.make_inputs(torch.Generator().manual_seed(0)), "cpu", torch.float32))
        fake = SimpleNamespace(device=ctx.device, options=SimpleNamespace(quick=True), emulation="emulated")
        item = _check_one(fake, model, check, plan, [])  # type: ignore[arg-type]
    return item, float(ref[0].abs().max())


def test_a_five_percent_fault_in_an_op_with_small_outputs_fails_its_op_item(ctx: VerifyContext) -> None:
    item, largest = _gdr_decode_item(ctx, 1.05)
    assert largest < 0.1  # small outputs: max(1, largest) read the 5 % fault as 5 % of `largest`
    assert item.status == FAIL and item.data["max_error"] == pytest.approx(0.05, abs=0.01), item.detail
    # the near miss: the legit op, same check
    legit, _ = _gdr_decode_item(ctx, None)
    assert legit.status == PASS and legit.data["max_error"] < 0.015, legit.detail  # type: ignore[operator]


def test_the_op_error_is_relative_whatever_the_scale(tmp_path: Path) -> None:
    check = next(c for c in op_checks("cpu") if c.name == "rms_norm")
    small = type(check)(check.name, lambda x, w, *a: x * 0.01, lambda x, w, *a: x * 0.0105, check.make_inputs,
                        check.tolerance)
    assert small.run(torch.Generator().manual_seed(0), "cpu") == pytest.approx(0.05, rel=1e-3)
