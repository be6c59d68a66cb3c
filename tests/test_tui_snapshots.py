"""SVG snapshots of the main screens (pytest-textual-snapshot), on the deterministic fake engine.

Fixed terminal sizes, no clock in the header, no timings on screen, focus cleared (no blinking
cursor) and notifications dismissed, so the SVGs are byte-stable. The fake engine keeps them
independent of the stations' numerics; the real engine is covered by test_tui_session.py.
Update after an intended layout change with ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qmodel.tui.app import QmodelApp
from tui_fakes import FakeEngine, fake_plans, fill_every_tab, settle

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"


def _app() -> QmodelApp:
    return QmodelApp(str(EXAMPLE), engine=FakeEngine(), show_timings=False)  # every stage: the plots fill in


def _before(tab: str | None = None, actions=None):
    async def run_before(pilot) -> None:
        app = pilot.app
        await settle(app, pilot)
        if actions is not None:
            await actions(pilot)
            await settle(app, pilot)
        if tab:
            app.query_one("#tabs").active = tab
        app.set_focus(None)
        app.clear_notifications()
        await pilot.pause()
    return run_before


TABS = ("tab-results", "tab-plots", "tab-compare", "tab-plan", "tab-replay")


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
@pytest.mark.parametrize("tab", TABS)
def test_every_tab(snap_compare, monkeypatch, tab: str, size: tuple[int, int]) -> None:
    """Each tab with everything in it: two pins, three (fake) plans and a (fake) replay."""
    from qmodel.tui import planning

    monkeypatch.setattr(planning, "run_planner", fake_plans)

    async def fill(pilot) -> None:
        await fill_every_tab(pilot.app, pilot)

    assert snap_compare(_app(), terminal_size=size, run_before=_before(tab, fill))


def test_inline_error_80x24(snap_compare) -> None:
    async def bad_tp(pilot) -> None:
        pilot.app.set_field("deployment.prefill.tp", "four")

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_before(None, bad_tp))


def test_unstable_80x24(snap_compare) -> None:
    async def overload(pilot) -> None:
        pilot.app.set_field("workload.arrivals.rate_per_s", "30")

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_before(None, overload))
