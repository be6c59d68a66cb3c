"""Attainment is non-increasing in the arrival rate (issue 15, "Properties to add").

A(λ) = P(TTFT <= x, TPOT <= y) cannot rise with λ for the FCFS, bulk and GPS stations the solver
composes (Lindley coupling: every wait is pathwise non-decreasing in the arrival rate), and the
goodput search relies on it (qmodel/goodput.py raises NumericalError when it sees a rise). Checked
on the library's :meth:`Solver.compose` for pairs of rates in (0, 0.99·λmax), on the examples and on
variants of them (instances, TP, link bandwidth, SLO), for A and for each factor (TTFT and TPOT
attainment). The tolerance is goodput.py's own monotonicity tolerance, 1e-6 in attainment (the
grids' round-off; a truncation artefact is orders larger).
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

import numpy as np
import pytest

from qmodel.solver import Solver
from tests.prop_scenarios import CHEAP, PROP, SCENARIOS, label, variant, variants

TOL = 1e-6  # qmodel/goodput.py _check_monotone's tolerance on attainment
ROUND = 1e-12  # float round-off on a probability summed from grid masses
TOP = 0.99  # compose's domain here: inside the fraction where every chain truncates (Solver.attainment)


def _check(name: str, sets: tuple[str, ...], f1: float, f2: float) -> None:
    s = Solver(variant(name, sets))
    lam = s.max_stable_rate()[0]
    lo, hi = sorted((f1, f2))
    a, b = s.compose(lo * lam), s.compose(hi * lam)
    where = f"{label(name, sets)}: rates {lo * lam:.6g} < {hi * lam:.6g} req/s (λmax {lam:.6g})"
    for what, x, y in (("attainment", a.attainment, b.attainment), ("TTFT attainment", a.ttft_attainment,
                                                                   b.ttft_attainment),
                       ("TPOT attainment", a.tpot_attainment, b.tpot_attainment)):
        # a probability, to round-off (GridDist.cdf sums grid masses: 1 + 2.2e-16 seen at light load)
        assert -ROUND <= x <= 1.0 + ROUND and -ROUND <= y <= 1.0 + ROUND, (where, what, x, y)
        if y > x + TOL:
            raise AssertionError(f"{what} rose from {x:.9f} to {y:.9f}: {where}")


_FRAC = st.floats(1e-3, TOP)


@settings(max_examples=40, **PROP)
@given(v=variants(CHEAP), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate(v, f1, f2):
    _check(*v, f1, f2)


@settings(max_examples=8, **PROP)
@given(name=st.sampled_from([s for s in SCENARIOS if s not in CHEAP]), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate_on_the_large_examples(name, f1, f2):
    _check(name, (), f1, f2)


@pytest.mark.slow
@settings(max_examples=150, **PROP)
@given(v=variants(SCENARIOS), f1=_FRAC, f2=_FRAC)
def test_attainment_non_increasing_in_rate_wide(v, f1, f2):
    _check(*v, f1, f2)


# Close pairs: a grid step or a branch switch shows as a local rise that far-apart pairs step over.
@settings(max_examples=30, **PROP)
@given(v=variants(CHEAP), f=st.floats(1e-3, 0.98), d=st.sampled_from([1e-5, 1e-4, 1e-3, 1e-2]))
def test_attainment_non_increasing_in_rate_close_pairs(v, f, d):
    _check(*v, f, f + d)


def _check_near_limit(name: str, sets: tuple[str, ...], f1: float, f2: float) -> None:
    """What the goodput search evaluates up to 0.999·λmax: :meth:`Solver.attainment` (a chain that
    cannot truncate there counts as 0), which must be non-increasing too."""
    s = Solver(variant(name, sets))
    lam = s.max_stable_rate()[0]
    lo, hi = sorted((f1, f2))
    x, y = s.attainment(lo * lam), s.attainment(hi * lam)
    assert y >= -ROUND, (label(name, sets), y)
    if y > x + TOL:
        raise AssertionError(f"attainment rose from {x:.9f} to {y:.9f}: {label(name, sets)}: rates "
                             f"{lo * lam:.9g} < {hi * lam:.9g} req/s (λmax {lam:.9g})")


_NEAR = st.floats(0.95, 0.99999)


@settings(max_examples=20, **PROP)
@given(v=variants(CHEAP), f1=_NEAR, f2=_NEAR)
def test_attainment_non_increasing_near_the_limit(v, f1, f2):
    _check_near_limit(*v, f1, f2)


@pytest.mark.slow
@settings(max_examples=80, **PROP)
@given(v=variants(SCENARIOS), f1=_NEAR, f2=_NEAR)
def test_attainment_non_increasing_near_the_limit_wide(v, f1, f2):
    _check_near_limit(*v, f1, f2)


@pytest.mark.slow  # ~10 s: solves near saturation on the largest prefill chain
@pytest.mark.needs_data("splitwise_sim/perf_model.csv")
def test_attainment_does_not_rise_on_the_prefill_grid_near_saturation():
    # The prefill wait grid's step grows with the horizon near saturation. It grew continuously
    # (0.1085 s at 0.99324, 0.1091 s at 0.99328 of λmax), so floor(2 s/dx)·dx slid towards the 2 s
    # TTFT target and the read CDF rose: A = 0.0554120 at 9.509059 req/s, 0.0554542 at 9.509426
    # (λmax 9.573741). On the ladder (min mean batch/16)·2^k (qmodel/dist.py pow2_grid) the step is
    # the same at both rates (0.0648 s) and A falls, 0.05794 -> 0.05762.
    _check_near_limit("llama2-70b-disagg-splitwise.toml", (), 0.9932438, 0.9932822)


# Colocated station, bursty arrivals (ca2 > 1), on the fixed-factor roofline where the rises were found
# (under the measured curves the step times, hence lambda_max and where a rise sits, move). The burst
# increment Q_burst(u) - Q_limit(u) was read from lattice quantiles (whole grid steps), so it fell by a
# step wherever the limit's quantile crossed a grid point before the burst's, and TTFT attainment rose:
# llama3-8b-colocated-h100 (lambda_max 12.0024) at Gamma cv 1.5 0.97250646 at 0.7725 -> 0.97256180 at
# 0.775 lambda_max (+5.5e-5), at cv 2 +1.7e-5 between 0.5225 and 0.525 (docs/methods.md, "The colocated
# burst increment"; the running maximum it also dropped gave rises up to 0.09 at a 0.305 s target).
@pytest.mark.parametrize("extra,f1,f2", [(("workload.arrivals.cv=1.5",), 0.7725, 0.775),
                                         (("workload.arrivals.cv=2",), 0.5225, 0.525),
                                         (("workload.arrivals.cv=1.5", "slo.ttft_s=0.305"), 0.735, 0.7375)])
def test_attainment_does_not_rise_on_the_bursty_colocated_examples(extra, f1, f2):
    _check("llama3-8b-colocated-h100.yaml", extra + ("perf.efficiency=constants",), f1, f2)


_SLOW_LINK = ("deployment.prefill.instances=3", "deployment.decode.instances=3",
              "deployment.link_bandwidth_bytes_per_s=62.5 MB/s", "deployment.transfer_mode=layerwise")


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
def test_link_wait_does_not_follow_round_off_batch_sizes():
    """The link's M^X/G/1 wait takes its Cramér–Lundberg decay from the largest batch size released
    together; on 62e9c4d a size of probability 4e-19 (round-off in the prefill's own-batch law, gone
    at a rate 1e-10 away) set it: link p90 16.3 → 18.9 s and TPOT attainment 0.6276 → 0.5990 between
    rates 1e-10 apart, and a TPOT attainment rise of +0.0136 from 0.0592 to 0.0837·λmax (the
    'slow-link-tpot' defect, first cause). Sizes of total mass below 1e-12 are now left out."""
    s = Solver(variant("azure-conv-trace-disagg-a100.yaml", _SLOW_LINK))
    lam = s.max_stable_rate()[0]
    a, b = s.compose(0.0591666666 * lam), s.compose(0.059166666666666666 * lam)
    assert b.stations[1].delay.quantile(0.9) == pytest.approx(a.stations[1].delay.quantile(0.9), rel=1e-6)
    assert b.tpot_attainment == pytest.approx(a.tpot_attainment, abs=1e-6)
    assert s.compose(0.08375 * lam).tpot_attainment <= b.tpot_attainment + TOL


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
def test_tpot_attainment_falls_steadily_on_a_slow_link():
    """The 'slow-link-tpot' defect's second cause. TPOT = decode TPOT + handoff/(L - 1); the link's
    step grows with its wait, and the sum was put on max(decode step, handoff step), a step that
    moved with the rate. The decode TPOT is a discrete law (a step time per batch size), so each
    of its values crossed the 100 ms target as the step moved: on main (4e41308) TPOT attainment rose
    at 83 of 120 steps of 0.0025·λmax between 0.30 and 0.60 (0.4696 at 0.43 -> 0.4815 at 0.44, up to
    +0.0099 in one step). On the ladders of qmodel/dist.py pow2_grid (the handoff's terms on h·2^k,
    the sum on decode's step·2^k) it falls at every step."""
    s = Solver(variant("azure-conv-trace-disagg-a100.yaml", _SLOW_LINK))
    lam = s.max_stable_rate()[0]
    a = [s.compose(f * lam).tpot_attainment for f in np.arange(0.30, 0.6001, 0.02)]
    # (on main, 5 of these 15 steps rose)
    rises = [(round(0.30 + 0.02 * i, 2), x, y) for i, (x, y) in enumerate(zip(a, a[1:])) if y > x + TOL]
    assert not rises, rises
    assert a[0] - a[-1] > 0.1  # it does fall: 0.522 -> 0.389
