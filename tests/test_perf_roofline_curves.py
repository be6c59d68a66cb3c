"""The shared efficiency curves (catalog/efficiency.toml, qmodel.perf.efficiency) against measured kernels.

Each measured value below is one row of the AIConfigurator silicon database
(aiconfigurator-core 0.12.0, ``systems/data/h200_sxm/<op>/vllm/0.24.0``; NCCL 2.29.2), the
fastest kernel for that shape, in ms as stored. ``test_measured_points_are_the_database_rows``
re-reads them from the installed database when the optional extra is present (skips otherwise).

Tolerances: a curve is a 4-6 parameter fit over ~10^4 shapes per op, so a single shape sits
within roughly twice the fit's mean residual (GEMM 7%, attention 12-20%, all-reduce 10%, MoE 13%,
the ``mape`` fields in the catalog file); each tolerance below is that bound, stated per test.
"""

from __future__ import annotations

import pytest

from qmodel.errors import DataError
from qmodel.perf.efficiency import AllReduceCurve, EfficiencyCurves, Overrides, load_curves
from qmodel.perf.roofline import RooflineModel
from qmodel.registry import get_gpu, get_model, load_catalog

H200 = get_gpu("h200-sxm")

#: (op, shape, dtype) -> measured ms, from the AIC database rows named in the module docstring
MEASURED_MS = {
    ("gemm", (4096, 8192, 8192), "bf16"): 0.66402,   # M, N, K
    ("gemm", (1, 8192, 8192), "bf16"): 0.034925,
    ("gemm", (4096, 8192, 8192), "fp8"): 0.45330,
    ("gemm", (1, 8192, 8192), "fp8"): 0.022288,
    ("context_attention", (1, 4096, 32, 128), "bf16"): 0.26769,  # batch, isl, heads, head_dim (8 KV heads)
    ("generation_attention", (64, 4095, 8, 128), "bf16"): 0.27092,  # batch, context, KV heads, head_dim
    ("all_reduce", (8, 33554432), "fp16"): 0.31963,  # GPUs, fp16 elements
    ("moe", (2048, 2048, 768, 8, 128), "bf16"): 0.46158,  # tokens, hidden, inter, top-k, experts (TP 1)
    ("moe", (16, 2048, 768, 8, 128), "bf16"): 0.30521,  # balanced routing: 128 experts touched
    ("moe", (32, 2048, 768, 8, 128), "bf16"): 0.30514,
    ("moe", (1, 2048, 768, 8, 128), "bf16"): 0.040272,  # one token: exactly 8 experts, one row each
}
#: the same one-token row on A100 (a100_sxm/moe/vllm/0.14.0, kernel_source vllm_fused_moe: vLLM's Triton
#: fused MoE of that release; power_law_1.01 rows, the table has no balanced ones)
A100_MOE_ONE_TOKEN_MS = 0.061747


def _rel(pred_s: float, key: tuple) -> float:
    return float(pred_s) * 1e3 / MEASURED_MS[key] - 1.0


def _hopper(dtype: str = "bf16"):
    return load_curves().resolve(H200, dtype)


@pytest.mark.parametrize("shape,dtype,tol", [
    ((4096, 8192, 8192), "bf16", 0.15),  # compute-bound: e_peak; 2 x the bf16 fit's 7% residual
    ((1, 8192, 8192), "bf16", 0.15),     # weight-streaming bound: h_w + launch
    ((4096, 8192, 8192), "fp8", 0.30),   # fp8 fit residual is 13% (narrow shapes pull n_half up): 2 x 13%
    ((1, 8192, 8192), "fp8", 0.30),
])
def test_gemm_curve_matches_measured_kernel(shape, dtype, tol):
    r = _hopper(dtype)
    w = 2.0 if dtype == "bf16" else 1.0
    t = r.gemm.time_s(*shape, flops_per_s=H200.flops_per_s(dtype), bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s,
                      weight_byte=w)
    assert abs(_rel(t, ("gemm", shape, dtype))) < tol


def test_gemm_efficiency_ramps_then_saturates():
    """Achieved fraction of peak grows with M and levels off below 1; past ~10^4 tokens m_decline lowers
    it by a few percent (the database's 16k-32k GEMMs run at 0.67-0.76 of peak against 0.83 at 4k)."""
    g = _hopper().gemm
    f = H200.flops_per_s("bf16")
    eff = [2 * m * 8192 * 8192 / float(g.time_s(m, 8192, 8192, flops_per_s=f,
                                                bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s,
                                                weight_byte=2.0)) / f for m in (1, 16, 256, 4096, 16384)]
    assert eff[:4] == sorted(eff[:4]) and eff[0] < 0.01 and 0.6 < eff[3] < 0.9
    assert 0.9 * eff[3] < eff[4] <= eff[3]


def test_prefill_attention_curve_matches_measured_kernel():
    """FA3 causal prefill, 4096 tokens, 32 heads: within 2 x the 12% context-attention fit residual."""
    t = _hopper().attention.prefill_time_s(1, 4096, 32, 128, flops_per_s=H200.flops_per_s("bf16"))
    assert abs(_rel(t, ("context_attention", (1, 4096, 32, 128), "bf16"))) < 0.25


def test_decode_attention_curve_matches_measured_kernel():
    """64 sequences x 4095 tokens of bf16 KV, 8 KV heads: within 2 x the 20% generation-attention residual."""
    kv = 64 * 4095 * 2 * 8 * 128 * 2
    t = _hopper().attention.decode_time_s(kv, bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s)
    assert abs(_rel(t, ("generation_attention", (64, 4095, 8, 128), "bf16"))) < 0.40


def test_allreduce_curve_matches_nccl():
    """64 MiB fp16 all-reduce on 8 H200s (NVLink 4): within 2 x the 10% NCCL fit residual."""
    t = _hopper().allreduce.time_s(33554432 * 2, 8, link_bytes_per_s=H200.intra_node_bandwidth_bytes_per_s)
    assert abs(_rel(t, ("all_reduce", (8, 33554432), "fp16"))) < 0.20


def test_moe_curve_matches_measured_kernel():
    """Qwen3-30B-A3B's expert layer at 2048 tokens (16 per expert): within 2 x the 13% MoE fit residual."""
    r = _hopper()
    t = r.moe.time_s(r.gemm, 2048, 2048, 768, 8, 128, 1, flops_per_s=H200.flops_per_s("bf16"),
                     bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s, weight_byte=2.0)
    assert abs(_rel(t, ("moe", (2048, 2048, 768, 8, 128), "bf16"))) < 0.30


def test_moe_curve_counts_the_benchmarks_balanced_experts():
    """The MoE table routes round robin: 16 tokens x top-8 touch all 128 experts, as 32 tokens do
    (0.305 ms both), where uniform routing touches 82. Fitted with that count (min(E, T k)), the
    curve reads both within 2 x the 13% MoE residual; fitted with the uniform count (before) the
    16-token point was 25% low and the weight-streaming efficiency 0.82 instead of 0.87."""
    r = _hopper()
    for tokens in (16, 32):
        t = r.moe.time_s(r.gemm, tokens, 2048, 768, 8, 128, 1, flops_per_s=H200.flops_per_s("bf16"),
                         bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s, weight_byte=2.0, routing="balanced")
        assert abs(_rel(t, ("moe", (tokens, 2048, 768, 8, 128), "bf16"))) < 0.26
    uni = r.moe.time_s(r.gemm, 16, 2048, 768, 8, 128, 1, flops_per_s=H200.flops_per_s("bf16"),
                       bandwidth_bytes_per_s=H200.memory_bandwidth_bytes_per_s, weight_byte=2.0)
    assert 0.55 < float(uni) * 1e3 / MEASURED_MS[("moe", (16, 2048, 768, 8, 128), "bf16")] < 0.8  # 82 of 128 experts


def _moe_one_token_ms(gpu) -> float:
    r = _hopper()
    return float(r.moe.time_s(r.gemm, 1, 2048, 768, 8, 128, 1, flops_per_s=gpu.flops_per_s("bf16"),
                              bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s, weight_byte=2.0)) * 1e3


def test_moe_fixed_time_is_the_one_token_kernel():
    """Qwen3-30B-A3B's expert layer at one token (a decode step's MoE at batch 1): 8 experts' weights
    streamed plus the kernel's fixed time, which is measured on the one-token rows (their median over
    shapes and TP, 19-26 us per TP on a 40 us row, so 10%). The fixed time fitted jointly with the
    ramp (31 us) read this row +22%."""
    assert abs(_moe_one_token_ms(H200) / MEASURED_MS[("moe", (1, 2048, 768, 8, 128), "bf16")] - 1.0) < 0.10


def test_moe_fixed_time_transfers_to_the_same_kernel_on_a100():
    """The fixed time belongs to the kernel (vLLM's Triton fused MoE), not the GPU: hopper's curve on
    A100's own peaks reads A100's one-token row within 10% (the bound above); the jointly fitted
    31 us read it +19%."""
    assert abs(_moe_one_token_ms(get_gpu("a100-80gb-sxm")) / A100_MOE_ONE_TOKEN_MS - 1.0) < 0.10


def test_measured_points_are_the_database_rows():
    """The pinned values above are the installed database's rows (needs qmodel[aic])."""
    pytest.importorskip("aiconfigurator_core", reason="optional extra qmodel[aic] not installed")
    pytest.importorskip("pandas", reason="pandas comes with the aic extra")
    from qmodel.perf.efficiency_fit import latest_table

    g = latest_table("h200_sxm", "gemm")
    for (op, shape, dtype), ms in MEASURED_MS.items():
        if op != "gemm":
            continue
        m, n, k = shape
        rows = g[(g.gemm_dtype == {"bf16": "bfloat16", "fp8": "fp8"}[dtype]) & (g.m == m) & (g.n == n) & (g.k == k)]
        assert rows.latency.min() == pytest.approx(ms, rel=1e-4)
    moe = latest_table("h200_sxm", "moe")
    for (op, shape, dtype), ms in MEASURED_MS.items():
        if op != "moe":
            continue
        t, h, i, k, e = shape
        rows = moe[(moe.num_tokens == t) & (moe.hidden_size == h) & (moe.inter_size == i) & (moe.topk == k)
                   & (moe.num_experts == e) & (moe.moe_tp_size == 1) & (moe.moe_ep_size == 1)
                   & (moe.moe_dtype == "bfloat16") & (moe.distribution == "balanced")]
        assert rows.latency.min() == pytest.approx(ms, rel=1e-4)
    a100 = latest_table("a100_sxm", "moe")
    rows = a100[(a100.num_tokens == 1) & (a100.hidden_size == 2048) & (a100.inter_size == 768) & (a100.topk == 8)
                & (a100.num_experts == 128) & (a100.moe_tp_size == 1) & (a100.moe_ep_size == 1)
                & (a100.moe_dtype == "bfloat16")]
    assert rows.latency.min() == pytest.approx(A100_MOE_ONE_TOKEN_MS, rel=1e-4)
    nccl = latest_table("b200_sxm", "comm", backend="nccl")
    rows = nccl[(nccl.op_name == "all_reduce") & (nccl.nccl_dtype == "half") & (nccl.num_gpus == 4)
                & (nccl.message_size == 33554432)]
    assert rows.latency.min() == pytest.approx(B200_ALLREDUCE_4GPU_64MIB_MS, rel=1e-4)


# ---- the catalog file ----------------------------------------------------------------------
def test_every_catalog_architecture_resolves():
    """Every GPU in gpus.toml gets curves (its own, or its architecture's documented fallback) for bf16 and fp8."""
    cur = load_curves()
    for gpu in load_catalog().gpus.values():
        for dtype in ("bf16", "fp8"):
            r = cur.resolve(gpu, dtype)
            assert 0 < r.gemm.peak_efficiency <= 1 and r.overhead.prefill_s < 0.01
        assert gpu.architecture in cur.arch or "default" in cur.arch


def test_measured_architectures_have_their_own_gemm_curves():
    cur = load_curves()
    for arch in ("hopper", "blackwell", "ampere", "ada"):
        assert "bf16" in cur.arch[arch].gemm and cur.arch[arch].systems
    assert "fp4" in cur.arch["blackwell"].gemm and "fp8" in cur.arch["hopper"].gemm
    assert cur.arch["cdna3"].fallback == "hopper" and not cur.arch["cdna3"].gemm


#: B200's NCCL 2.29.2 all-reduce (aiconfigurator-core 0.12.0, b200_sxm/comm/nccl/2.29.2), 4 GPUs, 32 Mi fp16
#: elements (64 MiB): the fastest row, ms
B200_ALLREDUCE_4GPU_64MIB_MS = 0.18181


def test_unmeasured_architectures_take_the_median_allreduce():
    """An architecture without data borrows its fallback's kernels but the median all-reduce of every measured one.

    Left-one-out check on a measured point: B200's own NCCL row predicted without blackwell's data.
    Hopper's curve alone reads it 15% fast (hopper runs its links at 0.746, the other three at
    0.636-0.66); the median of hopper, ampere and ada is within 10% (the all-reduce fit's residual),
    as blackwell's own curve is (-1%).
    """
    from qmodel.perf.efficiency_fit import pooled_allreduce

    cur, b200 = load_curves(), get_gpu("b200")
    fitted = {a: {"gemm": {}, "allreduce": cur.arch[a].allreduce.model_dump()} for a in ("hopper", "ampere", "ada")}
    pooled = AllReduceCurve(**pooled_allreduce(fitted))
    nbytes = 33554432 * 2.0
    for curve, tol_lo, tol_hi in ((pooled, -0.10, 0.10), (cur.arch["hopper"].allreduce, -1.0, -0.10)):
        rel = float(curve.gpu_time_s(nbytes, 4, b200)) * 1e3 / B200_ALLREDUCE_4GPU_64MIB_MS - 1.0
        assert tol_lo < rel < tol_hi
    every = {a: {"gemm": {}, "allreduce": cur.arch[a].allreduce.model_dump()}
             for a in ("hopper", "blackwell", "ampere", "ada")}
    for arch in ("cdna3", "cdna4", "default"):  # the catalog file carries it (3 significant digits)
        assert cur.arch[arch].allreduce.efficiency == pytest.approx(pooled_allreduce(every)["efficiency"], rel=2e-3)
    assert cur.resolve(get_gpu("mi300x"), "bf16").allreduce == cur.arch["cdna3"].allreduce
    assert cur.resolve(get_gpu("mi300x"), "bf16").gemm == cur.arch["hopper"].gemm["bf16"]


def test_dtype_falls_back_along_the_chain():
    """Hopper has no FP4 units: an fp4 compute dtype runs at the FP8 rate on the FP8 curve."""
    r = load_curves().resolve(H200, "fp4")
    assert r.gemm_dtype == "fp8" and r.gemm == load_curves().arch["hopper"].gemm["fp8"]


def test_unknown_fallback_is_a_data_error():
    cur = EfficiencyCurves.from_mapping({"default": {"fallback": "nowhere"}})
    with pytest.raises(DataError, match="nowhere"):
        cur.resolve(H200, "bf16")


def test_overrides_replace_curve_numbers():
    """mfu replaces e_peak, mbu both HBM efficiencies, an overhead the whole per-step constant."""
    r = load_curves().resolve(H200, "bf16", Overrides(mfu=0.5, mbu=0.6, prefill_overhead_s=0.002))
    base = load_curves().resolve(H200, "bf16")
    assert r.gemm.peak_efficiency == 0.5 and r.gemm.m_half == base.gemm.m_half
    assert r.gemm.weight_hbm_efficiency == 0.6 and r.attention.decode_hbm_efficiency == 0.6
    assert r.overhead.prefill_s == 0.002 and r.overhead.prefill_per_layer_s == 0.0
    assert r.overhead.decode_s == base.overhead.decode_s


# ---- composed step times -----------------------------------------------------------------
#: AIC static estimates (vLLM 0.24.0, bf16): Llama-3.1-8B, one 512-token prompt, TP 1 -> ttft in ms
AIC_8B_512_MS = {"h100-sxm": 12.019, "h200-sxm": 11.482}


@pytest.mark.parametrize("gpu", sorted(AIC_8B_512_MS))
def test_curve_roofline_8b_prefill_512_near_measured(gpu):
    """The issue's headline point (12.0 ms measured, 24.3 ms from the constants roofline): within the 15% target."""
    rm = RooflineModel(get_model("llama-3.1-8b"), get_gpu(gpu), 1, curves=load_curves())
    ms = 1e3 * rm.prefill_time_s(512.0, 512.0 ** 2, 1.0)
    assert abs(ms / AIC_8B_512_MS[gpu] - 1.0) < 0.15


def test_curve_mode_scalar_equals_array():
    """The replay's scalar fast path evaluates the same expressions as the array path."""
    import numpy as np

    for name, tp in (("llama-3.1-70b", 4), ("qwen3-30b-a3b", 2)):
        rm = RooflineModel(get_model(name), H200, tp, curves=load_curves())
        t = np.array([1.0, 300.0, 5000.0])
        assert np.allclose(rm.prefill_time_s(t, t * t, np.ones(3)),
                           [rm.prefill_time_s(float(x), float(x * x), 1.0) for x in t], rtol=1e-12)
        assert np.allclose(rm.decode_step_time_s(t, t * 700.0),
                           [rm.decode_step_time_s(float(x), float(x * 700.0)) for x in t], rtol=1e-12)


def test_curve_roofline_vs_real_vllm_tpot(data_dir):
    """Real vLLM TPOT of Llama-3.1-70B FP8 on H100/H200 (aiconfigurator/silicon_sample.csv, agg mode,
    concurrency 4, pp 1, tp 1-8; 21 rows) vs the decode step at batch 4 and context isl + osl/2.
    Measured 2026-12-03: mean -9.5%, range -24%..+4% (the constants roofline: +18%, +1..+26%).
    The measured TPOT also carries the prefill stalls of aggregated serving, so the step reads low:
    bounds are mean -15%..0% and every row -30%..+15%."""
    import csv

    import numpy as np

    with open(data_dir / "aiconfigurator" / "silicon_sample.csv") as fh:
        rows = [r for r in csv.DictReader(fh)
                if r["model_path"] == "meta-llama/Llama-3.1-70B" and r["mode"] == "agg" and r["backend"] == "vllm"
                and r["pp_size"] == "1" and r["system"] in ("h100_sxm", "h200_sxm")
                and r["gemm_quant_mode"] == "fp8" and r["batch_size"] == "4"]
    assert len(rows) == 21
    errs = []
    for r in rows:
        gpu = get_gpu("h100-sxm" if r["system"] == "h100_sxm" else "h200-sxm")
        m = RooflineModel(get_model("llama-3.1-70b"), gpu, int(r["tp_size"]), compute_dtype="fp8", curves=load_curves())
        pred = m.decode_step_time_s(4, 4 * (int(r["isl"]) + int(r["osl"]) / 2))
        errs.append(pred / (float(r["silicon_tpot_ms"]) / 1e3) - 1)
    assert all(-0.30 <= e <= 0.15 for e in errs), errs
    assert -0.15 <= float(np.mean(errs)) <= 0.0


# ---- the scenario's perf block --------------------------------------------------------------
def test_scenario_default_is_curves_and_constants_reproduce_the_old_roofline():
    """perf: {kind: roofline} runs the curves; efficiency: constants is exactly the old default
    (Llama-3.1-8B, 512 tokens on H100: 24.25 ms = 10 ms overhead + the mfu-0.55 GEMMs)."""
    from qmodel.perf.service_time import service_model
    from qmodel.scenario import RooflinePerf

    l8, h100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    cur = service_model(RooflinePerf(), l8, h100, 1)
    old = service_model(RooflinePerf(efficiency="constants"), l8, h100, 1)
    assert cur.params()["efficiency"] == "curves hopper/bf16" and "efficiency" not in old.params()
    assert old.prefill_time_s(512.0, 512.0 ** 2, 1.0) == pytest.approx(
        RooflineModel(l8, h100, 1, curves=None, mfu=0.55, mbu=0.75, prefill_overhead_s=0.010).prefill_time_s(
            512.0, 512.0 ** 2, 1.0), rel=1e-12)
    assert 1e3 * old.prefill_time_s(512.0, 512.0 ** 2, 1.0) == pytest.approx(24.25, abs=0.01)
    assert cur.prefill_time_s(512.0, 512.0 ** 2, 1.0) < 0.6 * old.prefill_time_s(512.0, 512.0 ** 2, 1.0)


def test_scenario_override_replaces_the_curve_number():
    """An explicit mfu is the saturated GEMM efficiency: long prefills scale with 1/mfu, the rest stays."""
    from qmodel.perf.service_time import service_model
    from qmodel.scenario import RooflinePerf

    l8, h100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    base = service_model(RooflinePerf(), l8, h100, 1)
    half = service_model(RooflinePerf(mfu=0.5 * float(base.params()["mfu"])), l8, h100, 1)
    g_base = base.prefill_breakdown(8192.0, 8192.0 ** 2)["gemm_s"]
    g_half = half.prefill_breakdown(8192.0, 8192.0 ** 2)["gemm_s"]
    assert float(g_half) == pytest.approx(2.0 * float(g_base), rel=0.02)  # the LM head at M = 1 is memory-bound
    assert half.decode_step_time_s(1.0, 1000.0) == pytest.approx(base.decode_step_time_s(1.0, 1000.0), rel=1e-12)
