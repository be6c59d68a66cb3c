"""The Plots tab: SLO attainment against the arrival rate per topology (same GPUs), the TTFT and
TPOT distributions with their percentiles and target, and goodput over the P:D split."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from qmodel.topology import TOPOLOGIES

from .. import charts
from ..layout import whole_lines
from .base import Pane
from ..widgets import Chart, TableView

__all__ = ["PlotsPane", "TOPOLOGY_STYLES"]

#: each deployment shape's curve colour (:attr:`qmodel.topology.Topology.plot_style`)
TOPOLOGY_STYLES = {name: cls.plot_style for name, cls in TOPOLOGIES.items()}


class PlotsPane(Pane):
    """Charts of the current answer; each stage (curves, heatmap) fills its part as it arrives."""

    TITLE = "Plots"
    SCOPED_CSS = False  # read per class by Textual: the rules below name the pane themselves
    DEFAULT_CSS = """
    PlotsPane .plot-title {
        text-style: bold;
        margin-top: 1;
    }
    PlotsPane #chart-attainment {
        height: 14;
    }
    .-wide PlotsPane #chart-attainment {
        height: 18;
    }
    PlotsPane .legend {
        height: auto;
    }
    PlotsPane #dist-row {
        height: auto;
        layout: vertical;
    }
    .-wide PlotsPane #dist-row {
        layout: horizontal;
    }
    PlotsPane .dist-box {
        height: auto;
        width: 1fr;
    }
    PlotsPane Chart.dist {
        height: 10;
    }
    .-wide PlotsPane Chart.dist {
        height: 12;
    }
    PlotsPane #heatmap {
        height: auto;
    }
    """

    def __init__(self) -> None:
        super().__init__(self.TITLE, id="tab-plots")

    def compose(self) -> ComposeResult:
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

    def show(self, a) -> None:
        """Draw ``a``'s curves, distributions and P:D grid (``None``: no results yet)."""
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
            refs = [charts.VLine("yellow", "goal", y=goal)]
            rate = a.scenario.rate_per_s
            if rate:
                refs.append(charts.VLine("white", "rate", x=rate))
            series = [charts.Series(c.topology, c.rates, c.attainment, TOPOLOGY_STYLES.get(c.topology, "white"))
                      for c in curves]
            x_hi = max((c.rates[-1] for c in curves), default=1.0)
            knees = [(c.knee_rps, TOPOLOGY_STYLES.get(c.topology, "white")) for c in curves if c.knee_rps > 0]
            att.plot(lambda w, h: charts.line_chart(series, w, h, x_range=(0.0, x_hi), y_range=(0.0, 1.0), refs=refs,
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
            factor, unit = charts.duration_axis(d.x_s[-1])
            chart.plot(lambda w, h, d=d, marks=marks, factor=factor, unit=unit, which=which: charts.density_bars(
                d.x_s, d.cdf, w, h, marks=marks, style="cyan" if which == "ttft" else "bright_blue",
                x_fmt=lambda v: charts.fmt_num(v * factor), y_label="share of requests",
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
            grid = charts.heatmap(h.goodput, [f"D{d}" for d in h.decode[:len(h.goodput)]],
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
