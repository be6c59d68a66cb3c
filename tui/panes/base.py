"""What every tab shares: a padded pane that scrolls sideways rather than squeeze a table, and the
toolbar of compact inputs and buttons (compare, plan, replay)."""

from __future__ import annotations

from textual.widgets import TabPane

__all__ = ["Pane"]


class Pane(TabPane):
    """A tab of the TUI; subclasses compose its content and say how to draw the current answer."""

    TITLE = ""
    _ticker = None  # the elapsed-time line's timer while a background job runs (plan, replay)
    SCOPED_CSS = False  # the rules name the pane type themselves (a scoped ".-wide" could not reach the screen)
    DEFAULT_CSS = """
    Pane {
        padding: 0 1;
    }
    /* Tables never shrink below their minimum width (TableView): a pane that cannot hold one scrolls sideways. */
    Pane .pane {
        overflow-x: auto;
        scrollbar-size-horizontal: 1;
        scrollbar-size-vertical: 1;
    }
    Pane .toolbar {
        height: auto;
        margin-bottom: 1;
    }
    Pane .toolbar > * {
        margin-right: 1;
    }
    Pane .toolbar Input {
        width: 8;
    }
    Pane .toolbar Button {
        min-width: 0;
    }
    Pane .toolbar Label {
        padding-top: 0;
    }
    """

    def start_ticker(self, tick) -> None:
        """Call ``tick`` every 0.5 s until :meth:`stop_ticker`: the planner and the replay report no
        progress of their own, so an elapsed-time line shows they are alive."""
        self._ticker = self.set_interval(0.5, tick)

    def stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
