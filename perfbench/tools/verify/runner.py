"""`perfbench verify`: run the selected items one after another, each on its own (a failure records the item,
the op, the call and the error, and the next item runs), then write the summary and the bundle.

Exit codes: 0 every item passed or was skipped (with its reason), 1 some item failed, 2 usage error, 130 / 143
interrupted by SIGINT / SIGTERM (the items checked before it are in the summary and the bundle).
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from perfbench.emulation.npu import faults
from perfbench.errors import UserError
from perfbench.lifecycle import interrupt_line
from perfbench.output_paths import check_output_dir
from perfbench.results.timestamps import utc_timestamp
from perfbench.terminal_text import echo
from perfbench.tools.verify.bundle import FULL_CAP_BYTES, QUICK_CAP_BYTES, pack, write_json, write_log, write_summary
from perfbench.tools.verify.context import VerifyContext, VerifyOptions
from perfbench.tools.verify.environment import check_environment, snapshot
from perfbench.tools.verify.failures import failed_check
from perfbench.tools.verify.model_check import check_model
from perfbench.tools.verify.ops import check_ops
from perfbench.tools.verify.parallel import check_parallel
from perfbench.tools.verify.profile import check_profile
from perfbench.tools.verify.summary import ITEM_NAMES, SKIPPED, Check, ItemResult, Summary, render

ITEMS: dict[str, Callable[[VerifyContext, list[str]], list[Check]]] = {
    "environment": check_environment, "ops": check_ops, "model": check_model, "parallel": check_parallel,
    "profile": check_profile,
}
BUNDLE_PARTS = ("summary.json", "summary.md", "environment.json", "bundle.json", "results", "logs", "traces")


def parse_items(text: str | None) -> tuple[str, ...]:
    """--items "ops,model" -> ("ops", "model") in the run's order; None: every item."""
    if text is None:
        return ITEM_NAMES
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in ITEM_NAMES]
    if unknown or not wanted:
        raise UserError(f"--items: unknown item {unknown[0]!r}" if unknown else "--items: no item named"
                        f"; items are {', '.join(ITEM_NAMES)}")
    return tuple(name for name in ITEM_NAMES if name in wanted)


def check_fault_hook(emulate: str | None) -> None:
    """PERFBENCH_VERIFY_FAULT is the emulator's test hook: refused on real hardware, parsed before anything runs."""
    text = os.environ.get(faults.ENV_VAR)
    if not text:
        return
    if emulate is None:
        raise UserError(f"{faults.ENV_VAR} is a test hook of the NPU emulator: use it with --emulate-npu, or "
                        "unset it")
    try:
        faults.parse(text)
    except faults.FaultSpecError as err:
        raise UserError(str(err)) from None


def options_of(platform: str, devices: int, quick: bool, items: str | None, emulate: str | None) -> VerifyOptions:
    """The command line's options, checked: --items, --platform against --emulate-npu, the fault hook."""
    if emulate and platform not in ("auto", emulate):
        raise UserError(f"--platform {platform} contradicts --emulate-npu {emulate}")
    options = VerifyOptions(platform=emulate or platform, devices=devices, quick=quick, items=parse_items(items))
    check_fault_hook(emulate)
    return options


def _prepare_out(path: Path) -> Path:
    """An empty or new folder, or an earlier verify folder (its bundle parts are replaced)."""
    out = check_output_dir(path)
    if out.is_dir() and any(out.iterdir()):
        if not (out / "summary.json").is_file():
            raise UserError(f"--out {out}: the folder holds other files (not an earlier perfbench verify folder)")
        for part in BUNDLE_PARTS:
            target = out / part
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_item(name: str, ctx: VerifyContext) -> tuple[ItemResult, str]:
    log: list[str] = []
    start = time.perf_counter()
    try:
        checks = ITEMS[name](ctx, log)
    except Exception as exc:  # noqa: BLE001 - an item that stops is that item's failure, not the run's
        checks = [failed_check(name, exc, log, detail="the item stopped")]
    return ItemResult.of_checks(name, checks, time.perf_counter() - start), "\n".join(log) + "\n"


def run_verify(options: VerifyOptions, out_dir: Path | None) -> int:
    stamp = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="perfbench-verify-") as work:
        ctx = VerifyContext.create(options, Path(work), out_dir)
        ctx.out_dir = _prepare_out(ctx.out_dir)
        try:
            environment = snapshot(ctx)
        except Exception:  # noqa: BLE001 - the environment item reports what failed; the header says unknown
            environment = {"error": traceback.format_exc(limit=3)}
        results: list[ItemResult] = []
        interrupted: KeyboardInterrupt | None = None
        for name in ITEM_NAMES:
            if name not in options.items:
                results.append(ItemResult(name, SKIPPED, "not selected (--items)"))
                continue
            if interrupted is not None:
                results.append(ItemResult(name, SKIPPED, interrupt_line(interrupted, "not run: verify")))
                continue
            try:
                echo(f"verify: {name} ...", err=True)
                result, log = run_item(name, ctx)
                echo(f"verify: {name} {result.status} ({result.seconds:.1f} s)", err=True)
                write_json(ctx.out_dir / "results" / f"{name}.json", result.to_dict(with_data=True))
                write_log(ctx.out_dir, name, log)
            except KeyboardInterrupt as err:  # SIGINT / SIGTERM: the items already checked are still written
                interrupted = err
                results.append(ItemResult(name, SKIPPED, interrupt_line(err, "stopped: verify")))
                continue
            results.append(result)
        summary = Summary(
            started=utc_timestamp(stamp), platform=ctx.platform, series=ctx.series,
            device_name=ctx.caps.device_name, device_count=torch.npu.device_count(),  # type: ignore[attr-defined]
            emulation=ctx.emulation, quick=options.quick, devices=options.devices,
            faults=[str(f) for f in faults.active()] if ctx.emulation else [],
            versions=environment.get("versions", {}), items=results)
        write_json(ctx.out_dir / "environment.json", environment)
        write_summary(ctx.out_dir, summary)
        archive, left_out = pack(ctx.out_dir, QUICK_CAP_BYTES if options.quick else FULL_CAP_BYTES)
    if interrupted is not None:  # the summary and bundle hold what was checked; the exit code is the signal's
        echo(f"bundle (interrupted): {archive}; folder: {ctx.out_dir}", err=True)
        raise interrupted
    echo(render(summary))
    dropped = f"; {len(left_out)} trace files left out to stay under the cap (bundle.json)" if left_out else ""
    echo(f"bundle: {archive} ({archive.stat().st_size / 1e6:.1f} MB){dropped}; folder: {ctx.out_dir}",
               err=True)
    return summary.exit_code
