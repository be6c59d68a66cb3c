"""Burst-mates of a request at a batching engine's pool under bursty arrivals (the batch-Poisson
stand-in of :func:`qmodel.stations.iteration_waits.burst_batch_mean`): the delay the members of its
geometric burst that land on its instance add to its prefill (formula in :func:`burst_members`; used
by :class:`qmodel.stations.colocated.ColocatedStation` for least_loaded / jsq pools; docs/methods.md,
"Stations": colocated)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from qmodel.dist import GridDist, fast_len

__all__ = ["burst_members", "burst_members_by_cap", "burst_wait_probability"]


def burst_members(member: np.ndarray, dx: float, m: float, share: float, join_prob: float = 1.0,
                  first: np.ndarray | None = None, cap: int | None = None) -> GridDist:
    """:func:`burst_members_by_cap` at one cap."""
    return burst_members_by_cap(member, dx, m, share, join_prob, first, (cap,))[0]


def burst_members_by_cap(member: np.ndarray, dx: float, m: float, share: float, join_prob: float = 1.0,
                         first: np.ndarray | None = None, caps: Sequence[int | None] = (None,)) -> list[GridDist]:
    """Delay the tagged request's burst-mates add on its instance (geometric bursts of mean m).

    The burst has J_a members ahead of the tagged one and J_b behind, each Geometric_0(q), q = 1 - 1/m
    (a geometric batch seen from a random member), independent. Each member goes to the tagged one's
    instance with probability ``share``, independently: the count there on each side, A and B, is the
    thinned geometric, Geometric_0(q_s) with q_s = q s / (1 - q + q s) (mean s (m - 1)).

    With probability ``join_prob`` the instance is busy when the burst comes and every member there
    waits with the tagged one. Iterations take them FCFS, at most ``cap`` besides one prompt (the
    token budget's room; None: no limit): the request waits for floor(A / (cap + 1)) full iterations
    (one whole prompt, pmf ``first``, plus cap marginal costs M, pmf ``member``), then shares its own
    with the r = A mod (cap + 1) ahead and min(B, cap - r) behind, each adding M; those past the cap
    go later and do not delay it. Otherwise (idle) with no member ahead (1 - q_s) it starts at once,
    alone; with one or more, the first starts alone and the request waits for that whole iteration,
    after which the other A - 1 ~ Geometric_0(q_s) (memoryless) and B wait as on a busy instance.
    With x = q_s phi_M(z), the busy transform sums in closed form over A and B:

        T(z) = (1 - q_s) / (1 - q_s^(cap+1) phi_F(z) phi_M(z)^cap)
               x [(1 - q_s)/(1 - x) ((1 - x^(cap+1))/(1 - x) - (cap + 1) x^cap) + (cap + 1) x^cap],

    ((1 - q_s)/(1 - x))^2 without a cap, and the law's transform is
    join_prob T(z) + (1 - join_prob) (1 - q_s + q_s phi_F(z) T(z)).

    One law per cap in ``caps`` (the pool's own-length classes differ only in the room beside the
    own prompt): the grid and the transforms of M and F do not depend on the cap, so they are
    computed once for all of them.
    """
    first = member if first is None else first
    q = 1.0 - 1.0 / max(m, 1.0)
    qs = q * share / (1.0 - q + q * share)

    def moments(p: np.ndarray) -> tuple[float, float]:
        k = np.arange(len(p))
        e = float(np.dot(k, p)) * dx
        return e, math.sqrt(max(float(np.dot(k * k, p)) * dx * dx - e * e, 0.0))

    em, sd_m = moments(member)
    ef, sd_f = moments(first)
    # room for counts up to n_hi, past which the negative binomial's tail (n + 1) q_s^n is below 1e-15;
    # each counted member adds at most M plus its share of a full iteration (F + cap M over cap + 1)
    n_hi = 4.0 + (math.log(1e-15) / math.log(qs) * 1.2 if qs > 0 else 0.0)
    size = fast_len(int((n_hi * (2.0 * em + ef + 4.0 * (sd_m + sd_f)) + ef + 8.0 * sd_f) / dx)
                     + 2 * len(member) + len(first) + 2)
    phi = np.fft.rfft(member, size)
    phi_f = np.fft.rfft(first, size)
    x = qs * phi
    out = []
    for cap in caps:
        if cap is None or qs ** (max(int(cap), 0) + 1) < 1e-16:
            busy = ((1.0 - qs) / (1.0 - x)) ** 2
        else:
            c = max(int(cap), 0)
            xc = x**c
            inner = (1.0 - qs) / (1.0 - x) * ((1.0 - xc * x) / (1.0 - x) - (c + 1) * xc) + (c + 1) * xc
            busy = (1.0 - qs) / (1.0 - qs ** (c + 1) * phi_f * phi**c) * inner
        idle = qs * phi_f * busy
        idle[...] += 1.0 - qs  # the transform of a point mass at 0 is 1 at every frequency
        pmf = np.clip(np.fft.irfft(join_prob * busy + (1.0 - join_prob) * idle, size), 0.0, None)
        pmf /= pmf.sum()
        out.append(GridDist(dx, pmf, float(np.dot(np.arange(size), pmf)) * dx, exact=False))
    return out


def burst_wait_probability(p0: float, busy: float, c: int, m: float) -> float:
    """P(W > 0) of a request at a pool of ``c`` engines fed bursts that are dealt one per idle engine.

    Batch-Poisson stand-in for a bursty stream: geometric bursts of mean ``m`` (q = 1 - 1/m); the
    tagged member has J_a ~ Geometric_0(q) members ahead of it. Least work left / fewest requests
    hand a burst's first members to the idle engines, one each, and each starts at once (a batch
    forms only behind a busy engine), so with K engines idle when the burst comes the tagged member
    waits iff J_a >= K: P = E[q^K]. K = 0 (every engine busy) with the pool's Poisson-form
    probability ``p0`` (Erlang C of the busy fraction); given K >= 1 the engines are idle
    independently with probability 1 - ``busy`` (one engine's busy fraction):

        P(W > 0) = p0 + (1 - p0) [(busy + (1 - busy) q)^c - busy^c] / (1 - busy^c),

    p0 exactly when m = 1 (q = 0: Poisson and smoother streams keep the pooled reading), rising to 1
    as the bursts grow (q -> 1). One engine: p0 + (1 - p0) q. Replay, disaggregated prefill pools
    (m from :func:`~qmodel.stations.iteration_waits.burst_batch_mean` over one mean batch time):
    corpus c0475 / c0510 / c0547 (2-4 engines, Gamma cv 3.9 / 3.0 and the Azure code trace, busy
    0.17-0.56) 0.81 / 0.34 / 0.80 against 0.83 / 0.36 / 0.96 measured, where Erlang C of QNA's
    P(W > 0) gave 0.49 / 0.02 / 0.58; disagg-qwen7b-a100 jsq / least_loaded, Gamma cv 1.5-4 at
    0.2-0.9 of the limit: within 0.03 at six points (docs/validation.md, "Disaggregated TTFT at
    0.9-0.95 of the limit and under trace arrivals")."""
    q = 1.0 - 1.0 / max(m, 1.0)
    if q <= 0.0:
        return p0
    b = min(max(busy, 0.0), 1.0)
    if b >= 1.0:
        return 1.0
    idle_part = ((b + (1.0 - b) * q) ** c - b ** c) / (1.0 - b ** c)
    return min(1.0, p0 + (1.0 - p0) * idle_part)
