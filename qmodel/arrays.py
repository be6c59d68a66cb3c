"""Three numpy reductions, computed without ``numpy.ma``: distinct values, median, quantiles.

``np.unique(a)`` asked for values only checks ``np.ma.is_masked(a)``, ``np.median`` checks
``np.ma.isMaskedArray`` on its NaN test, and ``np.quantile`` calls ``np.unique`` on its partition
indexes; each imports ``numpy.ma`` on first use, 30-55 ms of a fresh ``qmodel solve`` (every
bundled example reached one of them; docs/startup.md). These give the same values bit for bit on
plain arrays:

* :func:`distinct` is ``np.unique(a, return_counts=True)[0]``: asking for counts takes numpy's
  sort-and-mask path, which returns the same sorted distinct values as the hash path (values are
  copied, not computed; NaNs collapse to one, as ``np.unique``'s default ``equal_nan``).
* :func:`median` sorts and takes the middle value, or ``(a + b) / 2`` of the two middle values,
  which is what ``np.median`` computes (``np.mean`` of two float64 values sums them, then divides
  by 2); NaN if any value is NaN, as ``np.median``.
* :func:`quantiles` is ``np.quantile(a, q)`` with the default method (linear, Hyndman and Fan's
  7th): virtual index ``(n - 1) q``, its floor and the next order statistic, and numpy's two-sided
  interpolation ``lo + (hi - lo) g`` for ``g < 0.5``, ``hi - (hi - lo)(1 - g)`` otherwise.

Tested against numpy, value for value, in tests/test_arrays.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["distinct", "median", "quantiles"]


def distinct(a: "ArrayLike") -> np.ndarray:
    """The sorted distinct values of ``a`` (flattened), as ``np.unique(a)``."""
    return np.unique(a, return_counts=True)[0]


def median(values: "ArrayLike") -> float:
    """The median of ``values`` (flattened), as ``float(np.median(values))``; NaN when empty."""
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = a.size
    if n == 0 or math.isnan(a[-1]):  # NaN sorts last
        return math.nan
    h = n // 2
    return float(a[h]) if n % 2 else float((a[h - 1] + a[h]) / 2.0)


def quantiles(values: "ArrayLike", q: "ArrayLike") -> np.ndarray:
    """``np.quantile(values, q)`` (default linear method) for a 1-D ``q`` of levels in [0, 1]."""
    a = np.sort(np.asarray(values).ravel())
    qq = np.asarray(q, dtype=np.float64)
    if a.size == 0 or qq.ndim != 1 or not bool(np.all((qq >= 0.0) & (qq <= 1.0))):
        raise ValueError("quantiles: a non-empty sample and a 1-D q in [0, 1]")
    if np.issubdtype(a.dtype, np.inexact) and math.isnan(a[-1]):
        return np.full(qq.shape, np.nan)
    n = a.size
    virtual = (n - 1) * qq
    prev = np.floor(virtual)
    nxt = prev + 1
    top = virtual >= n - 1
    prev[top], nxt[top] = -1, -1
    lo_i, hi_i = prev.astype(np.intp), nxt.astype(np.intp)
    gamma = np.asarray(virtual - lo_i, dtype=virtual.dtype)
    lo, hi = a[lo_i], a[hi_i]
    diff = hi - lo
    out = np.add(lo, diff * gamma)
    np.subtract(hi, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=out.dtype)
    return out
