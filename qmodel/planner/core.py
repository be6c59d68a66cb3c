"""``qmodel.plan``: the cheapest deployment that meets a target rate, or the most goodput in a budget.

Objectives (one per search):

* ``min-gpus``: meet ``target_rate_per_s`` at the SLO with the fewest GPUs (ties: more goodput);
* ``min-cost``: the same with the lowest price per hour (:mod:`qmodel.cost`: the scenario's ``prices``,
  else the catalog's list price; a GPU with neither is an InputError naming it, not left out);
* ``max-goodput``: the most goodput within a budget of GPUs, board power or $/hour (Splitwise's
  iso-count, iso-power and iso-cost provisioning); ties go to fewer GPUs.

The search itself is in :mod:`qmodel.planner.search`; this module wires the catalog, the
evaluator, the executor and the output together.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from qmodel.errors import InputError
from qmodel.layouts import DEFAULT_LINK
from qmodel.planner.evaluate import EngineEvaluator, Evaluator
from qmodel.planner.plan_result import Objective, PlanResult, PlanRow, PoolOut, SearchStats
from qmodel.planner.rank import rank_found
from qmodel.planner.search import (Budget, FamilyOutcome, Found, SerialExecutor, cost_of, max_goodput_family,
                                   maximal_points, min_cost_family, pareto_flags, power_of, prune_threshold, run_tasks,
                                   warm)
from qmodel.planner.space import Family, PlanSpec, SearchSpace
from qmodel.progress import Progress
from qmodel.scenario import Scenario

__all__ = ["plan", "make_executor", "Progress"]
OBJECTIVES = ("min-gpus", "min-cost", "max-goodput")


def make_executor(kind: str | Executor | None, workers: int | None, n_tasks: int) -> tuple[Executor, str, bool]:
    """(executor, description, whether we own it and must shut it down).

    ``None``/"auto": a local process pool when there are more than two workers and enough families
    to share out, else serial (a pool's start-up costs more than a handful of families). "serial", "process", or an Executor
    (e.g. ``distributed.Client.get_executor()``) are taken as given.
    """
    if isinstance(kind, Executor):
        return kind, type(kind).__name__, False
    ncpu = os.cpu_count() or 1
    w = max(1, workers or ncpu)
    # auto: on two cores or fewer the stations' BLAS already uses them, and worker processes only
    # add start-up and cold caches (measured: benchmarks/bench_planner.py)
    if kind == "serial" or (kind in (None, "auto") and (w <= 2 or n_tasks < 8)):
        return SerialExecutor(), "serial", True
    if kind in (None, "auto", "process"):
        from concurrent.futures import ProcessPoolExecutor

        # fork (the platform default on Linux): workers inherit the warm pools and stations and
        # need no __main__ guard in the caller's script
        return ProcessPoolExecutor(max_workers=w), f"process pool ({w} workers)", True
    raise InputError("executor", kind, "'auto', 'serial', 'process' or a concurrent.futures.Executor")


@dataclass
class _Ctx:
    ev: Evaluator
    space: SearchSpace
    objective: str
    rate: float | None
    budget: Budget
    price: dict[str, float | None]
    tdp: dict[str, float]
    weight: dict[str, float]
    top_k: int


def _catalog_tables(gpus: Iterable[str], prices: dict[str, float] | None = None
                    ) -> tuple[dict[str, float | None], dict[str, float]]:
    """(price per GPU-hour: the scenario's ``prices`` over the catalog's, :func:`qmodel.cost.price_table`; TDP)."""
    from qmodel.cost import price_table
    from qmodel.registry import load_catalog

    cat = load_catalog()
    gpus = list(gpus)
    price = price_table(gpus, prices)  # CatalogError (exit 2) names the closest matches
    tdp = {cat.gpu(g).name: float(cat.gpu(g).tdp_watts) for g in gpus}
    return price, tdp


def _default_space(scenario: Scenario, space: SearchSpace | None, **kw: Any) -> SearchSpace:
    base = space.model_dump() if space is not None else {}
    for k, v in kw.items():
        if v is not None:
            base[k] = tuple(v) if isinstance(v, (list, tuple)) else v
    try:
        return SearchSpace(**base)
    except Exception as err:  # pydantic ValidationError -> one line
        from pydantic import ValidationError

        if isinstance(err, ValidationError):
            e = err.errors()[0]
            raise InputError("search." + ".".join(str(x) for x in e["loc"]), e.get("input"), e["msg"]) from None
        raise


def _scenario_defaults(scenario: Scenario) -> tuple[str, str]:
    from qmodel.topology import topology_named

    dep = scenario.deployment
    topo = topology_named(dep.topology)
    return topo.decode_config(dep).gpu, (dep.link if topo.has_link else DEFAULT_LINK)


def _roles(fam: Family) -> list[tuple[str, str, int]]:
    return fam.shape.family_pools(fam)


def _bound(ctx: _Ctx, fam: Family) -> float:
    """min objectives: a lower bound on the family's cost; max-goodput: an upper bound on its goodput.

    Both read the stations' limits, which are additive over instances (c instances sustain c times
    one instance's rate: :meth:`EngineEvaluator.limits`), so the fewest instances that can be
    stable at the target are exact, and so is the largest limit among budget-maximal plans.
    """
    if ctx.objective == "max-goodput":
        pts = maximal_points(fam, ctx.space, ctx.budget, ctx.price, ctx.tdp)
        return max((ctx.ev.capacity(p)[0] for p in pts), default=0.0)
    assert ctx.rate is not None
    if fam.separate_prefill:
        one = ctx.ev.limits(fam.plan(1, 1))
        front = min((c for c, st in one if st != "decode"), default=math.inf)
        back = min((c for c, st in one if st == "decode"), default=math.inf)
        pools = [(fam.prefill_gpu or "", fam.prefill_tp or 1, front), (fam.decode_gpu, fam.decode_tp, back)]
    else:
        pools = [(fam.decode_gpu, fam.decode_tp, ctx.ev.capacity(fam.plan(1))[0])]
    lb = 0.0
    for gpu, tp, unit in pools:
        if not unit > 0:
            return math.inf
        n = 1 if math.isinf(unit) else math.floor(ctx.rate / unit) + 1  # fewest n with n x unit > rate
        lb += ctx.weight[gpu] * tp * n
    return lb


def _kth(values: list[float], k: int, reverse: bool) -> float | None:
    if len(values) < k:
        return None
    return sorted(values, reverse=reverse)[k - 1]


def _group_key(fam: Family) -> tuple:
    """Families whose costliest station is the same object: one task, so it is solved once
    (:meth:`qmodel.topology.Topology.family_group_key`: a disaggregated family's prefill station is
    shared by every decode pool and link behind it; a single-pool family shares nothing)."""
    return fam.shape.family_group_key(fam)


def min_cost_group(ev: Evaluator, fams: list[tuple[float, Family]], space: SearchSpace, rate: float,
                   weight: dict[str, float], budget: Budget, price: dict, tdp: dict, cost_cap: float,
                   k: int) -> list[FamilyOutcome]:
    """:func:`min_cost_family` over a group in order of cost bound, tightening the cap as plans are found."""
    outs: list[FamilyOutcome] = []
    costs: list[float] = []
    for bound, fam in fams:
        local = _kth(costs, k, reverse=False)
        cap = cost_cap if local is None else min(cost_cap, local)
        if bound > cap:
            o = FamilyOutcome(fam)
            o.pruned["cost bound (cannot enter the top K)"] += space.grid_size(fam)
            outs.append(o)
            continue
        o = min_cost_family(ev, fam, space, rate, weight, budget, price, tdp, cap)
        costs.extend(f.cost for f in o.found)
        outs.append(o)
    return outs


def max_goodput_group(ev: Evaluator, fams: list[tuple[float, Family]], space: SearchSpace, budget: Budget,
                      price: dict, tdp: dict, threshold: float, k: int) -> list[FamilyOutcome]:
    """:func:`max_goodput_family` over a group in order of estimated capacity, raising the threshold as it goes."""
    outs: list[FamilyOutcome] = []
    goods: list[float] = []
    for bound, fam in fams:
        thr = max(threshold, prune_threshold(goods, k) or 0.0)
        if bound <= thr:
            o = FamilyOutcome(fam)
            o.pruned["stability limit below the K-th best goodput"] += space.grid_size(fam)
            outs.append(o)
            continue
        o = max_goodput_family(ev, fam, space, budget, price, tdp, thr, k)
        goods.extend(f.goodput or 0.0 for f in o.found)
        outs.append(o)
    return outs


def _search(ctx: _Ctx, families: list[Family], executor: Executor, wave: int, prog: Progress,
            pruned: Counter) -> tuple[list[Found], int]:
    found: list[Found] = []
    solves = 0
    minimize = ctx.objective != "max-goodput"
    # In one process stations are shared anyway, and family-by-family order tightens the bound
    # fastest; across processes, grouping by the costly station avoids solving it in every worker.
    grouped = not isinstance(executor, SerialExecutor)
    groups: dict[tuple, list[tuple[float, Family]]] = {}
    for i, f in enumerate(families):
        groups.setdefault(_group_key(f) if grouped else (i,), []).append((_bound(ctx, f), f))
    order = []
    for key, items in groups.items():
        items.sort(key=lambda t: (t[0] if minimize else -t[0], t[1].label))
        order.append((items[0][0], key, items))
    order.sort(key=lambda t: (t[0] if minimize else -t[0], str(t[1])))
    done = 0
    pos = 0
    total = len(families)
    while pos < len(order):
        if minimize:
            cap = _kth([f.cost for f in found], ctx.top_k, reverse=False)
            cap = math.inf if cap is None else cap
        else:
            thr = prune_threshold([f.goodput or 0.0 for f in found], ctx.top_k) or 0.0
        batch = []
        while pos < len(order) and len(batch) < wave:
            best, _, items = order[pos]
            pos += 1
            if (minimize and best > cap) or (not minimize and best <= thr):
                reason = "cost bound (cannot enter the top K)" if minimize else "stability limit below the K-th best goodput"
                pruned[reason] += sum(ctx.space.grid_size(f) for _, f in items)
                done += len(items)
                continue
            batch.append(items)
        if not batch:
            prog.update(done, total, "configurations")
            continue
        if minimize:
            args = [(ctx.ev, items, ctx.space, ctx.rate, ctx.weight, ctx.budget, ctx.price, ctx.tdp, cap, ctx.top_k)
                    for items in batch]
            results = run_tasks(executor, min_cost_group, args)
        else:
            args = [(ctx.ev, items, ctx.space, ctx.budget, ctx.price, ctx.tdp, thr, ctx.top_k) for items in batch]
            results = run_tasks(executor, max_goodput_group, args)
        for outs in results:
            for o in outs:
                found.extend(o.found)
                pruned.update(o.pruned)
                solves += o.solves
        done += sum(len(items) for items in batch)
        prog.update(done, total, "configurations")
    return found, solves


def plan(scenario: Scenario | str | Path, objective: Objective = "min-gpus", *, target_rate_per_s: float | None = None,
         space: SearchSpace | None = None, gpus: Iterable[str] | None = None, prefill_gpus: Iterable[str] | None = None,
         decode_gpus: Iterable[str] | None = None, links: Iterable[str] | None = None, tps: Iterable[int] | None = None,
         topologies: Iterable[str] | None = None, transfer_modes: Iterable[str] | None = None,
         chunk_tokens: Iterable[int] | None = None, max_instances: int | None = None, max_gpus: int | None = None,
         budget: Budget | dict | None = None, top_k: int = 10, check: int = 0, check_requests: int = 5000,
         seed: int = 0, executor: Executor | str | None = None, workers: int | None = None, progress: bool = False,
         evaluator: Evaluator | None = None, knee: bool = True, serving_config: bool = True) -> PlanResult:
    """Search deployments of ``scenario``'s model and workload for ``objective`` (see the module doc).

    ``scenario`` supplies the model, workload, SLO and perf model, and the batch limits, dispatch
    and KV fraction kept in every plan; its own deployment only sets the default GPU and link.
    """
    t0 = time.perf_counter()
    from qmodel.source import as_scenario

    scenario = as_scenario(scenario)
    if objective not in OBJECTIVES:
        raise InputError("objective", objective, "one of " + ", ".join(OBJECTIVES))
    if not (isinstance(top_k, int) and top_k >= 1):
        raise InputError("top_k", top_k, "a positive integer")
    if isinstance(budget, dict):
        budget = Budget(**budget)
    budget = budget or Budget()
    rate = target_rate_per_s
    if rate is None and objective != "max-goodput":
        rate = scenario.rate_per_s
        if rate is None:
            raise InputError("--target-rate", None, f"{objective} needs a target rate (or a rate in the scenario)")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise InputError("--target-rate", rate, "a positive number of requests per second")
    if objective == "max-goodput" and budget.gpus is None and budget.power_w is None and budget.cost_per_hour is None:
        budget = Budget(gpus=max_gpus or (space.max_gpus if space else SearchSpace().max_gpus))
    default_gpu, default_link = _scenario_defaults(scenario)
    sp = _default_space(scenario, space, gpus=gpus, prefill_gpus=prefill_gpus, decode_gpus=decode_gpus, links=links,
                        tps=tps, topologies=topologies, transfer_modes=transfer_modes, chunk_tokens=chunk_tokens,
                        max_instances=max_instances, max_gpus=max_gpus)
    all_gpus = set(sp.gpus or (default_gpu,)) | set(sp.prefill_gpus) | set(sp.decode_gpus)
    price, tdp = _catalog_tables(sorted(all_gpus), scenario.prices)
    from qmodel.registry import load_catalog

    for ln in sp.links or (default_link,):
        load_catalog().link(ln)
    notes: list[str] = []
    if scenario.workload.arrivals.kind == "closed":
        # the planner ranks open-loop goodputs; say so rather than answer another question silently
        notes.append("closed-loop arrivals: plans are ranked by open-loop (Poisson) goodput in req/s; "
                     "qmodel goodput and qmodel compare give a closed loop's goodput (most clients meeting the goal)")
    unpriced = sorted(g for g, p in price.items() if p is None)
    if unpriced and (objective == "min-cost" or budget.cost_per_hour is not None):
        # Leaving them out would answer another question than the one asked; say which GPUs need a price.
        what = "min-cost" if objective == "min-cost" else "a $/h budget"
        raise InputError("prices", ",".join(unpriced),
                         f"an hourly price for every GPU {what} searches: the catalog has none for these; add "
                         f"'prices: {{{unpriced[0]}: USD per GPU-hour}}' to the scenario or leave them out of --gpus")
    if objective == "min-cost":
        weight = {g: float(p) for g, p in price.items() if p is not None}
    else:
        weight = {g: 1.0 for g in price}
    ev = warm(evaluator or EngineEvaluator(scenario))
    ctx = _Ctx(ev, sp, objective, rate, budget, price, tdp, weight, top_k)

    # 1. pools: TP rule, memory, idle SLO (each (role, gpu, tp) once)
    families = list(sp.families(default_gpu, default_link))
    pruned: Counter = Counter()
    candidates = sum(sp.grid_size(f) for f in families)
    keep: list[Family] = []
    issues: dict[str, str] = {}
    for fam in families:
        bad = None
        for role, g, tp in _roles(fam):
            why = ev.pool_issue(role, g, tp)
            if why:
                bad = why
                issues.setdefault(f"{role} {g} TP{tp}", why)
                break
        if bad:
            pruned["pool cannot run, or misses the SLO even when idle"] += sp.grid_size(fam)
        else:
            keep.append(fam)
    notes += [f"{k}: {v}" for k, v in sorted(issues.items())][:12]

    # 2. the search, in waves so each wave sees the K-th best so far
    ex, ex_name, owned = make_executor(executor, workers, len(keep))
    nworkers = getattr(ex, "_max_workers", None) or workers or (os.cpu_count() or 1)
    wave = 1 if isinstance(ex, SerialExecutor) else max(4, 2 * int(nworkers))
    prog = Progress(progress, label="plan")
    try:
        t1 = time.perf_counter()
        found, solves = _search(ctx, keep, ex, wave, prog, pruned)
        t2 = time.perf_counter()
        rows, extra_solves = _rank(ctx, found, ex, knee, notes)
        t3 = time.perf_counter()
    finally:
        prog.close()
        if owned:
            ex.shutdown(wait=True)
    solves += extra_solves
    result = PlanResult(
        scenario=scenario.name, model=scenario.model, objective=objective, target_rate_per_s=rate,
        budget=budget.as_dict(), attainment_goal=scenario.slo.attainment_goal, plans=rows,
        stats=SearchStats(candidates=candidates, families=len(families), pruned=dict(pruned), solves=solves,
                          feasible=len(found), seconds=time.perf_counter() - t0, search_seconds=t2 - t1,
                          rank_seconds=t3 - t2, executor=ex_name),
        notes=notes + ([] if rows else ["no plan in the search space meets the SLO" +
                                        (f" at {rate:.4g} req/s" if rate else "")]),
    )
    updates: dict[str, Any] = {}
    if serving_config and rows:
        from qmodel.planner.export import serving_config as make_config

        updates["serving_config"] = make_config(scenario, rows[0])
    if check and rows:
        from qmodel.planner.check import check_plans

        updates["check"] = check_plans(scenario, rows[:check], n_requests=check_requests, seed=seed, evaluator=ev)
    if updates:
        result = result.model_copy(update=updates)
    return result


def _token_prices(cost: float | None, goodput_rps: float, mean_in: float, mean_out: float) -> dict[str, float]:
    from qmodel.cost import token_prices

    tok = token_prices(cost, goodput_rps, mean_in, mean_out)
    return tok.model_dump() if tok else {}


def _rank(ctx: _Ctx, found: list[Found], ex: Executor, with_knee: bool,
          notes: list[str]) -> tuple[list[PlanRow], int]:
    """The top K plans as rows (the order: :mod:`qmodel.planner.rank`)."""
    rows, solves = rank_found(ctx.ev, ctx.objective, found, ctx.top_k, ctx.rate, ex, with_knee, notes)
    mean_out = ctx.ev.mean_output_tokens()
    mean_in = ctx.ev.mean_prompt_tokens()
    flags = pareto_flags((g / f.plan.gpus, m.ttft_p90_s, m.tpot_p90_s) for f, g, m, _ in rows)
    out: list[PlanRow] = []
    for i, ((f, g, m, knee), par) in enumerate(zip(rows, flags), start=1):
        p = f.plan
        cost = cost_of(p, ctx.price)
        fam = p.family
        knee_v = knee if math.isfinite(knee) else None
        path_bw = None
        if fam.shape.has_link:
            from qmodel.build import resolve_link
            from qmodel.planner.evaluate import deployment_for

            path_bw = resolve_link(deployment_for(ctx.ev.scenario, p))[1]
        out.append(PlanRow(
            rank=i, topology=p.topology, label=p.label,
            prefill=None if p.prefill is None else PoolOut(gpu=p.prefill.gpu, tp=p.prefill.tp, instances=p.prefill.instances,
                                                          gpus=p.prefill.gpus),
            decode=PoolOut(gpu=p.decode.gpu, tp=p.decode.tp, instances=p.decode.instances, gpus=p.decode.gpus),
            link=fam.link, link_path_bandwidth_bytes_per_s=path_bw, transfer_mode=fam.transfer_mode,
            chunk_tokens=fam.chunk_tokens, gpus=p.gpus, power_w=power_of(p, ctx.tdp), cost_per_hour=cost,
            goodput_rps=g, goodput_per_gpu=g / p.gpus,
            goodput_per_usd_hour=None if not cost else g / cost,
            **_token_prices(cost, g, mean_in, mean_out),
            rate_per_s=m.rate_per_s, attainment=m.attainment, ttft_p90_s=m.ttft_p90_s, tpot_p90_s=m.tpot_p90_s,
            max_stable_rate_per_s=f.capacity, knee_rps=knee_v,
            headroom_to_knee=None if knee_v is None else knee_v / m.rate_per_s - 1.0,
            binding=m.binding, validity=m.validity, pareto=par,
        ))
    return out, solves
