"""Heavy traffic in the prefill bulk-service chain (docs/methods.md, "Heavy traffic").

Where the window of 8 decay lengths (2b + 40 + 8/ln z0 states) exceeds 4b + 200, the chain is
solved on a window of 4b + 200 states with the exact geometric tail as its boundary: the
subdominant roots have decayed within a few b, so the longer window changes π only by round-off.
Past 16384 explicit states π continues as that geometric tail in closed form, and past 4096 counts
ahead the wait grid stops and the wait law continues as its exact exponential tail, e^{−λ(z0−1)t}
(GridDist.tail_exact): 0.9999 of a prefill limit solves (on 62e9c4d: NumericalError "needs N states").
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import qmodel.stations.prefill as prefill
from qmodel.dist import GridDist
from qmodel.stations.prefill import BatchServiceLaw, BulkQueue

LAW = BatchServiceLaw.deterministic_times([0.2 + 0.25 * k for k in range(1, 5)])  # the M/D^[1,4]/1 golden


def _window(q: BulkQueue) -> int:
    q._size  # (sets the decay root z0)
    return int(math.ceil(2 * q.b + 40 + 8.0 / math.log(q._z0)))


def test_capped_window_equals_the_full_window_past_6000_states() -> None:
    lim = BulkQueue(1.0, LAW).max_rate
    q = BulkQueue(0.9995 * lim, LAW)
    n = _window(q)
    assert 6000 < n < q._size  # the load main refused
    pi = q._pi_flags  # capped window (4b + 200 = 216 states)
    full = q.pi_window(n)  # 8 decay lengths, as below 6000 states (2.4 s)
    # tolerance: both are normalised π on the same states; the solves differ by round-off (~1e-12 measured)
    assert float(np.abs(pi - full).max()) < 1e-11
    # normalised with the implicit geometric states past the explicit 16384 (BulkQueue._size)
    assert pi.min() >= 0.0 and pi.sum() + q._far_mass == pytest.approx(1.0, abs=1e-12)
    # throughput identity: completions × mean batch = λ (exact for any π that is stationary)
    assert q._cycle["throughput"] == pytest.approx(q.lam, rel=1e-9)


def test_mean_wait_grows_like_one_over_one_minus_load() -> None:
    # heavy-traffic limit: (1 − ρ) W tends to a constant; measured 0.1479, 0.1496, 0.1498, 0.1499 at
    # 0.99, 0.998, 0.999, 0.9995 (the last past the old cap). 5e-4: the O(1 − ρ) correction at 0.999.
    lim = BulkQueue(1.0, LAW).max_rate
    w = {f: (1 - f) * BulkQueue(f * lim, LAW).mean_wait_s for f in (0.999, 0.9995)}
    assert w[0.9995] == pytest.approx(w[0.999], abs=5e-4)
    assert all(math.isfinite(v) and v > 0 for v in w.values())


def test_far_states_in_closed_form_equal_explicit_states(monkeypatch) -> None:
    # past 16384 explicit states the settled regime's π_{N+m} = π_N z0^{-m} enters every cycle sum
    # as a geometric series (rows affine in j): the same sums as 28000 explicit states, to round-off
    lim = BulkQueue(1.0, LAW).max_rate
    q = BulkQueue(0.9995 * lim, LAW)
    q._pi_flags  # (sets the implicit states' mass)
    assert q._size == 16384 and q._far and 0.0 < q._far_mass < 1.0
    monkeypatch.setattr(prefill.chain, "_STATES_MAX", 10**6)
    full = BulkQueue(0.9995 * lim, LAW)
    assert full._size > 16384 and not full._far
    for key, v in q._cycle.items():
        assert v == pytest.approx(full._cycle[key], rel=1e-10), key
    assert q.mean_wait_s == pytest.approx(full.mean_wait_s, rel=1e-10)


def test_mm1_wait_at_0_9999_has_the_exact_exponential_tail(monkeypatch) -> None:
    # b = 1, exponential batch times: M/M/1, P(W > t) = ρ e^{−(μ−λ)t} exactly. At ρ = 0.9999 the grid
    # holds the first 512 counts ahead (monkeypatched: the default 4096 takes ~10 s with b = 1) and the
    # tail the rest. Tolerances: the grid part rounds each service time up to its step (measured
    # 7.0e-5 / 2.1e-5 / 1.1e-5 on p50 / p90 / p99; on the CDF -3.5e-6 at 10 s, -1.8e-5 at 1e4 s, -4.9e-8 at 1.5 p99).
    monkeypatch.setattr(prefill.wait_grids, "_COUNT_MAX", 512)
    rho = 0.9999
    q = BulkQueue(rho, BatchServiceLaw.exponential(1.0, 1))
    w, d, _ = q.grids()
    eta = 1.0 - rho
    assert w.tail_exact and w.tail > 0.9 and w.tail_rate == pytest.approx(eta, rel=1e-9)
    for p in (0.5, 0.9, 0.99):
        assert w.quantile(p) == pytest.approx(math.log(rho / (1.0 - p)) / eta, rel=5e-4)
    for t in (10.0, 1e4, 7e4):
        assert float(w.cdf(t)) == pytest.approx(1.0 - rho * math.exp(-eta * t), abs=5e-5)
    assert q.mean_wait_s == pytest.approx(rho / eta, rel=1e-8)
    assert d.quantile(0.99) > w.quantile(0.99) and d.tail_exact


def test_exact_tail_cdf_reads_the_exponential_past_the_grid() -> None:
    g = GridDist(0.5, np.array([0.2, 0.3, 0.1]), 1.0, tail=0.4, tail_rate=2.0, tail_exact=True)
    assert float(g.cdf(1.0)) == pytest.approx(0.6)
    assert float(g.cdf(1.75)) == pytest.approx(1.0 - 0.4 * math.exp(-2.0 * 0.75))
    assert np.allclose(g.cdf(np.array([0.0, 1.75, np.inf])), [0.2, 1.0 - 0.4 * math.exp(-1.5), 0.6])
    q = g.quantile(0.95)
    assert float(g.cdf(q)) == pytest.approx(0.95, abs=1e-12)  # cdf and quantile read one tail
    assert float(g.regrid(1.0).cdf(10.0)) > 0.99 and g.trimmed().tail_exact
    plain = GridDist(0.5, np.array([0.2, 0.3, 0.1]), 1.0, tail=0.4, tail_rate=2.0)
    assert float(plain.cdf(1.75)) == pytest.approx(0.6)  # without it: 1 − tail (conservative)


@pytest.mark.parametrize("frac", [0.992, 0.995])
def test_heavy_wait_grid_equals_the_full_grid_where_both_run(monkeypatch, frac) -> None:
    # llama3-70b-disagg-h100 (no data folder): past 4096 counts ahead the grid stops at the exact part
    # and the tail continues it; a count cap above every state gives the full grid. Percentiles:
    # measured equal to 1.9e-6 (0.992) and 4e-4 / 1e-3 / 2e-3 (p50 / p90 / p99 at 0.995, where the full grid's own
    # tail decays 8% slower than λ(z0−1), rounding every drained batch time up to its step)
    from data_needs import EXAMPLES
    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario

    st = Solver(load_scenario(EXAMPLES / "llama3-70b-disagg-h100.yaml"))._prefill
    rate = frac * st.max_stable_rate_per_s()
    w, d, _ = st.queue(rate).grids(st.dx)
    monkeypatch.setattr(prefill.wait_grids, "_COUNT_MAX", 10**6)
    w_full, d_full, _ = st.queue(rate).grids(st.dx)
    assert w.tail_exact and w.tail > 0 and not w_full.tail_exact
    tol = {0.992: 1e-5, 0.995: 3e-3}[frac]
    for p in (0.5, 0.9, 0.99):
        assert w.quantile(p) == pytest.approx(w_full.quantile(p), rel=tol)
        assert d.quantile(p) == pytest.approx(d_full.quantile(p), rel=tol)
