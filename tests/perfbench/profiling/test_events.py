from __future__ import annotations

import pandas as pd
import pytest

from perfbench.profiling.events import (
    ALL_COLUMNS,
    COLUMNS,
    DTYPES,
    OPTIONAL_DTYPES,
    check_events,
    concat_events,
    empty_events,
    events_from_columns,
    primary_side,
    us_text_to_ns,
)


def test_empty_table_has_the_canonical_columns_and_dtypes():
    empty = empty_events()
    assert list(empty.columns) == list(ALL_COLUMNS) and len(empty) == 0
    assert {c: str(empty[c].dtype) for c in ALL_COLUMNS} == {**DTYPES, **OPTIONAL_DTYPES}


def test_events_from_columns_fills_missing_columns_with_nulls():
    events = events_from_columns({"name": ["a", "b"], "side": ["host", "device"], "dur_us": [1.0, 2.0],
                                  "layer": [3, None], "start_us": [0.0, 1.0]})
    assert {c: str(events[c].dtype) for c in COLUMNS} == DTYPES
    assert events["layer"].tolist()[0] == 3 and pd.isna(events["layer"].iloc[1])
    assert events["phase"].isna().all() and events["rank"].tolist() == [0, 0]
    assert primary_side(events) == "device"
    assert primary_side(events[events["side"] == "host"]) == "host"


def test_events_from_columns_rejects_ragged_columns():
    with pytest.raises(ValueError, match="differ in length"):
        events_from_columns({"name": ["a"], "dur_us": [1.0, 2.0]})


def test_concat_keeps_dtypes_and_check_rejects_non_tables():
    common = {"side": ["host"], "start_us": [0.0], "dur_us": [1.0]}
    a = events_from_columns({"name": ["a"], "layer": [None], **common})
    b = events_from_columns({"name": ["b"], "layer": [2], **common})
    both = concat_events([a, empty_events(), b])
    assert {c: str(both[c].dtype) for c in COLUMNS} == DTYPES and len(both) == 2
    assert len(concat_events([])) == 0
    with pytest.raises(ValueError, match="missing columns"):
        check_events(pd.DataFrame({"name": ["x"]}))
    with pytest.raises(ValueError, match="side"):
        check_events(a.assign(side="gpu"))


@pytest.mark.parametrize("text, ns", [
    ("1736408883704643.212\t", 1736408883704643212),
    ('"1736413971558972.912\t"', 1736413971558972912),
    ("1699529622790614.8", 1699529622790614800),
    ("1764246877073569.640", 1764246877073569640),
    ("12", 12000),
    ("1.0004", 1000),  # sub-ns digits round half-even
    ("1.0006", 1001),
    (17, 17000),
    (1.5, 1500),
])
def test_us_text_to_ns_is_exact(text, ns):
    assert us_text_to_ns(text) == ns


def test_us_text_to_ns_rejects_garbage():
    with pytest.raises(ValueError, match="timestamp"):
        us_text_to_ns("N/A")
