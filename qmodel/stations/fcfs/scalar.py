"""Scalar FCFS formulas: :func:`kingman` (G/G/1 heavy traffic), :func:`klb_factor`
(Krämer & Langenbach-Belz 1976), :func:`qna_delay_probability` and :func:`qna_departure_scv`
(Whitt 1983), :func:`allen_cunneen` (G/G/c), :func:`split_arrival_scv` (one part of a split stream) and
:func:`mx_g1_mean_wait` (batch arrivals, exact) and :func:`gamma_gim1_sigma` (GI/M/1 with Gamma gaps, exact)."""

from __future__ import annotations

import math

from qmodel.errors import UnstableError
from qmodel.stations.fcfs.erlang import MMc

__all__ = ["kingman", "klb_factor", "qna_delay_probability", "allen_cunneen", "qna_departure_scv",
           "split_arrival_scv", "mx_g1_mean_wait", "gamma_gim1_sigma"]


def kingman(rho: float, ca2: float, cs2: float, mean_s: float) -> float:
    """Kingman G/G/1 mean wait ρ/(1−ρ)·(c_a² + c_s²)/2·E[S] (exact as ρ → 1)."""
    if rho >= 1:
        raise UnstableError("fcfs", rho, rho / mean_s, 1.0 / mean_s)
    return rho / (1.0 - rho) * (ca2 + cs2) / 2.0 * mean_s


def klb_factor(rho: float, ca2: float, cs2: float) -> float:
    """Krämer & Langenbach-Belz correction g multiplying Kingman's mean."""
    if ca2 + cs2 <= 0:
        return 0.0
    if ca2 < 1.0:
        return math.exp(-2.0 * (1.0 - rho) * (1.0 - ca2) ** 2 / (3.0 * rho * (ca2 + cs2)))
    return math.exp(-(1.0 - rho) * (ca2 - 1.0) / (ca2 + 4.0 * cs2))


def qna_delay_probability(rho: float, ca2: float, cs2: float) -> float:
    """P(W > 0) in GI/G/1 by Whitt's QNA interpolation (Whitt 1983, §4; approximate):

        P(W > 0) ≈ ρ + (c_a² − 1) ρ (1 − ρ) h(ρ, c_a², c_s²),
        h = (1 + c_a² + ρc_s²) / (1 + ρ(c_s² − 1) + ρ²(4c_a² + c_s²))     for c_a² ≤ 1,
        h = 4ρ / (c_a² + ρ²(4c_a² + c_s²))                                  for c_a² ≥ 1,

    clipped to [0, 1]. It is ρ exactly for Poisson arrivals (PASTA). Against exact GI/M/1 values
    (σ = A*(μ(1 − σ))): D/M/1 at ρ = 0.5 0.2000 vs 0.2032; E2/M/1 at ρ = 0.5 0.357 vs 0.382.
    """
    if rho <= 0.0:
        return 0.0
    if rho >= 1.0:
        return 1.0
    if ca2 <= 1.0:
        h = (1.0 + ca2 + rho * cs2) / (1.0 + rho * (cs2 - 1.0) + rho * rho * (4.0 * ca2 + cs2))
    else:
        h = 4.0 * rho / (ca2 + rho * rho * (4.0 * ca2 + cs2))
    return min(max(rho + (ca2 - 1.0) * rho * (1.0 - rho) * h, 0.0), 1.0)


def allen_cunneen(lam: float, mean_s: float, c: int, ca2: float, cs2: float) -> float:
    """Allen–Cunneen G/G/c mean wait C(c,a)/(cμ − λ)·(c_a² + c_s²)/2."""
    return MMc(lam, 1.0 / mean_s, c).mean_s * (ca2 + cs2) / 2.0


def qna_departure_scv(rho: float, ca2: float, cs2: float, m: int = 1) -> float:
    """QNA departure SCV c_d² = 1 + (1−ρ²)(c_a² − 1) + ρ²(c_s² − 1)/√m (Whitt 1983)."""
    return 1.0 + (1.0 - rho * rho) * (ca2 - 1.0) + rho * rho * (cs2 - 1.0) / math.sqrt(m)


def split_arrival_scv(ca2: float, parts: int, cyclic: bool) -> float:
    """SCV of the inter-arrival times one of ``parts`` engines sees when a renewal stream of SCV ``ca2``
    is split among them: cyclic (round-robin) splitting sums ``parts`` consecutive gaps, c_a²/c (exact
    for a renewal stream); random (Bernoulli) splitting gives c_a²/c + 1 − 1/c (QNA, Whitt 1983; exact
    for a renewal stream: a geometric sum of gaps)."""
    c = max(int(parts), 1)
    return ca2 / c if cyclic else ca2 / c + 1.0 - 1.0 / c


def mx_g1_mean_wait(batch_rate: float, ex: float, ex2: float, es: float, es2: float) -> float:
    """M^X/G/1 mean wait of a customer (exact):

    E[W] = λ_b E[X] E[S²]/(2(1−ρ)) + E[S] E[X(X−1)]/(2 E[X](1−ρ)),  ρ = λ_b E[X] E[S].
    """
    rho = batch_rate * ex * es
    if rho >= 1:
        raise UnstableError("fcfs", rho, batch_rate * ex, ex / (ex * es) * (1 - 1e-12))
    return batch_rate * ex * es2 / (2.0 * (1.0 - rho)) + es * (ex2 - ex) / (2.0 * ex * (1.0 - rho))


def gamma_gim1_sigma(rho: float, ca2: float) -> float:
    """The GI/M/1 root σ for Gamma inter-arrival gaps of SCV ``ca2`` at load ``rho`` (exact):

        σ = A*(μ(1 − σ)),   A*(s) = (1 + s/(kλ))^(−k),  k = 1/c_a²,  so  σ = (1 + (1 − σ)/(k ρ))^(−k),

    the unique root in (0, 1) for ρ < 1. An arrival waits with probability σ and, waiting, for
    Exp(μ(1 − σ)) (Kleinrock 1975, §6.4): σ = ρ for Poisson arrivals; burstier ones (c_a² > 1) wait
    more often (σ > ρ) but each for less, the mean σ/(μ(1 − σ)) tending to Kingman's
    ρ/(1 − ρ)·(c_a² + 1)/2/μ as ρ → 1 (c_a² = 4, ρ = 0.9: σ = 0.9591, mean 23.48/μ against 22.5/μ).
    Solved by bisection on the increasing gap σ − A*(μ(1 − σ)) (to 1e-13)."""
    if not 0.0 < rho < 1.0:
        raise UnstableError("fcfs", rho, rho, 1.0)
    if ca2 <= 0.0:
        raise ValueError("gamma_gim1_sigma: ca2 must be > 0")
    k = 1.0 / ca2
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid - (1.0 + (1.0 - mid) / (k * rho)) ** (-k) < 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return 0.5 * (lo + hi)
