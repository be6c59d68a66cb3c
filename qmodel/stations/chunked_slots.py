"""The chunked engine's wait for a free slot: which chain meets the arrival, and which arrivals queue.

A chunked request takes its slot (KV reservation, one of max_batch) when its first chunk is
scheduled, in arrival order, and holds it to its last token; at the slot cap (KV, max_batch or the
budget) it waits. :func:`slot_admission` gives that wait's law from the decode chain:

* random / round_robin / least_loaded: one instance's chain; jsq over c > 1 instances (fewest
  requests, waiting plus holding a slot) sends each arrival to the least full instance, so it waits
  only when every instance's slots are taken: the c instances' slots act as one pool
  (:func:`pooled_slot_chain`, the central queue JSQ approaches);
* the queue beyond the full pool (:func:`qmodel.stations.decode.slot_wait`, through
  :func:`qmodel.stations.decode.queue_wait`) with c_a^2 the SCV of the arrivals that queue for the
  slots: the pool's arrival stream (split per instance: c_a^2/c + 1 - 1/c for a random split,
  c_a^2/c for round_robin and least_loaded, which hand each instance about every c-th arrival; whole
  for the jsq pool). c_a^2 <= 1: P(wait) = the chain's P(n >= cap) (PASTA) and the conditional wait
  Exp(mu_full (1 - rc)) divided by the Allen–Cunneen GI/G/c factor (c_a^2 + c_L^2)/2; c_a^2 > 1: the
  Gamma GI/M/1 root sigma in place of rc (the colocated KV wall's reading), which measured better on
  the corpus than the factor alone (open TTFT 29.3/18.6/21.2% against 29.3/18.9/21.8%).

Why the arrivals' SCV (docs/validation.md, "Chunked slot wait: the arrivals"): against the replay's
time-average histograms (``benchmarks/chunked_occupancy.py``) the slot occupancy law was close
(one-instance corpus cases at 0.83-0.97 of the limit: P(slots at the cap) 0.80/0.76/0.81 modelled
against 0.84/0.74/0.80), but the wait was not: Gamma cv 0.55 arrivals 3.5 s modelled against 0.86 s,
cv 3.5 3.1 s against 28 s. The Poisson factor (1 + c_L^2)/2 ignored the arrivals. On the 162 open
chunked corpus cases (the slot-cap limit) the TTFT p50/p90/p99 median |error| goes 34.6/28.9/31.9%
(Poisson factor) -> 29.3/18.6/21.2% with c_a^2; capping c_a^2 at 1 was worse (on the old limit
33.6/23.4/24.9% against 31.8/19.5/23.1%).
"""

from __future__ import annotations

import numpy as np

from qmodel.dist import GridDist
from qmodel.stations.decode import GPSChain, admission_wait
from qmodel.stations.fcfs import split_arrival_scv

__all__ = ["pooled_slot_chain", "slot_admission"]


def pooled_slot_chain(g_tab: np.ndarray, instances: int, token_rate: float) -> tuple[np.ndarray, float, float]:
    """(pi[0..c cap], tail beyond, tail ratio) of ``instances`` = c slot chains taken as one pool.

    ``g_tab[n]``: one instance's step time with n sequences, n = 0..cap (its chain's cap);
    ``token_rate``: lam E[L] per instance. The pool holds n sequences split evenly, each instance at
    n/c, so it emits phi(n) = c (n/c) / g(n/c) = n / g(n/c) tokens per second (g linear between
    states) up to c cap sequences; arrivals bring c lam E[L] tokens per second. With a constant g
    this is M/M/(c cap) with offered load a = c lam E[L] g, and pi(c cap) + tail is Erlang C(c cap, a).
    """
    c, cap = int(instances), len(g_tab) - 1
    states = np.arange(cap + 1, dtype=float)
    g = np.asarray(g_tab, dtype=float)

    def pooled(nv: np.ndarray) -> np.ndarray:
        return np.interp(np.asarray(nv, dtype=float) / c, states, g)

    return GPSChain(pooled, cap=c * cap, slope_inf=0.0).solve(c * token_rate, c * cap)



def slot_admission(pi: np.ndarray, tail: float, rc: float, g_tab: np.ndarray, instances: int, dispatch: str,
                   token_rate: float, mean_output: float, cv2_output: float, ca2: float,
                   dx: float) -> GridDist | None:
    """Law of the wait for a free slot (module doc), or None where it is negligible.

    ``pi``, ``tail``, ``rc``: one instance's decode chain (0..cap, the mass beyond, its ratio);
    ``g_tab[n]``: its step time with n sequences, n = 0..cap; ``token_rate``: lam E[L] per instance;
    ``ca2``: the pool's arrival SCV. The pooled jsq chain at its cap completes c cap / (E[L] g(cap))
    sequences per second, so its conditional wait is c times shorter than one instance's.
    """
    c, cap = int(instances), len(g_tab) - 1
    if dispatch != "jsq" or c <= 1:
        ca2_seen = split_arrival_scv(ca2, c, cyclic=dispatch != "random")
        return admission_wait(pi, tail, rc, cap, float(g_tab[cap]), mean_output, cv2_output, dx,
                              arrival_scv=ca2_seen)
    pi_p, tail_p, rc_p = pooled_slot_chain(g_tab, c, token_rate)
    return admission_wait(pi_p, tail_p, rc_p, c * cap, float(g_tab[cap]), mean_output, cv2_output, dx,
                          arrival_scv=ca2)
