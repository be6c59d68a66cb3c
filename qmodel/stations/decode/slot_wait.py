"""The wait for a free decode slot (KV or batch cap) in a capped GPS chain, as a law on a grid.

An arrival that finds every slot taken (P = pi(cap) + tail, PASTA) queues; at the cap the pool
completes sequences at mu_full = capacity cap / (E[L] t(cap)) and the queue beyond it is geometric
with ratio rc = lam / mu_full, so the FCFS wait is Exp(mu_full (1 - rc)) (exact for geometric L),
divided by (1 + c_L^2)/2 for other output lengths (Allen–Cunneen; ±15% against DES). :func:`queue_wait`
is that queue for arrivals of any SCV (the colocated KV wall's, :mod:`qmodel.stations.admission`).
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.dist import GridDist, pow2_grid

__all__ = ["SLOT_WAIT_NEGLIGIBLE", "queue_wait", "slot_wait", "slot_wait_span_s", "admission_wait", "wait_law"]

#: a slot-wait probability below this adds nothing any reported quantile or attainment can see
SLOT_WAIT_NEGLIGIBLE = 1e-10


def slot_wait(pi: np.ndarray, tail: float, rc: float, cap: int, step_at_cap_s: float, mean_output: float,
              cv2_output: float, capacity: float = 1.0, arrival_scv: float = 1.0) -> tuple[float, float]:
    """(P(wait), rate) of the wait for a free slot in a GPS chain capped at ``cap`` sequences.

    ``pi`` is the chain's law on 0..cap and ``tail`` its geometric mass beyond the cap (ratio ``rc``).
    An arrival that finds every slot taken (P = pi(cap) + tail, PASTA) queues; at the cap the pool
    completes sequences at mu_full = capacity cap / (E[L] t(cap)), and the queue beyond the cap is
    geometric with ratio rc = lam / mu_full, so the FCFS wait is Exp(mu_full (1 - rc)) (the M/M/1
    wait: exact for geometric L), divided by (1 + c_L^2)/2 for other output lengths (Allen–Cunneen;
    ±15% against DES). ``capacity``: the share of time the engine decodes when the chain runs at
    token rate lam E[L] / capacity (colocated prefill priority: 1 - rho_p); 1 for a decode pool.
    ``arrival_scv``: c_a^2 of the arrivals that queue for the slots; the factor is then the full
    Allen–Cunneen GI/G/c one, (c_a^2 + c_L^2)/2 (infinite rate, no wait, where both are 0); 1 (Poisson)
    for the decode pool and colocated, whose callers keep that reading.
    """
    p_wait = float(pi[-1]) + float(tail)
    mu_full = capacity * cap / (mean_output * step_at_cap_s)
    return queue_wait(p_wait, rc, mu_full, cv2_output, arrival_scv)


def queue_wait(p_wait: float, rc: float, mu: float, cv2_output: float, arrival_scv: float = 1.0
               ) -> tuple[float, float]:
    """(P(wait), rate of the conditional exponential wait) of the queue beyond a full pool, from the
    Poisson chain's P(wait) ``p_wait`` and ratio ``rc`` = lam / mu (mu: the completion rate with the
    pool full), for arrivals of SCV ``arrival_scv`` = c_a^2 and output lengths of SCV c_L^2:

    * c_a^2 <= 1: P(wait) as the chain's, the conditional wait Exp(mu (1 - rc)) scaled by the
      Allen–Cunneen G/G/c factor (c_a^2 + c_L^2)/2 (infinite rate, no wait, where both are 0);
    * c_a^2 > 1 (renewal Gamma gaps): the full pool read as GI/M/1, the Gamma root
      sigma = (1 + (1 - sigma)/(k rc))^(-k), k = 1/c_a^2 (:func:`qmodel.stations.fcfs.gamma_gim1_sigma`)
      in place of rc: P(wait) = min(1, p_wait sigma/rc), rate mu (1 - sigma)(1 + c_a^2)/(c_a^2 + c_L^2),
      exact for one exponential server (P = sigma, Exp(mu (1 - sigma))), the factor turning its
      exponential-service wait into the Allen–Cunneen one; continuous at c_a^2 = 1, and as rc -> 1
      the mean tends to (c_a^2 + c_L^2)/2 over mu (1 - rc).
    """
    if arrival_scv > 1.0:
        from qmodel.stations.fcfs.scalar import gamma_gim1_sigma

        sigma = gamma_gim1_sigma(rc, arrival_scv)
        return min(p_wait * sigma / rc, 1.0), mu * (1.0 - sigma) * (1.0 + arrival_scv) / (arrival_scv + cv2_output)
    factor = (max(arrival_scv, 0.0) + cv2_output) / 2.0
    return min(p_wait, 1.0), (mu * (1.0 - rc) / factor if factor > 0 else math.inf)


def slot_wait_span_s(p_wait: float, rate: float) -> float:
    """How far a grid covers the slot wait Exp(rate) of mass ``p_wait``: to 1e-6 of p_wait, or to where
    under 1e-10 is left when that comes first (at moderate load p_wait is ~1e-10 to 1e-30, and a full
    1e-6 span made grids 5-10x longer for no mass). Past it the law is kept as its exponential tail
    (exact in quantiles)."""
    if p_wait <= SLOT_WAIT_NEGLIGIBLE:
        return 0.0
    return min(math.log(1e6), math.log(p_wait / SLOT_WAIT_NEGLIGIBLE)) / rate


def admission_wait(pi: np.ndarray, tail: float, rc: float, cap: int | None, step_at_cap_s: float,
                   mean_output: float, cv2_output: float, dx: float, capacity: float = 1.0,
                   arrival_scv: float = 1.0) -> GridDist | None:
    """Law of the wait for a free slot (KV or batch cap) before a request is admitted, or None where the
    chain never reaches its cap (no cap, or truncated below it) or the wait's probability is negligible.

    Atom 1 - p at zero and p Exp(rate) with (p, rate) from :func:`slot_wait`, on the grid dx 2^k
    (the smallest k that covers :func:`slot_wait_span_s` in 16000 points), the rest kept as the
    exponential tail. The colocated and chunked engines add it to TTFT (a prompt waits for KV
    before its prefill); the decode station folds the same wait into its admission delay.
    """
    if cap is None or len(pi) - 1 != cap:
        return None
    return wait_law(*slot_wait(pi, tail, rc, cap, step_at_cap_s, mean_output, cv2_output, capacity, arrival_scv), dx)


def wait_law(p_wait: float, rate: float, dx: float) -> GridDist | None:
    """Atom 1 - p_wait at zero and p_wait Exp(rate), on the grid dx 2^k (the smallest k that covers
    :func:`slot_wait_span_s` in 16000 points), the rest kept as the exponential tail; None where the
    wait's probability is negligible or the rate not a positive finite number."""
    if not (p_wait > SLOT_WAIT_NEGLIGIBLE and rate > 0 and math.isfinite(rate)):
        return None
    span = slot_wait_span_s(p_wait, rate)
    step = pow2_grid(dx, span, 16000)
    x = np.arange(int(math.ceil(span / step)) + 2) * step
    cdf = (1.0 - p_wait) + p_wait * -np.expm1(-rate * x)
    return GridDist.from_cdf_values(cdf, step, p_wait / rate, tail_rate=rate, exact=False)
