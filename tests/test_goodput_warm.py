"""The goodput search's contract and cost on every bundled example, cold and warm-started.

Contract (:func:`qmodel.goodput.goodput_search`): the answer g is the lower end of an evaluated
bracket of width <= REL_TOL·hi (REL_TOL = 1e-3), so the root r of A(λ) = goal satisfies
r·(1 − REL_TOL) <= g <= r and A(g) >= goal, with or without a warm start. The root is read here from
a plain bisection of the same attainment function to 1e-6 relative (the reference answer: main's
search gave the same contract, so any two answers differ by less than REL_TOL); the comparison
allows that bisection's own 1e-6.

Cost: the number of attainment evaluations per search. Cold: at most 8 (measured 5-8 on these
examples: 8 where the bracket starts wide, azure-conv-trace-disagg-a100, or the attainment has steps,
opt13b-colocated-a100, whose TPOT atoms cross the SLO near the goodput; that one took 9 until Brent's
end-game finished a bracket of 4·tol in one probe, qmodel.roots). Warm from the root itself (an edit
that leaves the goodput alone): at most 3. Warm from 10 % off (a sensitivity's perturbation): at
most 9. Per example: ``benchmarks/goodput_search_cost.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from data_needs import example_param
from qmodel.errors import NumericalError
from qmodel.goodput import REL_TOL, goodput_search

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parent.parent / "examples").iterdir()
                  if p.suffix in (".yaml", ".json", ".toml"))
COLD_MAX, SAME_MAX, NEAR_MAX = 8, 3, 9


def _bisect_root(att, lam_max: float, goal: float) -> tuple[float, float]:
    lo, hi = 1e-4 * lam_max, 0.999 * lam_max
    assert att(lo) >= goal > att(hi)  # every example's goodput lies inside the search's range
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if att(mid) >= goal else (lo, mid)
    return lo, hi


@pytest.mark.parametrize("name,path", [example_param(p.stem, p) for p in EXAMPLES])
def test_every_example_within_tolerance_and_count(name: str, path: Path) -> None:
    from qmodel.solver import Solver
    from qmodel.source import as_scenario

    sc = as_scenario(path)
    solver = Solver(sc)
    lam_max, _ = solver.max_stable_rate()
    goal = sc.slo.attainment_goal
    calls: list[float] = []

    def att(x: float) -> float:
        calls.append(x)
        return solver.attainment(x)

    r_lo, r_hi = _bisect_root(solver.attainment, lam_max, goal)
    for guess, cap in ((None, COLD_MAX), (r_lo, SAME_MAX), (0.9 * r_lo, NEAR_MAX), (1.1 * r_lo, NEAR_MAX)):
        calls.clear()
        g, a = goodput_search(att, lam_max, goal, guess=guess)
        assert r_lo * (1 - REL_TOL) * (1 - 1e-12) <= g <= r_hi, (guess, g, r_lo)
        assert a >= goal
        assert len(calls) <= cap, (guess, len(calls))


def test_warm_start_edges() -> None:
    # goodput 0: missed even near idle, from any guess
    assert goodput_search(lambda x: 0.5, 1.0, 0.9, guess=0.3) == (0.0, 0.5)
    # met up to the stability limit: the answer is the cold search's top, 0.999·λmax
    assert goodput_search(lambda x: 1.0, 2.0, 0.9, guess=1.0) == (2.0 * 0.999, 1.0)
    # a guess outside (1e-4, 0.999)·λmax is ignored: the cold search runs
    for guess in (0.0, -1.0, 5.0, math.nan):
        assert goodput_search(lambda x: 0.95 if x <= 0.4321 else 0.2, 1.0, 0.9, guess=guess)[0] == \
            goodput_search(lambda x: 0.95 if x <= 0.4321 else 0.2, 1.0, 0.9)[0]


@pytest.mark.parametrize("guess", [0.01, 0.3, 0.6, 0.98])
def test_warm_start_on_smooth_and_step_curves(guess: float) -> None:
    root = 0.4321
    s = root / (-math.log(0.9)) ** 0.25
    g, a = goodput_search(lambda x: math.exp(-((x / s) ** 4)), 1.0, 0.9, guess=guess)
    assert root * (1 - REL_TOL) <= g <= root and a >= 0.9
    g, a = goodput_search(lambda x: 0.95 if x <= root else 0.2, 1.0, 0.9, guess=guess)
    assert root * (1 - REL_TOL) <= g <= root and a == 0.95


def test_warm_start_guards_non_monotone_noise() -> None:
    # a rise seen among the evaluated rates is refused (falls to 0.5, then rises to 0.85: not a
    # queue's attainment): from a guess above the bump the search walks down across it
    def bumpy(x: float) -> float:
        return 0.95 if x < 0.55 else (0.5 if x < 0.7 else 0.85)

    # (from 0.5 the flat attainment grows the step 64-fold past 0.7: the guard checks the rates
    # evaluated, warm or cold, and a curve whose rise no evaluated rate shows cannot be refused)
    for guess in (0.5, 0.72, 0.8, 0.95):
        with pytest.raises(NumericalError, match="attainment rose"):
            goodput_search(bumpy, 1.0, 0.9, guess=guess)
    # grid-rounding wobble below RISE_TOL on one side of the goal is let through, and the secant
    # that wobble turns the wrong way is overruled by the step doubling
    root = 0.4321

    def wobbly(x: float) -> float:
        base = 1.0 - 0.1 * (x / root) ** 3
        return base + 5e-5 * math.sin(x * 2e4)

    g, a = goodput_search(wobbly, 1.0, 0.9, guess=0.2)
    assert g == pytest.approx(root, rel=2e-3) and a >= 0.9
