"""Laws read off the decode chain: the uniform-mixture CDF of the step residual, a discrete law
(TPOT) on a rate-independent grid, and the occupancy's quantiles and variance (with its geometric
tail beyond the cap)."""

from __future__ import annotations

import numpy as np

from qmodel.dist import GridDist
from qmodel.dist import pow2_grid

__all__ = ["uniform_mixture_cdf", "discrete_dist", "occupancy_quantiles", "occupancy_variance"]


def uniform_mixture_cdf(x: np.ndarray, widths: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Σ_i p_i min(x / w_i, 1) at the points ``x``: the mixture of U(0, w_i) (w_i > 0) with masses p_i.

    With the widths sorted and j(x) of them at most x, it is Σ_{i<j} p_i + x Σ_{i>=j} p_i / w_i:
    one search and two prefix sums over the widths (a few hundred chain states), not over the grid.
    """
    if widths.size > 1 and not bool((widths[1:] >= widths[:-1]).all()):
        order = widths.argsort(kind="stable")
        widths, weights = widths[order], weights[order]
    below = np.zeros(widths.size + 1)
    weights.cumsum(out=below[1:])
    above = np.zeros(widths.size + 1)  # above[j] = Σ_{i>=j} p_i / w_i
    (weights / widths)[::-1].cumsum(out=above[-2::-1])
    j = widths.searchsorted(x, side="right")
    return below[j] + x * above[j]


def discrete_dist(vals: np.ndarray, w: np.ndarray, mean: float, base_dx: float) -> GridDist:
    """Distribution of a discrete variable (values in seconds) on a rate-independent grid."""
    dx = pow2_grid(base_dx, float(vals.max()), 16000)
    k = np.ceil(vals / dx - 1e-9).astype(np.int64)
    pmf = np.bincount(k, weights=w, minlength=int(k.max()) + 1)
    return GridDist(dx, pmf / pmf.sum(), float(mean), exact=False)


def occupancy_quantiles(pi: np.ndarray, qs: tuple[float, ...]) -> list[int]:
    return [int(k) for k in np.searchsorted(np.cumsum(pi), np.asarray(qs) - 1e-12)]


def occupancy_variance(n: np.ndarray, pi: np.ndarray, mean: float, capped: bool, cap: int | None, rc: float, tail: float) -> float:
    v = float(np.dot((n - mean) ** 2, pi))
    if capped and tail > 0:
        # geometric tail beyond cap: j = n - cap >= 1, weight pi(cap) rc^j
        p0 = float(pi[-1])
        e1 = rc / (1 - rc) ** 2
        e2 = rc * (1 + rc) / (1 - rc) ** 3
        d = cap - mean
        v += p0 * (e2 + 2 * d * e1 + d * d * rc / (1 - rc))
    return v
