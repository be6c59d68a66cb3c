"""The Results tab: the metrics table of the current answer, or what keeps the form from solving."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll

from ..report import render_results
from .base import Pane
from ..widgets import TableView

__all__ = ["ResultsPane"]


class ResultsPane(Pane):
    """Latency percentiles, attainment, goodput, binding constraint and per-station table."""

    TITLE = "Results"
    SCOPED_CSS = False  # read per class by Textual: the rules below name the pane themselves
    DEFAULT_CSS = """
    ResultsPane #results {
        height: auto;
    }
    """

    def __init__(self) -> None:
        super().__init__(self.TITLE, id="tab-results")

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="pane"):
            yield TableView(id="results")

    def show(self, analysis, stage: str) -> None:
        """The answer (``None``: nothing solved yet) with ``stage``, the line saying what still runs."""
        self.query_one("#results", TableView).update(render_results(analysis, stage))

    def show_invalid(self, errors: dict[str, str]) -> None:
        """The fields that keep the form from being a scenario, one per line."""
        n = len(errors)
        self.query_one("#results", TableView).update(Text.assemble(
            (f"{n} field{'s' if n != 1 else ''} need{'s' if n == 1 else ''} fixing", "bold red"),
            ("\n" + "\n".join(f"{k}: {v}" for k, v in errors.items()), "red")))
