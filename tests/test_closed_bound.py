"""A closed loop's bound on the queue ahead (qmodel.closed, "The loop's bound on the queue ahead"):
the truncated slot-wait law against its definition, the chain truncation, and the loop's solve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaincc

from qmodel.stations.admission import KVWall
from qmodel.stations.decode import GPSChain
from qmodel.stations.decode.slot_wait import (admission_wait, bounded_slot_wait, slot_wait, slot_wait_mean,
                                              slot_wait_survival, wait_law)


def _erlang_mixture(x: np.ndarray, rate: float, r: float, phases: int) -> tuple[np.ndarray, float]:
    """The definition: K = min(G, Q) departures at mu_e = rate/(1 - r), G geometric on 1, 2, ... with
    P(G = k) = (1 - r) r^(k-1) (the open count), its mass beyond Q read as Q."""
    mu = rate / (1.0 - r)
    w = (1.0 - r) * r ** np.arange(phases)
    w[-1] = r ** (phases - 1)
    surv = sum(wk * gammaincc(k + 1, mu * x) for k, wk in enumerate(w))
    return surv, float(np.dot(w, np.arange(1, phases + 1))) / mu


@pytest.mark.parametrize("r, q, rate", [(0.5, 3, 2.0), (0.9, 7, 0.3), (0.99, 40, 1.0), (0.3, 1, 5.0)])
def test_bounded_survival_is_the_capped_erlang_mixture(r, q, rate):
    """The closed form (module doc of slot_wait) against the sum over K, to round-off (1e-12)."""
    x = np.linspace(0.0, 40.0 / rate, 3001)
    surv, mean = _erlang_mixture(x, rate, r, q)
    assert np.max(np.abs(slot_wait_survival(x, rate, r, q) - surv)) < 1e-12
    assert slot_wait_mean(rate, r, q) == pytest.approx(mean, rel=1e-12)


def test_bounded_survival_limits():
    """Q = 1 is Exp(mu_e); Q -> infinity (r^Q negligible) is the open Exp(rate); phases None is open."""
    x = np.linspace(0.0, 10.0, 501)
    assert np.allclose(slot_wait_survival(x, 1.0, 0.6, 1), np.exp(-x / 0.4), rtol=1e-12, atol=1e-15)
    assert np.allclose(slot_wait_survival(x, 1.0, 0.6, 400), np.exp(-x), rtol=1e-9, atol=1e-15)
    assert np.array_equal(slot_wait_survival(x, 1.0, 0.6, None), np.exp(-x))
    assert slot_wait_mean(2.0, 0.6, None) == 0.5


def test_bounded_probability_keeps_the_full_states():
    """An arrival that sees at most cap + room requests: the open states beyond are read as the loop
    full, so P(wait) is the open one and the count ahead is capped (Q = room + 1 departures at most)."""
    r, p_wait = 0.7, 0.4
    for room in (0, 1, 5):
        assert bounded_slot_wait(p_wait, r, room) == (p_wait, room + 1)
    assert bounded_slot_wait(p_wait, r, -1) == (0.0, None)  # N - 1 below the cap: the loop never waits
    assert bounded_slot_wait(p_wait, r, None) == (p_wait, None)  # open
    assert bounded_slot_wait(p_wait, r, 200) == (p_wait, None)  # r^201 negligible: the open law kept


def _chain(cap: int = 8, tok: float = 150.0):
    g = np.linspace(0.02, 0.04, cap + 1)
    g[0] = 0.0
    chain = GPSChain(lambda n: np.interp(n, np.arange(cap + 1), g), cap=cap, slope_inf=0.0)
    pi, tail, rc = chain.solve(tok, cap)
    return pi, tail, rc, g


def test_admission_wait_of_a_loop_below_the_cap_is_none_and_open_when_large():
    pi, tail, rc, g = _chain()
    assert rc > 0.5 and float(pi[-1]) + tail > 0.05  # the open chain waits often
    open_law = admission_wait(pi, tail, rc, 8, float(g[8]), 200.0, 0.3, 1e-3)
    assert open_law is not None
    for n in (1, 4, 8):  # N - 1 < cap: no slot wait
        assert admission_wait(pi, tail, rc, 8, float(g[8]), 200.0, 0.3, 1e-3, clients=n) is None
    nine = admission_wait(pi, tail, rc, 8, float(g[8]), 200.0, 0.3, 1e-3, clients=9)
    p, rate = slot_wait(pi, tail, rc, 8, float(g[8]), 200.0, 0.3)
    assert nine.mean_s == pytest.approx(p / (rate / (1.0 - rc)), rel=1e-9)  # one departure at mu_e
    assert nine.mean_s < open_law.mean_s
    big = admission_wait(pi, tail, rc, 8, float(g[8]), 200.0, 0.3, 1e-3, clients=100_000)
    assert big.mean_s == pytest.approx(open_law.mean_s, rel=1e-12)


def test_kv_wall_bounded_wait_reads_the_chain_up_to_n_minus_one():
    """The soft wall's chain read on n <= N - 1: no wait where N - 1 is below every resident count
    the wall can hold; the open P(wait) for a large loop."""
    cap = 12
    g = np.linspace(0.02, 0.05, cap + 1)
    wall = KVWall(centre=9.0, sd=0.5, cap=cap)
    p_open, _ = wall.slot_wait(g, 150.0, 0.8, 200.0, 0.3)
    assert p_open > 0.05
    assert wall.bounded_wait(g, 150.0, 0.8, 200.0, 0.3, clients=4, dx=1e-3) is None  # M >= 5 with certainty
    few = wall.bounded_wait(g, 150.0, 0.8, 200.0, 0.3, clients=10, dx=1e-3)
    many = wall.bounded_wait(g, 150.0, 0.8, 200.0, 0.3, clients=100_000, dx=1e-3)
    open_law = wait_law(*wall.slot_wait(g, 150.0, 0.8, 200.0, 0.3), 1e-3)
    assert few.mean_s < many.mean_s
    assert 1.0 - float(many.cdf(0.0)) == pytest.approx(p_open, rel=1e-9)
    assert many.mean_s == pytest.approx(open_law.mean_s, rel=1e-9)
    assert math.isfinite(few.quantile(0.99))


# ---- the loop's solve ------------------------------------------------------------------------------

def _capped_loop(n: int, think: float):
    """The colocated constant-step scenario (tests/test_closed_loop.py: 50 ms prefill, 100 x 20 ms steps)
    on one instance holding at most 4 sequences, as a loop of ``n`` clients thinking ``think`` s."""
    from tests.test_closed_loop import _fixed

    from qmodel.closed import with_concurrency

    sc = _fixed()
    pool = sc.deployment.pool.model_copy(update={"instances": 1, "max_batch": 4})
    sc = sc.model_copy(update={"deployment": sc.deployment.model_copy(update={"pool": pool})})
    return with_concurrency(sc, n, think)


def test_a_loop_below_the_slot_cap_never_waits_for_a_slot_and_x_is_the_fixed_points():
    """Four clients (Z = 0.5 s) and four slots: no request ever waits for one. The open chain at the
    seen rate (0.58 of the limit) puts mass on a full pool, and its slot wait made TTFT p90/p99
    0.638/2.141 s against the replay's 0.069/0.114 s (4000 requests); the bounded law has none:
    0.0602/0.0695/0.1117 s against 0.0605/0.0692/0.1140 s (p50/p90/p99, within 2%; the band, 10%, is
    the replay's seed noise at this length). X is the fixed point's, N/(T(seen) + Z), the open T."""
    from qmodel.closed import bounded_solver, mean_latency, solve_closed
    from qmodel.solver import Solver
    from qmodel.validation.replay import replay

    sc = _capped_loop(4, 0.5)
    sol = solve_closed(sc)
    solver = Solver(sc)
    seen = sol.loop.seen_rate_per_s
    assert sol.loop.throughput_per_s == pytest.approx(4 / (mean_latency(solver, seen) + 0.5), rel=1e-4)
    open_ttft = solver.compose(seen).ttft
    rep = replay(sc, n_requests=4000)
    assert open_ttft.quantile(0.99) > 5.0 * rep.ttft.p99  # the old reading: a slot wait the loop never has
    got = sol.result.ttft
    assert (got.p50, got.p90, got.p99) == pytest.approx((rep.ttft.p50, rep.ttft.p90, rep.ttft.p99), rel=0.10)
    station = bounded_solver(solver, 4).compose(seen).stations[0]
    assert station.extra["mean_slot_wait_s"] == 0.0


def test_one_client_keeps_the_empty_deployment_and_a_large_loop_the_open_law():
    from qmodel.closed import bounded_solver, solve_closed
    from qmodel.solver import Solver

    sc = _capped_loop(1, 1.0)
    sol = solve_closed(sc)
    assert sol.loop.mean_latency_s == pytest.approx(2.03, rel=1e-12)
    assert sol.result.ttft.p99 == pytest.approx(0.05, abs=0.021)
    big = _capped_loop(100_000, 1.0)
    solver = Solver(big)
    rate = 0.5 * solver.max_stable_rate()[0]
    a, b = solver.compose(rate).ttft, bounded_solver(solver, 100_000).compose(rate).ttft
    assert np.array_equal(a.pmf, b.pmf) and a.mean_s == b.mean_s
