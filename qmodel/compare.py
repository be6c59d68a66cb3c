"""Colocated vs chunked prefill vs disaggregated on the same GPUs (``qmodel compare``).

For the scenario's GPUs laid out as each topology (:func:`qmodel.layouts.iso_gpu_layouts`: n
instances of the scenario's pool shape as colocated, as chunked, and every disaggregated P:D split
with P, D >= 1 over the scenario's link as stated, keeping the best split by goodput; so a
disaggregated scenario of one GPU type and shape is one of the splits compared, evaluated as
``qmodel goodput`` evaluates it), qmodel and reports goodput, goodput per GPU, the knee and the largest stable rate of each.

A closed-loop scenario's goodput is read as ``qmodel goodput`` reads it: the throughput of the most
clients meeting the goal (:func:`qmodel.closed.closed_goodput`), their number in the layout.

The knee is the rate at which the binding percentile (TTFT or TPOT at the SLO percentile) reaches
twice its near-idle value: past it, queueing dominates service and latency climbs steeply.

Every topology gets a row: one that cannot be evaluated (an input a station refuses, a chain that
cannot be solved) is reported with zero goodput and the reason in ``reason``, never dropped.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from qmodel.errors import NumericalError, QmodelError, UnstableError
from qmodel.progress import ProgressFn
from qmodel.scenario import Scenario

__all__ = ["Candidate", "Comparison", "compare_topologies", "knee_rate"]

class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)
    topology: str
    layout: str
    goodput_rps: float
    goodput_per_gpu: float
    knee_rps: float
    max_stable_rate_per_s: float
    binding: str
    gpus: int
    #: why this topology could not be evaluated (its figures are then zero); None when it was
    reason: str | None = None
    #: GPU price x GPUs at the scenario's prices (qmodel.cost); None if a GPU has no price
    cost_per_hour_usd: float | None = None
    usd_per_million_input_tokens: float | None = None
    usd_per_million_output_tokens: float | None = None
    usd_per_million_tokens: float | None = None


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)
    scenario: str
    gpu: str
    tp: int
    gpus: int
    candidates: list[Candidate]
    best: str
    verdict: str


#: the knee search's highest probe, as a fraction of the stability limit: strictly inside it, where
#: every chain solves (the planner's knee uses the same top); a knee above it is reported as it
KNEE_TOP = 0.99


def knee_rate(solver, lam_max: float) -> float:
    """Rate where the binding percentile reaches twice its near-idle value (bisection, 1% precision).

    The bracket is [λmax·1e-3, λmax·KNEE_TOP]: a rate a chain cannot truncate (NumericalError, only
    near saturation) counts as past the knee, like an unstable one: latency there is unbounded."""
    slo = solver.scenario.slo
    q = slo.percentile / 100.0
    idle = solver.compose(lam_max * 1e-3)

    def level(c) -> float:
        return max(c.ttft.quantile(q) / slo.ttft_s, c.tpot.quantile(q) / slo.tpot_s)

    base = level(idle)
    lo, hi = lam_max * 1e-3, lam_max * KNEE_TOP
    try:
        if level(solver.compose(hi)) < 2 * base:
            return hi
    except (UnstableError, NumericalError):
        pass
    while hi - lo > 0.01 * hi:
        mid = 0.5 * (lo + hi)
        try:
            ok = level(solver.compose(mid)) < 2 * base
        except (UnstableError, NumericalError):
            ok = False
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def _evaluate(sc: Scenario, topology: str, layout: str) -> Candidate:
    from qmodel.solver import Solver
    from qmodel.binding import binding_at
    from qmodel.goodput import goodput_search

    solver = Solver(sc)
    lam_max, station = solver.max_stable_rate()
    g, _ = goodput_search(solver.attainment, lam_max, sc.slo.attainment_goal)
    seen = g
    if sc.workload.arrivals.kind == "closed":  # goodput as qmodel goodput reads a closed loop
        from qmodel.closed import closed_goodput

        sol = closed_goodput(sc, solver, g)
        g, seen = (0.0, g) if sol is None else (sol.loop.throughput_per_s, sol.loop.seen_rate_per_s)
        layout += "" if sol is None else f", {sol.loop.concurrency} clients"
    from qmodel.cost import token_prices

    r = solver.resolved
    gpus, cost = r.gpus, r.cost_per_hour_usd
    tok = token_prices(cost, g, r.mean_prompt_tokens, r.mean_output_tokens)
    return Candidate(topology=topology, layout=layout, goodput_rps=g, goodput_per_gpu=g / gpus,
                     knee_rps=knee_rate(solver, lam_max), max_stable_rate_per_s=lam_max,
                     binding=binding_at(solver, seen, station), gpus=gpus, cost_per_hour_usd=cost,
                     **(tok.model_dump() if tok else {}))


def _row(sc: Scenario, topology: str, layout: str) -> Candidate:
    """:func:`_evaluate`, or a zero row naming why the topology could not be evaluated."""
    try:
        return _evaluate(sc, topology, layout)
    except QmodelError as err:
        return _not_evaluated(topology, layout, str(err))


def _not_evaluated(topology: str, layout: str, reason: str) -> Candidate:
    return Candidate(topology=topology, layout=layout, goodput_rps=0.0, goodput_per_gpu=0.0, knee_rps=0.0,
                     max_stable_rate_per_s=0.0, binding=f"not evaluated: {reason}", gpus=0, reason=reason)


def compare_topologies(scenario: Scenario | str | Path, progress: ProgressFn | None = None) -> Comparison:
    """The three topologies on the scenario's GPUs (a Scenario or the path of a scenario file);
    ``progress(done, total, what)`` after each layout's goodput search."""
    from qmodel.source import as_scenario

    scenario = as_scenario(scenario)
    from qmodel.layouts import iso_gpu_layouts

    lay = iso_gpu_layouts(scenario)
    n_inst, tp = lay.instances, lay.tp
    total = 2 + max(n_inst - 1, 0)
    tick = progress or (lambda done, total, what: None)
    cands: list[Candidate] = []
    cands.append(_row(lay.colocated(), "colocated", f"{n_inst} x TP{tp}"))
    tick(1, total, "layouts")
    cands.append(_row(lay.chunked(), "chunked", f"{n_inst} x TP{tp}, {lay.chunk_tokens}-token chunks"))
    tick(2, total, "layouts")
    best_dis: Candidate | None = None
    failed: list[str] = []
    for p in range(1, n_inst):
        c = _row(lay.disaggregated(p), "disaggregated", f"P:D = {p}:{n_inst - p} (TP{tp})")
        tick(2 + p, total, "layouts")
        if c.reason is not None:
            failed.append(f"P:D = {p}:{n_inst - p}: {c.reason}")
        elif best_dis is None or c.goodput_rps > best_dis.goodput_rps:
            best_dis = c
    if best_dis is None:
        why = "; ".join(failed) if failed else "needs at least two instances (one prefill, one decode)"
        best_dis = _not_evaluated("disaggregated", "-", why)
    cands.append(best_dis)
    best = max(cands, key=lambda c: c.goodput_rps)
    return Comparison(scenario=scenario.name, gpu=lay.gpu, tp=tp, gpus=lay.gpus, candidates=cands,
                      best=best.topology, verdict=_verdict(cands, best, n_inst))


def _verdict(cands: list[Candidate], best: Candidate, n_inst: int) -> str:
    if n_inst < 2:
        return f"{best.topology} wins; disaggregation needs at least two instances"
    if best.goodput_rps <= 0:
        return "no topology meets the SLO on these GPUs at any rate"
    others = sorted((c for c in cands if c is not best), key=lambda c: -c.goodput_rps)
    second = others[0] if others else None
    gain = f" ({best.goodput_rps / second.goodput_rps:.2f}x {second.topology})" if second and second.goodput_rps > 0 else ""
    return f"{best.topology} ({best.layout}) gives the most goodput: {best.goodput_rps:.4g} req/s{gain}"
