"""Issue 18 §3, the expressiveness a user needs: a worst-case KV reservation, the context window
(override, truncate or reject) and TBT next to TPOT (docs/methods.md, "KV reservation", "Context
window", "TPOT and TBT"). Exact values from fixed step times and fixed or stated lengths, the replay
measuring the same quantities, and the CLI's one-line errors for bad values.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from qmodel.errors import InputError
from qmodel.scenario import parse_scenario, scenario_sha256
from qmodel.solver import Solver
from qmodel.validation.replay import replay
from qmodel.workload import reserved_output_tokens

D = 0.02  # fixed decode step (s)
BASE = {"model": "llama-3.1-8b", "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "fixed", "prompt_tokens": 1000, "output_tokens": 100}},
        "perf": {"kind": "fixed", "prefill_s": 0.05, "decode_step_s": D},
        "deployment": {"topology": "disaggregated", "link": "400 Gbps",
                       "prefill": {"gpu": "h100-sxm"}, "decode": {"gpu": "h100-sxm", "max_batch": 100000}}}


def scenario(**sets: object):
    """BASE with ``a__b__c=value`` set (a nested key per ``__``)."""
    d = copy.deepcopy(BASE)
    for key, value in sets.items():
        cur = d
        *path, last = key.split("__")
        for k in path:
            cur = cur[k]
        cur[last] = value
    return parse_scenario(d)


# ---- KV reservation -----------------------------------------------------------------------------

@pytest.mark.parametrize("policy, size", [(None, 1000 + 100), ("max_tokens", 1000 + 1000)])
def test_resident_count_and_limit_are_exact(policy, size):
    """Fixed lengths: the decode pool holds floor(K / (P + R)) requests, R = 100 (own output) or the
    1000-token max_tokens; with a constant step d each resident stays L steps, so the pool's limit is
    exactly floor(K / (P + R)) / (L d) (the saturated schedule and the capped chain agree)."""
    sets = {"workload__max_output_tokens": 1000}
    if policy:
        sets["deployment__decode__kv_reservation"] = policy
    s = Solver(scenario(**sets))
    cap = s.resolved.pools["decode"].kv_capacity_tokens
    dec = s.station("decode")
    m = int(cap // size)
    assert dec.n_max == m
    assert dec.max_stable_rate_per_s() == pytest.approx(m / (100 * D), rel=1e-12)


@pytest.mark.parametrize("topology", ["colocated", "chunked"])
def test_single_pool_slot_cap_reads_the_reservation(topology):
    d = copy.deepcopy(BASE)
    d["deployment"] = {"topology": topology, "pool": {"gpu": "h100-sxm", "max_batch": 100000,
                                                      "kv_reservation": "max_tokens"}}
    d["workload"]["max_output_tokens"] = 1000
    s = Solver(parse_scenario(d))
    st = s.pool_station
    cap = s.resolved.pools["pool"].kv_capacity_tokens
    assert getattr(st, "n_max", None) if topology == "colocated" else st.cap == int(cap // 2000)
    if topology == "colocated":
        assert st.n_max == int(cap // 2000)


def test_default_reservation_changes_nothing():
    """``actual`` written out equals the field left out, number for number (the dump differs only by it)."""
    a = Solver(scenario()).solve(5.0)
    b = Solver(scenario(deployment__decode__kv_reservation="actual")).solve(5.0)
    assert a.model_dump(exclude={"inputs_sha256"}) == b.model_dump(exclude={"inputs_sha256"})
    assert "kv_reservation" not in json.dumps(scenario().model_dump())


def test_reservation_per_request_is_capped_by_the_window():
    """R = min(max_out, window - P), never below the request's own output."""
    r = reserved_output_tokens(np.array([100, 7000, 8000]), np.array([50, 900, 100]), 2000, 8192)
    assert r.tolist() == [2000, 1192, 192]


def test_replay_agrees_on_the_reserved_capacity():
    """Overloaded at 150 req/s, the replay completes what the max_tokens pool sustains: the solver's
    floor(K / 2000) / (L d) = 108.5 req/s (its residents leave after L - 1 = 99 steps there, so 1%
    more: 2% tolerance); under the actual reservation the same load (below 197.5) is kept up with."""
    sets = {"workload__max_output_tokens": 1000, "perf__prefill_s": 0.001, "workload__arrivals__rate_per_s": 150.0}
    held = scenario(deployment__decode__kv_reservation="max_tokens", **sets)
    lim = Solver(held).max_stable_rate()[0]
    assert lim == pytest.approx(108.5)
    assert replay(held, n_requests=6000).throughput_rps == pytest.approx(lim, rel=0.02)
    assert replay(scenario(**sets), n_requests=6000).throughput_rps == pytest.approx(150.0, rel=0.03)


# ---- context window -------------------------------------------------------------------------------

def _trace(tmp_path):
    """Ten requests; three exceed a 2048-token window (prompt + output 2100, 3000, 5000)."""
    rows = [(1000, 100)] * 6 + [(2000, 100), (2900, 100), (4000, 1000), (1500, 548)]
    path = tmp_path / "lengths.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{i * 0.1},{p},{o}\n" for i, (p, o) in enumerate(rows)))
    return str(path)


def test_reject_counts_the_exact_fraction_as_misses(tmp_path):
    lengths = {"kind": "empirical", "path": _trace(tmp_path), "format": "qmodel"}
    keep = Solver(scenario(workload__lengths=lengths, deployment__max_context_tokens=2048))
    rej = Solver(scenario(workload__lengths=lengths, deployment__max_context_tokens=2048,
                          workload__context_overflow="reject"))
    assert rej.resolved.rejected_fraction == 0.3
    assert sorted(rej.resolved.lengths.prompt.tolist()) == [1000] * 6 + [1500]
    # truncation: the prompt keeps at most 2047 tokens, the output what the window leaves after it
    assert sorted(zip(keep.resolved.lengths.prompt.tolist(), keep.resolved.lengths.output.tolist()))[-3:] == \
        [(2000, 48), (2047, 1), (2047, 1)]
    served = Solver(scenario(workload__lengths={"kind": "fixed", "prompt_tokens": 1000, "output_tokens": 100}))
    r = rej.solve(1.0)
    assert r.rejected_fraction == 0.3
    # the stations see 0.7 of the offered rate; every attainment is over the offered requests
    assert r.stations[0].utilization == pytest.approx(rej.station("prefill").solve(0.7).utilization)
    assert r.attainment <= 0.7 + 1e-12 and r.ttft_attainment <= 0.7 + 1e-12
    assert rej.max_stable_rate()[0] == pytest.approx(min(rej.served_limits())[0] / 0.7)
    assert served.solve(1.0).model_dump().get("rejected_fraction") is None


def test_replay_rejects_the_same_requests(tmp_path):
    lengths = {"kind": "empirical", "path": _trace(tmp_path), "format": "qmodel"}
    sc = scenario(workload__lengths=lengths, deployment__max_context_tokens=2048, workload__context_overflow="reject",
                  workload__arrivals__rate_per_s=0.5)
    rr = replay(sc, n_requests=4000)
    # the synthetic trace resamples the ten pairs: the rejected share is 0.3 within sampling error
    assert rr.rejected_fraction == pytest.approx(0.3, abs=3 * math.sqrt(0.21 / 4000))
    assert rr.attainment <= 1.0 - rr.rejected_fraction + 1e-12
    assert rr.conservation.arrived < 4000


def test_window_above_the_models_is_refused():
    with pytest.raises(InputError, match="max_context_tokens"):
        Solver(scenario(deployment__max_context_tokens=10_000_000))


# ---- TPOT and TBT --------------------------------------------------------------------------------

def test_tbt_closed_form_and_slo_switch():
    """Light load, constant step d: TPOT = d + the handoff spread, TBT = TPOT (L - 1)/L exactly (one
    length); a target between the two is met per token and missed per interval."""
    per_interval = Solver(scenario(slo__tpot_definition="per_interval")).solve(0.01)
    tpot = per_interval.tpot
    assert per_interval.tbt.p50 == pytest.approx(tpot.p50 * 99 / 100, rel=1e-8)
    assert per_interval.tbt.mean == pytest.approx(tpot.mean * 99 / 100, rel=1e-12)
    y = 0.5 * (tpot.p99 * 99 / 100 + tpot.p50)
    assert y < tpot.p50  # the band exists: TBT's p99 < target < TPOT's p50
    tok = Solver(scenario(slo__tpot_definition="per_token", slo__tpot_s=y)).solve(0.01)
    itv = Solver(scenario(slo__tpot_definition="per_interval", slo__tpot_s=y)).solve(0.01)
    assert tok.tpot_attainment > 0.99 and itv.tpot_attainment < 0.5
    assert "tbt" not in Solver(scenario()).solve(0.01).model_dump()


def test_tbt_factor_law_for_mixed_lengths():
    """P(TBT <= y) = sum_k w_k P(TPOT <= y / f_k): two lengths, TPOT a point mass at d."""
    from qmodel.dist import GridDist
    from qmodel.tbt import tbt_cdf, tbt_factors

    f = tbt_factors(np.array([1, 2, 2, 4]))  # L = 1 has no TPOT; f = 1/2 (w 2/3), 3/4 (w 1/3)
    assert f.f.tolist() == [0.5, 0.75] and f.w.tolist() == pytest.approx([2 / 3, 1 / 3])
    point = GridDist(0.001, np.array([0.0] * 20 + [1.0]), 0.02)
    assert tbt_cdf(point, 0.0101, f) == pytest.approx(2 / 3)
    assert tbt_cdf(point, 0.0151, f) == pytest.approx(1.0)


def test_replay_measures_tbt():
    """One request at a time (0.01 req/s, fixed steps): (e2e - TTFT)/L = (L - 1) d / L in the replay."""
    rr = replay(scenario(slo__tpot_definition="per_token", workload__arrivals__rate_per_s=0.01,
                         ), n_requests=200)
    assert rr.tbt.p50 == pytest.approx(rr.tpot.p50 * 99 / 100, rel=1e-9)


# ---- the CLI's errors and the unchanged dumps ------------------------------------------------------

@pytest.mark.parametrize("setting, field", [
    ("deployment.decode.kv_reservation=worst", "deployment.decode.kv_reservation"),
    ("workload.context_overflow=drop", "workload.context_overflow"),
    ("slo.tpot_definition=per_step", "slo.tpot_definition"),
    ("workload.max_output_tokens=0", "workload.max_output_tokens"),
    ("deployment.max_context_tokens=99999999", "deployment.max_context_tokens"),
])
def test_bad_values_are_one_line_exit_2(capsys, setting, field):
    from qmodel.cli.main import main
    from tests.data_needs import EXAMPLES

    rc = main(["solve", str(EXAMPLES / "llama3-70b-disagg-h100.yaml"), "--set", setting])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and field in err


def test_unset_fields_keep_the_hash():
    assert scenario_sha256(scenario()) == scenario_sha256(parse_scenario(copy.deepcopy(BASE)))
    dumped = json.dumps(scenario().model_dump())
    for name in ("kv_reservation", "max_output_tokens", "context_overflow", "max_context_tokens", "tpot_definition"):
        assert name not in dumped


def test_retargeted_layouts_and_plans_keep_the_settings():
    """A plan or an iso-GPU layout of the scenario keeps its KV reservation and context window."""
    from qmodel.layouts import iso_gpu_layouts
    from qmodel.planner.evaluate import deployment_for
    from qmodel.planner.space import Family

    sc = scenario(deployment__decode__kv_reservation="max_tokens", deployment__max_context_tokens=4096)
    lay = iso_gpu_layouts(sc)
    for s in (lay.colocated(), lay.chunked(), lay.disaggregated(1)):
        dep = s.deployment
        assert dep.max_context_tokens == 4096
        assert getattr(dep, "decode", getattr(dep, "pool", None)).kv_reservation == "max_tokens"
    fams = [Family("disaggregated", "h100-sxm", 1, "h100-sxm", 1, link="400 Gbps", transfer_mode="layerwise"),
            Family("colocated", "h100-sxm", 1), Family("chunked", "h100-sxm", 1, chunk_tokens=512)]
    for fam in fams:
        dep = deployment_for(sc, fam.plan(2, 1))
        assert dep.max_context_tokens == 4096
        assert getattr(dep, "decode", getattr(dep, "pool", None)).kv_reservation == "max_tokens"


def test_expressive_strata_leave_the_corpus_draws_alone():
    """The variants come from their own stream: the corpus's cases are the same objects, each variant
    keeps its case's features and load and adds the three axes, every one solvable."""
    from qmodel.validation.corpus import case_json, generate
    from qmodel.validation.corpus_expressive import EXPRESSIVE_AXES, expressive_cases

    corpus = generate(6, 0, data=False)
    before = [case_json(c) for c in corpus.cases]
    variants = expressive_cases(corpus)
    assert [case_json(c) for c in generate(6, 0, data=False).cases] == before
    by_id = {c.id: c for c in corpus.cases}
    assert variants and all(v.id[:-1] in by_id for v in variants)
    for v in variants:
        base = by_id[v.id[:-1]]
        assert {k: v.features[k] for k in base.features} == base.features
        assert v.utilization == base.utilization
        assert all(v.features[a] in vals for a, vals in EXPRESSIVE_AXES.items())
        assert v.scenario.slo.tpot_definition == v.features["tpot_definition"]


def test_check_compares_tbt_when_both_sides_report_it():
    """``solve --check``'s table gains TBT rows when the scenario names a TPOT definition."""
    from qmodel.validation.replay_check import compare_with_replay

    sc = scenario(slo__tpot_definition="per_token", workload__arrivals__rate_per_s=0.01)
    rep = compare_with_replay(sc, Solver(sc).solve(), n_requests=200)
    rows = {m.metric: m for m in rep.metrics}
    assert abs(rows["tbt_p50"].rel_error) < 0.01
