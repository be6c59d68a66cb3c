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

import math
from collections import Counter, OrderedDict
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from qmodel.planner.evaluate import Evaluator
from qmodel.planner.space import Family, PlanSpec, SearchSpace

__all__ = ["Budget", "Found", "FamilyOutcome", "SerialExecutor", "min_cost_family", "max_goodput_family",
           "bisect_goodput", "warm", "run_tasks", "pareto_flags", "prune_threshold"]

SEARCH_REL_TOL = 3e-2  # goodput bracket during the search; the ranked plans are refined to 1e-3
FINAL_REL_TOL = 1e-3


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


# ---- bisections ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bracket:
    """A goodput bracket: ``lo`` meets the goal (attainment ``a_lo``), ``hi`` does not (``a_hi``).

    ``lo`` is the goodput reported; ``a_hi`` is None when ``hi`` is a stability limit (not solved).
    """

    lo: float
    a_lo: float
    hi: float
    a_hi: float | None
    solves: int


def root_bracket(f: Callable[[float], float], lo: float, f_lo: float, hi: float, f_hi: float,
                 rel_tol: float) -> tuple[float, float, float, float, int]:
    """(x_lo, f(x_lo), x_hi, f(x_hi), calls): the tightest evaluated bracket of the root of a
    non-increasing f with f(lo) >= 0 > f(hi).

    Brent's method (scipy.optimize.brentq: inverse quadratic interpolation, secant and bisection,
    always bracketing) on [lo, hi] with the end values given, so the ends cost no call; it stops
    when the bracket is within ``rel_tol`` of the root, so x_lo (the largest evaluated point with
    f >= 0) is within that of the root and never above it. A smooth f takes 4-7 calls for 1e-3
    where bisection takes ~10-13.
    """
    from scipy.optimize import brentq

    if f_lo == 0.0:
        f_lo = 1e-15  # brentq returns an end whose value is exactly 0; lo is known feasible
    br = [lo, f_lo, hi, f_hi]
    calls = [0]

    def g(x: float) -> float:
        if x == lo:
            return f_lo
        if x == hi:
            return f_hi
        calls[0] += 1
        v = f(x)
        if v >= 0 and x > br[0]:
            br[0], br[1] = x, v
        elif v < 0 and x < br[2]:
            br[2], br[3] = x, v
        return v

    brentq(g, lo, hi, xtol=1e-9 * hi, rtol=0.5 * rel_tol, maxiter=200)
    return br[0], br[1], br[2], br[3], calls[0]


def goodput_bracket(att: Callable[[float], float], goal: float, lo: float, hi: float, rel_tol: float,
                    a_lo: float | None = None, a_hi: float | None = None) -> Bracket:
    """Goodput in [lo, hi): the largest rate meeting the goal, to ``rel_tol``; lo = 0 if ``lo`` misses it.

    ``a_lo``/``a_hi`` are attainments already known at the ends (no solve). ``a_hi = None`` means
    ``hi`` is a stability limit: attainment tends to 0 there (waits diverge), so f(hi) = -goal is
    taken without a solve. f(r) = A(r) - goal is non-increasing (:mod:`qmodel.goodput`); its root
    is found by :func:`root_bracket`. A search that keeps the returned bracket can be refined to a
    tighter tolerance later from that bracket alone.
    """
    n = 0
    if a_lo is None:
        n += 1
        a_lo = att(lo)
    if a_lo < goal:
        return Bracket(0.0, a_lo, lo, a_lo, n)
    if a_hi is None:
        hi = hi * (1.0 - 1e-9)
    if lo >= hi or hi - lo <= 0.5 * rel_tol * lo:
        return Bracket(lo, a_lo, hi, a_hi, n)
    x, fx, y, fy, m = root_bracket(lambda r: att(r) - goal, lo, a_lo - goal, hi,
                                   -goal if a_hi is None else a_hi - goal, rel_tol)
    return Bracket(x, fx + goal, y, fy + goal if (y != hi or a_hi is not None) else None, n + m)


def bisect_goodput(att: Callable[[float], float], goal: float, lo: float, hi: float, rel_tol: float,
                   lo_known_ok: bool = False, a_lo: float | None = None) -> tuple[float, int]:
    """(goodput, solves) by :func:`goodput_bracket` with ``hi`` a stability limit."""
    b = goodput_bracket(att, goal, lo, hi, rel_tol, a_lo=a_lo)
    return b.lo, b.solves


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


# ---- min-gpus / min-cost -------------------------------------------------------------------------

def _row_cap(space: SearchSpace, budget: Budget, fam: Family, tp: int, used_gpus: int, used_weight_power: float,
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

    if fam.topology != "disaggregated":
        n_max = _row_cap(space, budget, fam, fam.decode_tp, 0, 0.0, 0.0, price, tdp, fam.decode_gpu)
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
    rows = _rows(fam, space, budget, price, tdp)  # (n_prefill, largest n_decode the limits allow)
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


def _rows(fam: Family, space: SearchSpace, budget: Budget, price: dict[str, float | None],
          tdp: dict[str, float]) -> list[tuple[int, int]]:
    """(n_prefill, largest n_decode within max_instances, max_gpus and the budget) for each n_prefill."""
    ptp, dtp = fam.prefill_tp or 1, fam.decode_tp
    rows: list[tuple[int, int]] = []
    pprice = price.get(fam.prefill_gpu or "")
    for npf in range(1, space.max_instances + 1):
        used = npf * ptp
        if used > space.max_gpus:
            break
        nd = _row_cap(space, budget, fam, dtp, used, tdp[fam.prefill_gpu or ""] * used,
                      None if pprice is None else pprice * used, price, tdp, fam.decode_gpu)
        rows.append((npf, nd))
    return rows


# ---- max-goodput ---------------------------------------------------------------------------------

def maximal_points(fam: Family, space: SearchSpace, budget: Budget, price: dict[str, float | None],
                   tdp: dict[str, float]) -> list[PlanSpec]:
    """Plans of ``fam`` within the limits to which no instance of either pool can be added."""
    if fam.topology != "disaggregated":
        n = _row_cap(space, budget, fam, fam.decode_tp, 0, 0.0, 0.0, price, tdp, fam.decode_gpu)
        return [fam.plan(n)] if n >= 1 else []
    pts = [(npf, nd) for npf, nd in _rows(fam, space, budget, price, tdp) if nd >= 1]
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


# ---- executors -----------------------------------------------------------------------------------

class SerialExecutor(Executor):
    """Runs each task in the calling thread at submit time (the executor for small searches)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:  # type: ignore[override]
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # the caller re-raises it from fut.result()
            fut.set_exception(err)
        return fut


def run_tasks(executor: Executor, fn: Callable, arg_list: Sequence[tuple], progress: Callable[[int], None] | None = None) -> list:
    """Submit ``fn(*args)`` for each args; results in input order; ``progress(done)`` after each completes."""
    from concurrent.futures import as_completed

    futures = [executor.submit(fn, *args) for args in arg_list]
    index = {f: i for i, f in enumerate(futures)}
    results: list = [None] * len(futures)
    done = 0
    for f in as_completed(futures):
        results[index[f]] = f.result()
        done += 1
        if progress:
            progress(done)
    return results


def pareto_flags(points: Iterable[tuple[float, float, float]]) -> list[bool]:
    """For (goodput per GPU, p90 TTFT, p90 TPOT) triples: True where no other point is at least as
    good in all three and strictly better in one."""
    pts = list(points)
    flags = []
    for i, (g, a, b) in enumerate(pts):
        dom = any((g2 >= g and a2 <= a and b2 <= b) and (g2 > g or a2 < a or b2 < b)
                  for j, (g2, a2, b2) in enumerate(pts) if j != i)
        flags.append(not dom)
    return flags
