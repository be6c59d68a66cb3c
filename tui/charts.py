"""Terminal plots drawn with Unicode braille and block characters, as Rich ``Text``.

No plotting dependency: a braille cell holds a 2 x 4 dot matrix, so a W x H character plot has
2W x 4H dots of resolution, plenty for attainment curves and latency CDFs; block eighths draw the
density bars and shaded cells the heatmap. Everything is a pure function of its inputs (no clock,
no randomness), so SVG snapshots of the app are deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from rich.text import Text

__all__ = ["Series", "VLine", "line_chart", "density_bars", "heatmap", "fmt_num", "tick_row", "duration_axis",
           "BRAILLE_BASE"]

BRAILLE_BASE = 0x2800
# Dot bit for (column 0..1, row 0..3) inside one braille cell (Unicode braille layout).
_DOT = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
_EIGHTHS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    style: str


@dataclass(frozen=True)
class VLine:
    """A vertical (``x`` set) or horizontal (``y`` set) reference line."""

    style: str
    label: str = ""
    x: float | None = None
    y: float | None = None


def fmt_num(x: float) -> str:
    """Short axis label: 3 significant digits, k/M suffixes, no exponent."""
    if x == 0 or not math.isfinite(x):
        return "0"
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.3g}M"
    if a >= 1e4:
        return f"{x / 1e3:.3g}k"
    if a >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _ticks(lo: float, hi: float, n: int) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def tick_row(width: int, ticks: Sequence[tuple[int, str]], gap: int = 2) -> str:
    """One line of axis labels, each centred on its column (clamped inside the line), with at least
    ``gap`` spaces between neighbours: the two end labels are placed first, then the inner ones
    that fit; a label that would touch another is left out rather than overwrite it."""
    row = [" "] * width
    used = [False] * width
    order = list(ticks[:1]) + list(ticks[-1:] if len(ticks) > 1 else []) + list(ticks[1:-1])
    for pos, lab in order:
        if len(lab) > width:
            continue
        start = min(max(pos - len(lab) // 2, 0), width - len(lab))
        lo, hi = max(start - gap, 0), min(start + len(lab) + gap, width)
        if any(used[lo:hi]):
            continue
        for k, ch in enumerate(lab):
            row[start + k] = ch
            used[start + k] = True
    return "".join(row)


def duration_axis(hi_s: float) -> tuple[float, str]:
    """(factor, unit) for an axis of durations up to ``hi_s`` seconds: µs, ms or s, so the ticks are
    plain numbers and the unit is said once, in the axis label."""
    if hi_s < 1e-3:
        return 1e6, "µs"
    if hi_s < 1.0:
        return 1e3, "ms"
    return 1.0, "s"


def _axis_titles(out: Text, text: str, width: int, right: bool) -> None:
    out.append((text.rjust(width) if right else text)[:width], style="dim italic")


def line_chart(series: Sequence[Series], width: int, height: int, *, x_range: tuple[float, float] | None = None,
               y_range: tuple[float, float] | None = None, refs: Sequence[VLine] = (), x_label: str = "",
               y_label: str = "", y_fmt=fmt_num, x_fmt=fmt_num, x_marks: Sequence[tuple[float, str]] = ()) -> Text:
    """Braille line chart with a y axis on the left and x ticks below (width x height characters).

    ``y_label`` / ``x_label``: the axis titles with their units, on a line above the plot and one
    below the ticks (right-aligned). ``x_marks``: (x, style) drawn as ▲ on the x axis (the knee of
    each curve, say).
    """
    y_axis_w = 6
    plot_w = max(width - y_axis_w - 1, 4)
    plot_h = max(height - 2 - bool(x_label) - bool(y_label), 2)
    xs_all = [x for s in series for x in s.xs]
    ys_all = [y for s in series for y in s.ys]
    x0, x1 = x_range if x_range else ((min(xs_all), max(xs_all)) if xs_all else (0.0, 1.0))
    y0, y1 = y_range if y_range else ((min(ys_all), max(ys_all)) if ys_all else (0.0, 1.0))
    if x1 <= x0:
        x1 = x0 + 1.0
    if y1 <= y0:
        y1 = y0 + 1.0
    dots_w, dots_h = plot_w * 2, plot_h * 4
    bits = [[0] * plot_w for _ in range(plot_h)]
    owner: list[list[str | None]] = [[None] * plot_w for _ in range(plot_h)]

    def dot(px: int, py: int, style: str) -> None:
        if 0 <= px < dots_w and 0 <= py < dots_h:
            r, c = py // 4, px // 2
            bits[r][c] |= _DOT[py % 4][px % 2]
            owner[r][c] = style

    def to_px(x: float) -> float:
        return (x - x0) / (x1 - x0) * (dots_w - 1)

    def to_py(y: float) -> float:
        return (1.0 - (y - y0) / (y1 - y0)) * (dots_h - 1)

    for ref in refs:
        if ref.x is not None and x0 <= ref.x <= x1:
            px = int(round(to_px(ref.x)))
            for py in range(0, dots_h, 2):
                dot(px, py, ref.style)
        if ref.y is not None and y0 <= ref.y <= y1:
            py = int(round(to_py(ref.y)))
            for px in range(0, dots_w, 2):
                dot(px, py, ref.style)
    for s in series:
        pts = [(to_px(x), to_py(y)) for x, y in zip(s.xs, s.ys) if math.isfinite(x) and math.isfinite(y)]
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            steps = int(max(abs(bx - ax), abs(by - ay), 1))
            for k in range(steps + 1):
                t = k / steps
                dot(int(round(ax + (bx - ax) * t)), int(round(ay + (by - ay) * t)), s.style)
        if len(pts) == 1:
            dot(int(round(pts[0][0])), int(round(pts[0][1])), s.style)

    out = Text(no_wrap=True, overflow="crop")
    if y_label:
        _axis_titles(out, y_label, y_axis_w + 1 + plot_w, right=False)
        out.append("\n")
    y_ticks = {0: y1, plot_h - 1: y0, (plot_h - 1) // 2: (y0 + y1) / 2}
    for r in range(plot_h):
        label = y_fmt(y_ticks[r]) if r in y_ticks else ""
        out.append(label.rjust(y_axis_w)[:y_axis_w] + "┤" if label else " " * y_axis_w + "│", style="dim")
        for c in range(plot_w):
            b = bits[r][c]
            out.append(chr(BRAILLE_BASE + b) if b else " ", style=owner[r][c] or "")
        out.append("\n")
    axis = ["─"] * plot_w
    axis_style = ["dim"] * plot_w
    for xv, st in x_marks:
        if x0 <= xv <= x1:
            c = min(int(round(to_px(xv))) // 2, plot_w - 1)
            axis[c], axis_style[c] = "▲", st
    out.append(" " * y_axis_w + "└", style="dim")
    for ch, st in zip(axis, axis_style):
        out.append(ch, style=st)
    out.append("\n")
    n_ticks = max(2, min(5, plot_w // 12))
    ticks = [(y_axis_w + 1 + int(round(i / (n_ticks - 1) * (plot_w - 1))), x_fmt(xv))
             for i, xv in enumerate(_ticks(x0, x1, n_ticks))]
    out.append(tick_row(y_axis_w + 1 + plot_w, ticks), style="dim")
    if x_label:
        out.append("\n")
        _axis_titles(out, x_label, y_axis_w + 1 + plot_w, right=True)
    return out


def density_bars(x_s: Sequence[float], cdf: Sequence[float], width: int, height: int, *,
                 marks: Sequence[tuple[float, str, str]] = (), style: str = "cyan", x_fmt=fmt_num,
                 x_label: str = "", y_label: str = "") -> Text:
    """Histogram of a distribution given by its CDF on a grid: one column per bin, block eighths.

    ``marks``: (x, label, style) drawn as a coloured column marker under the bars (SLO target,
    percentiles). ``y_label`` / ``x_label``: axis titles (with units) above the bars and below the
    ticks. The probability mass beyond the grid's right end is not drawn.
    """
    plot_w = max(width - 1, 4)
    plot_h = max(height - 2 - bool(x_label) - bool(y_label), 1)
    n = len(x_s)
    if n < 2:
        return Text("")
    lo, hi = x_s[0], x_s[-1]
    edges = [lo + (hi - lo) * i / plot_w for i in range(plot_w + 1)]

    def cdf_at(x: float) -> float:
        # Piecewise-linear interpolation of the sampled CDF.
        t = (x - lo) / (hi - lo) * (n - 1) if hi > lo else 0.0
        i = min(max(int(t), 0), n - 2)
        f = t - i
        return cdf[i] * (1 - f) + cdf[i + 1] * f

    cum = [cdf_at(e) for e in edges]
    mass = [max(cum[i + 1] - cum[i], 0.0) for i in range(plot_w)]
    mass[0] += cdf[0]  # the atom at zero (and anything below the first edge) goes in the first bin
    top = max(mass) or 1.0
    levels = [m / top * plot_h * 8 for m in mass]
    mark_cols: dict[int, str] = {}
    for x, _, st in marks:
        if lo <= x <= hi:
            mark_cols[min(int((x - lo) / (hi - lo) * plot_w), plot_w - 1)] = st
    out = Text(no_wrap=True, overflow="crop")
    if y_label:
        _axis_titles(out, y_label, plot_w + 1, right=False)
        out.append("\n")
    for r in range(plot_h):
        base = (plot_h - 1 - r) * 8
        out.append(" ")
        for c in range(plot_w):
            v = levels[c] - base
            ch = _EIGHTHS[8] if v >= 8 else _EIGHTHS[max(int(round(v)), 0)] if v > 0 else " "
            if ch == " " and c in mark_cols:
                out.append("│", style=mark_cols[c])
            else:
                out.append(ch, style=style)
        out.append("\n")
    # marker row: ^ under each mark, then the axis labels
    row = [" "] * (plot_w + 1)
    styles: list[str] = [""] * (plot_w + 1)
    for c, st in mark_cols.items():
        row[c + 1], styles[c + 1] = "▲", st
    for ch, st in zip(row, styles):
        out.append(ch, style=st)
    out.append("\n")
    ticks = [(1 + int(round((xv - lo) / (hi - lo) * (plot_w - 1))) if hi > lo else 1, x_fmt(xv))
             for xv in _ticks(lo, hi, max(2, min(4, plot_w // 14)))]
    out.append(tick_row(plot_w + 1, ticks), style="dim")
    if x_label:
        out.append("\n")
        _axis_titles(out, x_label, plot_w + 1, right=True)
    return out


def heatmap(values: Sequence[Sequence[float | None]], row_labels: Sequence[str], col_labels: Sequence[str], *,
            cell_w: int = 6, highlight: tuple[int, int] | None = None, best: tuple[int, int] | None = None,
            fmt=fmt_num) -> Text:
    """Shaded grid with the value printed in each cell; rows top to bottom as given.

    ``highlight`` / ``best``: (row, col) drawn in reverse video / bold so the current layout and the
    best one stand out without relying on colour alone.
    """
    finite = [v for row in values for v in row if v is not None and math.isfinite(v)]
    top = max(finite) if finite else 1.0
    top = top or 1.0
    lab_w = max((len(s) for s in row_labels), default=1) + 1
    out = Text(no_wrap=True, overflow="crop")
    out.append(" " * lab_w)
    for c in col_labels:
        out.append(c.center(cell_w)[:cell_w], style="bold")
    out.append("\n")
    for i, (lab, row) in enumerate(zip(row_labels, values)):
        out.append(lab.rjust(lab_w - 1) + " ", style="bold")
        for j, v in enumerate(row):
            if v is None:
                out.append("  ×  ".center(cell_w)[:cell_w], style="dim")
                continue
            frac = v / top
            # Background intensity encodes the value; the number is printed on top for exactness.
            level = int(40 + 180 * frac)
            style = f"black on rgb({level // 4},{level},{level // 2})" if frac > 0.05 else "on grey15"
            if (i, j) == best:
                style += " bold underline"
            if (i, j) == highlight:
                style += " reverse"
            out.append(fmt(v).center(cell_w)[:cell_w], style=style)
        out.append("\n")
    return out
