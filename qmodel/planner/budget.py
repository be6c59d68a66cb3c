"""Provisioning budgets (iso-count, iso-power, iso-cost) and the instance counts they leave room for.

A plan's GPUs, power (TDP × GPUs) and $/h are checked against a :class:`Budget`; :func:`row_cap`
is the largest instance count of a pool that the budget and the search space's size limits allow
beside what is already used, and :func:`budget_rows` that count of decode instances for each
prefill instance count of a disaggregated family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qmodel.planner.space import Family, PlanSpec, SearchSpace

__all__ = ["Budget", "cost_of", "power_of", "row_cap", "budget_rows"]


@dataclass(frozen=True)
class Budget:
    """Splitwise's provisioning budgets: iso-count (GPUs), iso-power (W), iso-cost ($/h). None = no limit."""

    gpus: int | None = None
    power_w: float | None = None
    cost_per_hour: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in (("gpus", self.gpus), ("power_w", self.power_w),
                                         ("cost_per_hour", self.cost_per_hour)) if v is not None}

    def fits(self, plan: PlanSpec, price: dict[str, float | None], tdp: dict[str, float]) -> bool:
        if self.gpus is not None and plan.gpus > self.gpus:
            return False
        if self.power_w is not None and power_of(plan, tdp) > self.power_w * (1 + 1e-12):
            return False
        if self.cost_per_hour is not None:
            c = cost_of(plan, price)
            if c is None or c > self.cost_per_hour * (1 + 1e-12):
                return False
        return True


def cost_of(plan: PlanSpec, price: dict[str, float | None]) -> float | None:
    """The plan's $/h: :func:`qmodel.cost.cost_per_hour_usd` of its pools (None if a GPU has no price)."""
    from qmodel.cost import cost_per_hour_usd

    return cost_per_hour_usd(((pool.gpu, pool.gpus) for _, pool in plan.pools()), price)


def power_of(plan: PlanSpec, tdp: dict[str, float]) -> float:
    return float(sum(tdp[pool.gpu] * pool.gpus for _, pool in plan.pools()))


def row_cap(space: SearchSpace, budget: Budget, fam: Family, tp: int, used_gpus: int, used_weight_power: float,
             used_cost: float | None, price: dict[str, float | None], tdp: dict[str, float], gpu: str) -> int:
    """Largest instance count of a pool (tp GPUs of ``gpu`` each) that the limits leave room for."""
    n = min(space.max_instances, (space.max_gpus - used_gpus) // tp)
    if budget.gpus is not None:
        n = min(n, (budget.gpus - used_gpus) // tp)
    if budget.power_w is not None:
        n = min(n, int(math.floor((budget.power_w - used_weight_power) / (tdp[gpu] * tp) + 1e-9)))
    if budget.cost_per_hour is not None:
        p = price.get(gpu)
        if p is None or used_cost is None:
            return 0
        n = min(n, int(math.floor((budget.cost_per_hour - used_cost) / (p * tp) + 1e-9)))
    return max(0, n)


def budget_rows(fam: Family, space: SearchSpace, budget: Budget, price: dict[str, float | None],
          tdp: dict[str, float]) -> list[tuple[int, int]]:
    """(n_prefill, largest n_decode within max_instances, max_gpus and the budget) for each n_prefill."""
    ptp, dtp = fam.prefill_tp or 1, fam.decode_tp
    rows: list[tuple[int, int]] = []
    pprice = price.get(fam.prefill_gpu or "")
    for npf in range(1, space.max_instances + 1):
        used = npf * ptp
        if used > space.max_gpus:
            break
        nd = row_cap(space, budget, fam, dtp, used, tdp[fam.prefill_gpu or ""] * used,
                      None if pprice is None else pprice * used, price, tdp, fam.decode_gpu)
        rows.append((npf, nd))
    return rows
