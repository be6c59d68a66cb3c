"""Trace arrivals as windows of their own rate with a fluid backlog (qmodel/trace_law.py).

Exact checks on hand-built traces: the windows, rates and within-window SCV of a two-rate trace;
the periodic fluid backlog of an overloaded window (closed form); the mixture of two rate classes
through a station with a closed form at each rate (M/M/1 sojourn, Exp(μ - λ)); and agreement with
the replay on the bundled Azure conversation example, with a band from the measured table.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from qmodel.dist import GridDist
from qmodel.topology.base import Composition
from qmodel.trace_law import TraceLaw, backlog_delay, compose_windows, fluid_backlog, pass_on, trace_law


def two_rate_times() -> np.ndarray:
    """15 arrivals evenly over the first 10 mean gaps, 5 over the next 10: with m = 20 arrivals the
    scaled times s = t·19/18 put 15 in window [0, 10) and 5 in [10, 20)."""
    return np.concatenate([np.arange(15) * (10.0 / 15.0), 10.0 + 2.0 * np.arange(5)])


def test_windows_of_a_two_rate_trace_are_exact():
    law = trace_law(two_rate_times(), window_gaps=10, classes=8)
    np.testing.assert_array_equal(law.length, [10.0, 10.0])
    np.testing.assert_allclose(law.rel_rate, [1.5, 0.5], rtol=0, atol=1e-15)
    np.testing.assert_allclose(law.weight, [0.75, 0.25], rtol=0, atol=1e-15)
    assert law.ca2 == pytest.approx(0.0, abs=1e-20)  # evenly spaced within each window
    np.testing.assert_allclose(law.levels, [0.5, 1.5])  # classes sorted by rate
    np.testing.assert_allclose(law.class_weight, [0.25, 0.75])
    # the arrival-weighted mean of the relative rate over classes is the rate an arrival sees
    assert float(np.dot(law.class_weight, law.levels)) == pytest.approx(1.25)


def test_one_class_when_the_rate_is_constant():
    law = trace_law(np.arange(1000.0), window_gaps=100)
    assert len(law.levels) == 1 and law.levels[0] == pytest.approx(1.0)
    assert law.ca2 == pytest.approx(0.0, abs=1e-20)


def _law(r: list[float], length: list[float]) -> TraceLaw:
    r_, L = np.array(r), np.array(length)
    n = r_ * L
    return TraceLaw(r_, L, n / n.sum(), 1.0, np.arange(len(r_)), r_, n / n.sum())


def test_fluid_backlog_of_an_overloaded_window_is_exact():
    # window 1 at 1.5x the mean rate, window 2 at 0.5x, 10 mean gaps each, load u = 0.9:
    # dQ/ds = 1.5 - 1/0.9 in window 1 (grows to 10·(1.5 - 1/0.9)), then 0.5 - 1/0.9 (drains).
    law = _law([1.5, 0.5], [10.0, 10.0])
    q0, q1, busy, fed = fluid_backlog(law, 0.9)
    peak = 10.0 * (1.5 - 1.0 / 0.9)
    np.testing.assert_allclose(q0, [0.0, peak], rtol=1e-14)
    np.testing.assert_allclose(q1, [peak, 0.0], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(busy, [1.0, peak / (10.0 * (1.0 / 0.9 - 0.5))], rtol=1e-14)
    # what it passes on: the limit (1/u) while backlogged, then the backlog and window 2's arrivals
    np.testing.assert_allclose(fed, [1.0 / 0.9, (peak + 5.0) / 10.0], rtol=1e-14)
    # a second stage with a higher limit is fed at most the first's: no backlog there
    q0b, q1b, busyb, _ = fluid_backlog(law, 0.85, fed)
    assert not q0b.any() and not q1b.any() and not busyb.any()


def test_fluid_backlog_carries_over_the_period():
    # the overloaded window last: the periodic-stationary backlog enters the next copy's first window
    law = _law([0.5, 1.5], [10.0, 10.0])
    q0, q1, busy, _ = fluid_backlog(law, 0.95)
    peak = 10.0 * (1.5 - 1.0 / 0.95)
    np.testing.assert_allclose(q0, [peak, 0.0], rtol=1e-14)
    np.testing.assert_allclose(q1, [0.0, peak], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(busy, [peak / (10.0 * (1.0 / 0.95 - 0.5)), 1.0], rtol=1e-14)


def test_no_backlog_below_every_window_limit():
    law = _law([1.2, 0.8], [10.0, 10.0])
    q0, q1, busy, fed = fluid_backlog(law, 0.5)  # 1.2 < 1/0.5
    assert not q0.any() and not q1.any() and not busy.any()
    np.testing.assert_allclose(fed, [1.2, 0.8], rtol=1e-14)
    assert backlog_delay(law, (q0, q1, busy), 1.0) == [None, None]


def test_backlog_delay_law_is_uniform_over_the_window():
    # window 1's arrivals wait U(0, peak)/λ*; window 2's: a share `busy` U(0, peak)/λ*, the rest 0
    law = _law([1.5, 0.5], [10.0, 10.0])
    lim = 2.0
    peak = 10.0 * (1.5 - 1.0 / 0.9)
    d1, d2 = backlog_delay(law, fluid_backlog(law, 0.9)[:3], lim, dx=1e-3)
    share = peak / (10.0 * (1.0 / 0.9 - 0.5))
    top = peak / lim
    for x in (0.0, 0.25 * top, 0.5 * top, top):
        k = round(x / d1.dx)  # CDF exact at the grid points
        assert d1.cum[k] == pytest.approx(min(k * d1.dx / top, 1.0), abs=1e-12)
        assert d2.cum[k] == pytest.approx(1.0 - share + share * min(k * d2.dx / top, 1.0), abs=1e-12)
    assert d1.mean_s == pytest.approx(top / 2, rel=1e-14)
    assert d2.mean_s == pytest.approx(share * top / 2, rel=1e-14)


class _MM1Topology:
    """A fake topology: one M/M/1 station of service rate μ, TTFT its sojourn Exp(μ - λ), TPOT
    a point mass; the point estimate a·b and Fréchet bounds as the disaggregated topology."""

    separate_prefill = False
    name = "mm1"

    def __init__(self, mu: float, dx: float) -> None:
        self.mu, self.dx = mu, dx

    def compose(self, solver, rate: float, laws: bool) -> Composition:
        a = self.mu - rate
        n = int(60.0 / (a * self.dx))
        F = 1.0 - np.exp(-a * self.dx * np.arange(n))
        ttft = GridDist.from_cdf_values(F, self.dx, 1.0 / a, tail_rate=a, continuous=True)
        tpot = GridDist.point(0.01, self.dx)
        st = SimpleNamespace(delay=ttft, wait=None, tpot=tpot, name="mm1")
        x = solver.scenario.slo.ttft_s
        at = float(ttft.cdf(x))
        return Composition(rate, [st], ttft, tpot, at, 1.0, at, (at, at))

    def attainment_bounds(self, a: float, b: float) -> tuple[float, float]:
        return max(0.0, a + b - 1.0), min(a, b)


def _solver(law: TraceLaw, mu: float, ttft_s: float) -> SimpleNamespace:
    return SimpleNamespace(resolved=SimpleNamespace(arrival_law=law, lengths=SimpleNamespace(output=np.array([2]))),
                           topology=_MM1Topology(mu, 1e-3),
                           scenario=SimpleNamespace(slo=SimpleNamespace(ttft_s=ttft_s, tpot_s=1.0)),
                           max_stable_rate=lambda: (mu, "mm1"), station_limits=lambda: [(mu, "mm1")],
                           served_limits=lambda: [(mu, "mm1")],  # no request refused: the same limits
                           tpot_attainment=lambda tpot: float(tpot.cdf(1.0)))


def test_two_rate_mixture_of_a_closed_form_station():
    # two classes at 0.5x and 1.5x the mean rate λ = 0.4 of an M/M/1 with μ = 1 (λ* = 1): below the
    # load cap (0.6 <= 0.9) and without backlog, so TTFT is the mixture 0.25 Exp(0.8) + 0.75 Exp(0.4)
    law = trace_law(two_rate_times(), window_gaps=10)
    mu, lam, x = 1.0, 0.4, 2.0
    solver = _solver(law, mu, x)
    c = compose_windows(solver, lam, laws=True)
    rates = (mu - 0.5 * lam, mu - 1.5 * lam)
    cdf = lambda t: 0.25 * (1 - math.exp(-rates[0] * t)) + 0.75 * (1 - math.exp(-rates[1] * t))
    # grid CDFs are exact at grid points (x = 2000 steps): only round-off
    assert c.ttft_attainment == pytest.approx(cdf(x), abs=1e-12)
    assert c.attainment == pytest.approx(cdf(x), abs=1e-12)
    assert c.ttft.mean_s == pytest.approx(0.25 / rates[0] + 0.75 / rates[1], rel=1e-12)
    for q in (0.5, 0.9, 0.99):  # quantiles to the grid's step (1 ms): linear interpolation within a bin
        lo, hi = 0.0, 100.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
        assert c.ttft.quantile(q) == pytest.approx(lo, abs=1e-3)
    # the lazily built laws (a goodput search's reading) are the same
    assert compose_windows(solver, lam, laws=False).ttft.quantile(0.9) == c.ttft.quantile(0.9)


def test_overloaded_window_adds_its_fluid_backlog():
    # at λ = 0.9 the dense window runs at 1.35 > μ = 1: its class is solved at the cap (0.9) and its
    # arrivals wait U(0, peak)/μ more; the attainment is the arrival-weighted mean of the classes'
    from qmodel.trace_law import LOAD_CAP

    law = trace_law(two_rate_times(), window_gaps=10)
    mu, lam, x = 1.0, 0.9, 20.0
    solver = _solver(law, mu, x)
    c = compose_windows(solver, lam, laws=True)
    peak = 10.0 * (1.5 - 1.0 / 0.9)  # requests; the wait is peak/μ seconds at most
    r_lo, r_hi = mu - 0.5 * lam, mu - LOAD_CAP * mu
    share = peak / (10.0 * (1.0 / 0.9 - 0.5))
    # window 2 (low class): share `share` waits U(0, peak) more, the rest nothing
    t = np.linspace(0.0, peak, 200001)
    conv_lo = np.trapezoid(1 - np.exp(-r_lo * (x - t)), t) / peak
    conv_hi = np.trapezoid(1 - np.exp(-r_hi * (x - t)), t) / peak
    a_lo = (1 - share) * (1 - math.exp(-r_lo * x)) + share * conv_lo
    expect = 0.25 * a_lo + 0.75 * conv_hi
    # the delay law is on a 1 ms grid here, read at its upper edges in the sum: within a step's worth
    assert c.ttft_attainment == pytest.approx(expect, abs=2e-3)
    assert c.ttft.mean_s == pytest.approx(0.25 * (1 / r_lo + share * peak / 2) + 0.75 * (1 / r_hi + peak / 2), rel=1e-9)


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
@pytest.mark.slow
def test_azure_conversation_example_against_the_replay():
    """The bundled Azure conversation example at 0.5 of its limit, replayed on the whole trace
    (19,366 requests, one copy; the replay is deterministic in a trace's arrivals and lengths).
    Measured (docs/validation.md, "Trace arrivals as a nonstationary process"): TTFT p50 +4.6%,
    p90 -18.8%, TPOT p50 +2.9%; bands about 1.3x those, near the corpus's median |error| for
    TTFT (p50 21.7%, p90 12.3%) and twice its TPOT p50 (2.7% disaggregated). At 0.8 and 0.9 this
    example is not within them (the next test), which is why the band is checked at 0.5 only."""
    from qmodel.source import as_scenario
    from qmodel.validation.harness import compare_scenario

    sc = as_scenario("examples/azure-conv-trace-disagg-a100.yaml")
    err = compare_scenario(sc, 0.5, 19366, (0,))["error_rel"]
    assert abs(err["ttft_p50"]) < 0.06, err
    assert abs(err["ttft_p90"]) < 0.25, err
    assert abs(err["tpot_p50"]) < 0.04, err


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
@pytest.mark.slow
def test_azure_conversation_example_at_0_8_reads_the_prompt_drift():
    """The same example at 0.8: the conversation trace's busy minutes carry longer prompts (window
    mean prompt up to 1.4x the trace's, prefill demand up to 2.27x the mean against 1.73x in
    requests), so the replay's prefill queue holds TTFT p90 at 13.9 s while decode never waits
    for KV. Read as request counts the model gave TTFT p90 -93%, TPOT p99 +800%; with the windows'
    demand (pass_on) -32.8% and +37.3% (docs/validation.md). Bands: 1.3x those, as above; a
    regression to counts fails both."""
    from qmodel.source import as_scenario
    from qmodel.validation.harness import compare_scenario

    sc = as_scenario("examples/azure-conv-trace-disagg-a100.yaml")
    err = compare_scenario(sc, 0.8, 19366, (0,))["error_rel"]
    assert abs(err["ttft_p90"]) < 0.43, err
    assert abs(err["ttft_p99"]) < 0.37, err
    assert abs(err["tpot_p99"]) < 0.49, err


def test_window_mean_lengths_of_a_paired_trace_are_exact():
    """Two windows of 100 mean gaps (evenly spaced arrivals), prompts 300 then 100 tokens, outputs
    10 then 30: the trace's means are 200 and 20, so the windows ask 1.5 / 0.5 of the mean prompt
    and 0.5 / 1.5 of the mean output; unpaired, neither is set."""
    t = np.arange(200.0)
    law = trace_law(t, prompt=np.repeat([300, 100], 100), output=np.repeat([10, 30], 100))
    np.testing.assert_allclose(law.prompt_rel, [1.5, 0.5], rtol=1e-15)
    np.testing.assert_allclose(law.output_rel, [0.5, 1.5], rtol=1e-15)
    assert trace_law(t).prompt_rel is None and trace_law(t).output_rel is None


def test_pass_on_maps_served_work_by_arrival_position():
    """Two windows of 100 gaps, 150 then 50 arrivals (r = 1.5, 0.5), first-stage demand 1.2 / 0.4 and
    second-stage 0.5 / 2.5 of a mean request (both average 1 over the arrivals). At u = 0.8 the first
    stage serves 1.25 per gap: its input 1.8 / 0.2 leaves 55 at the first window's end (drained
    within the second: the period starts empty). By hand: served work by the windows' edges 0, 125,
    200 of W = 0, 180, 200; position of 125 is 125/180 of window 1, whose second-stage work is 75, so
    W' = 0, 75 * 125/180, 200 and the next stage's input is (52.083, 147.917) / 100. Dividing the
    stage's output by its demand and multiplying by the next (window by window) would give
    0.521 / 4.688: 2.6 times the requests there are."""
    law = TraceLaw(np.array([1.5, 0.5]), np.array([100.0, 100.0]), np.array([0.75, 0.25]), 1.0,
                   np.array([0, 1]), np.array([1.5, 0.5]), np.array([0.75, 0.25]))
    e1, e2 = np.array([1.2, 0.4]), np.array([0.5, 2.5])
    q0, q1, _, out = fluid_backlog(law, 0.8, law.rel_rate * e1)
    np.testing.assert_allclose(q0, [0.0, 55.0], atol=1e-12)
    np.testing.assert_allclose(q1, [55.0, 0.0], atol=1e-12)
    fed = pass_on(law, q0, q1, e1, out, e2)
    w = 75.0 * 125.0 / 180.0
    np.testing.assert_allclose(fed, [w / 100.0, (200.0 - w) / 100.0], rtol=1e-13)
    assert float(np.dot(fed, law.length)) == pytest.approx(200.0, rel=1e-13)  # work conserved
    assert pass_on(law, q0, q1, None, out, None) is out  # the same demand: the stage's output


def _trace_scenario(tmp_path, kind: str = "trace"):
    """llama3-8b-colocated-h100 fed a hand-built trace: 1,000 arrivals at 3 req/s, then 1,000 at
    1 req/s, evenly spaced (or, with ``kind="poisson"``, Poisson arrivals at the trace's mean rate)."""
    from qmodel.source import as_scenario

    t = np.concatenate([np.arange(1000) / 3.0, 1000 / 3.0 + np.arange(1000) / 1.0])
    p = tmp_path / "two_rate.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{x:.6f},512,128\n" for x in t))
    sc = as_scenario("examples/llama3-8b-colocated-h100.yaml")
    rate = 1999 / t[-1]
    arrivals = {"kind": "trace", "path": str(p), "format": "qmodel"} if kind == "trace" else {"kind": "poisson", "rate_per_s": rate}
    return sc.model_copy(update={"workload": sc.workload.model_validate(
        {"arrivals": arrivals, "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 128}})})


def test_trace_scenario_end_to_end(tmp_path):
    """Through the solver: the limit is the mean rate's (the renewal scenario's), every rate below
    it answers (no NumericalError near the limit; the backlog is a closed form), the answer grows
    with the load, and the one goodput search runs on it."""
    from qmodel.goodput import goodput
    from qmodel.solver import Solver

    s = Solver(_trace_scenario(tmp_path))
    law = s.resolved.arrival_law
    # evenly spaced in each window (times written to 1 us)
    assert law is not None and s.resolved.ca2 == pytest.approx(0.0, abs=1e-9)
    assert s.max_stable_rate() == Solver(_trace_scenario(tmp_path, "poisson")).max_stable_rate()
    lim = s.max_stable_rate()[0]
    p99 = []
    for u in (0.3, 0.6, 0.9, 0.999):
        r = s.solve(u * lim)
        assert all(math.isfinite(v) for v in (r.ttft.mean, r.ttft.p99, r.tpot.p99, r.attainment))
        assert 0.0 <= r.attainment_bounds[0] <= r.attainment <= r.attainment_bounds[1] + 1e-12 <= 1.0 + 1e-12
        p99.append(r.ttft.p99)
    assert p99 == sorted(p99)
    # above 2/3 of the limit the 3 req/s half (1.5x the mean) overloads: a backlog of minutes
    assert p99[-1] > 10 * p99[0]
    g = goodput(_trace_scenario(tmp_path))
    assert 0.0 < g.goodput_rps < lim


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
@pytest.mark.slow
def test_rate_class_compression_error():
    """K = 8 rate classes against one class per distinct window rate (83 of the conversation trace's
    194 windows) on the bundled example: measured |Δ| TTFT p50/p90/p99 <= 1.1%, TPOT p90 <= 0.34%,
    attainment <= 0.027 (docs/validation.md); bands 2%, 1%, 0.03."""
    import dataclasses

    from qmodel.source import as_scenario
    from qmodel.solver import Solver
    from qmodel.validation.traces import load_trace

    sc = as_scenario("examples/azure-conv-trace-disagg-a100.yaml")
    s = Solver(sc)
    a = sc.workload.arrivals
    tr = load_trace(a.path, a.format)  # the example's lengths are the trace's own (paired)
    full = trace_law(np.asarray(tr.arrival_s), classes=10**6, prompt=tr.prompt_tokens, output=tr.output_tokens)
    assert len(s.resolved.arrival_law.levels) == 8 and len(full.levels) == 83
    exact = Solver(sc, resolved=dataclasses.replace(s.resolved, arrival_law=full))
    lim = s.max_stable_rate()[0]
    for u in (0.5, 0.8, 0.9, 0.95):
        r, x = s.solve(u * lim), exact.solve(u * lim)
        for q in ("p50", "p90", "p99"):
            assert getattr(r.ttft, q) == pytest.approx(getattr(x.ttft, q), rel=0.02)
        assert r.tpot.p90 == pytest.approx(x.tpot.p90, rel=0.01)
        assert r.attainment == pytest.approx(x.attainment, abs=0.03)
