"""Attainment is non-increasing in the arrival rate (issue 15, "Properties to add").

A(λ) = P(TTFT <= x, TPOT <= y) cannot rise with λ for the FCFS, bulk and GPS stations the solver
composes (Lindley coupling: every wait is pathwise non-decreasing in the arrival rate), and the
goodput search relies on it (qmodel/goodput.py raises NumericalError when it sees a rise). Checked
on the library's :meth:`Solver.compose` for pairs of rates in (0, 0.99·λmax), on the examples and on
variants of them (instances, TP, link bandwidth, SLO), for A and for each factor (TTFT and TPOT
attainment). The tolerance is goodput.py's own monotonicity tolerance, 1e-6 in attainment (the
grids' round-off; a truncation artefact is orders larger).
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

import pytest

from qmodel.engine import Solver
from tests.prop_scenarios import CHEAP, SCENARIOS, label, variant, variants

TOL = 1e-6  # qmodel/goodput.py _check_monotone's tolerance on attainment
ROUND = 1e-12  # float round-off on a probability summed from grid masses
TOP = 0.99  # compose's domain here: inside the fraction where every chain truncates (Solver.attainment)


def _check(name: str, sets: tuple[str, ...], f1: float, f2: float) -> None:
    s = Solver(variant(name, sets))
    lam = s.max_stable_rate()[0]
    lo, hi = sorted((f1, f2))
    a, b = s.compose(lo * lam), s.compose(hi * lam)
    where = f"{label(name, sets)}: rates {lo * lam:.6g} < {hi * lam:.6g} req/s (λmax {lam:.6g})"
    for what, x, y in (("attainment", a.attainment, b.attainment), ("TTFT attainment", a.ttft_attainment,
                                                                   b.ttft_attainment),
                       ("TPOT attainment", a.tpot_attainment, b.tpot_attainment)):
        # a probability, to round-off (GridDist.cdf sums grid masses: 1 + 2.2e-16 seen at light load)
        assert -ROUND <= x <= 1.0 + ROUND and -ROUND <= y <= 1.0 + ROUND, (where, what, x, y)
        assert y <= x + TOL, f"{what} rose from {x:.9f} to {y:.9f}: {where}"


_FRAC = st.floats(1e-3, TOP)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(v=variants(CHEAP), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate(v, f1, f2):
    _check(*v, f1, f2)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(name=st.sampled_from([s for s in SCENARIOS if s not in CHEAP]), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate_on_the_large_examples(name, f1, f2):
    _check(name, (), f1, f2)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True)
@given(v=variants(SCENARIOS), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate_wide(v, f1, f2):
    _check(*v, f1, f2)
