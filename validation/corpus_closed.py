"""Closed-loop cases of the generated corpus: N clients placed so that the loop's load lands in a band.

A corpus case with ``arrivals: closed`` (issue 18 §3) is the drawn open scenario turned into a loop
of N clients with think time Z (:func:`qmodel.closed.with_concurrency`, exponential think times).
Its throughput X(N) is an output, so the load is defined on it:

    u = X(N) / lambda_max,

the analytic closed-loop throughput (:func:`qmodel.closed.solve_closed`) over the analytic
open-loop stability limit of the same deployment (``Solver.max_stable_rate``). It is the
utilization of the limiting station, the quantity the open cases' u = rate / lambda_max measures.

**Placement.** For a target u (uniform in the drawn band) and X = u lambda_max, the loop's fixed
point X = N / (T(X (N - 1)/N) + Z) (docs/methods.md, "Closed-loop workloads"; T the open solve's
mean latency, read at LIGHT_LOAD x lambda_max for N = 1) gives the think time that N clients need,

    Z(N) = N / X - T(max(X (N - 1)/N, LIGHT_LOAD lambda_max)),

which is >= 0 from N0 = ceil(X (T(X) + Z_target)) on (T rises with the rate).

* think ``0``: N is the smallest with Z(N) >= 0 (bisection below N0) and the loop runs with Z = 0, so its throughput
  X(N, 0) >= X > X(N - 1, 0); u is the loop's own X(N, 0) / lambda_max when it lies in the drawn
  band. When it does not (few clients: one more client moves X by a large step, or one client
  alone already loads the deployment beyond the band), the case falls back to think ``exp`` with Z = Z(N): the
  band is kept, the think stratum is the one that can reach it.
* think ``exp``: Z_target = m x T(X), m log-uniform in [0.1, 3] (think times from a tenth to three
  times the request's own latency: interactive clients to agents that pause), N = N0 and
  Z = Z(N) (>= Z_target), so X(N, Z) = X and u is the drawn one up to the solver's root
  tolerance (1e-5) and Z's 6 significant digits.
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.closed import mean_latency, solve_closed, with_concurrency
from qmodel.scenario import Scenario
from qmodel.solver import LIGHT_LOAD, Solver

__all__ = ["THINK_VALUES", "place_loop"]

#: the think-time stratum of a closed case (see the module docstring)
THINK_VALUES = ("0", "exp")


def place_loop(scenario: Scenario, u: float, band: tuple[float, float], think: str,
               rng: np.random.Generator) -> tuple[Scenario, float, str]:
    """(closed scenario, its load u = X(N)/lambda_max, think stratum) for the open ``scenario`` at
    target load ``u`` inside ``band`` = (lower, upper] (module docstring)."""
    solver = Solver(with_concurrency(scenario, 1, 0.0))  # a closed loop reads Poisson arrivals' SCV
    lam = solver.max_stable_rate()[0]
    x = u * lam
    t_x = mean_latency(solver, x)

    def z_needed(n: int) -> float:
        return n / x - mean_latency(solver, max(x * (n - 1) / n, LIGHT_LOAD * lam))

    z_target = 0.0
    if think == "exp":
        z_target = t_x * float(np.exp(rng.uniform(np.log(0.1), np.log(3.0))))
    n = max(1, math.ceil(x * (t_x + z_target) - 1e-9))
    if think == "0" and n > 1 and z_needed(n - 1) >= 0.0:  # N0 overshoots (T(X) > T at the seen rate)
        lo, n = 0, n - 1  # Z(lo) < 0 (lo = 0: no clients), Z(n) >= 0
        while n - lo > 1:
            mid = (lo + n) // 2
            lo, n = (lo, mid) if z_needed(mid) >= 0.0 else (mid, n)
    if think == "0":
        sc = with_concurrency(scenario, n, 0.0)
        u0 = round(solve_closed(sc, solver).loop.throughput_per_s / lam, 4)
        if band[0] < u0 <= band[1]:
            return sc, u0, "0"
    z = float(f"{max(z_needed(n), 0.0):.6g}")
    return with_concurrency(scenario, n, z), round(u, 4), "exp"
