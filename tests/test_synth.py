"""Synthetic workloads: determinism, the arrival-process moments, joint length resampling, trace
rescaling. Moment tolerances come from the sampling error of the sample sizes used (stated per test)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from qmodel.errors import InputError
from qmodel.scenario import Workload
from qmodel.validation.synth import generate
from qmodel.validation.traces import clear_cache
from qmodel.workload import clipped_lognormal_mean, length_mix

LOGN = {"kind": "lognormal", "prompt_median_tokens": 1000, "prompt_sigma": 0.8, "output_median_tokens": 100,
        "output_sigma": 1.0, "correlation": 0.3}


def _w(arrivals: dict, lengths: dict | None = None) -> Workload:
    return Workload.model_validate({"arrivals": arrivals, "lengths": lengths or LOGN})


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def test_identical_inputs_identical_arrays():
    w = _w({"kind": "gamma", "rate_per_s": 3, "cv": 2})
    a, b = generate(w, 5000, 11), generate(w, 5000, 11)
    for x, y in [(a.arrival_s, b.arrival_s), (a.prompt_tokens, b.prompt_tokens), (a.output_tokens, b.output_tokens)]:
        np.testing.assert_array_equal(x, y)
    assert a.sha256 == b.sha256
    c = generate(w, 5000, 12)
    assert c.sha256 != a.sha256
    assert a.arrival_s[0] == 0.0 and np.all(np.diff(a.arrival_s) >= 0)
    assert a.format == "synthetic" and a.meta["seed"] == 11


def _law_check(w: Workload, median_sigma_clip: tuple[tuple[float, float, float, float], ...], corr: float) -> None:
    # The replay's synthetic lengths are i.i.d. draws of the law, the solver's length_mix its stratified
    # quadrature (qmodel.workload): both against the closed-form clipped-lognormal mean. i.i.d., 20,000
    # draws: within 4 standard errors of the mean (sd of the sample / sqrt(n)) and the log-correlation
    # within 4/sqrt(n); the quadrature's means within 1e-3 (midpoint rule plus whole-token rounding)
    # and its log-correlation within 4/sqrt(4096) (the Iman-Conover pairing's noise)
    tr = generate(w, 20000, 5)
    lm = length_mix(w)
    for x, q, (med, sig, lo, hi) in zip((tr.prompt_tokens, tr.output_tokens), (lm.prompt, lm.output), median_sigma_clip):
        exact = clipped_lognormal_mean(med, sig, lo, hi)
        assert abs(x.mean() - exact) <= 4 * x.std() / math.sqrt(x.size), (x.mean(), exact)
        assert abs(q.mean() / exact - 1) <= 1e-3, (q.mean(), exact)
    assert abs(np.corrcoef(np.log(tr.prompt_tokens), np.log(tr.output_tokens))[0, 1] - corr) <= 4 / math.sqrt(20000)
    assert abs(np.corrcoef(np.log(lm.prompt), np.log(lm.output))[0, 1] - corr) <= 4 / math.sqrt(len(lm))


def test_synth_lengths_and_length_mix_are_the_same_law():
    _law_check(_w({"kind": "poisson", "rate_per_s": 1}), ((1000, 0.8, 1, 32768), (100, 1.0, 1, 4096)), 0.3)


def test_changing_arrivals_keeps_lengths():
    a = generate(_w({"kind": "poisson", "rate_per_s": 1}), 1000, 3)
    b = generate(_w({"kind": "gamma", "rate_per_s": 9, "cv": 4}), 1000, 3)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_rate_and_cv(cv):
    # n = 200k gaps. Relative s.e. of the sample mean: cv/sqrt(n) <= 0.45 %. For Gamma (skewness
    # 2cv, kurtosis 3 + 6cv^2) the delta method gives the sample CV a relative s.e. of
    # sqrt((1 + cv^2)/(2n)) <= 0.35 %. 2 % is more than 4 s.e. for both, at every cv here.
    n = 200_001
    tr = generate(_w({"kind": "gamma", "rate_per_s": 4.0, "cv": cv}), n, 1)
    g = np.diff(tr.arrival_s)
    assert g.mean() == pytest.approx(0.25, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.02)
    assert tr.meta["rate_per_s"] == 4.0 and tr.meta["cv"] == cv


def test_poisson_and_rate_override():
    # 100k exponential gaps: relative s.e. of the mean 0.32 %; 1.5 % is ~5 s.e.
    w = _w({"kind": "poisson", "rate_per_s": 2.0})
    tr = generate(w, 100_001, 2, rate_per_s=8.0)
    g = np.diff(tr.arrival_s)
    assert 1.0 / g.mean() == pytest.approx(8.0, rel=0.015)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.015)


def test_fixed_lengths():
    tr = generate(_w({"kind": "poisson", "rate_per_s": 1}, {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 64}), 10, 0)
    assert set(tr.prompt_tokens.tolist()) == {512} and set(tr.output_tokens.tolist()) == {64}


def _qtrace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens,hash_ids"]
    # prompt and output perfectly correlated (output = prompt // 10) so joint resampling is visible
    for i in range(101):
        rows.append(f"{i * 0.5},{100 + 10 * i},{10 + i},{i} {1000 + i}")
    p.write_text("\n".join(rows) + "\n")
    return p


def test_empirical_resampling_is_joint(tmp_path):
    p = _qtrace(tmp_path)
    tr = generate(_w({"kind": "poisson", "rate_per_s": 1}, {"kind": "empirical", "path": str(p)}), 5000, 4)
    np.testing.assert_array_equal(tr.output_tokens, (tr.prompt_tokens - 100) // 10 + 10)
    assert tr.hash_ids is None  # resampled requests would repeat prefixes that never repeated
    assert len(np.unique(tr.prompt_tokens)) > 90


def test_trace_arrivals_rescaled_and_paired(tmp_path):
    p = _qtrace(tmp_path)  # 101 arrivals over 50 s: native rate 2 req/s exactly
    w = _w({"kind": "trace", "path": str(p), "rate_per_s": 8.0}, {"kind": "empirical", "path": str(p)})
    tr = generate(w, 101, 0)
    np.testing.assert_allclose(tr.arrival_s, np.arange(101) * 0.125, rtol=0, atol=1e-12)
    assert tr.prompt_tokens.tolist() == [100 + 10 * i for i in range(101)]  # own pairing, in order
    assert tr.hash_ids[3] == (3, 1003)
    assert tr.meta["time_scale"] == pytest.approx(0.25, rel=1e-12)


def test_trace_arrivals_time_scale_and_tiling(tmp_path):
    p = _qtrace(tmp_path)
    w = _w({"kind": "trace", "path": str(p), "time_scale": 2.0}, {"kind": "empirical", "path": str(p)})
    tr = generate(w, 250, 0)
    g = np.diff(tr.arrival_s)
    # time_scale 2 halves the 2 req/s native rate; copies are joined by one mean gap, so every
    # gap is exactly 1 s.
    np.testing.assert_allclose(g, 1.0, rtol=0, atol=1e-9)
    assert tr.meta["copies"] == 3
    assert tr.hash_ids[101] == (0 + 1101, 1000 + 1101)  # second copy: ids offset by max id + 1
    assert tr.prompt_tokens[101] == 100


def test_lengths_only_trace_cannot_give_arrivals(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n5,5\n6,6\n")
    with pytest.raises(InputError, match="no arrival times"):
        generate(_w({"kind": "trace", "path": str(p)}), 10, 0)


@pytest.mark.parametrize("kw", [{"n_requests": 0}, {"n_requests": 2.5}, {"seed": -1}, {"rate_per_s": -1.0},
                                {"rate_per_s": math.inf}])
def test_bad_arguments(kw):
    args = {"n_requests": 10, "seed": 0, **kw}
    with pytest.raises(InputError):
        generate(_w({"kind": "poisson", "rate_per_s": 1}), **args)


def test_preset_lengths_match_length_mix():
    from qmodel.errors import CatalogError
    from qmodel.registry import get_workload

    try:
        get_workload("azure-conv-2023")
    except CatalogError:
        pytest.skip("catalog has no azure-conv-2023 preset yet")
    pre = get_workload("azure-conv-2023").lengths
    w = _w({"kind": "poisson", "rate_per_s": 1}, {"kind": "preset", "name": "azure-conv-2023"})
    _law_check(w, ((pre.prompt_median_tokens, pre.prompt_sigma, pre.prompt_min_tokens, pre.prompt_max_tokens),
                   (pre.output_median_tokens, pre.output_sigma, pre.output_min_tokens, pre.output_max_tokens)),
               pre.correlation)


def test_real_trace_replay_and_rescale(data_dir):
    conv = str(data_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    w = _w({"kind": "trace", "path": conv, "rate_per_s": 11.06}, {"kind": "empirical", "path": conv})
    tr = generate(w, 19366, 0)
    # The whole trace at twice its native rate (5.530 req/s): realised rate is exactly the target
    # because the factor uses the whole trace's (n - 1)/span.
    assert tr.rate_per_s == pytest.approx(11.06, rel=1e-9)
    assert tr.prompt_tokens.mean() == pytest.approx(1154.7, abs=0.05)
