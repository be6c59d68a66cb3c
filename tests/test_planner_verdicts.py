"""Verdicts practitioners know, reached by the planner from the queueing models (roofline H100
service times, real catalog links), each shown flipping where it should:

* low concurrency -> one colocated GPU; high rate, long prompts, strict TPOT -> disaggregation
  needs fewer GPUs (min-gpus);
* a weak interconnect (10 GbE) hands the win to colocated/chunked; InfiniBand gives it back to
  disaggregation (max-goodput, same 8 GPUs);
* strict TPOT favours disaggregation, a loose TPOT colocation, for 2k-token prompts;
* the best P:D ratio follows the token mix: the Azure code trace (long prompts, ~20-token outputs)
  wants far more prefill instances than the conversation trace (Splitwise).

Thresholds are the model's own margins (printed in the failure message) with room for the 1e-3
goodput tolerance; they are not tuned to pass: each pair differs only in the one input named.
"""

from __future__ import annotations

import pytest

from qmodel.planner import plan
from qmodel.scenario import parse_scenario

H100_8B = dict(gpus=["h100-sxm"], tps=[1], max_instances=8, executor="serial", knee=False, serving_config=False, top_k=1)


def _sc(model: str, lengths: dict, ttft: str, tpot: str):
    return parse_scenario({"name": "verdict", "model": model,
                           "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0}, "lengths": lengths},
                           "slo": {"ttft_s": ttft, "tpot_s": tpot, "attainment_goal": 0.9},
                           "deployment": {"topology": "colocated", "pool": {"gpu": "h100-sxm", "tp": 1, "instances": 1}},
                           # the verdicts were derived with the constants roofline (10 ms prefill overhead);
                           # the default curves roofline moves the margins: docs/step_times.md
                           "perf": {"kind": "roofline", "efficiency": "constants"}})


def _best(sc, topologies, **kw):
    res = plan(sc, "max-goodput", topologies=topologies, **{**H100_8B, **kw})
    assert res.plans, f"no plan for {topologies}"
    return res.plans[0]


def _single_vs_disagg(sc, **kw):
    single = _best(sc, ["colocated", "chunked"], **kw)
    disagg = _best(sc, ["disaggregated"], **kw)
    return single, disagg


def test_rate_flips_min_gpus_from_colocated_to_disaggregated():
    sc = _sc("llama-3.1-8b", {"kind": "fixed", "prompt_tokens": 2048, "output_tokens": 256}, "2 s", "30 ms")
    low = plan(sc, "min-gpus", target_rate_per_s=0.5, links=["ib-ndr-400"], **{**H100_8B, "max_instances": 16})
    assert low.plans[0].topology in ("colocated", "chunked") and low.plans[0].gpus == 1
    high = plan(sc, "min-gpus", target_rate_per_s=60.0, links=["ib-ndr-400"],
                **{**H100_8B, "max_instances": 16, "max_gpus": 16, "top_k": 3})
    best = high.plans[0]
    single = [p for p in high.plans if p.topology != "disaggregated"]
    assert best.topology == "disaggregated", [(p.label, p.gpus) for p in high.plans]
    assert single and single[0].gpus >= best.gpus + 2, [(p.label, p.gpus) for p in high.plans]


def test_weak_interconnect_flips_the_winner():
    sc = _sc("llama-3.1-8b", {"kind": "preset", "name": "azure-conv-2023"}, "1 s", "40 ms")
    s_eth, d_eth = _single_vs_disagg(sc, links=["eth-10g-tcp"], budget={"gpus": 8})
    assert s_eth.goodput_rps > 1.5 * d_eth.goodput_rps, (s_eth.label, s_eth.goodput_rps, d_eth.label, d_eth.goodput_rps)
    s_ib, d_ib = _single_vs_disagg(sc, links=["ib-ndr-400"], budget={"gpus": 8})
    assert d_ib.goodput_rps > 1.1 * s_ib.goodput_rps, (s_ib.label, s_ib.goodput_rps, d_ib.label, d_ib.goodput_rps)
    assert s_ib.goodput_rps == pytest.approx(s_eth.goodput_rps, rel=2e-3)  # the link does not touch colocation


def test_tpot_strictness_flips_the_winner_for_long_prompts():
    lengths = {"kind": "fixed", "prompt_tokens": 2048, "output_tokens": 256}
    s_strict, d_strict = _single_vs_disagg(_sc("llama-3.1-8b", lengths, "2 s", "30 ms"), links=["ib-ndr-400"],
                                           budget={"gpus": 8})
    assert d_strict.goodput_rps > 1.2 * s_strict.goodput_rps, (s_strict.goodput_rps, d_strict.goodput_rps)
    s_loose, d_loose = _single_vs_disagg(_sc("llama-3.1-8b", lengths, "2 s", "150 ms"), links=["ib-ndr-400"],
                                         budget={"gpus": 8})
    assert s_loose.goodput_rps > 1.02 * d_loose.goodput_rps, (s_loose.goodput_rps, d_loose.goodput_rps)


def test_pd_ratio_follows_the_token_mix():
    ratios = {}
    for preset in ("azure-conv-2023", "azure-code-2023"):
        sc = _sc("llama-3.1-70b", {"kind": "preset", "name": preset}, "2 s", "100 ms")
        best = plan(sc, "max-goodput", topologies=["disaggregated"], links=["ib-ndr-400"], budget={"gpus": 16},
                    **{**H100_8B, "tps": [2]}).plans[0]
        ratios[preset] = best.prefill.instances / best.decode.instances
    assert ratios["azure-code-2023"] >= 3 * ratios["azure-conv-2023"], ratios
