"""Colocated TPOT in a full batch (qmodel/stations/slot_stalls.py): prefills only into free slots."""

from __future__ import annotations

import numpy as np
import pytest

from qmodel.stations.colocated import ColocatedStation
from qmodel.stations.slot_stalls import full_batch_stalls, full_share
from tests.des_micro import simulate_colocated
from tests.test_stations_colocated import SVC, _lengths


def _station(cap: int) -> ColocatedStation:
    P, L = _lengths(np.random.default_rng(7), 4096)
    return ColocatedStation(SVC, P, L, max_batch=cap)


def test_full_share_exact() -> None:
    # f = c P(n >= c) / E[min(n, c)]: pi = (0.5, 0.3, 0.2), no tail, c = 2 -> 2 * 0.2 / (0.3 + 0.4)
    assert full_share(np.array([0.5, 0.3, 0.2]), 0.0, 2) == pytest.approx(0.4 / 0.7, rel=1e-12)
    # the waiting tail counts as full: pi = (0.5, 0.3, 0.1) + tail 0.1 -> 2 * 0.2 / (0.3 + 0.2 + 0.2)
    assert full_share(np.array([0.5, 0.3, 0.1]), 0.1, 2) == pytest.approx(0.4 / 0.7, rel=1e-12)
    assert full_share(np.array([0.4, 0.6]), 0.0, 1) == 1.0  # one slot: a resident is always in a full batch
    assert full_share(np.array([0.5, 0.5]), 0.0, None) == 0.0
    assert full_share(np.array([0.5, 0.3, 0.2]), 0.0, 8) == 0.0  # chain truncated below the cap


def test_full_batch_stalls_keep_the_mean_and_pass_through_below_the_cap() -> None:
    bp = np.linspace(0.01, 0.5, 1024)
    own = np.linspace(0.0, 0.2, 256)
    one = np.linspace(0.02, 0.04, 100)
    assert full_batch_stalls(0.0, bp, 0.7, own, one, 2.0, 0.3, 8, 99.0, 0.01) == (bp, 0.7, own)
    life, rate, own_j = full_batch_stalls(0.4, bp, 0.7, own, one, 2.0, 0.3, 8, 99.0, 0.01)
    r_one = 0.4 * 7 * 0.7 / (2.0 * 99.0 * 0.01)
    assert rate == pytest.approx(0.7 * 0.6 + r_one, rel=1e-12)
    # rate x mean jump = the busy-period part's plus the lone prefills' (exact after the rescale)
    assert rate * life.mean() == pytest.approx(0.7 * 0.6 * bp.mean() + r_one * one.mean(), rel=1e-12)
    assert own_j.mean() == pytest.approx(0.6 * own.mean(), rel=1e-12)


@pytest.mark.parametrize("u", [0.5, 0.9])
def test_one_slot_tpot_is_one_decode_step(u: float) -> None:
    # max_batch 1: no prefill ever interrupts a decode life, so TPOT = t_d(1) = 10 ms + 0.1 ms exactly
    # (the step DES gives 0.0101 s at every percentile; the busy-period form put p99 at +44 / +68%)
    st = _station(1)
    s = st.solve(u * st.max_stable_rate_per_s())
    for q in (0.5, 0.9, 0.99):
        assert s.tpot.quantile(q) == pytest.approx(0.0101, abs=s.tpot.dx)


@pytest.mark.parametrize("cap", [4, 16])
def test_full_batch_tpot_against_des(cap: int) -> None:
    # Step DES with the slot cap (4000 s, u = 0.9 of the limit). Measured (docs/validation.md,
    # "Colocated TPOT in a full batch"): cap 4 p90/p99 +3.2/+10.4%, cap 16 +8.5/+29.2% (the busy-period
    # form: +12.7/+53.3% and +14.7/+64.1%). Bands: those errors plus the DES noise of this run length
    # (~2% p90, ~5% p99).
    st = _station(cap)
    lam = 0.9 * st.max_stable_rate_per_s()
    s = st.solve(lam)
    run = simulate_colocated(lam, _lengths, SVC, 4000.0, seed=1, max_batch=cap)
    tp = np.quantile(run.tpot, [0.5, 0.9, 0.99])
    err = [s.tpot.quantile(q) / d - 1.0 for q, d in zip((0.5, 0.9, 0.99), tp)]
    assert abs(err[0]) <= 0.04
    assert -0.03 <= err[1] <= 0.11
    assert -0.05 <= err[2] <= 0.35
