"""SVG snapshots of the main screens (pytest-textual-snapshot), on the deterministic fake engine.

Fixed terminal sizes, no clock in the header, no timings on screen, focus cleared (no blinking
cursor) and notifications dismissed, so the SVGs are byte-stable. The fake engine keeps them
independent of the stations' numerics; the real engine is covered by test_tui_engine.py.
Update after an intended layout change with ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

from qmodel.tui.app import QmodelApp
from tui_fakes import FakeEngine, settle

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"


def _app() -> QmodelApp:
    return QmodelApp(str(EXAMPLE), engine=FakeEngine(), show_timings=False)


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


def test_results_80x24(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_before())


def test_plots_wide(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(150, 50), run_before=_before("tab-plots"))


def test_compare_two_pins(snap_compare) -> None:
    async def pin_two(pilot) -> None:
        pilot.app.action_pin()
        pilot.app.set_field("deployment.decode.instances", "4")
        await settle(pilot.app, pilot)
        pilot.app.action_pin()

    assert snap_compare(_app(), terminal_size=(110, 36), run_before=_before("tab-compare", pin_two))


def test_inline_error_80x24(snap_compare) -> None:
    async def bad_tp(pilot) -> None:
        pilot.app.set_field("deployment.prefill.tp", "four")

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_before(None, bad_tp))


def test_unstable_80x24(snap_compare) -> None:
    async def overload(pilot) -> None:
        pilot.app.set_field("workload.arrivals.rate_per_s", "30")

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_before(None, overload))
