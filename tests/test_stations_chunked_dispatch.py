"""Chunked TTFT under least_loaded dispatch (qmodel/stations/steer.py) against exact laws and the replay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from qmodel.dist import GridDist
from qmodel.stations.steer import steered_wait

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama3-8b-chunked-h100.yaml"


def _two_point(p: float, k: int, dx: float = 0.01) -> GridDist:
    pmf = np.zeros(k + 1)
    pmf[0], pmf[k] = 1.0 - p, p
    return GridDist(dx, pmf, p * k * dx, exact=False)


def test_two_instances_two_point_law_is_exact():
    """V in {0, a}: the loaded instance (a/tau more tokens) is joined only if the Laplace gap D
    exceeds a/tau: P(meet a) = p^2 + 2 p (1 - p) exp(-a/(tau delta))/2, exactly (atoms on the grid)."""
    p, k, dx, tau, delta = 0.4, 30, 0.01, 1e-3, 150.0
    out = steered_wait(_two_point(p, k, dx), 2, tau, delta)
    a = k * dx
    want = p * p + p * (1.0 - p) * math.exp(-a / (tau * delta))
    assert out.pmf[k] == pytest.approx(want, rel=1e-12)
    assert out.pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert out.mean_s == pytest.approx(want * a, rel=1e-12)


def test_limits_random_split_and_single_instance():
    """delta -> inf: the load gap swamps the backlog, a random split (the input law); c = 1: unchanged."""
    law = _two_point(0.3, 50)
    assert steered_wait(law, 1, 1e-3, 10.0) is law
    far = steered_wait(law, 2, 1e-3, 1e12)
    assert far.pmf[50] == pytest.approx(0.3, rel=1e-6)
    near = steered_wait(law, 2, 1e-3, 1e-6)  # exact JSQ on work: wait only if both are loaded
    assert near.pmf[50] == pytest.approx(0.09, rel=1e-9)


def test_monte_carlo_continuous_law():
    """A continuous wait law (atom + exponential), c = 2, against a seeded simulation of the rule
    (4e5 pairs: the mean's standard error is ~0.3%; tolerance 1.5%)."""
    dx, n = 0.01, 300
    x = np.arange(n) * dx
    pmf = np.zeros(n)
    pmf[1:] = np.exp(-x[1:] / 0.5)
    pmf[1:] *= 0.4 / pmf[1:].sum()
    pmf[0] = 0.6
    law = GridDist(dx, pmf, float((x * pmf).sum()), exact=False)
    out = steered_wait(law, 2, 1e-3, 100.0)
    rng = np.random.default_rng(0)
    v = rng.choice(n, size=(400000, 2), p=pmf) * dx
    d = rng.laplace(0.0, 100.0, 400000)
    pick = np.where(v[:, 0] / 1e-3 + d < v[:, 1] / 1e-3, v[:, 0], v[:, 1])
    assert out.mean_s == pytest.approx(pick.mean(), rel=0.015)
    assert out.pmf[0] == pytest.approx((pick == 0).mean(), abs=0.003)


def test_example_ttft_against_replay_half_load():
    """llama3-8b-chunked-h100 (2 instances, least_loaded, Gamma CV 2, budget 512) at half the limit:
    TTFT p50/p90/p99 within 15% of the replay (20k requests, seed 0). Replay noise: seeds 0-3 give
    p50 0.201-0.219, p90 0.650-0.704, p99 1.255-1.357 s (about +-4%); the model is -8/-6/-7% off the
    pooled seeds. Before the least_loaded steering (Erlang C / c on prefill work) the errors were
    -31/-20/-18% (benchmarks/chunked_ttft_breadth.py, docs/validation.md)."""
    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario
    from qmodel.validation.replay import replay
    from qmodel.validation.harness import latency_metrics

    sc = load_scenario(EXAMPLE)
    solver = Solver(sc)
    rate = 0.5 * solver.max_stable_rate()[0]
    an = latency_metrics(solver.solve(rate))
    rep = latency_metrics(replay(sc.with_rate(rate), n_requests=20000, seed=0))
    for k in ("ttft_p50", "ttft_p90", "ttft_p99"):
        assert an[k] == pytest.approx(rep[k], rel=0.15), k


@pytest.mark.parametrize("c,cap,a", [(2, 4, 6.0), (4, 8, 30.0), (3, 1, 1.5)])
def test_pooled_slot_chain_constant_step_is_erlang_c(c, cap, a):
    """jsq's pooled slot chain with a constant step time g is M/M/(c cap): P(n >= c cap) is
    Erlang C(c cap, a) with a = c lam E[L] g offered sequences, exactly (float tolerance)."""
    from qmodel.stations.chunked_slots import pooled_slot_chain
    from qmodel.stations.fcfs import erlang_c

    g = 0.02
    pi, tail, rc = pooled_slot_chain(np.full(cap + 1, g), c, a / (c * g))
    assert len(pi) == c * cap + 1
    assert rc == pytest.approx(a / (c * cap), rel=1e-12)
    assert float(pi[-1]) + tail == pytest.approx(erlang_c(c * cap, a), rel=1e-9)
    assert float(pi.sum()) + tail == pytest.approx(1.0, abs=1e-12)


@pytest.mark.slow
def test_jsq_slot_wait_pooled_against_replay():
    """Generated corpus case c0141 (data-free, seed 0: mixtral-8x7b on 2 x MI300X, chunked budget 1024,
    max_batch 1-8, Poisson at 0.91 of the limit, jsq): TTFT is mostly the wait for a free slot. The
    replay (seeds 0-3 x 40,000 requests, mean of the four) gives TTFT p50/p90/p99 0.149/1.962/3.857 s,
    seeds spreading 0.125-0.208 / 1.80-2.28 / 3.38-4.36 s; the pooled slot chain gives +1/-11/+5%, the
    per-instance chain it replaced +323/+96/+118%. Tolerance: p50 40%, p90/p99 25% (about twice the
    seed spread of the mean)."""
    from qmodel.solver import Solver
    from qmodel.validation.corpus import generate
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    case = next(c for c in generate(200, seed=0, data=False).cases if c.id == "c0141")
    assert case.features["dispatch"] == "jsq" and case.features["instances"] == "2"
    solver = Solver(case.scenario)
    rate = case.utilization * solver.max_stable_rate()[0]
    an = latency_metrics(solver.solve(rate))
    reps = [latency_metrics(replay(case.scenario.with_rate(rate), n_requests=40000, seed=s)) for s in range(4)]
    for k, tol in (("ttft_p50", 0.40), ("ttft_p90", 0.25), ("ttft_p99", 0.25)):
        assert an[k] == pytest.approx(float(np.mean([r[k] for r in reps])), rel=tol), k


def test_slot_wait_allen_cunneen_arrival_factor():
    """The slot wait is :func:`queue_wait` with the arrivals' c_a^2. c_a^2 <= 1: the conditional rate is
    mu_full (1 - rc) / ((c_a^2 + c_L^2)/2) (Allen–Cunneen GI/G/c): Poisson is the old (1 + c_L^2)/2
    reading bit for bit; other c_a^2 scale the rate by (1 + c_L^2)/(c_a^2 + c_L^2) exactly; P(wait)
    does not move; c_a^2 = c_L^2 = 0 waits not at all. c_a^2 = 2 (Gamma gaps, k = 1/2): the GI/M/1 root
    has the closed form sigma = (rc + sqrt(rc^2 + 8 rc))/4, P(wait) = p sigma/rc and the rate
    mu (1 - sigma)(1 + c_a^2)/(c_a^2 + c_L^2), to 1e-12."""
    from qmodel.stations.decode import slot_wait

    pi, tail, rc, cap, g, el, cv2 = np.array([0.2, 0.3, 0.5]), 0.25, 0.8, 2, 0.01, 256.0, 0.6
    mu = cap / (el * g)
    p1, r1 = slot_wait(pi, tail, rc, cap, g, el, cv2)
    assert (p1, r1) == (0.75, mu * (1 - rc) / ((1 + cv2) / 2))
    for ca2 in (0.0, 0.3, 1.0):
        p, r = slot_wait(pi, tail, rc, cap, g, el, cv2, arrival_scv=ca2)
        assert p == p1 and r == pytest.approx(r1 * (1 + cv2) / (ca2 + cv2), rel=1e-12)
    sigma = (rc + math.sqrt(rc * rc + 8 * rc)) / 4
    p, r = slot_wait(pi, tail, rc, cap, g, el, cv2, arrival_scv=2.0)
    assert p == pytest.approx(p1 * sigma / rc, rel=1e-12)
    assert r == pytest.approx(mu * (1 - sigma) * 3.0 / (2.0 + cv2), rel=1e-12)
    assert slot_wait(pi, tail, rc, cap, g, el, 0.0, arrival_scv=0.0)[1] == math.inf


@pytest.mark.parametrize("dispatch,c,seen", [("random", 1, 3.0), ("round_robin", 1, 3.0), ("random", 2, 2.0),
                                             ("round_robin", 2, 1.5), ("least_loaded", 4, 0.75), ("jsq", 2, 3.0)])
def test_chunked_slot_admission_sees_the_split_arrivals(dispatch, c, seen):
    """slot_admission queues with the arrivals one slot queue sees: a random split c_a^2/c + 1 - 1/c,
    round_robin / least_loaded c_a^2/c, the jsq pool the whole stream (c_a^2 = 3 here). Against the
    Poisson stream's wait (constant step: rc 0.8 per instance and in the pool), the mean wait p/rate is,
    exactly: for seen <= 1 the factor (seen + c_L^2)/(seen_Poisson + c_L^2); for seen > 1 the Gamma
    GI/M/1 reading of :func:`qmodel.stations.decode.queue_wait`, (sigma/rc)(1 - rc)/(1 - sigma)
    2 (seen + c_L^2)/((1 + seen)(seen_Poisson + c_L^2)), sigma its root at rc."""
    from qmodel.stations.chunked_slots import slot_admission
    from qmodel.stations.fcfs import gamma_gim1_sigma

    cap, cv2 = 4, 0.5
    g = np.full(cap + 1, 0.02)
    tok = 0.8 * cap / 0.02  # rc 0.8 per instance
    from qmodel.stations.decode import GPSChain
    pi, tail, rc = GPSChain(lambda n: np.full_like(n, 0.02), cap=cap).solve(tok, cap)
    args = (pi, tail, rc, g, c, dispatch, tok, 100.0, cv2)
    w3 = slot_admission(*args, 3.0, 1e-3)
    w1 = slot_admission(*args, 1.0, 1e-3)
    s1 = split1(dispatch, c)
    if seen <= 1.0:
        expected = (seen + cv2) / (s1 + cv2)
    else:
        sigma = gamma_gim1_sigma(rc, seen)
        expected = (sigma / rc) * (1 - rc) / (1 - sigma) * 2 * (seen + cv2) / ((1 + seen) * (s1 + cv2))
    assert w3.mean_s / w1.mean_s == pytest.approx(expected, rel=1e-6)


def split1(dispatch: str, c: int) -> float:
    """What one slot queue sees of a Poisson pool stream (c_a^2 = 1)."""
    if dispatch == "jsq" or c == 1:
        return 1.0
    return 1.0 / c + (1.0 - 1.0 / c if dispatch == "random" else 0.0)


@pytest.mark.slow
@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
                        "mooncake/conversation_trace.jsonl", "splitwise_sim/perf_model.csv",
                        "length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
@pytest.mark.parametrize("cid", ["c0446", "c0135"])
def test_slot_wait_under_gamma_arrivals_against_replay(cid):
    """Data corpus cases (seed 0) whose TTFT is mostly the slot wait, one instance: c0446 (llama-2-7b on
    L40S, max_batch 2, Gamma cv 0.55 at 0.83 of the limit) and c0135 (max_batch 4, Gamma cv 1.45 at 0.92).
    With the Poisson factor the analytic TTFT p90/p99 were +267/+250% and -48/-43% against the
    corpus replay (2 seeds x 100k); with the arrivals' c_a^2, +14/+8% and -16/-8%. Here one 40k replay
    (seed 0); tolerance 35% (the old code misses by 40-270%; replay p90/p99 noise 3-10% at this length)."""
    from qmodel.solver import Solver
    from qmodel.validation.corpus import generate
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    case = next(c for c in generate(600, seed=0, data=True).cases if c.id == cid)
    solver = Solver(case.scenario)
    rate = case.utilization * solver.max_stable_rate()[0]
    an = latency_metrics(solver.solve(rate))
    rep = latency_metrics(replay(case.scenario.with_rate(rate), n_requests=40000, seed=0))
    for k in ("ttft_p90", "ttft_p99"):
        assert an[k] == pytest.approx(rep[k], rel=0.35), k
