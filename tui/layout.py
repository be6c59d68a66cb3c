"""Width rules for the TUI's tables (Rich only, no Textual): numbers are never cut, words never split.

Rich shrinks a table that is wider than its box by wrapping its wrappable columns and then, if it
is still too wide, by cropping every column, numbers included; a column narrower than its longest
word folds that word letter by letter. Three rules keep every table legible at 80 columns:

* :func:`keep_whole`: a ``no_wrap`` column (the numbers) gets ``min_width`` = its widest cell, so the
  table's measured minimum counts it whole;
* :func:`minimum_width`: that measured minimum (whole numbers, the longest word of each text column,
  the padding); the widget showing the table never gets narrower than it and its container scrolls
  sideways instead (:class:`qmodel.tui.widgets.TableView`);
* :class:`ByWidth`: a renderable with a wide and a narrow form (fewer, shorter columns), drawn wide
  when the wide form's minimum fits the box and narrow otherwise.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["keep_whole", "whole_lines", "minimum_width", "ByWidth", "UNBOUNDED"]

UNBOUNDED = 10_000  # the width a renderable is measured at to find its own minimum


def _cell_width(cell: object) -> int:
    if isinstance(cell, Text):
        return max((cell_len(line) for line in cell.plain.split("\n")), default=0)
    if isinstance(cell, str):
        return max((cell_len(line) for line in cell.split("\n")), default=0)
    return 0  # a nested renderable measures itself


def keep_whole(table: Table) -> Table:
    """Give each ``no_wrap`` column a minimum width of its widest cell (header included); returns ``table``."""
    for col in table.columns:
        if col.no_wrap:
            widths = [_cell_width(c) for c in col.cells] + [_cell_width(col.header)]
            col.min_width = max([col.min_width or 0, *widths])
    return table


def whole_lines(text: Text) -> Table:
    """``text`` (a grid of numbers, say) as a one-column table whose minimum is its longest line, so
    it scrolls sideways rather than wrapping at the spaces between its numbers."""
    t = Table.grid()
    t.add_column(no_wrap=True)
    t.add_row(text)
    return keep_whole(t)


def minimum_width(console: Console, renderable: RenderableType) -> int:
    """The narrowest width at which ``renderable`` shows every number whole and every word unbroken."""
    return Measurement.get(console, console.options.update_width(UNBOUNDED), renderable).minimum


class ByWidth:
    """``wide`` where its minimum width fits the box, else ``narrow`` (both built for the same rows)."""

    def __init__(self, wide: RenderableType, narrow: RenderableType) -> None:
        self.wide = wide
        self.narrow = narrow

    def _pick(self, console: Console, width: int) -> RenderableType:
        return self.wide if minimum_width(console, self.wide) <= width else self.narrow

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._pick(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lo = Measurement.get(console, options, self.narrow).minimum
        hi = Measurement.get(console, options, self._pick(console, options.max_width)).maximum
        return Measurement(min(lo, hi), hi)

