"""KV-transfer station: exact delays, P-K against a Lindley recursion, PS mean, layer-wise overlap,
batch releases (M^X/G/1), DistServe's published bandwidth figure."""

from __future__ import annotations

import numpy as np
import pytest

from qmodel.errors import InputError, UnstableError
from qmodel.stations.kv_transfer import (
    KVTransferStation,
    bandwidth_needed_bytes_per_s,
    kv_transfer_bytes,
    layerwise_exposed_s,
)

GB = 1e9


def _bytes(n: int = 20000) -> np.ndarray:
    return np.linspace(0.5, 1.5, n) * GB  # uniform 0.5-1.5 GB: E[S] = 0.1 s at 10 GB/s


def lindley(arrivals: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Exact FCFS single-server waits W_{n+1} = max(0, W_n + S_n - (t_{n+1} - t_n))."""
    w = np.empty(arrivals.size)
    w[0] = 0.0
    gaps = np.diff(arrivals)
    for i in range(1, arrivals.size):
        w[i] = max(0.0, w[i - 1] + service[i - 1] - gaps[i - 1])
    return w


def _se(x: np.ndarray, fn, nb: int = 10) -> tuple[float, float]:
    vals = np.array([fn(p) for p in np.array_split(x, nb)])
    return float(fn(x)), float(vals.std(ddof=1) / np.sqrt(nb))


def test_dedicated_is_an_exact_delay() -> None:
    st = KVTransferStation(np.array([1.0 * GB]), 10 * GB, latency_s=1e-3, sharing="dedicated", dx=1e-5)
    sol = st.solve(5.0)
    assert sol.exact
    assert sol.delay.mean_s == pytest.approx(0.101, abs=1e-12)
    assert sol.delay.quantile(0.99) == pytest.approx(0.101, abs=1e-5)  # one grid bin
    assert sol.extra["mean_wait_s"] == 0.0


def test_layerwise_hand_values() -> None:
    # X/C = 0.1 s over 80 layers; prefill 50 ms hides (79/80)*50 ms: 0.1 - 0.049375 = 0.050625 s
    assert layerwise_exposed_s(1 * GB, 10 * GB, 80, 0.05) == pytest.approx(0.050625, abs=1e-15)
    # a long prefill hides everything but the last layer: X/(C l) = 0.00125 s
    assert layerwise_exposed_s(1 * GB, 10 * GB, 80, 1.0) == pytest.approx(0.00125, abs=1e-15)
    # one layer: no overlap possible
    assert layerwise_exposed_s(1 * GB, 10 * GB, 1, 1.0) == pytest.approx(0.1, abs=1e-15)
    st = KVTransferStation(np.array([1.0 * GB, 2.0 * GB]), 10 * GB, latency_s=0.0, sharing="dedicated",
                           mode="layerwise", layers=80, prefill_time_s=np.array([0.05, 0.05]), dx=1e-6)
    want = np.mean([0.050625, 0.2 - 0.049375])
    assert st.solve(1.0).delay.mean_s == pytest.approx(want, abs=1e-12)


def test_pk_mean_and_tail_against_lindley() -> None:
    x = _bytes()
    st = KVTransferStation(x, 10 * GB, latency_s=0.0, paths=1, sharing="fcfs")
    lam = 8.0  # rho = 0.8
    sol = st.solve(lam)
    es2 = float(np.mean((x / (10 * GB)) ** 2))  # P-K with the sample's own moments: exact
    assert sol.extra["mean_wait_s"] == pytest.approx(lam * es2 / (2 * (1 - 0.8)), rel=1e-12)
    rng = np.random.default_rng(7)
    n = 400_000
    arr = np.cumsum(rng.exponential(1 / lam, n))
    w = lindley(arr, rng.uniform(0.05, 0.15, n))[20_000:]
    m, se = _se(w, np.mean)
    assert sol.wait.mean_s == pytest.approx(m, abs=3 * se)
    for p in (0.9, 0.99):
        q, qse = _se(w, lambda v: np.quantile(v, p))
        # CL tail: exact decay, p90+ within ~1% of exact (docs/methods.md, "Stations": fcfs) + grid bin + 3 SE
        assert sol.wait.quantile(p) == pytest.approx(q, abs=3 * qse + 0.01 * q + sol.wait.dx)


def test_batch_releases_against_lindley() -> None:
    # Poisson batches of K in {1, 2, 3} requests (the prefill's releases); M^X/G/1 mean is exact.
    x = _bytes()
    pk = np.array([0.2, 0.3, 0.5])
    lam_b = 3.0
    lam = lam_b * float(pk @ [1, 2, 3])  # 6.9 req/s, rho = 0.69
    st = KVTransferStation(x, 10 * GB, sharing="fcfs", batch_rate_per_s=lam_b, batch_size_pmf=pk)
    sol = st.solve(lam)
    rng = np.random.default_rng(8)
    nb = 150_000
    t_b = np.cumsum(rng.exponential(1 / lam_b, nb))
    k = rng.choice([1, 2, 3], nb, p=pk)
    arr = np.repeat(t_b, k)
    w = lindley(arr, rng.uniform(0.05, 0.15, arr.size))[20_000:]
    m, se = _se(w, np.mean)
    assert sol.wait.mean_s == pytest.approx(m, abs=3 * se)
    # distribution: CL tail of the batch work + exact position part; measured within 2% at p90/p99
    for p in (0.9, 0.99):
        q, qse = _se(w, lambda v: np.quantile(v, p))
        assert sol.wait.quantile(p) == pytest.approx(q, abs=3 * qse + 0.02 * q + 2 * sol.wait.dx)


def test_batch_releases_weight_repeated_transfer_sizes() -> None:
    # Prompt samples repeat lengths (traces, presets); ServiceSample merges repeats into weights,
    # and the work ahead in a batch must use those weights: 90% of transfers 0.5 GB, 10% 2.5 GB
    # (an equal-weight law of the two sizes would put 1.5 GB, not 0.7 GB, ahead per position).
    x = np.repeat([0.5 * GB, 2.5 * GB], [9000, 1000])
    pk = np.array([0.2, 0.3, 0.5])
    lam_b = 3.0
    lam = lam_b * float(pk @ [1, 2, 3])  # rho = 6.9 x 0.07 s = 0.483
    st = KVTransferStation(x, 10 * GB, sharing="fcfs", batch_rate_per_s=lam_b, batch_size_pmf=pk)
    sol = st.solve(lam)
    rng = np.random.default_rng(9)
    nb = 150_000
    t_b = np.cumsum(rng.exponential(1 / lam_b, nb))
    arr = np.repeat(t_b, rng.choice([1, 2, 3], nb, p=pk))
    svc = rng.choice([0.05, 0.25], arr.size, p=[0.9, 0.1])
    w = lindley(arr, svc)[20_000:]
    m, se = _se(w, np.mean)
    assert sol.wait.mean_s == pytest.approx(m, abs=3 * se)
    for p in (0.9, 0.99):
        q, qse = _se(w, lambda v: np.quantile(v, p))
        assert sol.wait.quantile(p) == pytest.approx(q, abs=3 * qse + 0.03 * q + 2 * sol.wait.dx)


def test_processor_sharing_mean() -> None:
    x = _bytes()
    st = KVTransferStation(x, 10 * GB, latency_s=2e-3, paths=2, sharing="fair")
    sol = st.solve(12.0)  # rho = 12 * 0.1 / 2 = 0.6
    assert sol.utilization == pytest.approx(0.6, rel=1e-9)
    # Kleinrock: E[T | x] = (x/C)/(1 - rho): mean 0.1/0.4 = 0.25 s, plus the latency
    assert sol.delay.mean_s == pytest.approx(0.25 + 2e-3, rel=1e-9)
    assert not sol.exact


def test_distserve_opt66b_bandwidth() -> None:
    from qmodel.registry import get_model

    m = get_model("opt-66b")
    kvb = m.kv_bytes_per_token()
    assert kvb * 512 == pytest.approx(1.125 * 2**30, rel=1e-12)  # DistServe: 1.125 GB per 512-token prompt
    need = bandwidth_needed_bytes_per_s(kvb, 512, 10.0)
    assert need * 8 / 2**30 == pytest.approx(90.0, rel=1e-12)  # "about 90 Gbps" (binary units)
    st = KVTransferStation(kv_transfer_bytes(kvb, np.array([512.0])), 100e9 / 8, sharing="fcfs")
    rep = st.link_report(10.0, st.solve(10.0))
    assert rep.bandwidth_needed_bytes_per_s == pytest.approx(need)
    assert rep.sufficient  # 100 Gbit/s carries it ...
    st2 = KVTransferStation(kv_transfer_bytes(kvb, np.array([512.0])), 80e9 / 8, sharing="fcfs")
    assert not st2.link_report(10.0).sufficient  # ... 80 Gbit/s does not
    with pytest.raises(UnstableError):
        st2.solve(10.0)


def test_in_flight_little() -> None:
    x = _bytes()
    st = KVTransferStation(x, 10 * GB, sharing="dedicated")
    sol = st.solve(4.0)
    assert sol.extra["in_flight_mean"] == pytest.approx(4.0 * 0.1, rel=1e-9)
    # bytes held in flight: λ E[X · X/C], size-biased per transfer
    assert sol.extra["in_flight_bytes_mean"] == pytest.approx(4.0 * np.mean(x * x / (10 * GB)), rel=1e-9)
    assert sol.extra["in_flight_mean_bytes_each"] > x.mean()


@pytest.mark.parametrize("sharing", ["dedicated", "fcfs", "fair"])
def test_in_flight_closed_form_is_the_solutions(sharing: str) -> None:
    # The engine reserves decode KV from in_flight() before the link is solved (no grid): it must
    # be what the solution reports, fair sharing's slowdown 1/(1 − ρ) included.
    x = _bytes()
    st = KVTransferStation(x, 10 * GB, paths=2, sharing=sharing)
    rate = 0.7 * st.max_stable_rate_per_s()
    n, b = st.in_flight(rate)
    sol = st.solve(rate)
    assert n == pytest.approx(sol.extra["in_flight_mean"], rel=1e-12)
    assert b == pytest.approx(sol.extra["in_flight_bytes_mean"], rel=1e-12)
    slow = 1.0 / (1.0 - 0.7) if sharing == "fair" else 1.0
    assert n == pytest.approx(rate * 0.1 * slow, rel=1e-9)


@pytest.mark.parametrize("batches", [False, True])
def test_dx_floor_coarsens_the_default_step_only(batches: bool) -> None:
    # dx_floor bounds the default step from below (the step the composition re-bins the law to):
    # a floor under the default changes nothing, one above it sets the step, and the quantiles
    # move up by less than the terms' rounding, one coarse step each (wait terms + transfer).
    x = _bytes(4000)
    kw = dict(batch_rate_per_s=2.0, batch_size_pmf=np.array([0.2, 0.5, 0.3])) if batches else {}
    st = KVTransferStation(x, 10 * GB, sharing="fcfs", **kw)
    rate = 2.0 * (0.2 + 1.0 + 0.9) if batches else 5.0
    fine = st.solve(rate)
    same = st.solve(rate, dx_floor=fine.delay.dx / 2)
    assert same.delay.dx == fine.delay.dx and np.array_equal(same.delay.pmf, fine.delay.pmf)
    floor = 25 * fine.delay.dx
    coarse = st.solve(rate, dx_floor=floor)
    assert coarse.delay.dx == floor
    assert coarse.delay.mean_s == fine.delay.mean_s  # the means are closed forms either way
    terms = 3 if batches else 2
    for q in (0.5, 0.9, 0.99):
        lo, hi = fine.delay.quantile(q), coarse.delay.quantile(q)
        assert lo - fine.delay.dx <= hi <= lo + terms * floor + 1e-12


def test_cached_prefix_and_stability() -> None:
    b = kv_transfer_bytes(1000.0, np.array([100.0, 50.0]), np.array([40.0, 80.0]))
    np.testing.assert_allclose(b, [60000.0, 0.0])
    st = KVTransferStation(_bytes(), 10 * GB, paths=3)
    assert st.max_stable_rate_per_s() == pytest.approx(30.0, rel=1e-9)  # 3 paths x 10 GB/s / 1 GB
    with pytest.raises(UnstableError) as err:
        st.solve(30.0)
    assert err.value.station == "kv_transfer"


def test_non_poisson_scaling_and_bad_input() -> None:
    base = KVTransferStation(_bytes(), 10 * GB)
    bursty = KVTransferStation(_bytes(), 10 * GB, ca2=4.0)
    assert bursty.solve(8.0).wait.mean_s > 3 * base.solve(8.0).wait.mean_s
    with pytest.raises(InputError):
        KVTransferStation(np.array([-1.0]), 10 * GB)
    with pytest.raises(InputError):
        KVTransferStation(_bytes(), 0.0)
    with pytest.raises(InputError):
        KVTransferStation(_bytes(), 10 * GB, sharing="lottery")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        KVTransferStation(_bytes(), 10 * GB, batch_rate_per_s=1.0)


def test_batch_pmf_from_prefill() -> None:
    own = np.array([0.1, 0.4, 0.5])  # customer-weighted
    pk = KVTransferStation.batch_pmf_from_prefill(own)
    ek = float(pk @ [1, 2, 3])
    np.testing.assert_allclose(pk * np.arange(1, 4) / ek, own, rtol=1e-12)


def test_prefill_time_override_per_rate() -> None:
    x = np.array([1.0 * GB, 2.0 * GB])
    st = KVTransferStation(x, 10 * GB, sharing="dedicated", mode="layerwise", layers=80, prefill_time_s=0.0, dx=1e-6)
    assert st.solve(1.0).delay.mean_s == pytest.approx(0.15, abs=1e-12)  # nothing hidden
    got = st.solve(1.0, prefill_time_s=np.array([0.05, 0.05])).delay.mean_s
    assert got == pytest.approx(np.mean([0.050625, 0.2 - 0.049375]), abs=1e-12)


@pytest.mark.parametrize("bandwidth", [1.0, 3.0 * GB, 10 * GB, 12.5e9 / 7.0, 1.2697867137638703, 1e-300])
@pytest.mark.parametrize("sample", ["spread", "repeats", "one", "collide"])
def test_service_from_distinct_sizes_is_the_samples_law_to_the_bit(sample: str, bandwidth: float) -> None:
    """The link service law built from the distinct sizes (shared by every bandwidth variant) is
    ``ServiceSample.of(x / C)`` exactly: same values, same weights, bit for bit, also where two sizes
    meet in one quotient ("collide": adjacent doubles whose quotients by C = 1.2697867137638703 round
    to one value, merged as the plain sample merges them) and where a quotient overflows
    (C = 1e-300: the same error as the plain merge)."""
    from qmodel.stations.fcfs import ServiceSample

    x = {"spread": np.rint(np.random.default_rng(1).lognormal(20, 1, 5000)),
         "repeats": np.repeat([3.0, 1.0, 7.0, 1.0], [5, 9, 2, 4]) * 1e6,
         "one": np.array([5.0e8]),
         "collide": np.array([1.6369616873214543, 1.6369616873214545, 1.7, 1.6369616873214545])}[sample]
    st = KVTransferStation(x, bandwidth)
    if sample == "collide" and bandwidth == 1.2697867137638703:
        assert x[0] / bandwidth == x[1] / bandwidth  # the case this sample is here for
    try:
        ref = ServiceSample.of(x / bandwidth)
    except InputError:
        with pytest.raises(InputError):
            _ = st.service
        return
    for s in (st.service, st.with_bandwidth(2.0 * GB).with_bandwidth(bandwidth).service):
        assert s.values_s.tobytes() == ref.values_s.tobytes()
        assert s.weights.tobytes() == ref.weights.tobytes()
