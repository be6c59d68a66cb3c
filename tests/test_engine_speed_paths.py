"""The engine's fast paths give the answers of the slow ones: Brent goodput search against the
exact root, merged service samples against the raw sample, the KV link's bounded grids against
the closed-form means, and the engine's reuse of the search's last composition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmodel.errors import NumericalError
from qmodel.goodput import REL_TOL, goodput_search
from qmodel.stations.fcfs import MG1, ServiceSample, mx_g1_mean_wait
from qmodel.stations.kv_transfer import KVTransferStation
from data_needs import example_param


def _bisection_calls(lam_max: float) -> int:
    # the former plain bisection: 2 end points + halvings from (1e-4, 0.999)·λmax to REL_TOL
    lo, hi, n = lam_max * 1e-4, lam_max * 0.999, 2
    while hi - lo > REL_TOL * hi:
        lo, n = 0.5 * (lo + hi), n + 1  # worst case for the count: the root at the top
    return n


@pytest.mark.parametrize("root", [0.05, 0.3, 0.77, 0.995])
def test_search_brackets_a_smooth_root(root: float) -> None:
    # A(λ) = exp(−(λ/s)^4) with A(root) = 0.9 exactly: the answer is the bracket's lower end,
    # so root·(1 − REL_TOL) <= g <= root and A(g) >= goal (REL_TOL is the contract).
    s = root / (-math.log(0.9)) ** 0.25
    calls: list[float] = []

    def att(x: float) -> float:
        calls.append(x)
        return math.exp(-((x / s) ** 4))

    g, a = goodput_search(att, 1.0, 0.9)
    assert root * (1 - REL_TOL) <= g <= root
    assert a >= 0.9 and a == pytest.approx(att(g), abs=0)
    assert len(calls) - 1 <= _bisection_calls(1.0)


@pytest.mark.parametrize("root", [0.2, 0.8])
def test_search_avoids_saturation_when_the_root_is_below_half_load(root: float) -> None:
    # solves near saturation are the dearest: below half load none is made above it
    calls: list[float] = []

    def att(x: float) -> float:
        calls.append(x)
        return 1.0 - x / (2 * root) * 0.2

    g, _ = goodput_search(att, 1.0, 0.9)
    assert root * (1 - REL_TOL) <= g <= root
    assert (max(calls) <= 0.5) == (root < 0.5)


def test_search_handles_a_step_curve() -> None:
    # a discontinuous attainment (a grid artefact taken to the extreme): Brent falls back to
    # bisection and still closes the 0.1 % bracket
    g, a = goodput_search(lambda x: 0.95 if x <= 0.4321 else 0.2, 1.0, 0.9)
    assert 0.4321 * (1 - REL_TOL) <= g <= 0.4321 and a == 0.95


def test_search_edges_and_monotonicity_guard() -> None:
    assert goodput_search(lambda x: 0.5, 1.0, 0.9) == (0.0, 0.5)  # infeasible even when idle
    assert goodput_search(lambda x: 1.0, 2.0, 0.9) == (2.0 * 0.999, 1.0)  # met up to saturation
    assert goodput_search(lambda x: 1.0, math.inf, 0.9) == (0.0, 0.0)

    def bumpy(x: float) -> float:  # falls to 0.5, then rises to 0.85: not a queue's attainment
        return 0.95 if x < 0.55 else (0.5 if x < 0.7 else 0.85)

    with pytest.raises(NumericalError, match="attainment rose"):
        goodput_search(bumpy, 1.0, 0.9)


def test_merged_service_sample_keeps_moments_and_mgf() -> None:
    rng = np.random.default_rng(3)
    raw = rng.integers(1, 50, 4096) * 1e-3  # many repeats, like token counts
    s = ServiceSample.of(raw)
    assert s.values_s.size == np.unique(raw).size
    for k in (1, 2, 3):
        assert s.moment(k) == pytest.approx(np.mean(raw**k), rel=1e-12)
    for eta in (0.1, 3.0, 20.0):
        assert s.expm1_mgf(eta) == pytest.approx(np.mean(np.expm1(eta * raw)), rel=1e-12)
    assert MG1(5.0, s).mean_s == pytest.approx(5.0 * np.mean(raw**2) / (2 * (1 - 5.0 * raw.mean())), rel=1e-12)


def _wide_link() -> KVTransferStation:
    # layer-wise transfers hide almost everything (exposed mean ~1 ms) while the link occupancy
    # has a long tail (1-60 MB-ish at 1 GB/s): the wait's support is ~100x the exposed mean
    rng = np.random.default_rng(5)
    x = np.exp(rng.normal(np.log(5e6), 1.0, 4096))
    return KVTransferStation(x, 1e9, paths=1, sharing="fcfs", mode="layerwise", layers=80, prefill_time_s=1.0)


def _grid_mean(d) -> float:
    return float(np.dot(np.arange(d.n) * d.dx, d.pmf))


@pytest.mark.parametrize("load", [0.02, 0.5, 0.9])
def test_link_grid_is_bounded_and_untruncated(load: float) -> None:
    import dataclasses

    st = _wide_link()
    lam = load * st.max_stable_rate_per_s()
    sol = st.solve(lam)
    # the grid covers the wait's 1 − 1e-9 quantile within 16384 (+ exposed) bins: no truncation
    assert sol.delay.n <= 2 * 16384 + 2
    assert sol.delay.tail < 1e-8
    assert sol.extra["mean_wait_s"] == pytest.approx(MG1(lam, st.service).mean_s, rel=1e-12)  # P-K, exact
    # the same law on a 16x finer grid: quantiles agree to the coarse grid's rounding (one bin
    # per convolved term, two terms) and so does the grid mean
    fine = dataclasses.replace(st, dx=sol.delay.dx / 16).solve(lam)
    assert fine.delay.dx < sol.delay.dx
    for q in (0.5, 0.9, 0.99):
        assert sol.delay.quantile(q) == pytest.approx(fine.delay.quantile(q), abs=2 * sol.delay.dx)
        assert sol.delay.quantile(q) >= fine.delay.quantile(q) - 1e-12  # rounding up: conservative
    assert _grid_mean(sol.delay) == pytest.approx(_grid_mean(fine.delay), abs=2 * sol.delay.dx)


def test_batch_release_grid_mean_matches_the_exact_mean() -> None:
    st = _wide_link()
    pk = np.array([0.2, 0.3, 0.3, 0.2])
    k = np.arange(1, 5)
    lam = 0.6 * st.max_stable_rate_per_s()
    sol = st.solve(lam, batch_rate_per_s=lam / float(pk @ k), batch_size_pmf=pk)
    svc = st.service
    want = mx_g1_mean_wait(lam / float(pk @ k), float(pk @ k), float(pk @ (k * k)), svc.mean_s, svc.moment(2))
    assert sol.extra["mean_wait_s"] == pytest.approx(want, rel=1e-12)
    w = sol.wait
    assert w.n <= 2 * 16384 + 2
    # the same law on a 16x finer grid (what the engine did before): same quantiles to 2 bins
    fine = st.solve(lam, batch_rate_per_s=lam / float(pk @ k), batch_size_pmf=pk, dx=w.dx / 16)
    for q in (0.5, 0.9, 0.99):
        assert sol.delay.quantile(q) == pytest.approx(fine.delay.quantile(q), abs=2 * sol.delay.dx)
    assert _grid_mean(w) == pytest.approx(_grid_mean(fine.wait), abs=2 * w.dx)


def test_per_rate_variant_shares_the_service_law() -> None:
    st = _wide_link()
    svc = st.service
    sol = st.solve(0.5 * st.max_stable_rate_per_s(), prefill_time_s=np.full(4096, 0.5))
    assert st.service is svc  # the per-rate variant did not rebuild (or replace) it
    assert sol.extra["mean_wait_s"] > 0


@pytest.mark.parametrize("rho", [0.02, 0.5, 0.95, 0.999])
def test_cramer_lundberg_newton_root(rho: float) -> None:
    from qmodel.stations.fcfs import cramer_lundberg

    # M/D/1: e^{ηD} = 1 + η/λ exactly; and a heavy-tailed sample: the defining equation's residual
    # is at round-off (Newton stops at a step of 1e-15 η)
    eta, _ = cramer_lundberg(rho, ServiceSample.of(1.0))
    assert math.exp(eta) == pytest.approx(1.0 + eta / rho, rel=1e-12)
    v = np.exp(np.random.default_rng(2).normal(0.0, 1.5, 3000))
    s = ServiceSample.of(v)
    lam = rho / s.mean_s
    eta, const = cramer_lundberg(lam, s)
    assert lam * s.expm1_mgf(eta) == pytest.approx(eta, rel=1e-11)
    assert const == pytest.approx((1 - rho) / (lam * s.mgf_s(eta) - 1), rel=1e-12)


@pytest.mark.parametrize("example,load", [example_param("opt13b-disagg-a100", 0.8),
                                          example_param("azure-conv-trace-disagg-a100", 0.5),
                                          example_param("llama3-70b-disagg-h100", 0.9)])
def test_link_on_its_readers_step_gives_the_fine_links_answers(example: str, load: float,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The composition solves the link no finer than the step its readers re-bin it to (the decode
    # wait's, a 64th of the TTFT's). Against the link on its own fine default grid, the TTFT and
    # TPOT quantiles may move up by the coarse step's rounding: at most one TTFT step, and one
    # TPOT step (the handoff enters TPOT divided by L − 1); the attainments by 1e-3 absolute.
    from pathlib import Path

    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario

    path = Path(__file__).resolve().parent.parent / "examples" / f"{example}.yaml"
    solver = Solver(load_scenario(path))
    rate = load * solver.max_stable_rate()[0]
    coarse = solver.compose(rate)
    assert coarse.stations[1].delay.dx >= coarse.stations[2].wait.dx or \
        coarse.stations[1].delay.dx >= coarse.stations[0].delay.dx / 64
    fine_solve = KVTransferStation.solve

    def no_floor(self, *args, dx_floor=None, **kw):  # noqa: ANN001 -- the station's own signature
        return fine_solve(self, *args, **kw)

    monkeypatch.setattr(KVTransferStation, "solve", no_floor)
    fine = Solver(load_scenario(path)).compose(rate)
    assert fine.stations[1].delay.dx <= coarse.stations[1].delay.dx  # (equal where the span sets the step)
    for q in (0.5, 0.9, 0.99):
        for c_law, f_law in ((coarse.ttft, fine.ttft), (coarse.tpot, fine.tpot)):
            assert f_law.quantile(q) - 1e-12 <= c_law.quantile(q) + f_law.dx
            assert c_law.quantile(q) <= f_law.quantile(q) + c_law.dx + 1e-12
    assert coarse.attainment == pytest.approx(fine.attainment, abs=1e-3)


@pytest.mark.parametrize("example", [example_param(e) for e in ("opt13b-disagg-a100", "llama3-70b-disagg-h100",
                                                                 "azure-conv-trace-disagg-a100")])
def test_eager_laws_are_the_lazy_ones(example: str) -> None:
    # solve() composes with laws=True: the TTFT/TPOT laws built at once and the attainments read
    # from them, the link's delay summed from its wait. The lazy path (a goodput search's) must
    # give the same laws and attainments, to round-off and the 1e-12 trimming.
    from pathlib import Path

    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario

    solver = Solver(load_scenario(Path(__file__).resolve().parent.parent / "examples" / f"{example}.yaml"))
    rate = 0.7 * solver.max_stable_rate()[0]
    lazy, eager = solver.compose(rate), solver.compose(rate, laws=True)
    for a, b in ((lazy.attainment, eager.attainment), (lazy.ttft_attainment, eager.ttft_attainment),
                 (lazy.tpot_attainment, eager.tpot_attainment)):
        assert a == pytest.approx(b, abs=1e-12)
    for x, y in ((lazy.ttft, eager.ttft), (lazy.tpot, eager.tpot), (lazy.stations[1].delay, eager.stations[1].delay),
                 (lazy.stations[1].wait, eager.stations[1].wait)):
        assert x.dx == y.dx and x.mean_s == y.mean_s
        # (the lengths may differ by bins of negligible mass: the eager link trims its wait first)
        pts = np.arange(max(x.n, y.n)) * x.dx
        assert np.abs(x.cdf(pts) - y.cdf(pts)).max() <= 1e-12
        assert x.summary() == y.summary()
