"""Fixed service times: exact arithmetic, no batching gain, vectorisation, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from qmodel.errors import InputError
from qmodel.perf.service_time import service_model
from qmodel.perf.fixed import FixedModel
from qmodel.registry import get_gpu, get_model
from qmodel.scenario import FixedPerf


def test_prefill_is_k_times_one_request_and_decode_constant():
    m = FixedModel(prefill_s=0.05, decode_step_s=0.02)
    assert m.prefill_time_s(512, 512**2, 1) == 0.05
    assert m.prefill_time_s(4 * 512, 4 * 512**2, 4) == pytest.approx(0.20, abs=1e-15)  # no batching gain
    assert m.prefill_one_s(4096) == 0.05
    assert m.decode_step_time_s(1, 100) == 0.02
    assert m.decode_step_time_s(200, 10**6) == 0.02


def test_vectorised_shapes():
    m = FixedModel(prefill_s=0.05, decode_step_s=0.02)
    k = np.array([1, 2, 3])
    np.testing.assert_allclose(m.prefill_time_s(k * 100, k * 100**2, k), [0.05, 0.10, 0.15], rtol=1e-15)
    np.testing.assert_array_equal(m.decode_step_time_s(np.array([1, 5]), np.array([10, 20])), [0.02, 0.02])


def test_fingerprint_and_validation():
    assert FixedModel(0.05, 0.02).fingerprint == FixedModel(0.05, 0.02).fingerprint
    assert FixedModel(0.05, 0.02).fingerprint != FixedModel(0.05, 0.03).fingerprint
    with pytest.raises(InputError, match="perf.prefill_s"):
        FixedModel(0.0, 0.02)
    with pytest.raises(InputError, match="perf.decode_step_s"):
        FixedModel(0.05, float("nan"))


def test_built_from_scenario_and_still_checks_tp():
    m = service_model(FixedPerf(prefill_s="50 ms", decode_step_s="20 ms"), get_model("llama-3.1-8b"),
                      get_gpu("h100-sxm"), tp=1)
    assert m.prefill_time_s(10, 100, 2) == pytest.approx(0.1)
    with pytest.raises(InputError, match="deployment.decode.tp"):
        service_model(FixedPerf(prefill_s=0.05, decode_step_s=0.02), get_model("llama-3.1-8b"), get_gpu("h100-sxm"),
                      tp=5, field_prefix="deployment.decode")
