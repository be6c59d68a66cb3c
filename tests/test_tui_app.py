"""Behaviour of the what-if app through Textual's Pilot, on the deterministic fake engine.

The fake's numbers are closed forms of the scenario (tests/tui_fakes.py), so every assertion
below is exact: what changes on screen is what the inputs changed, nothing else.
"""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from qmodel.scenario import load_scenario
from qmodel.tui.app import QmodelApp
from qmodel.tui.compute import STAGES
from qmodel.tui.widgets import CatalogPicker, FieldRow, ScenarioForm
from tui_fakes import CAPACITY_PER_GPU, FakeEngine, screen_text, settle

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"


GOODPUT_ONLY = (("goodput", "goodput"),)


def _app(**kw) -> QmodelApp:
    # Most tests need only the first stages; each later stage costs a redraw, and CI has 2 cores.
    kw.setdefault("stages", GOODPUT_ONLY)
    return QmodelApp(str(EXAMPLE), engine=FakeEngine(), show_timings=False, **kw)


def run(coro):
    return asyncio.run(coro)


def test_changing_a_field_updates_the_results() -> None:
    async def go():
        app = _app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            assert app.analysis.result.rate_per_s == 6.0
            app.set_field("workload.arrivals.rate_per_s", "9")
            await settle(app, pilot)
            assert app.analysis.result.rate_per_s == 9.0
            rho = 9.0 / (CAPACITY_PER_GPU * 16)
            assert app.analysis.result.stations[0].utilization == pytest.approx(rho, rel=1e-12)
            assert "9 req/s" in screen_text(app)
            # later stages arrived for the new inputs too
            assert app.analysis.goodput is not None and app.analysis.goodput.goodput_rps == pytest.approx(0.8 * 24, rel=1e-12)
            assert len(app.latencies_s) >= 1
    run(go())


def test_typing_into_a_field_goes_through_the_debounce() -> None:
    async def go():
        app = _app()
        app.DEBOUNCE_S = 0.5  # wide enough that two keystrokes always fall inside it, even on a slow CI
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            solves = app.engine.solves
            app.query_one("#f-deployment-decode-instances").focus()
            await pilot.press("end", "backspace")  # empty: invalid, shown inline, nothing solved
            assert app.engine.solves == solves
            await pilot.press("1", "2")
            await settle(app, pilot)
            # two keystrokes -> one solve, of the final value: 2 + 12 instances x TP4 = 56 GPUs
            assert app.engine.solves == solves + 1
            assert app.analysis.scenario.deployment.gpus == 56
    run(go())


def test_invalid_input_and_unknown_names_are_shown_inline() -> None:
    async def go():
        app = _app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            before = app.analysis
            app.set_field("deployment.prefill.tp", "four")
            await settle(app, pilot)
            row = app.query_one("#f-deployment-prefill-tp-row", FieldRow)
            assert row.has_class("invalid")
            assert "Input should be a valid integer" in row.error
            assert app.analysis is before  # the last good answer stays; no solve ran
            app.set_field("deployment.prefill.tp", "8")
            await settle(app, pilot)
            assert not row.has_class("invalid")
            assert app.analysis.scenario.deployment.prefill.tp == 8
            # an unknown catalog name gets the catalog's suggestions beside the field
            app.set_field("deployment.decode.gpu", "h100")
            await settle(app, pilot)
            row = app.query_one("#f-deployment-decode-gpu-row", FieldRow)
            assert row.has_class("invalid") and "did you mean" in row.error and "h100-sxm" in row.error
    run(go())


def test_unstable_configuration_names_station_and_largest_stable_rate() -> None:
    async def go():
        app = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            app.set_field("workload.arrivals.rate_per_s", "30")
            await settle(app, pilot)
            u = app.analysis.unstable
            assert u is not None and u.station == "decode" and u.max_stable_rate_per_s == CAPACITY_PER_GPU * 16
            text = screen_text(app)
            assert "UNSTABLE" in text and "decode saturates" in text and "largest stable rate 24" in text
    run(go())


def test_pin_compare_export_and_save(tmp_path: Path) -> None:
    async def go():
        app = _app(stages=STAGES)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("f2")
            app.set_field("deployment.decode.instances", "4")
            await settle(app, pilot)
            await pilot.press("f2")
            await settle(app, pilot)
            assert [label for label, _, _ in app.pinned] == ["#1 llama3-70b-disagg-h100", "#2 llama3-70b-disagg-h100"]
            assert [a.scenario.deployment.gpus for _, _, a in app.pinned] == [16, 24]
            app.query_one("#tabs").active = "tab-compare"
            await pilot.pause()
            text = screen_text(app)
            # the entries head the table one per line; its column header names both
            assert any("#1 llama3-70b-disagg-h100" in ln and "2P+2D" in ln for ln in text.split("\n"))
            assert any("#1" in ln and "#2" in ln for ln in text.split("\n"))
            # goodput of the fake is 0.8 x 1.5 req/s x GPUs: 19.2 and 28.8 side by side
            line = next(ln for ln in text.split("\n") if "goodput  " in ln)
            assert "19.2 req/s" in line and "28.8 req/s" in line
            js = app.export_to(str(tmp_path / "r.json"), "json")
            cs = app.export_to(str(tmp_path / "r.csv"), "csv")
            # loading a pinned scenario puts it back in the form
            app.load_pinned(0)
            await settle(app, pilot)
            assert app.values["deployment.decode.instances"] == "2"
            saved = app.save_to(str(tmp_path / "s.toml"))
        data = json.loads(js.read_text())
        assert data["current"]["goodput"]["goodput_rps"] == pytest.approx(0.8 * CAPACITY_PER_GPU * 24, rel=1e-12)
        assert len(data["pinned"]) == 2 and data["current"]["pd_heatmap"]["prefill_instances"] == [1, 2, 3]
        assert [c["topology"] for c in data["current"]["attainment_curves"]] == ["colocated", "chunked", "disaggregated"]
        rows = list(csv.DictReader(cs.open()))
        # the current scenario equals pin #2, so the CSV has the current one and both pins
        assert {r["entry"] for r in rows} == {"current", "#1 llama3-70b-disagg-h100", "#2 llama3-70b-disagg-h100"}
        assert next(r for r in rows if r["entry"] == "#1 llama3-70b-disagg-h100" and r["metric"] == "gpus")["value"] == "16"
        assert load_scenario(saved).deployment.decode.instances == 2
    run(go())


def test_replay_check_completes_with_a_progress_bar() -> None:
    async def go():
        app = _app(replay_requests=1000)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("f6")
            await settle(app, pilot)
            assert app.engine.replays == 1
            assert app.replay_check is not None and app.replay_check.requests == 1000
            assert app.query_one("#replay-progress").percentage == 1.0
            assert "TTFT p90" in screen_text(app)
    run(go())


def test_palette_and_catalog_picker_set_fields() -> None:
    from qmodel.tui.commands import palette_entries

    async def go():
        app = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            entries = {text: cb for text, cb, _ in palette_entries(app)}
            for needed in ("Model: llama-3.1-8b", "GPU: a100-80gb-sxm", "Workload preset: sharegpt",
                           "Export results as JSON", "Export results as CSV"):
                assert needed in entries
            entries["GPU: a100-80gb-sxm"]()
            entries["Workload preset: sharegpt"]()
            await settle(app, pilot)
            dep = app.analysis.scenario.deployment
            assert dep.prefill.gpu == dep.decode.gpu == "a100-80gb-sxm"
            assert app.analysis.scenario.workload.lengths.name == "sharegpt"
            # the "…" button opens a searchable picker
            await pilot.click("#f-model-pick")
            await pilot.pause()
            assert isinstance(app.screen, CatalogPicker)
            await pilot.press(*"3.2 1b")
            await pilot.press("enter")
            await settle(app, pilot)
            assert app.analysis.scenario.model == "llama-3.2-1b"
    run(go())


def test_an_optional_select_offers_its_blank_as_default() -> None:
    """An optional select (a field left out of the scenario while blank) lists its blank as
    "(default)" in the picker; choosing it leaves the field out again."""
    from qmodel.tui.widgets import Choice

    async def go():
        app = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            choice = app.query_one("#f-deployment-decode-kv-reservation", Choice)
            assert choice.value == "" and app.analysis.scenario.deployment.decode.kv_reservation is None
            choice.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, CatalogPicker)
            await pilot.press(*"max_")
            await pilot.press("enter")
            await settle(app, pilot)
            assert app.analysis.scenario.deployment.decode.kv_reservation == "max_tokens"
            choice.focus()
            await pilot.press("enter")
            await pilot.pause()
            await pilot.press(*"default")
            await pilot.press("enter")
            await settle(app, pilot)
            assert choice.value == "" and app.analysis.scenario.deployment.decode.kv_reservation is None
            assert "kv_reservation" not in app.analysis.scenario.model_dump()["deployment"]["decode"]
    run(go())


def test_planner_rows_load_into_the_form(monkeypatch) -> None:
    from qmodel.planner.plan_result import PlanRow, PoolOut
    from qmodel.tui import planning

    def fake_planner(scenario, objective, target, top_k=10):
        row = PlanRow(rank=1, topology="chunked", label="3x h100-sxm TP2 chunked chunk 2048", prefill=None,
                      decode=PoolOut(gpu="h100-sxm", tp=2, instances=3, gpus=6), chunk_tokens=2048, gpus=6, power_w=4200,
                      cost_per_hour=24.0, goodput_rps=7.0, goodput_per_gpu=7 / 6, rate_per_s=7.0, attainment=0.9,
                      ttft_p90_s=0.4, tpot_p90_s=0.05, max_stable_rate_per_s=9.0, knee_rps=6.0, headroom_to_knee=-0.1,
                      binding="TPOT binds", validity="approximate")
        return [planning.PlanChoice(row.label, row, planning.scenario_from_row(scenario, row))]

    monkeypatch.setattr(planning, "run_planner", fake_planner)

    async def go():
        app = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("f5")
            await settle(app, pilot)
            assert [c.label for c in app.plan_rows] == ["3x h100-sxm TP2 chunked chunk 2048"]
            assert "1 plans" in screen_text(app)
            await pilot.click("#plan-load")
            await pilot.pause()
            await pilot.press("enter")
            await settle(app, pilot)
            dep = app.analysis.scenario.deployment
            assert (dep.topology, dep.pool.tp, dep.pool.instances, dep.chunk_tokens) == ("chunked", 2, 3, 2048)
            # batch limits of the loaded scenario carry over into the plan
            assert dep.pool.max_batch == 256
            assert app.query_one(ScenarioForm).values["deployment.topology"] == "chunked"
    run(go())


def test_solver_crash_is_reported_not_raised() -> None:
    class Broken(FakeEngine):
        def solve(self, sc, check=lambda: False):
            raise RuntimeError("station exploded")

    async def go():
        app = QmodelApp(str(EXAMPLE), engine=Broken(), show_timings=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            assert "station exploded" in app.analysis.error
            assert "Cannot solve" in screen_text(app)
    run(go())


def test_cli_reports_unreadable_file_in_one_line(capsys, tmp_path: Path) -> None:
    from qmodel.cli.main import main

    assert main(["tui", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and "no such file" in err[0]


def test_import_qmodel_and_cli_do_not_import_textual() -> None:
    import subprocess
    import sys

    code = ("import sys, qmodel; from qmodel.cli.main import build_parser; build_parser(); "
            "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if m.startswith('textual'))")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tab_keys_f9_and_exports_in_the_footer() -> None:
    from qmodel.tui.app import TABS
    from qmodel.tui.widgets import PathPrompt

    async def go():
        app = _app()
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            footer = screen_text(app).split("\n")[-1]
            for shown in ("^q Quit", "f2 Pin", "f5 Plan", "f6 Replay", "f9 Form", "alt+←→ Tab", "^p palette"):
                assert shown in footer, (shown, footer)
            # alt+right / alt+left step through the tabs (cycling), also while a form field has the
            # focus, and the field keeps its text and cursor
            field = app.query_one("#f-deployment-decode-instances")
            field.focus()
            for tab, _ in TABS[1:] + TABS[:1]:
                await pilot.press("alt+right")
                assert app.query_one("#tabs").active == tab
            await pilot.press("alt+left")
            assert app.query_one("#tabs").active == TABS[-1][0]
            assert field.value == "2" and app.focused is field
            await pilot.press("f9")
            assert not app.query_one(ScenarioForm).display
            # F7 is left out of the 80-column footer but still exports
            await pilot.press("f7")
            await pilot.pause()
            assert isinstance(app.screen, PathPrompt)
            await pilot.press("escape")
            await pilot.resize_terminal(160, 50)
            await pilot.pause()
            await pilot.pause()
            footer = screen_text(app).split("\n")[-1]
            assert "f7 JSON" in footer and "f8 CSV" in footer and "f9 Form" in footer and "alt+←→ Tab" in footer
    run(go())


def test_palette_finds_every_action_and_tab() -> None:
    from textual.command import CommandList, CommandPalette
    from textual.fuzzy import Matcher

    from qmodel.tui.app import TABS
    from qmodel.tui.commands import ACTIONS, palette_entries

    # every key binding's action is in the palette (F7/F8's narrow-footer twins call the same method)
    bound = {b.action for b in QmodelApp.BINDINGS if b.action not in ("quit", "export_file('json')", "export_file('csv')")}
    assert bound <= {action for _, action, _ in ACTIONS}

    async def hits(pilot, query: str) -> list[str]:
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(pilot.app.screen, CommandPalette)
        await pilot.press(*query)
        await pilot.pause(0.3)  # the palette searches after a short delay
        options = pilot.app.screen.query_one(CommandList)
        found = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        await pilot.press("escape")
        await pilot.pause()
        return found

    async def go():
        app = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            found = await hits(pilot, "compare")
            assert any("Tab: Compare" in f for f in found) and any("Pin scenario to compare" in f for f in found)
            # the provider's own matcher (what search() scores with) finds each tab by its name
            texts = [text for text, _, _ in palette_entries(app)]
            for _, title in TABS:
                assert f"Tab: {title}" in [t for t in texts if Matcher(title.lower()).match(t) > 0]
            # choosing a hit runs it: "tab plan" -> the Plan tab
            await pilot.press("ctrl+p")
            await pilot.press(*"tab: plan")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await pilot.pause()
            assert app.query_one("#tabs").active == "tab-plan"
    run(go())


def test_screenshot_goes_beside_the_scenario_and_says_where(tmp_path: Path, monkeypatch) -> None:
    import shutil

    home = tmp_path / "home"  # no Downloads folder in it
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(home / "Downloads"))
    scen_dir = tmp_path / "scen"
    scen_dir.mkdir()
    scen = scen_dir / EXAMPLE.name
    shutil.copy(EXAMPLE, scen)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    async def go():
        app = QmodelApp(str(scen), engine=FakeEngine(), show_timings=False, stages=())
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            said: list[str] = []
            notify = app.notify
            app.notify = lambda message, **kw: (said.append(message), notify(message, **kw))  # type: ignore[method-assign]
            shot = next(c for c in app.get_system_commands(app.screen) if c.title == "Screenshot")
            shot.callback()
            await pilot.pause(0.3)
            saved = list(scen_dir.glob("*.svg"))
            assert len(saved) == 1 and saved[0].read_text().startswith("<svg")
            assert said == [f"Screenshot saved to {saved[0]}"]
        app = QmodelApp(engine=FakeEngine(), show_timings=False, stages=())  # no scenario file: the working directory
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            out = app.take_screenshot()
            assert out is not None and out.parent == work and out.exists()
            # a folder that cannot be written (here: a file) falls back to the next one
            (work / "a-file").write_text("")
            out2 = app.take_screenshot("second.svg", str(work / "a-file"))
            assert out2 == work / "second.svg" and out2.exists()
        assert not (home / "Downloads").exists()
    run(go())


def test_pinning_an_invalid_form_says_so_and_pins_nothing() -> None:
    async def go():
        app = _app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            said: list[tuple[str, str]] = []
            notify = app.notify
            def record(message, **kw):
                said.append((message, kw.get("severity", "information")))
                notify(message, **kw)

            app.notify = record  # type: ignore[method-assign]
            app.set_field("deployment.prefill.tp", "four")
            await settle(app, pilot)
            await pilot.press("f2")
            assert app.pinned == []
            assert len(said) == 1 and said[0][1] == "error"
            message, _ = said[0]
            assert message.startswith("Not pinned: 1 field needs fixing (Prefill TP: ") and "valid integer" in message
            # fixed: F2 pins the scenario now in the form
            app.set_field("deployment.prefill.tp", "8")
            await settle(app, pilot)
            await pilot.press("f2")
            assert [a.scenario.deployment.prefill.tp for _, _, a in app.pinned] == [8]
    run(go())
