"""The Replay tab: the event-driven replay of the current scenario at its rate, compared with the
analytic answer metric by metric."""

from __future__ import annotations

import threading
import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, ProgressBar, Static

from ..report import render_replay
from .base import Pane
from ..widgets import TableView

__all__ = ["ReplayPane"]


class ReplayPane(Pane):
    """Runs one replay at a time in a daemon thread (a replay cannot be interrupted, and quitting the
    app must not wait for it); ``check`` is the last finished comparison."""

    TITLE = "Replay"
    SCOPED_CSS = False  # read per class by Textual: the rules below name the pane themselves
    DEFAULT_CSS = """
    ReplayPane .toolbar #replay-seed {
        width: 6;
    }
    ReplayPane #replay-progress {
        margin-bottom: 1;
    }
    """

    def __init__(self, requests: int) -> None:
        super().__init__(self.TITLE, id="tab-replay")
        self.requests = requests
        self.check = None  # the last ReplayCheck
        self._t0 = 0.0
        self._what = ""

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="pane"):
            with Horizontal(classes="toolbar"):
                yield Label("requests")
                yield Input(str(self.requests), id="replay-n", compact=True)
                yield Label("seed")
                yield Input("0", id="replay-seed", compact=True)
                yield Button("Run", id="replay-run", compact=True)
            yield ProgressBar(total=100, show_eta=False, id="replay-progress")
            yield Static(id="replay-status")
            yield TableView(id="replay-table")

    def on_mount(self) -> None:
        self.query_one("#replay-status", Static).update(Text("Replays the scenario event by event at its rate "
                                                             "and compares with the analytic answer.", style="dim"))

    @on(Button.Pressed, "#replay-run")
    def _run_button(self) -> None:
        self.start()

    def start(self) -> None:
        """Replay the app's current analysis with the requests and seed typed in the toolbar."""
        a = self.app.analysis
        status = self.query_one("#replay-status", Static)
        if a is None or a.result is None:
            status.update(Text("Needs a solved scenario at a stable rate first.", style="red"))
            return
        try:
            n = int(self.query_one("#replay-n", Input).value)
            seed = int(self.query_one("#replay-seed", Input).value)
            if n < 100:
                raise ValueError
        except ValueError:
            status.update(Text("requests: a whole number >= 100; seed: a whole number", style="red"))
            return
        self.query_one("#replay-run", Button).disabled = True
        self.query_one("#replay-progress", ProgressBar).update(progress=0)
        self.query_one("#replay-table", TableView).update("")
        self._t0, self._what = time.perf_counter(), "starting"
        self.start_ticker(self._tick)
        threading.Thread(target=self._thread, args=(a, n, seed), daemon=True, name="qmodel-replay").start()

    def _tick(self) -> None:
        self.query_one("#replay-status", Static).update(
            Text(f"{self._what} ({time.perf_counter() - self._t0:.0f} s)", style="dim"))

    def _thread(self, a, n: int, seed: int) -> None:
        app = self.app

        def progress(frac: float, what: str) -> None:
            app.call_if_running(self._progress, frac, what)

        try:
            check = app.engine.replay(a.scenario, a.result, n, seed, progress)
        except ImportError:
            app.call_if_running(self._done, None, "the replay is not installed in this build")
            return
        except Exception as err:  # show any failure in the tab rather than crash the app
            app.call_if_running(self._done, None, f"replay failed: {err}")
            return
        app.call_if_running(self._done, check, "")

    def _progress(self, frac: float, what: str) -> None:
        self._what = what
        self.query_one("#replay-progress", ProgressBar).update(progress=100 * frac)
        self._tick()

    def _done(self, check, error: str) -> None:
        self.stop_ticker()
        self.query_one("#replay-run", Button).disabled = False
        status = self.query_one("#replay-status", Static)
        if check is None:
            status.update(Text(error, style="red"))
            return
        self.check = check
        self.query_one("#replay-progress", ProgressBar).update(progress=100)
        status.update(Text(f"replay done: {check.requests} requests"
                           + (f" in {check.elapsed_s:.1f} s" if self.app.show_timings else ""), style="green"))
        self.query_one("#replay-table", TableView).update(render_replay(check))
