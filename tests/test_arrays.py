"""qmodel.arrays against numpy, value for value (bit for bit): the three reductions replace
``np.unique`` / ``np.median`` / ``np.quantile`` on the solve path only to keep ``numpy.ma`` unimported,
so any difference at all is a failure. A fresh ``qmodel solve`` of a disaggregated example must not
import ``numpy.ma`` (30-55 ms; fails on the parent, where np.unique/np.quantile loaded it)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmodel.arrays import distinct, median, quantiles

_finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
_ints = st.integers(min_value=-(2**40), max_value=2**40)


def _bits(x) -> bytes:
    return np.asarray(x, dtype=np.float64).tobytes()


@settings(max_examples=300)
@given(st.one_of(st.lists(_finite, min_size=1, max_size=60), st.lists(_ints, min_size=1, max_size=60)))
def test_distinct_and_median_are_numpys(values):
    a = np.array(values)
    u = distinct(a)
    assert u.dtype == np.unique(a).dtype and u.tobytes() == np.unique(a).tobytes()
    assert _bits(median(a)) == _bits(np.median(a))
    assert _bits(median(values)) == _bits(float(np.median(values)))


@settings(max_examples=300)
@given(st.one_of(st.lists(_finite, min_size=1, max_size=60), st.lists(_ints, min_size=1, max_size=60),
                 st.lists(st.integers(1, 64), min_size=1, max_size=5000)),
       st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6))
def test_quantiles_are_numpys(values, q):
    a = np.array(values)
    assert quantiles(a, q).tobytes() == np.quantile(a, q).tobytes()
    assert quantiles(a, tuple(q)).tobytes() == np.quantile(a, tuple(q)).tobytes()


def test_the_prefill_law_levels_on_count_samples():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n0 = rng.integers(1, rng.integers(2, 300), size=4096)
        q = (1.0 / 3.0, 2.0 / 3.0)
        assert quantiles(n0, q).tobytes() == np.quantile(n0, q).tobytes()


def test_nan_and_edges():
    assert np.isnan(median([1.0, np.nan, 2.0])) and np.isnan(np.median([1.0, np.nan, 2.0]))
    assert np.isnan(quantiles([1.0, np.nan], [0.5])).all()
    assert distinct([np.nan, 1.0, np.nan]).tobytes() == np.unique([np.nan, 1.0, np.nan]).tobytes()
    with pytest.raises(ValueError):
        quantiles([], [0.5])
    with pytest.raises(ValueError):
        quantiles([1, 2], [1.5])


@pytest.mark.parametrize("example", ["opt13b-disagg-a100.yaml", "llama3-70b-disagg-h100.yaml",
                                     pytest.param("llama2-70b-disagg-splitwise.toml", marks=pytest.mark.needs_data),
                                     pytest.param("azure-conv-trace-disagg-a100.yaml", marks=pytest.mark.needs_data)])
def test_a_fresh_solve_does_not_import_numpy_ma(repo_root, example):
    code = ("import sys, io, contextlib; from qmodel.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['solve', sys.argv[1]])\n"
            "print(rc, 'numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(repo_root / "examples" / example)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"]
