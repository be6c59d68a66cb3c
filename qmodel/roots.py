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
    The caller reads the bracket from the points ``f`` recorded.

    One change to Brent's steps, at the end only: once |c − b| <= 4·tol (tol = rel_tol × the
    bracket's smaller end), the next point is kept within 2·tol of both ends, so it finishes the
    bracket whichever side of the root it falls (docs/methods.md, Stability and goodput). Until
    then the path is Brent's own, and from there Brent needs at least one probe too, so no curve
    takes more probes than with Brent's method, and a curve with steps can take fewer."""
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
        step = d if abs(d) > tol1 else math.copysign(tol1, xm)
        # End-game: a bracket of width w <= 4·tol (tol = rel_tol × its smaller end) is finished by
        # one probe x within 2·tol of both ends, whichever side of the root x falls on; so the step
        # is kept in that window (a bisection always is in it). Unclipped, an interpolated step on
        # a curve with steps or noise can land just inside the same end again and again, each
        # shrinking the bracket by only tol (Brent's minimum step).
        tol = rel_tol * min(abs(b), abs(c))
        w = abs(c - b)
        if w <= 4.0 * tol:
            r = 2.0 * tol * (1.0 - 1e-9)  # a hair inside, so rounding cannot miss the stop
            step = math.copysign(min(max(abs(step), w - r), r), xm)
        a, fa = b, fb
        b += step
        fb = f(b)
