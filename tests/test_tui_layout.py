"""Every tab legible at 80x24 (issue 21): numbers are never cut and no word is split letter by letter.

Each table widget's content is rendered at the width the layout gave it, and every word of that
render must be a whole word of the same content rendered without a width limit (or of its narrow
form): a number cropped to fit ("276 m"), an ellipsis ("27…") or a word folded per letter
("h100-sx" / "m") is a fragment and fails. The Plan, Replay and two-pin Compare tabs must also fit
beside the form without scrolling sideways (their narrow forms), which is checked on the pane.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from qmodel.tui.app import QmodelApp
from qmodel.tui.compute import STAGES
from qmodel.tui.layout import UNBOUNDED, ByWidth
from qmodel.tui.widgets import TableView
from tui_fakes import FakeEngine, fake_plans, fill_every_tab, settle

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"


def _words(console, renderable, width: int) -> set[str]:
    lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
    return {w for line in lines for w in "".join(seg.text for seg in line).split()}


def _legible(app, view: TableView) -> list[str]:
    """The words of ``view`` as laid out that are not whole words of its content (empty: legible)."""
    renderable = view.content  # Static.content: the renderable last given to update()
    console = app.console
    whole = _words(console, renderable, UNBOUNDED)
    if isinstance(renderable, ByWidth):
        whole |= _words(console, renderable.narrow, UNBOUNDED)
    shown = _words(console, renderable, view.content_size.width)
    return sorted(shown - whole)


@pytest.fixture(scope="module")
def tabs_at_80x24():
    """The app at 80x24 with results, two pins, three plans and a replay; per tab: (fragments, pane scroll x)."""
    from qmodel.tui import planning

    orig = planning.run_planner
    planning.run_planner = fake_plans
    out: dict[str, tuple[dict[str, list[str]], float]] = {}

    async def go():
        app = QmodelApp(str(EXAMPLE), engine=FakeEngine(), show_timings=False, stages=STAGES)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            await fill_every_tab(app, pilot)
            await settle(app, pilot)
            for tab in ("tab-results", "tab-plots", "tab-compare", "tab-plan", "tab-replay"):
                app.query_one("#tabs").active = tab
                await pilot.pause()
                await pilot.pause()
                pane = app.query_one(f"#{tab}")
                views = {v.id: _legible(app, v) for v in pane.query(TableView)}
                out[tab] = (views, pane.query_one(".pane").max_scroll_x)
    try:
        asyncio.run(go())
    finally:
        planning.run_planner = orig
    return out


@pytest.mark.parametrize("tab", ["tab-results", "tab-plots", "tab-compare", "tab-plan", "tab-replay"])
def test_no_number_cut_and_no_word_split_at_80x24(tabs_at_80x24, tab) -> None:
    views, _ = tabs_at_80x24[tab]
    assert views, f"{tab} has no table"
    assert views == {k: [] for k in views}


@pytest.mark.parametrize("tab", ["tab-compare", "tab-plan", "tab-replay"])
def test_tables_fit_beside_the_form_at_80x24(tabs_at_80x24, tab) -> None:
    _, scroll_x = tabs_at_80x24[tab]
    assert scroll_x == 0


def test_a_table_wider_than_the_pane_scrolls_instead_of_cutting() -> None:
    async def go():
        app = QmodelApp(str(EXAMPLE), engine=FakeEngine(), show_timings=False, stages=())
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            for n in ("4", "6", "8"):  # four pins: too wide for 42 columns
                app.action_pin()
                app.set_field("deployment.decode.instances", n)
                await settle(app, pilot)
            app.query_one("#tabs").active = "tab-compare"
            await pilot.pause()
            view = app.query_one("#compare", TableView)
            assert _legible(app, view) == []
            assert app.query_one("#tab-compare .pane").max_scroll_x > 0
    asyncio.run(go())


def test_replay_table_fits_at_80x24_with_every_station_name() -> None:
    import dataclasses

    class AllStations(FakeEngine):
        def replay(self, sc, result, n, seed, progress):
            check = super().replay(sc, result, n, seed, progress)
            names = ("prefill", "kv_transfer", "decode", "colocated", "chunked")  # qmodel/stations/*.py
            return dataclasses.replace(check, stations=tuple((f"{s}.utilization", 0.5, 0.45, 1 / 9) for s in names))

    async def go():
        app = QmodelApp(str(EXAMPLE), engine=AllStations(), show_timings=False, stages=())
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            app.action_replay()
            await settle(app, pilot)
            await pilot.pause()
            assert _legible(app, app.query_one("#replay-table", TableView)) == []
            assert app.query_one("#tab-replay .pane").max_scroll_x == 0
    asyncio.run(go())
