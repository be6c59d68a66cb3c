"""Time-varying load: a plan per period of a rate curve, and the GPU-hours saved against the peak.

For rates r_1..r_T with period lengths h_t (hours), each period gets the best plan for its own rate
(objective min-gpus or min-cost); provisioning for the peak runs the peak's plan all day:

    GPU-hours  = sum_t gpus(r_t) h_t,       peak GPU-hours = gpus(max_t r_t) sum_t h_t,
    saved      = peak GPU-hours - GPU-hours.

Equal rates are planned once. The evaluator (and its caches) is shared by all periods.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from qmodel.errors import InputError
from qmodel.planner.plan_result import PeriodPlan, ScheduleResult
from qmodel.scenario import Scenario

__all__ = ["plan_schedule"]


def plan_schedule(scenario: Scenario | str | Path, rates: Sequence[float], *, period_hours: float = 1.0,
                  objective: str = "min-gpus", **plan_kwargs: Any) -> ScheduleResult:
    """Plan each period of ``rates`` (req/s); ``plan_kwargs`` go to :func:`qmodel.plan` (space, budget, executor...)."""
    from qmodel.planner import core

    if isinstance(scenario, (str, Path)):
        from qmodel.scenario import load_scenario

        scenario = load_scenario(scenario)
    if objective not in ("min-gpus", "min-cost"):
        raise InputError("objective", objective, "a rate curve is planned with min-gpus or min-cost")
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise InputError("--rates", list(rates), "a non-empty list of positive rates (req/s)")
    if not (period_hours > 0 and math.isfinite(period_hours)):
        raise InputError("--period-hours", period_hours, "a positive number of hours")
    plan_kwargs.setdefault("evaluator", core.EngineEvaluator(scenario))
    plan_kwargs.setdefault("knee", False)
    plan_kwargs.setdefault("serving_config", False)
    plan_kwargs["top_k"] = 1
    by_rate: dict[float, Any] = {}
    for r in sorted(set(float(x) for x in rates), reverse=True):
        by_rate[r] = core.plan(scenario, objective, target_rate_per_s=r, **plan_kwargs)  # type: ignore[arg-type]
    notes: list[str] = []
    periods = []
    for i, r in enumerate(rates):
        best = by_rate[float(r)].best
        if best is None:
            notes.append(f"period {i}: no plan meets the SLO at {r:.4g} req/s")
        periods.append(PeriodPlan(period=i, rate_per_s=float(r), hours=period_hours,
                                  label=None if best is None else best.label, gpus=0 if best is None else best.gpus,
                                  cost_per_hour=None if best is None else best.cost_per_hour))
    peak = by_rate[max(by_rate)].best
    total_h = period_hours * len(rates)
    gh = sum(p.gpus * p.hours for p in periods)
    peak_gh = (peak.gpus if peak else 0) * total_h
    costs = [p.cost_per_hour for p in periods]
    cost = None if any(c is None for c in costs) else float(sum(c * period_hours for c in costs))  # type: ignore[operator]
    peak_cost = None if peak is None or peak.cost_per_hour is None else peak.cost_per_hour * total_h
    if peak is None:
        notes.append("the peak rate cannot be met: the savings are not defined")
    return ScheduleResult(objective=objective, periods=periods, gpu_hours=gh, peak_gpu_hours=peak_gh,  # type: ignore[arg-type]
                          gpu_hours_saved=peak_gh - gh if peak else 0.0,
                          saved_fraction=(peak_gh - gh) / peak_gh if peak and peak_gh > 0 else 0.0,
                          cost=cost, peak_cost=peak_cost, notes=notes)
