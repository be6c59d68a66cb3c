"""Derived quantities of catalog models: KV bytes, parameter counts, weight bytes, schema strictness."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from qmodel.registry import get_model
from qmodel.specs import GPUSpec, LengthPreset, LinkSpec, ModelSpec, count_params

GiB = 2**30


# ---- KV cache: exact values -----------------------------------------------------------------

def test_kv_llama31_70b_bf16_exact():
    # 80 layers * 2 (K,V) * 8 KV heads * 128 head dim * 2 bytes
    assert get_model("llama-3.1-70b").kv_bytes_per_token() == 80 * 2 * 8 * 128 * 2 == 327_680


def test_kv_deepseek_v3_mla_exact():
    # MLA stores one latent (512) plus the decoupled RoPE key (64) per layer, no K/V factor 2.
    assert get_model("deepseek-v3").kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70_272


def test_kv_opt66b_512_tokens_is_distserve_figure():
    # DistServe (OSDI'24) quotes 1.125 GB of KV for one 512-token OPT-66B request (fp16): exact in GiB.
    assert get_model("opt-66b").kv_bytes(512) == 1.125 * GiB


def test_kv_three_bit_is_three_sixteenths_of_bf16():
    m = get_model("llama-3.1-8b")
    assert m.kv_bytes_per_token("3bit") == m.kv_bytes_per_token("bf16") * 3 / 16
    assert m.kv_bytes_per_token("int3") == m.kv_bytes_per_token("bf16") * 3 / 16
    assert m.kv_bytes(1000, "fp8") == m.kv_bytes(1000, "bf16") / 2


def test_kv_sliding_window_caps_gpt_oss_120b_at_32k():
    m = get_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # bytes per token per layer
    assert m.sliding_window_tokens == 128 and m.sliding_window_layers == 18
    # 18 full-attention layers hold all 32,768 tokens; 18 sliding layers hold only the last 128.
    assert m.kv_bytes(32_768) == per_layer * (18 * 32_768 + 18 * 128) == 1_212_678_144
    # Below the window every layer stores every token.
    assert m.kv_bytes(100) == 100 * m.kv_bytes_per_token()


def test_kv_sliding_window_caps_mistral_7b_at_32k():
    m = get_model("mistral-7b")
    assert m.sliding_window_tokens == 4096 and m.sliding_window_layers == 32
    assert m.kv_bytes(32_768) == 32 * 4096 * (2 * 8 * 128 * 2) == 0.5 * GiB
    assert m.kv_bytes(32_768) == m.kv_bytes(4096)
    assert m.kv_bytes(2000) == 2000 * m.kv_bytes_per_token()


def test_models_without_windows_grow_linearly():
    m = get_model("llama-3.1-70b")
    assert m.sliding_window_layers == 0
    assert m.kv_bytes(32_768) == 32_768 * 327_680


# ---- parameter counts ----------------------------------------------------------------------

@pytest.mark.parametrize("name,exact", [
    # Exact safetensors element counts shown on the Hugging Face model pages. These architectures
    # have no biases, so count_params must reproduce them to the parameter.
    ("llama-3.1-8b", 8_030_261_248),
    ("llama-3.1-70b", 70_553_706_496),
    ("llama-3.1-405b", 405_853_388_800),
    ("llama-2-7b", 6_738_415_616),
    ("mistral-7b", 7_241_732_096),
    ("mixtral-8x7b", 46_702_792_704),
])
def test_param_count_exact(name, exact):
    assert get_model(name).total_params == exact


@pytest.mark.parametrize("name,total,active", [
    # Published (model card / paper) figures, rounded by their authors to 2-4 significant digits.
    ("llama-3.1-8b", 8.03e9, None),
    ("llama-3.1-70b", 70.6e9, None),
    ("llama-3.2-1b", 1.24e9, None),
    ("llama-3.2-3b", 3.21e9, None),
    ("llama-2-13b", 13.0e9, None),
    ("llama-2-70b", 69.0e9, None),
    ("mixtral-8x7b", 46.7e9, 12.9e9),
    ("mixtral-8x22b", 141e9, 39e9),
    ("qwen2.5-7b", 7.61e9, None),
    ("qwen2.5-14b", 14.7e9, None),
    ("codellama-34b", 33.7e9, None),
    ("qwen2.5-32b", 32.5e9, None),
    ("qwen2.5-72b", 72.7e9, None),
    ("qwen3-8b", 8.2e9, None),
    ("qwen3-32b", 32.8e9, None),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),
    ("qwen3-235b-a22b", 235e9, 22e9),
    ("deepseek-v3", 671e9, 37e9),
    ("gpt-oss-120b", 116.83e9, None),
    ("gpt-oss-20b", 20.91e9, None),
    ("opt-13b", 13e9, None),
    ("opt-66b", 66e9, None),
    ("opt-175b", 175e9, None),
    ("bloom-176b", 176.2e9, None),
])
def test_param_count_matches_published_within_2pct(name, total, active):
    # 2%: count_params omits biases, learned positions and MTP heads (<0.2% each) and the
    # published figures are rounded; a wrong layer layout would be off by far more.
    m = get_model(name)
    assert m.total_params == pytest.approx(total, rel=0.02)
    if active is not None:
        assert m.active_params == pytest.approx(active, rel=0.02)


def test_gpt_oss_active_matches_model_card_convention():
    # The gpt-oss model card counts active parameters without the input embedding (5.13B / 3.61B);
    # that is exactly matmul_params_per_token.
    assert get_model("gpt-oss-120b").matmul_params_per_token == pytest.approx(5.13e9, rel=0.005)
    assert get_model("gpt-oss-20b").matmul_params_per_token == pytest.approx(3.61e9, rel=0.005)


def test_count_params_small_dense_by_hand():
    # h=8, H=2, K=1, d=4, F=16, V=10, L=2, gated, untied
    c = count_params(layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4, ffn_size=16,
                     vocab_size=10, gated_ffn=True, tie_word_embeddings=False)
    attn = 8 * 2 * 4 * 2 + 2 * 8 * 1 * 4
    per_layer = attn + 2 * 8 + 3 * 8 * 16
    assert c.total == 2 * 10 * 8 + 8 + 2 * per_layer
    assert c.active == c.total and c.routed_experts == 0


def test_count_params_moe_active_by_hand():
    from qmodel.specs import MoEConfig

    moe = MoEConfig(num_experts=4, active_experts=1, shared_experts=1, expert_ffn_size=6, dense_layers=1)
    c = count_params(layers=3, hidden_size=8, num_heads=2, num_kv_heads=2, head_dim=4, ffn_size=16,
                     vocab_size=10, moe=moe, tie_word_embeddings=True)
    expert = 3 * 8 * 6
    per_layer = 4 * 8 * 8 + 2 * 8
    total = 10 * 8 + 8 + 3 * per_layer + 1 * 3 * 8 * 16 + 2 * ((4 + 1) * expert + 8 * 4)
    assert c.total == total
    assert c.routed_experts == 2 * 4 * expert
    assert c.active == total - 2 * 3 * expert


def test_stored_counts_equal_architecture_counts():
    from qmodel.registry import load_catalog

    for m in load_catalog().models.values():
        c = m.param_counts()
        assert m.total_params == c.total and m.active_params == c.active, m.name


# ---- weights ---------------------------------------------------------------------------------

def test_weight_bytes_dense_exact():
    m = get_model("llama-3.1-8b")
    assert m.weight_bytes() == 2 * 8_030_261_248
    assert m.weight_bytes("fp8") == 8_030_261_248
    assert m.weight_bytes("int4") == 8_030_261_248 / 2


def test_weight_bytes_gpt_oss_mixed_precision():
    m = get_model("gpt-oss-120b")
    routed = m.param_counts().routed_experts
    assert routed == 36 * 128 * 3 * 2880 * 2880
    assert m.weight_bytes() == (m.total_params - routed) * 2 + routed * 4.25 / 8
    # about 65 GB: the size of the published mxfp4 checkpoint (2% band: biases/scales layout)
    assert m.weight_bytes() == pytest.approx(65.2e9, rel=0.02)
    # an explicit dtype overrides the mix
    assert m.weight_bytes("bf16") == 2 * m.total_params


def test_active_weight_bytes_exclude_input_embedding():
    m = get_model("llama-3.1-8b")
    assert m.active_weight_bytes() == 2 * (8_030_261_248 - 128_256 * 4096)
    tied = get_model("llama-3.2-1b")
    assert tied.tie_word_embeddings and tied.matmul_params_per_token == tied.active_params
    assert m.linear_flops_per_token() == 2 * m.matmul_params_per_token


def test_deepseek_v3_ships_fp8():
    m = get_model("deepseek-v3")
    assert m.dtype == "fp8" and m.weight_bytes() == m.total_params


# ---- schema strictness ------------------------------------------------------------------------

def _llama_like(**kw):
    base = dict(name="t", source="test", layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                ffn_size=16, vocab_size=10, attention="gqa", max_context_tokens=128)
    base.update(kw)
    return base


def test_schema_rejects_unknown_keys():
    with pytest.raises(ValidationError, match="extra"):
        ModelSpec.model_validate(_llama_like(num_layers=3))
    with pytest.raises(ValidationError, match="extra"):
        LinkSpec.model_validate(dict(name="x", kind="pcie", source="s", bandwidth_bytes_per_s="1 GB/s",
                                     latency_s=0, efficiency=1, speed=3))
    with pytest.raises(ValidationError, match="extra"):
        GPUSpec.model_validate(dict(name="g", vendor="nvidia", source="s", memory_bytes="1 GiB",
                                    memory_bandwidth_bytes_per_s="1 GB/s", bf16_flops_per_s=1,
                                    intra_node_bandwidth_bytes_per_s=1, tdp_watts=1, cores=5))


def test_schema_rejects_inconsistent_models():
    with pytest.raises(ValidationError, match="mla"):
        ModelSpec.model_validate(_llama_like(attention="mla"))
    with pytest.raises(ValidationError, match="multiple"):
        ModelSpec.model_validate(_llama_like(num_heads=3, num_kv_heads=2))
    with pytest.raises(ValidationError, match="expert_dtype"):
        ModelSpec.model_validate(_llama_like(expert_dtype="mxfp4"))
    with pytest.raises(ValidationError, match="kv_dtype"):
        ModelSpec.model_validate(_llama_like(kv_dtype="fp7.5x"))


def test_missing_counts_are_computed_and_given_counts_kept():
    computed = ModelSpec.model_validate(_llama_like())
    assert computed.total_params == computed.param_counts().total
    given = ModelSpec.model_validate(_llama_like(total_params=1e9, active_params=1e9))
    assert given.total_params == 1e9


def test_length_preset_rejects_min_above_max():
    with pytest.raises(ValidationError, match="exceeds"):
        LengthPreset(prompt_median_tokens=10, prompt_sigma=0, prompt_max_tokens=10, prompt_min_tokens=20,
                     output_median_tokens=1, output_sigma=0, output_max_tokens=1)


# ---- properties ------------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from qmodel.registry import load_catalog  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(data=st.data(), a=st.integers(0, 300_000), b=st.integers(0, 300_000),
       kv=st.sampled_from(["bf16", "fp8", "int4", "3bit"]))
def test_kv_bytes_monotone_and_bounded(data, a, b, kv):
    # Holding more context never needs less KV, and never more than every attention layer storing every
    # token plus the recurrent layers' constant state (0 for a model without them; hybrid models: qmodel.recurrent).
    # (Names are drawn inside the test so the isolated test catalog, not the developer's, is used.)
    m = get_model(data.draw(st.sampled_from(sorted(load_catalog().models))))
    lo, hi = sorted((a, b))
    state = m.state_bytes_per_sequence()
    assert m.kv_bytes(lo, kv) <= m.kv_bytes(hi, kv)
    assert m.kv_bytes(hi, kv) <= (hi * m.kv_bytes_per_token(kv) + state) * (1 + 1e-12)
    if not m.sliding_window_layers:
        assert m.kv_bytes(hi, kv) == pytest.approx(hi * m.kv_bytes_per_token(kv) + state, rel=1e-12)
