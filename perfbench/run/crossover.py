"""`perfbench crossover`: measure a toggle's speed-up along one shape axis where the adaptive search asks
(analysis/crossover.py), per phase, beside the roofline's prior for the same toggle.

Each point is an ordinary sweep of the scenario at that shape with two explicit runs, the plan without the
toggle and with it, which the sweep times in interleaved blocks of one process (measure/blocks.py); speed-ups and
their CIs are speedup.py's on the within-block pairs. End to end is TTFT + (output_len - 1) x TPOT of each
iteration, paired the same way. Points are cached in the output folder (`points/<axis>-<x>/`), so a second
phase or threshold reuses them, and an interrupted search resumes.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.crossover import Crossing, SpeedupPoint, crossing_from_points, next_point, start_points
from perfbench.analysis.speedup import speedup
from perfbench.config.scenario import load_scenario
from perfbench.errors import UserError
from perfbench.lifecycle import Interrupted
from perfbench.measure.compile_cache import compile_cache_root
from perfbench.results import RunResult, load_folder
from perfbench.results.cells import csv_safe

AXES = {"input_len": "perfbench.workload.input_lens=[{x}]", "batch": "perfbench.workload.batch_sizes=[{x}]",
        "output_len": "perfbench.workload.output_len={x}"}
PHASES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
E2E = "e2e_ms"


class CrossingRow(BaseModel):
    """One crossing of crossings.csv."""

    model_config = ConfigDict(extra="forbid")

    phase: str
    crossing: Crossing


@dataclass
class CrossoverSearch:
    """The search's inputs, and what it measured: phase -> x -> SpeedupPoint."""

    scenario: str
    toggle: str
    axis: str
    lo: int
    hi: int
    thresholds: list[float]
    max_points: int = 10  # points measured in all (each a sweep of two runs), shared by phases and thresholds
    overrides: list[str] = field(default_factory=list)
    points: dict[str, dict[int, SpeedupPoint]] = field(default_factory=dict)
    emulation: str | None = None  # the NPU emulator's label when its runs were emulated (CPU timings)


def parse_range(text: str | None, default: tuple[int, int]) -> tuple[int, int]:
    """`a:b` (integers, 1 <= a < b) or the default; UserError otherwise."""
    if text is None:
        return default
    lo, sep, hi = text.partition(":")
    try:
        low, high = int(lo), int(hi)
    except ValueError:
        raise UserError(f"--range {text!r}: expected a:b with integers, e.g. 16:2048") from None
    if not sep or not 1 <= low < high:
        raise UserError(f"--range {text!r}: expected a:b with 1 <= a < b")
    return low, high


# How a point is timed unless --set says otherwise: adaptive blocks of at least 3 epochs (the clusters of the
# speed-up's t interval; a fixed count of 5 iterations, as a smoke scenario sets, is one epoch and never decides),
# until decided at a planned look, at most 8 epochs or 2.5 s of timing per plan, never fewer than those 3 epochs
# (a point needs a CI, not a verdict); no numerics check (speed only).
POINT_MEASURE = ["perfbench.measure.iterations=null", "perfbench.measure.min_iterations=15",
                 "perfbench.measure.max_iterations=40", "perfbench.measure.max_time_s=2.5",
                 "perfbench.measure.target_rel_ci=0.03", "perfbench.measure.numerics_check=false"]


def point_overrides(search: CrossoverSearch, x: int) -> list[str]:
    """The --set overrides of one point's sweep: its timing (POINT_MEASURE, then the user's --set), its shape,
    the two plans, no trace (speed only)."""
    return [*POINT_MEASURE, *search.overrides, AXES[search.axis].format(x=x), "perfbench.sweep.design=explicit",
            f"perfbench.sweep.runs=[{{{search.toggle}: false}}, {{{search.toggle}: true}}]",
            "perfbench.measure.profile=false"]


def with_e2e(result: RunResult) -> RunResult:
    """The result with `e2e_ms` samples: TTFT + (output_len - 1) x TPOT, per timed iteration."""
    steps = max(result.spec.output_len - 1, 0)
    e2e = [t + steps * d for t, d in zip(result.samples.get("ttft_ms", []), result.samples.get("tpot_ms", []))]
    return result.replace(samples={**result.samples, E2E: e2e})


def point_speedups(results: list[RunResult], toggle: str, x: int) -> dict[str, SpeedupPoint]:
    """phase -> speed-up (time without the toggle / time with it) of one point's two runs."""
    ok = [r for r in results if r.status == "ok"]
    with_ = [with_e2e(r) for r in ok if toggle in r.ran_on()]
    without = [with_e2e(r) for r in ok if toggle not in r.ran_on()]
    if not with_ or not without:
        failed = [r.error for r in results if r.status != "ok"]
        why = f"a run failed ({failed[0]})" if failed else f"{toggle} did not run in any plan (inactive?)"
        raise UserError(f"crossover at {x}: no pair of runs with and without {toggle}: {why}")
    out = {}
    for phase, key in PHASES.items():
        gain = speedup(without, with_, key)  # within-block pairs where the runs have them
        if gain is None:
            raise UserError(f"crossover at {x}: no {key} samples to compare")
        out[phase] = SpeedupPoint(x=x, value=gain.value, low=gain.low, high=gain.high)
    return out


def run_search(search: CrossoverSearch, out: Path, speedups_at: Callable[[int], dict[str, SpeedupPoint]]
               ) -> list[CrossingRow]:
    """Every phase and threshold's crossing within one budget of `search.max_points` measured points:
    `speedups_at(x)` gives every phase's speed-up at x (`point_speedups` of a sweep, or a test's curve). The
    searches share the points and take turns placing the next one (analysis/crossover.py `next_point`), so
    no phase starves another; each point costs a sweep."""
    cache: dict[int, dict[str, SpeedupPoint]] = {}

    def take(x: int) -> None:
        if x not in cache and len(cache) < search.max_points:
            cache[x] = speedups_at(x)

    for x in start_points(search.lo, search.hi):
        take(x)
    searches = [(phase, threshold) for phase in PHASES for threshold in search.thresholds]
    while len(cache) < search.max_points:
        before = len(cache)
        for phase, threshold in searches:
            point = next_point([cache[k][phase] for k in sorted(cache)], threshold, search.lo, search.hi)
            if point is not None:
                take(point)
        if len(cache) == before:  # every search has measured every integer it could want
            break
    rows = [CrossingRow(phase=phase, crossing=crossing_from_points([cache[k][phase] for k in sorted(cache)],
                                                                   threshold, search.lo, search.hi))
            for phase, threshold in searches]
    search.points = {phase: {x: cache[x][phase] for x in sorted(cache)} for phase in PHASES}
    write_tables(search, rows, out)
    return rows


@contextlib.contextmanager
def environ_defaults(defaults: Mapping[str, str]) -> Iterator[None]:
    """os.environ with each of `defaults` that is not set there set, for the block; a value already set wins and
    stays. On the way out (an exception included) only the variables this added are removed again."""
    added = [name for name in defaults if name not in os.environ]
    os.environ.update({name: defaults[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def sweep_speedups(search: CrossoverSearch, out: Path) -> Callable[[int], dict[str, SpeedupPoint]]:
    """speedups_at for real: the point's sweep in out/points/<axis>-<x> (resumed when it is there), its pairs'
    speed-ups."""
    from perfbench.run.runner import run_scenario  # torch and the model load here only

    def measure(x: int) -> dict[str, SpeedupPoint]:
        folder = out / "points" / f"{search.axis}-{x}"
        # one inductor cache for every point (a sweep keeps an inherited one): the kernels that do not depend on
        # the shape compile once for the search, not cold at each point. The job id turns on dynamo's local
        # profile (its "PGO", kept in that cache): once a second point has shown that a size varies, later
        # points compile that size dynamic at once and find the kernel cached, instead of a cold static
        # compile per shape (12-15 s each for chunk_gdr's chunk terms here)
        shared = {"TORCHINDUCTOR_CACHE_DIR": str(compile_cache_root(out) / "inductor"),
                  "TORCH_COMPILE_JOB_ID": "perfbench-crossover"}
        # the sweep's worker processes inherit them from this process's environment
        with environ_defaults(shared):
            code = run_scenario(search.scenario, out_dir=str(folder), overrides=point_overrides(search, x),
                                dry_run=False, resume=folder.exists())
        if code in (128 + 2, 128 + 15):  # SIGINT / SIGTERM: the search stops with the signal's own exit code
            raise Interrupted(code - 128)
        if code not in (0, 1):
            raise UserError(f"crossover at {x}: the sweep stopped (exit {code}); results so far in {folder}")
        results = load_folder(folder).results
        search.emulation = next((r.env.emulation for r in results if r.env.emulation),
                                search.emulation)
        return point_speedups(results, search.toggle, x)
    return measure


def roofline_prior(search: CrossoverSearch, xs: list[int]) -> dict[str, dict[int, float]]:
    """phase -> x -> the roofline's speed-up for the toggle (perfbench estimate's cost model, the scenario's
    device, without / with the toggle); {} where the scenario cannot be priced (a note says so)."""
    from perfbench.roofline.estimate import default_device, estimate_scenario
    from perfbench.roofline.peaks import device_peaks

    out: dict[str, dict[int, float]] = {phase: {} for phase in PHASES}
    for x in xs:
        scenario = load_scenario(search.scenario, point_overrides(search, x))
        plans, _ = estimate_scenario(scenario, device_peaks(default_device(scenario), {}))
        if len(plans) != 2:
            continue
        without, with_ = plans
        steps = max(with_.output_len - 1, 0)
        times = {"ttft": (without.ttft_ms, with_.ttft_ms), "tpot": (without.tpot_ms, with_.tpot_ms),
                 "e2e": (without.ttft_ms + steps * without.tpot_ms, with_.ttft_ms + steps * with_.tpot_ms)}
        for phase, (before, after) in times.items():
            if after > 0:
                out[phase][x] = before / after
    return out


def write_tables(search: CrossoverSearch, rows: list[CrossingRow], out: Path,
                 prior: dict[str, dict[int, float]] | None = None) -> list[Path]:
    """out/crossover.csv (every point: phase, x, speed-up, CI, roofline prior) and out/crossings.csv."""
    out.mkdir(parents=True, exist_ok=True)
    points_csv, crossings_csv = out / "crossover.csv", out / "crossings.csv"
    with open(points_csv, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["toggle", "axis", "phase", "x", "speedup", "ci_low", "ci_high", "roofline_speedup"])
        for phase, by_x in search.points.items():
            for x, p in by_x.items():
                prior_value = (prior or {}).get(phase, {}).get(x)
                writer.writerow([csv_safe(search.toggle), csv_safe(search.axis), phase, x, f"{p.value:.4f}",
                                 f"{p.low:.4f}", f"{p.high:.4f}", "" if prior_value is None else f"{prior_value:.4f}"])
    with open(crossings_csv, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["toggle", "axis", "phase", "threshold", "found", "estimate", "ci_low", "ci_high",
                         "ci_low_open", "ci_high_open", "text"])
        for row in rows:
            c = row.crossing
            writer.writerow([csv_safe(cell) for cell in (
                search.toggle, search.axis, row.phase, c.threshold, c.found,
                "" if c.estimate is None else f"{c.estimate:.1f}", c.low if c.found else "", c.high if c.found else "",
                c.low_open, c.high_open, c.text)])
    return [points_csv, crossings_csv]


def check_search(scenario: str, toggle: str, axis: str, range_text: str | None, thresholds: list[float],
                 max_points: int, overrides: list[str]) -> CrossoverSearch:
    """The search the command line asks for; UserError (one line) for a bad toggle, axis, range or threshold."""
    if toggle not in TOGGLE_NAMES:
        raise UserError(f"--toggle {toggle!r}: unknown toggle; toggles are {', '.join(TOGGLE_NAMES)}")
    if axis not in AXES:
        raise UserError(f"--over {axis!r}: expected one of {', '.join(AXES)}")
    if any(not (t > 0 and math.isfinite(t)) for t in thresholds):
        raise UserError(f"--threshold: expected positive numbers, got {thresholds}")
    if max_points < 3:
        raise UserError(f"--points {max_points}: at least 3 (both ends and the middle)")
    load_scenario(scenario, overrides)  # a bad scenario or --set fails here, before anything runs
    defaults = {"input_len": (16, 2048), "batch": (1, 64), "output_len": (2, 256)}
    lo, hi = parse_range(range_text, defaults[axis])
    search = CrossoverSearch(scenario, toggle, axis, lo, hi, sorted(set([1.0, *thresholds])), max_points,
                             list(overrides))
    for end in (lo, hi):  # both ends as the points' sweeps will load them: past the model's limits fails here
        try:
            load_scenario(scenario, point_overrides(search, end))
        except UserError as err:
            raise UserError(f"--range {lo}:{hi}: the point at {axis} {end} cannot run ({err})") from None
    return search


def check_out_folder(out: Path) -> None:
    """A crossover's folder holds points/ and its tables; a sweep's, an ab job's or a baseline folder is refused
    before anything is measured (its results would be mixed with the points')."""
    held = [name for name in ("results.jsonl", "ab.json", "baseline.json") if (out / name).exists()]
    if held:
        raise UserError(f"--out {out}: holds {held[0]} (a result folder, not a crossover's); choose another folder")
