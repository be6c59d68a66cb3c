"""The wait for a free decode slot (KV or batch cap) in a capped GPS chain, as a law on a grid.

An arrival that finds every slot taken (P = pi(cap) + tail, PASTA) queues; at the cap the pool
completes sequences at mu_full = capacity cap / (E[L] t(cap)) and the queue beyond it is geometric
with ratio rc = lam / mu_full, so the FCFS wait is Exp(mu_full (1 - rc)) (exact for geometric L),
divided by (1 + c_L^2)/2 for other output lengths (Allen–Cunneen; ±15% against DES). :func:`queue_wait`
is that queue for arrivals of any SCV (the colocated KV wall's, :mod:`qmodel.stations.admission`).

**A closed loop of N clients** (:mod:`qmodel.closed`) bounds that queue: an arrival sees at most
N - 1 other requests, so at most room = N - 1 - cap of them queue ahead of it beyond a full pool
of cap slots (none can where N - 1 < cap: the loop never fills the slots). The open queue's count
ahead is geometric with the queue's ratio r (rc, or the GI/M/1 root for bursty arrivals,
:func:`queue_ratio`), and the wait given j ahead is Erlang(j + 1, mu_e), mu_e = rate/(1 - r) (the
geometric sum of those Erlangs is the open Exp(rate)); :func:`bounded_slot_wait` caps the count at
the room: the open chain's mass on states beyond N - 1 is read as the loop's state N - 1 (every
other client ahead: the loop is full), not removed, so P(wait) is the open one where N - 1 >= cap
and 0 below; :func:`slot_wait_survival` is the capped Erlang mixture in closed form. The open rate
and ratio are kept: the seen rate X (N - 1)/N already carries the loop's smaller load, so only
states the loop cannot reach are moved (docs/methods.md, "Closed-loop workloads").
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.dist import GridDist, pow2_grid

__all__ = ["SLOT_WAIT_NEGLIGIBLE", "bounded_slot_wait", "conditional_wait_rate", "fewest_residents", "loop_chain",
           "queue_ratio", "queue_wait", "slot_wait", "slot_wait_mean", "slot_wait_span_s", "slot_wait_survival",
           "admission_wait", "wait_law"]

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

    The rate is :func:`conditional_wait_rate`'s.
    """
    rate = conditional_wait_rate(rc, mu, cv2_output, arrival_scv)
    if arrival_scv > 1.0:
        return min(p_wait * queue_ratio(rc, arrival_scv) / rc, 1.0), rate
    return min(p_wait, 1.0), rate


def conditional_wait_rate(rc: float, mu: float, cv2_output: float, arrival_scv: float = 1.0) -> float:
    """Rate of the exponential wait of a request that finds the pool full (:func:`queue_wait`):
    mu (1 - rc) / ((c_a^2 + c_L^2)/2) for c_a^2 <= 1 (infinite where both are 0), and the Gamma GI/M/1
    form mu (1 - sigma)(1 + c_a^2)/(c_a^2 + c_L^2) for c_a^2 > 1."""
    if arrival_scv > 1.0:
        sigma = queue_ratio(rc, arrival_scv)
        return mu * (1.0 - sigma) * (1.0 + arrival_scv) / (arrival_scv + cv2_output)
    factor = (max(arrival_scv, 0.0) + cv2_output) / 2.0
    return mu * (1.0 - rc) / factor if factor > 0 else math.inf


def queue_ratio(rc: float, arrival_scv: float = 1.0) -> float:
    """The ratio of the geometric count queued beyond a full pool that :func:`queue_wait` reads: rc for
    c_a^2 <= 1, the Gamma GI/M/1 root sigma above."""
    if arrival_scv > 1.0:
        from qmodel.stations.fcfs.scalar import gamma_gim1_sigma

        return float(gamma_gim1_sigma(rc, arrival_scv))
    return float(rc)


#: the high quantile of the per-request KV need that :func:`fewest_residents` reads (module doc)
_KV_NEED_QUANTILE = 0.99


def fewest_residents(cap: int, kv_bound: bool, kv_need: np.ndarray) -> int:
    """The fewest requests that fill a pool whose slot cap is ``cap``: the cap itself where it is a count
    (max_batch, the chunk budget), and where the KV memory sets it (``kv_bound``, at the mean need
    E[S] of a request, ``kv_need`` the per-request sample) the residents of the 99th-percentile need,
    cap E[S]/q_0.99(S) (at least 1): a loop of fewer clients than the cap can still fill the memory
    with long requests, so its bound counts the slots that long requests leave."""
    if not kv_bound:
        return int(cap)
    need = np.asarray(kv_need, dtype=float)
    hi = float(np.quantile(need, _KV_NEED_QUANTILE))
    return max(1, int(math.floor(cap * float(need.mean()) / hi))) if hi > 0 else int(cap)


#: a truncated count whose removed mass r^(room + 1) is below this is left as the open one
_TRUNCATION_NEGLIGIBLE = 1e-12


def bounded_slot_wait(p_wait: float, ratio: float, room: int | None, thinks: bool = True
                      ) -> tuple[float, int | None]:
    """(P(wait), phases): the slot wait of an arrival that can find at most ``room`` requests queued
    ahead of it beyond the full pool (module doc; None: unbounded, the open wait kept).

    Open, the arrival finds j ahead with probability p_wait (1 - r) r^j (r = ``ratio``); the states
    j > room are read as j = room (the loop full), so P(wait) stays p_wait and the arrival waits for at
    most Q = room + 1 departures (``phases``; None where the moved mass r^Q is negligible, so the open
    law is kept). room < 0: the full pool is out of the loop's reach, no wait. ``thinks`` False (Z = 0):
    every other client is always in the deployment, so the open chain's low states, not its high
    ones, are the loop's unreachable states; capping the count would only lighten the law, and the
    open one is kept (room < 0 still has no wait)."""
    if room is None:
        return p_wait, None
    if room < 0 or not p_wait > 0:
        return 0.0, None
    if not thinks:
        return p_wait, None
    q = int(room) + 1
    rq = float(ratio) ** q if ratio > 0 else 0.0
    if rq < _TRUNCATION_NEGLIGIBLE:
        return p_wait, None
    return p_wait, q


def loop_chain(pi: np.ndarray, tail: float, rc: float, capped: bool, p_wait: float, clients: int,
               fill: int | None, thinks: bool = True) -> tuple[np.ndarray, float, bool, float, int | None]:
    """(pi, tail, capped, P(slot wait), phases) of a decode chain (``pi`` on 0..m, ``tail`` beyond with
    ratio ``rc``; ``capped``: m is the slot cap, where ``p_wait`` = pi(m) + tail waits) as a closed
    loop's arrival reads it: the states beyond N - 1 read as N - 1 (module doc). Where N - 1 is below
    ``fill`` (:func:`fewest_residents`) the loop never fills the slots: no wait, the chain cut at
    N - 1; else the open P(wait) with at most N - 1 - fill queued ahead (:func:`bounded_slot_wait`)."""
    seen = int(clients)  # the arrival's states 0..N-1
    if not capped or fill is None or seen - 1 < fill:
        keep = min(seen, len(pi) - 1) if capped else seen
        if keep >= len(pi):
            return pi, tail, capped, p_wait, None
        kept = pi[:keep].copy()
        kept[-1] += float(pi[keep:].sum()) + tail
        return kept, 0.0, False, 0.0, None
    p_loop, phases = bounded_slot_wait(p_wait, rc, seen - 1 - fill, thinks)
    return pi, tail, True, p_loop, phases


def slot_wait_survival(x: np.ndarray, rate: float, ratio: float = 0.0, phases: int | None = None) -> np.ndarray:
    """P(W > x | W > 0) of the slot wait: Exp(rate) when unbounded (``phases`` None); else the wait for
    K = min(G, Q) departures at mu_e = rate/(1 - r), G geometric (P(G = k) = (1 - r) r^(k - 1), the
    open count) and Q = ``phases``:

        S(x) = e^(-(1 - r) m) F_Q(r m) - r^Q p_Q(m),   m = mu_e x,

    F_Q(a) = P(Poisson(a) <= Q), p_Q(m) = P(Poisson(m) = Q) (the sum over K of P(K = k) P(Poisson(m)
    <= k - 1), exchanged; Q = 1 is Exp(mu_e), Q -> infinity the open Exp(rate))."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    if phases is None or not ratio > 0:
        return np.exp(-rate * x) if phases is None else np.exp(-rate / (1.0 - ratio) * x)
    m = rate / (1.0 - ratio) * x
    p_q = np.exp(phases * np.log(np.maximum(m, 1e-300)) - m - math.lgamma(phases + 1.0))
    from qmodel.special import pdtr  # local: keeps `import qmodel` and a disaggregated solve off scipy

    s = np.exp(-(1.0 - ratio) * m) * pdtr(phases, ratio * m) - ratio**phases * p_q
    return np.clip(s, 0.0, 1.0)


def slot_wait_mean(rate: float, ratio: float = 0.0, phases: int | None = None) -> float:
    """E[W | W > 0] of :func:`slot_wait_survival`: E[K]/mu_e, E[K] = E[min(G, Q)] = (1 - r^Q)/(1 - r)."""
    if phases is None:
        return 1.0 / rate
    return (1.0 - ratio**phases) / rate


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
                   arrival_scv: float = 1.0, clients: int | None = None, loop_cap: int | None = None,
                   thinks: bool = True) -> GridDist | None:
    """Law of the wait for a free slot (KV or batch cap) before a request is admitted, or None where the
    chain never reaches its cap (no cap, or truncated below it) or the wait's probability is negligible.

    Atom 1 - p at zero and p Exp(rate) with (p, rate) from :func:`slot_wait`, on the grid dx 2^k
    (the smallest k that covers :func:`slot_wait_span_s` in 16000 points), the rest kept as the
    exponential tail. The colocated and chunked engines add it to TTFT (a prompt waits for KV
    before its prefill); the decode station folds the same wait into its admission delay.
    ``clients``: a closed loop's N, which bounds the queue ahead at N - 1 - ``loop_cap`` (module doc;
    :func:`fewest_residents`, default the cap; ``thinks``: as :func:`bounded_slot_wait`'s).
    """
    if cap is None or len(pi) - 1 != cap:
        return None
    p_wait, rate = slot_wait(pi, tail, rc, cap, step_at_cap_s, mean_output, cv2_output, capacity, arrival_scv)
    if clients is None:
        return wait_law(p_wait, rate, dx)
    ratio = queue_ratio(rc, arrival_scv)
    p_wait, phases = bounded_slot_wait(p_wait, ratio, clients - 1 - (cap if loop_cap is None else loop_cap), thinks)
    return wait_law(p_wait, rate, dx, ratio, phases)


def wait_law(p_wait: float, rate: float, dx: float, ratio: float = 0.0, phases: int | None = None
             ) -> GridDist | None:
    """Atom 1 - p_wait at zero and p_wait times the wait of :func:`slot_wait_survival` (Exp(rate), or
    the closed loop's bounded one for ``phases``), on the grid dx 2^k (the smallest k that covers
    :func:`slot_wait_span_s` in 16000 points), the rest kept as the exponential tail; None where the
    wait's probability is negligible or the rate not a positive finite number."""
    if not (p_wait > SLOT_WAIT_NEGLIGIBLE and rate > 0 and math.isfinite(rate)):
        return None
    span = slot_wait_span_s(p_wait, rate)
    step = pow2_grid(dx, span, 16000)
    x = np.arange(int(math.ceil(span / step)) + 2) * step
    if phases is None:
        cdf = (1.0 - p_wait) + p_wait * -np.expm1(-rate * x)
    else:
        cdf = 1.0 - p_wait * slot_wait_survival(x, rate, ratio, phases)
    return GridDist.from_cdf_values(cdf, step, p_wait * slot_wait_mean(rate, ratio, phases), tail_rate=rate, exact=False)
