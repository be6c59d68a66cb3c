"""service_model(): every PerfModel kind, field prefixes in errors, scenario round trip."""

from __future__ import annotations

import pytest

from qmodel.errors import InputError
from qmodel.perf.service_time import service_model
from qmodel.perf.fixed import FixedModel
from qmodel.perf.roofline import RooflineModel
from qmodel.perf.tables import DistServeModel, SweepTableModel
from qmodel.registry import get_gpu, get_model
from qmodel.scenario import FixedPerf, RooflinePerf, TablePerf


def test_roofline_passes_every_factor():
    perf = RooflinePerf(mfu=0.4, mbu=0.6, prefill_overhead_s="5 ms", decode_overhead_s="2 ms",
                        comm_efficiency=0.8, attention_efficiency=0.5, prefill_per_request_s="1 ms")
    m = service_model(perf, get_model("llama-3.1-70b"), get_gpu("h100-sxm"), tp=4)
    assert isinstance(m, RooflineModel)
    want = {"mfu": 0.4, "mbu": 0.6, "prefill_overhead_s": 0.005, "decode_overhead_s": 0.002,
            "comm_efficiency": 0.8, "attention_efficiency": 0.5, "prefill_per_request_s": 0.001, "tp": 4, "pp": 1}
    got = m.params()
    assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-12)


def test_fixed_and_tables(data_dir):
    assert isinstance(service_model(FixedPerf(prefill_s=0.1, decode_step_s=0.01), get_model("opt-13b"),
                                    get_gpu("a100-80gb-sxm"), 1), FixedModel)
    t = service_model(TablePerf(path="data:distserve/profiler-a100-80g.distserve.json"), get_model("opt-13b"),
                      get_gpu("a100-80gb-sxm"), 2)
    assert isinstance(t, DistServeModel)
    s = service_model(TablePerf(path="data:splitwise_sim/perf_model.csv", format="splitwise"),
                      get_model("llama-2-70b"), get_gpu("a100-80gb-sxm"), 4)
    assert isinstance(s, SweepTableModel) and s.describe()["tp"] == 4


def test_field_prefix_names_the_pool():
    with pytest.raises(InputError) as ei:
        service_model(RooflinePerf(), get_model("llama-3.1-8b"), get_gpu("h100-sxm"), tp=3,
                      field_prefix="deployment.prefill")
    assert ei.value.field == "deployment.prefill.tp"
    assert str(ei.value).startswith("deployment.prefill.tp: 3 is not valid;")


def test_empty_batches_take_no_time(data_dir):
    import numpy as np

    h = get_gpu("a100-80gb-sxm")
    models = [service_model(RooflinePerf(), get_model("llama-2-70b"), h, 4),
              service_model(FixedPerf(prefill_s=0.1, decode_step_s=0.01), get_model("opt-13b"), h, 1),
              service_model(TablePerf(path="data:distserve/profiler-a100-80g.distserve.json"), get_model("opt-13b"), h, 1),
              service_model(TablePerf(path="data:splitwise_sim/perf_model.csv"), get_model("llama-2-70b"), h, 8)]
    for m in models:
        assert m.prefill_time_s(0, 0, 0) == 0.0
        assert m.decode_step_time_s(0, 0) == 0.0
        grid = m.decode_step_time_s(np.arange(3), np.arange(3) * 100)
        assert grid[0] == 0.0 and np.all(grid[1:] > 0)
