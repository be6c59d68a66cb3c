"""TP all-reduce on a PCIe server (no NVLink): ring over the GPU's link within its peer-to-peer group,
then a host fabric that all GPUs share (qmodel.perf.efficiency.allreduce_seconds_per_byte).

Measured values: AIConfigurator's silicon database (aiconfigurator-core 0.12.0), L40S server,
``l40s/comm/vllm/0.14.0/custom_allreduce_perf.parquet`` (vLLM's CUDA-graph custom all-reduce, the
kernel AIC's vLLM estimates compose) and ``l40s/comm/nccl/2.27.3/nccl_perf.parquet``, in ms as
stored, 4,194,304 fp16 elements (8 MiB). ``test_pinned_points_are_the_database_rows`` re-reads them
when the optional extra is installed (skips otherwise). Composed steps: AIC's static vLLM
estimates (benchmarks/_aic_points.py), seconds.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from qmodel.perf.efficiency import allreduce_seconds_per_byte, load_curves
from qmodel.perf.roofline import RooflineModel
from qmodel.registry import get_gpu, get_model

L40S = get_gpu("l40s")
MESSAGE = 4194304  # fp16 elements
#: GPUs -> measured ms: vLLM custom all-reduce (graph), NCCL all_reduce
CUSTOM_MS = {2: 0.449949, 4: 3.321839, 8: 8.167541}
NCCL_MS = {2: 0.42890, 4: 2.45880, 8: 9.98780}


def _l40s_allreduce_ms(n: int, gpu=L40S) -> float:
    ar = load_curves().resolve(gpu, "bf16").allreduce
    return float(ar.gpu_time_s(MESSAGE * 2, n, gpu)) * 1e3


@pytest.mark.parametrize("n", [2, 4, 8])
def test_allreduce_matches_vllm_custom_allreduce(n):
    """Within 15%: the host fabric is one figure fitted on these >= 1 MiB points (6.5% mean residual,
    so a point within about 2x), the 2-GPU ring's efficiency on NCCL's 2-GPU points (vLLM's kernel
    runs 5% slower there). The old single-efficiency ring (0.162 of the link, fitted over all n) missed
    by +268% (2 GPUs), -25% (4) and -65% (8)."""
    assert _l40s_allreduce_ms(n) / CUSTOM_MS[n] - 1 == pytest.approx(0, abs=0.15)


@pytest.mark.parametrize("n,tol", [(2, 0.10), (4, 0.35), (8, 0.35)])
def test_allreduce_against_nccl(n, tol):
    """NCCL on the same server: 2 GPUs within 10% (the ring efficiency is fitted on them); at 4 / 8
    GPUs NCCL runs 26% faster / 22% slower than vLLM's kernel (its own algorithm choice per size), so the
    one shared-fabric figure sits between the two measured implementations: within 35%."""
    assert abs(_l40s_allreduce_ms(n) / NCCL_MS[n] - 1) < tol


def test_bandwidth_falls_as_one_over_n_past_the_p2p_group():
    """Past the peer-to-peer pair the bus bandwidth is host / n: the measured 4 -> 8 GPU ratio of
    vLLM's kernel is 2.46 (8.17 / 3.32 ms), the model's 2(7)/2(3) = 2.33 (latency aside)."""
    per = allreduce_seconds_per_byte([2, 4, 8], link_bytes_per_s=31.5e9, efficiency=0.636,
                                     host_bytes_per_s=15.5e9, p2p_gpus=2)
    assert per[0] == pytest.approx(1 / (31.5e9 * 0.636))  # ring over the link: (2-1)/2 x 2
    assert per[1] == pytest.approx(6 / 15.5e9) and per[2] == pytest.approx(14 / 15.5e9)
    assert _l40s_allreduce_ms(8) / _l40s_allreduce_ms(4) == pytest.approx(8.167541 / 3.321839, rel=0.10)


def test_nvlink_gpus_keep_the_ring():
    """Without a peer-to-peer group (NVLink/NVSwitch) the host term is absent: the ring alone."""
    h100 = get_gpu("h100-sxm")
    assert h100.intra_node_p2p_gpus is None
    per = allreduce_seconds_per_byte(8, link_bytes_per_s=h100.intra_node_bandwidth_bytes_per_s, efficiency=0.75)
    assert float(per) == pytest.approx(2 * 7 / 8 / (h100.intra_node_bandwidth_bytes_per_s * 0.75))


def test_p2p_group_and_host_fabric_go_together():
    with pytest.raises(ValidationError, match="go together"):
        L40S.model_validate({**L40S.model_dump(), "intra_node_host_bandwidth_bytes_per_s": None})


@pytest.mark.parametrize("model,tp,batch,prompt,measured_s,tol", [
    # AIC vLLM static estimate, L40S; the old ring: +107% (8B TP2), -25% (70B TP4), -60% (70B TP8)
    ("llama-3.1-8b", 2, 1, 512, 0.036003439902679756, 0.15),
    ("llama-3.1-70b", 4, 1, 2048, 2.531992886334224, 0.15),
    ("llama-3.1-70b", 8, 1, 2048, 5.0350209557482355, 0.15),
])
def test_l40s_tp_prefill_step_matches_aic(model, tp, batch, prompt, measured_s, tol):
    """Whole prefill steps on L40S TP >= 2 within 15% (the issue's in-sample target); the cells'
    MAPE is in docs/step_times.md."""
    m = RooflineModel(get_model(model), L40S, tp)
    t = float(m.prefill_time_s(batch * prompt, batch * prompt * prompt, batch))
    assert abs(t / measured_s - 1) < tol


def test_pinned_points_are_the_database_rows():
    pytest.importorskip("aiconfigurator_core", reason="optional extra qmodel[aic] not installed")
    pytest.importorskip("pandas", reason="pandas comes with the aic extra")
    from qmodel.perf.efficiency_fit import fit_host_fabric, latest_table

    v = latest_table("l40s", "comm", backend="vllm", name="custom_allreduce_perf.parquet")
    v = v[(v.op_name == "all_reduce") & v.kernel_source.str.contains("graph") & (v.message_size == MESSAGE)]
    d = latest_table("l40s", "comm", backend="nccl")
    d = d[(d.op_name == "all_reduce") & (d.nccl_dtype == "half") & (d.message_size == MESSAGE)]
    for n, ms in CUSTOM_MS.items():
        assert v[v.num_gpus == n].latency.min() == pytest.approx(ms, rel=1e-4)
    for n, ms in NCCL_MS.items():
        assert d[d.num_gpus == n].latency.min() == pytest.approx(ms, rel=1e-4)
    fit = fit_host_fabric("l40s")
    assert fit is not None and fit["host_bytes_per_s"] == pytest.approx(L40S.intra_node_host_bandwidth_bytes_per_s,
                                                                         rel=0.01)
