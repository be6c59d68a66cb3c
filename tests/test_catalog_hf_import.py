"""Hugging Face config.json import: real configs from the data folder, inline configs, bad input."""

from __future__ import annotations

import json

import pytest

from qmodel.errors import DataError
from qmodel.hf_import import config_to_entry, entry_to_toml, import_hf_config
from qmodel.registry import clear_cache, get_model
from qmodel.specs import ModelSpec

# catalog name -> config file under data/aiconfigurator/model_configs
REAL = {
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B_config.json",
    "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B_config.json",
    "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1_config.json",
    "qwen3-32b": "Qwen--Qwen3-32B_config.json",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B_config.json",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3_config.json",
    "gpt-oss-120b": "openai--gpt-oss-120b_config.json",
    "qwen3-vl-8b": "Qwen--Qwen3-VL-8B-Instruct_config.json",
    "qwen3-vl-30b-a3b": "Qwen--Qwen3-VL-30B-A3B-Instruct_config.json",
    "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8_config.json",
    "mimo-7b": "XiaomiMiMo--MiMo-7B-Base_config.json",
    "kimi-k2.5": "moonshotai--Kimi-K2.5_config.json",
    "kimi-k2.6-nvfp4": "nvidia--Kimi-K2.6-NVFP4_config.json",
}

_ARCH = ("layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size", "vocab_size", "attention",
         "mla", "moe", "sliding_window_tokens", "sliding_window_layers", "max_context_tokens", "dtype", "kv_dtype",
         "gated_ffn", "tie_word_embeddings", "expert_dtype", "total_params", "active_params")


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_configs_reproduce_catalog_entries(name, data_dir, tmp_path):
    path = data_dir / "aiconfigurator" / "model_configs" / REAL[name]
    written, spec = import_hf_config(path, f"imported-{name}", tmp_path)
    assert written == tmp_path / f"imported-{name}.toml"
    cat = get_model(name)
    for field in _ARCH:
        assert getattr(spec, field) == getattr(cat, field), (name, field)


def test_real_config_details(data_dir, tmp_path):
    mc = data_dir / "aiconfigurator" / "model_configs"
    _, ds = import_hf_config(mc / REAL["deepseek-v3"], "ds", tmp_path)
    assert ds.attention == "mla" and ds.mla.kv_lora_rank == 512 and ds.moe.dense_layers == 3
    assert ds.moe.shared_experts == 1 and ds.dtype == "fp8"
    _, oss = import_hf_config(mc / REAL["gpt-oss-120b"], "oss", tmp_path)
    assert (oss.sliding_window_tokens, oss.sliding_window_layers) == (128, 18)
    assert oss.expert_dtype == "mxfp4" and oss.dtype == "bf16"
    _, q = import_hf_config(mc / REAL["qwen3-32b"], "q", tmp_path)
    assert q.sliding_window_layers == 0  # Qwen ships sliding_window with use_sliding_window = false
    # a multimodal wrapper is read through its text_config
    _, vl = import_hf_config(mc / "Qwen--Qwen3-VL-8B-Instruct_config.json", "vl", tmp_path)
    assert (vl.layers, vl.hidden_size, vl.num_kv_heads) == (36, 4096, 8)


def test_imported_entry_is_loaded_from_user_catalog(data_dir, tmp_path, monkeypatch, capsys):
    from qmodel.cli.main import main

    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path))
    clear_cache()
    cfg = data_dir / "aiconfigurator" / "model_configs" / REAL["llama-3.1-8b"]
    assert main(["catalog", "import-hf", str(cfg), "--name", "my-llama"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "my-llama.toml").exists()
    assert get_model("my-llama").kv_bytes_per_token() == 131_072


INLINE = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
          "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048,
          "torch_dtype": "bfloat16"}


def test_inline_config_roundtrips_through_toml():
    import tomllib

    entry = config_to_entry(INLINE, "tiny", source="inline test")
    assert entry["attention"] == "gqa" and entry["head_dim"] == 32
    spec = ModelSpec.model_validate(tomllib.loads(entry_to_toml(entry))["model"][0])
    assert spec.kv_bytes_per_token() == 4 * 2 * 2 * 32 * 2
    assert spec.total_params == 2 * 1000 * 256 + 256 + 4 * (2 * 256 * 256 + 2 * 256 * 64 + 512 + 3 * 256 * 512)


def test_inline_mistral_window_and_opt():
    mistral = dict(INLINE, model_type="mistral", sliding_window=1024)
    e = config_to_entry(mistral, "m", source="t")
    assert (e["sliding_window_tokens"], e["sliding_window_layers"]) == (1024, 4)
    qwen_swa = dict(INLINE, model_type="qwen2", sliding_window=1024, use_sliding_window=True, max_window_layers=3)
    assert config_to_entry(qwen_swa, "q", source="t")["sliding_window_layers"] == 1
    opt = {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_dim": 256,
           "vocab_size": 100, "max_position_embeddings": 2048, "torch_dtype": "float16"}
    e = config_to_entry(opt, "o", source="t")
    assert e["attention"] == "mha" and e["gated_ffn"] is False and e["tie_word_embeddings"] is True
    assert e["kv_dtype"] == "fp16"


def test_missing_key_is_one_line_data_error():
    bad = {k: v for k, v in INLINE.items() if k != "num_hidden_layers"}
    with pytest.raises(DataError) as info:
        config_to_entry(bad, "x", source="t", origin="cfg.json")
    msg = str(info.value)
    assert "num_hidden_layers" in msg and "cfg.json" in msg and "\n" not in msg


def test_bad_values_and_types_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="positive integer"):
        config_to_entry(dict(INLINE, hidden_size="big"), "x", source="t")
    with pytest.raises(DataError, match="not supported"):
        config_to_entry(dict(INLINE, model_type="mamba"), "x", source="t")
    with pytest.raises(DataError, match="multiple"):
        config_to_entry(dict(INLINE, num_key_value_heads=3), "x", source="t")
    with pytest.raises(DataError, match="name"):
        config_to_entry(INLINE, "Bad Name", source="t")
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(DataError, match="JSON"):
        import_hf_config(p, "x", tmp_path)
    p.write_text(json.dumps([1, 2]))
    with pytest.raises(DataError, match="object"):
        import_hf_config(p, "x", tmp_path)
    with pytest.raises(DataError, match="not found"):
        import_hf_config(tmp_path / "missing.json", "x", tmp_path)


def test_cli_import_error_exits_2(tmp_path, capsys):
    from qmodel.cli.main import main

    p = tmp_path / "config.json"
    p.write_text(json.dumps({k: v for k, v in INLINE.items() if k != "vocab_size"}))
    assert main(["catalog", "import-hf", str(p), "--name", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "vocab_size" in err and err.count("\n") == 1


def _groups(*formats):
    return {"config_groups": {f"group_{i}": {"weights": {"num_bits": b, "type": t, "group_size": g}}
                              for i, (b, t, g) in enumerate(formats)}}


def test_quantization_config_groups():
    nvfp4 = dict(INLINE, quantization_config=_groups((4, "float", 16)))
    assert config_to_entry(nvfp4, "n", source="t")["dtype"] == "nvfp4"
    fp8 = dict(INLINE, quantization_config=_groups((8, "float", None)))
    assert config_to_entry(fp8, "f", source="t")["dtype"] == "fp8"
    mixed = dict(INLINE, quantization_config=_groups((4, "float", 16), (8, "float", None)))
    with pytest.raises(DataError, match="--dtype"):
        config_to_entry(mixed, "m", source="t")
    # an explicit dtype resolves it
    assert config_to_entry(mixed, "m", source="t", dtype="nvfp4", kv_dtype="fp8")["kv_dtype"] == "fp8"
    with pytest.raises(DataError, match="dtype"):
        config_to_entry(INLINE, "m", source="t", dtype="fp7x")


def test_experts_only_quantization():
    """An 'ignore' list leaving attention out (Kimi-K2.5's int4, NVIDIA's NVFP4 Kimi checkpoints) means
    only the routed experts carry the format: dtype stays the checkpoint's, expert_dtype is the format."""
    moe = dict(INLINE, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64)
    q = dict(_groups((4, "int", 32)), ignore=["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"])
    e = config_to_entry(dict(moe, quantization_config=q), "k", source="t")
    assert (e["dtype"], e["expert_dtype"]) == ("bf16", "int4")
    whole = config_to_entry(dict(moe, quantization_config=_groups((4, "int", 32))), "w", source="t")
    assert whole["dtype"] == "int4" and "expert_dtype" not in whole


def test_cli_import_dtype_override(tmp_path, capsys):
    from qmodel.cli.main import main

    p = tmp_path / "config.json"
    p.write_text(json.dumps(INLINE))
    rc = main(["catalog", "import-hf", str(p), "--name", "tiny-fp8", "--out", str(tmp_path), "--dtype", "fp8",
               "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["dtype"] == "fp8" and d["weight_bytes"] == d["total_params"]
    assert d["path"].endswith("tiny-fp8.toml")


@pytest.mark.parametrize("name_or_path, expected", [
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
    ("/data/ckpt/llama-8b", None),        # the local folder the checkpoint was saved from
    ("./out", None), ("llama", None), ("", None), (None, None), ("a/b/c", None),
])
def test_name_or_path_is_an_hf_id_only_when_it_is_a_repo_id(name_or_path, expected, tmp_path):
    """Without --hf-id, the id comes from ``_name_or_path`` only when it reads as ``org/name``:
    a local path recorded as an id would print ``vllm serve /data/ckpt/...`` for a Hub model."""
    cfg = dict(INLINE, _name_or_path=name_or_path) if name_or_path is not None else dict(INLINE)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    _, spec = import_hf_config(p, "tiny", tmp_path / "cat")
    assert spec.hf_id == expected


def test_serving_config_without_hf_id_says_so(repo_root):
    """A model with no hf_id gets a placeholder in the ``vllm serve`` line and a note, not its
    catalog name passed off as a Hugging Face id (opt-175b's weights were never on the Hub)."""
    from qmodel.planner.export import serving_config
    from qmodel.planner.plan_result import PlanRow, PoolOut
    from qmodel.scenario import load_scenario

    sc = load_scenario(repo_root / "examples/opt13b-colocated-a100.yaml")
    pool = PoolOut(gpu="a100-80gb-sxm", tp=8, instances=1, gpus=8)
    row = PlanRow(rank=1, topology="colocated", label="x", prefill=None, decode=pool, gpus=8, power_w=3200.0,
                  cost_per_hour=None, goodput_rps=1.0, goodput_per_gpu=0.125, rate_per_s=1.0, attainment=0.9,
                  ttft_p90_s=1.0, tpot_p90_s=0.1, max_stable_rate_per_s=2.0, binding="b", validity="v")
    cfg = serving_config(sc.model_copy(update={"model": "opt-175b"}), row)
    assert cfg["model"] == "<hf-repo-id-of-opt-175b>"
    assert "vllm serve '<hf-repo-id-of-opt-175b>'" in cfg["vllm"][0]["command"]
    assert any("has no hf_id" in n for n in cfg["notes"])
    named = serving_config(sc, row)  # opt-13b has one
    assert named["model"] == "facebook/opt-13b" and not any("hf_id" in n for n in named["notes"])
