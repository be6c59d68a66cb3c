"""Heavy traffic in the prefill bulk-service chain (docs/methods.md, "Heavy traffic").

Where the window of 8 decay lengths (2b + 40 + 8/ln z0 states) would exceed 6000, the chain is
solved on a window of 4b + 200 states with the exact geometric tail as its boundary: the
subdominant roots have decayed within a few b, so the longer window changes π only by round-off.
On main that load raised NumericalError ("needs N solved states").
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from qmodel.stations.prefill import BatchServiceLaw, BulkQueue

LAW = BatchServiceLaw.deterministic_times([0.2 + 0.25 * k for k in range(1, 5)])  # the M/D^[1,4]/1 golden


def _window(q: BulkQueue) -> int:
    q._size  # (sets the decay root z0)
    return int(math.ceil(2 * q.b + 40 + 8.0 / math.log(q._z0)))


def test_capped_window_equals_the_full_window_past_6000_states() -> None:
    lim = BulkQueue(1.0, LAW).max_rate
    q = BulkQueue(0.9995 * lim, LAW)
    n = _window(q)
    assert 6000 < n < q._size  # the load main refused
    pi = q._pi_flags  # capped window (4b + 200 = 216 states)
    full = q.pi_window(n)  # 8 decay lengths, as below 6000 states (2.4 s)
    # tolerance: both are normalised π on the same states; the solves differ by round-off (~1e-12 measured)
    assert float(np.abs(pi - full).max()) < 1e-11
    assert pi.min() >= 0.0 and pi.sum() == pytest.approx(1.0, abs=1e-12)
    # throughput identity: completions × mean batch = λ (exact for any π that is stationary)
    assert q._cycle["throughput"] == pytest.approx(q.lam, rel=1e-9)


def test_mean_wait_grows_like_one_over_one_minus_load() -> None:
    # heavy-traffic limit: (1 − ρ) W tends to a constant; measured 0.1479, 0.1496, 0.1498, 0.1499 at
    # 0.99, 0.998, 0.999, 0.9995 (the last past the old cap). 5e-4: the O(1 − ρ) correction at 0.999.
    lim = BulkQueue(1.0, LAW).max_rate
    w = {f: (1 - f) * BulkQueue(f * lim, LAW).mean_wait_s for f in (0.999, 0.9995)}
    assert w[0.9995] == pytest.approx(w[0.999], abs=5e-4)
    assert all(math.isfinite(v) and v > 0 for v in w.values())
