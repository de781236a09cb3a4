"""Gate rules: the metric catalogue, the rule models and the gate.yaml parser that checks every key.

The rules are pydantic models (unknown and missing keys refused, `kind` picks the model); each value is
checked by the functions below, so an error names the key path and the bad value.

gate.yaml holds one list, `rules`, each entry a mapping with a `kind`, and optionally `correction: holm`
(Holm-Bonferroni over the Mann-Whitney p-values of all timing checks, for sweeps of many runs; default none)
and `missing_runs: fail | skip` (default fail: a run that was ok in the baseline and has no run of the same
run_id in the current folder fails the gate, so a truncated sweep cannot pass; skip reports it as not
compared):

  timing    current vs baseline, one-sided, per run_id: relative threshold AND a test on the raw samples; the
            folders were timed at different times, so a failure is a suspect that `gate --confirm` decides on
            pairs (perfbench/gate/confirm.py)
  speedup   each plan's paired speed-up over its baseline (timed in the same blocks, so host speed cancels),
            current vs baseline folder: fails when it fell by more than `threshold` and significantly
  ratio     within the current folder: metric(numerator run) / metric(denominator run) >= min
  toggles   every toggle `on` in the baseline is still `on` for the same run_id
  op_count  decode ops per step (total, and per op) do not grow beyond the baseline by more than `tolerance`
  numerics  max_rel_error <= bound (per dtype or one number; replayed run vs all-off), optional
            max_abs_logit_diff and tokens_match
  trace_plan  the profiled trace of every run matches its effective plan (each toggle's trace signature);
            runs without a profiled trace are not checked

Numbers are checked when the rules load: every one must be finite (`.nan` and `.inf` are refused: a NaN
threshold would pass everything), thresholds and tolerances are fractions of the baseline in [0, 1]
(MAX_RELATIVE; 0.10 = 10 %), alpha lies in (0, 1), ratio and logit bounds are positive, and a range's min is
not above its max.

Every kind accepts `where:` (a selector: which runs the rule applies to) and `name:` (label in the summary).
A selector maps a run field to a value, a list of values, or a range {min: x, max: y}. Fields: the RunSpec
keys (batch_size, input_len, dtype, ...), world_size, `req.<toggle>` (requested, true/false) and
`eff.<toggle>` (effective state on/off/inactive; "off" also matches inactive: both run the unfused path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from model.toggles import TOGGLE_NAMES
from perfbench.config.schema import ValueAt, read_yaml
from perfbench.errors import UserError
from perfbench.results import REL_ERROR_TOLERANCE, RunSpec


@dataclass(frozen=True)
class Metric:
    """How a gate reads one metric from a RunResult.

    samples: key in RunResult.samples (None: only the summary value exists, so the gate uses the threshold
    alone). statistic: "median", "p90" or "p99" of the samples. tokens: throughput samples are derived from
    latency samples as tokens / latency, tokens being the prompt tokens (prefill) or the batch size (one
    decode step), recovered from the run's summary; a constant per run, so the ratio and the test are those
    of the latency itself, only reported in tok/s.
    """

    name: str
    summary_key: str
    unit: str
    samples: str | None = None
    statistic: str = "median"
    higher_is_better: bool = False
    tokens: str | None = None  # "prefill" | "decode" for derived throughput samples
    worse: str = "slower"
    better: str = "faster"


def _latency(name: str, samples: str, statistic: str, summary_key: str) -> Metric:
    return Metric(name, summary_key, "ms", samples=samples, statistic=statistic)


METRICS: dict[str, Metric] = {
    "ttft_ms": _latency("ttft_ms", "ttft_ms", "median", "ttft_ms_median"),
    "tpot_ms": _latency("tpot_ms", "tpot_ms", "median", "tpot_ms_median"),
    **{f"{m}_{s}": _latency(f"{m}_{s}", m, s, f"{m}_{s}")
       for m in ("ttft_ms", "tpot_ms") for s in ("median", "p90", "p99")},
    "prefill_tok_s": Metric("prefill_tok_s", "prefill_tok_s", "tok/s", samples="ttft_ms",
                            higher_is_better=True, tokens="prefill"),
    "decode_tok_s": Metric("decode_tok_s", "decode_tok_s", "tok/s", samples="tpot_ms",
                           higher_is_better=True, tokens="decode"),
    # every timed decode step apart (the tail a user feels); p99 wants `test: bootstrap` (a rank test does not
    # see a change in the top percent)
    "decode_step_ms_p50": _latency("decode_step_ms_p50", "tpot_steps_ms", "median", "decode_step_ms_p50"),
    "decode_step_ms_p99": _latency("decode_step_ms_p99", "tpot_steps_ms", "p99", "decode_step_ms_p99"),
    "first_ttft_ms": Metric("first_ttft_ms", "first_ttft_ms", "ms"),  # one cold start per run: threshold only
    "compile_s": Metric("compile_s", "compile_s", "s"),
    "compile_warm_s": Metric("compile_warm_s", "compile_warm_s", "s"),
    "peak_mem_mb": Metric("peak_mem_mb", "peak_mem_mb", "MB", worse="larger", better="smaller"),
}

TESTS = ("mann_whitney", "bootstrap")
CORRECTIONS = ("none", "holm")
MISSING_RUNS = ("fail", "skip")  # a baseline run with no counterpart in the current folder
# Largest relative threshold / tolerance: 1 = twice the baseline. A larger one is almost always a percentage
# written where a fraction belongs (10 for 10 %), which would let a 11x slowdown pass.
MAX_RELATIVE = 1.0
TOP_LEVEL_KEYS = ("rules", "correction", "missing_runs")
EFFECTIVE_STATES = ("on", "off", "inactive")
_NOT_SELECTABLE = ("toggles", "parallel", "env", "expected_plan")  # mappings; toggles go through req./eff.
SELECTOR_FIELDS = (*(f for f in RunSpec.model_fields if f not in _NOT_SELECTABLE),
                   "world_size", *(f"req.{t}" for t in TOGGLE_NAMES), *(f"eff.{t}" for t in TOGGLE_NAMES))
# Pairs of a ratio rule agree on these unless the rule lists its own `match`.
DEFAULT_MATCH = ("model", "num_layers", "device", "dtype", "world_size", "batch_size", "input_len",
                 "output_len", "ragged")
# NOTE: fp32 follows the CI smoke bound (1e-3); low-precision bounds are loose defaults meant to be tuned.
DEFAULT_LOGIT_BOUNDS = REL_ERROR_TOLERANCE

Selector = dict[str, Any]


def _checked(check: Any) -> Any:
    """A before-validator from a check(value, where) that raises UserError(f"{where}...: message"): every
    value is checked by perfbench's own rules (so messages name the key path), never coerced by pydantic."""
    def validate(value: Any) -> Any:
        try:
            return check(value, "")
        except UserError as err:
            suffix, _, message = str(err).partition(": ")
            raise ValueAt(message, suffix) from None
    return BeforeValidator(validate)


def _metric(value: Any, where: str) -> str:
    if value not in METRICS:
        raise UserError(f"{where}: unknown metric {value!r}; allowed: {', '.join(METRICS)}")
    return value


def _test(value: Any, where: str) -> str:
    if value not in TESTS:
        raise UserError(f"{where}: unknown test {value!r}; allowed: {', '.join(TESTS)}")
    return value


def _alpha(value: Any, where: str) -> float:
    number = _number(value, where, low=0.0)
    if not 0.0 < number < 1.0:
        raise UserError(f"{where}: expected a number in (0, 1), got {value!r}")
    return number


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: expected true or false, got {value!r}")
    return value


def _match(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: expected a list of run fields, got {value!r}")
    for name in value:
        _check_field(name, where)
    return tuple(value)


def _logit_bounds(value: Any, where: str) -> dict[str, float]:
    if isinstance(value, dict):
        return {_string(dtype, where): _number(bound, f"{where}.{dtype}", low=0.0) for dtype, bound in value.items()}
    return {"*": _number(value, where, low=0.0)}


def _relative(value: Any, where: str) -> float:
    number = _number(value, where, low=0.0)
    if number > MAX_RELATIVE:
        raise UserError(f"{where}: expected a fraction of the baseline in [0, {MAX_RELATIVE:g}] (0.1 = 10 %), "
                        f"got {value!r}")
    return number


Name = Annotated[str, _checked(lambda v, w: _string(v, w))]
Relative = Annotated[float, _checked(_relative)]
Bound = Annotated[float | None, _checked(lambda v, w: _number(v, w, low=0.0, exclusive=True))]
Flag = Annotated[bool, _checked(_bool)]
SelectorField = Annotated[Selector, _checked(lambda v, w: parse_selector(v, w))]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimingRule(_Rule):
    metric: Annotated[str, _checked(_metric)]
    threshold: Relative = 0.10
    alpha: Annotated[float, _checked(_alpha)] = 0.01
    test: Annotated[str, _checked(_test)] = "mann_whitney"
    where: SelectorField = Field(default_factory=dict)
    name: Name = ""
    kind: Literal["timing"] = "timing"


class SpeedupRule(_Rule):
    metric: Literal["ttft_ms", "tpot_ms"]
    threshold: Relative = 0.10
    alpha: Annotated[float, _checked(_alpha)] = 0.01
    where: SelectorField = Field(default_factory=dict)
    name: Name = ""
    kind: Literal["speedup"] = "speedup"


class RatioRule(_Rule):
    metric: Annotated[str, _checked(_metric)]
    numerator: SelectorField
    denominator: SelectorField
    min: Bound = None
    max: Bound = None
    match: Annotated[tuple[str, ...], _checked(_match)] = DEFAULT_MATCH
    where: SelectorField = Field(default_factory=dict)
    name: Name = ""
    kind: Literal["ratio"] = "ratio"

    @model_validator(mode="after")
    def _a_bound(self) -> RatioRule:
        if self.min is None and self.max is None:
            raise ValueError("missing key 'min' (or 'max') (kind ratio)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no ratio can pass")
        return self


class TogglesRule(_Rule):
    where: SelectorField = Field(default_factory=dict)
    name: Name = "toggles"
    kind: Literal["toggles"] = "toggles"


class OpCountRule(_Rule):
    tolerance: Relative = 0.0
    per_op: Flag = True
    where: SelectorField = Field(default_factory=dict)
    name: Name = "op_count"
    kind: Literal["op_count"] = "op_count"


class NumericsRule(_Rule):
    # dtype -> bound; "*" applies to every dtype
    max_rel_error: Annotated[dict[str, float], _checked(_logit_bounds)] = Field(
        default_factory=lambda: dict(DEFAULT_LOGIT_BOUNDS))
    # optional extra bounds: under replay a greedy token may differ at a near tie by rounding alone, so neither
    # is checked unless a rule asks
    max_abs_logit_diff: Annotated[dict[str, float], _checked(_logit_bounds)] = Field(default_factory=dict)
    tokens_match: Flag = False
    where: SelectorField = Field(default_factory=dict)
    name: Name = "numerics"
    kind: Literal["numerics"] = "numerics"


class TracePlanRule(_Rule):
    where: SelectorField = Field(default_factory=dict)
    name: Name = "trace_plan"
    kind: Literal["trace_plan"] = "trace_plan"


Rule = TimingRule | SpeedupRule | RatioRule | TogglesRule | OpCountRule | NumericsRule | TracePlanRule
RULE_CLASSES: dict[str, type[_Rule]] = {"timing": TimingRule, "speedup": SpeedupRule, "ratio": RatioRule,
                                        "toggles": TogglesRule,
                                        "op_count": OpCountRule, "numerics": NumericsRule,
                                        "trace_plan": TracePlanRule}


class _RuleList(BaseModel):
    """The `rules` list, each entry picked by its `kind`."""

    rules: list[Annotated[Rule, Field(discriminator="kind")]]


@dataclass(frozen=True)
class GateRules:
    rules: tuple[Rule, ...]
    source: str  # file name or "default rules"
    correction: str = "none"  # multiple-comparison correction of timing p-values: none | holm
    missing_runs: str = "fail"  # a baseline run missing from the current folder: fail | skip


def default_rules() -> GateRules:
    """TTFT and TPOT medians (10 % threshold, one-sided Mann-Whitney at alpha 0.01; suspects that --confirm
    decides), the paired speed-ups of TTFT and TPOT (10 %), toggles, numerics, and traces matching their plans."""
    return GateRules((TimingRule(metric="tpot_ms"), TimingRule(metric="ttft_ms"), SpeedupRule(metric="tpot_ms"),
                      SpeedupRule(metric="ttft_ms"), TogglesRule(), NumericsRule(), TracePlanRule()),
                     "default rules")


def load_rules(path: Path) -> GateRules:
    """Parse and validate gate.yaml; any problem is a one-line UserError naming the file and the key."""
    try:
        raw = read_yaml(path)
    except UserError as err:
        raise UserError(f"{path.name}: {err}") from None
    return parse_rules(raw, path.name)


def parse_rules(raw: Any, source: str) -> GateRules:
    if not isinstance(raw, dict) or "rules" not in raw:
        raise UserError(f"{source}: expected a mapping with a `rules` list, e.g. rules: [{{kind: toggles}}]")
    extra = sorted(set(raw) - set(TOP_LEVEL_KEYS), key=str)
    if extra:
        raise UserError(f"{source}: unknown top-level key '{extra[0]}'; allowed: {', '.join(TOP_LEVEL_KEYS)}")
    correction = raw.get("correction", "none")
    if correction not in CORRECTIONS:
        raise UserError(f"{source}: correction: unknown correction {correction!r}; allowed: "
                        f"{', '.join(CORRECTIONS)}")
    missing_runs = raw.get("missing_runs", "fail")
    if missing_runs not in MISSING_RUNS:
        raise UserError(f"{source}: missing_runs: expected one of {', '.join(MISSING_RUNS)}, got {missing_runs!r}")
    entries = raw["rules"]
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{source}: rules: expected a non-empty list, got {entries!r}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UserError(f"{source}: rules[{i}]: expected a mapping with a `kind`, got {entry!r}")
    try:
        parsed = _RuleList.model_validate({"rules": entries}).rules
    except ValidationError as err:
        raise UserError(_first_error(err, entries, source)) from None
    return GateRules(tuple(parsed), source, correction, missing_runs)


def _first_error(err: ValidationError, entries: list[dict[str, Any]], source: str) -> str:
    """pydantic's first error as perfbench's one line: `<file>: rules[i].<key>: <problem>`."""
    # the first rule with a problem; in it, a bad kind, then unknown keys, then missing keys, then values
    priority = {"union_tag_invalid": 0, "union_tag_not_found": 0, "extra_forbidden": 1, "missing": 2}
    first = min(err.errors(), key=lambda e: (e["loc"][1], priority.get(e["type"], 3)))
    loc = first["loc"]  # ("rules", i, kind, key, ...) or ("rules", i) for a bad kind
    i = int(loc[1])
    where = f"{source}: rules[{i}]"
    kind = entries[i].get("kind")
    keys = [str(part) for part in loc[3:]]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return f"{where}.kind: unknown kind {kind!r}; allowed: {', '.join(RULE_CLASSES)}"
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(RULE_CLASSES[str(kind)].model_fields)
        return f"{where}: unknown key '{keys[0]}' for kind {kind}; allowed: {allowed}"
    if first["type"] == "missing":
        return f"{where}: missing key '{keys[0]}' (kind {kind})"
    error = (first.get("ctx") or {}).get("error")
    if isinstance(error, ValueAt):
        return f"{where}.{keys[0]}{error.suffix}: {error.message}"
    if isinstance(error, ValueError):  # a whole-rule check
        return f"{where}: {error}"
    return f"{where}{''.join('.' + k for k in keys)}: {first['msg']}"


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: expected a string, got {value!r}")
    return value


def _number(value: Any, where: str, low: float, exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):  # `123 <= nan` is False: a NaN bound would silently pass everything
        raise UserError(f"{where}: expected a finite number, got {value!r}")
    if value < low or (exclusive and value == low):
        raise UserError(f"{where}: expected a number {'>' if exclusive else '>='} {low:g}, got {value!r}")
    return float(value)


def _check_field(name: str, where: str) -> None:
    if name not in SELECTOR_FIELDS:
        toggles = "req.<toggle>, eff.<toggle>"
        plain = [f for f in SELECTOR_FIELDS if "." not in f]
        raise UserError(f"{where}: unknown run field {name!r}; allowed: {', '.join(plain)}, {toggles}")


def _effective_state(value: Any, where: str) -> str:
    # YAML 1.1 reads unquoted on/off as booleans; accept both spellings.
    state = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
    if state not in EFFECTIVE_STATES:
        raise UserError(f"{where}: expected one of {', '.join(EFFECTIVE_STATES)}, got {value!r}")
    return state


def parse_selector(raw: Any, where: str) -> Selector:
    """{field: value | [values] | {min, max}} with fields checked and eff.* states normalised."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of run field to value, got {raw!r}")
    selector: Selector = {}
    for name, value in raw.items():
        _check_field(name, where)
        item = f"{where}.{name}"
        if isinstance(value, dict):
            bad = sorted(set(value) - {"min", "max"}) or ([] if value else ["(empty)"])
            if bad:
                raise UserError(f"{item}: unknown range key '{bad[0]}'; allowed: min, max")
            selector[name] = {k: _number(v, f"{item}.{k}", low=float("-inf")) for k, v in value.items()}
            if selector[name].get("min", -math.inf) > selector[name].get("max", math.inf):
                raise UserError(f"{item}: min {selector[name]['min']:g} is above max {selector[name]['max']:g}: "
                                "the range selects no run")
        elif name.startswith("eff."):
            values = value if isinstance(value, list) else [value]
            states = [_effective_state(v, item) for v in values]
            selector[name] = states if isinstance(value, list) else states[0]
        elif name.startswith("req.") and not isinstance(value, bool):
            raise UserError(f"{item}: expected true or false, got {value!r}")
        else:
            selector[name] = value
    return selector
