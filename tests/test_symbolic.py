"""Lambdified closed forms against the numeric code paths (agreement to 1e-12), and ``explain``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmodel import symbolic as S
from qmodel.errors import InputError, UnstableError
from qmodel.stations.fcfs import MG1, ServiceSample
from qmodel.stations.kv_transfer import bandwidth_needed_bytes_per_s, layerwise_exposed_s

REL = 1e-12  # both paths are a handful of float64 operations: agreement to round-off
pos = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(s1=st.floats(1e-3, 10.0), s2=st.floats(1e-3, 10.0), load=st.floats(0.01, 0.97))
def test_pk_mean_matches_mg1(s1: float, s2: float, load: float) -> None:
    svc = ServiceSample.of(np.array([s1, s2]))
    lam = load / svc.mean_s
    want = MG1(lam, svc).mean_s
    got = S.evaluate("pk_mean_wait", lam=lam, es=svc.mean_s, es2=svc.moment(2))
    assert got == pytest.approx(want, rel=REL)


@settings(max_examples=60, deadline=None)
@given(d=st.floats(1e-3, 10.0), load=st.floats(0.01, 0.97))
def test_distserve_matches_md1(d: float, load: float) -> None:
    lam = load / d
    want = d + MG1(lam, ServiceSample.of(d)).mean_s
    assert S.evaluate("distserve_ttft", lam=lam, d=d) == pytest.approx(want, rel=REL)


@settings(max_examples=60, deadline=None)
@given(a=st.floats(1e-4, 0.1), beta=st.floats(1e-6, 1e-3), el=st.floats(1.0, 2000.0), x=st.floats(0.01, 0.97))
def test_decode_tpot_matches_negbin_little(a: float, beta: float, el: float, x: float) -> None:
    lam = x / (el * beta)
    r = 1.0 + a / beta
    mean_n = r * x / (1.0 - x)  # NegBin occupancy (docs/methods.md, "Stations": decode)
    want = mean_n / (lam * el)  # Little: time per token = E[N] / token throughput
    assert S.evaluate("decode_tpot", a=a, beta=beta, lam=lam, el=el) == pytest.approx(want, rel=REL)
    assert S.evaluate("decode_max_rate", beta=beta, el=el) == pytest.approx(1.0 / (el * beta), rel=REL)


def test_kv_bytes_per_token_matches_catalog() -> None:
    from qmodel.registry import load_catalog

    cat = load_catalog()
    models = cat.models.values() if hasattr(cat, "models") else cat["models"].values()
    checked = 0
    for m in models:
        if m.attention == "mla":
            continue
        from qmodel.units import dtype_bits

        # layers holding KV: all but a hybrid model's recurrent (constant-state) layers
        got = S.evaluate("kv_bytes_per_token", layers=m.attention_layers, kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                         bits=dtype_bits(m.kv_dtype, "kv_dtype"))
        assert got == pytest.approx(m.kv_bytes_per_token(), rel=REL), m.name
        checked += 1
    assert checked >= 10


@settings(max_examples=60, deadline=None)
@given(kvb=pos, p=pos, lam=pos)
def test_link_bandwidth_matches_kv_station(kvb: float, p: float, lam: float) -> None:
    assert S.evaluate("link_bandwidth", kv_bytes_per_token=kvb, mean_prompt=p, lam=lam) == pytest.approx(
        bandwidth_needed_bytes_per_s(kvb, p, lam), rel=REL)


@settings(max_examples=80, deadline=None)
@given(x=st.floats(1e3, 1e11), c=st.floats(1e6, 1e12), layers=st.integers(1, 128), tp=st.floats(0.0, 10.0))
def test_layerwise_matches_kv_station(x: float, c: float, layers: int, tp: float) -> None:
    got = S.evaluate("layerwise_exposed", x=x, c=c, layers=layers, tp=tp)
    want = float(layerwise_exposed_s(x, c, layers, tp))
    assert got == pytest.approx(want, rel=REL, abs=1e-300)


def test_explain_prints_formula_numbers_and_value() -> None:
    text = S.explain("distserve_ttft", lam=5.0, d=0.1)
    assert "TTFT" in text and "lambda = 5" in text and "0.15 s" in text
    pretty = S.explain("pk_mean_wait", pretty=True, lam=8.0, es=0.1, es2=0.0108)
    assert "0.216 s" in pretty
    with pytest.raises(InputError):
        S.explain("no_such_formula", lam=1.0)
    with pytest.raises(InputError):
        S.evaluate("pk_mean_wait", lam=1.0, es=0.5)  # es2 missing
    with pytest.raises(UnstableError):
        S.evaluate("distserve_ttft", lam=20.0, d=0.1)


def test_imports_stay_light() -> None:
    code = ("import sys, qmodel, qmodel.symbolic, qmodel.stations.fcfs, qmodel.stations.prefill, "
            "qmodel.stations.kv_transfer; "
            "bad = [m for m in ('sympy', 'scipy.stats', 'textual') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
