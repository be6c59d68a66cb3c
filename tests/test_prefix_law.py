"""Prefix caching as a per-request law (issue 18 §3; docs/methods.md, "Prefix-cache hits").

Exact anchors: the block LRU's hit counts on a hand-built hash sequence, in the solver's
:func:`lru_cached_tokens` and the replay's cache (one :class:`BlockLRU`); the stated mixture's node
count and moments (floor(N f) of N nodes hit, spread evenly over prompt ranks); the mixture with
f = 1 is the uniform ratio, array for array. The replay's mixture draws are its own seeded stream.
Replay agreement on the Mooncake conversation trace: tolerance from docs/validation.md, "Prefix
caching per request" (needs the data folder).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_models import LinearModel  # noqa: E402

from qmodel.build import resolve  # noqa: E402
from qmodel.errors import InputError  # noqa: E402
from qmodel.prefix_cache import (BlockLRU, cache_blocks, lru_cached_tokens, mixture_draws, mixture_nodes,  # noqa: E402
                                 uncached_tokens)
from qmodel.scenario import parse_scenario, scenario_sha256  # noqa: E402
from qmodel.validation.replay import ReplayPlan, simulate  # noqa: E402
from qmodel.validation.trace_types import Trace  # noqa: E402

HASHES = ((1, 2), (1, 3), (4, 5), (1, 2))
PROMPTS = np.array([1024, 1024, 1024, 1024])


def _trace(hash_ids=None, n: int = 4, prompt: int = 1024) -> Trace:
    a = np.arange(n, dtype=float) * 10.0
    p = np.full(n, prompt, dtype=np.int64)
    o = np.ones(n, dtype=np.int64)
    return Trace(a, p, o, "test", "synthetic", Trace.digest_arrays(a, p, o), hash_ids=hash_ids)


def _plan(**kw) -> ReplayPlan:
    base = dict(topology="disaggregated", decode_model=LinearModel(), decode_instances=1,
                decode_kv_capacity_tokens=10**7, prefill_model=LinearModel(gamma=0.001), max_batch_tokens=8192)
    return ReplayPlan(**{**base, **kw})


@pytest.mark.parametrize("capacity, expected", [(3, [0, 512, 0, 0]), (100, [0, 512, 0, 1023])])
def test_lru_hits_exact_and_shared_with_the_replay(capacity, expected):
    """r0 misses; r1 finds block 1 (512 tokens); r2 misses; r3: with 3 blocks the LRU holds {3, 4, 5}
    after r2 (1 and 2 evicted, block 1 counted once though two prompts share it) and misses; with 100
    it hits both blocks but still computes its last token (1023). The replay's cache says the same."""
    assert lru_cached_tokens(HASHES, PROMPTS, 1, capacity).tolist() == expected
    _, req = simulate(_plan(prefix_cache_blocks=capacity), _trace(HASHES), warmup_fraction=0.0)
    assert req.cached == expected


def test_lru_dispatch_reads_every_cth_request():
    """Over c = 2 instances request i uses instance i mod 2: the repeat at i = 2 hits, at i = 1 it does not."""
    h = ((7, 8), (7, 8), (7, 8), (9,))
    assert lru_cached_tokens(h, PROMPTS, 2, 100).tolist() == [0, 0, 1023, 0]
    _, req = simulate(_plan(prefix_cache_blocks=100, prefill_instances=2, prefill_dispatch="round_robin"),
                      _trace(h), warmup_fraction=0.0)
    assert req.cached == [0, 0, 1023, 0]


def test_block_lru_counts_a_shared_block_once():
    lru = BlockLRU(3)
    lru.insert((1, 2))
    lru.insert((1, 3))
    assert list(lru.blocks) == [2, 1, 3] and lru.lookup((1, 3, 9)) == 2 and lru.lookup((2,)) == 1
    assert cache_blocks(485376.9) == 948 and cache_blocks(511) == 0


def test_mixture_nodes_exact_moments():
    """floor(N f) nodes hit, floor((k+1) f) - floor(k f) in prompt-rank order: every quarter of the
    prompt ranks holds exactly N f / 4 hits when N f / 4 is whole, so hit and length are independent."""
    rng = np.random.default_rng(5)
    p = rng.integers(100, 20000, size=4096)
    hit = mixture_nodes(p, 0.25)
    assert hit.sum() == 1024
    order = np.argsort(p, kind="stable")
    assert [int(hit[order[q * 1024:(q + 1) * 1024]].sum()) for q in range(4)] == [256] * 4
    assert mixture_nodes(p, 0.3).sum() == math.floor(4096 * 0.3)
    u = uncached_tokens(p, 0.9, hit)
    assert np.array_equal(u[~hit], p[~hit]) and np.array_equal(u[hit], np.maximum(1, np.rint(p[hit] * (1.0 - 0.9))))


def _raw(prefix: dict, lengths: dict | None = None, arrivals: dict | None = None) -> dict:
    return {"name": "prefix", "model": "llama-3.1-70b",
            "workload": {"arrivals": arrivals or {"kind": "poisson", "rate_per_s": 1.0},
                         "lengths": lengths or {"kind": "fixed", "prompt_tokens": 5800, "output_tokens": 512}, **prefix},
            "slo": {"ttft_s": "2 s", "tpot_s": "100 ms"},
            "deployment": {"topology": "colocated", "pool": {"gpu": "h200-sxm", "tp": 2, "instances": 1}},
            "perf": {"kind": "roofline"}}


def test_solver_mixture_on_fixed_lengths_is_exact():
    """One fixed prompt is repeated to 4096 nodes; floor(4096 x 0.3) = 1228 of them compute rint(5800 x 0.1)."""
    r = resolve(parse_scenario(_raw({"prefix_cache": {"kind": "mixture", "hit_fraction": 0.3, "hit_ratio": 0.9}})))
    assert len(r.uncached_prompt) == len(r.lengths.prompt) == len(r.lengths.output) == 4096
    assert r.uncached_prompt.mean() == (1228 * 580 + (4096 - 1228) * 5800) / 4096
    assert np.all(r.lengths.prompt == 5800)


def test_mixture_of_all_requests_is_the_uniform_ratio():
    lg = {"kind": "lognormal", "prompt_median_tokens": 2000, "prompt_sigma": 1.0, "output_median_tokens": 200,
          "output_sigma": 0.5}
    mix = resolve(parse_scenario(_raw({"prefix_cache": {"kind": "mixture", "hit_fraction": 1.0, "hit_ratio": 0.6}}, lg)))
    uni = resolve(parse_scenario(_raw({"prefix_hit_ratio": 0.6}, lg)))
    assert np.array_equal(mix.uncached_prompt, uni.uncached_prompt)


def test_absent_prefix_cache_keeps_the_scenario_digest():
    """Unchanged scenarios dump (and hash) as before: no prefix_cache key when it is not given."""
    sc = parse_scenario(_raw({"prefix_hit_ratio": 0.6}))
    assert "prefix_cache" not in sc.model_dump()["workload"]
    assert scenario_sha256(sc) != scenario_sha256(parse_scenario(_raw(
        {"prefix_cache": {"kind": "mixture", "hit_fraction": 1.0, "hit_ratio": 0.6}})))


def test_replay_mixture_draws_its_own_seeded_stream():
    """A request hits iff u_r < f (u from default_rng([seed, 3])); hits skip floor(h P), misses nothing."""
    n = 4
    plan = _plan(prefix_law="mixture", prefix_hit_ratio=0.5, prefix_hit_fraction=0.5)
    _, req = simulate(plan, _trace(None, n), seed=7, warmup_fraction=0.0)
    draws = mixture_draws(n, 0.5, 7)
    assert req.prefix_hit == draws
    assert req.cached == [512 if d else 0 for d in draws]
    big = mixture_draws(20000, 0.3, 1)
    assert abs(np.mean(big) - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 20000)  # binomial: 4 standard errors
    assert mixture_draws(20000, 0.3, 1) == big and mixture_draws(5, 1.0, 1) == [True] * 5


def test_mixture_overrides_the_hash_lru_in_the_replay():
    _, req = simulate(_plan(prefix_law="mixture", prefix_hit_ratio=0.5, prefix_hit_fraction=1.0,
                            prefix_cache_blocks=100), _trace(HASHES), warmup_fraction=0.0)
    assert req.cached == [512] * 4


@pytest.mark.parametrize("prefix, match", [
    ({"prefix_hit_ratio": 0.3, "prefix_cache": {"kind": "trace_hashes"}}, "not both"),
    ({"prefix_cache": {"kind": "trace_hashes"}}, "same trace file"),
])
def test_impossible_combinations_are_one_line_errors(prefix, match):
    with pytest.raises(InputError, match=match) as e:
        resolve(parse_scenario(_raw(prefix)))
    assert "\n" not in str(e.value)


def test_trace_hashes_need_a_trace_with_hash_ids():
    _, req = simulate(_plan(prefix_law="ratio"), _trace(None), warmup_fraction=0.0)  # the default needs none
    with pytest.raises(InputError, match="hash_ids"):
        simulate(_plan(prefix_law="trace_hashes"), _trace(None), warmup_fraction=0.0)


TRACE = "data:mooncake/conversation_trace.jsonl"


def _mooncake(dep: dict, prefix: dict) -> dict:
    return {"name": "mooncake-prefix", "model": "llama-3.1-70b", "slo": {"ttft_s": 10.0, "tpot_s": 0.2},
            "perf": {"kind": "roofline"}, "deployment": dep,
            "workload": {"arrivals": {"kind": "trace", "path": TRACE, "format": "mooncake", "jitter_seed": 1},
                         "lengths": {"kind": "empirical", "path": TRACE, "format": "mooncake"}, **prefix}}


DISAGG = {"topology": "disaggregated", "prefill": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch_tokens": 16384},
          "decode": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch": 256},
          "link": "roce-4x200", "link_sharing": "fcfs", "transfer_mode": "layerwise"}
COLOCATED = {"topology": "colocated", "max_batch_tokens": 16384,
             "pool": {"gpu": "h200-sxm", "tp": 8, "instances": 2, "max_batch": 256, "dispatch": "least_loaded"}}


@pytest.mark.slow
@pytest.mark.needs_data("mooncake/conversation_trace.jsonl")
def test_trace_hashes_match_the_replay_request_for_request():
    """One prefill instance: the solver's LRU over the trace order is the replay's, request for request
    (the replay's batches share no block within a batch; at 0.6 req/s no batch holds two turns of one
    conversation). Two least_loaded colocated instances (the solver reads dispatch as every other
    request): the mean cached fraction within 3% (measured -1.0 / -2.5 / +1.4% at 0.6 / 1.0 / 1.5 req/s)."""
    from qmodel.validation.replay import replay_requests

    sc = parse_scenario(_mooncake(DISAGG, {"prefix_cache": {"kind": "trace_hashes"}}))
    r = resolve(sc)
    _, req = replay_requests(sc.with_rate(0.6), seed=1)
    assert np.array_equal(np.asarray(req.cached), r.lengths.prompt - r.uncached_prompt)
    sc = parse_scenario(_mooncake(COLOCATED, {"prefix_cache": {"kind": "trace_hashes"}}))
    r = resolve(sc)
    _, req = replay_requests(sc.with_rate(1.0), seed=1)
    solver_hit = 1.0 - r.uncached_prompt.sum() / r.lengths.prompt.sum()
    replay_hit = np.sum(req.cached) / np.sum(req.prompt)
    assert replay_hit == pytest.approx(solver_hit, rel=0.03)


def test_trace_hashes_refuse_a_trace_without_hash_ids(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,200,20\n2,300,5\n")
    lg = {"kind": "empirical", "path": str(path), "format": "qmodel"}
    arr = {"kind": "trace", "path": str(path), "format": "qmodel"}
    with pytest.raises(InputError, match="block hashes"):
        resolve(parse_scenario(_raw({"prefix_cache": {"kind": "trace_hashes"}}, lg, arr)))


MIX_DEP = {"topology": "colocated", "max_batch_tokens": 8192,
           "pool": {"gpu": "h200-sxm", "tp": 1, "instances": 1, "max_batch": 256, "compute_dtype": "fp8", "kv_dtype": "fp8"}}
MIX_LENGTHS = {"kind": "lognormal", "prompt_median_tokens": 5800, "prompt_sigma": 0.3, "prompt_max_tokens": 16000,
               "output_median_tokens": 300, "output_sigma": 0.5}


@pytest.mark.parametrize("u", [0.3, 0.6])
def test_mixture_agrees_with_the_replay(u):
    """Llama-3.1-70B FP8 on one H200, 80% of requests hitting 90% of a ~5.8k-token prompt
    (docs/validation.md, "Prefix caching per request"): TTFT p50/p90/p99 within 20% of the replay
    (measured -10.6..-13.6 / -0.2..-1.4 / -2.4..+1.1%, plus ~5 points of seed spread). The uniform
    ratio with the same mean (0.72) misses p50 by +67..+81% and p90 by -56..-57%: it fails the band."""
    from qmodel.solver import Solver
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    raw = _raw({"prefix_cache": {"kind": "mixture", "hit_fraction": 0.8, "hit_ratio": 0.9}}, MIX_LENGTHS)
    raw["deployment"] = MIX_DEP
    sc = parse_scenario(raw)
    solver = Solver(sc)
    rate = u * solver.max_stable_rate()[0]
    rep = latency_metrics(replay(sc.with_rate(rate), n_requests=20000, seed=1))
    an = latency_metrics(solver.solve(rate))
    uni_raw = {**raw, "workload": {**raw["workload"], "prefix_hit_ratio": 0.72}}
    del uni_raw["workload"]["prefix_cache"]
    uni = latency_metrics(Solver(parse_scenario(uni_raw)).solve(rate))
    for k in ("ttft_p50", "ttft_p90", "ttft_p99"):
        assert an[k] == pytest.approx(rep[k], rel=0.20), k
    assert abs(uni["ttft_p50"] / rep["ttft_p50"] - 1) > 0.5 and abs(uni["ttft_p90"] / rep["ttft_p90"] - 1) > 0.5


def test_validity_envelope_sees_a_mixture_hit():
    """A stated hit/miss mixture is a prefix cache for the validity band too: the envelope's
    "prefix hit ratio" is the law's mean cached share (f x h here), not the unset uniform ratio, so a
    scenario the corpus never drew (it draws no cache) is flagged outside the envelope."""
    from qmodel.build import resolve
    from qmodel.scenario import load_scenario
    from qmodel.validity import envelope_values
    from tests.data_needs import EXAMPLES

    path = EXAMPLES / "llama3-70b-disagg-h100.yaml"
    plain = resolve(load_scenario(path))
    mixed = resolve(load_scenario(path, ["workload.prefix_cache.kind=mixture", "workload.prefix_cache.hit_fraction=0.8",
                                         "workload.prefix_cache.hit_ratio=0.9"]))
    assert envelope_values(plain)[1]["prefix hit ratio"] == 0.0
    assert envelope_values(mixed)[1]["prefix hit ratio"] == pytest.approx(0.72, abs=0.01)


@pytest.mark.needs_data("mooncake/conversation_trace.jsonl")
def test_planner_feasibility_filter_reads_the_trace_hits():
    """The planner's "TTFT infeasible at any rate" filter prefills what an idle instance computes: with
    trace_hashes, the uncached prompts of the block LRU (one instance, whole stream), not whole prompts.
    The SLO sits between the two readings' shares of prompts prefilled in time, so whole prompts (the
    code before) refuse a GPU the cache makes feasible."""
    from qmodel.build import trace_hash_uncached
    from qmodel.planner.evaluate import EngineEvaluator

    raw = _mooncake(DISAGG, {"prefix_cache": {"kind": "trace_hashes"}})
    sc = parse_scenario(raw)
    r = resolve(sc)
    pre = r.pools["prefill"]
    t_whole = np.sort(np.asarray(pre.service.prefill_exit_s(pre.service.prefill_one_s(r.lengths.prompt)), dtype=float))
    hits = trace_hash_uncached(sc, r.lengths, pre)
    t_hit = np.sort(np.asarray(pre.service.prefill_exit_s(pre.service.prefill_one_s(hits)), dtype=float))
    goal = sc.slo.attainment_goal
    k = int(np.ceil(goal * len(t_hit))) - 1
    ttft = float(t_hit[k]) * 1.0001  # goal met with the cache's hits, by construction
    assert np.mean(t_whole <= ttft) < goal  # ... and missed with whole prompts
    raw["slo"] = {**raw["slo"], "ttft_s": ttft}
    ev = EngineEvaluator(parse_scenario(raw))
    assert ev.pool_issue("prefill", "h200-sxm", 8) is None
