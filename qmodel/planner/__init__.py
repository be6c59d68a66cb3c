"""The planner: search deployments for the fewest GPUs, the lowest $/hour, or the most goodput.

``qmodel.plan(scenario, objective, ...) -> PlanResult``; the CLI is ``qmodel plan``. Modules:
:mod:`~qmodel.planner.space` (candidates), :mod:`~qmodel.planner.evaluate` (cached engine calls),
:mod:`~qmodel.planner.search` (bounds, boundary walk, executors), :mod:`~qmodel.planner.core`
(``plan``), :mod:`~qmodel.planner.schedule` (a plan per period of a rate curve),
:mod:`~qmodel.planner.export` (vLLM / Dynamo launch configuration), :mod:`~qmodel.planner.check`
(replay of the top plans, rank agreement).
"""

from __future__ import annotations

from qmodel.planner.core import plan
from qmodel.planner.plan_result import PlanResult, PlanRow, ScheduleResult
from qmodel.planner.schedule import plan_schedule
from qmodel.planner.search import Budget
from qmodel.planner.space import SearchSpace

__all__ = ["plan", "plan_schedule", "PlanResult", "PlanRow", "ScheduleResult", "Budget", "SearchSpace"]
