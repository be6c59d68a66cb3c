"""KV capacity and weights per GPU against DistServe's max_num_tokens.csv and exact values."""

from __future__ import annotations

import csv

import pytest

from qmodel.errors import InputError
from qmodel.perf.memory import DEFAULT_RESERVE_BYTES, kv_capacity_tokens, memory_budget
from qmodel.registry import get_gpu, get_model


def test_budget_arithmetic_exact():
    # llama-3.1-8b bf16 on h100-sxm (80 GiB), tp=1: KV 131072 B/token, weights 16,060,522,496 B.
    m, g = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    b = memory_budget(m, g, 1, 1, memory_fraction=0.9)
    free = 80 * 2**30 - 16_060_522_496 - DEFAULT_RESERVE_BYTES
    assert b.weights_per_gpu_bytes == 16_060_522_496
    assert b.kv_bytes_per_token_per_gpu == 131_072
    assert b.kv_capacity_tokens == int(0.9 * free // 131_072)


def test_kv_shards_stop_at_kv_heads():
    # llama-3.1-70b has 8 KV heads: tp=8 -> KV/8 per GPU; tp=16 replicates each head twice -> still KV/8.
    m, g = get_model("llama-3.1-70b"), get_gpu("h100-sxm")
    assert memory_budget(m, g, 8).kv_bytes_per_token_per_gpu == pytest.approx(327_680 / 8)
    assert memory_budget(m, g, 16).kv_bytes_per_token_per_gpu == pytest.approx(327_680 / 8)
    # MLA latent is replicated on every TP rank: DeepSeek-V3 61*(512+64)*2 = 70,272 B per token on each GPU
    ds = get_model("deepseek-v3")
    assert memory_budget(ds, get_gpu("b200"), 8, 2).kv_bytes_per_token_per_gpu == pytest.approx(
        70_272 * 31 / 61)  # pp=2: busiest stage holds ceil(61/2) = 31 layers


def test_model_that_does_not_fit_is_one_line_error():
    with pytest.raises(InputError) as ei:
        kv_capacity_tokens(get_model("llama-3.1-70b"), get_gpu("a100-80gb-sxm"), 1, 1, 0.9,
                           field_prefix="deployment.decode")
    msg = str(ei.value)
    assert ei.value.field == "deployment.decode.tp"
    assert "\n" not in msg and "GB" in msg and "at least 2 GPUs" in msg


def test_distserve_max_num_tokens_agreement(data_dir):
    # Every OPT-13B/66B (tp, pp) row of DistServe's capacity table on A100-80GB, memory_fraction = 1
    # (DistServe gives all memory left after weights and workspace to KV) with the default 6 GiB
    # reserve: within 1% (the brief asks ~10%; 1% is what the chosen reserve achieves, so a
    # regression in weights/KV/sharding arithmetic shows up).
    gpu = get_gpu("a100-80gb-sxm")
    rows = list(csv.DictReader(open(data_dir / "distserve" / "max_num_tokens.csv")))
    checked = 0
    worst = 0.0
    for r in rows:
        name = r["model"].split("/")[-1]
        if name not in ("opt-13b", "opt-66b"):
            continue
        tokens = kv_capacity_tokens(get_model(name), gpu, int(r["tp"]), int(r["pp"]), memory_fraction=1.0)
        err = tokens / int(r["max_num_tokens"]) - 1
        worst = max(worst, abs(err))
        checked += 1
    assert checked == 48
    assert worst < 0.01, worst


def test_reserve_choice_is_the_tight_one(data_dir):
    # The tightest row (OPT-66B on 2 GPUs) moves by several percent if the reserve moves by 1/2 GiB.
    gpu, m = get_gpu("a100-80gb-sxm"), get_model("opt-66b")
    got = [kv_capacity_tokens(m, gpu, 2, 1, 1.0, reserve_bytes=r * 2**30) / 11600 - 1 for r in (5.5, 6.0, 6.5)]
    assert abs(got[1]) < 0.01 and abs(got[0]) > 0.02 and abs(got[2]) > 0.02


def test_bad_fraction():
    with pytest.raises(InputError, match="kv_memory_fraction"):
        memory_budget(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), 1, memory_fraction=0.0)


def test_fp8_deployment_stores_fp8_weights():
    from qmodel.perf.memory import weight_dtype_for

    m, g = get_model("llama-3.1-70b"), get_gpu("h100-sxm")
    assert weight_dtype_for(m, None) is None and weight_dtype_for(m, "bf16") is None
    assert weight_dtype_for(m, "fp8") == "fp8"
    bf16 = memory_budget(m, g, 4)
    fp8 = memory_budget(m, g, 4, dtype=weight_dtype_for(m, "fp8"))
    assert fp8.weights_per_gpu_bytes == pytest.approx(bf16.weights_per_gpu_bytes / 2, rel=1e-12)
    assert fp8.kv_capacity_tokens > bf16.kv_capacity_tokens
