"""The TUI's tabs, one :class:`~textual.widgets.TabPane` subclass each, with its own layout, CSS and
state: results, plots, compare (pinned scenarios), plan and replay. :class:`~qmodel.tui.app.QmodelApp`
keeps the form, the solve workers and the bindings, and tells the visible pane to redraw."""

from .compare import ComparePane
from .plan import PlanPane
from .plots import TOPOLOGY_STYLES, PlotsPane
from .replay import ReplayPane
from .results import ResultsPane

__all__ = ["ResultsPane", "PlotsPane", "ComparePane", "PlanPane", "ReplayPane", "TOPOLOGY_STYLES", "TABS"]

#: The tabs in order: (pane id, title); alt+right / alt+left step through them.
TABS = (("tab-results", ResultsPane.TITLE), ("tab-plots", PlotsPane.TITLE), ("tab-compare", ComparePane.TITLE),
        ("tab-plan", PlanPane.TITLE), ("tab-replay", ReplayPane.TITLE))
