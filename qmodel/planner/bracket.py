"""Goodput brackets: the largest rate whose attainment meets the goal, found by Brent's method.

f(r) = A(r) − goal is non-increasing in the rate (:mod:`qmodel.goodput`), so its root is bracketed
by a rate that meets the goal and one that does not (or the stability limit, where attainment
tends to 0); a :class:`Bracket` kept by the search is refined later from itself alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from qmodel.roots import brent

__all__ = ["SEARCH_REL_TOL", "FINAL_REL_TOL", "Bracket", "root_bracket", "goodput_bracket", "bisect_goodput"]

SEARCH_REL_TOL = 3e-2  # goodput bracket during the search; the ranked plans are refined to 1e-3
FINAL_REL_TOL = 1e-3


@dataclass(frozen=True)
class Bracket:
    """A goodput bracket: ``lo`` meets the goal (attainment ``a_lo``), ``hi`` does not (``a_hi``).

    ``lo`` is the goodput reported; ``a_hi`` is None when ``hi`` is a stability limit (not solved).
    """

    lo: float
    a_lo: float
    hi: float
    a_hi: float | None
    solves: int


def root_bracket(f: Callable[[float], float], lo: float, f_lo: float, hi: float, f_hi: float,
                 rel_tol: float) -> tuple[float, float, float, float, int]:
    """(x_lo, f(x_lo), x_hi, f(x_hi), calls): the tightest evaluated bracket of the root of a
    non-increasing f with f(lo) >= 0 > f(hi).

    Brent's method (:func:`qmodel.roots.brent`, the goodput search's own: inverse quadratic
    interpolation, secant and bisection, always bracketing) on [lo, hi] with the end values
    given, so the ends cost no call; it stops when the bracket is within ``rel_tol`` of the root,
    so x_lo (the largest evaluated point with f >= 0) is within that of the root and never above
    it. A smooth f takes 4-7 calls for 1e-3 where bisection takes ~10-13.
    """
    if f_lo == 0.0:
        f_lo = 1e-15  # Brent stops on an end whose value is exactly 0; lo is known feasible
    br = [lo, f_lo, hi, f_hi]
    calls = [0]

    def g(x: float) -> float:
        if x == lo:
            return f_lo
        if x == hi:
            return f_hi
        calls[0] += 1
        v = f(x)
        if v >= 0 and x > br[0]:
            br[0], br[1] = x, v
        elif v < 0 and x < br[2]:
            br[2], br[3] = x, v
        return v

    brent(g, lo, hi, f_lo, f_hi, 0.5 * rel_tol, max_iter=200)
    return br[0], br[1], br[2], br[3], calls[0]


def goodput_bracket(att: Callable[[float], float], goal: float, lo: float, hi: float, rel_tol: float,
                    a_lo: float | None = None, a_hi: float | None = None) -> Bracket:
    """Goodput in [lo, hi): the largest rate meeting the goal, to ``rel_tol``; lo = 0 if ``lo`` misses it.

    ``a_lo``/``a_hi`` are attainments already known at the ends (no solve). ``a_hi = None`` means
    ``hi`` is a stability limit: attainment tends to 0 there (waits diverge), so f(hi) = -goal is
    taken without a solve. f(r) = A(r) - goal is non-increasing (:mod:`qmodel.goodput`); its root
    is found by :func:`root_bracket`. A search that keeps the returned bracket can be refined to a
    tighter tolerance later from that bracket alone.
    """
    n = 0
    if a_lo is None:
        n += 1
        a_lo = att(lo)
    if a_lo < goal:
        return Bracket(0.0, a_lo, lo, a_lo, n)
    if a_hi is None:
        hi = hi * (1.0 - 1e-9)
    if lo >= hi or hi - lo <= 0.5 * rel_tol * lo:
        return Bracket(lo, a_lo, hi, a_hi, n)
    x, fx, y, fy, m = root_bracket(lambda r: att(r) - goal, lo, a_lo - goal, hi,
                                   -goal if a_hi is None else a_hi - goal, rel_tol)
    return Bracket(x, fx + goal, y, fy + goal if (y != hi or a_hi is not None) else None, n + m)


def bisect_goodput(att: Callable[[float], float], goal: float, lo: float, hi: float, rel_tol: float,
                   lo_known_ok: bool = False, a_lo: float | None = None) -> tuple[float, int]:
    """(goodput, solves) by :func:`goodput_bracket` with ``hi`` a stability limit."""
    b = goodput_bracket(att, goal, lo, hi, rel_tol, a_lo=a_lo)
    return b.lo, b.solves
