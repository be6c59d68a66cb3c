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

from qmodel.dist import GridDist
from qmodel.errors import InputError, NumericalError
from qmodel.stations.fcfs.checks import require_positive, require_servers, require_stable
from qmodel.stations.fcfs.service import ServiceSample, cramer_lundberg
from qmodel.stations.fcfs.waiting import WaitingTime

__all__ = ["MDc", "MD1", "erlang_md1_cdf", "poisson_support"]


_CHUNK = 8192  # points per block of the vectorised CDF (a block × N matrix of Poisson terms)
_POISSON_TAIL = 1e-18
_SCAN = 64  # steps of each scan of the quantile's bracket


def poisson_support(a: float) -> int:
    """Smallest N > a whose Chernoff bound P(Poisson(a) >= N) <= e^{−a}(ea/N)^N is below 1e-18:
    the Poisson terms the M/D/c CDF keeps (Poisson(μ) for μ <= a is stochastically smaller)."""
    n = int(math.floor(a)) + 1
    log_a = math.log(a) if a > 0 else -math.inf
    while -a + n * (1.0 + log_a - math.log(n)) > math.log(_POISSON_TAIL):
        n += 1
    return n


def _first(mask: np.ndarray) -> int:
    """Index of the first True in ``mask`` (its length when there is none)."""
    return int(np.argmax(mask)) if mask.any() else mask.size


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

    @cached_property
    def _excess_cdf(self) -> np.ndarray:
        """P(M <= i) for i < the truncated support, with a 0 prepended for i = −1."""
        return np.concatenate(([0.0], np.cumsum(self._excess)))

    @cached_property
    def _log_factorials(self) -> tuple[np.ndarray, np.ndarray]:
        """(j, ln j!) for j < :func:`poisson_support` (λD)."""
        from qmodel.special import gammaln

        j = np.arange(poisson_support(self.lam * self.d), dtype=float)
        return j, gammaln(j + 1.0)

    def _poisson_rows(self, mu: np.ndarray) -> np.ndarray:
        """Poisson(mu) pmf at 0 .. N − 1 for each mu <= a = λD (one row each), N from
        :func:`poisson_support`: the dropped mass is below 1e-18 for every row (μ = 0 rows: the
        atom at 0)."""
        j, lf = self._log_factorials
        mu = mu[:, None]
        pos = mu > 0
        out = np.exp(j * np.log(np.where(pos, mu, 1.0)) - mu - lf)
        return np.where(pos, out, j == 0)

    def _terms(self, kk: np.ndarray, pois: np.ndarray) -> np.ndarray:
        """Σ_j Poisson(mu)(j) · P(M <= kk − j) per row: the chain's CDF at kk of M + Poisson(mu)."""
        g = self._excess_cdf
        idx = np.clip(kk[:, None] - np.arange(pois.shape[1])[None, :], -1, g.size - 2) + 1
        return np.einsum("ij,ij->i", g[idx], pois)

    def cdf(self, t):
        """P(W <= x) = P(M + Poisson(μ) <= kk), μ = λ((k+1)D − x), kk = (k+1)c − 1, summed over
        the Poisson term as Σ_j p_μ(j) P(M <= kk − j) (every term positive; the terms past the
        Poisson(λD) support of :func:`poisson_support` carry less than 1e-18)."""
        t_arr = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.zeros(t_arr.size)
        pos = np.flatnonzero(t_arr >= 0)
        for lo in range(0, pos.size, _CHUNK):
            i = pos[lo: lo + _CHUNK]
            x = t_arr[i]
            k = np.floor(x / self.d)
            mu = self.lam * ((k + 1) * self.d - x)
            kk = ((k + 1) * self.c - 1).astype(np.int64)
            out[i] = self._terms(kk, self._poisson_rows(mu))
        out = np.clip(out, 0.0, 1.0)
        return float(out[0]) if np.ndim(t) == 0 else out

    def _on_grid(self, dx: float, n: int) -> GridDist:
        """On a grid whose step divides D (kp points per service time: the sojourn's grid), the
        point kD + r·dx has μ = λ(D − r·dx) whatever k, so the CDF at all n points is one matrix
        product H·Pᵀ, H[k, j] = P(M <= (k+1)c − 1 − j), P[r, j] = p_{μ_r}(j) (the same terms as
        :meth:`cdf`); other grids, and grids shorter than D, go through :meth:`cdf`."""
        kp = round(self.d / dx)
        if not 1 <= kp <= n or abs(kp * dx - self.d) > 1e-12 * self.d:
            return super()._on_grid(dx, n)
        pois = self._poisson_rows(self.lam * (self.d - np.arange(kp) * dx))
        g = self._excess_cdf
        j = np.arange(pois.shape[1])
        F = np.empty(-(-n // kp) * kp)
        rows = max(1, _CHUNK // kp)
        for k0 in range(0, -(-n // kp), rows):
            k = np.arange(k0, min(k0 + rows, -(-n // kp)))
            idx = np.clip(((k + 1) * self.c - 1)[:, None] - j[None, :], -1, g.size - 2) + 1
            F[k0 * kp: (k0 + k.size) * kp] = (g[idx] @ pois.T).ravel()
        return GridDist.from_cdf_values(F[:n], dx, self.mean_s, tail_rate=self.decay_rate, exact=self.exact,
                                        continuous=self.exact)

    def sf(self, t):
        return 1.0 - self.cdf(t)

    def quantile(self, q: float) -> float:
        """Smallest t with P(W <= t) >= q: the interval [kD, (k+1)D) that holds it from the CDF at
        the multiples of D, then _SCAN-step scans of the bracket (the CDF is continuous and
        non-decreasing past its atom at 0) down to 1e-13 of t, the bisection's own tolerance, in
        ~8 vector evaluations instead of ~60 scalar ones."""
        if not 0.0 < q < 1.0:
            raise InputError("quantile", q, "must lie in (0, 1)")
        if q <= 1.0 - self.p_wait + 1e-15:
            return 0.0
        d, k = self.d, 64
        k_max = self.pi.size // self.c + 2  # past it P(W <= kD) is 1 to the chain's truncation
        while True:
            ends = np.arange(1, k + 1) * d
            i = _first(self.cdf(ends) >= q)
            if i < k or k >= k_max:
                break
            k *= 4
        lo, hi = (float(ends[i - 1]) if i > 0 else 0.0), float(ends[min(i, k - 1)])
        while hi - lo > 1e-13 * hi:
            xs = np.linspace(lo, hi, _SCAN + 1)
            j = _first(self.cdf(xs) >= q)
            if j == 0:
                break
            lo, hi = float(xs[j - 1]), float(xs[min(j, _SCAN)])
        return 0.5 * (lo + hi)

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
