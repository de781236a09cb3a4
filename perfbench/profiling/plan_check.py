"""Check a trace against the plan that produced it: every toggle's signature (signatures.py) for its state.

    results = check_plan(events, {"graph_mode": "on", ...}, "cpu")
    [r.line for r in results if r.ok is False]   # "graph_mode on, but 2470 eager aten ops per decode step"

A toggle without a signature on the device, or whose expectations need annotations the trace lacks (module
scopes are off under graph mode; no decode phase), is reported as not checked, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import pandas as pd

from perfbench.profiling.events import check_events, primary_side
from perfbench.profiling.signatures import SIGNATURES, Expectation


@dataclass(frozen=True)
class ToggleCheck:
    """One toggle's verdict: ok True (every expectation held), False (`line` says what broke), None (not
    checked, `line` says why)."""

    toggle: str
    state: str
    ok: bool | None
    line: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _counts(events: pd.DataFrame, expect: Expectation) -> tuple[tuple[float, float] | None, str]:
    """((lowest, highest) count the expectation bounds, "") or (None, why it cannot be counted here)."""
    side = expect.side or primary_side(events)
    rows = events[events["side"] == side]
    if expect.phase is not None:
        rows = rows[rows["phase"] == expect.phase]
        if rows.empty:
            return None, f"no {expect.phase} {side} events"
    if expect.modules:
        rows = rows[rows["module"].isin(expect.modules)]
        if rows.empty:
            return None, f"no {'/'.join(expect.modules)} scopes in the trace"
    rows = rows.assign(hit=rows["name"].str.contains(expect.pattern, case=False, regex=True))
    if expect.per == "step":
        steps = rows.loc[rows["step"].notna(), ["rank", "step"]].drop_duplicates().shape[0]
        if steps == 0:
            return None, "no steps in the trace"
        mean = float(rows["hit"].sum()) / steps
        return (mean, mean), ""
    if expect.per == "layer":
        calls = rows.groupby(["rank", "layer", "module"], dropna=True)["hit"].sum()
        if calls.empty:
            return None, "no layer annotations in the trace"
        return (float(calls.min()), float(calls.max())), ""
    total = float(rows["hit"].sum())
    return (total, total), ""


def _broken(expect: Expectation, low: float, high: float) -> str:
    """"" when the counts are within bounds, else the mismatch text."""
    unit = {"step": " per decode step", "layer": ""}.get(expect.per or "", "")
    if expect.at_most is not None and high > expect.at_most:
        if expect.at_most == 0:
            return f"{_amount(high)} {expect.what}"
        return f"{_amount(high)} {expect.what}{unit} (expected at most {expect.at_most:g})"
    if expect.at_least is not None and low < expect.at_least:
        if expect.at_least == 1 and expect.per is None:
            return f"no {expect.what}"
        return f"{_amount(low)} {expect.what}{unit} (expected at least {expect.at_least:g})"
    return ""


def _amount(count: float) -> str:
    return f"{count:,.0f}" if count == int(count) else f"{count:,.1f}"


def check_plan(events: pd.DataFrame, states: Mapping[str, str], device: str,
               variants: Mapping[str, str] | None = None) -> list[ToggleCheck]:
    """Every toggle of `states` (name -> on/off/inactive) checked against its signature on `device`, or on the
    plan variant `variants` names for it (chunk_gdr: "cuda_torch" without fla, "cpu_eager" without a C++
    compiler), whose kernels differ from the device's default."""
    check_events(events)
    kind = device.split(":", 1)[0].lower()
    results = []
    for toggle, state in states.items():
        signature = SIGNATURES.get(toggle, {}).get((variants or {}).get(toggle) or kind)
        label = "on" if state == "on" else "off"
        if signature is None:
            where = (variants or {}).get(toggle) or kind
            results.append(ToggleCheck(toggle, state, None, f"{toggle}: no trace signature on {where}"))
            continue
        expectations = signature.on if state == "on" else signature.off
        broken, unchecked = [], []
        for expect in expectations:
            counts, why = _counts(events, expect)
            if counts is None:
                unchecked.append(why)
            elif problem := _broken(expect, *counts):
                broken.append(problem)
        if broken:
            results.append(ToggleCheck(toggle, state, False, f"{toggle} {label}, but {'; '.join(broken)}"))
        elif unchecked and len(unchecked) == len(expectations):
            results.append(ToggleCheck(toggle, state, None, f"{toggle} {label}: not checked ({unchecked[0]})"))
        else:
            results.append(ToggleCheck(toggle, state, True, f"{toggle} {label}: trace matches"))
    return results


def mismatches(results: list[ToggleCheck]) -> list[str]:
    """The lines of the toggles whose trace contradicts the plan."""
    return [r.line for r in results if r.ok is False]
