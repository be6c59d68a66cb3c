"""Terminal plots and the cost formula: exact character-level checks (the plots are pure functions)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from qmodel.tui.compute import usd_per_million_tokens
from qmodel.tui.charts import (BRAILLE_BASE, Series, VLine, density_bars, duration_axis, fmt_num, heatmap, line_chart,
                              tick_row)


def _braille_cells(text: str) -> list[tuple[int, int, int]]:
    out = []
    for r, line in enumerate(text.split("\n")):
        for c, ch in enumerate(line):
            if BRAILLE_BASE < ord(ch) <= BRAILLE_BASE + 0xFF:
                out.append((r, c, ord(ch) - BRAILLE_BASE))
    return out


def test_line_chart_places_corner_points_exactly() -> None:
    # Plot area: width 20 - 7 = 13 cells (26 dots), height 8 - 2 = 6 rows (24 dots).
    t = line_chart([Series("s", [0.0, 1.0], [0.0, 0.0], "red"), Series("t", [1.0], [1.0], "blue")], 20, 8,
                   x_range=(0, 1), y_range=(0, 1)).plain
    lines = t.split("\n")
    assert len(lines) == 8 and all(len(ln) <= 20 for ln in lines)
    cells = _braille_cells(t)
    # bottom row: a full horizontal line of the lowest dots (bits 0x40 | 0x80) across all 13 cells
    assert [(c, b) for r, c, b in cells if r == 5] == [(c, 0xC0) for c in range(7, 20)]
    # the single point (1, 1): top-right dot of the last cell (bit 0x08)
    assert (0, 19, 0x08) in cells


def test_reference_lines_are_dotted() -> None:
    t = line_chart([], 20, 8, x_range=(0, 1), y_range=(0, 1), refs=[VLine("y", x=0.0)]).plain
    rows = {r for r, c, b in _braille_cells(t) if c == 7}
    assert rows == set(range(6))


@settings(max_examples=30, deadline=None)
@given(st.integers(10, 120), st.integers(4, 40), st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=30))
def test_line_chart_fits_its_box(w: int, h: int, ys: list[float]) -> None:
    xs = list(range(len(ys)))
    lines = line_chart([Series("s", xs, ys, "red")], w, h).plain.split("\n")
    assert len(lines) == max(h - 2, 2) + 2
    assert all(len(ln) <= max(w, 11) for ln in lines)


def test_density_bars_of_an_exponential_decrease() -> None:
    xs = [i * 0.05 for i in range(200)]
    cdf = [1 - math.exp(-x) for x in xs]
    t = density_bars(xs, cdf, 41, 10, marks=[(math.log(10), "p90", "red")]).plain
    lines = t.split("\n")
    assert len(lines) == 10
    bars = lines[:8]
    heights = [sum(1 for ln in bars if ln[c] not in " │") for c in range(1, 41)]
    assert heights[0] == 8 and heights == sorted(heights, reverse=True)
    # the p90 marker sits in column floor(ln 10 / 9.95 * 40) + 1
    assert lines[8].index("▲") == int(math.log(10) / xs[-1] * 40) + 1


def test_heatmap_marks_current_and_best() -> None:
    t = heatmap([[1.0, None], [2.0, 4.0]], ["D1", "D2"], ["P1", "P2"], highlight=(0, 0), best=(1, 1))
    assert t.plain.split("\n")[1].split() == ["D1", "1", "×"]
    styles = {str(s.style) for s in t.spans}
    assert any("reverse" in s for s in styles) and any("underline" in s for s in styles)


def test_usd_per_million_tokens() -> None:
    # $10/h serving 1 req/s x 100 output tokens = 360,000 tokens/h -> $27.78 per million, exactly 1e7/360000.
    assert usd_per_million_tokens(10.0, 1.0, 100.0) == pytest.approx(1e7 / 360000, rel=1e-15)
    assert usd_per_million_tokens(None, 1.0, 100.0) is None
    assert usd_per_million_tokens(10.0, 0.0, 100.0) is None


def test_axis_titles_with_units_keep_the_box() -> None:
    t = line_chart([Series("s", [0.0, 1.0], [0.0, 1.0], "red")], 40, 12, x_range=(0, 1), y_range=(0, 1),
                   y_label="SLO attainment (%)", x_label="arrival rate (req/s)").plain.split("\n")
    assert len(t) == 12 and all(len(ln) <= 40 for ln in t)
    assert t[0].startswith("SLO attainment (%)")
    assert t[-1].endswith("arrival rate (req/s)") and len(t[-1]) == 40
    assert t[1].startswith("     1┤") and t[-4].startswith("     0┤")  # 8 plot rows: 12 - title - axis - ticks - title
    d = density_bars([i * 0.05 for i in range(200)], [1 - math.exp(-i * 0.05) for i in range(200)], 41, 10,
                     y_label="share of requests", x_label="TTFT (ms)").plain.split("\n")
    assert len(d) == 10 and d[0].startswith("share of requests") and d[-1].endswith("TTFT (ms)")


def test_duration_axis_units() -> None:
    assert duration_axis(5e-4) == (1e6, "µs")
    assert duration_axis(0.999) == (1e3, "ms")
    assert duration_axis(1.0) == (1.0, "s")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 160), st.lists(st.text("0123456789.kmsµ", min_size=1, max_size=9), min_size=1, max_size=6))
def test_tick_labels_never_collide(width: int, labels: list[str]) -> None:
    n = len(labels)
    ticks = [(round(i / max(n - 1, 1) * (width - 1)), lab) for i, lab in enumerate(labels)]
    row = tick_row(width, ticks)
    assert len(row) == width
    # every label drawn is whole and apart from its neighbours by at least two spaces
    tokens = row.split()
    assert all(tok in labels for tok in tokens)
    spans = [(m, m + len(t)) for t, m in zip(tokens, _starts(row, tokens))]
    assert all(b0 - a1 >= 2 for (_, a1), (b0, _) in zip(spans, spans[1:]))
    # the two end labels are always shown when they fit side by side
    if n > 1 and len(labels[0]) + len(labels[-1]) + 2 <= width:
        assert tokens[0] == labels[0] and tokens[-1] == labels[-1]


def _starts(row: str, tokens: list[str]) -> list[int]:
    out, at = [], 0
    for t in tokens:
        at = row.index(t, at)
        out.append(at)
        at += len(t)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(8, 120), st.floats(1e-5, 1e3))
@example(43, 0.423)  # the half-way label hypothesis found: 211.4999... ms on the axis
def test_histogram_tick_labels_are_whole_numbers(width: int, hi: float) -> None:
    xs = [hi * i / 99 for i in range(100)]
    cdf = [i / 99 for i in range(100)]
    factor, _ = duration_axis(hi)
    fmt = lambda v: fmt_num(v * factor)  # noqa: E731
    ticks_row = density_bars(xs, cdf, width, 8, x_fmt=fmt).plain.split("\n")[-1]
    # the axis spans the grid, xs[0]..xs[-1] (xs[-1] is hi to round-off: 0.423·99/99 is one ulp
    # below 0.423, and its half, 211.4999... ms, labels 211 where 0.423/2 labels 212)
    allowed = {fmt(xs[0] + (xs[-1] - xs[0]) * i / (k - 1)) for k in (2, 3, 4) for i in range(k)}
    assert set(ticks_row.split()) <= allowed
