"""Colocated TTFT near the knee (issue 18): the KV wall past the heavy-traffic onset, and the resident
count's peakedness under non-Poisson arrivals (qmodel/stations/admission.py; docs/validation.md,
"Colocated TTFT near the knee")."""

from __future__ import annotations

import math

import numpy as np
import pytest

#: corpus c0074 (data-free: lognormal lengths, roofline): one Mixtral-8x7B H200 engine, max_batch 4,
#: Gamma cv 0.85 arrivals; its heavy-traffic onset is at 0.70 of the limit
_ONSET_CASE = {
    "name": "ht-onset", "model": "mixtral-8x7b",
    "workload": {"arrivals": {"kind": "gamma", "rate_per_s": 1.0, "cv": 0.851},
                 "lengths": {"kind": "lognormal", "prompt_median_tokens": 253.8, "prompt_sigma": 0.485,
                             "prompt_max_tokens": 16384, "output_median_tokens": 259.3, "output_sigma": 0.614,
                             "output_max_tokens": 2048, "correlation": 0.0}},
    "slo": {"ttft_s": 0.2585, "tpot_s": 0.0323},
    "deployment": {"topology": "colocated",
                   "pool": {"gpu": "h200-sxm", "tp": 1, "instances": 1, "kv_memory_fraction": 0.9, "max_batch": 4,
                            "dispatch": "least_loaded"},
                   "max_batch_tokens": 16384},
    "perf": {"kind": "roofline", "efficiency": "curves"},
}


def test_wall_past_heavy_traffic_onset_against_replay():
    # Past the onset (0.70 of the limit) the admission wait was the slot wait frozen at the onset plus
    # the batch's backlog: at 0.85 TTFT mean/p90/p99 1.33/3.77/10.0 s against the replay's
    # 3.49/10.5/22.5 s (-62/-64/-55%; at 0.925, corpus c0074: -86/-83/-80% on p50/p90/p99). The wall
    # read at the rate: 3.20/9.59/22.0 s (-8/-9/-2%). Replay, seeds 0 and 1 x 20k requests: mean
    # 3.94/3.04, p90 11.7/9.3, p99 25.0/20.0 s, so the 2-seed mean carries ~13% (one standard error):
    # band 25%. p50 is not asserted (P(wait) ~ 0.5 there: 0.91 s against 1.04 s, seeds 1.32/0.77).
    from qmodel.scenario import parse_scenario
    from qmodel.solver import Solver
    from qmodel.validation.replay import replay

    sc = parse_scenario(_ONSET_CASE)
    solver = Solver(sc)
    lam = solver.max_stable_rate()[0]
    station = solver.stations["colocated"]
    assert station._onset[0] < 0.75 * lam  # the case is past the onset at 0.85
    rate = 0.85 * lam
    got = solver.solve(rate).ttft
    reps = [replay(sc.with_rate(rate), n_requests=20000, seed=s).ttft for s in (0, 1)]
    for q in ("mean", "p90", "p99"):
        want = float(np.mean([getattr(r, q) for r in reps]))
        assert getattr(got, q) == pytest.approx(want, rel=0.25), q


def test_wall_wait_grows_past_onset():
    # the wall's wait is read at the rate: its mean rises with the rate past the onset, to the limit
    from qmodel.scenario import parse_scenario
    from qmodel.solver import Solver

    solver = Solver(parse_scenario(_ONSET_CASE))
    lam = solver.max_stable_rate()[0]
    means = [solver.solve(u * lam).ttft.mean for u in (0.75, 0.85, 0.95, 0.99)]
    assert all(b > 1.5 * a for a, b in zip(means, means[1:])), means


def test_holding_overlap_exact():
    # h = E[min(L, L')]/E[L]: equal lengths 1; {1, 3}: pairs (1,1), (1,3), (3,1), (3,3) -> mean min 1.5
    # over mean 2 = 0.75; exponential lengths 1/2 (a 200k sample: standard error ~0.002, band 0.01)
    from qmodel.stations.admission import holding_overlap

    assert holding_overlap(np.full(10, 37.0)) == pytest.approx(1.0, rel=1e-12)
    assert holding_overlap(np.array([3.0, 1.0])) == pytest.approx(0.75, rel=1e-12)
    assert holding_overlap(np.random.default_rng(0).exponential(100.0, 200_000)) == pytest.approx(0.5, abs=0.01)


def test_count_peakedness_against_gi_m_inf():
    # GI/M/inf with Gamma gaps (SCV c^2, rate lam, holding mean 1/mu): the count's exact peakedness is
    # z = 1/(1 - f(mu)) - lam/mu, f the gaps' Laplace transform (1 + mu c^2/lam)^(-1/c^2). The model's
    # z_free = 1 + h (c^2 - 1) with h = 1/2 (exponential holding) is its heavy-traffic limit, slightly
    # high for bursty gaps at few residents: measured +0.5/+1.6/+4.0% at c^2 2/4/9 and 30 residents,
    # +0.2/+0.5/+1.3% at 100, under 0.5% for c^2 <= 1: band 5%. Poisson: 1 exactly.
    from qmodel.stations.admission import count_peakedness

    assert count_peakedness(1.0, 0.5) == (1.0, 1.0)
    for a in (30.0, 100.0):
        for c2 in (0.25, 0.5, 2.0, 4.0, 9.0):
            f = (1.0 + c2 / a) ** (-1.0 / c2)
            exact = 1.0 / (1.0 - f) - a
            z_free, z_blocked = count_peakedness(c2, 0.5)
            assert z_free == pytest.approx(exact, rel=0.05), (a, c2)
            assert z_blocked == pytest.approx((c2 + 1.0) / 2.0, rel=1e-12)
    assert math.isclose(count_peakedness(0.0, 1.0)[0], 1e-3)  # a deterministic count, kept positive
