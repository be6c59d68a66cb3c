"""A cold disaggregated solve imports no scipy (issue 20): ln m! comes from math.lgamma, the
transform lengths are enumerated, the small balance systems are solved by numpy's LAPACK gesv.
On 62e9c4d `qmodel solve examples/opt13b-disagg-a100.yaml` spent ~0.16 s of 0.51 s importing
scipy.special, scipy.linalg.lapack and scipy.fft for these three."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from data_needs import EXAMPLES, example_needs


def test_log_factorials_equal_gammaln() -> None:
    from scipy.special import gammaln

    from qmodel.stations.prefill.kernels import log_factorials as _log_factorials

    for n in (1, 2, 31, 1000, 70000):
        m, lg, lg_list = _log_factorials(n)
        ref = gammaln(np.arange(n) + 1.0)
        assert m.tolist() == list(range(n))
        # both are ln Γ(m + 1) rounded to ~1 ulp: relative 1e-12 (measured 6.6e-16)
        assert np.allclose(lg, ref, rtol=1e-12, atol=0.0)
        assert lg_list == lg.tolist()
        assert lg[:2].tolist() == [0.0] * min(n, 2)
        assert not lg.flags.writeable


def test_fast_len_is_the_smallest_5_smooth_length() -> None:
    from scipy.fft import next_fast_len

    from qmodel.convolution import fast_len

    ns = list(range(0, 5000)) + [65537, 123457, 1 << 20, (1 << 20) + 1, 9_765_626]
    assert [fast_len(n) for n in ns] == [next_fast_len(max(n, 2), real=True) for n in ns]


@pytest.mark.parametrize("name", [pytest.param("opt13b-disagg-a100", marks=example_needs("opt13b-disagg-a100"))])
def test_cold_disaggregated_solve_imports_no_scipy(name: str) -> None:
    (path,) = EXAMPLES.glob(f"{name}.*")
    code = ("import sys, qmodel\n"
            f"r = qmodel.solve({str(path)!r})\n"
            "print(','.join(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "", f"the solve imported {proc.stdout.strip()[:200]}"
