"""Gate rules: the metric catalogue, the rule dataclasses, and the gate.yaml parser that checks every key.

gate.yaml holds one list, `rules`, each entry a mapping with a `kind`, and optionally `correction: holm`
(Holm-Bonferroni over the Mann-Whitney p-values of all timing checks, for sweeps of many runs; default none):

  timing    current vs baseline, one-sided, per run_id: relative threshold AND a test on the raw samples
  ratio     within the current folder: metric(numerator run) / metric(denominator run) >= min
  toggles   every toggle `on` in the baseline is still `on` for the same run_id
  op_count  decode ops per step (total, and per op) do not grow beyond the baseline by more than `tolerance`
  numerics  max_abs_logit_diff <= bound (per dtype or one number) and tokens_match
  trace_plan  the profiled trace of every run matches its effective plan (each toggle's trace signature);
            runs without a profiled trace are not checked

Every kind accepts `where:` (a selector: which runs the rule applies to) and `name:` (label in the summary).
A selector maps a run field to a value, a list of values, or a range {min: x, max: y}. Fields: the RunSpec
keys (batch_size, input_len, dtype, ...), world_size, `req.<toggle>` (requested, true/false) and
`eff.<toggle>` (effective state on/off/inactive; "off" also matches inactive: both run the unfused path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.optimizations import TOGGLE_NAMES
from perfbench.errors import UserError
from perfbench.results import RunSpec


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
    "compile_s": Metric("compile_s", "compile_s", "s"),
    "compile_warm_s": Metric("compile_warm_s", "compile_warm_s", "s"),
    "peak_mem_mb": Metric("peak_mem_mb", "peak_mem_mb", "MB", worse="larger", better="smaller"),
}

TESTS = ("mann_whitney", "bootstrap")
CORRECTIONS = ("none", "holm")
EFFECTIVE_STATES = ("on", "off", "inactive")
SELECTOR_FIELDS = (*(f for f in RunSpec.__dataclass_fields__ if f not in ("toggles", "parallel", "env")),
                   "world_size", *(f"req.{t}" for t in TOGGLE_NAMES), *(f"eff.{t}" for t in TOGGLE_NAMES))
# Pairs of a ratio rule agree on these unless the rule lists its own `match`.
DEFAULT_MATCH = ("model", "num_layers", "device", "dtype", "world_size", "batch_size", "input_len",
                 "output_len", "ragged")
# NOTE: fp32 follows the CI smoke bound (1e-3); low-precision bounds are loose defaults meant to be tuned.
DEFAULT_LOGIT_BOUNDS = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 1e-1}

Selector = dict[str, Any]


@dataclass(frozen=True)
class TimingRule:
    metric: str
    threshold: float = 0.10
    alpha: float = 0.01
    test: str = "mann_whitney"
    where: Selector = field(default_factory=dict)
    name: str = ""
    kind: str = "timing"


@dataclass(frozen=True)
class RatioRule:
    metric: str
    numerator: Selector
    denominator: Selector
    min: float | None = None
    max: float | None = None
    match: tuple[str, ...] = DEFAULT_MATCH
    where: Selector = field(default_factory=dict)
    name: str = ""
    kind: str = "ratio"


@dataclass(frozen=True)
class TogglesRule:
    where: Selector = field(default_factory=dict)
    name: str = "toggles"
    kind: str = "toggles"


@dataclass(frozen=True)
class OpCountRule:
    tolerance: float = 0.0
    per_op: bool = True
    where: Selector = field(default_factory=dict)
    name: str = "op_count"
    kind: str = "op_count"


@dataclass(frozen=True)
class NumericsRule:
    # dtype -> bound; "*" applies to every dtype
    max_abs_logit_diff: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LOGIT_BOUNDS))
    tokens_match: bool = True
    where: Selector = field(default_factory=dict)
    name: str = "numerics"
    kind: str = "numerics"


@dataclass(frozen=True)
class TracePlanRule:
    where: Selector = field(default_factory=dict)
    name: str = "trace_plan"
    kind: str = "trace_plan"


Rule = TimingRule | RatioRule | TogglesRule | OpCountRule | NumericsRule | TracePlanRule
RULE_CLASSES: dict[str, type] = {"timing": TimingRule, "ratio": RatioRule, "toggles": TogglesRule,
                                 "op_count": OpCountRule, "numerics": NumericsRule, "trace_plan": TracePlanRule}
REQUIRED_KEYS = {"timing": ("metric",), "ratio": ("metric", "numerator", "denominator")}


@dataclass(frozen=True)
class GateRules:
    rules: tuple[Rule, ...]
    source: str  # file name or "default rules"
    correction: str = "none"  # multiple-comparison correction of timing p-values: none | holm


def default_rules() -> GateRules:
    """TTFT and TPOT medians (10 % threshold, one-sided Mann-Whitney at alpha 0.01), toggles, numerics, and
    traces matching their plans."""
    return GateRules((TimingRule("tpot_ms"), TimingRule("ttft_ms"), TogglesRule(), NumericsRule(),
                      TracePlanRule()), "default rules")


def load_rules(path: Path) -> GateRules:
    """Parse and validate gate.yaml; any problem is a one-line UserError naming the file and the key."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or err
        raise UserError(f"{path.name}: not valid YAML{where} ({problem})") from None
    return parse_rules(raw, path.name)


def parse_rules(raw: Any, source: str) -> GateRules:
    if not isinstance(raw, dict) or "rules" not in raw:
        raise UserError(f"{source}: expected a mapping with a `rules` list, e.g. rules: [{{kind: toggles}}]")
    extra = sorted(set(raw) - {"rules", "correction"})
    if extra:
        raise UserError(f"{source}: unknown top-level key '{extra[0]}'; allowed: rules, correction")
    correction = raw.get("correction", "none")
    if correction not in CORRECTIONS:
        raise UserError(f"{source}: correction: unknown correction {correction!r}; allowed: "
                        f"{', '.join(CORRECTIONS)}")
    entries = raw["rules"]
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{source}: rules: expected a non-empty list, got {entries!r}")
    parsed = tuple(_parse_rule(entry, f"{source}: rules[{i}]") for i, entry in enumerate(entries))
    return GateRules(parsed, source, correction)


def _parse_rule(entry: Any, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a mapping with a `kind`, got {entry!r}")
    kind = entry.get("kind")
    if kind not in RULE_CLASSES:
        raise UserError(f"{where}.kind: unknown kind {kind!r}; allowed: {', '.join(RULE_CLASSES)}")
    cls = RULE_CLASSES[kind]
    allowed = [f for f in cls.__dataclass_fields__]
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}' for kind {kind}; allowed: {', '.join(allowed)}")
    for key in REQUIRED_KEYS.get(kind, ()):
        if key not in entry:
            raise UserError(f"{where}: missing key '{key}' (kind {kind})")
    values: dict[str, Any] = {}
    for key, value in entry.items():
        if key != "kind":
            values[key] = _parse_value(kind, key, value, f"{where}.{key}")
    if kind == "ratio" and values.get("min") is None and values.get("max") is None:
        raise UserError(f"{where}: missing key 'min' (or 'max') (kind ratio)")
    return cls(**values)


def _parse_value(kind: str, key: str, value: Any, where: str) -> Any:
    if key == "metric":
        if value not in METRICS:
            raise UserError(f"{where}: unknown metric {value!r}; allowed: {', '.join(METRICS)}")
        return value
    if key == "name":
        return _string(value, where)
    if key in ("threshold", "tolerance"):
        return _number(value, where, low=0.0)
    if key == "alpha":
        number = _number(value, where, low=0.0)
        if not 0.0 < number < 1.0:
            raise UserError(f"{where}: expected a number in (0, 1), got {value!r}")
        return number
    if key in ("min", "max"):
        return _number(value, where, low=0.0, exclusive=True)
    if key == "test":
        if value not in TESTS:
            raise UserError(f"{where}: unknown test {value!r}; allowed: {', '.join(TESTS)}")
        return value
    if key in ("per_op", "tokens_match"):
        if not isinstance(value, bool):
            raise UserError(f"{where}: expected true or false, got {value!r}")
        return value
    if key in ("where", "numerator", "denominator"):
        return parse_selector(value, where)
    if key == "match":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{where}: expected a list of run fields, got {value!r}")
        for name in value:
            _check_field(name, where)
        return tuple(value)
    if key == "max_abs_logit_diff":
        if isinstance(value, dict):
            return {_string(dtype, where): _number(bound, f"{where}.{dtype}", low=0.0)
                    for dtype, bound in value.items()}
        return {"*": _number(value, where, low=0.0)}
    raise AssertionError(f"no parser for {kind}.{key}")  # every dataclass field has a branch above


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: expected a string, got {value!r}")
    return value


def _number(value: Any, where: str, low: float, exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{where}: expected a number, got {value!r}")
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
        elif name.startswith("eff."):
            values = value if isinstance(value, list) else [value]
            states = [_effective_state(v, item) for v in values]
            selector[name] = states if isinstance(value, list) else states[0]
        elif name.startswith("req.") and not isinstance(value, bool):
            raise UserError(f"{item}: expected true or false, got {value!r}")
        else:
            selector[name] = value
    return selector
