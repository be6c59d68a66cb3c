"""The service-time law of an FCFS queue given by a sample, and the Cramér–Lundberg root of its MGF.

:class:`ServiceSample` holds the sample's values and weights (moments and the moment generating
function are sample averages; prompts are bounded so the MGF exists for every η).
:func:`cramer_lundberg` solves λ(E[e^{ηS}] − 1) = η, the exact decay of the M/G/1 waiting-time
tail, and C = (1−ρ)/(λE[S e^{ηS}] − 1) (docs/methods.md, "Stations").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qmodel.errors import InputError, NumericalError, UnstableError

__all__ = ["SCALAR_VALUES", "ServiceSample", "cramer_lundberg"]


# Samples of at most this many values evaluate their MGF in Python floats: a root search makes
# ~10 evaluations, and on a few values numpy's per-call overhead is nearly all of each one's cost.
SCALAR_VALUES = 16


@dataclass(frozen=True)
class ServiceSample:
    """A service-time law given by a sample (equal weights unless ``weights``) or one value.

    Moments and the moment generating function are sample averages; prompts are bounded so the
    MGF exists for every η (docs/methods.md, "Stations": fcfs).
    """

    values_s: np.ndarray
    weights: np.ndarray

    @staticmethod
    def of(service_s: float | np.ndarray, weights: np.ndarray | None = None) -> "ServiceSample":
        """The law of a sample; repeated values are merged (their weights added), which leaves
        every moment and the MGF unchanged and makes each MGF evaluation of a root search cheaper."""
        v = np.atleast_1d(np.asarray(service_s, dtype=float)).ravel()
        if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < 0) or v.max() <= 0:
            raise InputError("service_s", service_s, "service times must be finite, >= 0, not all zero")
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float).ravel()
        if w.shape != v.shape or np.any(w < 0) or w.sum() <= 0:
            raise InputError("weights", weights, "one non-negative weight per service time, not all zero")
        if v.size > 1:
            v, inv = np.unique(v, return_inverse=True)
            w = np.bincount(inv.ravel(), weights=w, minlength=v.size)
        return ServiceSample(v, w / w.sum())

    def moment(self, k: int) -> float:
        # memoised: the queues ask for the same few moments many times per solve
        cache = self.__dict__.setdefault("_moment_cache", {})
        if k not in cache:
            cache[k] = float(np.dot(self.weights, self.values_s**k))
        return cache[k]

    @property
    def mean_s(self) -> float:
        return self.moment(1)

    @property
    def scv(self) -> float:
        m = self.mean_s
        return max(self.moment(2) / (m * m) - 1.0, 0.0)

    @cached_property
    def _floats(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(values, weights) as Python floats for a sample of at most SCALAR_VALUES values, else None."""
        if self.values_s.size > SCALAR_VALUES:
            return None
        return tuple(self.values_s.tolist()), tuple(self.weights.tolist())

    def expm1_mgf(self, eta: float) -> float:
        """E[e^{ηS}] − 1 without cancellation for small η."""
        if self._floats is not None:
            return self._expm1_mgf_and_slope_floats(eta)[0]
        return float(np.dot(self.weights, np.expm1(np.minimum(eta * self.values_s, 700.0))))

    def mgf_s(self, eta: float) -> float:
        """E[S e^{ηS}]."""
        if self._floats is not None:
            return self._expm1_mgf_and_slope_floats(eta)[1]
        return float(np.dot(self.weights, self.values_s * np.exp(np.minimum(eta * self.values_s, 700.0))))

    def expm1_mgf_and_slope(self, eta: float) -> tuple[float, float]:
        """(E[e^{ηS}] − 1, E[S e^{ηS}]) from one exponential per value (a root finder wants both)."""
        if self._floats is not None:
            return self._expm1_mgf_and_slope_floats(eta)
        em1 = np.expm1(np.minimum(eta * self.values_s, 700.0))
        # far right of the root the slope (values up to e^700 times S) may pass the float range: it is
        # then +inf, which the root finder reads as "bisect" (_newton_log), so the overflow is not an error
        with np.errstate(over="ignore"):
            slope = float(np.dot(self.weights * self.values_s, em1 + 1.0))
        return float(np.dot(self.weights, em1)), slope

    def _expm1_mgf_and_slope_floats(self, eta: float) -> tuple[float, float]:
        # as expm1_mgf_and_slope, on the Python floats of a small sample
        em1_mean = slope = 0.0
        for v, w in zip(*self._floats):  # type: ignore[misc]
            e = math.expm1(min(eta * v, 700.0))
            em1_mean += w * e
            slope += w * v * (e + 1.0)
        return em1_mean, slope


def cramer_lundberg(lam: float, service: ServiceSample, scale: float = 1.0) -> tuple[float, float]:
    """(η, C) of the M/G/1 tail P(W > t) ~ C e^{−ηt} for service ``scale``·S.

    η > 0 is the unique positive root of λ(E[e^{η·scale·S}] − 1) = η (the left side is convex
    with slope ρ − 1 < 0 at 0); C = (1−ρ)/(λ E[scale·S e^{η scale S}] − 1).

    Solved in logs, g(η) = ln(λ(E[e^{ηsS}] − 1)) − ln η = 0 (the same root), by Newton's method
    kept inside the bracket (0, η₃] (bisection when a step would leave it). Right of the root the
    MGF grows like e^{η max S}: Newton on the equation itself then moves only ~1/max S per step
    (20 steps for batch-compound work), while in logs that growth is linear and ~5 steps reach
    round-off. η₃ is the positive root of the cubic Taylor part λ(ηE[S] + η²E[S²]/2 + η³E[S³]/6) = η,
    right of η since every dropped term is positive. Brent on the bracket is the fallback if
    Newton does not settle.
    """
    rho = lam * scale * service.mean_s
    if rho >= 1:
        raise UnstableError("fcfs", rho, lam, lam / rho)

    def f(eta: float) -> float:
        return lam * service.expm1_mgf(eta * scale) - eta

    m2 = service.moment(2) * scale * scale
    m3 = service.moment(3) * scale ** 3
    a2, a1 = lam * m3 / 6.0, lam * m2 / 2.0
    # a2 η² + a1 η − (1 − ρ) = 0, the positive root without cancellation
    hi = max(2.0 * (1.0 - rho) / (a1 + math.sqrt(a1 * a1 + 4.0 * a2 * (1.0 - rho))), 1e-300)
    first = service.expm1_mgf_and_slope(hi * scale)  # (Newton's first iterate: evaluated once)
    while lam * first[0] - hi <= 0:  # round-off only: η₃ is right of the root in exact arithmetic
        hi *= 2.0
        if hi > 1e300:
            raise NumericalError("Cramér–Lundberg root not bracketed")
        first = service.expm1_mgf_and_slope(hi * scale)
    eta = _newton_log(lam, service, scale, hi, first=first)
    if eta is None:
        from scipy.optimize import brentq

        lo = hi
        while f(lo) >= 0:
            lo /= 2.0
            if lo < 1e-300:
                raise NumericalError("Cramér–Lundberg root not bracketed below")
        eta = brentq(f, lo, hi, xtol=1e-15 * hi, rtol=1e-15, maxiter=200)
    const = (1.0 - rho) / (lam * scale * service.mgf_s(eta * scale) - 1.0)
    return float(eta), float(const)


def _newton_log(lam: float, service: ServiceSample, scale: float, hi: float,
                max_iter: int = 60, first: tuple[float, float] | None = None) -> float | None:
    """Root of ln(λ(E[e^{ηsS}] − 1)) = ln η in (0, hi] (f(hi) > 0) by Newton steps kept in the
    bracket, which the sign of f(η) = λ(E[e^{ηsS}] − 1) − η narrows at every iterate; None if it
    does not settle. ``first``: ``service.expm1_mgf_and_slope(hi · scale)`` if already known."""
    lo, x = 0.0, hi
    for _ in range(max_iter):
        e, slope = first if first is not None else service.expm1_mgf_and_slope(x * scale)
        first = None
        fx = lam * e - x
        if fx > 0.0:
            hi = x
        elif fx < 0.0:
            lo = x
        else:
            return x
        if not e > 0.0:
            return None
        # g = ln(λe) − ln x, g' = s E[S e^{ηsS}]/e − 1/x
        g = math.log(lam * e / x)
        dg = scale * slope / e - 1.0 / x
        step = g / dg if dg > 0.0 and math.isfinite(dg) else math.nan
        if abs(step) <= 1e-15 * x:  # at the root to round-off (where g's sign may disagree with f's)
            return x - step
        nx = x - step
        if not lo < nx < hi:
            nx = 0.5 * (lo + hi)
        if hi - lo <= 1e-15 * hi:
            return nx
        x = nx
    return None
