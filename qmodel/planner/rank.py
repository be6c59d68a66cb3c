"""Ranking the plans the search found: one total order over the whole feasible set, so that the top
K plans are a prefix of the top K+1 and the best plan does not depend on K.

* ``min-gpus`` / ``min-cost``: key (cost, −goodput to 3 significant digits, label). The search finds
  every instance-minimal feasible plan whose cost is at most the K-th smallest cost (its cost cap is
  the K-th best found so far, never below the true K-th), so ranking all of them that cost at most
  the K-th smallest cost, not just K of them, gives the exact top K of that order. Each goodput is
  refined from the bracket [target rate, stability limit], which depends on the plan alone.
* ``max-goodput``: goodputs within FINAL_REL_TOL of the best one left tie and are ordered by GPUs
  then label (:func:`rank_ties`). Each plan's goodput is the largest point of a geometric grid
  anchored at its own stability limit λ_max that meets the goal (:func:`grid_goodput`), so it does
  not depend on where the search's bracket happened to start. Plans are refined in order of the
  search's upper bound on their goodput until no unrefined plan can reach (1 − FINAL_REL_TOL) times
  the K-th best refined goodput: every plan that can enter a tie group of the top K is refined.
  The search prunes at :func:`qmodel.planner.search.prune_threshold` for the same reason.

Latencies, binding and knee are computed only for the K plans shown.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from typing import Any, Callable, Sequence

from qmodel.planner.evaluate import Evaluator, PlanMetrics
from qmodel.planner.search import FINAL_REL_TOL, Found, SerialExecutor, goodput_bracket, run_tasks, warm
from qmodel.planner.space import PlanSpec

__all__ = ["rank_ties", "grid_goodput", "rank_found"]


def grid_goodput(att: Callable[[float], float], goal: float, lam_max: float, lo: float, hi: float,
                 rel_tol: float = FINAL_REL_TOL) -> tuple[float, int]:
    """(goodput, solves): the largest r_n = λ_max (1 + rel_tol)^(−n), n >= 1, with A(r_n) >= goal.

    Given A(lo) >= goal (lo may be 0: nothing meets it) and A(hi) < goal or hi = λ_max, and A
    non-increasing, the answer lies between the grid points at or below lo (feasible, not solved)
    and at or above hi (infeasible), found by bisection over n. The grid depends on the plan
    alone (its λ_max), so the result is the same whatever bracket the search left; it is within
    rel_tol below the true goodput.
    """
    if not (lo > 0 and lam_max > 0):
        return 0.0, 0
    step = math.log1p(rel_tol)

    def r(n: int) -> float:
        return lam_max * math.exp(-n * step)

    n_ok = max(1, math.ceil(math.log(lam_max / lo) / step))  # r(n_ok) <= lo: meets the goal
    while r(n_ok) > lo:  # round-off in the logarithm
        n_ok += 1
    n_bad = max(0, math.floor(math.log(lam_max / hi) / step)) if hi < lam_max else 0  # r(n_bad) >= hi
    while n_bad > 0 and r(n_bad) < hi:
        n_bad -= 1
    solves = 0
    while n_ok - n_bad > 1:
        mid = (n_ok + n_bad) // 2
        solves += 1
        if att(r(mid)) >= goal:
            n_ok = mid
        else:
            n_bad = mid
    return r(n_ok), solves


def rank_ties(rows: list) -> list:
    """Rows (found, goodput, ...) by goodput, best first; the rows within FINAL_REL_TOL of the best
    one left form a tie group, ordered by GPUs then label, and the rest follow the same way.

    Over any set that holds every row with goodput >= (1 − tol) x the top of the group holding the
    K-th row, the first K rows are those of the whole set (each group is fixed by rows above that)."""
    rest = sorted(rows, key=lambda t: (-t[1], t[0].plan.gpus, t[0].plan.label))
    out = []
    while rest:
        top = rest[0][1]
        tied = [t for t in rest if t[1] >= top * (1.0 - FINAL_REL_TOL)]
        out += sorted(tied, key=lambda t: (t[0].plan.gpus, t[0].plan.label))
        rest = rest[len(tied):]
    return out


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


# ---- per-plan work (top-level functions of picklable arguments: they run on executor workers) ----

def plan_goodput(ev: Evaluator, p: PlanSpec, lo: float, a_lo: float | None, hi: float, a_hi: float | None,
                 lam_max: float, on_grid: bool) -> tuple[float, int] | str:
    """(goodput, solves) of one plan from a bracket, or the one-line message of a QmodelError.

    ``on_grid``: :func:`grid_goodput` (max-goodput); else Brent's method to FINAL_REL_TOL from
    [lo, hi], which for the min objectives is [target rate, λ_max] (the same for every K).
    """
    from qmodel.errors import QmodelError

    ev = warm(ev)
    att = lambda r: ev.attainment(p, r)  # noqa: E731
    try:
        if on_grid:
            return grid_goodput(att, ev.goal, lam_max, lo, hi)
        br = goodput_bracket(att, ev.goal, lo, hi, FINAL_REL_TOL, a_lo=a_lo, a_hi=a_hi)
        return br.lo, br.solves
    except QmodelError as err:
        return str(err)


def plan_details(ev: Evaluator, p: PlanSpec, rate: float, with_knee: bool,
                 lam_max: float) -> tuple[PlanMetrics, float, int] | str:
    """(metrics at ``rate``, knee, solves) for one ranked plan, or the one-line message of a QmodelError."""
    from qmodel.errors import QmodelError

    ev = warm(ev)
    try:
        m = ev.metrics(p, rate)
        knee = ev.knee(p, lam_max) if with_knee else math.nan
    except QmodelError as err:
        return str(err)
    return m, knee, 1


def _upper(f: Found) -> float:
    """An upper bound on a max-goodput plan's goodput: its search bracket's infeasible end."""
    return f.bracket.hi if f.bracket is not None else f.capacity


def rank_found(ev: Evaluator, objective: str, found: list[Found], k: int, rate: float | None, ex: Executor,
               with_knee: bool, notes: list[str]) -> tuple[list[tuple[Found, float, PlanMetrics, float]], int]:
    """The top ``k`` of ``found`` as (found, goodput, metrics, knee), best first, and the solves spent."""
    solves = 0
    rated: list[tuple[Found, float]] = []

    def add(pick: list[Found], outs: list) -> None:
        nonlocal solves
        for f, o in zip(pick, outs):
            if isinstance(o, str):  # a numerical failure in one plan must not sink the ranking
                notes.append(f"left out {f.plan.label}: {o}")
                continue
            rated.append((f, o[0]))
            solves += o[1]

    if objective == "max-goodput":
        wave = 1 if isinstance(ex, SerialExecutor) else max(4, 2 * int(getattr(ex, "_max_workers", 1) or 1))
        queue = sorted((f for f in found if f.bracket is not None), key=lambda f: (-_upper(f), f.plan.label))
        while queue:
            kth = sorted((g for _, g in rated), reverse=True)[k - 1] if len(rated) >= k else 0.0
            if _upper(queue[0]) < kth * (1.0 - FINAL_REL_TOL):
                break  # no plan left can reach a tie group of the top K
            pick, queue = queue[:wave], queue[wave:]
            args = [(ev, f.plan, f.bracket.lo, f.bracket.a_lo, f.bracket.hi, f.bracket.a_hi, f.capacity, True)  # type: ignore[union-attr]
                    for f in pick]
            add(pick, run_tasks(ex, plan_goodput, args))
        rows = rank_ties(rated)[:k]
    else:
        costs = sorted(f.cost for f in found)
        if costs:
            kth_cost = costs[min(k, len(costs)) - 1]
            pick = sorted((f for f in found if f.cost <= kth_cost), key=lambda f: (f.cost, f.plan.label))
            args = [(ev, f.plan, rate, f.attainment, f.capacity, None, f.capacity, False) for f in pick]
            add(pick, run_tasks(ex, plan_goodput, args))
        rows = sorted(rated, key=lambda t: (t[0].cost, -_sig3(t[1]), t[0].plan.label))[:k]
    args2: list[tuple[Any, ...]] = []
    for f, g in rows:
        at = rate if rate is not None and rate < f.capacity else g
        args2.append((ev, f.plan, at, with_knee, f.capacity))
    outs = run_tasks(ex, plan_details, args2)
    ranked = []
    for (f, g), o in zip(rows, outs):
        if isinstance(o, str):
            notes.append(f"left out {f.plan.label}: {o}")
            continue
        m, knee, n = o
        solves += n
        ranked.append((f, g, m, knee))
    return ranked, solves
