"""KV admission of the colocated engine: the memory fills at a random resident count (soft wall).

An engine that reserves each request's prompt + output KV at admission (the replay's, and vLLM's
with ``max_tokens`` known) admits the FCFS head when its reservation S = P_held + L fits the free
memory. So the number of residents M that one instance's KV pool holds is not a fixed count but
depends on who they are. Residents stay ~L decode steps, so their reservations are length-biased:
mean C = E[L S] / E[L], variance V = E[L S^2] / E[L] - C^2 (ShareGPT < 2048 tokens: 1118 +- 480
tokens against E[S] = 1002). M is a renewal count of such reservations in the pool: normal with
sd sqrt(KV V / C^3) (renewal CLT), centred on the saturated schedule's mean resident count
(:func:`qmodel.stations.capacity.saturated_schedule`, which carries the free memory a blocked head
leaves idle, head-of-line blocking), truncated to the chain's slot cap (max_batch or
floor(KV / E[S])).

Population chain: with n requests on the instance (residents + those waiting for memory) the
decode pool runs min(n, M) of them, so the token rate is

    phi_eff(n) = E[phi(min(n, M))],   phi(k) = (1 - rho_p) k / t_d(k),

a birth-death chain pi(n) ∝ prod_{k<=n} lam E[L] / phi_eff(k), geometric beyond the cap with
ratio rc = lam E[L] / phi_eff(cap). An arrival waits with probability P(wait) = sum pi(n) P(M <= n)
(+ the tail) and, once waiting, Exp(mu (1 - rc)) scaled by the Allen–Cunneen G/G/c factor
(c_a^2 + c_L^2)/2 with mu = phi_eff(cap) / E[L] the completion rate with the memory full and c_a^2
the SCV of the arrivals the wall sees (at most 1: see below; with c_a^2 = 1 the slot wait of
:func:`qmodel.stations.decode.slot_wait`).
The hard-cap chain (slot wait at exactly floor(KV / E[S])) waits too rarely: on issue 15 item 8
it gave P(wait) 3% at 0.85 of the limit against the replay's 7-8%.
docs/methods.md ("KV admission: the soft wall") has the replay measurements.

Smooth arrivals (c_a^2 < 1: Gamma arrivals with cv < 1, and round-robin dispatch, which hands each
instance every c-th arrival, c_a^2 / c) queue less for memory than Poisson ones; the factor was
(1 + c_L^2)/2 whatever the arrivals, and the generated corpus's colocated cases with smooth or
round-robin-split arrivals ran TTFT p90 +100..+800% high. Bursty arrivals (c_a^2 > 1) keep the
Poisson factor: with c_a^2 itself the colocated TTFT p90 of the corpus's bursty cases rose further
above the replay's (docs/validation.md, "KV admission under smooth arrivals").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["KVWall", "kv_wall"]


def _normal_cdf(x: np.ndarray, centre: float, sd: float) -> np.ndarray:
    if sd <= 0:
        return (x >= centre).astype(float)
    return 0.5 * (1.0 + np.array([math.erf(z) for z in (x - centre) / (sd * math.sqrt(2.0))]))


@dataclass(frozen=True)
class KVWall:
    """M, the residents one instance's KV pool holds: normal(centre, sd) truncated to 0..cap (module doc)."""

    centre: float
    sd: float
    cap: int

    def pmf(self, pool: int = 1) -> np.ndarray:
        """P(M = m), m = 0..pool cap, of ``pool`` instances' memories taken together (sum of their M)."""
        top = pool * self.cap
        cdf = _normal_cdf(np.arange(top + 1, dtype=float) + 0.5, pool * self.centre, math.sqrt(pool) * self.sd)
        cdf[0] = 0.0 if top >= 1 else 1.0  # the pool holds at least one sequence (checked at construction)
        cdf[-1] = 1.0  # the slot cap: never more than cap residents per instance
        return np.diff(np.concatenate([[0.0], cdf]))

    def slot_wait(self, step_s: np.ndarray, token_rate: float, capacity: float, mean_output: float,
                  cv2_output: float, pool: int = 1, full_rate_per_s: float | None = None,
                  arrival_scv: float = 1.0) -> tuple[float, float] | None:
        """(P(wait), rate of the conditional exponential wait) of the population chain (module doc),
        or None where the chain is unstable at this token rate (rc >= 1).

        ``arrival_scv``: c_a^2 of the arrivals the wall sees, taken at most 1 (module doc); the
        conditional wait's rate is divided by (c_a^2 + c_L^2)/2, infinite (no wait) where both are 0.

        ``step_s[k]`` = t_d(k) for k = 0..cap (index 0 unused); ``token_rate`` = lam E[L] / capacity
        per instance. ``pool`` > 1: instances that share arrivals by outstanding tokens (least_loaded,
        which counts reserved KV) act as one pool, n sequences split evenly: phi_pool(n) = c phi(n / c)
        and M the sum of the c instances' counts. ``full_rate_per_s``: one instance's completion rate
        with the memory full (its stability limit, the saturated schedule's throughput, which also
        pays the prefills that the decode chain sees only through ``capacity``); phi_eff is scaled so
        that capacity phi_eff(top) / E[L] is ``pool`` times it, so rc = lam / limit: the wait grows
        without bound at the station's own limit, not before or after it.
        """
        pm = self.pmf(pool)
        top = len(pm) - 1
        k = np.arange(1, top + 1, dtype=float)
        per = k / pool
        steps = np.interp(per, np.arange(1, self.cap + 1, dtype=float), np.asarray(step_s[1: self.cap + 1], dtype=float))
        phi = pool * per / steps
        # E[phi(min(n, M))] = sum_{m < n} P(M = m) phi(m) + P(M >= n) phi(n), n = 1..top
        below = np.concatenate([[0.0], np.cumsum(pm[1:] * phi)[:-1]])
        at_least = 1.0 - np.cumsum(pm)[:-1]
        phi_eff = below + np.maximum(at_least, 0.0) * phi
        if full_rate_per_s is not None:
            phi_eff = phi_eff * (pool * full_rate_per_s * mean_output / capacity / float(phi_eff[-1]))
        lam_tok = pool * token_rate
        rc = lam_tok / float(phi_eff[-1])
        if not rc < 1.0:
            return None
        logw = np.concatenate([[0.0], np.cumsum(math.log(lam_tok) - np.log(phi_eff))])
        w = np.exp(logw - logw.max())
        tail = float(w[-1]) * rc / (1.0 - rc)
        z = float(w.sum()) + tail
        p_wait = (float(np.dot(w, np.cumsum(pm))) + tail) / z  # P(M <= n) at the arrival's n (PASTA)
        mu = capacity * float(phi_eff[-1]) / mean_output
        factor = (min(max(arrival_scv, 0.0), 1.0) + cv2_output) / 2.0
        return min(p_wait, 1.0), (mu * (1.0 - rc) / factor if factor > 0 else math.inf)


def kv_wall(held_tokens: np.ndarray, output_tokens: np.ndarray, kv_capacity_tokens: float, cap: int,
            resident_mean: float, reserved_output: np.ndarray | None = None) -> KVWall | None:
    """The soft wall of one instance's KV pool (module doc): ``resident_mean`` is the saturated
    schedule's mean decode batch (:func:`qmodel.stations.capacity.saturated_schedule`); None when it
    is unbounded (the memory never binds). A resident stays ~L steps and holds its reservation
    S = P_held + R (R = its output, or what a ``max_tokens`` reservation counts, ``reserved_output``)."""
    if not math.isfinite(resident_mean):
        return None
    held = np.asarray(held_tokens, dtype=float)
    L = np.asarray(output_tokens, dtype=float)
    size = held + (L if reserved_output is None else np.asarray(reserved_output, dtype=float))
    c = float(np.sum(L * size) / np.sum(L))
    v = max(float(np.sum(L * size * size) / np.sum(L)) - c * c, 0.0)
    return KVWall(centre=float(resident_mean), sd=math.sqrt(kv_capacity_tokens * v / c**3), cap=int(cap))
