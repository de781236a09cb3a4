"""`perfbench` command line: run, ab, report, compare, gate, baseline, trace, diff, doctor, verify, estimate, list,
history, bisect."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from model.config import ConfigError
from model.parallel_config import ParallelConfigError
from perfbench.emulation.npu.platforms import PLATFORMS as EMULATED_NPU_PLATFORMS
from perfbench.errors import UserError
from perfbench.lifecycle import exit_on_signal
from perfbench.output_paths import check_output_dir, check_output_file, os_error_line
from perfbench.terminal_text import echo, escaped

if TYPE_CHECKING:
    from perfbench.results.ab_record import ABRecord

USER_ERRORS = (UserError, ConfigError, ParallelConfigError, FileNotFoundError, NotADirectoryError)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Bad input ends in one line on stderr and exit code 2; so does a path that cannot be read or written
    (EACCES, ENOSPC, ...): exit 2, never the gate's 1, and never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as err:
            echo(f"error: {escaped(err)}", err=True)
            sys.exit(2)
        except ModuleNotFoundError as err:
            if err.name != "torch":  # a missing module of perfbench's own is a bug: its traceback says where
                raise
            echo("error: torch is not installed: `pip install torch==2.13.0` (the CPU build; on an NPU "
                       "machine the torch that torch_npu names)", err=True)
            sys.exit(2)
        except OSError as err:
            echo(f"error: {escaped(os_error_line(err))}", err=True)
            sys.exit(2)

    return wrapper


def signal_exits(fn: Callable[..., Any]) -> Callable[..., Any]:
    """SIGINT and SIGTERM end the command alike with one line and the signal's exit code (130 / 143), never
    click's "Aborted!" and exit 1 (the gate's "regression"); perfbench/lifecycle.py."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with exit_on_signal(f"perfbench {fn.__name__.rstrip('_').replace('_', ' ')}"):
            return fn(*args, **kwargs)

    return wrapper


EMULATE_NPU = click.option(
    "--emulate-npu", type=click.Choice(list(EMULATED_NPU_PLATFORMS)), default=None,
    help="Run the NPU code paths on CPU under the NPU emulator for this platform (910b = Atlas A2, "
         "910_93 = A3, 950); results are labelled emulated, timings are CPU timings.")


CI_OPTIONS = (
    click.option("--junit", type=click.Path(dir_okay=False), help="Write each check as a JUnit test case here."),
    click.option("--comment", type=click.Path(dir_okay=False),
                 help="Write a short 'what changed' markdown here when something regressed (for a CI comment; "
                      "removed otherwise)."),
)


def ci_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(CI_OPTIONS):
        fn = option(fn)
    return fn


def _check_ci_paths(junit: str | None, comment: str | None) -> None:
    for path, name in ((junit, "--junit"), (comment, "--comment")):
        if path is not None:
            check_output_file(path, name)


def _report_after_run() -> Callable[[Path, Any], None]:
    from perfbench.report.build import report_after_run

    return report_after_run


def _activate_emulator(platform: str) -> None:
    from perfbench.emulation.npu import activate

    echo(f"emulated npu ({platform}): NPU code paths run on CPU; timings are CPU timings", err=True)
    activate(platform)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Measure what each Qwen3.5-MoE optimization buys, where the time goes, and whether it regressed."""


@main.command()
@click.argument("scenario", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Result folder (default reports/<name>-<time>).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@click.option("--dry-run", is_flag=True, help="Validate, print the expanded runs with their plans, and stop.")
@click.option("--resume", is_flag=True, help="Skip runs whose id already finished in --out.")
@click.option("--no-report", is_flag=True, help="Do not render report.html at the end.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: runs one after another here; ray: runs in parallel on a Ray cluster (extra [ray]).")
@click.option("--address", help="Ray cluster address (default: RAY_ADDRESS, else a Ray started here).")
@click.option("--nnodes", type=int, help="Nodes a run spans (perfbench.cluster.nnodes).")
@click.option("--nproc-per-node", type=int, help="Ranks per node (perfbench.cluster.nproc_per_node).")
@click.option("--node-rank", type=int, help="This node's rank, plain multi-node launch (perfbench.cluster.node_rank).")
@click.option("--rdzv-endpoint", metavar="HOST:PORT",
              help="c10d rendezvous on node 0 (perfbench.cluster.rdzv_endpoint).")
@EMULATE_NPU
@user_errors
@signal_exits
def run(scenario: str | None, out_dir: str | None, overrides: tuple[str, ...], dry_run: bool, resume: bool,
        no_report: bool, executor: str, address: str | None, nnodes: int | None, nproc_per_node: int | None,
        node_rank: int | None, rdzv_endpoint: str | None, emulate_npu: str | None) -> None:
    """Run SCENARIO (a YAML path or a shipped scenario name; default: the default CPU scenario)."""
    from perfbench.run.runner import run_scenario

    if emulate_npu:
        overrides = (*overrides, "perfbench.device=npu")  # workers inherit the emulator through its env var
        _activate_emulator(emulate_npu)
    cluster = {"nnodes": nnodes, "nproc_per_node": nproc_per_node, "node_rank": node_rank,
               "rdzv_endpoint": rdzv_endpoint}
    flags = [f"perfbench.cluster.{key}={value}" for key, value in cluster.items() if value is not None]
    sys.exit(run_scenario(scenario, out_dir=out_dir, overrides=[*overrides, *flags], dry_run=dry_run,
                          resume=resume, report=None if no_report else _report_after_run(), executor=executor,
                          address=address))


@main.command()
@click.argument("base")
@click.argument("head", required=False)
@click.option("--scenario", help="Scenario path or shipped name (default ci_smoke).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Result folder (default reports/ab-...).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@click.option("--max-time", "max_time", type=float, default=None,
              help="Wall-time budget of the job in seconds, the build included; the last look comes before it. "
                   "Default: the cap this host's noise file recommends (perfbench calibrate), else 110.")
@click.option("--band", "--threshold", "band", type=float, default=0.05, show_default=True,
              help="'same': head/base within 1 +- this, with its whole interval.")
@click.option("--margin", type=float, default=0.01, show_default=True,
              help="'slower'/'faster': the whole interval beyond 1 +- this.")
@click.option("--processes", type=click.Choice(["auto", "one", "two"]), default="auto", show_default=True,
              help="Both arms in one process (auto falls back to two, saying why, when a guard fires).")
@click.option("--pairs-per-epoch", type=int, default=6, show_default=True,
              help="Pairs of every run between two re-allocations of the weights (one process).")
@click.option("--pairs-per-process", type=int, default=8, show_default=True,
              help="Pairs of every run before both workers are replaced (two processes).")
@click.option("--looks", type=int, default=3, show_default=True,
              help="Planned looks at the pairs (the job stops at the first look that decides everything).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the pair order.")
@click.option("--ops", is_flag=True,
              help="Also profile one iteration of every run and arm after each epoch and say which op groups "
                   "moved (docs/ops_ab.md).")
@click.option("--no-report", is_flag=True, help="Do not render report.html at the end.")
@ci_options
@EMULATE_NPU
@user_errors
@signal_exits
def ab(base: str, head: str | None, scenario: str | None, out_dir: str | None, overrides: tuple[str, ...],
       max_time: float, band: float, margin: float, processes: str, pairs_per_epoch: int, pairs_per_process: int,
       looks: int, seed: int, ops: bool, no_report: bool, junit: str | None, comment: str | None,
       emulate_npu: str | None) -> None:
    """Did HEAD (a git ref; default the working tree) make BASE slower? Both arms in one process, interleaved.

    Exit 0 no regression, 1 regression, 2 input error (an arm failed), 3 inconclusive, 130/143 interrupted. With
    $GITHUB_STEP_SUMMARY set, a markdown summary of the verdicts is appended there."""
    from perfbench.run.ab import ABSettings, ab_job
    from perfbench.run.calibrate import DEFAULT_CAP_S

    if emulate_npu:
        overrides = (*overrides, "perfbench.device=npu")
        _activate_emulator(emulate_npu)
    _check_ci_paths(junit, comment)
    settings = ABSettings(max_time_s=DEFAULT_CAP_S if max_time is None else max_time, band=band, margin=margin,
                          processes=processes, pairs_per_epoch=pairs_per_epoch, pairs_per_process=pairs_per_process,
                          looks=looks, seed=seed, ops=ops)
    outcome = ab_job(base, head, scenario, list(overrides), out_dir, settings,
                     report=None if no_report else _report_after_run(), cap_from_noise=max_time is None)
    _ab_ci_outputs(outcome.record, junit, comment)
    sys.exit(outcome.exit_code)


def _ab_ci_outputs(record: ABRecord, junit: str | None, comment: str | None) -> None:
    from perfbench.gate.ci_output import ab_checks, ab_markdown, write_ci_outputs

    for line in write_ci_outputs("perfbench ab", ab_markdown(record), ab_checks(record),
                                 Path(junit) if junit else None, Path(comment) if comment else None):
        echo(line, err=True)


@main.command()
@click.argument("scenario", required=False)
@click.option("--record-time", "record_s", type=click.FloatRange(min=30), default=300.0, show_default=True,
              help="Seconds of A/A epochs to record (the start-up comes on top).")
@click.option("--jobs", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Simulated jobs per shift.")
@click.option("--max-time", "cap_s", type=click.FloatRange(min=1), default=110.0, show_default=True,
              help="The cap of the simulated jobs (ab's --max-time).")
@click.option("--startup", "startup_s", type=click.FloatRange(min=0), default=None,
              help="Start-up seconds of the simulated jobs (default: the recorded one).")
@click.option("--condition", default="", help="How the host was while recording, e.g. 'quiet' (kept in the file).")
@click.option("--from", "from_folder", type=click.Path(exists=True, file_okay=False),
              help="Read the epochs of an earlier A/A ab folder instead of recording.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Result folder (default reports/calibrate-...).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@click.option("--ops", is_flag=True, help="Also record op epochs (ab --ops) and say what each op group's shift is "
                                          "detected in, and how often A/A names any (docs/ops_ab.md).")
@user_errors
@signal_exits
def calibrate(scenario: str | None, record_s: float, jobs: int, cap_s: float, startup_s: float | None,
              condition: str, from_folder: str | None, out_dir: str | None, overrides: tuple[str, ...],
              ops: bool) -> None:
    """Record this host's timing noise (A/A epochs of SCENARIO, default ci_smoke) and say what a job can detect.

    Prints, per injected slowdown (0, 1, 2, 3, 5, 10%), the simulated jobs' false words, decided and detected
    shares and their time to a decision; the smallest change detected in 80% of jobs at the cap; the cap that
    decides 90% of A/A jobs; and a check that the intervals match the noise (mean t^2 near 1)."""
    from perfbench.run.calibrate import calibrate as run_calibrate
    from perfbench.run.calibrate import table_lines

    result = run_calibrate(scenario, list(overrides), out_dir, record_s, jobs, cap_s, startup_s, condition,
                           from_folder, ops=ops)
    for line in table_lines(result, result.record.startup_s if startup_s is None else startup_s):
        echo(line)


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@user_errors
@signal_exits
def report(folder: str) -> None:
    """Write FOLDER/report.html and a CSV for every table in it."""
    from perfbench.report import build_report

    check_output_file(Path(folder) / "report.html", "FOLDER")
    check_output_dir(Path(folder) / "report", "FOLDER")
    path = build_report(Path(folder))
    echo(f"report: {path}")


@main.command()
@click.argument("a", type=click.Path(exists=True, file_okay=False))
@click.argument("b", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where compare.html/.csv go (default B).")
@click.option("--band", "bands", multiple=True, metavar="METRIC=FRACTION",
              help="Run-to-run band of a metric for one-round comparisons (default: perfbench/analysis/"
                   "noise_band.py); repeatable.")
@user_errors
@signal_exits
def compare(a: str, b: str, out_dir: str | None, bands: tuple[str, ...]) -> None:
    """Compare result folders A (before) and B (after): ratio per metric with significance."""
    from perfbench.analysis.noise_band import DEFAULT_BANDS, parse_band
    from perfbench.report.compare import compare_folders

    given = dict(parse_band(text) for text in bands)
    check_output_dir(out_dir or b, "--out" if out_dir else "B (compare.html goes there)")
    echo(compare_folders(Path(a), Path(b), Path(out_dir) if out_dir else Path(b), {**DEFAULT_BANDS, **given}))


@main.command()
@click.option("--baseline", type=click.Path(),
              help="Baseline (or result) folder; not needed when --current is a `perfbench ab` folder.")
@click.option("--current", required=True, type=click.Path(), help="Current result folder, or an ab folder.")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False), help="gate.yaml (default rules if absent).")
@click.option("--summary", type=click.Path(dir_okay=False), help="Write a markdown summary here (+ .json beside).")
@click.option("--confirm/--no-confirm", "confirm", default=None,
              help="Decide each absolute-timing suspect with a paired `perfbench ab` of the two folders' commits "
                   "(default: on when the CI environment variable is set).")
@ci_options
@user_errors
@signal_exits
def gate(baseline: str | None, current: str, rules: str | None, summary: str | None, confirm: bool | None,
         junit: str | None, comment: str | None) -> None:
    """Exit 0 pass, 1 regression, 2 usage or input error, 3 inconclusive (a timing check could not decide).

    Absolute timings of two folders are suspects only: --confirm decides them on pairs; one that cannot be
    confirmed is reported as unconfirmed and never fails. With $GITHUB_STEP_SUMMARY set, the markdown summary is
    appended there too."""
    from perfbench.gate.ci_output import gate_checks, write_ci_outputs
    from perfbench.gate.engine import GateReport, run_gate

    if summary is not None:  # before the gate runs: a summary it cannot write is exit 2, not a late traceback
        check_output_file(summary, "--summary")
        if Path(summary).suffix != ".json":  # run_gate refuses a .json summary itself
            check_output_file(Path(summary).with_suffix(".json"), "--summary (its .json beside)")
    _check_ci_paths(junit, comment)
    if confirm is None:
        confirm = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")

    def outputs(report: GateReport) -> None:
        for line in write_ci_outputs("perfbench gate", report.markdown(), gate_checks(report),
                                     Path(junit) if junit else None, Path(comment) if comment else None):
            echo(line, err=True)

    sys.exit(run_gate(Path(baseline) if baseline else None, Path(current), Path(rules) if rules else None,
                      Path(summary) if summary else None, outputs, confirm_suspects=confirm))


@main.group()
def baseline() -> None:
    """Manage gate baselines."""


@baseline.command("save")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.argument("dest", type=click.Path())
@click.option("--force", is_flag=True, help="Overwrite the baseline DEST already holds.")
@click.option("--allow-failed", is_flag=True,
              help="Save even if runs in FOLDER are not ok (error, timeout, killed); refused by default.")
@click.option("--allow-dirty", is_flag=True,
              help="Save even if FOLDER was measured with uncommitted changes (gate --confirm then cannot confirm "
                   "timing suspects against it); refused by default.")
@user_errors
@signal_exits
def baseline_save(folder: str, dest: str, force: bool, allow_failed: bool, allow_dirty: bool) -> None:
    """Record the results in FOLDER as a baseline at DEST (a folder)."""
    from perfbench.gate.engine import save_baseline

    check_output_dir(dest, "DEST")
    saved = save_baseline(Path(folder), Path(dest), force=force, allow_failed=allow_failed, allow_dirty=allow_dirty)
    echo(f"baseline: {saved}")


@main.command()
@click.argument("path", type=click.Path(exists=True))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where the tables go (default PATH-tables).")
@click.option("--export", "export", type=click.Path(dir_okay=False),
              help="Also write a normalized chrome trace (OUT.json.gz) for Perfetto / chrome://tracing.")
@user_errors
@signal_exits
def trace(path: str, out_dir: str | None, export: str | None) -> None:
    """Latency tables for a trace someone else captured (torch chrome trace, Ascend profiler folder or .db)."""
    from perfbench.profiling import analyze_trace, default_tables_dir

    check_output_dir(Path(out_dir) if out_dir else default_tables_dir(Path(path)),
                     "--out" if out_dir else "the tables folder (default of --out)")
    if export:
        check_output_file(Path(export), "--export")
    echo(analyze_trace(Path(path), Path(out_dir) if out_dir else None, Path(export) if export else None))


@main.command()
@click.argument("a", type=click.Path(exists=True))
@click.argument("b", type=click.Path(exists=True))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Where diff.csv goes (default B's folder, or the folder holding B when it is a file).")
@click.option("--by", "by", multiple=True, type=click.Choice(["phase", "module", "shape", "layer", "layer_type",
                                                              "step"]),
              help="Split each op's rows by these (repeatable; default phase, module, shape).")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Rows shown per side.")
@user_errors
@signal_exits
def diff(a: str, b: str, out_dir: str | None, by: tuple[str, ...], top: int) -> None:
    """Op-level diff of B against A: traces, run folders, or result folders (matched run by run)."""
    from perfbench.profiling.diff import DEFAULT_BY
    from perfbench.profiling.diff_runs import default_out, diff_command

    check_output_dir(Path(out_dir) if out_dir else default_out(Path(b)),
                     "--out" if out_dir else "B's folder (default of --out)")
    echo(diff_command(Path(a), Path(b), Path(out_dir) if out_dir else None, by or DEFAULT_BY, top))


@main.command()
@click.option("--check-ops", is_flag=True, help="Run every fast op of this device against its reference.")
@click.option("--device", default="auto", show_default=True)
@EMULATE_NPU
@user_errors
@signal_exits
def doctor(check_ops: bool, device: str, emulate_npu: str | None) -> None:
    """The support matrix of this machine: each toggle, its implementation, or why it is inactive."""
    from perfbench.tools.doctor import doctor as run_doctor

    if emulate_npu:
        _activate_emulator(emulate_npu)
    sys.exit(run_doctor(device=device, check_ops=check_ops))


@main.command()
@click.option("--platform", type=click.Choice(["auto", *EMULATED_NPU_PLATFORMS]), default="auto", show_default=True,
              help="The platform whose rules apply; auto: the device's (must match it when given).")
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True,
              help="Devices to use; 2 or more adds the parallel item (TP2, EP2).")
@click.option("--quick", is_flag=True, help="Tiny model, fewer plans: a few minutes at most.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Bundle folder (default reports/verify-<platform>-<time>); DIR.tar.gz goes beside it.")
@click.option("--items", help="Comma-separated items to run (default all): environment,ops,model,parallel,profile.")
@click.option("--read", "bundle", type=click.Path(exists=True),
              help="Print the summary of a bundle (DIR.tar.gz or DIR); needs no torch.")
@EMULATE_NPU
@user_errors
@signal_exits
def verify(platform: str, devices: int, quick: bool, out_dir: str | None, items: str | None, bundle: str | None,
           emulate_npu: str | None) -> None:
    """First day on an Ascend machine: environment, ops, model, parallel and profile checks, a one-page summary
    and a bundle to attach. Exit 0 all passed, 1 something failed, 2 usage error (docs/verify.md)."""
    if bundle:
        from perfbench.tools.verify.read import read_bundle

        if emulate_npu or quick or out_dir or items or devices != 1 or platform != "auto":
            raise UserError("--read takes no other option: it only prints the bundle's summary")
        sys.exit(read_bundle(Path(bundle)))
    from perfbench.tools.verify.runner import options_of, run_verify

    options = options_of(platform, devices, quick, items, emulate_npu)  # every usage error before any work
    if emulate_npu:
        _activate_emulator(emulate_npu)
    sys.exit(run_verify(options, Path(out_dir) if out_dir else None))


@main.command()
@click.argument("scenario")
@click.option("--device", help="Device of device_peaks.yaml (or cpu: measured here); default from the scenario.")
@click.option("--peak", "peaks", multiple=True, metavar="KEY=VALUE",
              help="Override or supply a peak (bfloat16_tflops, memory_GBps, interconnect_GBps, ...).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="CSV folder (default reports/estimate-*).")
@user_errors
@signal_exits
def estimate(scenario: str, device: str | None, peaks: tuple[str, ...], overrides: tuple[str, ...],
             out_dir: str | None) -> None:
    """Roofline TTFT/TPOT of each plan of SCENARIO on a device, from an analytic cost model (no weights)."""
    from perfbench.roofline.estimate import run_estimate
    from perfbench.roofline.peaks import parse_overrides

    if out_dir:  # before the scenario is expanded and priced
        check_output_dir(out_dir, "--out")
    echo(run_estimate(scenario, device, parse_overrides(peaks), Path(out_dir) if out_dir else None,
                            overrides))


@main.command()
@click.argument("scenario")
@click.option("--toggle", required=True, help="The toggle whose speed-up is searched.")
@click.option("--over", "axis", required=True, type=click.Choice(["input_len", "batch", "output_len"]),
              help="The shape axis searched.")
@click.option("--range", "range_text", metavar="A:B", help="Search range (default 16:2048, 1:64 or 2:256).")
@click.option("--threshold", "thresholds", multiple=True, type=float,
              help="A speed-up to find besides 1 (repeatable), e.g. 1.1.")
@click.option("--points", "max_points", type=int, default=10, show_default=True,
              help="Points measured in all (each a sweep of the plan with and without the toggle).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Folder (default reports/crossover-*).")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@user_errors
@signal_exits
def crossover(scenario: str, toggle: str, axis: str, range_text: str | None, thresholds: tuple[float, ...],
              max_points: int, out_dir: str | None, overrides: tuple[str, ...]) -> None:
    """Where TOGGLE's speed-up crosses 1 (and --threshold) along a shape axis, per phase, with CIs."""
    from perfbench.report.crossover import write_crossover_page
    from perfbench.run.crossover import (
        check_out_folder,
        check_search,
        roofline_prior,
        run_search,
        sweep_speedups,
        write_tables,
    )

    search = check_search(scenario, toggle, axis, range_text, list(thresholds), max_points, list(overrides))
    out = Path(out_dir) if out_dir else Path("reports") / f"crossover-{toggle}-{axis}"
    check_output_dir(out, "--out")
    check_out_folder(out)
    rows = run_search(search, out, sweep_speedups(search, out))
    try:
        prior = roofline_prior(search, sorted({x for by_x in search.points.values() for x in by_x}))
    except UserError as err:
        echo(f"roofline prior: not shown ({err})")
        prior = {}
    write_tables(search, rows, out, prior)
    for row in rows:
        echo(f"{row.phase}: {row.crossing.text}")
    echo(f"crossover: {out / 'crossover.csv'}, {out / 'crossings.csv'}, "
               f"{write_crossover_page(out, search, rows, prior)}")


DB = click.option("--db", help="History store: a SQLite file path or a postgresql:// URL (default "
                              "PERFBENCH_HISTORY_DB, else history.sqlite in the per-user data folder).")


@main.group()
def history() -> None:
    """Performance over time: ingest result, ab and baseline folders; series, change points, a trend page."""


@history.command("ingest")
@click.argument("folders", nargs=-1, required=True, type=click.Path())
@DB
@click.option("--repo", type=click.Path(file_okay=False),
              help="Git repository that orders commits (default: perfbench's checkout, whose commit runs record).")
@user_errors
@signal_exits
def history_ingest(folders: tuple[str, ...], db: str | None, repo: str | None) -> None:
    """Store FOLDERS (result, ab or baseline folders); the same folder twice changes nothing."""
    from perfbench.history.commands import ingest_command, store_line
    from perfbench.measure.git_state import REPO_DIR

    echo(ingest_command([Path(f) for f in folders], db, Path(repo) if repo else REPO_DIR))
    echo(store_line(db), err=True)  # after the work: an error stays the one line on stderr


def _filters(family: str | None, scenario: str | None, machine: str | None, plan: str | None,
             metric: str | None) -> Any:
    from perfbench.history.series import Filters

    return Filters(family=family, scenario=scenario, machine=machine, plan=plan, metric=metric)


def series_filters(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
            click.option("--family", type=click.Choice(["speedup", "median", "ab", "once"]),
                         help="speedup: a plan over its baseline; median: a run's latency; ab: head/base; "
                              "once: compile and first-iteration times."),
            click.option("--scenario"), click.option("--machine", help="A part of the machine key."),
            click.option("--plan", help="A plan label, e.g. gdr or attn+gdr."),
            click.option("--metric", help="ttft_ms, tpot_ms, compile_s, first_ttft_ms."))):
        fn = option(fn)
    return fn


@history.command("show")
@DB
@series_filters
@user_errors
@signal_exits
def history_show(db: str | None, family: str | None, scenario: str | None, machine: str | None, plan: str | None,
                 metric: str | None) -> None:
    """The stored series (a list), or one series point by point."""
    from perfbench.history.commands import show_command, store_line

    echo(show_command(db, _filters(family, scenario, machine, plan, metric)))
    echo(store_line(db), err=True)


@history.command("changes")
@DB
@series_filters
@click.option("--since", metavar="REF", help="Only commits from REF on (a stored sha prefix or a git ref).")
@click.option("--min-magnitude", type=click.FloatRange(min=0.0), default=0.05, show_default=True,
              help="Smallest change reported, as a fraction (default: the equivalence band).")
@click.option("--repo", type=click.Path(file_okay=False),
              help="Git repository resolving --since and placing the stored commits it holds on its history "
                   "(default: perfbench's checkout).")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of one line per change.")
@user_errors
@signal_exits
def history_changes(db: str | None, family: str | None, scenario: str | None, machine: str | None,
                    plan: str | None, metric: str | None, since: str | None, min_magnitude: float,
                    repo: str | None, as_json: bool) -> None:
    """Change points of each speed-up and median series over commits, with size and significance."""
    from perfbench.history.commands import changes_command, store_line
    from perfbench.measure.git_state import REPO_DIR

    echo(changes_command(db, _filters(family, scenario, machine, plan, metric), since, min_magnitude,
                               Path(repo) if repo else REPO_DIR, as_json))
    echo(store_line(db), err=True)


@history.command("page")
@DB
@series_filters
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--min-magnitude", type=click.FloatRange(min=0.0), default=0.05, show_default=True,
              help="Smallest change point marked, as a fraction.")
@click.option("--commit-url", metavar="TEMPLATE",
              help="Link of a commit, {sha} replaced, e.g. https://github.com/ORG/REPO/commit/{sha}.")
@click.option("--since", metavar="REF", help="Only commits from REF on (a stored sha prefix or a git ref).")
@click.option("--repo", type=click.Path(file_okay=False),
              help="Git repository resolving --since and placing the stored commits it holds on its history "
                   "(default: perfbench's checkout).")
@user_errors
@signal_exits
def history_page(db: str | None, family: str | None, scenario: str | None, machine: str | None, plan: str | None,
                 metric: str | None, out: str, min_magnitude: float, commit_url: str | None, since: str | None,
                 repo: str | None) -> None:
    """One offline HTML page: the changes found, newest first, then every series with its CIs and change points;
    filters, links to commits and folders."""
    from perfbench.history.commands import page_command, store_line
    from perfbench.measure.git_state import REPO_DIR

    check_output_file(out, "--out")
    echo(page_command(db, _filters(family, scenario, machine, plan, metric), Path(out), min_magnitude,
                            commit_url, since, Path(repo) if repo else REPO_DIR))
    echo(store_line(db), err=True)


@history.command("forget")
@click.argument("targets", nargs=-1, required=True, metavar="FOLDER|SHA...")
@DB
@user_errors
@signal_exits
def history_forget(targets: tuple[str, ...], db: str | None) -> None:
    """Remove stored folders: a FOLDER's content (else what was stored from its path), or every folder of a
    commit SHA (a prefix of 4 or more hex digits)."""
    from perfbench.history.commands import forget_command, store_line

    echo(forget_command(list(targets), db))
    echo(store_line(db), err=True)


@history.command("migrate")
@DB
@user_errors
@signal_exits
def history_migrate(db: str | None) -> None:
    """Bring the store to this perfbench's schema (what an ingest does first; reads never migrate)."""
    from perfbench.history.commands import migrate_command, store_line

    echo(migrate_command(db))
    echo(store_line(db), err=True)


@history.command("export")
@DB
@click.option("--out", type=click.Path(dir_okay=False), help="JSON file (default stdout).")
@user_errors
@signal_exits
def history_export(db: str | None, out: str | None) -> None:
    """Every stored folder with its points, as JSON."""
    from perfbench.history.commands import export_command, store_line

    if out:
        check_output_file(out, "--out")
    echo(export_command(db, Path(out) if out else None))
    echo(store_line(db), err=True)


@main.command("bisect")
@click.argument("good")
@click.argument("bad")
@click.option("--scenario", help="Scenario path or shipped name (default ci_smoke).")
@click.option("--metric", type=click.Choice(["ttft_ms", "tpot_ms"]), default="tpot_ms", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder of bisect.json and each step's ab folder (default reports/bisect-GOOD-BAD); give the "
                   "same folder again to resume.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a scenario key.")
@click.option("--max-time", "max_time", type=float, default=110.0, show_default=True,
              help="Time cap of each ab job, seconds.")
@click.option("--ops", is_flag=True, help="Run each ab job with --ops and name the op groups that moved in the "
                                          "first bad commit.")
@user_errors
@signal_exits
def bisect(good: str, bad: str, scenario: str | None, metric: str, out_dir: str | None, overrides: tuple[str, ...],
           max_time: float, ops: bool) -> None:
    """The first commit after GOOD up to BAD that made METRIC slower, by paired ab jobs against GOOD; commits that
    do not build or run are skipped, never blamed. Exit 0 when a commit is named or nothing changed, 2 on a usage
    error or ends that could not be compared, 3 when the ends' comparison did not decide, 130/143 interrupted
    (run the same command again to resume)."""
    from perfbench.run.arms import repository_of
    from perfbench.tools.bisect import ab_comparator, bisect_with_code

    out = Path(out_dir) if out_dir else Path("reports") / f"bisect-{good}-{bad}".replace("/", "_")
    check_output_dir(out, "--out")
    compare = ab_comparator(scenario, metric, list(overrides), max_time, ops)  # usage errors: before anything is stored
    text, code = bisect_with_code(repository_of(Path.cwd()), good, bad, scenario or "ci_smoke", metric, out,
                                  compare, say=lambda line: echo(line, err=True), overrides=list(overrides))
    echo(text)
    sys.exit(code)


@main.command("list")
@click.argument("what", type=click.Choice(["toggles", "presets", "options", "scenarios"]), default="toggles")
@user_errors
@signal_exits
def list_(what: str) -> None:
    """List toggles, model presets, scenario options (with their help) or shipped scenarios."""
    from perfbench.tools.listing import listing

    echo(listing(what))


if __name__ == "__main__":
    main()
