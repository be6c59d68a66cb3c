"""Decode station: golden GPS values (docs/reference_values.md §6.5), Little's law, slot cap table (docs/reference_values.md §2.7), DES checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from qmodel.errors import InputError, UnstableError
from qmodel.stations.decode import DecodeStation, fit_affine, mean_context_tokens
from tests.des_micro import LinearService, simulate_decode

A, B, EL = 0.010, 0.0001, 200


def _station(L=None, **kw) -> DecodeStation:
    L = np.full(1000, EL) if L is None else L
    return DecodeStation(LinearService(A, B), np.zeros(len(L)), L, **kw)


# docs/reference_values.md §6.5: x = lam * 0.02; (E[N], Var N, N p50/p90/p99, mean TPOT ms, quasi-static p50/p90/p99 ms)
GOLDEN = [
    (25.0, 101, 202, (100, 120, 136), 20.20, (20.10, 22.10, 23.70)),
    (40.0, 404, 2020, (403, 462, 515), 50.50, (50.40, 56.30, 61.60)),
    (45.0, 909, 9090, (906, 1033, 1145), 101.0, (100.70, 113.40, 124.60)),
]


@pytest.mark.parametrize("lam,en,var,nq,tpot,tq", GOLDEN)
def test_golden_gps_table(lam, en, var, nq, tpot, tq):
    # Exact to the printed precision: integers to 1e-6, ms values to 1e-6 ms (the chain is exact).
    s = _station().solve(lam)
    e = s.extra
    assert e["mean_n_per_chain"] == pytest.approx(en, abs=1e-6)
    assert e["var_n_per_chain"] == pytest.approx(var, abs=1e-5)
    assert (e["n_quantiles"]["p50"], e["n_quantiles"]["p90"], e["n_quantiles"]["p99"]) == nq
    assert e["mean_tpot_s"] * 1e3 == pytest.approx(tpot, abs=1e-9)
    q = e["tpot_quantiles_s"]
    assert [q["p50"] * 1e3, q["p90"] * 1e3, q["p99"] * 1e3] == pytest.approx(list(tq), abs=1e-9)
    # the GridDist carries the same percentiles, conservative by at most one grid step
    for p, v in zip((0.5, 0.9, 0.99), tq):
        assert v * 1e-3 - 1e-12 <= s.tpot.quantile(p) <= v * 1e-3 + s.tpot.dx + 1e-12
    assert s.tpot.mean_s == pytest.approx(tpot * 1e-3, rel=1e-12)


def test_closed_forms_negbin():
    # E[N] = r x/(1-x), mean TPOT = (a+beta)/(1-x), residual step E[t]/2 at x=0.8 (DES 25.2 ms, docs/reference_values.md §2.7)
    s = _station().solve(40.0)
    x, r = 0.8, 1 + A / B
    assert s.extra["mean_n_per_chain"] == pytest.approx(r * x / (1 - x), rel=1e-12)
    assert s.wait.mean_s == pytest.approx(0.0252, rel=1e-9)
    assert s.max_stable_rate_per_s == pytest.approx(1 / (EL * B), rel=1e-9)
    assert s.utilization == pytest.approx(0.8, rel=1e-9)


def test_littles_law_analytic():
    # E[N_GPS] = lam E[L] E[TPOT] exactly (GPS sojourn proportional to L); the boundary waiters add lam E[wait].
    for lam in (5.0, 25.0, 44.0):
        s = _station().solve(lam)
        assert s.extra["mean_n_per_chain"] == pytest.approx(lam * EL * s.extra["mean_tpot_s"], rel=1e-10)
        assert s.mean_in_system == pytest.approx(lam * (EL * s.extra["mean_tpot_s"] + s.wait.mean_s), rel=1e-10)


def test_littles_law_slot_queue_geometric():
    # With the cap and geometric L (c_L^2 = 1 -> no AC scaling), E[(N - N_max)^+] = lam E[W_slot].
    rng = np.random.default_rng(3)
    L = rng.geometric(1 / EL, 200_000).astype(float)
    lam = 40.0 * EL / L.mean()  # x = 0.8 for the sample's mean
    st_ = DecodeStation(LinearService(A, B), np.zeros(len(L)), L, max_batch=450)
    s = st_.solve(lam)
    pi, tail, rc = st_.occupancy(lam)
    p0 = float(pi[-1])
    excess = p0 * rc / (1 - rc) ** 2
    ac = (1 + st_.cv2_output) / 2
    assert s.extra["mean_slot_wait_s"] * lam == pytest.approx(excess * ac, rel=1e-9)


# slot-cap table of docs/reference_values.md §2.7 (DES at rho = 0.8, E[L] = 200): model admission wait within the stated ±15%.
CAP_TABLE = [(450, "geometric", 0.227), (420, "geometric", 1.700), (450, "deterministic", 0.145),
             (420, "deterministic", 0.730)]


@pytest.mark.parametrize("n_max,kind,des_wait", CAP_TABLE)
def test_slot_cap_table(n_max, kind, des_wait):
    rng = np.random.default_rng(0)
    L = rng.geometric(1 / EL, 20000).astype(float) if kind == "geometric" else np.full(1000, float(EL))
    s = DecodeStation(LinearService(A, B), np.zeros(len(L)), L, max_batch=n_max).solve(40.0 * EL / L.mean())
    assert s.wait.mean_s == pytest.approx(des_wait, rel=0.15)


@pytest.mark.parametrize("max_batch,reserved", [(None, 500 * 30), (256, 500 * 30), (None, 0.0), (None, 1.0)])
def test_with_reserved_kv_equals_a_rebuilt_station(max_batch, reserved):
    # The per-rate variant shares the rate-independent parts; its answers must be the rebuilt
    # station's to the last bit (cap moved: 450 -> 420 slots; cap held by max_batch 256; none; a
    # token too few to move the cap).
    svc, P, L = LinearService(A, B), np.full(1000, 300.0), np.full(1000, EL)
    base = DecodeStation(svc, P, L, kv_capacity_tokens=500 * 450, max_batch=max_batch)
    base.solve(20.0)  # warm the shared chain's caches
    fast = base.with_reserved_kv(reserved)
    slow = DecodeStation(svc, P, L, kv_capacity_tokens=500 * 450, max_batch=max_batch, kv_reserved_tokens=reserved)
    assert fast.n_max == slow.n_max and fast.chain.cap == slow.chain.cap
    assert fast.max_stable_rate_per_s() == slow.max_stable_rate_per_s()
    a, b = fast.solve(30.0), slow.solve(30.0)
    assert a.extra == b.extra
    for x, y in ((a.delay, b.delay), (a.wait, b.wait), (a.tpot, b.tpot)):
        assert x.dx == y.dx and np.array_equal(x.pmf, y.pmf) and x.mean_s == y.mean_s
    assert base.kv_reserved_tokens == 0.0 and base.n_max == (max_batch or 450)  # the base is untouched


@pytest.mark.parametrize("n_max", [1, 2, 37, 450, None, 5000])
def test_affine_fit_from_prefix_sums_is_least_squares(n_max):
    # The (a, beta) the NegBin guess uses come from prefix sums of t(n) and n t(n) (one lookup per
    # cap, at every rate); they must be the least-squares fit over the same n = 1..N (a curved
    # step time, so the fit is not exact; 1e-9: round-off of sums over up to 4096 terms).
    class Curved(LinearService):
        def decode_step_time_s(self, n, ctx):
            n = np.asarray(n, dtype=float)
            return A + B * n + 3e-7 * n ** 1.5 + 1e-9 * np.asarray(ctx, dtype=float)

    P, L = np.full(100, 300.0), np.full(100, EL)
    st_ = DecodeStation(Curved(A, B), P, L, max_batch=n_max)
    N = max(2, min(n_max or 512, 4096))
    n = np.arange(1, N + 1, dtype=float)
    a, b = fit_affine(n, st_.service.decode_step_time_s(n, n * st_.mean_context))
    assert st_.a_s == pytest.approx(a, rel=1e-9) and st_.beta_s == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize("order", ["sorted", "shuffled", "ties"])
def test_uniform_mixture_cdf_is_the_direct_sum(order):
    # The admission wait's CDF, Σ p_i min(x/w_i, 1), by one search over the widths: the direct
    # sum over every (point, width) pair to round-off, whatever the widths' order (step times
    # from a measured table need not grow with the batch)
    from qmodel.stations.decode import _uniform_mixture_cdf

    rng = np.random.default_rng(4)
    w = rng.uniform(0.01, 0.05, 300)
    if order == "sorted":
        w = np.sort(w)
    elif order == "ties":
        w = np.round(w, 3)
    p = rng.random(300)
    p /= p.sum()
    x = np.concatenate([np.arange(1200) * 5e-5, w[:20]])  # grid points and the widths themselves
    want = (p[None, :] * np.minimum(x[:, None] / w[None, :], 1.0)).sum(axis=1)
    np.testing.assert_allclose(_uniform_mixture_cdf(x, w, p), want, rtol=0, atol=1e-14)


def test_kv_capacity_sets_cap_and_reserved_reduces_it():
    P, L = np.full(100, 300.0), np.full(100, 200.0)
    svc = LinearService(A, B)
    st_ = DecodeStation(svc, P, L, kv_capacity_tokens=500 * 450)  # C_peak = 500 -> 450 slots
    assert st_.n_max == 450
    st2 = DecodeStation(svc, P, L, kv_capacity_tokens=500 * 450, kv_reserved_tokens=500 * 30)
    assert st2.n_max == 420
    assert st2.max_stable_rate_per_s() < st_.max_stable_rate_per_s()
    assert DecodeStation(svc, P, L, kv_capacity_tokens=500 * 450, max_batch=256).n_max == 256
    with pytest.raises(InputError):
        DecodeStation(svc, P, L, kv_capacity_tokens=100)


def test_context_term_enters_beta():
    # t = a + b n + c sum C with C_bar = E[L (P + (L+1)/2)]/E[L]: beta = b + c C_bar exactly
    P, L = np.array([100.0, 300.0]), np.array([10.0, 30.0])
    cbar = mean_context_tokens(P, L)
    assert cbar == pytest.approx((10 * (100 + 5.5) + 30 * (300 + 15.5)) / 40)
    st_ = DecodeStation(LinearService(0.01, 1e-4, 1e-7), P, L)
    assert st_.beta_s == pytest.approx(1e-4 + 1e-7 * cbar, rel=1e-9)
    assert st_.a_s == pytest.approx(0.01, rel=1e-9)


def test_unstable_names_station_and_limit():
    s = _station(max_batch=420)
    lim = s.max_stable_rate_per_s()
    assert lim == pytest.approx(420 / (EL * (A + B * 420)), rel=1e-12)
    with pytest.raises(UnstableError) as ei:
        s.solve(lim * 1.001)
    assert ei.value.station == "decode"
    assert ei.value.max_stable_rate_per_s == pytest.approx(lim)
    with pytest.raises(InputError):
        s.solve(-1.0)


def test_pool_dispatch():
    L = np.full(100, float(EL))
    rnd = DecodeStation(LinearService(A, B), np.zeros(100), L, instances=4, dispatch="random")
    one = _station()
    # random split: exact per-instance chain at lam / c
    assert rnd.solve(160.0).extra["mean_tpot_s"] == pytest.approx(one.solve(40.0).extra["mean_tpot_s"])
    assert rnd.solve(160.0).mean_in_system == pytest.approx(4 * one.solve(40.0).mean_in_system)
    ll = DecodeStation(LinearService(A, B), np.zeros(100), L, instances=4, dispatch="least_loaded")
    # pooled: NegBin r = 1 + c a/beta with the same x (derived: docs/methods.md, "Stations": decode)
    r, x = 1 + 4 * A / B, 0.8
    assert ll.solve(160.0).extra["mean_n_per_chain"] == pytest.approx(r * x / (1 - x), rel=1e-9)
    assert ll.max_stable_rate_per_s() == pytest.approx(rnd.max_stable_rate_per_s())


def test_first_step_in_ttft():
    s0 = _station().solve(40.0)
    s1 = _station(first_step_in_ttft=True).solve(40.0)
    assert s1.delay.mean_s == pytest.approx(s0.delay.mean_s + s0.extra["mean_tpot_s"], rel=1e-12)
    assert s1.wait.mean_s == pytest.approx(s0.wait.mean_s)
    # grid mean within a bin or two of the exact mean
    grid_mean = float(np.dot(np.arange(s1.delay.n) * s1.delay.dx, s1.delay.pmf))
    assert grid_mean == pytest.approx(s1.delay.mean_s, abs=2 * s1.delay.dx)


@settings(max_examples=30, deadline=None)
@given(x=st.floats(0.01, 0.97), cap=st.one_of(st.none(), st.integers(5, 2000)))
def test_finite_and_monotone(x, cap):
    s = _station(max_batch=cap)
    lam = x * s.max_stable_rate_per_s()
    a, b = s.solve(lam * 0.9), s.solve(lam)
    for sol in (a, b):
        for d in (sol.delay, sol.tpot):
            v = [d.mean_s, *d.summary().values(), d.tail]
            assert all(math.isfinite(u) for u in v)
            assert abs(d.pmf.sum() + d.tail - 1) < 1e-6
    assert b.extra["mean_tpot_s"] >= a.extra["mean_tpot_s"] - 1e-15
    assert b.mean_in_system >= a.mean_in_system
    assert b.delay.mean_s >= a.delay.mean_s - 1e-15


# ---- DES: E[N] insensitivity to the output-length distribution -----------------------------------
def _lengths(kind: str, mean: float):
    if kind == "deterministic":
        return lambda rng, k: np.full(k, int(mean))
    if kind == "geometric":
        return lambda rng, k: rng.geometric(1 / mean, k)
    return lambda rng, k: np.maximum(1, np.round(rng.lognormal(math.log(mean) - 0.5, 1.0, k)))


def _des_check(kind: str, x: float, el: float, horizon: float, seed: int):
    draw = _lengths(kind, el)
    sample = np.asarray(draw(np.random.default_rng(99), 200_000), dtype=float)
    st_ = DecodeStation(LinearService(A, B), np.zeros(len(sample)), sample)
    lam = x / (el * B)
    model = st_.solve(lam * el / sample.mean())  # same token load x for the discretised sample
    run = simulate_decode(lam, draw, lambda n: A + B * n, horizon, seed=seed)
    return model, run


@pytest.mark.parametrize("kind", ["deterministic", "geometric", "lognormal"])
def test_mean_n_insensitive_des(kind):
    # E[L] = 50 keeps the relaxation time short (~1 s) so 1500 s gives SE < 1%;
    # tolerance max(2%, 3 SE) as the design prescribes for DES gates.
    model, run = _des_check(kind, 0.5, 50, 1500.0, seed=11)
    tol = max(0.02 * model.mean_in_system, 3 * run.se_n)
    assert abs(run.mean_n - model.mean_in_system) <= tol, (run.mean_n, run.se_n, model.mean_in_system)
    # quasi-static TPOT percentiles vs DES within 3% (design: ~1% at E[L]=200)
    q = model.extra["tpot_quantiles_s"]
    des = np.quantile(run.tpot, [0.5, 0.9, 0.99])
    assert [q["p50"], q["p90"], q["p99"]] == pytest.approx(list(des), rel=0.03)
    assert run.wait.mean() == pytest.approx(model.wait.mean_s, rel=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["deterministic", "geometric", "lognormal"])
def test_mean_n_insensitive_des_high_load(kind):
    model, run = _des_check(kind, 0.8, 50, 20000.0, seed=5)
    tol = max(0.02 * model.mean_in_system, 3 * run.se_n)
    assert abs(run.mean_n - model.mean_in_system) <= tol, (run.mean_n, run.se_n, model.mean_in_system)


@pytest.mark.slow
def test_quasi_static_tpot_is_conservative_for_long_outputs():
    # Long outputs average TPOT over occupancy fluctuations (docs/methods.md, "Stations": decode: the CLT refinement would
    # shrink the spread). Measured (20000 s): deterministic L = 1000 at x = 0.8, DES p50/p90/p99
    # 50.07/55.04/60.12 ms vs quasi-static 50.40/56.30/61.60 (+0.7/+2.3/+2.5%); lognormal sigma 1.5,
    # E[L] = 50: +3.0/+3.3/+5.3%. The rule stays within 6% and never below the DES, so it is kept.
    el = 1000
    sample = np.full(1000, float(el))
    st_ = DecodeStation(LinearService(A, B), np.zeros(1000), sample)
    lam = 0.8 / (el * B)
    q = st_.solve(lam).extra["tpot_quantiles_s"]
    run = simulate_decode(lam, lambda rng, k: np.full(k, el), lambda n: A + B * n, 20000.0, seed=2)
    des = np.quantile(run.tpot, [0.5, 0.9, 0.99])
    for model, d in zip((q["p50"], q["p90"], q["p99"]), des):
        assert 0.99 * d <= model <= 1.06 * d


def test_attainment_monotone_in_rate():
    # Goodput bisection needs P(TPOT <= y), P(delay <= x) non-increasing in the rate: grids are
    # rate-independent (power-of-two multiples of a base step), so a fine sweep must never rise.
    st_ = _station(max_batch=450, first_step_in_ttft=True)
    lam = np.linspace(38.0, 40.0, 41)
    sols = [st_.solve(v) for v in lam]
    tp = [float(s.tpot.cdf(0.05)) for s in sols]
    dl = [float(s.delay.cdf(0.08)) for s in sols]
    assert all(y <= x + 1e-9 for x, y in zip(tp, tp[1:]))
    assert all(y <= x + 1e-9 for x, y in zip(dl, dl[1:]))


@pytest.mark.parametrize("load", [0.3, 0.5, 0.7, 0.9])
def test_admission_wait_grid_covers_the_slot_wait_while_its_mass_matters(load):
    # The slot wait's exponential tail is gridded to 1e-6 of P(slot wait), or to where < 1e-10 is
    # left when that comes first; the rest is the law's tail (exponential at the slot rate). At 0.3
    # load P(slot wait) ~ 3e-19: the grid is just the residual step (was ~13x longer); at 0.9 the
    # tail left is 1e-6 of it, as before.
    s = _station(max_batch=64)
    r = s.solve(load * s.max_stable_rate_per_s())
    p = r.extra["p_slot_wait"]
    assert r.wait.tail <= max(1e-10, 1e-6 * p) * 1.05
    step_max = A + B * 64  # the longest step: the residual's support
    slot_rate = 1.0 / r.extra["mean_slot_wait_s"] * p if p > 0 else math.inf
    span = step_max + (min(math.log(1e6), math.log(p / 1e-10)) / slot_rate if p > 1e-10 else 0.0)
    assert r.wait.n <= span / r.wait.dx + 4
    # what lies past the grid is still in the law: P(W > end) is its tail mass
    assert r.wait.sf((r.wait.n - 1) * r.wait.dx) == pytest.approx(r.wait.tail, abs=1e-15)
