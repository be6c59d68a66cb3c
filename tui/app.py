"""``qmodel tui``: the what-if explorer.

Left: the scenario form. Right, in tabs: live results, plots, pinned scenarios side by side, the
planner and the replay check. Every edit is validated at once (bad fields show pydantic's message
beside them); a valid scenario is solved after a short debounce in a worker thread, so typing never
waits for the solver. The first stage (the solve at the scenario's rate) lands within the 100 ms
budget; goodput, the topology curves, the P:D heatmap and the sensitivities follow, each
replacing the view as it arrives, and any edit abandons the stale ones.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Header, Input, Label, ProgressBar, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from qmodel.errors import QmodelError

from . import plots
from .compute import STAGES, Analysis, Cancelled, Engine, ReplayCheck
from .layout import whole_lines
from .form import DEFAULT_RAW, FormBuild, build, error_field, values_from_raw
from .report import export_payload, metric_rows, render_compare, render_replay, render_results
from .widgets import CatalogPicker, Chart, Choice, PathPrompt, ScenarioForm, TableView

__all__ = ["QmodelApp", "TABS", "TOPOLOGY_STYLES"]

TOPOLOGY_STYLES = {"colocated": "bright_cyan", "chunked": "bright_magenta", "disaggregated": "bright_green"}


#: The tabs in order: (pane id, title); alt+right / alt+left step through them.
TABS = (("tab-results", "Results"), ("tab-plots", "Plots"), ("tab-compare", "Compare"), ("tab-plan", "Plan"),
        ("tab-replay", "Replay"))

_TITLE = dict(TABS)


class QmodelApp(App):
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
        self.engine = engine or Engine()
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
        self.pinned: list[tuple[str, int, Analysis]] = []
        self.replay_check: ReplayCheck | None = None
        self.plan_rows: list[Any] = []
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
                with TabPane(_TITLE["tab-results"], id="tab-results"):
                    with VerticalScroll(classes="pane"):
                        yield TableView(id="results")
                with TabPane(_TITLE["tab-plots"], id="tab-plots"):
                    with VerticalScroll(id="plots", classes="pane"):
                        yield Static("SLO attainment vs arrival rate, same GPUs", classes="plot-title")
                        yield Chart("computing…", id="chart-attainment")
                        yield Static(id="legend-attainment", classes="legend")
                        with Horizontal(id="dist-row"):
                            with Vertical(classes="dist-box"):
                                yield Static("TTFT distribution", classes="plot-title", id="title-ttft")
                                yield Chart("solving…", id="chart-ttft", classes="dist")
                            with Vertical(classes="dist-box"):
                                yield Static("TPOT distribution", classes="plot-title", id="title-tpot")
                                yield Chart("solving…", id="chart-tpot", classes="dist")
                        yield Static("Goodput (req/s) over the P:D split", classes="plot-title")
                        yield TableView("computing…", id="heatmap")
                with TabPane(_TITLE["tab-compare"], id="tab-compare"):
                    with VerticalScroll(classes="pane"):
                        with Horizontal(classes="toolbar"):
                            yield Button("Pin (F2)", id="pin", compact=True)
                            yield Button("Clear", id="clear-pins", compact=True)
                            yield Button("Load pinned…", id="load-pin", compact=True)
                        yield TableView(id="compare")
                with TabPane(_TITLE["tab-plan"], id="tab-plan"):
                    with VerticalScroll(classes="pane"):
                        with Horizontal(classes="toolbar"):
                            yield Choice(["max-goodput", "min-gpus", "min-cost"], "max-goodput", title="Objective",
                                         id="plan-objective")
                            yield Input(placeholder="target req/s", id="plan-target", compact=True, tooltip="min-gpus / min-cost: the rate to meet (blank: the scenario rate)")
                            yield Button("Run", id="plan-run", compact=True)
                        yield Static(id="plan-status")
                        yield TableView(id="plan-table")
                        with Horizontal(classes="toolbar"):
                            yield Button("Load plan…", id="plan-load", compact=True, disabled=True)
                with TabPane(_TITLE["tab-replay"], id="tab-replay"):
                    with VerticalScroll(classes="pane"):
                        with Horizontal(classes="toolbar"):
                            yield Label("requests")
                            yield Input(str(self.replay_requests), id="replay-n", compact=True)
                            yield Label("seed")
                            yield Input("0", id="replay-seed", compact=True)
                            yield Button("Run", id="replay-run", compact=True)
                        yield ProgressBar(total=100, show_eta=False, id="replay-progress")
                        yield Static(id="replay-status")
                        yield TableView(id="replay-table")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = self.scenario_path.name if self.scenario_path else "new scenario"
        self.query_one("#compare", TableView).update(render_compare([]))
        self.query_one("#replay-status", Static).update(Text("Replays the scenario event by event at its rate "
                                                             "and compares with the analytic answer.", style="dim"))
        self._plan_intro()
        self._validate_and_schedule(immediate=True)

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
            n = len(fb.errors)
            self.query_one("#results", TableView).update(Text.assemble(
                (f"{n} field{'s' if n != 1 else ''} need{'s' if n == 1 else ''} fixing", "bold red"),
                ("\n" + "\n".join(f"{k}: {v}" for k, v in fb.errors.items()), "red")))
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
        self._from_thread(self._show, a, gen, stages[0][0] if stages and not a.error else "")
        if a.error:
            return
        for i, (name, method) in enumerate(stages):
            def partial(part: Analysis, name: str = name) -> None:  # progressive stages (heatmap rows)
                if not stale():
                    self._from_thread(self._show, part, gen, name)

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
            self._from_thread(self._show, a, gen, nxt)

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
        for i, (label, g, _) in enumerate(self.pinned):
            if g == gen:
                self.pinned[i] = (label, g, a)
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
            self.query_one("#results", TableView).update(render_results(a, stage))
        elif tab == "tab-plots":
            self._render_plots()
        elif tab == "tab-compare":
            self._render_compare()

    # ---- plots --------------------------------------------------------------------------------
    def _render_plots(self) -> None:
        a = self.analysis
        att = self.query_one("#chart-attainment", Chart)
        legend = self.query_one("#legend-attainment", Static)
        if a is None or a.error:
            att.plot(None, "no results")
            legend.update("")
        elif a.curves is None:
            err = a.stage_errors.get("curves")
            att.plot(None, f"curves not available: {err}" if err else "computing the topology curves…")
            legend.update("")
        else:
            curves = [c for c in a.curves if c.rates]
            goal = a.scenario.slo.attainment_goal
            refs = [plots.VLine("yellow", "goal", y=goal)]
            rate = a.scenario.rate_per_s
            if rate:
                refs.append(plots.VLine("white", "rate", x=rate))
            series = [plots.Series(c.topology, c.rates, c.attainment, TOPOLOGY_STYLES.get(c.topology, "white"))
                      for c in curves]
            x_hi = max((c.rates[-1] for c in curves), default=1.0)
            knees = [(c.knee_rps, TOPOLOGY_STYLES.get(c.topology, "white")) for c in curves if c.knee_rps > 0]
            att.plot(lambda w, h: plots.line_chart(series, w, h, x_range=(0.0, x_hi), y_range=(0.0, 1.0), refs=refs,
                                                   y_fmt=lambda v: f"{v * 100:.0f}%", x_marks=knees,
                                                   y_label="SLO attainment (%)", x_label="arrival rate (req/s)"))
            lines = Text()
            for c in a.curves:
                lines.append("━━ ", style=TOPOLOGY_STYLES.get(c.topology, "white"))
                lines.append(f"{c.topology:<13}", style="bold")
                if c.rates:
                    lines.append(f" goodput {c.goodput_rps:.3g}  knee {c.knee_rps:.3g}  max {c.max_stable_rate_per_s:.3g}"
                                 f" req/s  {c.layout}\n")
                else:
                    lines.append(f" {c.note or c.layout}\n", style="dim")
            lines.append("▲ knee (latency at the SLO percentile twice its idle value)\n", style="dim")
            lines.append("┈┈ ", style="yellow")
            lines.append(f"goal {goal * 100:.0f}%   ")
            if rate:
                lines.append("┊ ", style="white")
                lines.append(f"this rate {rate:.3g} req/s")
            legend.update(lines)
        for which in ("ttft", "tpot"):
            chart = self.query_one(f"#chart-{which}", Chart)
            title = self.query_one(f"#title-{which}", Static)
            d = getattr(a, which) if a is not None else None
            if d is None:
                chart.plot(None, "unstable: no steady state" if a is not None and a.unstable else "no results")
                title.update(f"{which.upper()} distribution")
                continue
            from qmodel.units import format_duration as fd

            marks = [(d.target_s, "target", "yellow"), (d.p90_s, "p90", "bright_red"), (d.p99_s, "p99", "red")]
            title.update(Text.assemble((f"{which.upper()} ", "bold"), f"p50 {fd(d.p50_s)} ",
                                       (f"p90 {fd(d.p90_s)} ", "bright_red"), (f"p99 {fd(d.p99_s)} ", "red"),
                                       (f"target {fd(d.target_s)}", "yellow")))
            factor, unit = plots.duration_axis(d.x_s[-1])
            chart.plot(lambda w, h, d=d, marks=marks, factor=factor, unit=unit, which=which: plots.density_bars(
                d.x_s, d.cdf, w, h, marks=marks, style="cyan" if which == "ttft" else "bright_blue",
                x_fmt=lambda v: plots.fmt_num(v * factor), y_label="share of requests",
                x_label=f"{which.upper()} ({unit})"))
        hm = self.query_one("#heatmap", TableView)
        if a is None or a.error:
            hm.update("")
        elif a.heatmap is None:
            err = a.stage_errors.get("heatmap")
            hm.update(Text(f"not available: {err}", style="yellow") if err else Text("computing the P:D grid…", style="dim"))
        else:
            h = a.heatmap
            cur = None
            if h.current is not None and h.current[0] in h.prefill and h.current[1] in h.decode:
                cur = (h.decode.index(h.current[1]), h.prefill.index(h.current[0]))
            best = None
            if h.best_per_gpu is not None:
                best = (h.decode.index(h.best_per_gpu[1]), h.prefill.index(h.best_per_gpu[0]))
            grid = plots.heatmap(h.goodput, [f"D{d}" for d in h.decode[:len(h.goodput)]],
                                 [f"P{p}" for p in h.prefill], highlight=cur, best=best)
            if not h.complete:
                grid.append(f"computing rows {len(h.goodput) + 1}..{len(h.decode)}…\n", style="dim")
            note = Text(f"\n{h.gpu} TP{h.tp} per instance; rows: decode instances, columns: prefill instances.",
                        style="dim")
            if h.best_per_gpu is not None:
                note.append(f"\nbest per GPU (underlined): P{h.best_per_gpu[0]}:D{h.best_per_gpu[1]}, "
                            f"{h.best_per_gpu[2]:.3g} req/s/GPU", style="bold")
            if cur is not None:
                note.append("\nreverse video: this scenario's split", style="dim")
            grid.rstrip()
            hm.update(Group(whole_lines(grid), note))

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
        label = f"#{len(self.pinned) + 1} {a.scenario.name}"
        self.pinned.append((label, self._gen, a))
        self._render_compare()
        self.notify(f"Pinned {label}")

    def _render_compare(self) -> None:
        entries = [(label, a) for label, _, a in self.pinned]
        if self.analysis is not None and not self.analysis.error and entries:
            if all(a.sha256 != self.analysis.sha256 for _, a in entries):
                entries.append(("current", self.analysis))
        self.query_one("#compare", TableView).update(render_compare(entries))
        self.query_one("#load-pin", Button).disabled = not self.pinned

    @on(Button.Pressed, "#pin")
    def _pin_button(self) -> None:
        self.action_pin()

    @on(Button.Pressed, "#clear-pins")
    def action_clear_pins(self) -> None:
        self.pinned.clear()
        self._render_compare()

    @on(Button.Pressed, "#load-pin")
    def action_load_pin(self) -> None:
        labels = [label for label, _, _ in self.pinned]
        if not labels:
            self.notify("Nothing pinned yet: F2 pins the current scenario", severity="warning")
            return

        def chosen(label: str | None) -> None:
            if label in labels:
                self.load_pinned(labels.index(label))

        self.push_screen(CatalogPicker("a pinned scenario", labels), chosen)

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
        from .files import write_csv, write_json

        pinned = [(label, a) for label, _, a in self.pinned]
        try:
            if kind == "json":
                out = write_json(export_payload(self.analysis, pinned, self.replay_check), path)
            else:
                entries = ([("current", self.analysis)] if self.analysis else []) + pinned
                rows = [[label, a.scenario.name, m, "" if v is None else v, shown]
                        for label, a in entries for m, v, shown in metric_rows(a)]
                out = write_csv(["entry", "scenario", "metric", "value", "shown"], rows, path)
        except (QmodelError, ValueError) as err:
            self.notify(str(err), severity="error", timeout=8)
            return None
        self.notify(f"Exported {out}")
        return out

    # ---- screenshots -------------------------------------------------------------------------
    def get_system_commands(self, screen):
        """Textual's palette commands, with its Screenshot (which saves to ~/Downloads) replaced by ours."""
        from textual.app import SystemCommand

        for cmd in super().get_system_commands(screen):
            if cmd.title != "Screenshot":
                yield cmd
        yield SystemCommand("Screenshot", "Save an SVG screenshot beside the scenario file (else the working directory)",
                            lambda: self.set_timer(0.1, self.take_screenshot))  # after the palette has closed

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        self.take_screenshot(filename, path)

    def take_screenshot(self, filename: str | None = None, path: str | None = None) -> Path | None:
        """Save an SVG of the screen in ``path``, else beside the scenario file, else in the working
        directory (the first that can be written), and say where in a notification."""
        tried: list[str] = []
        for folder in ([Path(path)] if path else []) + [self.folder, Path.cwd()]:
            try:
                out = Path(self.save_screenshot(filename, str(folder.expanduser())))
            except OSError as err:
                tried.append(f"{folder}: {err.strerror}")
                continue
            self.notify(f"Screenshot saved to {out}", timeout=8)
            return out
        self.notify("Cannot save the screenshot (" + "; ".join(tried) + ")", severity="error", timeout=8)
        return None

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

    # ---- replay -------------------------------------------------------------------------------
    def action_replay(self) -> None:
        self.query_one(TabbedContent).active = "tab-replay"
        self.start_replay()

    @on(Button.Pressed, "#replay-run")
    def _replay_button(self) -> None:
        self.start_replay()

    def start_replay(self) -> None:
        a = self.analysis
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
        self._replay_t0, self._replay_what = time.perf_counter(), "starting"
        # The simulation itself reports no progress; an elapsed-time line shows it is alive.
        self._replay_ticker = self.set_interval(0.5, self._replay_tick)
        self.run_replay(a, n, seed)

    def _replay_tick(self) -> None:
        self.query_one("#replay-status", Static).update(
            Text(f"{self._replay_what} ({time.perf_counter() - self._replay_t0:.0f} s)", style="dim"))

    def run_replay(self, a: Analysis, n: int, seed: int) -> None:
        # A daemon thread, not a Textual worker: a replay cannot be interrupted, and quitting the
        # app must not wait for it.
        threading.Thread(target=self._replay_thread, args=(a, n, seed), daemon=True, name="qmodel-replay").start()

    def _replay_thread(self, a: Analysis, n: int, seed: int) -> None:
        def progress(frac: float, what: str) -> None:
            self._from_thread(self._replay_progress, frac, what)

        try:
            check = self.engine.replay(a.scenario, a.result, n, seed, progress)
        except ImportError:
            self._from_thread(self._replay_done, None, "the replay is not installed in this build")
            return
        except Exception as err:  # show any failure in the tab rather than crash the app
            self._from_thread(self._replay_done, None, f"replay failed: {err}")
            return
        self._from_thread(self._replay_done, check, "")

    def _from_thread(self, fn, *args) -> None:
        """Run ``fn`` on the app's thread; dropped quietly if the app has already closed."""
        if self.is_running:
            try:
                self.call_from_thread(fn, *args)
            except RuntimeError:
                pass  # the event loop closed between the check and the call

    def _replay_progress(self, frac: float, what: str) -> None:
        self._replay_what = what
        self.query_one("#replay-progress", ProgressBar).update(progress=100 * frac)
        self._replay_tick()

    def _replay_done(self, check: ReplayCheck | None, error: str) -> None:
        if getattr(self, "_replay_ticker", None) is not None:
            self._replay_ticker.stop()
            self._replay_ticker = None
        self.query_one("#replay-run", Button).disabled = False
        status = self.query_one("#replay-status", Static)
        if check is None:
            status.update(Text(error, style="red"))
            return
        self.replay_check = check
        self.query_one("#replay-progress", ProgressBar).update(progress=100)
        status.update(Text(f"replay done: {check.requests} requests"
                           + (f" in {check.elapsed_s:.1f} s" if self.show_timings else ""), style="green"))
        self.query_one("#replay-table", TableView).update(render_replay(check))

    # ---- planner ------------------------------------------------------------------------------
    def _plan_intro(self) -> None:
        from .planning import planner_available

        msg = ("Search deployments for this model, workload and SLO: choose an objective and press Run."
               if planner_available() else "The planner is not available in this build.")
        self.query_one("#plan-status", Static).update(Text(msg, style="dim"))

    def action_plan(self) -> None:
        self.query_one(TabbedContent).active = "tab-plan"
        self.start_plan()

    @on(Button.Pressed, "#plan-run")
    def _plan_button(self) -> None:
        self.start_plan()

    def start_plan(self) -> None:
        from .planning import planner_available

        status = self.query_one("#plan-status", Static)
        if not planner_available():
            status.update(Text("The planner is not available in this build.", style="red"))
            return
        fb = self.build_state
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
        # The planner reports no progress of its own; an elapsed-time line shows it is alive.
        self._plan_ticker = self.set_interval(
            0.5, lambda: status.update(Text(f"planning ({objective})… {time.perf_counter() - t0:.0f} s", style="dim")))
        self.run_plan(fb.scenario, objective, target)

    def run_plan(self, scenario, objective: str, target: float | None) -> None:
        threading.Thread(target=self._plan_thread, args=(scenario, objective, target), daemon=True,
                         name="qmodel-plan").start()

    def _plan_thread(self, scenario, objective: str, target: float | None) -> None:
        from . import planning

        t0 = time.perf_counter()
        try:
            rows = planning.run_planner(scenario, objective, target)
        except QmodelError as err:
            self._from_thread(self._plan_done, None, str(err), 0.0)
            return
        except Exception as err:  # report planner failures in the tab
            self._from_thread(self._plan_done, None, f"planner failed: {type(err).__name__}: {err}", 0.0)
            return
        self._from_thread(self._plan_done, rows, "", time.perf_counter() - t0)

    def _plan_done(self, rows, error: str, elapsed: float) -> None:
        from .planning import render_plans

        if getattr(self, "_plan_ticker", None) is not None:
            self._plan_ticker.stop()
            self._plan_ticker = None
        self.query_one("#plan-run", Button).disabled = False
        status = self.query_one("#plan-status", Static)
        if rows is None:
            status.update(Text(error, style="red"))
            return
        self.plan_rows = rows
        status.update(Text(f"{len(rows)} plans" + (f" in {elapsed:.1f} s" if self.show_timings else "")
                           + "; pick one below to load it into the form", style="green"))
        self.query_one("#plan-table", TableView).update(render_plans(rows))
        self.query_one("#plan-load", Button).disabled = not rows

    @on(Button.Pressed, "#plan-load")
    def action_load_plan(self) -> None:
        labels = [f"#{i + 1} {r.label}" for i, r in enumerate(self.plan_rows)]
        if not labels:
            self.notify("No plans yet: F5 runs the planner", severity="warning")
            return

        def chosen(label: str | None) -> None:
            if label in labels:
                self.load_plan(labels.index(label))

        self.push_screen(CatalogPicker("a plan", labels), chosen)

    def load_plan(self, index: int) -> None:
        row = self.plan_rows[index]
        self.load_raw(row.scenario.model_dump(mode="json", exclude_none=True), keep_folder=True)
        self.notify(f"Loaded plan #{index + 1}: {row.label}")

    # ---- palette helpers ---------------------------------------------------------------------
    def set_field(self, key: str, value: str) -> None:
        self.query_one(ScenarioForm).set_value(key, value)


@dataclasses.dataclass
class _PathError:
    field: str | None
