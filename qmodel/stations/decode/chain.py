"""The GPS birth–death chain of a decode instance, and the step-time summaries that feed it.

An instance advancing n active sequences by one token per step of t(n) seconds serves them at total
token rate phi(n) = n / t(n); arrivals bring E[L] tokens at rate lam, so the stationary occupancy is

    pi(n) ∝ prod_{k=1..n} lam E[L] t(k) / k,

capped at ``cap`` with a geometric tail of ratio rho_cap = lam E[L] t(cap)/cap beyond it.
:class:`GPSChain` evaluates it in log space on a growing grid; :func:`mean_context_tokens` is the
time-average context C̄ = E[L (P + (L+1)/2)] / E[L] at which t(n) is evaluated and :func:`fit_affine`
the reported a, beta of t(n) ≈ a + beta n (docs/methods.md, "Stations", decode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from qmodel.errors import InputError, NumericalError

__all__ = ["GPSChain", "MAX_STATES", "mean_context_tokens", "fit_affine"]

_LOG_TAIL = 40.0  # truncate the chain where pi(n)/max pi < e^-40 (~4e-18): far below any reported quantile
MAX_STATES = 1 << 22


def mean_context_tokens(prompt: np.ndarray, output: np.ndarray) -> float:
    """C̄ = E[L (P + (L+1)/2)] / E[L]: context of an active slot averaged over its decode steps."""
    p = np.asarray(prompt, dtype=float)
    L = np.asarray(output, dtype=float)
    return float(np.sum(L * (p + (L + 1.0) / 2.0)) / np.sum(L))


def fit_affine(n: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Least-squares a, beta of t(n) ≈ a + beta n (reported; the chain itself uses t(n) as evaluated)."""
    A = np.vstack([np.ones_like(n, dtype=float), np.asarray(n, dtype=float)]).T
    (a, b), *_ = np.linalg.lstsq(A, np.asarray(t, dtype=float), rcond=None)
    return float(a), float(b)


@dataclass
class GPSChain:
    """Birth–death chain of a GPS queue with per-state step time g(n) (seconds), capacity cap.

    phi(n) = min(n, cap) / g(min(n, cap)) tokens/s; arrivals bring E[L] tokens at rate lam. The
    step-time function is evaluated lazily on a growing integer grid and cached, so a solve at a
    new rate costs one cumulative sum over the states that carry mass.
    """

    step_time: Callable[[np.ndarray], np.ndarray]  # n (float array) -> seconds
    cap: int | None = None
    slope_inf: float = 0.0  # lim g(n)/n, the uncapped stability slope
    _g: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    _cum: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    def with_cap(self, step_time: Callable[[np.ndarray], np.ndarray], cap: int | None) -> "GPSChain":
        """The same step times under another cap (the station's slot cap moved with its reserved
        KV): the new chain starts from the step times evaluated so far, which do not depend on the
        cap (the arrays are extended by replacement, never in place, so sharing them is safe)."""
        return GPSChain(step_time, cap=cap, slope_inf=self.slope_inf, _g=self._g, _cum=self._cum)

    def g(self, n_hi: int) -> np.ndarray:
        """g[0..n_hi] (g[0] = g(1), unused by the chain)."""
        if len(self._g) <= n_hi:
            size = max(1024, 1 << int(math.ceil(math.log2(n_hi + 1))))
            n = np.arange(1, size + 1, dtype=float)
            g = np.asarray(self.step_time(n), dtype=float)
            if not np.all(np.isfinite(g)) or np.any(g <= 0):
                raise InputError("service.decode_step_time_s", "non-positive or non-finite", "step times must be > 0")
            self._g = np.concatenate([[g[0]], g])
            # cumulative log(g(k)/k), k = 1..n: the chain's rate-free part
            self._cum = np.concatenate([[0.0], np.cumsum(np.log(g) - np.log(n))])
        return self._g[: n_hi + 1]

    def rho_cap(self, token_rate: float) -> float:
        """Tail load: lam E[L] g(cap)/cap (capped) or lam E[L] slope_inf (uncapped)."""
        if self.cap is None:
            return token_rate * self.slope_inf
        return token_rate * float(self.g(self.cap)[self.cap]) / self.cap

    def solve(self, token_rate: float, guess_states: int) -> tuple[np.ndarray, float, float]:
        """(pi[0..m], tail mass beyond m, geometric tail ratio) with m = cap or a truncation point.

        The tail beyond a cap is geometric with ratio rho_cap; below it the chain is evaluated.
        """
        m = max(16, int(guess_states))
        if self.cap is not None:
            m = min(m, self.cap)
        log_rate = math.log(token_rate)
        while True:
            self.g(m)
            k = np.arange(m + 1)
            logw = k * log_rate + self._cum[: m + 1]
            top = float(logw.max())
            at_cap = self.cap is not None and m == self.cap
            if at_cap or logw[-1] < top - _LOG_TAIL:
                break
            if m >= MAX_STATES:
                # the occupancy law still carries mass past 4M states: too close to rho = 1 to report
                raise NumericalError(f"decode chain needs more than {MAX_STATES} states at token rate "
                                     f"{token_rate:.6g}/s (load within ~1e-5 of 1); lower the rate")
            m = min(2 * m, self.cap) if self.cap is not None else min(2 * m, MAX_STATES)
        w = np.exp(logw - top)
        if self.cap is not None and m == self.cap:
            rc = self.rho_cap(token_rate)
            tail = float(w[-1]) * rc / (1.0 - rc)
        else:
            rc, tail = 0.0, 0.0
        z = float(w.sum()) + tail
        return w / z, tail / z, rc
