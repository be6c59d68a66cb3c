"""Analytic stability limits against the replay's sustained rate (validation/sustained.py).

The sustained rate is the replay's completion rate at an overload rate (docs/validation.md,
"Sustained rate"); with 20,000 requests its sampling error is about 1% (measured spread over
seeds below 1%), so the tolerances below are the model's stated accuracy plus that 1%.

Before the chunked fix (main at 2b0a9de), llama3-8b-chunked-h100 gave 8.04/11.74/7.88/4.76/2.65/1.41
req/s for budgets 256/1024/2048/4096/8192/16384 against sustained 7.92/11.48/11.86/12.02/12.09/
12.13 (-78% at 8192), and Llama-3.1-70B FP8 on one H200 0.54/0.27/0.14 for budgets 8192/16384/32768
against 4.34 (-88..-97%).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qmodel.solver import Solver
from qmodel.scenario import load_scenario, parse_scenario
from qmodel.validation.sustained import poisson_at, probe, sustained_rate

EX = Path(__file__).resolve().parent.parent / "examples"
CHUNKED = EX / "llama3-8b-chunked-h100.yaml"


def _compare(scn, n: int = 20000) -> tuple[float, float]:
    lim = Solver(scn).max_stable_rate()[0]
    return lim, sustained_rate(scn, n, 0, guess_per_s=lim).rate_per_s


def _chunked(budget: int):
    return load_scenario(CHUNKED, [f"deployment.chunk_tokens={budget}"])


# chunked: the limit within 5% of the replay's sustained rate (issue 15 item 4); measured after the
# fix +1.5/+1.8/+1.4/+1.3/+1.2/+1.1% for 256/1024/2048/4096/8192/16384 (+1.5..+3.5% before the
# KV slot cap counted length-biased residents)
@pytest.mark.parametrize("budget", [512, 8192])
def test_chunked_limit_tracks_replay(budget):
    lim, sus = _compare(_chunked(budget))
    assert abs(lim / sus - 1) <= 0.05, (budget, lim, sus)


@pytest.mark.slow
@pytest.mark.parametrize("budget", [256, 1024, 2048, 4096, 16384])
def test_chunked_limit_tracks_replay_sweep(budget):
    lim, sus = _compare(_chunked(budget))
    assert abs(lim / sus - 1) <= 0.05, (budget, lim, sus)


@pytest.mark.parametrize("efficiency", ["curves", "constants"])
def test_chunked_not_below_colocated_when_compute_bound(efficiency):
    # the chunks' attention sums to P^2 as one pass does; what chunking adds is the per-iteration
    # fixed cost, small once an iteration is compute-bound (>= 2048 tokens for llama-3.1-8b/H100):
    # chunked may fall below colocated on the same GPUs by at most 3% there (was 7.88 vs 12.04 at 2048).
    # With fixed efficiency factors a bigger budget never costs capacity; the measured curves'
    # GEMMs slow by a few % past ~10^4 tokens (catalog/efficiency.toml m_decline: +5.8% at 16384 on
    # hopper bf16), so there the limit may fall that much past its peak (16.23 at 2048 -> 15.88 at 16384)
    sets = [f"perf.efficiency={efficiency}"]
    data = load_scenario(CHUNKED, sets).model_dump(mode="json")
    data["deployment"] = {"topology": "colocated", "pool": data["deployment"]["pool"], "max_batch_tokens": 8192}
    colo = Solver(parse_scenario(data)).max_stable_rate()[0]
    prev = 0.0
    for budget in (2048, 4096, 8192, 16384):
        lim = Solver(load_scenario(CHUNKED, [f"deployment.chunk_tokens={budget}", *sets])).max_stable_rate()[0]
        assert lim >= 0.97 * colo, (budget, lim, colo)
        assert lim >= (prev if efficiency == "constants" else 0.97 * prev), (budget, lim, prev)
        prev = lim


L70_FP8 = """[[model]]
name = "llama-3.1-70b-fp8"
hf_id = "neuralmagic/Meta-Llama-3.1-70B-FP8"
source = "llama-3.1-70b with FP8 weights (test entry)"
layers = 80
hidden_size = 8192
num_heads = 64
num_kv_heads = 8
head_dim = 128
ffn_size = 28672
vocab_size = 128256
attention = "gqa"
max_context_tokens = 131072
dtype = "fp8"
kv_dtype = "bf16"
"""


@pytest.fixture
def fp8_70b(monkeypatch, tmp_path):
    """Llama-3.1-70B with FP8 weights as a user catalog model (weights FP8 in both engines' memory)."""
    from qmodel import registry

    (tmp_path / "l70fp8.toml").write_text(L70_FP8, encoding="utf-8")
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path))
    registry.clear_cache()
    yield
    registry.clear_cache()


@pytest.mark.parametrize("budget", [8192, 16384, 32768])
def test_chunked_70b_fp8_h200_slot_capped(fp8_70b, budget):
    # max_batch 128 caps the decode batch far below the budget: most iterations are decode-only and
    # a saturated mixed one holds only the prompt tokens that exist. Was 0.54/0.27/0.14 req/s (falling
    # with the budget); replay sustained 4.34 at all three; now +0.9/+0.9/+1.0%
    scn = parse_scenario({
        "name": "l70-fp8-h200-chunked", "model": "llama-3.1-70b-fp8",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "preset", "name": "azure-conv-2023"}},
        "slo": {"ttft_s": "2 s", "tpot_s": "100 ms"},
        "deployment": {"topology": "chunked", "pool": {"gpu": "h200-sxm", "tp": 1, "instances": 1, "max_batch": 128},
                       "chunk_tokens": budget},
        "perf": {"kind": "roofline"}})
    lim, sus = _compare(scn, 5000)  # 5,000 requests: ~3% sampling error, the model is within 1%
    assert abs(lim / sus - 1) <= 0.05, (budget, lim, sus)
    assert lim > 1.0  # the replay completes 5,000 requests at 1 req/s


def test_sustained_rate_is_deterministic_and_bracketed():
    scn = _chunked(8192)
    a = sustained_rate(scn, 20000, 0, guess_per_s=10.0)
    b = sustained_rate(scn, 20000, 0, guess_per_s=10.0)
    assert a == b
    # the answer is the saturated throughput whatever the overload (1.5x, 3x a guess): at 20,000
    # requests within 1% (measured 0.02%; at 5,000 requests the same pair differs by 2.3%)
    c = sustained_rate(scn, 20000, 0, guess_per_s=20.0)
    assert abs(c.rate_per_s / a.rate_per_s - 1) < 0.01
    assert all(p.completion_ratio < 0.9 for p in (a.probes[-1], c.probes[-1]))


def test_probe_criterion_agrees_with_the_sustained_rate():
    # the stability criterion, on long probes, from both sides of the sustained rate (+-8%)
    scn = load_scenario(EX / "llama3-8b-colocated-h100.yaml")
    mu = sustained_rate(scn, 20000, 0, guess_per_s=12.0).rate_per_s
    assert probe(scn, 0.92 * mu, 20000, 0).stable
    assert not probe(scn, 1.08 * mu, 20000, 0).stable
    assert poisson_at(scn, 3.0).workload.arrivals.kind == "poisson"


# ---- issue 15 item 11: every topology within 3% of the replay's sustained rate -------------------
# Measured (analytic / sustained, 20,000 requests; benchmarks/limits_table.py), main 4e30795 (the
# solver's lengths an i.i.d. 4,096-pair draw, seed 0) -> the clipped-lognormal law's lattice
# quadrature (qmodel.workload.lognormal_quadrature):
#   azure-conv-trace-disagg-a100 22.04 / 22.04 -0.0% (empirical lengths: unchanged)
#   deepseek-v3-disagg-h200      4.203 / 4.257 -1.3% -> 4.302 / 4.271 +0.7%
#   llama2-70b-disagg-splitwise  9.574 / 9.268 +3.3% -> 9.375 / 9.281 +1.0%
#   llama3-70b-disagg-h100       27.77 / 27.37 +1.5% -> 27.40 / 27.42 -0.0%
#   llama3-8b-chunked-h100       15.57 / 15.30 +1.7% -> 15.50 / 15.32 +1.2%
#   llama3-8b-colocated-h100     15.76 / 15.58 +1.2% -> 15.82 / 15.59 +1.4%
#   opt13b-colocated-a100        8.748 / 8.717 +0.4% (fixed lengths: unchanged)
#   opt13b-disagg-a100           28.68 / 29.10 -1.4% (fixed lengths: unchanged)
# (the sustained rate moves a little with the analytic limit: it is the overload probe's guess)
from tests.data_needs import example_param  # noqa: E402


@pytest.mark.parametrize("name", [example_param("llama3-8b-colocated-h100"), example_param("opt13b-colocated-a100"),
                                  example_param("llama3-8b-chunked-h100"), example_param("llama3-70b-disagg-h100"),
                                  example_param("deepseek-v3-disagg-h200")])
def test_limit_within_3pct_one_per_topology(name):
    (path,) = EX.glob(f"{name}.*")
    lim, sus = _compare(load_scenario(path))
    assert abs(lim / sus - 1) <= 0.03, (name, lim, sus)


def _all_examples():
    return [pytest.param(p.stem, marks=example_param(p.stem).marks) for p in sorted(EX.iterdir())]


@pytest.mark.slow
@pytest.mark.parametrize("name", _all_examples())
def test_limit_within_3pct_every_example(name):
    (path,) = EX.glob(f"{name}.*")
    lim, sus = _compare(load_scenario(path))
    assert abs(lim / sus - 1) <= 0.03, (name, lim, sus)


BLOOM = {"name": "bloom-colocated", "model": "bloom-176b",
         "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 5.0}, "lengths": {"kind": "preset", "name": ""}},
         "slo": {"ttft_s": "2 s", "tpot_s": "100 ms"},
         "deployment": {"topology": "colocated", "pool": {"gpu": "", "tp": 8, "instances": 4}},
         "perf": {"kind": "table", "path": "data:splitwise_sim/perf_model.csv", "format": "splitwise"}}


@pytest.mark.needs_data("splitwise_sim/perf_model.csv")
@pytest.mark.parametrize("gpu,mix,before", [("a100-80gb-sxm", "azure-code-2023", 0.092),
                                            ("a100-80gb-sxm", "azure-conv-2023", -0.047),
                                            ("h100-sxm", "azure-code-2023", -0.066),
                                            ("h100-sxm", "azure-conv-2023", -0.044)])
def test_bloom_176b_colocated_4x_tp8(gpu, mix, before):
    # BLOOM-176B TP8 x 4 instances, splitwise-sim measured tables: the KV cap (~55 sequences) lets a
    # prefill iteration hold only the 1.5-2.3 prompts the last departures freed memory for, not the
    # light-traffic fixed point's 1.1-4.5. Before (error shown as `before`) -> after: +0.6/-1.0/+0.8/-1.3%;
    # with the length law's quadrature (item 11) +0.6/+0.8/+0.6/+0.8%
    lim, sus = _compare(_bloom(gpu, mix))
    assert abs(lim / sus - 1) <= 0.03, (gpu, mix, lim, sus)


def _bloom(gpu: str, mix: str):
    return parse_scenario({**BLOOM, "workload": {**BLOOM["workload"], "lengths": {"kind": "preset", "name": mix}},
                           "deployment": {**BLOOM["deployment"], "pool": {**BLOOM["deployment"]["pool"], "gpu": gpu}}})


@pytest.mark.parametrize("make", [
    pytest.param(lambda: load_scenario(EX / "opt13b-colocated-a100.yaml"), id="opt13b"),
    pytest.param(lambda: _bloom("a100-80gb-sxm", "azure-conv-2023"), id="bloom-a100-conv",
                 marks=pytest.mark.needs_data("splitwise_sim/perf_model.csv"))])
def test_colocated_solves_up_to_its_limit(make):
    # the heavy-traffic batch keeps solve() defined below the limit: main raised UnstableError at 0.95
    # of its own limit on BLOOM-176B a100 conv (the fixed point's busy fraction is not monotone in the
    # rate, so the bisection for its limit stopped at a rate it cannot solve just below)
    sol = Solver(make())
    lim = sol.max_stable_rate()[0]
    prev = 1.0
    for u in (0.5, 0.8, 0.9, 0.95, 0.99):
        r = sol.solve(u * lim)
        assert 0.0 <= r.attainment <= prev + 1e-12
        assert all(np.isfinite([r.ttft.p90, r.ttft.p99, r.tpot.p90]))
        prev = r.attainment


# ---- the token-budget prefill drain against the replay on the same lengths ----------------------
# docs/validation.md ("Sustained rate", prefill under a token budget): the analytic prefill limit
# c·E[N]/E[S_N] against the replay's saturated completion rate when the replay's trace is the
# solver's own length sample (cycled random permutations of its pairs, so its marginal is exactly the
# sample's). Measured (benchmarks/prefill_drain_diag.py, 20,000 requests at 1.5x): llama3-70b-disagg-h100
# 20.653 vs 20.620 (+0.16%), llama2-70b-disagg-splitwise 9.574 vs 9.525 (+0.51%). Tolerance 1%: the
# settled drain law's Monte Carlo noise (~0.5%, five pooled rounds of 4,096 sequences) plus the
# window's ~0.3% (completions of the first arrivals). Against the replay's own 20k trace the same two
# read +1.4% / +3.3% on main's i.i.d. length sample: the rest was the length samples' means, not the
# drain law (with the law's quadrature: -0.0% / +1.0%).


def _saturated_on_own_sample(scn, n: int = 20000) -> tuple[float, float]:
    import dataclasses

    from qmodel.validation.replay import load_replay_trace, replay_requests

    s = Solver(scn)
    lim, station = s.max_stable_rate()
    assert station == "prefill"
    sc = poisson_at(scn, 1.5 * lim)
    tr = load_replay_trace(sc, n, 0)
    p, o = np.asarray(s.resolved.lengths.prompt), np.asarray(s.resolved.lengths.output)
    rng = np.random.default_rng(5)
    ix = np.concatenate([rng.permutation(p.size) for _ in range(len(tr.prompt_tokens) // p.size + 1)])
    ix = ix[: len(tr.prompt_tokens)]
    tr = dataclasses.replace(tr, prompt_tokens=p[ix], output_tokens=o[ix])
    res, _ = replay_requests(sc, tr, n_requests=n, seed=0, warmup_fraction=0.1)
    return lim, float(res.throughput_rps)


@pytest.mark.parametrize("name", [example_param("llama3-70b-disagg-h100"),
                                  example_param("llama2-70b-disagg-splitwise")])
def test_prefill_budget_drain_matches_replay_on_same_lengths(name):
    (path,) = EX.glob(f"{name}.*")
    lim, sat = _saturated_on_own_sample(load_scenario(path))
    assert abs(lim / sat - 1) <= 0.01, (name, lim, sat)


# ---- issue 18 (corpus-ci c0028): the chunked limit where a slot cap binds (docs/validation.md,
# "Chunked limit with a binding slot cap"): the saturated schedule under the slot cap
# (qmodel/stations/chunked_capacity.py); the fluid packing gave +13..+52% ----------------------
def _c0028():
    from qmodel.scenario import Scenario

    return Scenario.model_validate({
        "name": "corpus-0028", "model": "kimi-k2",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 16}},
        "slo": {"ttft_s": 0.7996, "tpot_s": 0.06391, "percentile": 90.0},
        "deployment": {"topology": "chunked", "chunk_tokens": 4096,
                       "pool": {"gpu": "a100-80gb-sxm", "tp": 8, "pp": 2, "instances": 2,
                                "kv_memory_fraction": 0.01, "max_batch": 4, "dispatch": "least_loaded"}},
        "perf": {"kind": "roofline", "efficiency": "curves"}})


def _phase_locked_rate(solver: Solver, groups: tuple[int, ...]) -> float:
    """Pool throughput of the fixed-length saturated schedule whose m slots are admitted in the
    given groups (each group prefilled in one iteration, decoding in the others):
    m·instances / (Σ_j T_mix(k_j, m − k_j) + (L − g)·t_d(m))."""
    st = solver.pool_station
    sv, m, p, n_out = st.service, int(st.cap), float(st.p[0]), float(st.L[0])
    ctx = p + n_out / 2.0

    def t_dec(n: int, c: float) -> float:
        return float(sv.decode_step_time_s(float(n), n * c))

    cycle = (n_out - len(groups)) * t_dec(m, ctx)
    for k in groups:
        cycle += float(sv.prefill_time_s(k * p + (m - k), k * p * p, float(k))) + t_dec(m - k, ctx) - t_dec(m - k, 0.0)
    return st.instances * m / cycle


def test_c0028_replay_limit_is_the_phase_locked_schedule():
    # fixed lengths, slot cap 4 (max_batch): the replay's saturated throughput is exactly a
    # phase-locked schedule's (measured 15.091 vs 15.094 at seed 0, g = 3; 13.018 vs 13.019 at
    # seed 2, g = 4; 14.918 / 12.844 before the measured MoE fixed time moved ampere's MoE and
    # overhead numbers); 0.5%: the window's edge and the mean-context approximation of the decode reads
    scn = _c0028()
    solver = Solver(scn)
    assert solver.pool_station.cap == 4
    for seed, groups in ((0, (2, 1, 1)), (2, (1, 1, 1, 1))):
        sus = sustained_rate(scn, 20000, seed, guess_per_s=17.92).rate_per_s
        assert sus == pytest.approx(_phase_locked_rate(solver, groups), rel=0.005)
    # the probe criterion brackets the fully staggered value 13.02 from both sides
    assert probe(scn, 12.5, 20000, 0).stable and not probe(scn, 13.5, 20000, 0).stable


def test_c0028_analytic_limit_within_5pct_of_the_replay():
    # was 17.92 (+39.5%: a full budget of prompts in every mixed iteration); now 13.02 (12.842 before the
    # measured MoE fixed time moved ampere's MoE and overhead numbers)
    assert Solver(_c0028()).max_stable_rate()[0] == pytest.approx(13.02, rel=0.05)


# ---- colocated: the saturated schedule's capacity alone (issue 18, 0.95-0.97 of the limit) ---------
# The limit was min(schedule, 1/(E[L] d + T(b)/b)), d at the slot cap KV/E[P + L]. Where the residents
# are length-biased (the memory holds more of the short-output requests than KV/E[P + L]) the bound
# sat below the schedule and the replay: corpus c0170 (this scenario with 2 instances) -19.0%, and 30
# of the 158 open colocated corpus rows more than 3% low (docs/validation.md, "Colocated limit: the
# saturated schedule alone"). Measured on this one-instance case: main 9.636 vs sustained 11.89
# (-18.9%) -> 11.82 (-0.7%). Tolerance 3%: the examples' (the sustained rate's ~1% plus the model's).
KV_BIASED = {"name": "kv-length-biased", "model": "opt-13b",
             "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                          "lengths": {"kind": "lognormal", "prompt_median_tokens": 1688.2, "prompt_sigma": 1.131,
                                      "prompt_max_tokens": 16384, "output_median_tokens": 21.4, "output_sigma": 0.422,
                                      "output_max_tokens": 2048}},
             "slo": {"ttft_s": 0.2, "tpot_s": 0.035},
             "deployment": {"topology": "colocated", "pool": {"gpu": "h100-sxm", "instances": 1,
                                                              "kv_memory_fraction": 0.0838},
                            "max_batch_tokens": 2048},
             "perf": {"kind": "roofline"}}


def test_colocated_limit_is_the_schedule_where_residents_are_length_biased():
    scn = parse_scenario(KV_BIASED)
    lim, sus = _compare(scn)
    assert abs(lim / sus - 1) <= 0.03, (lim, sus)
    # the queueing pieces are read at the load against that limit: finite and growing up to it
    sol = Solver(scn)
    prev = 0.0
    for u in (0.5, 0.9, 0.97, 0.995):
        r = sol.solve(u * lim)
        assert np.isfinite([r.ttft.p90, r.ttft.p99, r.tpot.p90]).all()
        assert r.ttft.p90 > prev
        prev = r.ttft.p90


def test_c0028_limit_is_the_fully_staggered_schedule():
    # the staggered start keeps the fixed-length slots in g = m groups; 0.5%: the phase-locked
    # formula reads decodes at the mean context (measured 12.8421 vs 12.8430)
    solver = Solver(_c0028())
    assert solver.max_stable_rate()[0] == pytest.approx(_phase_locked_rate(solver, (1, 1, 1, 1)), rel=0.005)


def _corpus_case(cid: str):
    from qmodel.validation.corpus import generate

    return {c.id: c for c in generate(600, 0).cases}[cid].scenario


# The corpus's chunked rows whose replay did not keep up at a rate the old limit called stable.
# The probe criterion on 20,000 requests from both sides of the limit (+-5%), at a seed where it
# holds: c0421 (ShareGPT, 64 slots, E[L] 328) at seed 0 is unstable already at 0.95 (completion
# 0.988; its sustained rate at seed 0 is also the lowest, 6.15 against 6.39..6.53 at seeds 1-3)
@pytest.mark.needs_data()
@pytest.mark.parametrize("cid, seed", [("c0202", 0), ("c0221", 0), ("c0341", 0), ("c0421", 1)])
def test_chunked_slot_cap_limit_brackets_the_replay(cid, seed):
    scn = _corpus_case(cid)
    lim = Solver(scn).max_stable_rate()[0]
    assert probe(scn, 0.95 * lim, 20000, seed).stable
    assert not probe(scn, 1.05 * lim, 20000, seed).stable


# random lengths: the limit within the spread of the sustained rate over seeds 0-3 (20,000
# requests each) widened by its 1% sampling error. Measured: c0202 1.230 in 1.227..1.238, c0341
# 2.960 in 2.936..2.959, c0421 6.434 in 6.153..6.530 (old limits 1.553, 3.564, 8.257). The
# fixed-length c0221 and c0028 are left out: their sustained rate is a phase-locked schedule set
# by the overload run's start-up (c0221 21.5..24.1), above the limit the probe criterion finds
@pytest.mark.slow
@pytest.mark.needs_data()
@pytest.mark.parametrize("cid", ["c0202", "c0341", "c0421"])
def test_chunked_slot_cap_limit_within_the_sustained_spread(cid):
    scn = _corpus_case(cid)
    lim = Solver(scn).max_stable_rate()[0]
    sus = [sustained_rate(scn, 20000, s, guess_per_s=lim).rate_per_s for s in (0, 1, 2, 3)]
    assert 0.99 * min(sus) <= lim <= 1.01 * max(sus), (cid, lim, sus)
