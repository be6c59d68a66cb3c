"""KV admission of the colocated engine: the memory fills at a random resident count (soft wall).

An engine that reserves each request's prompt + output KV at admission (the replay's, and vLLM's
with ``max_tokens`` known) admits the FCFS head when its reservation S = P_held + L fits the free
memory. So the number of residents M that one instance's KV pool holds is not a fixed count but
depends on who they are. Residents stay ~L decode steps, so their reservations are length-biased:
mean C = E[L S] / E[L], variance V = E[L S^2] / E[L] - C^2 (ShareGPT < 2048 tokens: 1118 +- 480
tokens against E[S] = 1002). The count N of such reservations the pool holds is a renewal count:
normal with sd sqrt(KV V / C^3) (renewal CLT). M = min(N, cap), cap the engine's ``max_batch`` (none:
N is not cut, so the memory may hold more than floor(KV / E[S]) where the residents' reservations
are the small ones); the saturated schedule (:func:`qmodel.stations.capacity.saturated_schedule`,
which carries the free memory a blocked head leaves idle, head-of-line blocking) gives E[M], and
N's centre is the one whose truncation has that mean (:func:`truncated_centre`; where max_batch
binds first, E[M] = max_batch and M is the cap). With every reservation the same size (V = 0) M is
E[M] itself.

Population chain: with n requests on the instance (residents + those waiting for memory) the
decode pool runs min(n, M) of them. While n <= M nobody waits and the pool runs free, at the
decode capacity 1 - rho_p of this rate; while n > M the memory is full with a queue behind it,
and it admits one prompt per departure, as the saturated schedule does, so it completes at the
saturated rate lam_sat (the station's limit): the token rate is

    phi_eff(n) = sum_{m < n} P(M = m) s phi(m) + P(M >= n) phi(n),   phi(k) = (1 - rho_p) k / t_d(k),

with s = lam_sat E[L] / E[phi(M)] the full memory's rate, a birth-death chain
pi(n) ∝ prod_{k<=n} lam E[L] / phi_eff(k), geometric beyond the cap with ratio
rc = lam E[L] / (s E[phi(M)]) = lam / lam_sat. An arrival waits with probability
P(wait) = sum pi(n) P(M <= n) (+ the tail) and, once waiting, Exp(mu (1 - rc)) scaled by the
Allen–Cunneen G/G/c factor (c_a^2 + c_L^2)/2 with mu = lam_sat the completion rate with the memory
full and c_a^2 the SCV of the arrivals the wall sees (bursty ones: see below; with c_a^2 = 1 the slot
wait of :func:`qmodel.stations.decode.slot_wait`).
The states below the wall run at this rate's prefill share: at the saturated one (phi_eff scaled by
s throughout) the chain sits at the wall too often (docs/validation.md, "KV wall: the count's
centre and the blocked states").
The hard-cap chain (slot wait at exactly floor(KV / E[S])) waits too rarely: on issue 15 item 8
it gave P(wait) 3% at 0.85 of the limit against the replay's 7-8%.
docs/methods.md ("KV admission: the soft wall") has the replay measurements.

Smooth arrivals (c_a^2 < 1: Gamma arrivals with cv < 1, and round-robin dispatch, which hands each
instance every c-th arrival, c_a^2 / c) queue less for memory than Poisson ones; the factor was
(1 + c_L^2)/2 whatever the arrivals, and the generated corpus's colocated cases with smooth or
round-robin-split arrivals ran TTFT p90 +100..+800% high (docs/validation.md, "KV admission under
smooth arrivals").

Bursty arrivals (c_a^2 > 1, Gamma gaps) wait more often and, in heavy traffic, longer. The memory-full
pool is read as GI/M/1 with Gamma gaps: the chain's rc = lam / limit is replaced by the GI/M/1 root
sigma = (1 + (1 - sigma)/(k rc))^(-k), k = 1/c_a^2 (:func:`qmodel.stations.fcfs.gamma_gim1_sigma`;
sigma = rc for Poisson), so

    P(wait) = min(1, P_chain(wait) sigma / rc),   rate = mu (1 - sigma) (1 + c_a^2) / (c_a^2 + c_L^2),

exact for one exponential server (P = sigma, Exp(mu (1 - sigma))), the factor (1 + c_a^2)/(c_a^2 +
c_L^2) turning its exponential-service wait into the Allen–Cunneen one; continuous at c_a^2 = 1, and
as rc -> 1 the mean tends to the Allen–Cunneen (c_a^2 + c_L^2)/2 over mu (1 - rc). Before, c_a^2 was
taken at most 1 here, and the corpus's bursty colocated cases ran far low at 0.8-0.95 of the limit
(docs/validation.md, "Colocated limit: the saturated schedule alone"). The caller passes c_a^2 <= 1 for a
trace, whose within-window SCV comes from clumped, correlated gaps rather than a renewal stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qmodel.stations.decode.slot_wait import queue_wait
from qmodel.stations.pool_inputs import reserved_output as reserved_tokens

__all__ = ["KVWall", "kv_wall", "truncated_centre"]


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

        ``arrival_scv``: c_a^2 of the arrivals the wall sees (module doc): at most 1, the conditional
        wait's rate is divided by (c_a^2 + c_L^2)/2, infinite (no wait) where both are 0; above 1, the
        Gamma GI/M/1 root replaces rc in P(wait) and in the rate.

        ``step_s[k]`` = t_d(k) for k = 0..cap (index 0 unused); ``token_rate`` = lam E[L] / capacity
        per instance. ``pool`` > 1: instances that share arrivals by outstanding tokens (least_loaded,
        which counts reserved KV) act as one pool, n sequences split evenly: phi_pool(n) = c phi(n / c)
        and M the sum of the c instances' counts. ``full_rate_per_s``: one instance's completion rate
        with the memory full (its stability limit, the saturated schedule's throughput, which also
        pays the prefills that the decode chain sees only through ``capacity``); the blocked states
        (n > M) run at ``pool`` times it, so rc = lam / limit: the wait grows without bound at the
        station's own limit, not before or after it. None: they run at the free rate phi.
        """
        pm = self.pmf(pool)
        top = len(pm) - 1
        k = np.arange(1, top + 1, dtype=float)
        per = k / pool
        steps = np.interp(per, np.arange(1, self.cap + 1, dtype=float), np.asarray(step_s[1: self.cap + 1], dtype=float))
        phi = pool * per / steps
        free_full = float(np.dot(pm[1:], phi))  # E[phi(M)]: the full memory at the free rate
        s = 1.0 if full_rate_per_s is None else pool * full_rate_per_s * mean_output / capacity / free_full
        # phi_eff(n) = sum_{m < n} P(M = m) s phi(m) + P(M >= n) phi(n), n = 1..top
        below = np.concatenate([[0.0], np.cumsum(pm[1:] * phi * s)[:-1]])
        at_least = np.maximum(1.0 - np.cumsum(pm)[:-1], 0.0)
        phi_eff = below + at_least * phi
        full = s * free_full
        lam_tok = pool * token_rate
        rc = lam_tok / full
        if not rc < 1.0:
            return None
        logw = np.concatenate([[0.0], np.cumsum(math.log(lam_tok) - np.log(phi_eff))])
        w = np.exp(logw - logw.max())
        tail = float(w[-1]) * rc / (1.0 - rc)
        z = float(w.sum()) + tail
        p_wait = (float(np.dot(w, np.cumsum(pm))) + tail) / z  # P(M <= n) at the arrival's n (PASTA)
        return queue_wait(p_wait, rc, capacity * full / mean_output, cv2_output, arrival_scv)


def kv_wall(held_tokens: np.ndarray, output_tokens: np.ndarray, kv_capacity_tokens: float, cap: int,
            resident_mean: float, reserved_output: np.ndarray | None = None,
            max_batch: int | None = None) -> KVWall | None:
    """The soft wall of one instance's KV pool (module doc): ``resident_mean`` is the saturated
    schedule's mean decode batch (:func:`qmodel.stations.capacity.saturated_schedule`); None when it
    is unbounded (the memory never binds). A resident stays ~L steps and holds its reservation
    S = P_held + R (R = its output, or what a ``max_tokens`` reservation counts, ``reserved_output``).
    M = min(N, max_batch), N normal with the renewal sd and the centre whose truncation has mean
    ``resident_mean``; where every reservation is the same size (sd 0) M is that mean, at most
    ``cap`` (the slot cap floor(KV / E[S]), or max_batch where it binds first)."""
    if not math.isfinite(resident_mean):
        return None
    held = np.asarray(held_tokens, dtype=float)
    L = np.asarray(output_tokens, dtype=float)
    size = held + reserved_tokens("decode", L, reserved_output)
    c = float(np.sum(L * size) / np.sum(L))
    v = max(float(np.sum(L * size * size) / np.sum(L)) - c * c, 0.0)
    sd = math.sqrt(kv_capacity_tokens * v / c**3)
    if sd <= 0.0:
        return KVWall(centre=float(resident_mean), sd=0.0, cap=int(cap))
    hard = int(max_batch) if max_batch is not None else int(math.ceil(resident_mean + _SD_SPAN * sd)) + 1
    return KVWall(centre=truncated_centre(float(resident_mean), sd, hard), sd=sd, cap=hard)


#: normal sds past which N has no mass worth a state (Phi(-10) ~ 8e-24)
_SD_SPAN = 10.0


def truncated_centre(mean: float, sd: float, cap: int) -> float:
    """The centre of the normal count N (sd ``sd``) whose truncation M = min(max(N, 1), cap), as
    :meth:`KVWall.pmf` builds it, has E[M] = ``mean`` (bisection; E[M] increases with the centre).
    Where even a centre ``_SD_SPAN`` sds above the cap leaves E[M] <= mean (max_batch binds: M is the
    cap), that centre."""
    def trunc_mean(centre: float) -> float:
        return float(np.dot(np.arange(cap + 1), KVWall(centre=centre, sd=sd, cap=cap).pmf()))

    lo, hi = mean - _SD_SPAN * sd, cap + _SD_SPAN * sd
    if trunc_mean(hi) <= mean:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if trunc_mean(mid) < mean else (lo, mid)
    return 0.5 * (lo + hi)
