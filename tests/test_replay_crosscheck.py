"""The replay against an independent step-by-step simulator (tests/des_micro.py, written separately
for the analytical station tests) on identical arrivals and lengths.

The two implementations share only the documented semantics; the replay fast-forwards runs of
decode steps and truncates them at arrivals, des_micro walks every step. Per-request TTFT and TPOT
must agree to float rounding (rtol 1e-9: sums of the same step times in a different order).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import des_micro  # noqa: E402

from qmodel.validation.replay import ReplayPlan, simulate  # noqa: E402
from qmodel.validation.trace_types import Trace  # noqa: E402


def _lengths(rng, k):
    return rng.integers(50, 1500, k), rng.integers(1, 120, k)


def _same_inputs(rate, horizon, seed):
    """Re-draw des_micro's arrivals and lengths with its own RNG sequence."""
    rng = np.random.default_rng(seed)
    arr = des_micro._arrivals(rate, horizon, rng)
    P, L = _lengths(rng, len(arr))
    return arr, np.asarray(P, dtype=np.int64), np.asarray(L, dtype=np.int64)


def _replay(topology, service, arr, P, L, **kw):
    plan = ReplayPlan(topology=topology, decode_model=service, decode_instances=1,
                      decode_kv_capacity_tokens=10**12, decode_max_batch=10**9, **kw)
    tr = Trace(arr - arr[0], P, L, "crosscheck", "synthetic", Trace.digest_arrays(arr, P, L))
    _, req = simulate(plan, tr, warmup_fraction=0.0)
    first = np.asarray(req.t_first) + arr[0]
    last = np.asarray(req.t_last) + arr[0]
    return first - arr, np.where(L > 1, (last - first) / np.maximum(L - 1, 1), np.nan)


@pytest.mark.parametrize("topology, budget", [("colocated", 2048), ("chunked", 256)])
def test_replay_equals_step_simulator(topology, budget):
    svc = des_micro.LinearService(a=0.008, b=2e-4, c=2e-7, alpha=0.02, gamma=1.5e-4)
    rate, horizon, seed = 2.5, 400.0, 7
    arr, P, L = _same_inputs(rate, horizon, seed)
    sim = (des_micro.simulate_colocated if topology == "colocated" else des_micro.simulate_chunked)
    ref = sim(rate, _lengths, svc, horizon, seed=seed, budget_tokens=budget, warmup_frac=0.0)
    kw = {"max_batch_tokens": budget} if topology == "colocated" else {"chunk_tokens": budget}
    ttft, tpot = _replay(topology, svc, arr, P, L, **kw)
    assert len(ref.ttft) == len(arr)
    np.testing.assert_allclose(ttft, ref.ttft, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tpot[L > 1], ref.tpot, rtol=1e-9, atol=1e-9)


def test_decode_station_equals_step_simulator():
    """Decode only (zero prefill, zero-byte transfer): admission at step boundaries, slot cap 24."""
    rate, horizon, seed = 20.0, 300.0, 3
    rng = np.random.default_rng(seed)
    n_arr = int(rate * horizon * 1.2) + 100
    arr = np.cumsum(rng.exponential(1.0 / rate, n_arr))
    arr = arr[arr < horizon]
    Ls = rng.integers(1, 60, len(arr))
    step = lambda n: 0.01 + 0.0005 * n  # noqa: E731
    ref = des_micro.simulate_decode(rate, lambda r, k: Ls, step, horizon, seed=seed, n_max=24, warmup_frac=0.0)

    class Step(des_micro.LinearService):
        pass

    svc = Step(a=0.01, b=0.0005, alpha=0.0)
    plan = ReplayPlan(topology="disaggregated", decode_model=svc, decode_instances=1,
                      decode_kv_capacity_tokens=10**12, decode_max_batch=24, prefill_model=svc,
                      prefill_instances=1, max_batch_tokens=10**9, kv_bytes_per_token=0.0,
                      link_sharing="dedicated", first_token_from="decode")
    tr = Trace(arr - arr[0], np.ones(len(arr), dtype=np.int64), Ls.astype(np.int64), "x", "synthetic", "0")
    _, req = simulate(plan, tr, warmup_fraction=0.0)
    _, start, _ = req.marks["decode"]
    wait = np.asarray(start) - (arr - arr[0])
    np.testing.assert_allclose(wait, ref.wait, rtol=1e-9, atol=1e-9)
    first = np.asarray(req.t_first)
    last = np.asarray(req.t_last)
    multi = Ls >= 2
    np.testing.assert_allclose(((last - first) / np.maximum(Ls - 1, 1))[multi], ref.tpot, rtol=1e-9, atol=1e-9)
