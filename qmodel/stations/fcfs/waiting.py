"""The waiting-time law interface of the FCFS queues.

A :class:`WaitingTime` has ``mean_s``, ``p_wait`` (P(W > 0)), ``sf(t)`` = P(W > t), ``cdf(t)``,
``quantile(q)`` and ``grid(dx)`` (a :class:`~qmodel.dist.GridDist`), plus ``exact`` telling
whether the *distribution* is exact for the stated model; :class:`ExpTail` is the law
P(W > t) = min(p_wait, K e^{−ηt}) with closed-form quantiles.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from qmodel.dist import MAX_POINTS, GridDist
from qmodel.errors import InputError

__all__ = ["WaitingTime", "ExpTail", "SPAN_POINTS"]

SPAN_POINTS = 8192  # a default grid spans the wait's 1 − 1e-9 quantile plus the time after it in at most this many steps


class WaitingTime(ABC):
    """A waiting-time law with an atom 1 − p_wait at zero."""

    exact: bool = True
    method: str = ""

    @property
    @abstractmethod
    def mean_s(self) -> float: ...

    @property
    @abstractmethod
    def p_wait(self) -> float: ...

    @abstractmethod
    def sf(self, t: float | np.ndarray) -> float | np.ndarray:
        """P(W > t)."""

    def cdf(self, t: float | np.ndarray) -> float | np.ndarray:
        return 1.0 - self.sf(t)

    def quantile(self, q: float) -> float:
        """Smallest t with P(W <= t) >= q (bisection on the continuous part)."""
        if not 0.0 < q < 1.0:
            raise InputError("quantile", q, "must lie in (0, 1)")
        if q <= 1.0 - self.p_wait + 1e-15:
            return 0.0
        target = 1.0 - q
        hi = max(self.mean_s, 1e-300)
        while float(self.sf(hi)) > target:
            hi *= 2.0
        lo = 0.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if float(self.sf(mid)) > target:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-13 * max(hi, 1e-300):
                break
        return 0.5 * (lo + hi)

    def grid(self, dx: float | None = None, q_max: float = 1.0 - 1e-9, align: float | None = None,
             then: float = 0.0) -> GridDist:
        """Discretised law (rounded up to the grid), covering up to the q_max quantile. ``align``:
        a time that must fall on a grid point (a fixed service D): the step is cut to D/k, k the
        fewest steps that span D at no more than ``dx``. ``then``: the longest time added to the
        wait on the same grid (the service of a sojourn W + S): a default step is then at least
        (end + then)/SPAN_POINTS, so that the sum fits on the grid. The wait's own default step,
        max(E[W], end/1000)/200, is tiny at light load (E[W] -> 0), where S alone could run past
        MAX_POINTS: the sojourn's law was then all tail (docs/methods.md, Grids)."""
        end = self.quantile(q_max) if self.p_wait > 1.0 - q_max else 0.0
        if dx is None:
            dx = max(self.mean_s, end / 1000.0, 1e-12) / 200.0
            if then > 0:
                dx = max(dx, (end + then) / SPAN_POINTS)
        if align is not None:
            k = math.ceil(align / dx - 1e-9)
            if abs(k * dx - align) > 1e-12 * align:
                dx = align / k
        n = int(min(MAX_POINTS, math.ceil(end / dx) + 2))
        return self._on_grid(dx, n)

    def _on_grid(self, dx: float, n: int) -> GridDist:
        """The law on the grid points k·dx, k < n (the mass beyond as the tail). A wait behind
        Poisson arrivals has a density past its atom at 0: an exact law says so
        (:class:`~qmodel.dist.GridDist` ``atoms``, its quantiles interpolated within the bin); an
        approximate one keeps the conservative reading at the bin's upper edge (docs/methods.md,
        Grids)."""
        tail_rate = getattr(self, "decay_rate", math.inf)
        return GridDist.from_cdf(self.cdf, dx, n, self.mean_s, tail_rate=tail_rate, exact=self.exact,
                                 continuous=self.exact)


class ExpTail(WaitingTime):
    """P(W > t) = min(p_wait, K e^{−ηt}) for t >= 0: closed-form quantiles."""

    @property
    @abstractmethod
    def decay_rate(self) -> float: ...

    @property
    @abstractmethod
    def tail_const(self) -> float: ...

    def sf(self, t):
        t = np.asarray(t, dtype=float)
        out = np.where(t < 0, 1.0, np.minimum(self.p_wait, self.tail_const * np.exp(-self.decay_rate * np.maximum(t, 0.0))))
        return float(out) if out.ndim == 0 else out

    def quantile(self, q: float) -> float:
        if not 0.0 < q < 1.0:
            raise InputError("quantile", q, "must lie in (0, 1)")
        if q <= 1.0 - self.p_wait:
            return 0.0
        return max(0.0, math.log(self.tail_const / (1.0 - q)) / self.decay_rate)

    def _on_grid(self, dx: float, n: int) -> GridDist:
        # the closed form 1 − min(p_wait, K e^{−ηt}) at the grid points t = k·dx >= 0: the same
        # pmf as through cdf(), without sf's branch for t < 0 (one solve builds this grid at every
        # rate, and on a few thousand points each array pass counts)
        p, c, eta = self.p_wait, self.tail_const, self.decay_rate
        return GridDist.from_cdf(lambda x: 1.0 - np.minimum(p, c * np.exp(-eta * x)), dx, n, self.mean_s,
                                 tail_rate=eta, exact=self.exact, continuous=self.exact)
