"""Replay engine: exactness anchors, link disciplines, back-pressure, determinism, conservation.

Tolerances: exact recursions (Lindley, dedicated/fcfs/fair link arithmetic) are checked to float
rounding (1e-9 relative); queueing anchors compare a simulation mean with its exact value within
3 standard errors from batch means (design note §5.6: never gate on one short run without an SE).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_models import LinearModel  # noqa: E402

from qmodel.validation.replay import ReplayPlan, replay_plan, simulate  # noqa: E402
from qmodel.validation.trace_types import Trace  # noqa: E402


def make_trace(arrival, prompt, output, hash_ids=None) -> Trace:
    a = np.asarray(arrival, dtype=float)
    p = np.asarray(prompt, dtype=np.int64)
    o = np.asarray(output, dtype=np.int64)
    if p.ndim == 0 or p.size == 1:
        p = np.full(len(a), int(p.reshape(-1)[0]), dtype=np.int64)
    if o.ndim == 0 or o.size == 1:
        o = np.full(len(a), int(o.reshape(-1)[0]), dtype=np.int64)
    return Trace(a, p, o, "test", "synthetic", Trace.digest_arrays(a, p, o), hash_ids=hash_ids)


def poisson(n: int, rate: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    return t - t[0]


def disagg(**kw) -> ReplayPlan:
    base = dict(topology="disaggregated", decode_model=LinearModel(a=0.01), decode_instances=1,
                decode_kv_capacity_tokens=10**9, decode_max_batch=10**6,
                prefill_model=LinearModel(alpha=1.0), prefill_instances=1, max_batch_tokens=1,
                kv_bytes_per_token=0.0, layers=1, path_bandwidth_bytes_per_s=1.0, link_latency_s=0.0,
                link_sharing="dedicated", transfer_mode="serialized", first_token_from="prefill")
    base.update(kw)
    return ReplayPlan(**base)


def batch_means_se(x: np.ndarray, batches: int = 20) -> float:
    m = len(x) // batches
    means = x[: m * batches].reshape(batches, m).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(batches))


# ---- prefill: M/D/1 ----------------------------------------------------------------------------

def test_prefill_batch_of_one_is_exact_lindley_and_md1_mean():
    """Batch size 1, D = 1, Poisson 0.8: waits equal Lindley's recursion exactly and the mean wait
    is within 3 SE of the M/D/1 value rho*D/(2(1-rho)) = 2.0 (docs/reference_values.md §6.3)."""
    n = 60000
    arr = poisson(n, 0.8, seed=3)
    res, req = simulate(disagg(), make_trace(arr, 100, 1), warmup_fraction=0.0)
    entry, start, _ = (np.asarray(c) for c in req.marks["prefill"])
    wait = start - entry
    lind = np.zeros(n)
    for k in range(1, n):
        lind[k] = max(0.0, lind[k - 1] + 1.0 - (arr[k] - arr[k - 1]))
    np.testing.assert_allclose(wait, lind, rtol=0, atol=1e-9)
    se = batch_means_se(wait)
    assert abs(wait.mean() - 2.0) <= 3 * se, (wait.mean(), se)
    assert res.conservation.completed == n and res.conservation.unfinished == 0
    # TTFT = wait + D; L = 1 requests skip decode and TPOT
    assert res.ttft.mean == pytest.approx(wait[arr >= 0].mean() + 1.0, rel=1e-12)


def test_prefill_batches_fcfs_under_token_budget():
    """Three requests queued behind a busy instance form one batch under the budget; an oversized
    prompt runs alone."""
    pm = LinearModel(alpha=1.0, gamma=0.001)
    tr = make_trace([0.0, 0.1, 0.2, 0.3], [5000, 1000, 2000, 9000], 1)
    _, req = simulate(disagg(prefill_model=pm, max_batch_tokens=4000), tr, warmup_fraction=0.0)
    _, start, end = req.marks["prefill"]
    assert start[0] == 0.0 and end[0] == pytest.approx(6.0)         # alone (over budget)
    assert start[1] == start[2] == pytest.approx(6.0)               # 1000 + 2000 <= 4000
    assert end[1] == end[2] == pytest.approx(6.0 + 1.0 + 3.0)
    assert start[3] == pytest.approx(10.0) and end[3] == pytest.approx(10.0 + 1.0 + 9.0)


def test_prefix_hit_ratio_skips_cached_tokens():
    pm = LinearModel(gamma=0.001)
    tr = make_trace([0.0], [1000], 1)
    res0 = replay_plan(disagg(prefill_model=pm, max_batch_tokens=8192), tr, warmup_fraction=0.0)
    res5 = replay_plan(disagg(prefill_model=pm, max_batch_tokens=8192, prefix_hit_ratio=0.5), tr,
                       warmup_fraction=0.0)
    assert res0.ttft.mean == pytest.approx(1.0)
    assert res5.ttft.mean == pytest.approx(0.5)


def test_mooncake_hash_ids_lru_hits_per_instance():
    """Same leading blocks on the same instance are cached (512 tokens each); capacity evicts LRU."""
    pm = LinearModel(gamma=0.001)
    tr = make_trace([0.0, 10.0, 20.0, 30.0], [1024, 1024, 1024, 1024], 1,
                    hash_ids=((1, 2), (1, 3), (4, 5), (1, 2)))
    _, req = simulate(disagg(prefill_model=pm, max_batch_tokens=8192, prefix_cache_blocks=3), tr,
                      warmup_fraction=0.0)
    # r0: miss (1024 computed); r1: block 1 hit (512); r2: miss; r3: LRU {3,4,5} after r2 -> miss
    assert req.cached == [0, 512, 0, 0]
    _, req = simulate(disagg(prefill_model=pm, max_batch_tokens=8192, prefix_cache_blocks=100), tr,
                      warmup_fraction=0.0)
    assert req.cached == [0, 512, 0, 1023]  # full hit still computes the last token


# ---- KV transfer -------------------------------------------------------------------------------

def kv_plan(sharing: str, mode: str = "serialized", **kw) -> ReplayPlan:
    base = dict(prefill_model=LinearModel(alpha=0.0, gamma=0.001), max_batch_tokens=10**6,
                kv_bytes_per_token=1000.0, path_bandwidth_bytes_per_s=1e6, link_latency_s=0.05,
                link_sharing=sharing, transfer_mode=mode, layers=10)
    base.update(kw)
    return disagg(**base)


def test_dedicated_serialized_delay_is_exact():
    tr = make_trace([0.0, 100.0], [1000, 3000], 2)
    _, req = simulate(kv_plan("dedicated"), tr, warmup_fraction=0.0)
    entry, start, exit_ = req.marks["kv_transfer"]
    _, _, pre_end = req.marks["prefill"]
    for r, p in enumerate([1000, 3000]):
        assert entry[r] == pre_end[r]
        assert exit_[r] - entry[r] == pytest.approx(p * 1000.0 / 1e6 + 0.05, rel=1e-12)


@pytest.mark.parametrize("prompt", [500, 1000, 4000])
def test_dedicated_layerwise_exposed_time_is_design_formula(prompt):
    """exposed = max(X/(C l), X/C - T (1 - 1/l)) + latency (docs/methods.md, "Stations": kv_transfer); T = 0.001*P, X/C = 0.001*P."""
    tr = make_trace([0.0], [prompt], 2)
    _, req = simulate(kv_plan("dedicated", "layerwise"), tr, warmup_fraction=0.0)
    _, _, pre_end = req.marks["prefill"]
    _, _, exit_ = req.marks["kv_transfer"]
    X_C, T, l = prompt * 1e-3, prompt * 1e-3, 10
    expected = max(X_C / l, X_C - T * (1 - 1 / l)) + 0.05
    assert exit_[0] - pre_end[0] == pytest.approx(expected, rel=1e-12)


def test_fcfs_link_serializes_and_fair_link_shares():
    """Two transfers ready together on one path (one batch, formed behind a first request with one
    output token that needs no transfer): FCFS finishes them X1/C and (X1+X2)/C after entry;
    processor sharing 2*X1/C and (X1+X2)/C (X1 < X2)."""
    tr = make_trace([0.0, 0.0, 0.0], [1000, 1000, 3000], [1, 2, 2])
    for sharing, ends in (("fcfs", (1.0, 4.0)), ("fair", (2.0, 4.0))):
        _, req = simulate(kv_plan(sharing), tr, warmup_fraction=0.0)
        entry, _, exit_ = req.marks["kv_transfer"]
        assert entry[1] == entry[2] == pytest.approx(5.0)
        got = (exit_[1] - entry[1] - 0.05, exit_[2] - entry[2] - 0.05)
        assert got == pytest.approx(ends, rel=1e-9), sharing


def test_fair_link_rate_changes_mid_transfer():
    """PS with a late arrival (C = 1 MB/s): A (2 MB) alone for 0.5 s sends 0.5 MB; then A and B
    (0.5 MB) share 0.5 MB/s each, so B ends at 1.5 s; A's last 1 MB goes alone -> A ends at 2.5 s
    (work conservation: 2.5 MB at 1 MB/s)."""
    plan = disagg(prefill_model=LinearModel(alpha=0.0), max_batch_tokens=10**6, prefill_instances=1,
                  kv_bytes_per_token=1000.0, path_bandwidth_bytes_per_s=1e6, link_sharing="fair")
    tr = make_trace([0.0, 0.5], [2000, 500], 2)
    _, req = simulate(plan, tr, warmup_fraction=0.0)
    _, _, exit_ = req.marks["kv_transfer"]
    assert exit_[0] == pytest.approx(2.5, rel=1e-9)
    assert exit_[1] == pytest.approx(1.5, rel=1e-9)


def test_transfer_waits_for_decode_reservation():
    """Decode KV fits one request at a time: the second transfer starts only when the first request
    finishes decoding (back-pressure), and both complete."""
    plan = kv_plan("dedicated", decode_kv_capacity_tokens=1100, decode_model=LinearModel(a=0.5))
    tr = make_trace([0.0, 0.0], [1000, 1000], 3)
    res, req = simulate(plan, tr, warmup_fraction=0.0)
    entry, start, exit_ = req.marks["kv_transfer"]
    assert start[1] == pytest.approx(req.t_last[0])
    assert start[1] > entry[1]
    assert res.conservation.completed == 2


# ---- decode ------------------------------------------------------------------------------------

def test_decode_gps_mean_occupancy_matches_negbin():
    """Decode GPS, t(n) = a + beta n with a = 10 ms, beta = 0.1 ms, L = 200, x = 0.5 (lambda = 25/s):
    E[N] = r x/(1-x) with r = 1 + a/beta = 101 (docs/reference_values.md §6.5). The replay's decode station also holds
    requests waiting for the next step boundary (mean ~ t/2 each: + lambda * 0.01 = 0.25)."""
    n = 30000
    arr = poisson(n, 25.0, seed=11)
    plan = disagg(prefill_model=LinearModel(alpha=1e-6), max_batch_tokens=10**6,
                  decode_model=LinearModel(a=0.010, b=0.0001), first_token_from="decode")
    res, req = simulate(plan, make_trace(arr, 10, 200), warmup_fraction=0.1)
    dec = next(s for s in res.stations if s.name == "decode")
    entry, _, exit_ = (np.asarray(c) for c in req.marks["decode"])
    keep = arr >= 0.1 * arr[-1]
    soj = (exit_ - entry)[keep]
    # SE of E[N] = lambda * E[sojourn] from batch means of the sojourns (consecutive arrivals)
    se = 25.0 * batch_means_se(soj)
    expected = 101.0 + 0.25
    assert abs(dec.mean_in_system - expected) <= 3 * se + 0.01 * expected, (dec.mean_in_system, se)
    # mean TPOT (a + beta)/(1 - x) = 20.2 ms within the same relative band
    assert res.tpot.mean == pytest.approx(0.0202, rel=3 * se / expected + 0.01)


def test_decode_fast_forward_equals_step_by_step():
    """A lone request with a context-dependent step: TPOT is the mean of the exact step series."""
    a, b, c = 0.01, 0.001, 1e-5
    P, L = 300, 50
    plan = disagg(prefill_model=LinearModel(alpha=0.1), max_batch_tokens=10**6,
                  decode_model=LinearModel(a=a, b=b, c=c))
    res, req = simulate(plan, make_trace([0.0], [P], [L]), warmup_fraction=0.0)
    steps = [a + b + c * (P + 1 + k) for k in range(L - 1)]
    assert req.t_last[0] - req.t_first[0] == pytest.approx(sum(steps), rel=1e-12)


def test_join_happens_at_step_boundary():
    """A request ready mid-step joins at the next boundary; the running one is unaffected."""
    plan = disagg(prefill_model=LinearModel(alpha=0.0), max_batch_tokens=1,
                  decode_model=LinearModel(a=1.0), first_token_from="decode")
    tr = make_trace([0.0, 2.5], [10, 10], [5, 2])
    _, req = simulate(plan, tr, warmup_fraction=0.0)
    assert req.t_first[0] == pytest.approx(1.0) and req.t_last[0] == pytest.approx(5.0)
    assert req.t_first[1] == pytest.approx(4.0) and req.t_last[1] == pytest.approx(5.0)


# ---- colocated / chunked -----------------------------------------------------------------------

def single_plan(topology: str, **kw) -> ReplayPlan:
    base = dict(topology=topology, decode_model=LinearModel(alpha=0.05, gamma=1e-4, a=0.01, b=1e-4),
                decode_instances=1, decode_kv_capacity_tokens=10**7, decode_max_batch=10**6,
                max_batch_tokens=8192, chunk_tokens=256)
    base.update(kw)
    return ReplayPlan(**base)


def test_colocated_lone_request_times():
    res, req = simulate(single_plan("colocated"), make_trace([0.0], [1000], [11]), warmup_fraction=0.0)
    assert req.t_first[0] == pytest.approx(0.05 + 0.1)
    assert res.tpot.mean == pytest.approx(0.01 + 1e-4)


def test_colocated_prefill_priority_stalls_decode():
    """A second arrival mid-decode gets a prefill iteration at the next step boundary; the first
    request's TPOT includes that stall."""
    res, req = simulate(single_plan("colocated"), make_trace([0.0, 0.2], [1000, 1000], [11, 2]),
                        warmup_fraction=0.0)
    t_step1 = 0.01 + 1e-4
    boundary = 0.15 + t_step1 * math.ceil((0.2 - 0.15) / t_step1 - 1e-12)
    assert req.t_first[1] == pytest.approx(boundary + 0.15)


def test_chunked_lone_request_uses_ceil_chunks():
    """P = 600 with a 256-token budget: chunks 256, 256, 88; chunk attention term c^2 + 2cd is passed
    (LinearModel ignores it; the count of iterations and the token sums are what is checked)."""
    res, req = simulate(single_plan("chunked"), make_trace([0.0], [600], [3]), warmup_fraction=0.0)
    assert req.t_first[0] == pytest.approx(3 * 0.05 + 600 * 1e-4)
    assert res.tpot.mean == pytest.approx(0.01 + 1e-4)


# ---- whole-run properties ------------------------------------------------------------------------

def busy_trace(n: int = 6000, seed: int = 5) -> Trace:
    rng = np.random.default_rng(seed)
    arr = poisson(n, 6.0, seed)
    return make_trace(arr, rng.integers(50, 3000, n), rng.integers(1, 400, n))


def mixed_plan(topology: str, sharing: str = "fair") -> ReplayPlan:
    pm = LinearModel(alpha=0.02, gamma=1e-4)
    dm = LinearModel(alpha=0.02, gamma=1e-4, a=0.01, b=1e-4, c=1e-7)
    return ReplayPlan(topology=topology, decode_model=dm, decode_instances=3, decode_kv_capacity_tokens=60000,
                      decode_max_batch=64, decode_dispatch="random", prefill_model=pm, prefill_instances=2,
                      prefill_dispatch="random", kv_bytes_per_token=1e5, layers=32,
                      path_bandwidth_bytes_per_s=2e9, link_latency_s=1e-4, link_sharing=sharing,
                      transfer_mode="layerwise", slo_ttft_s=0.5, slo_tpot_s=0.03)


@pytest.mark.parametrize("topology", ["disaggregated", "colocated", "chunked"])
def test_byte_identical_json_and_conservation(topology):
    tr = busy_trace()
    a = replay_plan(mixed_plan(topology), tr, seed=7)
    b = replay_plan(mixed_plan(topology), tr, seed=7)
    assert json.dumps(a.model_dump(mode="json")).encode() == json.dumps(b.model_dump(mode="json")).encode()
    c = a.conservation
    assert c.completed + c.dropped == c.arrived and c.unfinished == 0
    # Little's law per station over the window: boundary effects are O(W / window) ~ 0.1-1 s over
    # ~900 s, so 2% is a loose bound for this short run (the slow test asserts 1% on a long one).
    for s in a.stations:
        assert s.little_rel_error < 0.02, (s.name, s.little_rel_error)
        assert 0.0 <= s.utilization <= 1.0 + 1e-9
    assert 0.0 <= a.attainment <= min(a.ttft_attainment, a.tpot_attainment)
    assert 0.0 < a.precision.ttft_mean_se_s < a.ttft.mean and 0.0 < a.precision.tpot_mean_se_s < a.tpot.mean


def test_oversized_requests_are_dropped_and_reported():
    plan = kv_plan("fcfs", decode_kv_capacity_tokens=1500)
    res = replay_plan(plan, make_trace([0.0, 1.0, 2.0], [1000, 2000, 500], [10, 10, 10]), warmup_fraction=0.0)
    assert res.conservation.dropped == 1 and res.conservation.completed == 2
    assert any("dropped" in w for w in res.warnings)


@pytest.mark.parametrize("sharing", ["dedicated", "fcfs", "fair"])
def test_link_disciplines_all_conserve(sharing):
    res = replay_plan(mixed_plan("disaggregated", sharing), busy_trace(3000))
    assert res.conservation.unfinished == 0
    assert res.conservation.completed + res.conservation.dropped == 3000


@pytest.mark.slow
def test_littles_law_long_run_within_one_percent():
    tr = busy_trace(60000, seed=9)
    for topology in ("disaggregated", "colocated"):
        res = replay_plan(mixed_plan(topology), tr, seed=1)
        for s in res.stations:
            assert s.little_rel_error < 0.01, (topology, s.name, s.little_rel_error)


@pytest.mark.slow
def test_decode_gps_negbin_at_x08():
    """x = 0.8 (lambda = 40/s): E[N] = 404 (docs/reference_values.md §6.5; DES 403.7 +- 1.9), +-2% for a long run."""
    arr = poisson(200000, 40.0, seed=2)
    plan = disagg(prefill_model=LinearModel(alpha=1e-6), max_batch_tokens=10**6,
                  decode_model=LinearModel(a=0.010, b=0.0001), first_token_from="decode")
    res = replay_plan(plan, make_trace(arr, 10, 200), warmup_fraction=0.1)
    dec = next(s for s in res.stations if s.name == "decode")
    assert dec.mean_in_system == pytest.approx(404.0 + 40 * 0.025, rel=0.02)


@pytest.mark.parametrize("topology", ["disaggregated", "colocated", "chunked"])
def test_step_cache_changes_speed_not_results(topology):
    """The exact memo of the service model (integer lattice tables) gives byte-identical results."""
    tr = busy_trace(2000, seed=4)
    a, _ = simulate(mixed_plan(topology), tr, seed=3, cache=True)
    b, _ = simulate(mixed_plan(topology), tr, seed=3, cache=False)
    assert json.dumps(a.model_dump(mode="json")) == json.dumps(b.model_dump(mode="json"))


def test_step_cache_matches_roofline_model_exactly():
    """Against the real roofline model (non-linear: max of compute and memory terms)."""
    from qmodel.perf.service_time import service_model
    from qmodel.registry import get_gpu, get_model
    from qmodel.scenario import RooflinePerf
    from qmodel.validation.stations.core import StepCache

    m = service_model(RooflinePerf(), get_model("llama-3.1-8b"), get_gpu("h100-sxm"), 1, 1)
    c = StepCache(m, block=256)
    for n, S, k in ((1, 0, 1), (7, 1000, 50), (64, 250, 9), (300, 70000, 40), (3, 255, 2)):
        got = c.decode_steps(n, S, k)
        want = np.asarray(m.decode_step_time_s(float(n), S + n * np.arange(k, dtype=float)))
        assert np.array_equal(got, want), (n, S, k)
    assert c.prefill_time_s(3000, 3000**2, 1) == float(m.prefill_time_s(3000.0, 9e6, 1.0))


def test_prefill_bulk_service_md14_matches_embedded_chain():
    """M/D^[1,4]/1, start on arrival, s(k) = 0.2 + 0.25 k, lambda = 3 (rho_full = 0.9): exact
    Wq = 1.324908, P(W = 0) = 0.034511, P(W <= 1) = 0.551829, utilization 0.9655 (docs/reference_values.md §6.4).
    One-token prompts and a 4-token budget make the token-budget rule "take up to 4".
    At utilization 0.97 waits are correlated over thousands of customers, so the SE comes from
    16 independent replications (batch means of one run underestimate it); tolerance 3 SE."""
    means, p0, p1, util = [], [], [], []
    for seed in range(16):
        n = 50000
        arr = poisson(n, 3.0, seed=100 + seed)
        plan = disagg(prefill_model=LinearModel(alpha=0.2, per_req=0.25), max_batch_tokens=4)
        res, req = simulate(plan, make_trace(arr, 1, 1), warmup_fraction=0.05)
        entry, start, _ = (np.asarray(c) for c in req.marks["prefill"])
        wait = (start - entry)[n // 20:]
        means.append(wait.mean())
        p0.append((wait == 0).mean())
        p1.append((wait <= 1.0).mean())
        util.append(res.stations[0].utilization)
    for xs, exact in ((means, 1.324908), (p0, 0.034511), (p1, 0.551829), (util, 0.9655)):
        xs = np.asarray(xs)
        se = xs.std(ddof=1) / math.sqrt(len(xs))
        assert abs(xs.mean() - exact) <= 3 * se + 1e-4 * exact, (xs, exact)


def test_colocated_kv_capacity_blocks_admission():
    """KV for one request only: the second waits until the first's last token frees it."""
    plan = single_plan("colocated", decode_kv_capacity_tokens=1100)
    _, req = simulate(plan, make_trace([0.0, 0.01], [1000, 1000], [5, 5]), warmup_fraction=0.0)
    _, start, _ = req.marks["colocated"]
    assert start[1] == pytest.approx(req.t_last[0])
    assert req.t_first[1] == pytest.approx(req.t_last[0] + 0.05 + 0.1)


def test_chunked_kv_capacity_blocks_admission():
    plan = single_plan("chunked", decode_kv_capacity_tokens=1100)
    _, req = simulate(plan, make_trace([0.0, 0.01], [1000, 1000], [5, 5]), warmup_fraction=0.0)
    _, start, _ = req.marks["chunked"]
    assert start[1] == pytest.approx(req.t_last[0])


def test_overload_is_flagged():
    """Prefill D = 1 s at 2 req/s cannot keep up: the result says so instead of pretending."""
    res = replay_plan(disagg(), make_trace(np.arange(400) * 0.5, 100, 1))
    assert any("did not keep up" in w for w in res.warnings)
    assert not any("did not keep up" in w for w in replay_plan(disagg(), make_trace(np.arange(400) * 2.0, 100, 1)).warnings)


@pytest.mark.parametrize("sharing", ["fcfs", "fair"])
def test_link_queue_matches_mg1_formulas(sharing):
    """One path fed by Poisson transfers (prefill takes 1 ns, so its departures are the arrivals):
    FCFS is M/G/1, E[T] = E[S] + lambda E[S^2] / (2 (1 - rho)) (Pollaczek-Khinchine); fair sharing is
    M/G/1-PS, E[T] = E[S] / (1 - rho), insensitive to the size law (docs/methods.md, "Stations": kv_transfer). S = X/C with
    prompt lengths uniform on 1..1999 tokens, rho = 0.6; tolerance 3 SE from 8 replications."""
    lam, C, bpt = 6.0, 1e6, 100.0  # E[S] = 1000 * 100 / 1e6 = 0.1 s -> rho = 0.6
    sizes = np.arange(1, 2000) * bpt / C
    ES, ES2 = sizes.mean(), (sizes ** 2).mean()
    rho = lam * ES
    exact = ES / (1 - rho) if sharing == "fair" else ES + lam * ES2 / (2 * (1 - rho))
    plan = disagg(prefill_model=LinearModel(alpha=1e-9), max_batch_tokens=1, kv_bytes_per_token=bpt,
                  path_bandwidth_bytes_per_s=C, link_sharing=sharing)
    means = []
    for seed in range(8):
        n = 8000
        rng = np.random.default_rng(500 + seed)
        tr = make_trace(poisson(n, lam, 600 + seed), rng.integers(1, 2000, n), 2)
        _, req = simulate(plan, tr, warmup_fraction=0.0)
        entry, _, exit_ = (np.asarray(c) for c in req.marks["kv_transfer"])
        means.append((exit_ - entry)[n // 10:].mean())
    means = np.asarray(means)
    se = means.std(ddof=1) / math.sqrt(len(means))
    assert abs(means.mean() - exact) <= 3 * se + 1e-6, (means.mean(), exact, se)


def test_fcfs_layerwise_batch_chunks_interleave_and_hold_the_path():
    """Two requests in one batch (T = 4 s over 10 layers), X/C = 1 s and 3 s: one group, G = 0.4 s
    per layer; it starts with layer 0 at t_s + 0.4 and its last layer leaves by
    F = max(0.4 + 10 G, T + G) = 4.4; request ends F - G + X_r/(lC): 4.1 and 4.4 (+ 0.05 latency).
    A request of the next batch (prefill 4 s from t_s + 4) queues behind the held path."""
    tr = make_trace([0.0, 0.0, 0.0, 0.0], [1000, 1000, 3000, 4000], [1, 2, 2, 2])
    _, req = simulate(kv_plan("fcfs", "layerwise", max_batch_tokens=4000), tr, warmup_fraction=0.0)
    _, pstart, pend = req.marks["prefill"]
    entry, start, exit_ = req.marks["kv_transfer"]
    t_s = pstart[1]
    assert pend[1] - t_s == pytest.approx(4.0)
    assert entry[1] == entry[2] == pytest.approx(t_s + 0.4)
    assert exit_[1] - t_s == pytest.approx(4.1 + 0.05, rel=1e-12)
    assert exit_[2] - t_s == pytest.approx(4.4 + 0.05, rel=1e-12)
    # request 3: batch t_s + 4 .. t_s + 8, group of one, X/C = 4 s, G = 0.4; starts at its first layer
    # t_s + 4.4 (the path is free from t_s + 4.4): F = max(4.4 + 4, 8 + 0.4) = 8.4
    assert pstart[3] - t_s == pytest.approx(4.0)
    assert exit_[3] - t_s == pytest.approx(8.4 + 0.05, rel=1e-12)


@pytest.mark.parametrize("topology", ["colocated", "chunked"])
def test_single_pool_prefix_lru_from_hash_ids(topology):
    """Mooncake hash_ids on one colocated/chunked instance: the second request shares block 1."""
    tr = make_trace([0.0, 10.0], [1024, 1024], 2, hash_ids=((1, 2), (1, 3)))
    _, req = simulate(single_plan(topology, prefix_cache_blocks=8), tr, warmup_fraction=0.0)
    assert req.cached == [0, 512]


@pytest.mark.parametrize("topology", ["disaggregated", "colocated", "chunked"])
def test_littles_law_is_exact_on_the_window_whatever_the_run_length(topology):
    """Issue 16.15: L·T against the sojourns clipped to the window [w0, w1] is a sample-path
    identity, so the check is round-off (tolerance 1e-9, stated in the report) even for a run of
    800 requests, where the unclipped L = λW differed by its warm-up/drain edge terms (~1%)."""
    from qmodel.validation.replay import LITTLE_TOLERANCE

    res = replay_plan(mixed_plan(topology), busy_trace(800, seed=3), seed=7)
    for s in res.stations:
        assert s.little_rel_error <= LITTLE_TOLERANCE, (s.name, s.little_rel_error)
    assert res.conservation.little_max_rel_error <= LITTLE_TOLERANCE
    assert any("Little's law" in a and "1e-09" in a for a in res.header.assumptions)
    assert not any("Little" in w for w in res.warnings)


def test_non_finite_statistic_fails_loudly(monkeypatch):
    """Issue 16.13: a NaN statistic used to be written as 0.0; now the replay raises
    NumericalError naming the field (CLI exit 4)."""
    from qmodel.errors import NumericalError
    from qmodel.validation.stations import PrefillStation as ReplayPrefill

    monkeypatch.setattr(ReplayPrefill, "extra", lambda self: {"mean_batch": float("nan")})
    with pytest.raises(NumericalError, match=r"prefill\.mean_batch is nan"):
        replay_plan(mixed_plan("disaggregated"), busy_trace(200, seed=3), seed=7)


def test_replay_wires_every_topology_by_its_name() -> None:
    """The replay's wiring and its assumption notes cover exactly the deployment shapes the solver
    knows (issue 19: one Topology name per shape, shared by the solver and its referee), and each
    shape's pools are fields of its deployment model."""
    from qmodel.scenario import ChunkedDeployment, ColocatedDeployment, DisaggregatedDeployment
    from qmodel.topology import TOPOLOGIES
    from qmodel.validation.replay_run import WIRING
    from qmodel.validation.replay_stats import SHAPE_NOTES

    assert set(WIRING) == set(TOPOLOGIES) == set(SHAPE_NOTES)
    models = {m.model_fields["topology"].default: m for m in (ColocatedDeployment, ChunkedDeployment, DisaggregatedDeployment)}
    for name, cls in TOPOLOGIES.items():
        assert set(cls.pool_roles) <= set(models[name].model_fields), name
        assert cls.separate_prefill == (len(cls.pool_roles) == 2), name
