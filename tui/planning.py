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

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from qmodel.scenario import Scenario
from qmodel.units import format_duration

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
    if not choices:
        return Text("No plan in the search space meets the SLO.", style="yellow")
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for col, just in (("#", "right"), ("plan", "left"), ("GPUs", "right"), ("goodput", "right"), ("/GPU", "right"),
                      ("$/h", "right"), ("p90 TTFT", "right"), ("p90 TPOT", "right"), ("binding", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for c in choices:
        r = c.row
        t.add_row(str(r.rank), c.label, str(r.gpus), f"{r.goodput_rps:.3g}", f"{r.goodput_per_gpu:.3g}",
                  "—" if r.cost_per_hour is None else f"{r.cost_per_hour:.1f}",
                  _dur(getattr(r, "ttft_p90_s", None)), _dur(getattr(r, "tpot_p90_s", None)),
                  r.binding.split(";", 1)[0])
    return t


def _dur(x: float | None) -> str:
    return "—" if x is None else format_duration(x)
