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

Arrivals of SCV c_a^2 (the arrivals the wall sees: the instance's share of the stream, the whole
stream for a pool that shares one wall; the caller passes c_a^2 <= 1 for a trace, whose within-window
SCV comes from clumped, correlated gaps rather than a renewal stream) also change how often the
memory is full, not only the wait once it is. The chain above is the Poisson one: below the wall its
count is Poisson-like (variance = mean, an infinite-server count), beyond it the M/M/1-like queue of
ratio rc. With other arrivals the count is wider or narrower by its peakedness z (variance / mean):

* below the wall (residents that hold their memory for times proportional to L), the GI/G/inf
  peakedness z_free = 1 + h (c_a^2 - 1), h = E[min(L, L')]/E[L] (L, L' independent output lengths;
  h = 1/2 for geometric L, 1 for equal lengths): with c_a^2 read as the arrivals' index of
  dispersion it is exact for batch-Poisson arrivals with exponential holding; for renewal arrivals it
  is the limit of the GI/G/inf count with many residents (tests/test_colocated_knee.py: within 4% of
  the exact GI/M/inf peakedness at 30 residents, c_a^2 up to 9);
* beyond it (a queue of arrivals of SCV c_a^2 before departures of a large pool, SCV ~1), the
  diffusion's z_blocked = (c_a^2 + 1)/2.

The chain is tempered by them (Hayward's approximation of peaked traffic by a Poisson stream on
z-times fewer servers, in its diffusion form): each step's log-ratio log(lam E[L] / phi_eff(n)) is
divided by z_free where the memory is not yet full and z_blocked where it is (P(M >= n) and its
complement), and the tail beyond the cap is geometric with ratio rc^(1/z_blocked); the mode is kept,
the spread is sqrt(z) wider. Poisson arrivals (z = 1) are the chain itself. Measured in the replay
(79 open colocated corpus rows at 0.5-0.95 of the limit, 16,000 requests, whether the head could be
admitted at each arrival): mean |P(wait) error| 0.115 -> 0.086 (0.058 with the wall read at the
rate past the heavy-traffic onset; docs/validation.md, "Colocated TTFT near the knee").

The conditional wait once the memory is full is Exp(mu (1 - rc)) scaled by the Allen–Cunneen factor
(c_a^2 + c_L^2)/2 for c_a^2 <= 1; bursty arrivals (c_a^2 > 1, Gamma gaps) wait longer in heavy
traffic: the memory-full pool is read as GI/M/1 with Gamma gaps, the GI/M/1 root
sigma = (1 + (1 - sigma)/(k rc))^(-k), k = 1/c_a^2 (:func:`qmodel.stations.fcfs.gamma_gim1_sigma`;
sigma = rc for Poisson) in place of rc, rate = mu (1 - sigma) (1 + c_a^2) / (c_a^2 + c_L^2)
(:func:`qmodel.stations.decode.slot_wait.conditional_wait_rate`): exact for one exponential server,
continuous at c_a^2 = 1, and as rc -> 1 its mean tends to the Allen–Cunneen (c_a^2 + c_L^2)/2 over
mu (1 - rc). Before the peakedness, P(wait) of bursty arrivals was the Poisson chain's times sigma/rc
(the GI/M/1 P(wait) for one server; docs/validation.md, "Colocated limit: the saturated schedule
alone"), and smooth arrivals waited as often as Poisson ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qmodel.dist import GridDist
from qmodel.stations.decode.slot_wait import SLOT_WAIT_NEGLIGIBLE, bounded_slot_wait, conditional_wait_rate, wait_law
from qmodel.stations.pool_inputs import reserved_output as reserved_tokens

__all__ = ["KVWall", "kv_wall", "truncated_centre", "holding_overlap", "count_peakedness"]


def _normal_cdf(x: np.ndarray, centre: float, sd: float) -> np.ndarray:
    if sd <= 0:
        return (x >= centre).astype(float)
    return 0.5 * (1.0 + np.array([math.erf(z) for z in (x - centre) / (sd * math.sqrt(2.0))]))


@dataclass(frozen=True)
class KVWall:
    """M, the residents one instance's KV pool holds: normal(centre, sd) truncated to 0..cap (module doc);
    ``overlap``: h = E[min(L, L')]/E[L] of the residents' output lengths (:func:`holding_overlap`)."""

    centre: float
    sd: float
    cap: int
    overlap: float = 0.5

    def pmf(self, pool: int = 1) -> np.ndarray:
        """P(M = m), m = 0..pool cap, of ``pool`` instances' memories taken together (sum of their M)."""
        top = pool * self.cap
        cdf = _normal_cdf(np.arange(top + 1, dtype=float) + 0.5, pool * self.centre, math.sqrt(pool) * self.sd)
        cdf[0] = 0.0 if top >= 1 else 1.0  # the pool holds at least one sequence (checked at construction)
        cdf[-1] = 1.0  # the slot cap: never more than cap residents per instance
        return np.diff(np.concatenate([[0.0], cdf]))

    def population(self, step_s: np.ndarray, token_rate: float, capacity: float, mean_output: float,
                   pool: int = 1, full_rate_per_s: float | None = None, arrival_scv: float = 1.0
                   ) -> tuple[np.ndarray, np.ndarray, float, float, float] | None:
        """(w, P(M <= n), ratio, rc, mu_full) of the population chain (module doc): w[n] the unnormalised
        weights of n = 0..top requests (top = ``pool`` cap), tempered by the count's peakedness
        (:func:`count_peakedness`), geometric with ratio rc^(1/z_blocked) beyond; P(M <= n) on the same
        states; rc = lam / (the full memory's rate); mu_full the sequences per second the full memory
        completes. None where the chain is unstable at this token rate (rc >= 1). Arguments as
        :meth:`slot_wait`'s."""
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
        z_free, z_blocked = count_peakedness(arrival_scv, self.overlap)
        # each step's log-ratio tempered by the count's peakedness, free or memory-full (module doc)
        step = (math.log(lam_tok) - np.log(phi_eff)) * (at_least / z_free + (1.0 - at_least) / z_blocked)
        logw = np.concatenate([[0.0], np.cumsum(step)])
        return np.exp(logw - logw.max()), np.cumsum(pm), rc ** (1.0 / z_blocked), rc, capacity * full / mean_output

    def slot_wait(self, step_s: np.ndarray, token_rate: float, capacity: float, mean_output: float,
                  cv2_output: float, pool: int = 1, full_rate_per_s: float | None = None,
                  arrival_scv: float = 1.0) -> tuple[float, float] | None:
        """(P(wait), rate of the conditional exponential wait) of the population chain (module doc),
        or None where the chain is unstable at this token rate (rc >= 1).

        ``arrival_scv``: c_a^2 of the arrivals the wall sees (module doc): the chain is tempered by the
        count's peakedness (:func:`count_peakedness`), and the conditional wait's rate is
        :func:`qmodel.stations.decode.slot_wait.conditional_wait_rate`'s.

        ``step_s[k]`` = t_d(k) for k = 0..cap (index 0 unused); ``token_rate`` = lam E[L] / capacity
        per instance. ``pool`` > 1: instances that share arrivals by outstanding tokens (least_loaded,
        which counts reserved KV) act as one pool, n sequences split evenly: phi_pool(n) = c phi(n / c)
        and M the sum of the c instances' counts. ``full_rate_per_s``: one instance's completion rate
        with the memory full (its stability limit, the saturated schedule's throughput, which also
        pays the prefills that the decode chain sees only through ``capacity``); the blocked states
        (n > M) run at ``pool`` times it, so rc = lam / limit: the wait grows without bound at the
        station's own limit, not before or after it. None: they run at the free rate phi.
        """
        chain = self.population(step_s, token_rate, capacity, mean_output, pool, full_rate_per_s, arrival_scv)
        if chain is None:
            return None
        w, at_most, ratio, rc, mu_full = chain
        tail = float(w[-1]) * ratio / (1.0 - ratio)
        p_wait = (float(np.dot(w, at_most)) + tail) / (float(w.sum()) + tail)  # P(M <= n) at the arrival's n (PASTA)
        return min(p_wait, 1.0), conditional_wait_rate(rc, mu_full, cv2_output, arrival_scv)

    def bounded_wait(self, step_s: np.ndarray, token_rate: float, capacity: float, mean_output: float,
                     cv2_output: float, clients: int, dx: float, pool: int = 1,
                     full_rate_per_s: float | None = None, arrival_scv: float = 1.0, thinks: bool = True
                     ) -> GridDist | None:
        """The slot wait's law for an arrival of a closed loop of ``clients`` = N (:mod:`qmodel.closed`),
        or None where it has none (or the chain is unstable). The arrival sees at most N - 1 others:
        the chain's states beyond N - 1 are read as N - 1 (the loop full) for P(wait), and at most
        N - 1 less the resident count of the states where it waits, E[M | M <= n], queue ahead of it
        for the conditional wait (:func:`qmodel.stations.decode.bounded_slot_wait`, at the chain's
        ratio beyond its top). ``thinks`` False (Z = 0, the loop always full): the open law where the
        loop can fill the memory at all. Other arguments as :meth:`slot_wait`'s."""
        chain = self.population(step_s, token_rate, capacity, mean_output, pool, full_rate_per_s, arrival_scv)
        if chain is None:
            return None
        w, at_most, ratio, rc, mu_full = chain
        top = w.size - 1
        tail = float(w[-1]) * ratio / (1.0 - ratio)
        if clients - 1 < top:  # the loop's arrival sees n <= N - 1: the states beyond read as N - 1
            beyond = float(w[clients:].sum()) + tail
            w, tail = w[:clients].copy(), 0.0
            w[-1] += beyond
        blocked = float(np.dot(w, at_most[: w.size])) + tail  # the arrival finds M <= n: it waits
        p_wait = min(blocked / (float(w.sum()) + tail), 1.0)
        pm = np.diff(np.concatenate([[0.0], at_most]))
        m_sum = np.cumsum(np.arange(top + 1) * pm)  # sum_{m <= n} m P(M = m)
        resident = (float(np.dot(w, m_sum[: w.size])) + tail * float(m_sum[-1])) / max(blocked, 1e-300)
        if not thinks and p_wait > SLOT_WAIT_NEGLIGIBLE:
            open_wait = self.slot_wait(step_s, token_rate, capacity, mean_output, cv2_output, pool, full_rate_per_s,
                                       arrival_scv)
            return None if open_wait is None else wait_law(*open_wait, dx)
        rate = conditional_wait_rate(rc, mu_full, cv2_output, arrival_scv)
        room = clients - 1 - int(math.floor(resident))
        _, phases = bounded_slot_wait(p_wait, ratio, max(room, 0))
        return wait_law(p_wait, rate, dx, ratio, phases)


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
    h = holding_overlap(L)
    if sd <= 0.0:
        return KVWall(centre=float(resident_mean), sd=0.0, cap=int(cap), overlap=h)
    hard = int(max_batch) if max_batch is not None else int(math.ceil(resident_mean + _SD_SPAN * sd)) + 1
    return KVWall(centre=truncated_centre(float(resident_mean), sd, hard), sd=sd, cap=hard, overlap=h)


#: the smallest peakedness the chain is tempered by (a count that smooth is all but deterministic)
_MIN_PEAKEDNESS = 1e-3


def holding_overlap(output_tokens: np.ndarray) -> float:
    """h = E[min(L, L')]/E[L] for independent L, L' drawn from the sample (exact on the sample: with
    L sorted ascending, E[min] = sum_i L_(i) (2 (n - i) + 1) / n^2, i = 1..n). It is the integral of
    the squared survival function of the holding time over its mean, the factor of the GI/G/inf
    count's peakedness (module doc): 1 for equal lengths, 1/2 for exponential ones."""
    x = np.sort(np.asarray(output_tokens, dtype=float))
    n = len(x)
    mean = float(x.mean()) if n else 0.0
    if not mean > 0.0:
        return 1.0
    i = np.arange(1, n + 1, dtype=float)
    return float(np.dot(x, 2.0 * (n - i) + 1.0)) / (n * n) / mean


def count_peakedness(arrival_scv: float, overlap: float) -> tuple[float, float]:
    """(z_free, z_blocked): the variance-to-mean ratio of the resident count below the KV wall,
    1 + h (c_a^2 - 1) (GI/G/inf with holding-time overlap h), and of the queue beyond it,
    (c_a^2 + 1)/2 (module doc); both 1 for Poisson arrivals, at least ``_MIN_PEAKEDNESS``."""
    ca2 = max(float(arrival_scv), 0.0)
    return (max(1.0 + overlap * (ca2 - 1.0), _MIN_PEAKEDNESS), max((ca2 + 1.0) / 2.0, _MIN_PEAKEDNESS))


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
