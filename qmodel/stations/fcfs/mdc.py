"""M/D/c, exact (M/D/1 is c = 1).

Crommelin's chain N' = max(N − c, 0) + Poisson(λD) gives the time-stationary number in system π;
then for x ∈ [kD, (k+1)D)
P(W ≤ x) = P(max(N − c, 0) + Poisson(λ((k+1)D − x)) ≤ (k+1)c − 1), every term positive
(docs/methods.md, "Stations": fcfs). This replaces Erlang's alternating sum, which loses float64 precision for t/D ≳ 20
(kept as :func:`erlang_md1_cdf`, a cross-check). Crommelin (1932); Franx (2001).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qmodel.errors import NumericalError
from qmodel.stations.fcfs.checks import require_positive, require_servers, require_stable
from qmodel.stations.fcfs.service import ServiceSample, cramer_lundberg
from qmodel.stations.fcfs.waiting import WaitingTime

__all__ = ["MDc", "MD1", "erlang_md1_cdf"]


def _poisson_pmf(n: np.ndarray, mu: np.ndarray | float) -> np.ndarray:
    from qmodel.special import gammaln

    n = np.asarray(n, dtype=float)
    mu = np.asarray(mu, dtype=float)
    with np.errstate(divide="ignore"):
        logp = n * np.log(np.where(mu > 0, mu, 1.0)) - mu - gammaln(n + 1.0)
    out = np.exp(logp)
    return np.where(mu > 0, out, (n == 0).astype(float))


@dataclass(frozen=True)
class MDc(WaitingTime):
    """M/D/c exact waiting time (Crommelin's chain + the all-positive CDF formula)."""

    lam: float
    d: float
    c: int = 1
    method: str = field(default="M/D/c Crommelin chain (exact)", init=False)

    def __post_init__(self) -> None:
        require_positive("arrival_rate_per_s", self.lam)
        require_positive("service_s", self.d)
        require_servers(self.c)
        require_stable("fcfs", self.rho, self.lam)

    @property
    def rho(self) -> float:
        return self.lam * self.d / self.c

    @cached_property
    def pi(self) -> np.ndarray:
        """Time-stationary number in system (truncated where the tail is below ~1e-15)."""
        a = self.lam * self.d
        c = self.c
        # N's tail decays like z0^{-n}, z0 > 1 the root of c ln z = a (z − 1): size the truncation by it.
        z = 1.0 + 2.0 * (c - a) / max(a, 1e-300) + 1.0
        for _ in range(200):  # Newton on g(z) = a(z-1) - c ln z from the right (convex: monotone)
            g = a * (z - 1.0) - c * math.log(z)
            dg = a - c / z
            z_new = z - g / dg
            if abs(z_new - z) < 1e-14 * z:
                z = z_new
                break
            z = z_new
        logz = math.log(z)
        n = int(math.ceil(c + a + 60.0 + 36.0 / max(logz, 1e-12)))
        if n > 6000:
            raise NumericalError(f"M/D/c chain needs {n} states at load {self.rho:.4f}; too close to 1")
        k = np.arange(n + 1)
        pk = _poisson_pmf(k, a)
        P = np.zeros((n + 1, n + 1))
        for i in range(n + 1):
            base = max(i - c, 0)
            m = n - base
            P[i, base:n] = pk[:m]
            P[i, n] = max(0.0, 1.0 - pk[:m].sum())
        A = P.T - np.eye(n + 1)
        A[-1, :] = 1.0
        rhs = np.zeros(n + 1)
        rhs[-1] = 1.0
        pi = np.linalg.solve(A, rhs)
        pi = np.clip(pi, 0.0, None)
        return pi / pi.sum()

    @cached_property
    def _excess(self) -> np.ndarray:
        """pmf of M = max(N − c, 0)."""
        pi = self.pi
        c = self.c
        m = pi[c:].copy()
        m[0] += pi[:c].sum()
        return m

    @property
    def p_wait(self) -> float:  # type: ignore[override]
        return float(self.pi[self.c:].sum())

    @property
    def mean_s(self) -> float:
        n = np.arange(self.pi.size)
        return float(np.dot(np.maximum(n - self.c, 0), self.pi)) / self.lam

    def cdf(self, t):
        from qmodel.special import pdtr

        t_arr = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.empty_like(t_arr)
        m = self._excess
        j = np.arange(m.size)
        for i, x in enumerate(t_arr):
            if x < 0:
                out[i] = 0.0
                continue
            k = math.floor(x / self.d)
            mu = self.lam * ((k + 1) * self.d - x)
            kk = (k + 1) * self.c - 1
            top = min(kk, m.size - 1)
            out[i] = float(np.dot(m[: top + 1], pdtr(kk - j[: top + 1], mu)))
        out = np.clip(out, 0.0, 1.0)
        return float(out[0]) if np.ndim(t) == 0 else out

    def sf(self, t):
        return 1.0 - self.cdf(t)

    @property
    def decay_rate(self) -> float:
        """Exact decay η of P(W > t): e^{ηD} = (1 + η/λ)^c (docs/methods.md, "Stations": fcfs)."""
        return cramer_lundberg(self.lam, ServiceSample.of(self.d / self.c))[0]


def MD1(lam: float, d: float) -> MDc:
    """M/D/1 exact (Erlang's law, computed by the chain: no cancellation)."""
    return MDc(lam, d, 1)


def erlang_md1_cdf(lam: float, d: float, t: float) -> float:
    """Erlang's alternating-sum M/D/1 CDF (loses precision for t/D ≳ 20; a cross-check only)."""
    rho = lam * d
    total = 0.0
    for k in range(int(math.floor(t / d)) + 1):
        x = lam * (k * d - t)
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1.0 - rho) * total
