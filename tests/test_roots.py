"""The one bracketing root finder (qmodel.roots.brent), used by the goodput search and the planner."""

from __future__ import annotations

import math

from qmodel.planner.bracket import root_bracket
from qmodel.roots import brent


def test_brent_brackets_the_exact_root_within_tolerance() -> None:
    # f(x) = 2 - x^3, non-increasing, root 2^(1/3); the recorded points must bracket it to rel_tol
    root = 2.0 ** (1.0 / 3.0)
    seen: list[tuple[float, float]] = []

    def f(x: float) -> float:
        seen.append((x, 2.0 - x ** 3))
        return seen[-1][1]

    brent(f, 0.5, 3.0, 2.0 - 0.125, 2.0 - 27.0, 0.5e-6)
    lo = max(x for x, v in seen if v >= 0)
    hi = min(x for x, v in seen if v < 0)
    assert lo <= root <= hi and hi - lo <= 1e-6 * hi
    assert len(seen) <= 12  # superlinear on a smooth f: bisection alone needs ~22 for 1e-6


def test_planner_root_bracket_uses_it_and_keeps_its_contract() -> None:
    # a step function (no interpolation helps): the bracket still closes by bisection, lo feasible
    step = 0.37
    x_lo, f_lo, x_hi, f_hi, calls = root_bracket(lambda x: 1.0 if x <= step else -1.0, 0.0, 1.0, 1.0, -1.0, 1e-3)
    assert x_lo <= step < x_hi and x_hi - x_lo <= 1e-3 * x_hi and f_lo > 0 > f_hi
    assert calls <= 20
    # a smooth transcendental f: cos on [0, 3], root pi/2
    x_lo, *_ = root_bracket(lambda x: math.cos(x), 0.0, 1.0, 3.0, math.cos(3.0), 1e-6)
    assert abs(x_lo - math.pi / 2) <= 1e-6 * math.pi
