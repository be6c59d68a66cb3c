"""Colocated TTFT in the arrival SCV (issue 15 item 10): at ca2 = 1 the TTFT switched from the gated
form to the burst (priority M^X/G/1) form, and Gamma cv 1.000 -> 1.001 moved TTFT p90 by up to 17%.
Every percentile must be continuous in the SCV and non-decreasing in it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from qmodel.stations.colocated import ColocatedStation
from tests.des_micro import LinearService

SVC = LinearService(0.010, 0.0001, 0.0, alpha=0.020, gamma=1e-4)
QS = (0.5, 0.9, 0.99)


def _lengths():
    rng = np.random.default_rng(7)
    P = np.maximum(1, np.round(rng.lognormal(math.log(1000) - 0.32, 0.8, 2048)))
    return P, rng.geometric(1 / 200, 2048)


P, L = _lengths()


def _ttft(ca2: float, instances: int = 1, dispatch: str = "random", load: float = 0.5):
    s = ColocatedStation(SVC, P, L, instances=instances, dispatch=dispatch, ca2=ca2)
    d = s.solve(load * s.max_stable_rate_per_s()).delay
    return [d.mean_s] + [d.quantile(q) for q in QS]


@pytest.mark.parametrize("instances,dispatch", [(1, "random"), (2, "least_loaded")])
def test_continuous_at_scv_one(instances, dispatch):
    # SCV 1 and 1 + 2e-6 (cv 1.000001): mean and p50/p90/p99 within 0.1% (one grid step of the
    # 1/64-prefill grid is ~1%, so a form switch cannot hide in this band; the original code moved
    # p99 by 10-15% here)
    a = _ttft(1.0, instances, dispatch)
    b = _ttft(1.000002, instances, dispatch)
    for x, y in zip(a, b):
        assert y == pytest.approx(x, rel=1e-3), (a, b)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(cv=st.floats(0.5, 2.5), dcv=st.floats(1e-4, 0.5), load=st.sampled_from([0.3, 0.6]),
       pool=st.sampled_from([(1, "random"), (2, "least_loaded")]))
def test_percentiles_non_decreasing_in_cv(cv, dcv, load, pool):
    # the mean and every percentile are non-decreasing in the arrival cv (exact by construction:
    # the burst increment is non-negative and grows with the burst size); 1e-9 s for round-off.
    # The original code fails it where the pair straddles cv 1 (least_loaded: p99 -10% there)
    lo = _ttft(cv * cv, *pool, load=load)
    hi = _ttft((cv + dcv) ** 2, *pool, load=load)
    for x, y in zip(lo, hi):
        assert y >= x - 1e-9, (cv, dcv, lo, hi)


@pytest.mark.parametrize("cv,cv_hi,pool,load", [(1.9, 1.9001, (2, "least_loaded"), 0.3),
                                               (1.3477, 1.3516, (2, "least_loaded"), 0.3),
                                               (1.0156, 1.0234, (1, "random"), 0.3),
                                               (1.0156, 1.0234, (2, "least_loaded"), 0.3)])
def test_no_percentile_drop_where_hypothesis_found_one(cv, cv_hi, pool, load):
    # Pairs where a randomised run of the property above found a percentile one grid step lower at
    # the larger cv (p90 0.40859 -> 0.40678 s at cv 1.9 -> 1.9001): burst_increment moved
    # equal-probability points that did not represent base's light cells, clipped the negative mass
    # this left and renormalised, which is not monotone in the increment. It now moves each cell's
    # own mass, so the property holds exactly (1e-9 s for round-off).
    lo = _ttft(cv * cv, *pool, load=load)
    hi = _ttft(cv_hi * cv_hi, *pool, load=load)
    for x, y in zip(lo, hi):
        assert y >= x - 1e-9, (lo, hi)
