"""Closed-form M/D/1 and M/D/c waiting and sojourn laws, computed independently of qmodel, and
Lindley / Kiefer-Wolfowitz simulations to cross-check them (issue 15 item 9's references).

* Erlang's M/D/1 (mpmath, 60 digits: the sum alternates in sign and cancels badly in floats):
  P(W <= t) = (1 − ρ) Σ_{k=0}^{⌊t/D⌋} (λ(kD − t))^k / k! · e^{−λ(kD − t)}.
* Crommelin's M/D/c, in the stable form that needs no alternating sum: N(s + D) =
  max(N(s) − c, 0) + A(s, s + D) holds from any time s (every busy server finishes its customer
  within D, none started later does), so the time-stationary number in system M is that chain's
  stationary law; an arrival at t (FCFS, c servers, departures in arrival order) has started
  service by t + kD + u (0 <= u < D) iff max(M − c, 0) + A <= (k + 1)c − 1, with M the number at
  t + u − D and A ~ Poisson(λ(D − u)) the arrivals before t since then. For c = 1 this equals
  Erlang's form (checked in tests/test_md_exact.py).
Sojourn = W + D, so its law has an atom of mass P(W = 0) at D.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.stats import poisson

__all__ = ["erlang_md1_wait_cdf", "mdc_wait_cdf", "mdc_sojourn_quantile", "mdc_mean_wait", "simulate_mdc_sojourn"]


def erlang_md1_wait_cdf(lam: float, d: float, t: float, digits: int = 60) -> float:
    """Erlang's M/D/1 waiting-time CDF, summed in ``digits``-digit arithmetic."""
    import mpmath

    with mpmath.workdps(digits):
        lam_, d_, t_ = mpmath.mpf(lam), mpmath.mpf(d), mpmath.mpf(t)
        rho = lam_ * d_
        s = mpmath.mpf(0)
        for k in range(int(math.floor(t / d + 1e-12)) + 1):
            x = lam_ * (k * d_ - t_)
            s += x**k / mpmath.factorial(k) * mpmath.exp(-x)
        return float((1 - rho) * s)


@lru_cache(maxsize=None)
def _stationary(lam: float, d: float, c: int, tol: float = 1e-14) -> np.ndarray:
    """Stationary law of N(s + D) = max(N(s) − c, 0) + Poisson(λD), truncated where the mass of
    its last 20 states is below ``tol`` (a dense solve of the balance equations)."""
    from scipy.linalg import solve

    a = lam * d
    n = int(c + 60 + 20 * a / (1 - a / c))
    while True:
        arr = poisson.pmf(np.arange(n), a)
        P = np.zeros((n, n))
        for i in range(n):
            base = max(i - c, 0)
            P[i, base:] = arr[: n - base]
            P[i, -1] += 1.0 - P[i].sum()  # the truncated tail stays in the last state
        A = P.T - np.eye(n)
        A[-1] = 1.0
        rhs = np.zeros(n)
        rhs[-1] = 1.0
        pi = np.maximum(solve(A, rhs), 0.0)
        pi /= pi.sum()
        if pi[-20:].sum() < tol or n > 3000:
            return pi
        n *= 2


def mdc_wait_cdf(lam: float, d: float, c: int, t: float) -> float:
    """P(W <= t) for M/D/c FCFS (λ total, service D, c servers): see the module doc."""
    if t < 0:
        return 0.0
    pi = _stationary(lam, d, c)
    k = int(math.floor(t / d + 1e-13))
    u = t - k * d
    if u < 0:
        u = 0.0
    q = np.concatenate([pi[: c + 1].sum(keepdims=True), pi[c + 1 :]])  # law of max(M − c, 0)
    m = (k + 1) * c - 1
    # P(Q + A <= m) = Σ_j q_j F_A(m − j)
    j = np.arange(min(m, q.size - 1) + 1)
    fa = poisson.cdf(m - j, lam * (d - u))
    return float(np.dot(q[: j.size], fa))


def mdc_mean_wait(lam: float, d: float, c: int) -> float:
    """E[W] = E[max(M − c, 0)]/λ (Little's law on the queue, M time-stationary)."""
    pi = _stationary(lam, d, c)
    return float(np.dot(np.maximum(np.arange(pi.size) - c, 0), pi)) / lam


def mdc_sojourn_quantile(lam: float, d: float, c: int, q: float) -> float:
    """Smallest s with P(W + D <= s) >= q (the atom at D included)."""
    if mdc_wait_cdf(lam, d, c, 0.0) >= q:
        return d
    hi = d
    while mdc_wait_cdf(lam, d, c, hi) < q:
        hi *= 2.0
    return d + brentq(lambda t: mdc_wait_cdf(lam, d, c, t) - q, 0.0, hi, xtol=1e-14, rtol=1e-13)


def simulate_mdc_sojourn(lam: float, d: float, c: int, n: int, seed: int = 0) -> np.ndarray:
    """Sojourns of n customers by the Kiefer–Wolfowitz recursion (Lindley's for c = 1): the vector
    of the c servers' workloads, sorted; an arrival joins the least loaded. First 10% dropped."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / lam, n)
    w = np.zeros(c)
    out = np.empty(n)
    if c == 1:
        x = 0.0
        for i in range(n):
            x = max(x - gaps[i], 0.0)
            out[i] = x + d
            x += d
        return out[n // 10:]
    for i in range(n):
        w = np.maximum(w - gaps[i], 0.0)
        j = int(np.argmin(w))
        out[i] = w[j] + d
        w[j] += d
    return out[n // 10:]
