"""Workload presets: the TOML values are the fit of the public traces (refit here from the data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmodel.presets_fit import TRACE_PRESETS, TraceLengths, fit_all, fit_trace, round_sig
from qmodel.registry import get_workload


def _same_2sig(a: float, b: float) -> bool:
    # 2 significant digits: the TOML stores 3, so rounding both to 2 must agree (or differ only by
    # a rounding-boundary unit, checked by a 1% relative band).
    return round_sig(a, 2) == round_sig(b, 2) or math.isclose(a, b, rel_tol=0.01, abs_tol=1e-3)


@pytest.fixture(scope="module")
def fits(data_dir):
    return fit_all(data_dir)


@pytest.mark.parametrize("name", sorted(TRACE_PRESETS))
def test_toml_matches_refit(name, fits):
    f, w = fits[name], get_workload(name)
    L = w.lengths
    for key in ("prompt_median_tokens", "prompt_sigma", "output_median_tokens", "output_sigma", "correlation"):
        assert _same_2sig(getattr(L, key), getattr(f, key)), (name, key, getattr(L, key), getattr(f, key))
    for key in ("prompt_min_tokens", "prompt_max_tokens", "output_min_tokens", "output_max_tokens"):
        assert getattr(L, key) == getattr(f, key), (name, key)
    assert w.trace_file == TRACE_PRESETS[name][0]
    if name.startswith("azure"):
        assert _same_2sig(w.rate_per_s, f.rate_per_s) and _same_2sig(w.arrival_cv, f.arrival_cv)
    if name == "mooncake-conv":
        assert _same_2sig(w.rate_per_s, f.rate_per_s)
        assert _same_2sig(w.prefix_hit_ratio, f.prefix_hit_ratio)


def test_readme_statistics(fits):
    # data/README.md: conv 5.53 req/s, IA CV 1.09; code 2.57 req/s, IA CV 13.15; Mooncake hit 36.6%.
    assert fits["azure-conv-2023"].rate_per_s == pytest.approx(5.53, abs=0.005)
    assert fits["azure-conv-2023"].arrival_cv == pytest.approx(1.09, abs=0.005)
    assert fits["azure-code-2023"].arrival_cv == pytest.approx(13.15, abs=0.005)
    assert fits["mooncake-conv"].prefix_hit_ratio == pytest.approx(0.366, abs=0.0005)


def test_fit_recovers_lognormal_parameters():
    # Synthetic check of the estimator: n = 200k gives standard errors ~0.002 on sigma and the
    # log-median and ~0.002 on r; a 0.01 band is five standard errors.
    rng = np.random.default_rng(7)
    z1, z2 = rng.standard_normal((2, 200_000))
    r = 0.4
    p = np.exp(np.log(1000) + 0.9 * z1)
    o = np.exp(np.log(200) + 0.7 * (r * z1 + math.sqrt(1 - r * r) * z2))
    f = fit_trace(TraceLengths(p, o, None, None))
    assert math.log(f.prompt_median_tokens) == pytest.approx(math.log(1000), abs=0.01)
    assert f.prompt_sigma == pytest.approx(0.9, abs=0.01)
    assert f.output_sigma == pytest.approx(0.7, abs=0.01)
    assert f.correlation == pytest.approx(r, abs=0.01)


def test_fixed_preset_is_deterministic():
    L = get_workload("fixed-512-64").lengths
    assert (L.prompt_median_tokens, L.prompt_sigma, L.output_median_tokens, L.output_sigma) == (512, 0, 64, 0)
