"""The inline SVG charts: round axis ticks, a <title> on every mark (the value on hover), every string escaped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from perfbench.pages.svg import ForestRow, TrendMark, TrendPoint, forest_plot, nice_ticks, trend_chart

HOSTILE = '<script>alert(1)</script>&"'


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0.66, 1.48, 6) == [0.8, 1.0, 1.2, 1.4]
    assert nice_ticks(0, 1000, 4) == [0, 500, 1000]
    assert nice_ticks(-0.3, 2.1, 5) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert nice_ticks(3.0, 3.0) == [3.0]  # an empty range: its one value, never a division by zero


def test_a_forest_plot_is_well_formed_svg_with_one_titled_mark_per_row():
    rows = [ForestRow(HOSTILE, panel, 1.2, 1.1, 1.3, "#3a9a4a", f"hover {HOSTILE}") for panel in ("A", "B")]
    rows.append(ForestRow("other", "A", 0.9, None, None, "#c8413b", "no CI"))
    svg = forest_plot(rows, ["A", "B"], [("#3a9a4a", "faster")], "speed-up")
    root = ET.fromstring(svg)  # parses: every string was escaped
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == [f"hover {HOSTILE}", f"hover {HOSTILE}", "no CI"]
    assert "<script" not in svg
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert labels.count(HOSTILE) == 1  # one line per label, shared by both panels


def test_a_trend_chart_links_and_titles_each_point():
    points = [TrendPoint(float(i), 1.0 + i / 10, 0.9 + i / 10, 1.1 + i / 10, f"point {i}",
                         f"file:///r/{i}?a=1&b={HOSTILE}") for i in range(1, 6)]
    svg = trend_chart(points, [TrendMark(2.5, "+10%", "#3a9a4a", HOSTILE)], y_caption="x", x_caption="commit",
                      reference=1.0, colour="#4e79a7")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    links = [a.get("href") for a in root.iter(f"{ns}a")]
    assert links == [p.link for p in points]
    assert [t.text for t in root.iter(f"{ns}title")] == [HOSTILE] + [f"point {i}" for i in range(1, 6)]
    assert len(re.findall(r"<circle ", svg)) == 5
