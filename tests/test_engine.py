"""End-to-end analytical engine: exact special cases, stability, monotonicity, goodput properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qmodel.solver import Solver, solve
from qmodel.errors import UnstableError
from qmodel.goodput import goodput
from qmodel.scenario import parse_scenario

D = 0.1  # seconds per prefill


def md1_scenario(rate: float, instances: int = 1, link: str = "nvlink-3", sharing: str = "dedicated") -> dict:
    """DistServe's prefill-as-M/D/1: fixed 512-token prompts, batch budget of one prompt, fixed service D."""
    return {
        "name": "md1",
        "model": "opt-13b",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 64}},
        "slo": {"ttft_s": "400 ms", "tpot_s": "40 ms"},
        "deployment": {"topology": "disaggregated",
                       "prefill": {"gpu": "a100-80gb-sxm", "instances": instances, "max_batch_tokens": 512, "dispatch": "random"},
                       "decode": {"gpu": "a100-80gb-sxm", "instances": 1},
                       "link": link, "link_sharing": sharing, "transfer_mode": "serialized"},
        "perf": {"kind": "fixed", "prefill_s": D, "decode_step_s": 0.02},
    }


@pytest.mark.parametrize("rate", [2.0, 5.0, 8.0])
def test_distserve_md1_mean_ttft_is_exact(rate):
    """Mean TTFT = D + λD²/(2(1−λD)) (DistServe §3, M/D/1): the first token leaves with the prefill
    pass, so the transfer is not in TTFT (it is in TPOT: tests/test_latency_terms.py)."""
    sc = parse_scenario(md1_scenario(rate))
    solver = Solver(sc)
    c = solver.compose(rate)
    expected = D + rate * D * D / (2 * (1 - rate * D))
    assert c.stations[0].delay.mean_s == pytest.approx(expected, rel=1e-6)
    assert c.ttft.mean_s == pytest.approx(expected, rel=1e-6)


def test_md1_percentiles_match_erlang():
    """ρ = 0.8, D = 0.1: the waiting-time p90 of M/D/1 is 5.01151·D (docs/reference_values.md §6.3), within one grid step."""
    sc = parse_scenario(md1_scenario(8.0))
    wait = Solver(sc).compose(8.0).stations[0].wait
    assert wait.quantile(0.9) == pytest.approx(5.01151 * D, abs=max(wait.dx, 1e-4) + 1e-6)
    assert wait.quantile(0.99) == pytest.approx(10.35589 * D, abs=max(wait.dx, 1e-4) + 1e-6)


def test_unstable_names_station_and_largest_stable_rate():
    sc = parse_scenario(md1_scenario(12.0))
    with pytest.raises(UnstableError) as ei:
        solve(sc)
    err = ei.value
    assert err.station == "prefill"
    assert err.max_stable_rate_per_s == pytest.approx(1 / D, rel=1e-9)
    assert "largest stable rate 10 req/s" in str(err)
    assert "nan" not in str(err).lower() and "inf" not in str(err).lower()


def test_result_has_every_documented_field():
    res = solve(parse_scenario(md1_scenario(5.0)))
    d = res.model_dump()
    for k in ("mean", "p50", "p90", "p99"):
        assert math.isfinite(d["ttft"][k]) and math.isfinite(d["tpot"][k])
    assert 0 <= d["attainment"] <= 1
    assert {s["name"] for s in d["stations"]} == {"prefill", "kv_transfer", "decode"}
    assert len(d["inputs_sha256"]) == 64
    assert res.link is not None and res.link.sufficient


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(0.5, 9.5), min_size=2, max_size=5, unique=True))
def test_attainment_non_increasing_in_rate(rates):
    solver = Solver(parse_scenario(md1_scenario(1.0)))
    vals = [solver.attainment(r) for r in sorted(rates)]
    assert all(b <= a + 1e-9 for a, b in zip(vals, vals[1:]))


def test_more_prefill_instances_never_lower_goodput():
    g = [goodput(parse_scenario(md1_scenario(1.0, instances=n))).goodput_rps for n in (1, 2, 3)]
    assert g[0] <= g[1] <= g[2]
    assert g[0] > 0


def test_more_bandwidth_never_lowers_goodput():
    slow = md1_scenario(1.0, link="eth-10g-tcp", sharing="fcfs")
    fast = md1_scenario(1.0, link="eth-100g-tcp", sharing="fcfs")
    assert goodput(parse_scenario(slow)).goodput_rps <= goodput(parse_scenario(fast)).goodput_rps


def test_goodput_meets_goal_and_is_below_stability():
    g = goodput(parse_scenario(md1_scenario(1.0)))
    assert g.attainment_at_goodput >= 0.9
    assert 0 < g.goodput_rps < g.max_stable_rate_per_s
    assert g.goodput_per_gpu == pytest.approx(g.goodput_rps / g.gpus)


def test_short_transfer_is_not_rounded_up_to_a_prefill_step():
    """The exposed KV transfer (~1 ms) sits on a finer grid than the prefill delay (~7 ms step).
    Composed by rounding up, it added a whole step to every TTFT; moved with its mean kept, the
    TTFT's grid mean is the sum of the parts' means to within round-off, and its p50 lies within
    one prefill step of the prefill delay's p50 plus the transfer's mean."""
    from pathlib import Path

    import numpy as np

    from qmodel.dist import GridDist
    from qmodel.scenario import load_scenario

    sc = load_scenario(Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml")
    d = sc.model_dump(mode="json")
    d["deployment"]["first_token_from"] = "decode"  # the transfer is in TTFT only then
    c = Solver(parse_scenario(d)).compose(6.0)
    sp, st_, sd = c.stations[0].delay, c.stations[1].delay, c.stations[2].delay
    assert st_.dx < sp.dx and st_.mean_s < 0.2 * sp.dx  # the case in point
    assert sd.dx <= sp.dx
    grid_mean = lambda d: float(np.arange(d.n) @ d.pmf) * d.dx  # noqa: E731
    assert grid_mean(c.ttft) == pytest.approx(grid_mean(sp) + grid_mean(st_) + grid_mean(sd.regrid(sp.dx, keep_mean=True)),
                                              rel=1e-6)
    assert c.ttft.quantile(0.5) <= sp.quantile(0.5) + st_.mean_s + sd.quantile(0.99) + sp.dx
    # the regrid itself: a point at 0.7 ms onto a 7 ms step keeps its mean and its atom share
    pt = GridDist.point(0.0007, 0.00025)
    moved = pt.regrid(0.007, keep_mean=True)
    assert grid_mean(moved) == pytest.approx(0.00075, rel=1e-12)  # 3 fine steps of 0.25 ms
    assert moved.pmf[0] == pytest.approx(1 - 0.75 / 7, rel=1e-12) and moved.pmf.sum() == pytest.approx(1.0)
    assert pt.regrid(0.007).pmf[1] == 1.0  # rounding up: a whole step
