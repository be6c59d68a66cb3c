"""The Plan tab: the planner on the form's model, workload and SLO; a chosen plan loads into the form."""

from __future__ import annotations

import threading
import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Static

from qmodel.errors import QmodelError

from .. import planning
from .base import Pane
from ..widgets import CatalogPicker, Choice, TableView

__all__ = ["PlanPane"]


class PlanPane(Pane):
    """Runs the planner in a daemon thread (it reports no progress; an elapsed-time line shows it is
    alive); ``rows`` are the last ranked :class:`~qmodel.tui.planning.PlanChoice` rows."""

    TITLE = "Plan"
    SCOPED_CSS = False  # read per class by Textual: the rules below name the pane themselves
    DEFAULT_CSS = """
    PlanPane .toolbar #plan-target {
        width: 14;
    }
    PlanPane .toolbar #plan-objective {
        width: 15;
    }
    """

    def __init__(self) -> None:
        super().__init__(self.TITLE, id="tab-plan")
        self.rows: list = []

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="pane"):
            with Horizontal(classes="toolbar"):
                yield Choice(["max-goodput", "min-gpus", "min-cost"], "max-goodput", title="Objective",
                             id="plan-objective")
                yield Input(placeholder="target req/s", id="plan-target", compact=True,
                            tooltip="min-gpus / min-cost: the rate to meet (blank: the scenario rate)")
                yield Button("Run", id="plan-run", compact=True)
            yield Static(id="plan-status")
            yield TableView(id="plan-table")
            with Horizontal(classes="toolbar"):
                yield Button("Load plan…", id="plan-load", compact=True, disabled=True)

    def on_mount(self) -> None:
        msg = ("Search deployments for this model, workload and SLO: choose an objective and press Run."
               if planning.planner_available() else "The planner is not available in this build.")
        self.query_one("#plan-status", Static).update(Text(msg, style="dim"))

    @on(Button.Pressed, "#plan-run")
    def _run_button(self) -> None:
        self.start()

    def start(self) -> None:
        """Plan for the form's scenario with the objective and target rate in the toolbar."""
        status = self.query_one("#plan-status", Static)
        if not planning.planner_available():
            status.update(Text("The planner is not available in this build.", style="red"))
            return
        fb = self.app.build_state
        if fb is None or fb.scenario is None:
            status.update(Text("Fix the highlighted fields first.", style="red"))
            return
        objective = self.query_one("#plan-objective", Choice).value
        target_text = self.query_one("#plan-target", Input).value.strip()
        target = None
        if target_text:
            from qmodel.units import parse_rate

            try:
                target = parse_rate(target_text, "target rate")
            except QmodelError as err:
                status.update(Text(str(err), style="red"))
                return
        status.update(Text(f"planning ({objective})…", style="dim"))
        self.query_one("#plan-run", Button).disabled = True
        t0 = time.perf_counter()
        self.start_ticker(lambda: status.update(
            Text(f"planning ({objective})… {time.perf_counter() - t0:.0f} s", style="dim")))
        threading.Thread(target=self._thread, args=(fb.scenario, objective, target), daemon=True,
                         name="qmodel-plan").start()

    def _thread(self, scenario, objective: str, target: float | None) -> None:
        app = self.app
        t0 = time.perf_counter()
        try:
            rows = planning.run_planner(scenario, objective, target)
        except QmodelError as err:
            app.call_if_running(self._done, None, str(err), 0.0)
            return
        except Exception as err:  # report planner failures in the tab
            app.call_if_running(self._done, None, f"planner failed: {type(err).__name__}: {err}", 0.0)
            return
        app.call_if_running(self._done, rows, "", time.perf_counter() - t0)

    def _done(self, rows, error: str, elapsed: float) -> None:
        self.stop_ticker()
        self.query_one("#plan-run", Button).disabled = False
        status = self.query_one("#plan-status", Static)
        if rows is None:
            status.update(Text(error, style="red"))
            return
        self.rows = rows
        status.update(Text(f"{len(rows)} plans" + (f" in {elapsed:.1f} s" if self.app.show_timings else "")
                           + "; pick one below to load it into the form", style="green"))
        self.query_one("#plan-table", TableView).update(planning.render_plans(rows))
        self.query_one("#plan-load", Button).disabled = not rows

    @on(Button.Pressed, "#plan-load")
    def choose(self) -> None:
        """Pick a ranked plan to load into the form."""
        labels = [f"#{i + 1} {r.label}" for i, r in enumerate(self.rows)]
        if not labels:
            self.app.notify("No plans yet: F5 runs the planner", severity="warning")
            return

        def chosen(label: str | None) -> None:
            if label in labels:
                self.load(labels.index(label))

        self.app.push_screen(CatalogPicker("a plan", labels), chosen)

    def load(self, index: int) -> None:
        """Put plan ``index`` into the form."""
        row = self.rows[index]
        self.app.load_raw(row.scenario.model_dump(mode="json", exclude_none=True), keep_folder=True)
        self.app.notify(f"Loaded plan #{index + 1}: {row.label}")
