"""The validation harness: quick suite end to end, goodput bisection, summary statistics, run lengths."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmodel.validation.harness import (BANDS, LATENCY_METRICS, SUMMARY_METRICS, band_of, replay_goodput, round_sig,
                                       run_suite, summarize)
from qmodel.validation.suites import ARRIVALS, CONFIGS, UTILIZATIONS, get_suite


@pytest.fixture(scope="module")
def quick():
    return run_suite(get_suite("quick"))


def test_quick_suite_shape(quick):
    # the JSON the brief fixes: summary METRIC -> {median_abs_rel_error, p90_abs_rel_error, n}, scenarios list
    # a station raising anywhere (including the goodput bisection) is listed here: fail on it by name
    assert not quick["summary"]["failures"], quick["summary"]["failures"]
    json.dumps(quick, allow_nan=False)  # never NaN/inf
    for m in SUMMARY_METRICS:
        s = quick["summary"][m]
        assert set(s) >= {"median_abs_rel_error", "p90_abs_rel_error", "n"}
        assert 0 <= s["median_abs_rel_error"] <= s["p90_abs_rel_error"]
    assert quick["summary"]["ttft_p90"]["n"] == 4 and quick["summary"]["goodput"]["n"] == 1
    assert set(quick["summary"]["by_topology"]) == {"colocated", "chunked", "disaggregated"}
    assert set(quick["summary"]["by_band"]) <= {b for b, _, _ in BANDS}
    for c in quick["scenarios"]:
        assert {"name", "topology", "utilization", "analytic", "replay", "replay_noise", "error_rel"} <= set(c)
        assert math.isclose(c["rate_per_s"], c["utilization"] * c["max_stable_rate_per_s"])
        assert c["replay_requests"] == get_suite("quick").n_requests(c["utilization"])
        for m in LATENCY_METRICS:
            a, r = c["analytic"][m], c["replay"][m]
            assert math.isclose(c["error_rel"][m], (a - r) / r)
            assert c["replay_noise"][m] >= 0


def test_quick_suite_disaggregated_accuracy(quick):
    # Disaggregated decode (GPS with exact KV accounting) and the prefill batch chain are the
    # engine's best-founded stations: at u = 0.8 TPOT must agree within 5% (replay noise there is
    # ~1% for TPOT), TTFT p90 within 15% (the brief's 90th-percentile target; TTFT noise ~5%).
    c = next(c for c in quick["scenarios"] if c["name"] == "disagg-llama70b-h100/poisson/u0.8")
    for m in ("tpot_p50", "tpot_p90", "tpot_p99"):
        assert abs(c["error_rel"][m]) < 0.05, (m, c["error_rel"][m])
    assert abs(c["error_rel"]["ttft_p90"]) < 0.15
    # attainment is a probability: differences above 5 points would change goodput visibly
    for c in quick["scenarios"]:
        assert abs(c["error_rel"]["attainment"]) < 0.05, c["name"]
    # the brief's goodput target: within 5% (replay bracket 2%)
    g = quick["goodput"][0]
    assert "error" not in g, g["error"]
    assert abs(g["error_rel"]["goodput"]) <= 0.05, g
    lo, hi = g["replay"]["bracket"]
    assert lo <= g["replay"]["goodput"] <= hi and (hi - lo) <= 0.02 * hi + 1e-12


@given(g=st.floats(0.5, 50.0), guess=st.floats(0.2, 60.0))
@settings(max_examples=60, deadline=None)
def test_replay_goodput_finds_threshold_of_monotone_curve(g, guess):
    # a step-free, strictly decreasing attainment curve crossing the goal at g
    att = lambda r: 1.0 / (1.0 + (r / g) ** 8 * (1 / 0.9 - 1))  # noqa: E731  (A(g) = 0.9 exactly)
    lam = 100.0
    est, lo, hi, calls = replay_goodput(att, guess, 0.9, lam)
    assert lo <= g <= hi * (1 + 1e-9)
    assert (hi - lo) <= 0.02 * hi + 1e-12
    assert abs(est - g) <= 0.02 * g
    assert calls <= 24


def test_replay_goodput_edges():
    # feasible everywhere up to the cap: the cap; infeasible even when idle: zero
    assert replay_goodput(lambda r: 1.0, 5.0, 0.9, 10.0)[0] == 15.0
    assert replay_goodput(lambda r: 0.0, 5.0, 0.9, 10.0)[0] == 0.0


def test_summary_statistics_exact():
    # median and 90th percentile (numpy linear interpolation) of |errors| 0..9 %: 4.5 % and 8.1 %
    cases = [{"name": f"c{i}", "topology": "colocated", "band": "u<=0.5",
              "error_rel": {m: (-1) ** i * i / 100 for m in LATENCY_METRICS + ["attainment"]},
              "replay_noise": {m: 0.0 for m in LATENCY_METRICS}} for i in range(10)]
    s = summarize(cases, [])
    assert s["ttft_p99"]["n"] == 10
    assert s["ttft_p99"]["median_abs_rel_error"] == pytest.approx(0.045, abs=1e-12)
    assert s["ttft_p99"]["p90_abs_rel_error"] == pytest.approx(0.081, abs=1e-12)
    assert s["ttft_p99"]["within_replay_noise"] == 1  # only the exact zero
    assert s["goodput"]["n"] == 0


def test_bands_and_rounding():
    assert [band_of(u) for u in UTILIZATIONS] == ["u<=0.5", "u<=0.5", "0.5<u<=0.8", "0.5<u<=0.8", "u>0.8", "u>0.8"]
    assert round_sig({"a": [0.123456, 12345.6], "b": 1, "c": "x", "d": 0.0}) == {"a": [0.1235, 12350.0], "b": 1,
                                                                                 "c": "x", "d": 0.0}


def test_full_suite_spans_what_the_brief_asks():
    full = get_suite("full")
    assert len(full.cases) == len(CONFIGS) * len(ARRIVALS) * len(UTILIZATIONS)
    assert {c.config.topology for c in full.cases} == {"colocated", "chunked", "disaggregated"}
    assert len({c.config.model for c in full.cases}) >= 3
    assert len({g for c in full.cases for g in c.config.gpus}) >= 3
    assert {c.config.mix for c in full.cases} == {"azure-conv-2023", "azure-code-2023"}
    assert sorted({c.utilization for c in full.cases}) == [0.3, 0.5, 0.7, 0.8, 0.9, 0.95]
    # run length ∝ 1/(1-u)^2 (the relaxation time of a queue, docs/validation.md) between the clips
    assert full.n_requests(0.8) == pytest.approx(full.base_requests / 0.04, rel=1e-9)
    assert full.n_requests(0.8) < full.max_requests
    assert full.n_requests(0.95) == full.max_requests and full.n_requests(0.0) == full.min_requests


def test_markdown_tables_render(quick, repo_root, tmp_path):
    # benchmarks/run_validation.py turns a suite result into the docs/validation.md tables
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_validation", repo_root / "benchmarks" / "run_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    md = mod.validation_markdown(quick, {"when": "now", "commit": "abc", "dirty": False, "seconds": 1.0,
                                         "lengths": "presets"})
    assert "| all |" in md and "disagg-llama70b-h100/poisson/u0.8" in md and "nan" not in md.lower()
    doc = tmp_path / "v.md"
    doc.write_text("intro\n<!-- t:begin -->\nold\n<!-- t:end -->\ntail\n")
    mod._replace_block(doc, "t", "new")
    assert doc.read_text() == "intro\n<!-- t:begin -->\nnew\n<!-- t:end -->\ntail\n"
