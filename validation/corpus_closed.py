"""Closed-loop cases of the generated corpus: N clients and think time Z placed from model-independent quantities.

A corpus case with ``arrivals: closed`` (issue 18 §3) is the drawn open scenario turned into a loop
of N clients with think time Z (:func:`qmodel.closed.with_concurrency`, exponential think times).
Its throughput X(N) is an output of the model under test, so N and Z are **not** placed from it (a
modelling change would otherwise re-draw every closed case and call for new replays): they are
placed from two quantities that only the step times, the link and the capacities fix,

* lambda_max, the deployment's stability limit (``Solver.max_stable_rate``: the smallest station
  limit, the quantity the open cases' u = rate / lambda_max is defined on), and
* T0, the **unloaded latency** (:func:`unloaded_latency_s`): the mean over the request sample of
  one request's time through an empty deployment: its prefill alone (``pp`` stages), its whole KV
  transfer when disaggregated (bytes / the link's effective bandwidth + its base latency; the
  serialized time also for layer-wise transfers), and its (L - 1) decode steps alone (batch 1, at
  context prompt + L/2). No queueing, batching or interference term enters it.

**The load u of a closed case** is the fluid (no-queueing) load of its loop,

    u = N / (lambda_max (T0 + Z)),

the limiting station's utilisation if every request took its unloaded latency. It is an upper
bound of the loop's actual load X(N)/lambda_max (a request's latency under load is >= T0, and
X = N / (T + Z) by Little's law): the load bands of the closed rows are bands of this nominal load,
and the corpus run reports the loop's measured throughput beside it (the replay's completions per
second; ``rate_per_s`` is the analytic X(N)).

**Placement.** For a target u (uniform in the drawn band):

* think ``0``: N = ceil(u lambda_max T0), the fewest clients whose fluid load reaches u, run with
  Z = 0; u is the loop's own N / (lambda_max T0) when it lies in the drawn band, else that of N - 1
  clients when it does (the band's other side). When neither does
  (few clients: one client more moves the load by a large step, or one client alone already loads
  the deployment beyond the band), the case falls back to think ``exp`` with the same N and
  Z = N / (u lambda_max) - T0 (>= 0): the band is kept, the think stratum is the one that reaches it.
* think ``exp``: Z_target = m T0, m log-uniform in [0.1, 3] (think times from a tenth to three
  times the request's own unloaded latency: interactive clients to agents that pause),
  N = ceil(u lambda_max (T0 + Z_target)) and Z = N / (u lambda_max) - T0 (>= Z_target), so the
  fluid load is the drawn u up to Z's 6 significant digits.

The random draws are those of the analytic placement this replaces (one uniform for a ``exp``
card, none for a ``0`` card), so the open cases of a corpus are byte-identical to its earlier draws.
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.build import Resolved
from qmodel.closed import with_concurrency
from qmodel.scenario import Scenario
from qmodel.solver import Solver
from qmodel.topology import topology_named

__all__ = ["THINK_VALUES", "place_loop", "unloaded_latency_s", "fluid_load"]

#: the think-time stratum of a closed case (see the module docstring)
THINK_VALUES = ("0", "exp")


def unloaded_latency_s(resolved: Resolved) -> float:
    """T0: the mean over the request sample of a request's prefill, KV transfer and decode steps
    through an empty deployment, from step times alone (module docstring)."""
    roles = topology_named(resolved.scenario.deployment.topology).pool_roles  # prefill first
    pre, dec = resolved.pools[roles[0]].service, resolved.pools[roles[-1]].service
    p = np.asarray(resolved.lengths.prompt, dtype=float)
    o = np.asarray(resolved.lengths.output, dtype=float)
    q = np.asarray(resolved.uncached_prompt, dtype=float)
    t = np.asarray(pre.pipeline_latency_s(pre.prefill_one_s(q)), dtype=float)
    t = t + np.maximum(o - 1.0, 0.0) * np.asarray(
        dec.pipeline_latency_s(dec.decode_step_time_s(np.ones_like(p), p + 0.5 * o)), dtype=float)
    if resolved.link is not None and resolved.link_bandwidth_bytes_per_s:
        t = t + resolved.kv_bytes_per_token * p / resolved.link_bandwidth_bytes_per_s + resolved.link.latency_s
    return float(np.mean(t))


def fluid_load(lam: float, t0: float, clients: int, think_s: float) -> float:
    """u = N / (lambda_max (T0 + Z)): a loop's load if every request took its unloaded latency."""
    return clients / (lam * (t0 + think_s))


def place_loop(scenario: Scenario, u: float, band: tuple[float, float], think: str,
               rng: np.random.Generator) -> tuple[Scenario, float, str]:
    """(closed scenario, its fluid load u, think stratum) for the open ``scenario`` at target load
    ``u`` inside ``band`` = (lower, upper] (module docstring)."""
    solver = Solver(with_concurrency(scenario, 1, 0.0))
    lam = solver.max_stable_rate()[0]
    t0 = unloaded_latency_s(solver.resolved)
    x = u * lam
    z_target = 0.0
    if think == "exp":
        z_target = t0 * float(np.exp(rng.uniform(np.log(0.1), np.log(3.0))))
    n = max(1, math.ceil(x * (t0 + z_target) - 1e-9))
    if think == "0":
        for k in (n, n - 1):  # the fluid load of n clients is >= u > lower; n - 1's is < u <= upper
            u0 = round(fluid_load(lam, t0, k, 0.0), 4) if k >= 1 else 0.0
            if band[0] < u0 <= band[1]:
                return with_concurrency(scenario, k, 0.0), u0, "0"
    z = float(f"{max(n / x - t0, 0.0):.6g}")
    return with_concurrency(scenario, n, z), round(u, 4), "exp"
