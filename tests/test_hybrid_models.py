"""Hybrid linear-attention / state-space models (qmodel.recurrent): Qwen3-Next, Qwen3.5, Nemotron-H.

Exact values are hand counts from the Hugging Face config.json numbers in the catalog entries
(catalog/models/qwen.toml, nemotron.toml); step-time checks compare a hybrid model with the same
model whose recurrent layers are entered as full attention (same weights, same step formulas).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from qmodel.build import resolve
from qmodel.perf.memory import DEFAULT_RESERVE_BYTES, memory_budget
from qmodel.perf.roofline import RooflineModel
from qmodel.registry import load_catalog
from qmodel.scenario import parse_scenario
from qmodel.solver import Solver
from qmodel.specs import ModelSpec

HYBRID = ["qwen3-next-80b-a3b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b",
          "nemotron-h-56b", "nemotron-3-nano-30b-a3b"]


def model(name: str) -> ModelSpec:
    return load_catalog().model(name)


def as_full_attention(m: ModelSpec) -> ModelSpec:
    """The same model with every layer full attention: same stored weights, KV in all layers, no state."""
    return m.model_copy(update={"recurrent": None})


# ---- state bytes, KV bytes, FLOPs: exact hand counts -------------------------------------------

def test_qwen35_27b_state_bytes_by_hand():
    # 48 Gated DeltaNet layers; per layer: 48 value heads x 128 (v) x 128 (k) fp32 (mamba_ssm_dtype)
    # + conv state (4 - 1) x (48*128 + 2*16*128 = 10240 channels) bf16
    per_layer = 48 * 128 * 128 * 4 + 3 * 10240 * 2
    assert per_layer == 3_207_168
    assert model("qwen3.5-27b").state_bytes_per_sequence() == 48 * per_layer == 153_944_064


def test_qwen3_next_state_bytes_by_hand():
    # 36 of 48 layers; 32 value heads x 128 x 128 at bf16 (no mamba_ssm_dtype); conv 3 x (4096 + 4096) bf16
    assert model("qwen3-next-80b-a3b").state_bytes_per_sequence() == 36 * (32 * 128 * 128 * 2 + 3 * 8192 * 2)


def test_nemotron_h_56b_state_bytes_by_hand():
    # 54 Mamba-2 layers; 256 heads x 64 head dim x 256 state at bf16; conv 3 x (256*64 + 2*8*256 = 20480) bf16
    per_layer = 256 * 64 * 256 * 2 + 3 * 20480 * 2
    assert model("nemotron-h-56b").state_bytes_per_sequence() == 54 * per_layer == 459_620_352


@pytest.mark.parametrize("context", [0, 1, 1000, 262144])
def test_kv_bytes_are_attention_layers_per_token_plus_constant_state(context):
    m = model("qwen3.5-27b")
    per_token = 16 * 2 * 4 * 256 * 2  # 16 full-attention layers x K,V x 4 KV heads x 256 x bf16
    assert m.kv_bytes_per_token() == per_token == 65536
    assert m.kv_bytes(context) == per_token * context + 153_944_064
    n = model("nemotron-h-56b")
    assert n.kv_bytes(context) == 10 * 2 * 8 * 128 * 2 * context + 459_620_352


def test_state_does_not_follow_the_kv_dtype():
    # an fp8 KV cache halves the attention KV; the recurrent state keeps its own dtype
    m = model("qwen3.5-27b")
    assert m.kv_bytes(1000, "fp8") == 32768 * 1000 + 153_944_064


def test_recurrent_flops_per_token_by_hand():
    # Gated DeltaNet: 7 FLOPs per state element (S k, decay, rank-1 update, S q) + 2 k per conv channel
    assert model("qwen3.5-27b").recurrent_flops_per_token() == 48 * (7 * 48 * 128 * 128 + 2 * 4 * 10240)
    # Mamba-2: 5 per state element (decay, rank-1 update, S C) + conv
    assert model("nemotron-h-56b").recurrent_flops_per_token() == 54 * (5 * 256 * 64 * 256 + 2 * 4 * 20480)
    # attention FLOPs per (query, key) pair count the attention layers only
    assert model("qwen3.5-27b").attention_flops_per_token_pair() == 4 * 24 * 256 * 16
    assert model("nemotron-h-56b").attention_flops_per_token_pair() == 4 * 64 * 128 * 10


def test_qwen3_next_parameter_count_by_hand():
    h, v = 2048, 151936
    gdn = h * (2 * 16 * 128 + 2 * 32 * 128 + 2 * 32) + 8192 * 4 + 2 * 32 + 128 + 32 * 128 * h
    attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h  # q_proj doubled by the output gate
    moe = (512 + 1) * 3 * h * 512 + h * 512  # routed + shared experts, router
    total = 2 * v * h + h + 48 * 2 * h + 36 * gdn + 12 * attn + 48 * moe
    m = model("qwen3-next-80b-a3b")
    assert m.total_params == total
    assert m.active_params == total - 48 * (512 - 10) * 3 * h * 512
    # the model card: "80B total parameters"; count_params leaves out q/k norms and the shared-expert gate
    assert m.total_params == pytest.approx(80e9, rel=0.005)


def test_nemotron_h_56b_parameter_count_by_hand():
    h = 8192
    mamba = h * (2 * 256 * 64 + 2 * 8 * 256 + 256) + 20480 * 5 + 3 * 256 + 256 * 64 + 256 * 64 * h
    attn = 2 * h * 64 * 128 + 2 * h * 8 * 128
    ffn = 2 * h * 32768  # relu2: up and down only
    total = 2 * 131072 * h + h + 64 * 2 * h + 54 * mamba + 10 * attn + 54 * ffn
    assert model("nemotron-h-56b").total_params == total
    assert total == pytest.approx(56e9, rel=0.01)  # the model's name


@pytest.mark.parametrize("name, published", [("qwen3.5-27b", 27e9), ("qwen3.5-35b-a3b", 35e9),
                                             ("qwen3.5-122b-a10b", 122e9), ("qwen3.5-397b-a17b", 397e9),
                                             ("nemotron-3-nano-30b-a3b", 31.6e9)])
def test_totals_match_the_names_within_the_uncounted_towers(name, published):
    # Qwen3.5 names count the vision tower and MTP layer (not modelled: under 2%); Nemotron 3 Nano's
    # model card gives 31.6B total.
    assert model(name).total_params == pytest.approx(published, rel=0.02)


# ---- validation: one clear message --------------------------------------------------------------

BASE = dict(name="x", source="test", layers=8, hidden_size=1024, num_heads=8, num_kv_heads=2, head_dim=128,
            ffn_size=4096, vocab_size=32000, attention="gqa", max_context_tokens=4096)
REC = dict(kind="gated_deltanet", layers=6, num_heads=8, head_dim=64, state_dim=64, num_groups=4, conv_kernel=4)


@pytest.mark.parametrize("update, message", [
    ({"recurrent": {**REC, "layers": 8}}, "leaves no attention layer"),
    ({"recurrent": {**REC, "num_heads": 6}}, "not a multiple of num_groups"),
    ({"recurrent": {**REC, "kind": "rwkv"}}, "gated_deltanet"),
    ({"recurrent": REC, "sliding_window_tokens": 512, "sliding_window_layers": 3}, "exceeds the attention layers"),
    ({"ffn_layers": 9}, "ffn_layers 9 exceeds layers 8"),
    ({"ffn_layers": 2, "moe": {"num_experts": 8, "active_experts": 2, "expert_ffn_size": 512, "dense_layers": 3}},
     "exceeds the 2 FFN layers"),
])
def test_impossible_combinations_are_refused(update, message):
    with pytest.raises(ValidationError, match=message):
        ModelSpec.model_validate({**BASE, **update})


def test_existing_entries_dump_without_the_hybrid_fields():
    # so every earlier model serializes, and fingerprints, as before the fields existed
    d = model("llama-3.1-8b").model_dump()
    assert not {"recurrent", "ffn_layers", "attn_output_gate"} & set(d)
    assert {"recurrent", "attn_output_gate"} <= set(model("qwen3.5-27b").model_dump())


# ---- step times: the state read is O(1) in the context --------------------------------------------

@pytest.mark.parametrize("curves", ["catalog", None])
def test_decode_context_slope_is_the_attention_layers_share(curves):
    m = model("qwen3.5-27b")
    gpu = load_catalog().gpu("h200-sxm")
    hy, full = RooflineModel(m, gpu, tp=2, curves=curves), RooflineModel(as_full_attention(m), gpu, tp=2, curves=curves)
    n, s0, s1 = 32.0, 32 * 2000.0, 32 * 64000.0
    if curves is None:  # constants mode: max(compute, memory); at this batch the memory side binds
        assert hy.decode_breakdown(n, s1)["memory_s"] > hy.decode_breakdown(n, s1)["compute_s"]
    slope_hy = hy.decode_step_time_s(n, s1) - hy.decode_step_time_s(n, s0)
    slope_full = full.decode_step_time_s(n, s1) - full.decode_step_time_s(n, s0)
    # KV grows in 16 of 64 layers: exactly a quarter of the full-attention growth
    assert slope_hy == pytest.approx(slope_full * 16 / 64, rel=1e-9)
    # the state read + written per step is the same at any context and makes long contexts cheaper
    assert hy.decode_step_time_s(n, s1) < full.decode_step_time_s(n, s1)


def test_decode_state_term_by_hand():
    # constants mode: memory = weights + KV + n x 2 x state / tp, over B x mbu
    m = model("qwen3.5-27b")
    gpu = load_catalog().gpu("h200-sxm")
    r = RooflineModel(m, gpu, tp=2, curves=None)
    full = RooflineModel(as_full_attention(m), gpu, tp=2, curves=None)
    n = 8.0
    extra = r.decode_breakdown(n, 0.0)["memory_s"] - full.decode_breakdown(n, 0.0)["memory_s"]
    assert extra == pytest.approx(n * 2 * 153_944_064 / 2 / (gpu.memory_bandwidth_bytes_per_s * 0.75), rel=1e-12)
    assert r.kv_bytes_read(4, 9000) == 65536 * 9000 + 4 * 153_944_064


def test_prefill_has_no_quadratic_term_in_the_recurrent_layers():
    m = model("qwen3-next-80b-a3b")
    gpu = load_catalog().gpu("h200-sxm")
    hy, full = RooflineModel(m, gpu, tp=2), RooflineModel(as_full_attention(m), gpu, tp=2)

    def quad(r: RooflineModel, t: float) -> float:  # the T^2 part of one prompt's prefill attention
        return float(r.prefill_breakdown(t, t * t)["attention_s"] - r.prefill_breakdown(t, 0.0)["attention_s"])
    assert quad(hy, 32768.0) == pytest.approx(quad(full, 32768.0) * 12 / 48, rel=1e-12)


# ---- memory and the link -------------------------------------------------------------------------

def test_kv_pool_sets_aside_the_state_of_max_batch_sequences():
    m, gpu = model("qwen3.5-27b"), load_catalog().gpu("h200-sxm")
    plain = memory_budget(m, gpu, tp=2, memory_fraction=0.9)
    held = memory_budget(m, gpu, tp=2, memory_fraction=0.9, state_sequences=256)
    free = gpu.memory_bytes - m.weight_bytes() / 2 - DEFAULT_RESERVE_BYTES
    assert plain.kv_bytes_per_gpu == 0.9 * free
    assert held.kv_bytes_per_gpu == pytest.approx(0.9 * free - 256 * 153_944_064 / 2, rel=1e-12)
    assert held.kv_capacity_tokens == math.floor(held.kv_bytes_per_gpu / (65536 / 2))  # KV heads split over tp 2


def test_state_that_leaves_no_room_names_max_batch():
    from qmodel.errors import InputError
    with pytest.raises(InputError, match="max_batch.*recurrent state of 256 sequences"):
        memory_budget(model("nemotron-h-56b"), load_catalog().gpu("h100-sxm"), tp=2, memory_fraction=0.9,
                      state_sequences=256)


def _scenario(name: str, gpu: str, tp: int, topology: str = "colocated") -> dict:
    pool = {"gpu": gpu, "tp": tp, "instances": 1}
    dep = ({"topology": "colocated", "pool": {**pool, "max_batch": 64}} if topology == "colocated" else
           {"topology": "disaggregated", "prefill": pool, "decode": {**pool, "max_batch": 64}, "link": "400 Gbps"})
    return {"name": f"hybrid-{name}", "model": name,
            "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 0.5},
                         "lengths": {"kind": "fixed", "prompt_tokens": 2000, "output_tokens": 200}},
            "slo": {"ttft_s": "2 s", "tpot_s": "100 ms", "attainment_goal": 0.9},
            "deployment": dep, "perf": {"kind": "roofline"}}


def test_disaggregated_link_moves_the_state_once_per_request():
    sc = parse_scenario(_scenario("qwen3.5-35b-a3b", "h200-sxm", 1, "disaggregated"))
    st = Solver(sc).station("kv_transfer")
    assert np.all(st.x == 20480 * 2000 + 64_389_120)
    assert model("qwen3.5-35b-a3b").state_bytes_per_sequence() == 30 * (32 * 128 * 128 * 4 + 3 * 8192 * 2) == 64_389_120


@pytest.mark.parametrize("name, gpu, tp", [("qwen3-next-80b-a3b", "h200-sxm", 2), ("qwen3.5-27b", "h200-sxm", 1),
                                           ("qwen3.5-35b-a3b", "h200-sxm", 1), ("qwen3.5-122b-a10b", "h200-sxm", 4),
                                           ("qwen3.5-397b-a17b", "h200-sxm", 8), ("nemotron-h-56b", "h200-sxm", 2),
                                           ("nemotron-3-nano-30b-a3b", "h200-sxm", 1)])
def test_every_hybrid_model_solves(name, gpu, tp):
    sc = parse_scenario(_scenario(name, gpu, tp))
    r = resolve(sc)
    m = model(name)
    assert r.pools["pool"].kv_capacity_tokens == memory_budget(
        m, load_catalog().gpu(gpu), tp=tp, memory_fraction=0.9, state_sequences=64).kv_capacity_tokens
    res = Solver(sc, r).solve()
    for dist in (res.ttft, res.tpot):
        assert all(math.isfinite(v) and v > 0 for v in (dist.mean, dist.p50, dist.p90, dist.p99))


def test_the_list_covers_every_catalog_hybrid():
    assert sorted(n for n, m in load_catalog().models.items() if m.recurrent is not None) == sorted(HYBRID)


def test_replay_moves_the_same_bytes_as_the_link_station():
    from qmodel.validation.replay import build_plan
    sc = parse_scenario(_scenario("qwen3.5-35b-a3b", "h200-sxm", 1, "disaggregated"))
    plan = build_plan(sc)
    st = Solver(sc).station("kv_transfer")
    assert plan.kv_bytes_per_token * 2000 + plan.state_bytes_per_request == st.x[0] == 20480 * 2000 + 64_389_120
