"""Terminal plots and the cost formula: exact character-level checks (the plots are pure functions)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmodel.tui.compute import usd_per_million_tokens
from qmodel.tui.plots import BRAILLE_BASE, Series, VLine, density_bars, heatmap, line_chart


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
