"""Goodput, compare and the library verbs never fail inside the stability limit (issue 15 items
1 and 13, issue 16 item 3)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qmodel
from qmodel import compare as compare_mod
from qmodel.compare import Candidate, knee_rate
from qmodel.solver import LIGHT_LOAD, Solver
from qmodel.errors import InputError, NumericalError
from qmodel.goodput import elasticity
from qmodel.scenario import DisaggregatedDeployment, PrefillPool, load_scenario

EXAMPLES = sorted(str(p) for p in (Path(__file__).resolve().parents[1] / "examples").iterdir())
LLAMA70 = next(p for p in EXAMPLES if p.endswith("llama3-70b-disagg-h100.yaml"))
OPT13 = next(p for p in EXAMPLES if p.endswith("opt13b-disagg-a100.yaml"))


def _solver(path: str) -> Solver:
    try:
        return Solver(load_scenario(path))
    except qmodel.DataError as err:  # an example reading shared data absent on this machine
        pytest.skip(str(err))


def test_knee_of_the_3to1_split_stays_inside_the_limit():
    """The llama3-70b 3:1 split's prefill chain needs 40M states at 1 - 1e-6 of its limit, where the
    knee used to probe (the NumericalError compare swallowed, dropping disaggregation). The knee
    now lies in (0, 0.99·λmax]; it sits well inside (20.0 req/s of 31.0 measured)."""
    sc = load_scenario(LLAMA70)
    dep = sc.deployment
    d = DisaggregatedDeployment(prefill=PrefillPool(gpu=dep.decode.gpu, tp=dep.decode.tp, instances=3,
                                                    max_batch_tokens=dep.prefill.max_batch_tokens),
                                decode=dep.decode.model_copy(update={"instances": 1}),
                                link=dep.link, link_sharing=dep.link_sharing, transfer_mode=dep.transfer_mode)
    s = Solver(sc.model_copy(update={"deployment": d}))
    lam = s.max_stable_rate()[0]
    k = knee_rate(s, lam)
    assert 0 < k <= compare_mod.KNEE_TOP * lam


def test_compare_names_why_a_topology_was_not_evaluated(monkeypatch):
    """Every topology gets a row; one that fails carries the reason (no silent drop, no escape)."""
    def fail(sc, topology, layout):
        raise NumericalError(f"{topology} chain refused")

    monkeypatch.setattr(compare_mod, "_evaluate", fail)
    out = compare_mod.compare_topologies(load_scenario(OPT13))
    assert [c.topology for c in out.candidates] == ["colocated", "chunked", "disaggregated"]
    for c in out.candidates:
        assert c.reason and "refused" in c.reason and c.goodput_rps == 0.0
        assert c.binding.startswith("not evaluated")


def test_compare_accepts_a_path(monkeypatch):
    def fake(sc, topology, layout):
        return Candidate(topology=topology, layout=layout, goodput_rps=1.0, goodput_per_gpu=0.5, knee_rps=0.5,
                         max_stable_rate_per_s=2.0, binding="-", gpus=2)

    monkeypatch.setattr(compare_mod, "_evaluate", fake)
    out = qmodel.compare_topologies(OPT13)
    assert [c.topology for c in out.candidates] == ["colocated", "chunked", "disaggregated"]


def test_library_verbs_accept_a_path_or_a_scenario():
    sc = load_scenario(OPT13)
    assert qmodel.solve(OPT13, 1.0) == qmodel.solve(sc, 1.0)
    assert qmodel.solve(Path(OPT13), 1.0).attainment == qmodel.solve(sc, 1.0).attainment
    assert qmodel.goodput(OPT13).goodput_rps == qmodel.goodput(sc).goodput_rps
    with pytest.raises(InputError, match="scenario"):
        qmodel.as_scenario(3)


def test_elasticity_from_zero_goodput_is_none_not_inf():
    """ln(g / 0) has no value: None (it was computed as inf and reported as 0.0)."""
    assert elasticity("x", ["a=1"], 0.1, 0.0, 5.0).elasticity is None
    assert elasticity("x", ["a=1"], 0.1, 0.0, 0.0).elasticity == 0.0
    e = elasticity("x", ["a=1"], 1.0, 2.0, 4.0).elasticity
    assert e == pytest.approx(1.0, rel=1e-12)  # doubling the input doubles goodput: elasticity 1


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: Path(p).name)
def test_tiny_rates_get_the_idle_answer(path):
    """1e-320 req/s (ZeroDivisionError in fcfs.cramer_lundberg) and 1e-300 (OverflowError in the
    prefill root finder) give the light-load answer: the solve at LIGHT_LOAD·λmax, exactly."""
    s = _solver(path)
    ref = s.solve(LIGHT_LOAD * s.max_stable_rate()[0])
    for rate in (1e-320, 1e-300, 1e-30):
        r = s.solve(rate)
        assert r.rate_per_s == rate
        assert r.attainment == ref.attainment
        assert r.ttft.p99 == ref.ttft.p99 and r.tpot.p99 == ref.tpot.p99
        assert all(math.isfinite(x) for x in (r.attainment, r.ttft.p50, r.ttft.p99, r.tpot.p50, r.tpot.p99))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from([p for p in EXAMPLES if "azure" not in p and "splitwise" not in p]),
       frac=st.one_of(st.floats(1e-330, 1e-6), st.floats(1e-6, 1.0, exclude_max=True)))
def test_attainment_is_finite_everywhere_below_the_limit(path, frac):
    """What goodput, plan, compare and the TUI evaluate: an attainment in [0, 1] for every rate in
    (0, λmax), never an exception (a chain that cannot truncate near saturation counts as 0)."""
    s = Solver(load_scenario(path))
    rate = frac * s.max_stable_rate()[0]
    if not rate > 0:
        return
    a = s.attainment(rate)
    assert 0.0 <= a <= 1.0


def test_sweep_row_for_a_rate_the_chain_cannot_solve(monkeypatch):
    """At 0.999 and 0.9999 of the llama3-70b example's limit (set by prefill) both rows are solved (the
    chain's far tail in closed form, docs/methods.md "Heavy traffic"; 0.9999 needed 400721 states and
    was refused on 62e9c4d). A chain that does raise NumericalError (forced here) is a row with zero
    attainment and the reason, not a traceback."""
    from qmodel.cli.cmd_sweep import sweep_rows
    from qmodel.stations.prefill import PrefillStation

    sc = load_scenario(LLAMA70)
    lam, station = Solver(sc).max_stable_rate()
    assert station == "prefill"
    rows = sweep_rows(sc, [0.999 * lam, 0.9999 * lam])
    for row in rows:
        assert row.stable and 0.0 <= row.attainment <= 1.0 and "not solved" not in row.note
        assert row.ttft_p99_s is not None and math.isfinite(row.ttft_p99_s)
    assert rows[0].ttft_p99_s < rows[1].ttft_p99_s

    def refuse(self, rate_per_s):
        raise NumericalError("prefill chain: forced")

    monkeypatch.setattr(PrefillStation, "solve", refuse)
    (refused,) = sweep_rows(sc, [0.9999 * lam])
    assert refused.attainment == 0.0 and refused.stable and "not solved" in refused.note


def test_attainment_never_exceeds_one_from_round_off():
    """Found by the property above: a nearly idle colocated pool summed its grid pmf to 1 + 2.2e-16
    and reported attainment 1.0000000000000002; a CDF is now capped at 1 where it is accumulated."""
    sc = load_scenario(str(Path(__file__).resolve().parents[1] / "examples" / "opt13b-colocated-a100.yaml"))
    solver = Solver(sc)
    lam, _ = solver.max_stable_rate()
    r = solver.solve(lam * 2.447871546559904e-07)
    assert r.attainment <= 1.0 and r.ttft_attainment <= 1.0 and max(r.attainment_bounds) <= 1.0
