"""No NaN/inf and no exception from any scenario verb for rates in (0, limit) (issue 15, "Properties
to add"; item 1: no NumericalError may escape compare, goodput or sweep below the stability limit).

Each verb runs in-process through ``qmodel.cli.main.main`` by the fuzz suite's runner
(tests/fuzz/runner.py: it catches a traceback, checks the exit code and scans stdout and stderr for
NaN/inf), on a scenario file written from an example, a fuzz base or a variant of one, at a rate
drawn as a fraction of the variant's stability limit (from 1e-9 up to 1 - 1e-5; the light-load
floor and saturation are where the chains are hardest). ``solve``, ``sweep`` (the rate and its
neighbours) and ``goodput`` must exit 0, up to 1 - 1e-5 of the limit (a prefill chain carries its far
tail in closed form, tests/test_stations_prefill_heavy.py); so must ``compare`` (fast suite: the cheap bases only).
The library answers are checked too: every figure of ``qmodel.solve`` finite, attainment in [0, 1].
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import qmodel
from qmodel.solver import Solver
from tests.fuzz.cases import Case
from tests.fuzz.runner import run_case
from tests.prop_scenarios import CHEAP, PROP, SCENARIOS, finite, label, variant, variants

_FRAC = st.one_of(st.sampled_from([1e-9, 1e-3, 0.5, 0.9, 0.99, 0.999, 0.99999]), st.floats(1e-6, 0.99999))


def _case(verb: str, name: str, sets: tuple[str, ...], extra: list[str]) -> Case:
    data = json.loads(variant(name, sets).model_dump_json())
    return Case("props", verb, name, data=data, suffix=".json", extra=extra, expect=frozenset({0}))


def _run(tmp_path, verb: str, name: str, sets: tuple[str, ...], extra: list[str]) -> None:
    o = run_case(_case(verb, name, sets, extra), tmp_path)
    msg = (o.error.strip().splitlines() or [""])[-1] if o.error else o.stderr.strip()[-300:]
    assert not o.failures, f"{verb} {' '.join(extra)} on {label(name, sets)}: {o.failures} rc={o.rc}: {msg}"


def _check(tmp_path, name: str, sets: tuple[str, ...], frac: float, verbs: tuple[str, ...]) -> None:
    lam = Solver(variant(name, sets)).max_stable_rate()[0]
    rate = solve_rate = frac * lam
    if not rate > 0:
        return
    r = qmodel.solve(variant(name, sets), solve_rate)
    assert 0.0 <= r.attainment <= 1.0 + 1e-12, (label(name, sets), solve_rate, r.attainment)
    assert finite(r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99, r.tpot.mean, r.tpot.p50, r.tpot.p90,
                  r.tpot.p99), (label(name, sets), solve_rate, r)
    for verb in verbs:
        extra = {"solve": ["--rate", f"{solve_rate!r}"], "sweep": ["--rate", f"{rate * 0.5!r},{rate!r}"],
                 "goodput": [], "compare": []}[verb]
        _run(tmp_path, verb, name, sets, extra)


@settings(max_examples=10, **PROP)
@given(v=variants(CHEAP), frac=_FRAC)
def test_verbs_answer_below_the_limit(tmp_path_factory, v, frac):
    _check(tmp_path_factory.mktemp("props"), *v, frac, ("solve", "sweep", "goodput"))


@settings(max_examples=4, **PROP)
@given(v=variants([s for s in CHEAP if s.startswith("fuzz:") or s.startswith("opt13b")]))
def test_compare_answers(tmp_path_factory, v):
    _run(tmp_path_factory.mktemp("props"), "compare", *v, [])


@pytest.mark.slow
@settings(max_examples=40, **PROP)
@given(v=variants(SCENARIOS), frac=_FRAC)
def test_verbs_answer_below_the_limit_wide(tmp_path_factory, v, frac):
    _check(tmp_path_factory.mktemp("props"), *v, frac, ("solve", "sweep", "goodput", "compare"))


#: overrides that keep a base prefill-bound: under the measured-efficiency roofline the fuzz base's
#: one decode instance binds (27.8 req/s, prefill 37.2); two of them leave prefill the limit
PREFILL_BOUND: dict[str, tuple[str, ...]] = {"fuzz:disaggregated": ("deployment.decode.instances=2",)}


@pytest.mark.parametrize("name", ["llama3-70b-disagg-h100.yaml", "fuzz:disaggregated"])
def test_solve_just_below_a_prefill_limit(name):
    """At 0.999·λmax the prefill chain's window of 8 decay lengths passes 6000 states (llama3-70b: 10783);
    it is then solved on 4b + 200 states with the exact geometric boundary (tests/test_stations_prefill_heavy.py)
    instead of raising NumericalError. Finite, 0 <= A <= 1, TTFT quantiles non-decreasing in the rate."""
    sc = variant(name, PREFILL_BOUND.get(name, ()))
    lam, station = Solver(sc).max_stable_rate()
    assert station == "prefill"
    prev = None
    for frac in (0.99, 0.999):
        r = qmodel.solve(sc, frac * lam)
        assert 0.0 <= r.attainment <= 1.0 and finite(r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99,
                                                     r.tpot.mean, r.tpot.p99)
        q = (r.ttft.p50, r.ttft.p90, r.ttft.p99)
        assert prev is None or all(a <= b for a, b in zip(prev, q)), (name, frac, prev, q)
        prev = q


@pytest.mark.parametrize("name", ["llama3-70b-disagg-h100.yaml", "fuzz:disaggregated"])
def test_solve_within_1e_4_of_a_prefill_limit(name):
    """On 62e9c4d 0.9999·λmax raised NumericalError ("prefill chain needs 400721 states"; fuzz: 149712):
    the chain's states past 16384 and the wait grid past 4096 counts ahead are now the exact geometric
    tail in closed form. Finite, 0 <= A <= 1, TTFT quantiles non-decreasing in the rate, and the heavy-
    traffic law: (1 − ρ)·E[TTFT] tends to a constant (here within 1% between 0.9999 and 0.99999)."""
    sc = variant(name, PREFILL_BOUND.get(name, ()))
    lam, station = Solver(sc).max_stable_rate()
    assert station == "prefill"
    prev, scaled = None, []
    for frac in (0.999, 0.9999, 0.99999):
        r = qmodel.solve(sc, frac * lam)
        assert 0.0 <= r.attainment <= 1.0 and finite(r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99,
                                                     r.tpot.mean, r.tpot.p99)
        q = (r.ttft.p50, r.ttft.p90, r.ttft.p99)
        assert prev is None or all(a <= b for a, b in zip(prev, q)), (name, frac, prev, q)
        prev = q
        scaled.append((1.0 - frac) * r.ttft.mean)
    assert scaled[2] == pytest.approx(scaled[1], rel=1e-2)
