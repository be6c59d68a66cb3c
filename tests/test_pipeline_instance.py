"""Pipeline parallelism as the stations and the replay see it (qmodel/perf/pipeline.py, issue 15 / 17 item 3).

A pp-stage instance is busy one stage time per prefill batch, the batch leaves pp stage times after
it started, and a decode sequence advances one token per pp stage times of its micro-batch of n/pp:
step = pp * stage(n/m, S/m), m = min(pp, n). Exact checks on fixed step times (data-free), the
M/D/1 closed form with the pipeline's exit, and solver against replay on the OPT-13B roofline.
"""

from __future__ import annotations

import numpy as np
import pytest

from qmodel.solver import Solver
from qmodel.perf.service_time import service_model
from qmodel.perf.pipeline import PipelineInstance, pipeline_instance
from qmodel.registry import get_gpu, get_model
from qmodel.scenario import RooflinePerf, load_scenario, parse_scenario
from qmodel.validation.replay import replay
from qmodel.validation.harness import compare_scenario, latency_metrics

PREFILL_S = 0.05  # fixed stage time of one prompt's prefill
STEP_S = 0.02  # fixed decode stage time


def _fixed(rate: float, pp: int, output_tokens: int = 64, budget: int = 512) -> dict:
    """Disaggregated OPT-13B with fixed stage times, both pools pp-deep (batch of one prompt: M/D/1)."""
    pool = {"gpu": "a100-80gb-sxm", "instances": 1, "pp": pp}
    return {
        "name": f"fixed-pp{pp}",
        "model": "opt-13b",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": output_tokens}},
        "slo": {"ttft_s": "1 s", "tpot_s": "100 ms"},
        "deployment": {"topology": "disaggregated",
                       "prefill": {**pool, "max_batch_tokens": budget, "dispatch": "random"},
                       "decode": pool, "link": "nvlink-3", "link_sharing": "dedicated",
                       "transfer_mode": "serialized"},
        "perf": {"kind": "fixed", "prefill_s": PREFILL_S, "decode_step_s": STEP_S},
    }


def test_instance_formulas_on_the_roofline():
    """prefill = the stage time, exit = pp of them, decode = pp * stage(n/m, S/m) with m = min(pp, n)
    (a bubble below pp sequences), 0 for an empty batch; array and scalar paths agree; pp = 1 is the
    stage model itself."""
    opt, a100 = get_model("opt-13b"), get_gpu("a100-80gb-sxm")
    stage = service_model(RooflinePerf(), opt, a100, 1, 2)
    inst = pipeline_instance(stage, 2)
    assert isinstance(inst, PipelineInstance) and inst.prefill_exit_stages == 2 and inst.pp == 2
    assert inst.prefill_time_s(1024, 2 * 512**2, 2) == stage.prefill_time_s(1024, 2 * 512**2, 2)
    t = stage.prefill_one_s(512)
    assert inst.prefill_exit_s(t) == 2 * t and inst.prefill_exit_s(np.array([t]))[0] == 2 * t
    for n, s in ((8, 8 * 600), (7, 7 * 600), (64, 64 * 1000)):
        assert inst.decode_step_time_s(n, s) == pytest.approx(2 * stage.decode_step_time_s(n / 2, s / 2), rel=1e-12)
    assert inst.decode_step_time_s(1, 600) == pytest.approx(2 * stage.decode_step_time_s(1, 600), rel=1e-12)
    assert inst.decode_step_time_s(0, 0) == 0.0
    n = np.array([0.0, 1.0, 7.0, 64.0])
    np.testing.assert_allclose(inst.decode_step_time_s(n, n * 600),
                               [inst.decode_step_time_s(int(k), float(k) * 600) for k in n], rtol=1e-12)
    # four stages, two sequences: each is a micro-batch of one, two of the four slots idle
    inst4 = pipeline_instance(service_model(RooflinePerf(), opt, a100, 1, 4), 4)
    assert inst4.decode_step_time_s(2, 1200) == pytest.approx(4 * inst4.stage.decode_step_time_s(1, 600), rel=1e-12)
    assert pipeline_instance(stage, 1) is stage
    with pytest.raises(ValueError):
        PipelineInstance(stage, 1)


@pytest.mark.parametrize("pp", [2, 4])
def test_fixed_low_load_ttft_and_tpot_are_pp_stage_times(pp):
    """Fixed stage times at 0.05 req/s (the engine almost always idle): TTFT p50 = pp * 50 ms and
    TPOT p50 = pp * 20 ms in the solver and in the replay (before the pipeline instance: one stage,
    50 ms and 20 ms). 1001 output tokens keep the handoff (the 1.75 ms KV transfer and the grid
    step, over L - 1) within 5e-4 of TPOT: measured +0.05% at pp 1, 2 and 4 alike."""
    sc = parse_scenario(_fixed(0.05, pp, output_tokens=1001))
    a = latency_metrics(Solver(sc).solve(0.05))
    r = latency_metrics(replay(sc, n_requests=400, seed=0))
    for got in (a, r):
        assert got["ttft_p50"] == pytest.approx(pp * PREFILL_S, rel=1e-9)
        assert got["tpot_p50"] == pytest.approx(pp * STEP_S, rel=1e-3)


def test_fixed_md1_mean_ttft_through_a_pipeline_is_exact():
    """Batch of one, fixed stage time D, pp = 2: the queue is M/D/1 on the stage time (the engine
    takes the next prompt one stage later), and the prompt leaves after 2 D, so mean TTFT =
    2 D + λD²/(2(1 − λD)) exactly; the replay within its noise (3%)."""
    rate = 12.0  # ρ = 0.6 of the stage queue (1.2 beyond what a 2 D service could carry)
    sc = parse_scenario(_fixed(rate, 2))
    want = 2 * PREFILL_S + rate * PREFILL_S**2 / (2 * (1 - rate * PREFILL_S))
    c = Solver(sc).compose(rate)
    assert c.stations[0].delay.mean_s == pytest.approx(want, rel=1e-6)
    assert c.ttft.mean_s == pytest.approx(want, rel=1e-6)
    r = replay(sc, n_requests=20000, seed=0)
    assert r.ttft.mean == pytest.approx(want, rel=0.03)


def _example(example: str, pp: int, dispatch: str | None = None, roofline: bool = True):
    """An example, both pools ``pp`` deep, on the roofline (its own perf replaced) unless ``roofline`` is False."""
    sets = [f"deployment.prefill.pp={pp}", f"deployment.decode.pp={pp}"]
    if dispatch is not None:
        sets.append(f"deployment.prefill.dispatch={dispatch}")
    sc = load_scenario(f"examples/{example}", sets)
    return sc.model_copy(update={"perf": RooflinePerf()}) if roofline else sc


_COMPARED = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")


def _errors(dispatch: str | None, example: str = "opt13b-disagg-a100.yaml",
            roofline: bool = True) -> dict[tuple[int, float], dict]:
    return {(pp, u): compare_scenario(_example(example, pp, dispatch, roofline), u, 20000, (0, 1, 2))
            for pp in (1, 2) for u in (0.3, 0.6, 0.85)}


def _misses(recs: dict[tuple[int, float], dict]) -> dict[tuple[float, str], tuple[float, float]]:
    """The (load, metric) cells where pp = 2's |error| exceeds pp = 1's + 0.03: (pp 1, pp 2) errors."""
    out = {}
    for u in (0.3, 0.6, 0.85):
        e1, e2 = recs[(1, u)]["error_rel"], recs[(2, u)]["error_rel"]
        out.update({(u, k): (e1[k], e2[k]) for k in _COMPARED if abs(e2[k]) > abs(e1[k]) + 0.03})
    return out


def _assert_pp2_no_worse(recs: dict[tuple[int, float], dict]) -> None:
    assert not _misses(recs), _misses(recs)


@pytest.mark.slow
def test_solver_and_replay_agree_at_pp2_random_dispatch(repo_root, monkeypatch):
    """OPT-13B on the roofline (examples/opt13b-disagg-a100.yaml, perf roofline), prefill dispatch
    random (the prefill chain exact per engine), 0.3/0.6/0.85 of the (decode) limit, 3 seeds x
    20000: |error| of TTFT p50/p90 and TPOT p50/p90 at pp = 2 within that of pp = 1 + 0.03 in every
    cell but one (measured TTFT p50/p90: pp 1 -0.0/+0.3, +0.2/+0.6, +1.3/+0.5%; pp 2 -0.0/+0.1,
    +0.2/+1.7, +6.9/+0.8%; TPOT p50/p90 pp 1 <= +2.7/+3.9%, pp 2 <= +4.4/+3.6%). The miss, TTFT p50
    at 0.85 (+6.9% against +1.3%), is a flat CDF: between 95 and 116 ms it rises only from 0.48 to
    0.50 (0.0006 per ms), and the solver's CDF there is 0.010 below the replay's (pp 1: 0.01-0.025
    at its p50), so a conservative hundredth of probability moves the median by 10 ms. At 0.3 the
    TTFT p50 (an idle engine's prompt) is two stage times of one 512-token prefill in both engines:
    63.2 ms where the stage alone is 31.6 ms."""
    monkeypatch.chdir(repo_root)
    recs = _errors("random")
    miss = _misses(recs)
    assert set(miss) == {(0.85, "ttft_p50")}, miss
    assert abs(miss[(0.85, "ttft_p50")][1]) <= 0.08, miss
    stage = service_model(RooflinePerf(), get_model("opt-13b"), get_gpu("a100-80gb-sxm"), 1, 2).prefill_one_s(512)
    low = recs[(2, 0.3)]
    assert low["analytic"]["ttft_p50"] == pytest.approx(2 * stage, rel=1e-6)
    assert low["replay"]["ttft_p50"] == pytest.approx(2 * stage, rel=1e-6)


@pytest.mark.slow
def test_solver_and_replay_agree_at_pp2_on_distserve_table(repo_root, monkeypatch):
    """The example as shipped (DistServe's OPT-13B A100 table, bundled), prefill dispatch random: the
    same criterion (measured, 3 seeds x 20000, TTFT p50/p90 at 0.3/0.6/0.85: pp 1 -0.0/+0.0,
    +0.6/+0.1, +1.8/-1.0%; pp 2 +0.0/-2.5, +0.3/-0.1, +1.2/-0.2%; TPOT within +3.1% at both), and
    at 0.3 the TTFT p50 is the instance's exit time of one 512-token prefill, two table stages."""
    from qmodel.build import resolve

    monkeypatch.chdir(repo_root)
    recs = _errors("random", roofline=False)
    _assert_pp2_no_worse(recs)
    svc = resolve(_example("opt13b-disagg-a100.yaml", 2, "random", roofline=False)).pools["prefill"].service
    stage = getattr(svc, "stage", svc).prefill_one_s(512)
    for side in ("analytic", "replay"):
        assert recs[(2, 0.3)][side]["ttft_p50"] == pytest.approx(2 * stage, rel=1e-6)


@pytest.mark.slow
def test_solver_and_replay_agree_at_pp2_llama3_70b(repo_root, monkeypatch):
    """examples/llama3-70b-disagg-h100.yaml (roofline, round-robin prefill over 2 TP4 instances,
    8192-token budget, Azure conversation lengths): the same criterion holds under round-robin
    with a length mix (measured, 3 seeds x 20000, TTFT p50/p90 at 0.3/0.6/0.85: pp 1 -3.9/-7.4,
    -0.5/-12.5, -14.9/-5.0%; pp 2 -1.2/-5.0, -0.3/-8.6, -12.9/-3.9%; TPOT within 1.1% at both)."""
    monkeypatch.chdir(repo_root)
    _assert_pp2_no_worse(_errors(None, "llama3-70b-disagg-h100.yaml"))


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="round-robin prefill: the own batch law is the Poisson chain's, too large "
                                      "for the smoother per-engine arrivals; pp doubles the own batch's share of "
                                      "TTFT, so TTFT p90 is +33.6/+21.3% at 0.6/0.85 of the limit against the "
                                      "replay (pp 1: +5.8/+11.1%; docs/methods.md, Pipeline parallelism)")
def test_solver_and_replay_agree_at_pp2_round_robin(repo_root, monkeypatch):
    """The example's own dispatch (round_robin over 2 prefill instances): the same criterion."""
    monkeypatch.chdir(repo_root)
    _assert_pp2_no_worse(_errors(None))


def test_colocated_and_chunked_pp_carry_one_warning(repo_root):
    """Colocated and chunked pools with pp > 1 take a prefill iteration as one stage time for the
    first token: one warning says so; none at pp = 1, none for a disaggregated pool."""
    from qmodel.build import resolve

    for name in ("opt13b-colocated-a100.yaml", "llama3-8b-chunked-h100.yaml"):
        path = repo_root / "examples" / name
        assert not any("pp =" in w for w in resolve(load_scenario(path)).warnings)
        w = [x for x in resolve(load_scenario(path, ["deployment.pool.pp=2"])).warnings if "pp =" in x]
        assert len(w) == 1 and w[0].startswith("warning: deployment.pool.pp = 2 (")
        assert "leaves out 1 further stage time(s)" in w[0]
    disagg = repo_root / "examples" / "opt13b-disagg-a100.yaml"
    assert not any("pp =" in w for w in resolve(load_scenario(disagg, ["deployment.decode.pp=2"])).warnings)


def test_colocated_pp2_bulk_bound_takes_one_stage_like_the_gated_form():
    """A colocated pp = 2 pool whose prompts overflow the token budget (corpus-ci c0025: kimi-k2,
    H100 tp 8 x pp 2, KV-bound, 0.66 of the limit) takes the TTFT as the stochastic maximum of the
    gated form and the bulk-service prefill chain; both, like the replay's colocated engine, let the
    first token out after one stage time (the warned approximation). With the pipeline instance's
    pp-stage exit in the bulk chain alone, TTFT p50 was 168 ms against the replay's 84 ms (+98%);
    measured now 91 ms (+7.8%; +5.7% before the pipeline instance, on stage-time decode steps)."""
    sc = parse_scenario({
        "name": "corpus-0025", "model": "kimi-k2",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "lognormal", "prompt_median_tokens": 1813.0, "prompt_sigma": 0.792,
                                 "prompt_max_tokens": 16384, "output_median_tokens": 126.1, "output_sigma": 0.594,
                                 "output_max_tokens": 2048}},
        "slo": {"ttft_s": 1.116, "tpot_s": 0.03382},
        "deployment": {"topology": "colocated", "max_batch_tokens": 8192,
                       "pool": {"gpu": "h100-sxm", "tp": 8, "pp": 2, "instances": 1, "max_batch": 512,
                                "kv_memory_fraction": 0.0501, "dispatch": "round_robin"}},
        "perf": {"kind": "roofline"},
    })
    solver = Solver(sc)
    rate = 0.6627 * solver.max_stable_rate()[0]
    a = latency_metrics(solver.solve(rate))
    r = latency_metrics(replay(sc.with_rate(rate), n_requests=8000, seed=0))
    assert abs(a["ttft_p50"] / r["ttft_p50"] - 1) <= 0.15, (a["ttft_p50"], r["ttft_p50"])
