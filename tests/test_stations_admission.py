"""KV admission wait in the colocated and chunked TTFT (issue 15 item 8): a prompt that finds the
slot cap (KV or max_batch) reached waits for a free slot before its prefill, as in the decode
station (qmodel.stations.decode.admission_wait)."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
    # with prompt + output < 2048, KV pool ~50k tokens per instance, 4.5 req/s. Before: TTFT p90
    # 0.204 s against the replay's 2.07 s (-90%), mean 0.117 against 0.659 s (-82%). With the slot
    # wait: p90 0.92 s, mean 0.41 s. The replay itself is noisy here (3 seeds x 20-40k requests: p90
    # 1.9-3.7 s, mean 0.56-1.05 s), so the bands are wide: p90 and mean at least 0.3 of the replay
    # (the model without the wait is at 0.10 and 0.18).
    import csv

    from qmodel.engine import Solver
    from qmodel.scenario import load_scenario
    from qmodel.validation.engine import replay
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
    assert s.delay.quantile(0.9) >= 0.3 * rep["ttft_p90"], (s.delay.quantile(0.9), rep["ttft_p90"])
    assert s.delay.mean_s >= 0.3 * rep["ttft_mean"], (s.delay.mean_s, rep["ttft_mean"])
