"""Solvers that share stations across related scenarios (qmodel.station_cache) give the numbers fresh
solvers give, to the bit: a shared station is the same pure function of the rate, so every
comparison here is exact equality, not a tolerance. Also pins that the sharing happens (the
speed-up of goodput's sensitivities) and that a station is rebuilt where its inputs change."""

from __future__ import annotations

import pytest

from data_needs import EXAMPLES, example_param
from qmodel.solver import Solver
from qmodel.goodput import goodput, perturbations, sensitivities
from qmodel.scenario import apply_overrides, parse_scenario
from qmodel.source import as_scenario
from qmodel.station_cache import StationCache, station_key

# every disaggregated field a station is declared not to read, changed (plus the perturbations)
_DISAGG_EXTRA = [("first token from decode", ["deployment.first_token_from=decode"]),
                 ("fair link", ["deployment.link_sharing=fair"]),
                 ("serialized", ["deployment.transfer_mode=serialized"]),
                 ("roce link", ["deployment.link=roce-4x200"]),
                 ("decode batch", ["deployment.decode.max_batch=64"]),
                 ("prefill budget", ["deployment.prefill.max_batch_tokens=4096"])]


def _scenario(name: str):
    (path,) = EXAMPLES.glob(f"{name}.*")
    return as_scenario(path)


def _variants(sc) -> list[tuple[str, object]]:
    raw = sc.model_dump(mode="json")
    sets = [(n, s) for n, s, _ in perturbations(sc)]
    if sc.deployment.topology == "disaggregated":
        sets += _DISAGG_EXTRA
    return [(n, parse_scenario(apply_overrides(raw, s))) for n, s in sets]


@pytest.mark.parametrize("name", [example_param("opt13b-disagg-a100"), example_param("opt13b-colocated-a100"),
                                  example_param("llama3-8b-chunked-h100"), example_param("llama3-70b-disagg-h100")])
def test_shared_stations_give_the_fresh_solvers_numbers(name: str) -> None:
    sc = _scenario(name)
    cache = StationCache()
    base = cache.solver(sc)
    lam0 = base.max_stable_rate()[0]
    for frac in (0.5, 0.75):
        base.attainment(frac * lam0)  # solutions at these rates are memoised: the variants reuse them
    for what, v in _variants(sc):
        shared, fresh = cache.solver(v), Solver(v)
        lam = fresh.max_stable_rate()
        assert shared.max_stable_rate() == lam, what
        for frac in (0.5, 0.75, 0.95):
            assert shared.attainment(frac * lam[0]) == fresh.attainment(frac * lam[0]), (what, frac)
        r = 0.6 * lam[0]
        assert shared.solve(r) == fresh.solve(r), what


def test_stations_are_shared_where_their_inputs_agree_and_rebuilt_where_they_differ() -> None:
    sc = _scenario("opt13b-disagg-a100")
    raw = sc.model_dump(mode="json")

    def var(*sets: str):
        return parse_scenario(apply_overrides(raw, list(sets)))

    cache = StationCache()
    base = cache.solver(sc)
    slo = cache.solver(var(f"slo.ttft_s={sc.slo.ttft_s * 1.1}", "workload.arrivals.rate_per_s=3"))
    assert all(slo.station(r) is base.station(r) for r in base.topology.roles)
    dec = cache.solver(var(f"deployment.decode.instances={sc.deployment.decode.instances + 1}"))
    assert dec.station("prefill") is base.station("prefill")
    assert dec.station("kv_transfer") is base.station("kv_transfer")
    assert dec.station("decode") is not base.station("decode")
    pre = cache.solver(var(f"deployment.prefill.tp={sc.deployment.prefill.tp * 2}"))
    assert pre.station("decode") is base.station("decode")
    assert pre.station("prefill") is not base.station("prefill")
    assert pre.station("kv_transfer") is not base.station("kv_transfer")  # it reads the prefill pool
    link = cache.solver(var("deployment.link_sharing=fair"))
    assert link.station("kv_transfer") is not base.station("kv_transfer")
    assert link.station("prefill") is base.station("prefill") and link.station("decode") is base.station("decode")
    # the model, the workload and the perf model reach every station
    wl = var("workload.lengths.prompt_tokens=1024")
    assert all(station_key(wl, r) != station_key(sc, r) for r in base.topology.roles)


@pytest.mark.parametrize("name", [example_param("opt13b-disagg-a100"), example_param("opt13b-colocated-a100")])
def test_goodput_sensitivities_equal_the_fresh_solvers(name: str) -> None:
    sc = _scenario(name)
    g = goodput(sc, with_sensitivities=True)
    ref = sensitivities(sc, goodput(sc).goodput_rps, goodput_of=lambda s: goodput(s).goodput_rps)
    assert g.goodput_rps == goodput(sc).goodput_rps
    assert [(s.input, s.elasticity, s.note) for s in g.sensitivities] == [(s.input, s.elasticity, s.note) for s in ref]


def test_resolution_is_shared_across_name_slo_and_rate_and_equals_a_fresh_one() -> None:
    from qmodel.build import resolve

    sc = _scenario("opt13b-disagg-a100")
    raw = sc.model_dump(mode="json")
    cache = StationCache()
    r0 = cache.resolved(sc)
    for sets in (["name=other", "slo.ttft_s=0.5"], ["workload.arrivals.rate_per_s=2.5"]):
        v = parse_scenario(apply_overrides(raw, sets))
        r = cache.resolved(v)
        assert r.pools is r0.pools  # shared, not re-resolved
        fresh = resolve(v)
        assert (r.scenario, r.base_rate_per_s, r.ca2, r.kv_bytes_per_token, r.warnings) == \
            (fresh.scenario, fresh.base_rate_per_s, fresh.ca2, fresh.kv_bytes_per_token, fresh.warnings)
        assert (r.lengths.prompt == fresh.lengths.prompt).all() and r.pools.keys() == fresh.pools.keys()
    other = parse_scenario(apply_overrides(raw, ["deployment.decode.tp=2"]))
    assert cache.resolved(other).pools is not r0.pools


def test_a_context_window_edit_refits_the_length_mix() -> None:
    """deployment.max_context_tokens is read by the workload (the length mix is truncated or thinned
    to the window), so the cache's workload half must not be reused across it: every step of a TUI
    edit sequence equals a fresh solver (regression: the window was left out of the workload key)."""
    from qmodel.tui.form import DEFAULT_RAW

    cache = StationCache()
    for sets in ([], ["deployment.max_context_tokens=2048"], ["deployment.max_context_tokens=2048",
                                                               "workload.context_overflow=reject"]):
        v = parse_scenario(apply_overrides(DEFAULT_RAW, sets))
        assert cache.solver(v).solve() == Solver(v).solve(), sets
