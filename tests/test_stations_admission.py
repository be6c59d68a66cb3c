"""KV admission wait in the colocated and chunked TTFT (issue 15 item 8): a prompt that finds the
slot cap (KV or max_batch) reached waits for a free slot before its prefill, as in the decode
station (qmodel.stations.decode.admission_wait)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmodel.errors import UnstableError

from qmodel.stations.chunked import ChunkedStation
from qmodel.stations.colocated import ColocatedStation
from qmodel.stations.decode import slot_wait
from tests.des_micro import LinearService

SVC = LinearService(0.010, 0.0001, 0.0, alpha=0.020, gamma=1e-4)


def _lengths():
    rng = np.random.default_rng(7)
    P = np.maximum(1, np.round(rng.lognormal(math.log(300), 0.6, 4096)))
    return P, rng.geometric(1 / 200, 4096)


@pytest.mark.parametrize("cls,kw", [(ColocatedStation, {"max_batch": 8}),
                                    (ChunkedStation, {"max_batch": 1, "chunk_tokens": 512})])
def test_ttft_holds_the_slot_wait_at_the_cap(cls, kw):
    # A slot cap that the chain sits at a large share of the time (0.9 of the limit): the TTFT must
    # carry the slot wait (mean P(N >= cap) / rate: 1.76 s colocated, 0.30 s chunked). Before the fix
    # it had none (TTFT mean 0.07 / 0.06 s). Exact checks: the TTFT is the slot wait plus nonnegative
    # terms, so its mean is at least the wait's and P(TTFT > x) >= P(W > x) = p e^{-r x}.
    P, L = _lengths()
    st = cls(SVC, P, L, **kw)
    s = st.solve(0.9 * st.max_stable_rate_per_s())
    w = s.extra["mean_slot_wait_s"]
    assert w > 0.2
    assert s.delay.mean_s >= w
    assert s.wait.mean_s >= w
    for q in (0.5, 0.9, 0.99):
        assert math.isfinite(s.delay.quantile(q))
    assert s.delay.quantile(0.99) > s.delay.quantile(0.9) > w


def test_colocated_slot_wait_matches_the_decode_rule():
    # the colocated chain's slot wait is decode's rule at decode capacity 1 - rho_p (one formula)
    P, L = _lengths()
    st = ColocatedStation(SVC, P, L, max_batch=8)
    rate = 0.9 * st.max_stable_rate_per_s()
    s = st.solve(rate)
    rho_p = s.extra["rho_p"]
    tok = rate * st.mean_output / (1.0 - rho_p)
    pi, tail, rc = st.chain.solve(tok, 64)
    p, r = slot_wait(pi, tail, rc, 8, float(st.chain.g(8)[8]), st.mean_output, st.cv2_output, 1.0 - rho_p)
    # exact: the same formula on the same chain (1e-9 for round-off)
    assert s.extra["mean_slot_wait_s"] == pytest.approx(p / r, rel=1e-9)
    assert p > 0.3  # the case is at the cap often enough to matter


def test_uncapped_station_unchanged():
    # without a reachable cap the TTFT is unchanged (no admission term at all)
    P, L = _lengths()
    s = ColocatedStation(SVC, P, L).solve(0.5 * ColocatedStation(SVC, P, L).max_stable_rate_per_s())
    assert s.extra["mean_slot_wait_s"] == 0.0


def test_issue_scenario_ttft_against_replay(data_dir, tmp_path):
    # The issue's case: colocated OPT-13B, 2 x A100-80GB TP2, DistServe's vLLM fit, ShareGPT lengths
    # with prompt + output < 2048, KV pool ~50k tokens per instance, 4.5 req/s (0.92 of the limit).
    # No admission term: TTFT p90 0.204 s against the replay's 2.07 s (-90%), mean 0.117 against
    # 0.659 s. Hard-cap slot wait: p90 0.92 s (0.45 of it), mean 0.41 s (0.62). KV soft wall
    # (qmodel/stations/admission.py): p90 1.95 s (0.94), mean 0.615 s (0.93). The replay is noisy
    # here: seeds 0..5 x 20k requests give p90 2.07/2.52/3.84/2.58/1.21/4.46 s (mean 2.78) and mean
    # 0.66/0.70/1.03/0.72/0.51/1.32 s (0.82), so the bands against seed 0 are [0.6, 1.4]: they hold
    # the 6-seed mean too (0.70 and 0.75) and fail the hard-cap form's p90 (0.45).
    import csv

    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario
    from qmodel.validation.replay import replay
    from qmodel.validation.harness import latency_metrics

    rows = list(csv.DictReader(open(data_dir / "length_distributions" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")))
    out = tmp_path / "lengths.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio"])
        for r in rows:
            p, l = int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])
            if p + l < 2048:
                w.writerow([p, l, p + l, p / l])
    scen = tmp_path / "s.yaml"
    scen.write_text(f"""
name: issue15-item8
model: opt-13b
workload:
  arrivals: {{kind: poisson, rate_per_s: 4.5}}
  lengths: {{kind: empirical, path: {out}, format: sharegpt}}
slo: {{ttft_s: "400 ms", tpot_s: "40 ms", attainment_goal: 0.9}}
deployment:
  topology: colocated
  pool: {{gpu: a100-80gb-sxm, tp: 2, instances: 2, kv_memory_fraction: 0.307, max_batch: 256}}
  max_batch_tokens: 4096
perf: {{kind: table, path: "data:distserve/profiler-a100-80g.vllm.json", format: distserve}}
""")
    sc = load_scenario(str(scen))
    s = Solver(sc)._single_pool.solve(4.5)
    rep = latency_metrics(replay(sc, n_requests=20000, seed=0))
    assert 0.6 <= s.delay.quantile(0.9) / rep["ttft_p90"] <= 1.4, (s.delay.quantile(0.9), rep["ttft_p90"])
    assert 0.6 <= s.delay.mean_s / rep["ttft_mean"] <= 1.4, (s.delay.mean_s, rep["ttft_mean"])


def test_soft_wall_without_spread_is_the_hard_cap():
    # exact: a wall with sd 0 at an integer centre c, not rescaled, is the capped GPS chain with cap c,
    # so its (P(wait), rate) is decode's slot_wait on that chain (1e-9: round-off)
    from qmodel.stations.admission import KVWall
    from qmodel.stations.decode import GPSChain

    def step(n):
        return 0.02 + 0.0005 * n

    cap, tok = 30, 700.0  # rho_cap = 700 t(30) / 30 = 0.82
    chain = GPSChain(step, cap=cap)
    pi, tail, rc = chain.solve(tok, 64)
    g = chain.g(cap)
    want = slot_wait(pi, tail, rc, cap, float(g[cap]), 200.0, 0.3, 0.8)
    got = KVWall(centre=float(cap), sd=0.0, cap=cap).slot_wait(g, tok, 0.8, 200.0, 0.3)
    assert got == pytest.approx(want, rel=1e-9)
    # a spread wall (the memory full from ~c - 2 sd) waits more often at the same rate
    spread = KVWall(centre=float(cap), sd=3.0, cap=cap + 10).slot_wait(chain.g(cap + 10), tok, 0.8, 200.0, 0.3)
    assert spread[0] > want[0]


def _kv_wall_scenario(rate):
    from qmodel.scenario import parse_scenario

    return parse_scenario({
        "name": "kv-wall", "model": "opt-13b",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "lognormal", "prompt_median_tokens": 400, "prompt_sigma": 0.8,
                                 "prompt_max_tokens": 1400, "output_median_tokens": 250, "output_sigma": 0.8,
                                 "output_max_tokens": 600}},
        "slo": {"ttft_s": "400 ms", "tpot_s": "40 ms", "attainment_goal": 0.9},
        "deployment": {"topology": "colocated", "max_batch_tokens": 4096,
                       "pool": {"gpu": "a100-80gb-sxm", "tp": 2, "instances": 2, "kv_memory_fraction": 0.2,
                                "max_batch": 256}},
        "perf": {"kind": "table", "path": "catalog/tables/distserve/profiler-a100-80g.vllm.json",
                 "format": "distserve"}}, source="kv-wall")


def test_kv_wall_ttft_against_replay_without_data():
    # KV-capped colocated OPT-13B (bundled DistServe fit), 2 x A100 TP2 least_loaded, lognormal
    # prompt/output (medians 400/250, prompt + output <= 2000), ~30k KV tokens per instance, at 0.92
    # of the limit (5.22 req/s). Replay, seeds 0..5 x 20k requests: TTFT mean 0.73/0.28/0.75/0.73/
    # 0.43/0.56 s (mean 0.58), p90 2.62/0.82/2.70/2.45/1.45/1.90 s (mean 1.99); the seed-to-seed sd of
    # p90 is 0.7 s, so the 6-seed mean carries ~15% (one standard error): bands +-35%. Hard-cap slot
    # wait (main): mean 0.302 s (-48%), p90 0.643 s (-68%); soft wall: 0.642 (+11%), 2.026 (+2%).
    from qmodel.solver import Solver
    from qmodel.validation.replay import replay
    from qmodel.validation.harness import latency_metrics

    sc = _kv_wall_scenario(1.0)
    rate = 0.92 * Solver(sc).max_stable_rate()[0]
    sc = sc.with_rate(rate)
    a = Solver(sc).solve()
    reps = [latency_metrics(replay(sc, n_requests=20000, seed=sd)) for sd in range(6)]
    p90 = float(np.mean([r["ttft_p90"] for r in reps]))
    mean = float(np.mean([r["ttft_mean"] for r in reps]))
    assert a.ttft.p90 == pytest.approx(p90, rel=0.35), (a.ttft.p90, p90)
    assert a.ttft.mean == pytest.approx(mean, rel=0.35), (a.ttft.mean, mean)


def test_kv_wall_ttft_monotone_in_rate_up_to_the_limit():
    # the wall's wait is scaled to vanish only at the station's own limit (rc = lam / limit), so the
    # TTFT percentiles are finite and non-decreasing in the rate all the way (before that scaling the
    # wall's chain went unstable at ~0.97 of the limit and the form fell back to the hard cap:
    # p90 12.1 -> 6.3 s between 0.96 and 0.98 on the issue's case)
    from qmodel.solver import Solver

    sc = _kv_wall_scenario(1.0)
    lim = Solver(sc).max_stable_rate()[0]
    prev = (0.0, 0.0)
    for f in (0.6, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995):
        r = Solver(sc.with_rate(f * lim)).solve()
        cur = (r.ttft.p90, r.ttft.p99)
        assert all(math.isfinite(v) for v in cur)
        assert cur[0] >= prev[0] and cur[1] >= prev[1], (f, prev, cur)
        prev = cur


def test_split_arrival_scv_exact():
    # exact for a renewal stream: cyclic splitting sums c gaps (SCV ca2/c); Bernoulli splitting takes a
    # geometric number of gaps, Var = c sigma^2 + c(c-1) m^2 over (c m)^2 = ca2/c + 1 - 1/c
    from qmodel.stations.fcfs import split_arrival_scv

    assert split_arrival_scv(1.0, 4, cyclic=True) == 0.25  # Poisson round-robin: Erlang-4 gaps
    assert split_arrival_scv(0.25, 2, cyclic=True) == 0.125
    assert split_arrival_scv(1.0, 3, cyclic=False) == pytest.approx(1.0, abs=1e-15)  # Poisson thinned
    assert split_arrival_scv(4.0, 2, cyclic=False) == pytest.approx(2.5, abs=1e-15)
    assert split_arrival_scv(0.3, 1, cyclic=True) == 0.3  # one instance: the stream itself
    assert split_arrival_scv(0.3, 1, cyclic=False) == pytest.approx(0.3, abs=1e-15)


def test_wall_wait_scales_by_allen_cunneen_factor():
    # exact: a smooth arrival SCV changes only the conditional wait's rate, by (1 + c_L^2)/(c_a^2 +
    # c_L^2); c_a^2 = c_L^2 = 0: no wait; a bursty one (c_a^2 > 1) waits more often (the GI/M/1 root
    # sigma > rc: test_wall_bursty_is_gamma_gim1_at_one_slot) and longer on average
    from qmodel.stations.admission import KVWall
    from qmodel.stations.decode import GPSChain

    chain = GPSChain(lambda n: 0.02 + 0.0005 * n, cap=40)
    g = chain.g(40)
    wall = KVWall(centre=30.0, sd=3.0, cap=40)
    p1, r1 = wall.slot_wait(g, 700.0, 0.8, 200.0, 0.3)
    p2, r2 = wall.slot_wait(g, 700.0, 0.8, 200.0, 0.3, arrival_scv=0.1)
    assert p2 == p1
    assert r2 == pytest.approx(r1 * (1.0 + 0.3) / (0.1 + 0.3), rel=1e-12)
    assert wall.slot_wait(g, 700.0, 0.8, 200.0, 0.0, arrival_scv=0.0)[1] == math.inf
    prev = (p1, p1 / r1)
    for ca2 in (1.0 + 1e-9, 2.0, 4.0, 9.0):
        p, r = wall.slot_wait(g, 700.0, 0.8, 200.0, 0.3, arrival_scv=ca2)
        if ca2 < 1.1:  # continuous at c_a^2 = 1
            assert (p, r) == pytest.approx((p1, r1), rel=1e-6)
        assert p >= prev[0] and p / r >= prev[1], (ca2, p, r)
        prev = (p, p / r)


def test_gamma_gim1_sigma_exact():
    # Poisson: sigma = rho; Gamma c_a^2 = 2 (k = 1/2): sigma^2 (1 + 2(1 - sigma)/rho) = 1 has the root
    # sigma = 1 and 2 sigma^2 - rho sigma - rho = 0, so sigma = (rho + sqrt(rho^2 + 8 rho))/4; Erlang-2
    # gaps (c_a^2 = 1/2): sigma = (1 + (1 - sigma)/(2 rho))^-2, whose root in (0, 1) is
    # (1 + 4 rho - sqrt(1 + 8 rho))/2 (1e-12: the bisection's 1e-13 plus round-off)
    from qmodel.stations.fcfs import gamma_gim1_sigma

    for rho in (0.1, 0.5, 0.9, 0.99):
        assert gamma_gim1_sigma(rho, 1.0) == pytest.approx(rho, abs=1e-12)
        assert gamma_gim1_sigma(rho, 2.0) == pytest.approx((rho + math.sqrt(rho * rho + 8 * rho)) / 4, abs=1e-12)
        assert gamma_gim1_sigma(rho, 0.5) == pytest.approx((1 + 4 * rho - math.sqrt(1 + 8 * rho)) / 2, abs=1e-12)
    with pytest.raises(UnstableError):
        gamma_gim1_sigma(1.0, 4.0)


def test_gamma_gim1_sigma_against_lindley():
    # GI/M/1, Gamma gaps (cv 3, c_a^2 = 9) at rho 0.6: mean wait sigma/(mu(1 - sigma)) against the
    # Lindley recursion W' = max(0, W + S - A) over 400k customers after 40k of warm-up, seed 0. The
    # wait's sd is ~2.6 x its mean and its autocorrelation time ~(c_a^2+1)/(1-rho)^2 ~ 60 customers,
    # so the run's standard error is ~1.5%: band 6%. P(W > 0) likewise (sigma = 0.893, Poisson 0.6).
    from qmodel.stations.fcfs import gamma_gim1_sigma

    rho, ca2, n, warm = 0.6, 9.0, 400_000, 40_000
    rng = np.random.default_rng(0)
    gaps = rng.gamma(1.0 / ca2, ca2 / rho, n + warm)  # mean 1/rho, SCV ca2 (mu = 1)
    serv = rng.exponential(1.0, n + warm)
    w, waits = 0.0, np.empty(n + warm)
    for i in range(n + warm):
        waits[i] = w
        w = max(0.0, w + serv[i] - gaps[i])
    sigma = gamma_gim1_sigma(rho, ca2)
    assert float(np.mean(waits[warm:])) == pytest.approx(sigma / (1.0 - sigma), rel=0.06)
    assert float(np.mean(waits[warm:] > 0)) == pytest.approx(sigma, rel=0.03)
    assert sigma > 0.85  # far above the Poisson rho: bursts wait more often


def test_wall_bursty_is_gamma_gim1_at_one_slot():
    # exact: a one-slot wall without spread is M/M/1 in its chain (P_chain = rc), so with bursty
    # arrivals and exponential-like outputs (c_L^2 = 1) its wait is the GI/M/1 one with Gamma gaps:
    # P(wait) = sigma, rate mu (1 - sigma), mu = capacity / (t_d(1) E[L]), rc = token rate x t_d(1)
    from qmodel.stations.admission import KVWall
    from qmodel.stations.fcfs import gamma_gim1_sigma

    g = np.array([0.0, 0.025])
    wall = KVWall(centre=1.0, sd=0.0, cap=1)
    for tok, ca2 in ((20.0, 2.0), (32.0, 4.0), (38.0, 9.0)):
        rc = tok * 0.025
        sigma = gamma_gim1_sigma(rc, ca2)
        p, r = wall.slot_wait(g, tok, 0.8, 200.0, 1.0, arrival_scv=ca2)
        assert p == pytest.approx(sigma, rel=1e-12)
        assert r == pytest.approx(0.8 / (0.025 * 200.0) * (1.0 - sigma), rel=1e-12)


def test_kv_wall_ttft_round_robin_smooth_arrivals_against_replay():
    # The KV-wall case above with round-robin dispatch and Gamma cv 0.5 arrivals (each instance sees
    # every other arrival: c_a^2 = 0.125) at 0.92 of the limit (issue 18: the corpus's colocated cases
    # with smooth or round-robin-split arrivals ran TTFT p90 +100..+800% high). Replay, seeds 0..3 x
    # 20k requests: TTFT mean 0.58/0.36/0.52/0.59 s (mean 0.51), p90 1.99/1.15/1.85/1.87 s (1.72),
    # p99 5.20/3.56/4.04/5.84 s (4.66); the 4-seed means carry ~11% (one standard error): bands
    # +-35%. Wall wait scaled by (1 + c_L^2)/2 (main): mean 1.62 s (+216%), p90 4.97 s (+189%), p99
    # 11.9 s (+155%); by (c_a^2 + c_L^2)/2: 0.647 (+26%), 1.85 (+8%), 4.32 (-7%). Not asserted: p50
    # 0.191 s against 0.100 (+91%; main 0.220).
    _assert_kv_wall_ttft_near_replay("round_robin", 0.5, 0.92, seeds=4, source="kv-wall-rr")


def _assert_kv_wall_ttft_near_replay(dispatch: str, cv: float, load: float, seeds: int, source: str) -> None:
    """The KV-wall case with ``dispatch`` and Gamma(cv) arrivals at ``load`` of its limit: the analytic
    TTFT mean, p90 and p99 within 35% of the replay's mean over ``seeds`` x 20k requests."""
    from qmodel.solver import Solver
    from qmodel.scenario import parse_scenario
    from qmodel.validation.replay import replay
    from qmodel.validation.harness import latency_metrics

    d = _kv_wall_scenario(1.0).model_dump()
    d["deployment"]["pool"]["dispatch"] = dispatch
    d["workload"]["arrivals"] = {"kind": "gamma", "rate_per_s": 1.0, "cv": cv}
    sc = parse_scenario(d, source=source)
    sc = sc.with_rate(load * Solver(sc).max_stable_rate()[0])
    a = Solver(sc).solve()
    reps = [latency_metrics(replay(sc, n_requests=20000, seed=sd)) for sd in range(seeds)]
    for got, key in ((a.ttft.mean, "ttft_mean"), (a.ttft.p90, "ttft_p90"), (a.ttft.p99, "ttft_p99")):
        want = float(np.mean([r[key] for r in reps]))
        assert got == pytest.approx(want, rel=0.35), (key, got, want)


def test_wall_count_centred_so_its_truncation_has_the_schedules_mean():
    # exact (bisection to 1e-12 of the centre): M = min(max(N, 1), cap) has E[M] = the saturated
    # schedule's mean; where that mean is the cap (max_batch binds before KV) M is the cap. Before,
    # N was centred on the mean itself, so a max_batch-bound pool (mean = cap) put ~half of M's mass
    # below the cap (P(M < cap) = 0.40 at sd 2) and waited for memory it never lacks.
    from qmodel.stations.admission import KVWall, truncated_centre

    for mean, sd, cap in ((15.0, 2.0, 20), (19.5, 2.0, 20), (4.55, 1.28, 64), (6.26, 0.52, 64)):
        c = truncated_centre(mean, sd, cap)
        pm = KVWall(centre=c, sd=sd, cap=cap).pmf()
        assert float(np.dot(np.arange(cap + 1), pm)) == pytest.approx(mean, abs=1e-9)
    pm = KVWall(centre=truncated_centre(20.0, 2.0, 20), sd=2.0, cap=20).pmf()
    assert pm[20] > 1.0 - 1e-12
    assert KVWall(centre=20.0, sd=2.0, cap=20).pmf()[:20].sum() == pytest.approx(0.40, abs=0.01)


def test_wall_blocked_states_run_at_the_limit_and_the_rest_free():
    # exact: the states with a queue behind the full memory (n > M) complete at the station's limit,
    # so the conditional wait's rate is (limit - lam)/factor whatever the free-running rate; with the
    # limit equal to the free-running full rate (s = 1) the chain is the unscaled one. A limit below
    # the free-running rate (the full memory admits one prompt per departure: more prefill) lengthens
    # only the blocked states: P(wait) rises, but less than when every state ran at the limit (main).
    from qmodel.stations.admission import KVWall
    from qmodel.stations.decode import GPSChain

    chain = GPSChain(lambda n: 0.02 + 0.0005 * n, cap=40)
    g = chain.g(40)
    wall = KVWall(centre=30.0, sd=3.0, cap=40)
    cap_frac, mean_l, cv2 = 0.8, 200.0, 0.3
    pm = wall.pmf()
    k = np.arange(1, 41, dtype=float)
    free_full = float(np.dot(pm[1:], k / g[1:41])) * cap_frac / mean_l  # completions/s, memory full, free
    lam = 0.85 * free_full
    tok = lam * mean_l / cap_frac
    p0, r0 = wall.slot_wait(g, tok, cap_frac, mean_l, cv2)
    same = wall.slot_wait(g, tok, cap_frac, mean_l, cv2, full_rate_per_s=free_full)
    assert same == pytest.approx((p0, r0), rel=1e-12)
    limit = 0.9 * free_full
    p1, r1 = wall.slot_wait(g, tok, cap_frac, mean_l, cv2, full_rate_per_s=limit)
    assert r1 == pytest.approx((limit - lam) / ((1.0 + cv2) / 2.0), rel=1e-12)
    assert p1 > p0
    # every state at the limit (the form before): the chain sits at the wall more often
    logw = np.concatenate([[0.0], np.cumsum(np.log(tok) - np.log(
        (np.concatenate([[0.0], np.cumsum(pm[1:] * k / g[1:41])[:-1]])
         + np.maximum(1.0 - np.cumsum(pm)[:-1], 0.0) * k / g[1:41]) * limit / free_full))])
    w = np.exp(logw - logw.max())
    rc = lam / limit
    tail = w[-1] * rc / (1.0 - rc)
    p_all = (float(np.dot(w, np.cumsum(pm))) + tail) / (w.sum() + tail)
    assert p0 < p1 < p_all - 0.1, (p0, p1, p_all)  # 0.238 < 0.439 < 0.626


def test_kv_wall_ttft_lognormal_gamma_against_replay_without_data():
    # Corpus case c0136 (seed 0; data-free): OPT-66B colocated on 4 x MI300X TP2 (roofline), random
    # dispatch, Gamma cv 0.857 arrivals, lognormal prompts/outputs (medians 2559/55), KV fraction
    # 0.0948 (binding), max_batch 32, at 0.49 of the limit. The corpus replay (2 seeds x 11565
    # requests): TTFT p90 0.2325 s (noise 0.8%), p99 0.4267 s (noise 7%). Wall with its normal
    # centred on the schedule's mean and every state at the limit (main): p90 0.412 (+77%), p99
    # 3.44 s (+707%); then 0.247 (+6%), 0.404 (-5%). Band +-25%: ~3.5 standard errors of the replay's
    # p99 (7%), far inside the old miss. The rate is kept in req/s (7.687, 0.4907 x main's limit
    # 15.666): the limit is now the saturated schedule's 17.92 (the replay sustains 17.9), so this is
    # 0.429 of it; here 0.234 (-1%), 0.377 (-13%). At 0.49 of the new limit the replay reads p90/p99
    # 0.257/0.683 s and the model 0.251/0.410 (-40% at p99: docs/validation.md, "Colocated limit:
    # the saturated schedule alone", what is left).
    from qmodel.scenario import parse_scenario
    from qmodel.solver import Solver
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    sc = parse_scenario({
        "name": "corpus-0136", "model": "opt-66b",
        "workload": {"arrivals": {"kind": "gamma", "rate_per_s": 1.0, "cv": 0.857},
                     "lengths": {"kind": "lognormal", "correlation": 0.0, "prompt_median_tokens": 2558.9,
                                 "prompt_sigma": 0.744, "prompt_max_tokens": 16384, "output_median_tokens": 55.4,
                                 "output_sigma": 0.937, "output_max_tokens": 2048}},
        "slo": {"ttft_s": 1.801, "tpot_s": 0.03612, "attainment_goal": 0.9},
        "deployment": {"topology": "colocated", "max_batch_tokens": 512,
                       "pool": {"gpu": "mi300x", "tp": 2, "instances": 4, "kv_memory_fraction": 0.0948,
                                "max_batch": 32, "dispatch": "random"}},
        "perf": {"kind": "roofline", "efficiency": "curves", "prefill_per_request_s": 0.0}}, source="c0136")
    sc = sc.with_rate(7.687)
    a = Solver(sc).solve()
    reps = [latency_metrics(replay(sc, n_requests=11565, seed=sd)) for sd in (0, 1)]
    for got, key in ((a.ttft.p90, "ttft_p90"), (a.ttft.p99, "ttft_p99")):
        want = float(np.mean([r[key] for r in reps]))
        assert got == pytest.approx(want, rel=0.25), (key, got, want)


def test_kv_wall_ttft_bursty_arrivals_against_replay():
    # The KV-wall case above with random dispatch and Gamma cv 2 arrivals (each instance sees c_a^2 =
    # 4/2 + 1/2 = 2.5) at 0.9 of the limit (issue 18: the corpus's bursty colocated cases ran TTFT
    # p50/p90/p99 -26/-45/-48% at 0.8-0.9 and -52/-61/-58% at 0.9-0.95, signed medians). Replay,
    # seeds 0..5 x 20k requests: TTFT mean 2.64/2.89/3.40/3.63/2.48/2.90 s (mean 2.99), p90 8.84/
    # 8.48/10.40/11.12/7.84/8.77 s (9.24), p99 16.1/17.9/17.5/16.7/15.7/23.8 s (17.95); the 6-seed
    # means carry 6-7% (one standard error): bands +-35% as the cases above, the model's residual
    # being -22/-19/+4%. With c_a^2 taken at most 1 (main 4e0c0f7, the blocked-state wall): mean
    # 1.15 s (-62%), p90 3.57 s (-61%), p99 9.00 s (-50%); the Gamma GI/M/1 wall on it: 2.32 (-22%),
    # 7.46 (-19%), 18.68 (+4%) (on the wall before 4e0c0f7: 2.24, 7.28, 18.50).
    # Not asserted: p50 0.236 s against 0.64 (-63%; main 0.207).
    _assert_kv_wall_ttft_near_replay("random", 2.0, 0.9, seeds=6, source="kv-wall-bursty")


def test_kv_wall_ttft_bursty_monotone_and_continuous():
    # the GI/M/1 wall (module doc of qmodel.stations.admission): TTFT p90/p99 finite and
    # non-decreasing in the rate up to 0.995 of the limit at Gamma cv 4, non-decreasing in the arrival
    # cv at each rate, and continuous at cv 1 (cv 1.001 within 1% of Poisson; the sigma root and the
    # factor are continuous there, so only the gated law's own cv dependence is left)
    from qmodel.solver import Solver
    from qmodel.scenario import parse_scenario

    def ttft(cv, f):
        d = _kv_wall_scenario(1.0).model_dump()
        d["deployment"]["pool"]["dispatch"] = "random"
        d["workload"]["arrivals"] = {"kind": "gamma", "rate_per_s": 1.0, "cv": cv}
        sc = parse_scenario(d, source="kv-wall-bursty")
        r = Solver(sc.with_rate(f * Solver(sc).max_stable_rate()[0])).solve()
        return r.ttft.p90, r.ttft.p99

    prev = {cv: (0.0, 0.0) for cv in (1.0, 1.001, 4.0)}
    for f in (0.6, 0.9, 0.97, 0.995):
        cur = {cv: ttft(cv, f) for cv in prev}
        for cv, v in cur.items():
            assert all(math.isfinite(x) for x in v) and v[0] >= prev[cv][0] and v[1] >= prev[cv][1], (cv, f)
        assert cur[1.001] == pytest.approx(cur[1.0], rel=1e-2)
        assert cur[4.0][0] >= cur[1.001][0] and cur[4.0][1] >= cur[1.001][1]
        prev = cur
