"""The planner inside the TUI: run :func:`qmodel.planner.plan` and turn its rows into scenarios.

The planner is optional at run time (``planner_available``); when it is missing the Plan tab says
so and everything else works. A chosen plan becomes a full scenario with the current model,
workload, SLO and perf model, and the current pools' batch limits, dispatch and KV fraction, so
loading it into the form changes only what the planner chose.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qmodel.scenario import Scenario
from qmodel.units import format_duration

from .layout import ByWidth, keep_whole
from .report import short_binding

__all__ = ["PlanChoice", "planner_available", "run_planner", "scenario_from_row", "render_plans"]


@dataclass(frozen=True)
class PlanChoice:
    """One ranked plan and the scenario that realises it."""

    label: str
    row: Any  # qmodel.planner.PlanRow
    scenario: Scenario


def planner_available() -> bool:
    return importlib.util.find_spec("qmodel.planner") is not None


def scenario_from_row(scenario: Scenario, row: Any) -> Scenario:
    """The scenario re-targeted at a planner row: the planner's own re-targeting
    (:func:`qmodel.planner.evaluate.deployment_for`), so the TUI loads the deployment the planner solved."""
    from qmodel.planner.check import spec_of
    from qmodel.planner.evaluate import deployment_for

    return scenario.model_copy(update={"deployment": deployment_for(scenario, spec_of(row)),
                                       "name": f"{scenario.name}-plan{row.rank}"})


def run_planner(scenario: Scenario, objective: str, target_rate_per_s: float | None, top_k: int = 10) -> list[PlanChoice]:
    """Ranked plans for the objective. max-goodput uses the scenario's GPU count as the budget (iso-count).

    Runs serially: the TUI calls it from a worker thread, and forking a process pool from a threaded
    program is unsafe on some platforms.
    """
    from qmodel.planner import plan

    kw: dict[str, Any] = {"target_rate_per_s": target_rate_per_s, "top_k": top_k, "executor": "serial",
                          "serving_config": False}
    if objective == "max-goodput":
        kw["budget"] = {"gpus": scenario.deployment.gpus}
    res = plan(scenario, objective, **kw)
    return [PlanChoice(r.label, r, scenario_from_row(scenario, r)) for r in res.plans]


def render_plans(choices: list[PlanChoice]) -> RenderableType:
    """The ranked plans: one table with the label and binding where it fits, else (80 columns) a
    narrower table of the numbers with one line per plan below it naming the layout and what binds."""
    if not choices:
        return Text("No plan in the search space meets the SLO.", style="yellow")

    def table(wide: bool) -> Table:
        t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
        cols = [("#", "right", True), ("plan", "left", False), ("GPUs", "right", True), ("req/s", "right", True),
                ("/GPU", "right", True), ("$/h", "right", True), ("TTFT p90", "right", True),
                ("TPOT p90", "right", True), ("binding", "left", False)]
        if not wide:
            cols = [c for c in cols if c[0] not in ("plan", "/GPU", "binding")]
        for col, just, nowrap in cols:
            t.add_column(col, justify=just, no_wrap=nowrap)  # type: ignore[arg-type]
        for c in choices:
            r = c.row
            cells = {"#": str(r.rank), "plan": c.label, "GPUs": str(r.gpus), "req/s": f"{r.goodput_rps:.3g}",
                     "/GPU": f"{r.goodput_per_gpu:.3g}",
                     "$/h": "—" if r.cost_per_hour is None else f"{r.cost_per_hour:.1f}",
                     "TTFT p90": _dur(getattr(r, "ttft_p90_s", None)), "TPOT p90": _dur(getattr(r, "tpot_p90_s", None)),
                     "binding": short_binding(r.binding)}
            t.add_row(*[cells[col] for col, _, _ in cols])
        return keep_whole(t)

    legend = Text()
    for c in choices:
        legend.append(f"#{c.row.rank} ", style="bold")
        legend.append(c.label)
        legend.append(f": {short_binding(c.row.binding)}\n", style="dim")
    head = Text("goodput in req/s at the SLO; /GPU: per GPU; $/h: GPU list price", style="dim")
    return ByWidth(Group(head, table(True)), Group(head, table(False), legend))


def _dur(x: float | None) -> str:
    return "—" if x is None else format_duration(x)
