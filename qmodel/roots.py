"""The one bracketing root finder: Brent's method, shared by the goodput search and the planner.

Goodput is the root of a non-increasing attainment curve, solved at a queueing solve per point,
so the finder must always keep a bracket (the answer is the bracket's lower end, a rate that was
solved and meets the goal) and take few steps on a smooth curve. Brent's method does both: inverse
quadratic interpolation and secant steps where they shrink the bracket fast enough, bisection
otherwise. Written out (about 40 lines) rather than scipy.optimize.brentq so that the goodput
path does not import scipy.optimize, and so that both callers stop by the same rule.
"""

from __future__ import annotations

import math
from typing import Callable

__all__ = ["brent"]


def brent(f: Callable[[float], float], a: float, b: float, fa: float, fb: float, rel_tol: float,
          max_iter: int = 100) -> None:
    """Brent's root finder (Brent 1973; the zbrent form of Numerical Recipes §9.3) on a bracket
    with fa >= 0 > fb, stopped when the bracket [b, c] satisfies |c − b| <= 2·rel_tol·|b|.
    The caller reads the bracket from the points ``f`` recorded."""
    c, fc = b, fb
    d = e = b - a
    for _ in range(max_iter):
        if (fb > 0 and fc > 0) or (fb < 0 and fc < 0):  # keep the root between b and c
            c, fc = a, fa
            d = e = b - a
        if abs(fc) < abs(fb):
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol1 = rel_tol * abs(b)
        xm = 0.5 * (c - b)
        if abs(xm) <= tol1 or fb == 0:
            return
        if abs(e) >= tol1 and abs(fa) > abs(fb):
            s = fb / fa
            if a == c:  # secant
                p, q = 2.0 * xm * s, 1.0 - s
            else:  # inverse quadratic interpolation
                q, r = fa / fc, fb / fc
                p = s * (2.0 * xm * q * (q - r) - (b - a) * (r - 1.0))
                q = (q - 1.0) * (r - 1.0) * (s - 1.0)
            if p > 0:
                q = -q
            p = abs(p)
            if 2.0 * p < min(3.0 * xm * q - abs(tol1 * q), abs(e * q)):
                e, d = d, p / q
            else:  # interpolation would not shrink the bracket fast enough: bisect
                d = e = xm
        else:
            d = e = xm
        a, fa = b, fb
        b += d if abs(d) > tol1 else math.copysign(tol1, xm)
        fb = f(b)
