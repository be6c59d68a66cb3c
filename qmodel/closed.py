"""Closed-loop workloads: N clients, each sending its next request when its last one has finished.

A benchmark run with ``--max-concurrency N`` (vLLM's ``bench serve``, concurrency sweeps) is a
closed queueing network: N clients cycle between a think state (mean Z seconds) and the serving
deployment. Its throughput X(N) is an output, not an input. qmodel solves it with the open
solver's stations through a mean-value fixed point (docs/methods.md, "Closed-loop workloads"):

* **Throughput.** By the arrival theorem of closed product-form networks, a request arriving at
  the deployment sees it as it is with the other N - 1 clients: an open deployment carrying the
  rate X (N - 1)/N. With T(lambda) the open solver's mean end-to-end latency at rate lambda,
  T = E[TTFT] + E[L - 1] E[TPOT] (L the output tokens; TPOT is (last - first token)/(L - 1)),
  and Little's law over the clients' cycle,

      X = N / (T(X (N - 1)/N) + Z).

  lambda (T(lambda (N - 1)/N) + Z) rises with lambda, so X is its root in (0, lambda_max),
  found by bracketing (Brent). The two exact limits hold by construction: N = 1 sees an empty
  deployment, X = 1/(T(0) + Z); and for a single exponential server with Z = 0 the root is
  X = mu, the always-busy server's rate, for every N. Where the root would lie at or beyond the
  stability limit (the open chain's queue is more variable than a closed loop's, which never
  holds more than N requests), X = lambda_max: the deployment is saturated.
* **Latencies.** TTFT, TPOT, their percentiles and the SLO attainment are the open solve's at the
  rate whose mean latency is Little's N/X - Z: the rate X (N - 1)/N itself below saturation,
  and at saturation the rate found by bisection for it. The arrivals' SCV there is Poisson's
  (:func:`qmodel.workload.arrival_stats`): a closed loop's arrivals are smoother than Poisson,
  and docs/validation.md ("Closed-loop workloads") gives the measured effect against the replay.
  The validity band (:mod:`qmodel.validity`) is read at the loop's load X(N) / lambda_max, the
  load its closed cases are fitted at (docs/validation.md, "Validity band").
* **The loop's bound on the queue ahead.** The open chain at the seen rate lets an arrival find
  any number of requests ahead of it; a loop's arrival finds at most the N - 1 others. The
  latencies' solve (not the fixed point: X is unchanged) reads the stations' slot-occupancy chains
  on those states only (:func:`bounded_solver`): where N - 1 is below a pool's slot cap the loop
  never waits for a slot, and above it at most N - 1 - cap queue ahead (the truncated count,
  renormalised: :func:`qmodel.stations.decode.bounded_slot_wait`). N = 1 sees the empty
  deployment either way.
* **Goodput.** The SLO attainment of N clients is the open attainment A at their seen rate
  lambda_N (or above it: the bound on the queue ahead only lightens the laws, and the search
  below settles N* on the loops themselves), and lambda_N rises with N, so the largest concurrency meeting the goal is the largest
  N with lambda_N <= lambda*, the open goodput (A(lambda*) >= goal, A(lambda) < goal just above
  it). Below saturation lambda_N is the root of lambda (T(lambda) + Z) = N - 1 (the fixed point
  above with x (N - 1)/N = lambda), an increasing function, so

      N* = floor(lambda* (T(lambda*) + Z)) + 1,

  one mean-latency evaluation, no search over N; the closed goodput is X(N*), the throughput
  of N* clients (:func:`closed_goodput`). X(N*) > lambda*: a closed loop's own request is never
  queued behind itself, so N* clients complete more than the open goodput's rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.result import ClosedLoop, Result
from qmodel.scenario import ClosedArrivals, Scenario
from qmodel.solver import LIGHT_LOAD, Solver

__all__ = ["ClosedSolution", "bounded_solver", "closed_arrivals", "closed_goodput", "max_concurrency", "mean_latency",
           "parse_concurrency", "solve_closed", "with_concurrency"]

#: relative tolerance of the throughput root (far below any model error; a few open solves more)
_XTOL = 1e-5


@dataclass(frozen=True)
class ClosedSolution:
    """The closed loop's answer: ``loop`` (throughput and the rate its latencies are read at) and the
    open solve at that rate (``result``: TTFT/TPOT summaries, attainment, stations)."""

    loop: ClosedLoop
    result: Result


def closed_arrivals(scenario: Scenario) -> ClosedArrivals:
    """The scenario's closed-loop arrivals; an InputError for an open arrival kind."""
    a = scenario.workload.arrivals
    if not isinstance(a, ClosedArrivals):
        raise InputError("workload.arrivals.kind", a.kind, "closed (a concurrency) for a closed-loop solve")
    return a


def parse_concurrency(value: object, field: str = "concurrency") -> int:
    """A number of clients: a whole number from 1 to 1,000,000 ('64', or an int); else one InputError."""
    text = str(value).strip().replace("_", "")
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise InputError(field, value, "a whole number of clients from 1 to 1000000")
    return int(text)


def with_concurrency(scenario: Scenario, concurrency: int, think_time_s: float | None = None) -> Scenario:
    """The scenario as a closed loop of ``concurrency`` clients (think time: ``think_time_s``, else the
    scenario's own when it is closed already, else 0). Validated like a scenario file's field."""
    from pydantic import ValidationError

    a = scenario.workload.arrivals
    old = a if isinstance(a, ClosedArrivals) else None
    z = think_time_s if think_time_s is not None else (old.think_time_s if old else 0.0)
    dist = old.think_time_dist if old else "exponential"
    try:
        arr = ClosedArrivals(concurrency=concurrency, think_time_s=z, think_time_dist=dist)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "concurrency"
        value = concurrency if field == "concurrency" else z
        raise InputError(f"workload.arrivals.{field}", value, err["msg"].lower()) from None
    return scenario.model_copy(update={"workload": scenario.workload.model_copy(update={"arrivals": arr})})


def mean_latency(solver: Solver, rate: float) -> float:
    """T(rate): the open solve's mean end-to-end latency, E[TTFT] + E[L - 1] E[TPOT] (seconds)."""
    c = solver.compose(rate)
    return c.ttft.mean_s + max(solver.resolved.mean_output_tokens - 1.0, 0.0) * c.tpot.mean_s


def _latency_or_inf(solver: Solver, rate: float) -> float:
    """:func:`mean_latency`, +inf where the open chain cannot be solved (at or near saturation)."""
    try:
        return mean_latency(solver, rate)
    except (UnstableError, NumericalError):
        return math.inf


def _root(f, lo: float, hi: float) -> float:
    """The crossing of an increasing ``f`` (f(lo) < 0 <= f(hi)) by bisection: ``f`` is a solver's
    output on grids, monotone but not smooth, so plain halving (about 24 steps) is the robust choice."""
    while hi - lo > _XTOL * hi:
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def bounded_solver(solver: Solver, clients: int, thinks: bool = True) -> Solver:
    """A solver of the same scenario whose stations read their slot chains as a loop of ``clients``
    clients does (module doc; ``thinks``: Z > 0): the stations with a ``clients`` field get it; the
    others (a disaggregated deployment's prefill pool and link) are shared as they are."""
    stations = {}
    for role in solver.topology.roles:
        st = solver.station(role)
        stations[role] = (st.evolved({"clients": clients, "loop_thinks": thinks}) if hasattr(st, "clients") else st)
    return Solver(solver.scenario, resolved=solver.resolved, stations=stations)


def solve_closed(scenario: Scenario, solver: Solver | None = None) -> ClosedSolution:
    """Throughput X(N) and latencies of the scenario's closed loop (see the module doc)."""
    arr = closed_arrivals(scenario)
    solver = Solver(scenario) if solver is None else solver
    n, z = arr.concurrency, arr.think_time_s
    lam_max = solver.max_stable_rate()[0]
    floor = LIGHT_LOAD * lam_max
    share = (n - 1) / n

    def seen(x: float) -> float:
        return max(x * share, floor)

    def excess(x: float) -> float:
        return x * (_latency_or_inf(solver, seen(x)) + z) - n

    saturated = excess(lam_max) < 0
    if n == 1:
        x = 1.0 / (mean_latency(solver, floor) + z)  # the empty deployment: exact, no search
        saturated = False
    elif saturated:
        x = lam_max
    else:
        x = _root(excess, 0.0, lam_max)
    target = n / x - z  # Little over the clients' cycle: the mean latency the loop must show
    if saturated:
        rate = _root(lambda lam: _latency_or_inf(solver, lam) - target, floor, lam_max)
    else:
        rate = seen(x)
    res = bounded_solver(solver, n, z > 0).solve(rate)
    res = res.model_copy(update={"validity": solver.validity(x)})  # the loop's load is X(N) / lambda_max
    loop = ClosedLoop(concurrency=n, think_time_s=z, think_time_dist=arr.think_time_dist, throughput_per_s=x,
                      seen_rate_per_s=rate, mean_latency_s=mean_latency(solver, rate), saturated=saturated,
                      max_stable_rate_per_s=lam_max)
    return ClosedSolution(loop, res)


def max_concurrency(solver: Solver, open_goodput_rps: float, think_time_s: float) -> int:
    """N*: the most clients whose seen rate stays at or below the open goodput (module doc); 0 when
    even one client, which sees the empty deployment, misses the goal (``open_goodput_rps`` is 0)."""
    if not open_goodput_rps > 0:
        return 0
    lam = max(open_goodput_rps, LIGHT_LOAD * solver.max_stable_rate()[0])
    return int(math.floor(lam * (mean_latency(solver, lam) + think_time_s) + 1e-9)) + 1


def closed_goodput(scenario: Scenario, solver: Solver, open_goodput_rps: float) -> ClosedSolution | None:
    """The scenario's closed loop at the most clients (its think time kept) whose attainment meets
    the goal; its ``loop.throughput_per_s`` is the closed goodput. None when one client misses.

    :func:`max_concurrency` places N* from the open goodput, which the open search knows only to
    its rate tolerance; with hundreds of clients a step of one client moves the seen rate by less,
    so N* is then settled on the loops themselves: up by doubling steps while N* + step still
    meets the goal, then by bisection (attainment falls as N grows), or down while N* misses."""
    arr = closed_arrivals(scenario)
    goal = scenario.slo.attainment_goal
    cache: dict[int, ClosedSolution] = {}

    def at(n: int) -> ClosedSolution:
        if n not in cache:
            cache[n] = solve_closed(with_concurrency(scenario, n), solver)
        return cache[n]

    def meets(n: int) -> bool:
        return at(n).result.attainment >= goal

    n = max_concurrency(solver, open_goodput_rps, arr.think_time_s)
    if n < 1:
        return None
    while not meets(n):
        if n == 1:
            return None
        n -= 1
    step, lo, hi = 1, n, n + 1
    while meets(hi) and not at(hi).loop.saturated:
        lo, step = hi, 2 * step
        hi = n + step
    while hi - lo > 1:  # meets(lo), not meets(hi) (or hi saturated)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if meets(mid) and not at(mid).loop.saturated else (lo, mid)
    return at(lo)
