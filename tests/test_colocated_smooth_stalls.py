"""Colocated TPOT under smoother per-instance arrivals (issue 18 §3, colocated tails): a round-robin or
least_loaded pool deals each instance every c-th arrival (c_a^2 / c), Gamma cv < 1 arrivals have
c_a^2 < 1. The prefill stalls of a decode life then have the diffusion variance
lam E[S]^2 (c_a^2 + c_s^2) / (1 - rho)^3 per unit decode work, not M/G/1's lam E[S^2] / (1 - rho)^3:
busy periods scaled by r = (c_a^2 + c_s^2) / (1 + c_s^2), their rate by 1 / r (the mean kept)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmodel.stations.colocated import ColocatedStation
from tests.des_micro import LinearService

SVC = LinearService(0.010, 0.0001, 0.0, alpha=0.020, gamma=1e-4)


def _station(dispatch: str, ca2: float = 1.0) -> ColocatedStation:
    rng = np.random.default_rng(7)
    P = np.maximum(1, np.round(rng.lognormal(math.log(1000) - 0.32, 0.8, 2048)))
    return ColocatedStation(SVC, P, rng.geometric(1 / 200, 2048), instances=2, dispatch=dispatch, ca2=ca2)


def test_smoother_arrivals_keep_the_mean_and_narrow_the_tail() -> None:
    # exact: the life's stall rate x mean jump is unchanged (rate / r, jumps x r), so the mean TPOT is
    # the random split's to round-off; round robin (c_a^2 = 1/2 per instance) narrows p90 and p99
    rr, rnd = _station("round_robin"), _station("random")
    lam = 0.8 * rnd.max_stable_rate_per_s()
    a, b = rr.solve(lam).tpot, rnd.solve(lam).tpot
    assert a.mean_s == pytest.approx(b.mean_s, rel=1e-12)
    assert a.quantile(0.9) < b.quantile(0.9) and a.quantile(0.99) < b.quantile(0.99)


def test_tpot_tail_non_decreasing_in_the_arrival_scv() -> None:
    # r rises with c_a^2 to 1 at c_a^2 = 1, where the burst form takes over: p90 / p99 never drop
    st = [_station("random", ca2) for ca2 in (0.25, 0.5, 0.9, 1.0, 1.1, 1.5)]
    lam = 0.8 * st[3].max_stable_rate_per_s()
    prev = (0.0, 0.0)
    for s in st:
        t = s.solve(lam).tpot
        cur = (t.quantile(0.9), t.quantile(0.99))
        assert cur[0] >= prev[0] - t.dx and cur[1] >= prev[1] - t.dx, (s.ca2, prev, cur)
        prev = cur


def test_round_robin_pool_tpot_against_replay() -> None:
    # Corpus case c0062's set-up (deepseek-v3, 4 x H100 TP8 PP2, lognormal prompts ~1.7k / outputs ~38
    # tokens, Gamma cv 0.79 arrivals) with round-robin dispatch at 0.9 of the limit. Replay, seeds 0..1
    # x 20k requests: TPOT p50/p90/p99 194.1/215.2/245.1 ms (p99 per seed 241.8/248.4 ms). M/G/1 busy
    # periods (the form for any dispatch): 171.6/238.3/337.1 ms (-12/+11/+38%); with c_a^2 = 0.62/4
    # per instance: 174.7/213.9/274.3 ms (-10/-1/+12%). Not asserted: p50, low by the replay's higher
    # prefill share under round robin (its mean TPOT is 15% above random dispatch's; the model's is
    # the same for both). Bands: those errors plus the replay's noise (~2% at p99).
    from qmodel.scenario import parse_scenario
    from qmodel.solver import Solver
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    sc = parse_scenario({
        "name": "smooth-tpot", "model": "deepseek-v3",
        "workload": {"arrivals": {"kind": "gamma", "rate_per_s": 1.0, "cv": 0.789},
                     "lengths": {"kind": "lognormal", "prompt_median_tokens": 1711.4, "prompt_sigma": 0.698,
                                 "prompt_max_tokens": 16384, "output_median_tokens": 37.7, "output_sigma": 0.646,
                                 "output_max_tokens": 2048}},
        "slo": {"ttft_s": 0.925, "tpot_s": 0.03104},
        "deployment": {"topology": "colocated",
                       "pool": {"gpu": "h100-sxm", "tp": 8, "pp": 2, "instances": 4, "max_batch": 128,
                                "dispatch": "round_robin"}}}, source="smooth-tpot")
    sc = sc.with_rate(0.9 * Solver(sc).max_stable_rate()[0])
    a = Solver(sc).solve().tpot
    reps = [latency_metrics(replay(sc, n_requests=20000, seed=sd)) for sd in range(2)]
    rep = {k: float(np.mean([r[k] for r in reps])) for k in ("tpot_p90", "tpot_p99")}
    assert -0.05 <= a.p90 / rep["tpot_p90"] - 1.0 <= 0.05, (a.p90, rep)
    assert -0.05 <= a.p99 / rep["tpot_p99"] - 1.0 <= 0.20, (a.p99, rep)
