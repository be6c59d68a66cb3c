"""``qmodel tui``: the what-if explorer.

Left: the scenario form. Right, in tabs: live results, plots, pinned scenarios side by side, the
planner and the replay check. Every edit is validated at once (bad fields show pydantic's message
beside them); a valid scenario is solved after a short debounce in a worker thread, so typing never
waits for the solver. The first stage (the solve at the scenario's rate) lands within the 100 ms
budget; goodput, the topology curves, the P:D heatmap and the sensitivities follow, each
replacing the view as it arrives, and any edit abandons the stale ones.

The app owns the form, the solve workers and the bindings; each tab is its own pane
(:mod:`qmodel.tui.panes`) with its layout, CSS and state, told to redraw when it is shown.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Horizontal
from textual.widgets import Footer, Header, TabbedContent
from textual.worker import get_current_worker

from qmodel.errors import QmodelError

from .analysis import Analysis, Cancelled, ReplayCheck
from .compute import STAGES, WhatIfSession
from .screenshots import Screenshots
from .form import DEFAULT_RAW, FormBuild, build, error_field, values_from_raw
from .panes import TABS, TOPOLOGY_STYLES, ComparePane, PlanPane, PlotsPane, ReplayPane, ResultsPane
from .widgets import PathPrompt, ScenarioForm

__all__ = ["QmodelApp", "TABS", "TOPOLOGY_STYLES"]

class QmodelApp(Screenshots, App):
    """The what-if TUI. ``engine`` is replaceable (tests inject a deterministic one)."""

    CSS_PATH = "app.tcss"
    TITLE = "qmodel"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    FOOTER_FULL_WIDTH = HORIZONTAL_BREAKPOINTS[1][0]  # narrower: the footer leaves out F7/F8 (they still work)
    DEBOUNCE_S = 0.025  # merges keys typed faster than 40 per second; a solve per slower key is cancelled by the next
    BINDINGS = [
        Binding("f2", "pin", "Pin"),
        Binding("f3", "open", "Open"),
        Binding("f4", "save", "Save"),
        Binding("f5", "plan", "Plan"),
        Binding("f6", "replay", "Replay"),
        Binding("f7", "export('json')", "JSON"),
        Binding("f8", "export('csv')", "CSV"),
        # The same keys, not in the footer: below FOOTER_FULL_WIDTH columns check_action hides the two
        # above so that the tab keys and F9 fit, and these answer F7/F8 (the palette lists them too).
        Binding("f7", "export_file('json')", "JSON", show=False),
        Binding("f8", "export_file('csv')", "CSV", show=False),
        Binding("f9", "toggle_form", "Form", tooltip="hide or show the scenario form (widens the tabs)"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # Next / previous tab. Alt+arrow, which terminals send as their own sequence (Textual reads ESC
        # + digit as the macOS Option characters ¡ ™ £, so alt+1..5 would never arrive), and which no
        # form field uses; the palette has one entry per tab as well.
        Binding("alt+right", "next_tab", "Tab", key_display="alt+←→", tooltip="next tab (alt+left: previous)"),
        Binding("alt+left", "previous_tab", "Previous tab", show=False),
    ]

    def __init__(self, scenario_path: str | None = None, overrides: list[str] | None = None, *,
                 raw: dict[str, Any] | None = None, engine: Any = None, show_timings: bool = True,
                 replay_requests: int = 5000, stages: tuple[tuple[str, str], ...] = STAGES) -> None:
        from .commands import QmodelCommands

        super().__init__()
        self.COMMANDS = App.COMMANDS | {QmodelCommands}
        self.engine = engine or WhatIfSession()
        self.show_timings = show_timings
        self.replay_requests = replay_requests
        self.stages = stages  # the later stages to run after each solve (tests and benchmarks trim them)
        self.folder = Path.cwd()
        self.scenario_path: Path | None = None
        if raw is None and scenario_path:
            from .files import read_raw

            raw = read_raw(scenario_path, overrides)
            self.scenario_path = Path(scenario_path)
            self.folder = self.scenario_path.expanduser().resolve().parent
        self.base_raw: dict[str, Any] = raw if raw is not None else dict(DEFAULT_RAW)
        from qmodel.registry import load_catalog

        self.names = load_catalog().names()
        self.values = values_from_raw(self.base_raw)
        self.analysis: Analysis | None = None
        self.build_state: FormBuild | None = None
        self.latencies_s: list[float] = []  # input change -> first-stage results shown, per edit
        self._gen = 0
        self._changed_at: float | None = None
        self._debounce = None
        self._stage = ""
        self._dirty: set[str] = set()

    # ---- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="≋")
        with Horizontal(id="main"):
            yield ScenarioForm(self.names, self.values, id="form")
            with TabbedContent(id="tabs"):
                yield ResultsPane()
                yield PlotsPane()
                yield ComparePane()
                yield PlanPane()
                yield ReplayPane(self.replay_requests)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = self.scenario_path.name if self.scenario_path else "new scenario"
        self.query_one(ComparePane).show(None)
        self._validate_and_schedule(immediate=True)

    # ---- the panes' state, read by exports and tests ------------------------------------------
    @property
    def pinned(self) -> list[tuple[str, int, Analysis]]:
        """(label, solve generation, analysis) of each pinned scenario (the Compare tab's)."""
        return self.query_one(ComparePane).pinned

    @property
    def replay_check(self) -> ReplayCheck | None:
        """The last finished replay comparison (the Replay tab's)."""
        return self.query_one(ReplayPane).check

    @property
    def plan_rows(self) -> list[Any]:
        """The last planner rows (the Plan tab's)."""
        return self.query_one(PlanPane).rows

    # ---- form -> solve ------------------------------------------------------------------------
    @on(ScenarioForm.Changed)
    def _form_changed(self, msg: ScenarioForm.Changed) -> None:
        self.values = msg.values
        self._changed_at = time.perf_counter()
        # Retire the running stages now, not when the debounce fires: they share the interpreter
        # with the event loop, and every millisecond they keep computing delays the new answer.
        self._gen += 1
        self._validate_and_schedule()

    def _validate_and_schedule(self, immediate: bool = False) -> None:
        fb = build(self.values, self.base_raw, self.folder)
        self.build_state = fb
        self.query_one(ScenarioForm).show_errors(fb.errors)
        if fb.scenario is None:
            self._gen += 1  # abandon any running solve: its inputs are gone
            self.workers.cancel_group(self, "solve")
            self.query_one(ResultsPane).show_invalid(fb.errors)
            return
        if self._debounce is not None:
            self._debounce.stop()
        if immediate:
            self._kick()
        else:
            self._debounce = self.set_timer(self.DEBOUNCE_S, self._kick)

    def _kick(self) -> None:
        fb = self.build_state
        if fb is None or fb.scenario is None:
            return
        self._gen += 1
        self._stage = "solving…"
        self.run_solve(fb.scenario, self._gen)

    @work(thread=True, exclusive=True, group="solve")
    def run_solve(self, scenario, gen: int) -> None:
        worker = get_current_worker()

        def stale() -> bool:
            return worker.is_cancelled or gen != self._gen

        try:
            a = self.engine.solve(scenario, stale)
        except Cancelled:
            return
        except Exception as err:  # a solver bug must not take the UI down; show it instead
            a = Analysis(scenario=scenario, sha256="", error=f"internal error: {type(err).__name__}: {err}")
        if stale():
            return
        stages = self.stages
        self.call_if_running(self._show, a, gen, stages[0][0] if stages and not a.error else "")
        if a.error:
            return
        for i, (name, method) in enumerate(stages):
            def partial(part: Analysis, name: str = name) -> None:  # progressive stages (heatmap rows)
                if not stale():
                    self.call_if_running(self._show, part, gen, name)

            try:
                fn = getattr(self.engine, method)
                a = fn(a, stale, emit=partial) if method == "heatmap" else fn(a, stale)
            except Cancelled:
                return
            except QmodelError as err:
                a = dataclasses.replace(a, stage_errors={**a.stage_errors, name: str(err)})
            except Exception as err:  # see above: report, keep the earlier stages on screen
                a = dataclasses.replace(a, stage_errors={**a.stage_errors, name: f"{type(err).__name__}: {err}"})
            if stale():
                return
            nxt = stages[i + 1][0] if i + 1 < len(stages) else ""
            self.call_if_running(self._show, a, gen, nxt)

    def _show(self, a: Analysis, gen: int, next_stage: str) -> None:
        if gen != self._gen or not self.is_running:
            return
        try:
            self._show_now(a, gen, next_stage)
        except NoMatches:
            pass  # the app is closing and its widgets are gone

    def _show_now(self, a: Analysis, gen: int, next_stage: str) -> None:
        first = self.analysis is None or self.analysis.sha256 != a.sha256 or self.analysis.result is not a.result
        self.analysis = a
        if first and self._changed_at is not None:
            self.latencies_s.append(time.perf_counter() - self._changed_at)
            self._changed_at = None
        self._stage = f"computing {next_stage}…" if next_stage else ""
        self.query_one(ComparePane).update_generation(gen, a)
        self._render_all()
        if a.error:
            key = error_field(_PathError(a.error_path), self.values) if a.error_path else None
            if key:
                errs = dict(self.build_state.errors if self.build_state else {})
                errs[key] = a.error
                self.query_one(ScenarioForm).show_errors(errs)

    def _render_all(self) -> None:
        """Redraw the visible tab now; the others when they are shown (each stage would redraw them all)."""
        self._dirty = {"tab-results", "tab-plots", "tab-compare"}
        self._render_tab(self.query_one(TabbedContent).active)

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._render_tab(event.pane.id or "")

    def _render_tab(self, tab: str) -> None:
        if tab not in self._dirty:
            return
        self._dirty.discard(tab)
        if tab == "tab-results":
            a = self.analysis
            stage = self._stage
            if self.show_timings and a is not None and "solve" in a.timings_s:
                stage = (stage + "  " if stage else "") + f"solve {a.timings_s['solve'] * 1000:.0f} ms"
            self.query_one(ResultsPane).show(a, stage)
        elif tab == "tab-plots":
            self.query_one(PlotsPane).show(self.analysis)
        elif tab == "tab-compare":
            self.query_one(ComparePane).show(self.analysis)

    # ---- pin / compare -----------------------------------------------------------------------
    def action_pin(self) -> None:
        fb = self.build_state
        if fb is not None and fb.scenario is None:
            # The results on screen are the last valid inputs', not the form's: pinning them would mislabel them.
            from .form import FIELD_BY_KEY

            bad = "; ".join(f"{FIELD_BY_KEY[k].label if k in FIELD_BY_KEY else k}: {v}" for k, v in fb.errors.items())
            n = len(fb.errors)
            self.notify(f"Not pinned: {n} field{'s' if n != 1 else ''} need{'s' if n == 1 else ''} fixing ({bad})",
                        severity="error", timeout=8)
            return
        a = self.analysis
        if a is not None and fb is not None and a.scenario != fb.scenario:
            self.notify("Not pinned: the results are still for the previous inputs; pin again when they update",
                        severity="warning")
            return
        if a is None or a.error:
            self.notify("Nothing to pin: the scenario has no results", severity="warning")
            return
        pane = self.query_one(ComparePane)
        label = pane.pin(self._gen, a)
        pane.show(a)
        self.notify(f"Pinned {label}")

    def action_clear_pins(self) -> None:
        self.query_one(ComparePane).clear()

    def action_load_pin(self) -> None:
        self.query_one(ComparePane).choose()

    def load_pinned(self, index: int) -> None:
        """Put pinned scenario ``index`` back into the form."""
        _, _, a = self.pinned[index]
        self.load_raw(a.scenario.model_dump(mode="json", exclude_none=True), keep_folder=True)

    # ---- loading and saving -------------------------------------------------------------------
    def load_raw(self, raw: dict[str, Any], path: Path | None = None, keep_folder: bool = False) -> None:
        """Replace the form with a scenario dict (from a file, a plan or a pinned entry)."""
        self.base_raw = raw
        if path is not None:
            self.scenario_path = path
            self.folder = path.expanduser().resolve().parent
            self.sub_title = path.name
        elif not keep_folder:
            self.sub_title = str(raw.get("name", "scenario"))
        self.values = values_from_raw(raw)
        self.query_one(ScenarioForm).set_values(self.values)
        self._changed_at = time.perf_counter()
        self._validate_and_schedule(immediate=True)

    def action_open(self) -> None:
        def chosen(path: str | None) -> None:
            if not path:
                return
            from .files import read_raw

            try:
                raw = read_raw(path)
            except QmodelError as err:
                self.notify(str(err), severity="error", timeout=8)
                return
            self.load_raw(raw, Path(path))
            self.notify(f"Opened {path}")

        self.push_screen(PathPrompt("Open scenario (.yaml, .toml, .json)",
                                    str(self.scenario_path or ""), "e.g. examples/llama3-70b-disagg-h100.yaml"), chosen)

    def action_save(self) -> None:
        def chosen(path: str | None) -> None:
            if not path:
                return
            self.save_to(path)

        default = str(self.scenario_path) if self.scenario_path else f"{self.values.get('name') or 'scenario'}.yaml"
        self.push_screen(PathPrompt("Save scenario as (.yaml, .toml, .json)", default), chosen)

    def save_to(self, path: str) -> Path | None:
        from .files import write_scenario

        fb = self.build_state
        if fb is None or fb.scenario is None:
            self.notify("Fix the highlighted fields before saving", severity="error")
            return None
        try:
            out = write_scenario(fb.raw, path)
        except QmodelError as err:
            self.notify(str(err), severity="error", timeout=8)
            return None
        self.notify(f"Saved {out}")
        return out

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "export":
            return self.size.width >= self.FOOTER_FULL_WIDTH
        return True

    def on_resize(self) -> None:
        self.refresh_bindings()  # check_action depends on the width

    def action_export_file(self, kind: str) -> None:
        self.action_export(kind)

    def action_export(self, kind: str) -> None:
        name = (self.values.get("name") or "scenario").replace(" ", "_")

        def chosen(path: str | None) -> None:
            if path:
                self.export_to(path, kind)

        self.push_screen(PathPrompt(f"Export results as {kind.upper()}", f"{name}-results.{kind}"), chosen)

    def export_to(self, path: str, kind: str) -> Path | None:
        from .files import export_results

        try:
            out = export_results(path, kind, self.analysis, [(label, a) for label, _, a in self.pinned], self.replay_check)
        except (QmodelError, ValueError) as err:
            self.notify(str(err), severity="error", timeout=8)
            return None
        self.notify(f"Exported {out}")
        return out

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_next_tab(self, step: int = 1) -> None:
        ids = [tab for tab, _ in TABS]
        tabs = self.query_one(TabbedContent)
        tabs.active = ids[(ids.index(tabs.active) + step) % len(ids)]

    def action_previous_tab(self) -> None:
        self.action_next_tab(-1)

    def action_toggle_form(self) -> None:
        form = self.query_one(ScenarioForm)
        form.display = not form.display

    # ---- replay and planner: the Replay and Plan tabs do the work ---------------------------
    def action_replay(self) -> None:
        self.query_one(TabbedContent).active = "tab-replay"
        self.query_one(ReplayPane).start()

    def call_if_running(self, fn, *args) -> None:
        """Run ``fn`` on the app's thread from a worker thread; dropped quietly if the app has closed."""
        if self.is_running:
            try:
                self.call_from_thread(fn, *args)
            except RuntimeError:
                pass  # the event loop closed between the check and the call

    def action_plan(self) -> None:
        self.query_one(TabbedContent).active = "tab-plan"
        self.query_one(PlanPane).start()

    def action_load_plan(self) -> None:
        self.query_one(PlanPane).choose()

    def load_plan(self, index: int) -> None:
        self.query_one(PlanPane).load(index)

    # ---- palette helpers ---------------------------------------------------------------------
    def set_field(self, key: str, value: str) -> None:
        self.query_one(ScenarioForm).set_value(key, value)


@dataclasses.dataclass
class _PathError:
    field: str | None
