"""Table rendering: number formatting, escaping, CSV columns."""

from __future__ import annotations

import csv
import io
import math

import pytest

from perfbench.pages.table import Column, Table, format_cell, format_number

HOSTILE = '<img src=x onerror="alert(1)">&'


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (1.0002582, "1.000"), (12.3456, "12.35"), (999.94, "999.9"), (1234.6, "1235"),
    (-0.0026531, "-0.002653"), (1.5e-6, "1.500e-06"), (math.nan, "nan"), (math.inf, "inf"),
])
def test_format_number_keeps_four_significant_digits(value, text):
    assert format_number(value) == text


def test_format_cell_by_type():
    assert [format_cell(v) for v in (None, True, False, 7, "x")] == ["", "yes", "no", "7", "x"]


def test_every_string_is_escaped_and_numbers_sort_by_value():
    columns = [Column("name", HOSTILE), Column("value", ci=("lo", "hi"), title_key="why", suffix="x"),
               Column("state", mark_key="state")]
    table = Table("t", columns,
                  [{"name": HOSTILE, "value": 1.25, "lo": 1.2, "hi": 1.3, "why": HOSTILE, "state": '"on'}],
                  caption=HOSTILE)
    page = table.html()
    assert "<img" not in page
    # header, cell, title attribute, caption
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;") == 4
    assert 'data-sort="1.25"' in page
    assert "1.250x" in page and "[1.200, 1.300]" in page
    assert 'class="mark mark-&quot;on"' in page


def test_csv_holds_full_precision_and_the_extra_columns():
    table = Table("t", [Column("value", ci=("lo", "hi"), title_key="why"), Column("flag")],
                  [{"value": 1 / 3, "lo": 0.25, "hi": None, "why": "a,b", "flag": True}])
    rows = list(csv.reader(io.StringIO(table.csv_text())))
    assert rows[0] == ["value", "lo", "hi", "why", "flag"]
    assert rows[1] == [repr(1 / 3), "0.25", "", "a,b", "yes"]


def test_a_collapsed_table_folds_under_its_escaped_caption():
    page = Table("t", [Column("k")], [{"k": "v"}], caption=HOSTILE, collapsed=True).html()
    assert page.startswith("<details><summary>&lt;img")
    assert page.rstrip().endswith("</details>")


def test_only_a_wrapping_column_lets_its_cells_wrap():
    page = Table("t", [Column("id"), Column("message", wrap=True)], [{"id": "r-1", "message": "long text"}]).html()
    assert "<td>r-1</td>" in page and '<td class="wrap">long text</td>' in page
