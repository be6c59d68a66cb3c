"""Replay invariants on random small deployments (hypothesis): every request is accounted for,
times are ordered, nothing is NaN, and each request's TTFT covers at least its own prefill."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_models import LinearModel  # noqa: E402

from qmodel.validation.replay import ReplayPlan, simulate  # noqa: E402
from qmodel.validation.trace_types import Trace  # noqa: E402

plans = st.fixed_dictionaries({
    "topology": st.sampled_from(["disaggregated", "colocated", "chunked"]),
    "decode_instances": st.integers(1, 3),
    "prefill_instances": st.integers(1, 3),
    "decode_kv_capacity_tokens": st.integers(500, 20000),
    "decode_max_batch": st.integers(1, 16),
    "decode_dispatch": st.sampled_from(["least_loaded", "round_robin", "random"]),
    "prefill_dispatch": st.sampled_from(["least_loaded", "round_robin", "random"]),
    "max_batch_tokens": st.integers(1, 4000),
    "chunk_tokens": st.integers(16, 600),
    "link_sharing": st.sampled_from(["dedicated", "fcfs", "fair"]),
    "transfer_mode": st.sampled_from(["serialized", "layerwise"]),
    "first_token_from": st.sampled_from(["prefill", "decode"]),
    "prefix_hit_ratio": st.sampled_from([0.0, 0.3]),
    "layers": st.integers(1, 80),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans, st.integers(0, 2**31 - 1), st.integers(1, 60))
def test_invariants(cfg, seed, n):
    rng = np.random.default_rng(seed)
    arrival = np.concatenate([[0.0], np.cumsum(rng.exponential(0.05, n - 1))])
    if n > 3:
        arrival[2] = arrival[1]  # simultaneous arrivals
    prompt = rng.integers(1, 3000, n)
    output = rng.integers(1, 300, n)
    tr = Trace(arrival, prompt, output, "prop", "synthetic", Trace.digest_arrays(arrival, prompt, output))
    model = LinearModel(alpha=0.01, gamma=1e-5, per_req=1e-3, a=0.005, b=1e-4, c=1e-7)
    plan = ReplayPlan(decode_model=model, prefill_model=model, kv_bytes_per_token=1e4,
                      path_bandwidth_bytes_per_s=1e8, link_latency_s=1e-4, **cfg)
    res, req = simulate(plan, tr, seed=seed, warmup_fraction=0.0)
    c = res.conservation
    assert c.unfinished == 0 and c.completed + c.dropped == n
    need = prompt + output
    assert c.dropped == int((need > plan.decode_kv_capacity_tokens).sum()) or (
        cfg["topology"] == "disaggregated" and cfg["first_token_from"] == "prefill")
    for r in range(n):
        if req.dropped[r]:
            continue
        a, f, l = req.arrival[r], req.t_first[r], req.t_last[r]
        assert a <= f + 1e-12 <= l + 2e-12, (r, a, f, l)
        assert f - a >= 0.01 - 1e-12  # at least the prefill overhead alpha
        for name, (entry, start, exit_) in req.marks.items():
            if not math.isnan(entry[r]):
                assert entry[r] <= start[r] + 1e-12 <= exit_[r] + 2e-12, (name, r)
    for s in res.stations:
        for v in (s.utilization, s.mean_in_system, s.mean_wait_s, s.little_rel_error):
            assert math.isfinite(v) and v >= 0
    for d in (res.ttft, res.tpot, res.e2e):
        assert d.p50 <= d.p90 + 1e-12 <= d.p99 + 2e-12


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["colocated", "chunked"]), st.integers(0, 2**31 - 1), st.integers(2, 40))
def test_least_loaded_counts_waiting_prompts_plus_reserved_kv(topology, seed, n):
    # The single-pool dispatch's load is, at every arrival and on every instance, the prompt tokens
    # still waiting plus the KV reserved by admitted requests (prompt + output): a prompt stops
    # counting as waiting when its KV is reserved (it was counted twice for a request's whole life
    # before), and every instance ends at 0.
    import qmodel.validation.stations._batching as batching

    rng = np.random.default_rng(seed)
    arrival = np.concatenate([[0.0], np.cumsum(rng.exponential(0.02, n - 1))])
    prompt = rng.integers(1, 2000, n)
    output = rng.integers(1, 200, n)
    tr = Trace(arrival, prompt, output, "prop", "synthetic", Trace.digest_arrays(arrival, prompt, output))
    model = LinearModel(alpha=0.01, gamma=1e-5, per_req=1e-3, a=0.005, b=1e-4, c=1e-7)
    plan = ReplayPlan(decode_model=model, prefill_model=model, kv_bytes_per_token=1e4, path_bandwidth_bytes_per_s=1e8,
                      link_latency_s=1e-4, topology=topology, decode_instances=3, decode_dispatch="least_loaded",
                      decode_kv_capacity_tokens=10**6, decode_max_batch=64, chunk_tokens=256)
    seen: list[object] = []
    orig = batching.SinglePoolStation.choose_instance

    def check(self, r):
        seen.append(self)
        for d in self.inst:
            assert d.load == sum(int(self.req.prompt[w]) for w in d.waiting) + d.kv_used
        return orig(self, r)

    batching.SinglePoolStation.choose_instance = check
    try:
        simulate(plan, tr, seed=seed, warmup_fraction=0.0)
    finally:
        batching.SinglePoolStation.choose_instance = orig
    assert seen and all(d.load == 0 and d.kv_used == 0 for d in seen[-1].inst)
