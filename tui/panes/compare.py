"""The Compare tab: pinned scenarios side by side with the current one."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button

from ..report import render_compare
from .base import Pane
from ..widgets import CatalogPicker, TableView

__all__ = ["ComparePane"]


class ComparePane(Pane):
    """Holds the pinned entries: (label, solve generation, analysis). An entry pinned while its later
    stages still run is replaced as they arrive (:meth:`update_generation`)."""

    TITLE = "Compare"

    def __init__(self) -> None:
        super().__init__(self.TITLE, id="tab-compare")
        self.pinned: list[tuple[str, int, object]] = []

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="pane"):
            with Horizontal(classes="toolbar"):
                yield Button("Pin (F2)", id="pin", compact=True)
                yield Button("Clear", id="clear-pins", compact=True)
                yield Button("Load pinned…", id="load-pin", compact=True)
            yield TableView(id="compare")

    def pin(self, gen: int, analysis) -> str:
        """Pin ``analysis`` (solve generation ``gen``); returns its label."""
        label = f"#{len(self.pinned) + 1} {analysis.scenario.name}"
        self.pinned.append((label, gen, analysis))
        return label

    def update_generation(self, gen: int, analysis) -> None:
        """Entries pinned from generation ``gen`` take its newer stages."""
        for i, (label, g, _) in enumerate(self.pinned):
            if g == gen:
                self.pinned[i] = (label, g, analysis)

    def show(self, current) -> None:
        """The pinned entries, and ``current`` as a last column when it is none of them."""
        entries = [(label, a) for label, _, a in self.pinned]
        if current is not None and not current.error and entries:
            if all(a.sha256 != current.sha256 for _, a in entries):
                entries.append(("current", current))
        self.query_one("#compare", TableView).update(render_compare(entries))
        self.query_one("#load-pin", Button).disabled = not self.pinned

    @on(Button.Pressed, "#pin")
    def _pin_button(self) -> None:
        self.app.action_pin()

    @on(Button.Pressed, "#clear-pins")
    def clear(self) -> None:
        self.pinned.clear()
        self.show(self.app.analysis)

    @on(Button.Pressed, "#load-pin")
    def choose(self) -> None:
        """Pick a pinned entry to load back into the form."""
        labels = [label for label, _, _ in self.pinned]
        if not labels:
            self.app.notify("Nothing pinned yet: F2 pins the current scenario", severity="warning")
            return

        def chosen(label: str | None) -> None:
            if label in labels:
                self.app.load_pinned(labels.index(label))

        self.app.push_screen(CatalogPicker("a pinned scenario", labels), chosen)
