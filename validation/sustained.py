"""The replay's sustained rate: the largest Poisson rate at which the replay keeps up.

The analytic stability limit (:meth:`qmodel.solver.Solver.max_stable_rate`) is checked against
this number (docs/validation.md, "Sustained rate"). Definitions:

* a **probe** at rate r replays the scenario with Poisson arrivals at r (lengths and the arrival
  stream from ``seed``; the gaps at every r are the same unit exponentials scaled by 1/r, common
  random numbers), ``n_requests`` requests, the first 10% of the time span as warm-up;
* a probe is **stable** when (a) completions inside the measurement window are at least
  ``1 - COMPLETION_SLACK`` of the arrivals in it and (b) the mean sojourn (arrival to last token)
  of the last third of the measured arrivals exceeds the middle third's by at most ``GROWTH_SE``
  batch-means standard errors plus ``GROWTH_FLOOR`` of the middle mean (an unstable replay's
  backlog, hence its sojourns, grow linearly);
* the **sustained rate** is the replay's completion rate in the window of a probe at an overload
  rate (fewer than ``SATURATED`` of the window's arrivals complete in it, so the backlog never
  empties): every engine here is work-conserving and at its most efficient when saturated (full
  batches, the slot/KV cap reached), so its saturated throughput is its capacity, the supremum of
  the stable rates. One replay, no bisection.

Why not bisection on the criterion: near the limit a probe's sojourns are tens of seconds (decode
lives stretch with the batch), so a few thousand requests are a few sojourns and the start-up
transient (the batch filling from empty) reads as a backlog: on llama3-8b-chunked-h100 at an
8192 budget, bisection with 5,000 requests gave 10.9 req/s while 50,000-request probes are
stable at 12.2; the saturated throughput is 12.11 at 20,000 requests at 1.5, 2 and 3x overload
alike (spread 0.02%). Resolution: the window's completions are the first-arrived requests, so the
estimate carries their length-sample error, about CV/sqrt(completions): 5,000 requests give ~3%,
20,000 ~1% (the default). The criterion is kept for tests that check the answer from both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qmodel.errors import InputError
from qmodel.scenario import PoissonArrivals, Scenario

__all__ = ["COMPLETION_SLACK", "GROWTH_SE", "GROWTH_FLOOR", "GROWTH_BATCHES", "Probe", "SustainedRate",
           "poisson_at", "probe", "sustained_rate"]

#: (a): completions in the window may fall short of arrivals by this fraction (the end-of-window backlog)
COMPLETION_SLACK = 0.01
#: (b): standard errors of growth allowed between the middle and last thirds' mean sojourns
GROWTH_SE = 3.0
#: (b): plus this fraction of the middle third's mean sojourn (a floor for near-deterministic runs)
GROWTH_FLOOR = 0.02
GROWTH_BATCHES = 10
WARMUP_FRACTION = 0.1
#: the overload probe is saturated when fewer than this fraction of its window's arrivals complete in it
SATURATED = 0.9
#: first overload rate, as a multiple of the guess
OVERLOAD = 1.5


@dataclass(frozen=True)
class Probe:
    """One replay at ``rate_per_s``: the two statistics of the criterion and the verdict."""

    rate_per_s: float
    stable: bool
    completion_ratio: float
    growth_s: float
    growth_allowed_s: float
    throughput_rps: float


@dataclass(frozen=True)
class SustainedRate:
    """The sustained rate (``rate_per_s``) and the probes that found it."""

    rate_per_s: float
    overload_rate_per_s: float
    n_requests: int
    seed: int
    probes: tuple[Probe, ...] = field(default=())


def poisson_at(scenario: Scenario, rate_per_s: float) -> Scenario:
    """``scenario`` with Poisson arrivals at ``rate_per_s`` (lengths, deployment, perf unchanged)."""
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise InputError("rate_per_s", rate_per_s, "a positive finite arrival rate")
    wl = scenario.workload.model_copy(update={"arrivals": PoissonArrivals(rate_per_s=float(rate_per_s))})
    return scenario.model_copy(update={"workload": wl})


def _batch_se(x: np.ndarray, batches: int) -> float:
    m = len(x) // batches
    if m < 2:
        return math.inf
    means = x[: m * batches].reshape(batches, m).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(batches))


def probe(scenario: Scenario, rate_per_s: float, n_requests: int = 5000, seed: int = 0) -> Probe:
    """Replay ``scenario`` at Poisson ``rate_per_s`` and judge it by the module's criterion."""
    from qmodel.validation.replay import replay_requests

    res, req = replay_requests(poisson_at(scenario, rate_per_s), n_requests=n_requests, seed=seed,
                               warmup_fraction=WARMUP_FRACTION)
    arrival = np.asarray(req.arrival)
    last = np.asarray(req.t_last)
    kept = ~np.asarray(req.dropped)
    w0 = arrival[0] + WARMUP_FRACTION * (arrival[-1] - arrival[0])
    w1 = arrival[-1]
    arrived = int((kept & (arrival >= w0)).sum())
    done = int((kept & np.isfinite(last) & (last >= w0) & (last <= w1)).sum())
    ratio = done / arrived if arrived else 1.0
    sel = kept & (arrival >= w0) & np.isfinite(last)
    soj = (last - arrival)[sel]  # arrival order (the trace is sorted)
    third = len(soj) // 3
    mid, tail = soj[third: 2 * third], soj[2 * third: 3 * third]
    if third < 2 * GROWTH_BATCHES:
        raise InputError("n_requests", n_requests, f"at least {60 * GROWTH_BATCHES} measured requests per probe")
    growth = float(tail.mean() - mid.mean())
    se = math.hypot(_batch_se(mid, GROWTH_BATCHES), _batch_se(tail, GROWTH_BATCHES))
    allowed = GROWTH_SE * se + GROWTH_FLOOR * float(mid.mean())
    stable = ratio >= 1.0 - COMPLETION_SLACK and growth <= allowed
    return Probe(rate_per_s=float(rate_per_s), stable=bool(stable), completion_ratio=float(ratio),
                 growth_s=growth, growth_allowed_s=float(allowed), throughput_rps=float(res.throughput_rps))


def sustained_rate(scenario: Scenario, n_requests: int = 20000, seed: int = 0,
                   guess_per_s: float | None = None, overload: float = OVERLOAD) -> SustainedRate:
    """The replay's sustained rate (module doc): its completion rate at an overload rate.

    The overload rate starts at ``overload`` x ``guess_per_s`` (e.g. the analytic limit; 1 req/s
    without one) and doubles until the probe's completions fall below ``SATURATED`` of its
    arrivals, so the backlog never empties in the window.
    Deterministic for given inputs, ``n_requests`` and ``seed``.
    """
    probes: list[Probe] = []
    r = float(guess_per_s) * overload if guess_per_s else 1.0
    for _ in range(40):
        p = probe(scenario, r, n_requests, seed)
        probes.append(p)
        if p.completion_ratio < SATURATED:
            return SustainedRate(rate_per_s=p.throughput_rps, overload_rate_per_s=r, n_requests=n_requests,
                                 seed=seed, probes=tuple(probes))
        r *= 2.0
    raise InputError("guess_per_s", guess_per_s, "a rate within 2^40 of the replay's capacity")
