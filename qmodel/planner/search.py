"""The search: enumerate families, prune with bounds, walk each family's feasible boundary, rank.

Why it is cheap (a goodput costs ~15 queueing solves; a search space holds thousands of plans):

* **Pools first.** A (role, GPU, TP) pool that breaks the TP rule, does not fit in memory, or misses
  the SLO when idle (:meth:`Evaluator.pool_issue`) removes every family that uses it, unsolved.
* **Stability bounds.** A plan whose largest stable rate is at or below the target cannot meet it.
  Station limits are cached per (station, pool, instances), so this is a few dictionary look-ups.
* **Monotone boundary walk.** Attainment at a fixed rate is non-decreasing in each pool's instance
  count, so the instance-minimal feasible plans of a disaggregated family form a staircase: for
  n_p prefill instances the fewest decode instances n_d*(n_p) is non-increasing in n_p. The walk
  finds n_d*(n_p) by bisection in the first row and by stepping down from the previous row's answer
  after it: O(rows + log rows) solves instead of rows x columns.
* **Cost bound.** Families are visited in order of a lower bound on their cost (one instance's
  capacity gives the fewest instances that can be stable); once K plans are known, a family or row
  whose lower bound exceeds the K-th best cost is skipped.
* **Goodput early exit** (max-goodput): a candidate whose stability limit is below the K-th best
  goodput found so far is skipped; otherwise one solve at that goodput decides whether it can beat
  it, before any bisection. Bisection then starts from [K-th best, stability limit].

Everything that runs per family is a top-level function of picklable arguments, so any
``concurrent.futures.Executor`` (a local process pool, a Dask ``Client.get_executor()``) can run it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from qmodel.planner.bracket import (FINAL_REL_TOL, SEARCH_REL_TOL, Bracket, bisect_goodput, goodput_bracket,
                                    root_bracket)
from qmodel.planner.budget import Budget, budget_rows, cost_of, power_of, row_cap
from qmodel.planner.evaluate import Evaluator
from qmodel.planner.executors import SerialExecutor, run_tasks
from qmodel.planner.pareto import pareto_flags
from qmodel.planner.space import Family, PlanSpec, SearchSpace

__all__ = ["Budget", "Found", "FamilyOutcome", "SerialExecutor", "min_cost_family", "max_goodput_family",
           "bisect_goodput", "warm", "run_tasks", "pareto_flags", "prune_threshold",
           # re-exported from their modules (bracket, budget), importable from here as before
           "SEARCH_REL_TOL", "FINAL_REL_TOL", "Bracket", "root_bracket", "goodput_bracket", "cost_of", "power_of",
           "maximal_points"]


@dataclass(frozen=True)
class Found:
    """A feasible plan found by the search."""

    plan: PlanSpec
    cost: float  # the objective's cost (GPUs or $/h); for max-goodput, GPUs (the tie-break)
    capacity: float
    station: str
    goodput: float | None = None  # known for max-goodput, computed later for the min objectives
    attainment: float | None = None  # at the target rate (min objectives), from the search's own solve
    bracket: "Bracket | None" = None  # max-goodput: the search's goodput bracket, refined later


@dataclass
class FamilyOutcome:
    family: Family
    found: list[Found] = field(default_factory=list)
    pruned: Counter = field(default_factory=Counter)
    solves: int = 0


# ---- per-process warm evaluators ---------------------------------------------------------------

_WARM: OrderedDict[str, Evaluator] = OrderedDict()


def warm(ev: Evaluator) -> Evaluator:
    """This process's cached evaluator for ``ev.key`` (a pickled evaluator arrives with empty caches)."""
    key = f"{type(ev).__module__}.{type(ev).__qualname__}:{ev.key}"
    hit = _WARM.get(key)
    if hit is None:
        _WARM[key] = hit = ev
        while len(_WARM) > 4:
            _WARM.popitem(last=False)
    return hit


def prune_threshold(lower_bounds: Sequence[float], k: int) -> float | None:
    """The goodput below which a plan cannot enter the top K (max-goodput), from the search's lower
    bounds so far; None while fewer than K are known.

    A plan's final goodput g_f is within FINAL_REL_TOL below its true goodput g (:func:`qmodel.planner.rank.grid_goodput`)
    and the search's lower bound L <= g, so the K-th largest L is below (1 + tol) times the K-th
    largest g_f, G_K. A plan that can share a tie group with the top K has g >= g_f >= G_K (1 − tol);
    L_K (1 − tol)/(1 + tol) <= G_K (1 − tol) keeps every such plan in the search.
    """
    if len(lower_bounds) < k:
        return None
    kth = sorted(lower_bounds, reverse=True)[k - 1]
    return kth * (1.0 - FINAL_REL_TOL) / (1.0 + FINAL_REL_TOL)


def _first_true(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Smallest k in [lo, hi] with pred(k) true, for pred monotone (false...false true...true)."""
    if lo > hi or not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def min_cost_family(ev: Evaluator, fam: Family, space: SearchSpace, rate: float, weight: dict[str, float],
                    budget: Budget, price: dict[str, float | None], tdp: dict[str, float],
                    cost_cap: float) -> FamilyOutcome:
    """Instance-minimal plans of ``fam`` that meet the SLO at ``rate``; cost = sum(weight[gpu] x GPUs)."""
    ev = warm(ev)
    out = FamilyOutcome(fam)
    goal = ev.goal

    def cost(p: PlanSpec) -> float:
        return sum(weight[pool.gpu] * pool.gpus for _, pool in p.pools())

    seen: dict[PlanSpec, float] = {}

    def ok(p: PlanSpec) -> bool:
        cap, _ = ev.capacity(p)
        if cap <= rate:
            return False
        if p not in seen:
            out.solves += 1
            seen[p] = ev.attainment(p, rate)
        return seen[p] >= goal

    if not fam.separate_prefill:
        n_max = row_cap(space, budget, fam, fam.decode_tp, 0, 0.0, 0.0, price, tdp, fam.decode_gpu)
        out.pruned["over budget or size limits"] += space.grid_size(fam) - n_max
        if n_max < 1:
            return out
        n0 = _first_true(lambda n: ev.capacity(fam.plan(n))[0] > rate, 1, n_max)
        if n0 is None:
            out.pruned["unstable at the target rate"] += n_max
            return out
        out.pruned["unstable at the target rate"] += n0 - 1
        if cost(fam.plan(n0)) > cost_cap:
            out.pruned["cost bound (cannot enter the top K)"] += n_max - n0 + 1
            return out
        # gallop up from the stability bound: feasibility usually starts within a step or two of it
        step, bad, n = 1, n0 - 1, n0
        while not ok(fam.plan(n)):
            if n == n_max:
                out.pruned["misses the SLO (solved or implied)"] += n_max - n0 + 1
                return out
            bad, n, step = n, min(n_max, n + step), step * 2
        best = _first_true(lambda k: ok(fam.plan(k)), bad + 1, n)
        assert best is not None
        p = fam.plan(best)
        out.pruned["misses the SLO (solved or implied)"] += best - n0
        out.pruned["dominated (fewer instances already meet the SLO)"] += n_max - best
        if cost(p) <= cost_cap:
            c, st = ev.capacity(p)
            out.found.append(Found(p, cost(p), c, st, attainment=seen.get(p)))
        else:
            out.pruned["cost bound (cannot enter the top K)"] += 1
        return out

    # disaggregated: staircase over (n_prefill, n_decode)
    rows = budget_rows(fam, space, budget, price, tdp)  # (n_prefill, largest n_decode the limits allow)
    in_budget = sum(nd for _, nd in rows)
    out.pruned["over budget or size limits"] += space.grid_size(fam) - in_budget
    if in_budget == 0:
        return out
    nd_all = max(nd for _, nd in rows)
    np_all = rows[-1][0]

    # stability bounds: each station's limit depends on its own pool only (prefill and KV paths on n_p)
    def front_ok(npf: int) -> bool:
        return all(c > rate for c, st in ev.limits(fam.plan(1, npf)) if st != "decode")

    def back_ok(nd: int) -> bool:
        return all(c > rate for c, st in ev.limits(fam.plan(nd, 1)) if st == "decode")

    p0 = _first_true(front_ok, 1, np_all)
    d0 = _first_true(back_ok, 1, nd_all)
    if p0 is None or d0 is None:
        out.pruned["unstable at the target rate"] += in_budget
        return out
    widths = [(npf, nd_max, max(0, nd_max - d0 + 1)) for npf, nd_max in rows if npf >= p0]
    out.pruned["unstable at the target rate"] += in_budget - sum(w for _, _, w in widths)
    prev: int | None = None  # fewest decode instances that met the SLO in the previous row
    for i, (npf, nd_max, width) in enumerate(widths):
        if width == 0:
            continue
        if cost(fam.plan(d0, npf)) > cost_cap:  # cost grows with n_p: every later row is out too
            out.pruned["cost bound (cannot enter the top K)"] += sum(w for _, _, w in widths[i:])
            break
        if prev is not None and prev <= d0:  # n_d cannot go lower: later rows only add prefill GPUs
            out.pruned["dominated (fewer instances already meet the SLO)"] += sum(w for _, _, w in widths[i:])
            break
        if prev is not None and prev - 1 <= nd_max:
            # prev is feasible in this row too (one more prefill instance never hurts): step down from it
            if not ok(fam.plan(prev - 1, npf)):
                best: int | None = prev if prev <= nd_max else None
            else:
                best = _first_true(lambda k: ok(fam.plan(k, npf)), d0, prev - 1)
        else:
            best = _first_true(lambda k: ok(fam.plan(k, npf)), d0, nd_max)
        if best is None:
            out.pruned["misses the SLO (solved or implied)"] += width
            continue
        out.pruned["misses the SLO (solved or implied)"] += best - d0
        out.pruned["dominated (fewer instances already meet the SLO)"] += nd_max - best
        if prev is not None and best >= prev:  # the previous row's plan has one prefill instance fewer
            out.pruned["dominated (fewer instances already meet the SLO)"] += 1
            continue
        p = fam.plan(best, npf)
        if cost(p) <= cost_cap:
            c, st = ev.capacity(p)
            out.found.append(Found(p, cost(p), c, st, attainment=seen.get(p)))
        else:
            out.pruned["cost bound (cannot enter the top K)"] += 1
        prev = best
    return out


# ---- max-goodput ---------------------------------------------------------------------------------

def maximal_points(fam: Family, space: SearchSpace, budget: Budget, price: dict[str, float | None],
                   tdp: dict[str, float]) -> list[PlanSpec]:
    """Plans of ``fam`` within the limits to which no instance of either pool can be added."""
    if not fam.separate_prefill:
        n = row_cap(space, budget, fam, fam.decode_tp, 0, 0.0, 0.0, price, tdp, fam.decode_gpu)
        return [fam.plan(n)] if n >= 1 else []
    pts = [(npf, nd) for npf, nd in budget_rows(fam, space, budget, price, tdp) if nd >= 1]
    keep = []
    for i, (npf, nd) in enumerate(pts):
        nxt = pts[i + 1] if i + 1 < len(pts) else None
        if nxt is not None and nxt[0] == npf + 1 and nxt[1] >= nd:
            continue  # one more prefill instance fits beside the same decode pool
        keep.append(fam.plan(nd, npf))
    return keep


def max_goodput_family(ev: Evaluator, fam: Family, space: SearchSpace, budget: Budget, price: dict[str, float | None],
                       tdp: dict[str, float], threshold: float, k: int) -> FamilyOutcome:
    """Goodput of the budget-maximal plans of ``fam`` that can beat ``threshold`` (the K-th best so far)."""
    ev = warm(ev)
    out = FamilyOutcome(fam)
    goal = ev.goal
    pts = maximal_points(fam, space, budget, price, tdp)
    out.pruned["dominated (an instance more fits the budget)"] += space.grid_size(fam) - len(pts)
    scored = sorted(((ev.capacity(p), p) for p in pts), key=lambda t: -t[0][0])
    local: list[float] = []
    for (cap, st), p in scored:
        thr = max(threshold, prune_threshold(local, k) or 0.0)
        if cap <= 0:
            out.pruned["cannot run"] += 1
            continue
        if cap <= thr:
            out.pruned["stability limit below the K-th best goodput"] += 1
            continue
        att = lambda r, p=p: ev.attainment(p, r)  # noqa: E731
        if thr > 0:
            out.solves += 1
            a_thr = att(thr)
            if a_thr < goal:
                out.pruned["misses the SLO at the K-th best goodput (one solve)"] += 1
                continue
            br = goodput_bracket(att, goal, thr, cap, SEARCH_REL_TOL, a_lo=a_thr)
        else:
            br = goodput_bracket(att, goal, cap * 1e-4, cap, SEARCH_REL_TOL)
        out.solves += br.solves
        if br.lo <= 0:
            out.pruned["misses the SLO at every rate"] += 1
            continue
        local.append(br.lo)
        out.found.append(Found(p, float(p.gpus), cap, st, goodput=br.lo, bracket=br))
    return out
