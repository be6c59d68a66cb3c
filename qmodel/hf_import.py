"""Convert a Hugging Face ``config.json`` into a catalog ``[[model]]`` entry.

Supported families (``model_type``): Llama/Mistral/Qwen2/Qwen3 dense GQA, Mixtral and Qwen MoE,
DeepSeek-V2/V3 and Kimi-K2 (MLA + MoE), gpt-oss (alternating sliding-window attention, MoE with
mxfp4 experts), OPT and BLOOM (MHA with a two-matrix FFN). Multimodal configs are read through
their ``text_config``. Anything else is refused with one line naming the supported types, rather
than guessed: a wrong layer layout would silently give wrong KV and weight bytes.

Parameter counts are not read from the config (it has none); :class:`~qmodel.specs.ModelSpec`
computes them from the architecture with :func:`~qmodel.specs.count_params`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qmodel.errors import DataError
from qmodel.specs import ModelSpec
from qmodel.toml_out import toml_value

__all__ = ["SUPPORTED_MODEL_TYPES", "config_to_entry", "entry_to_toml", "import_hf_config", "read_config", "repo_id_or_none"]

_DENSE_GQA = {"llama", "mistral", "qwen2", "qwen3", "qwen3_vl_text", "mimo"}
_MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3_vl_moe_text", "gpt_oss"}
_MLA = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
_UNGATED = {"opt", "bloom"}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_DENSE_GQA | _MOE | _MLA | _UNGATED))

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def read_config(path: str | Path) -> dict[str, Any]:
    """Read a config.json; unreadable or non-object files raise a one-line DataError."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(str(p), "file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(str(p), f"not a readable JSON config: {err}") from None
    if not isinstance(data, dict):
        raise DataError(str(p), "expected a JSON object (a Hugging Face config.json)")
    return data


class _Cfg:
    """Key lookup with one-line errors naming the config and the missing key."""

    def __init__(self, cfg: Mapping[str, Any], origin: str) -> None:
        self.cfg = cfg
        self.origin = origin

    def get(self, *keys: str, default: Any = None) -> Any:
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        return default

    def int(self, *keys: str, default: int | None = None, what: str = "") -> int:
        v = self.get(*keys)
        if v is None:
            if default is not None:
                return default
            raise DataError(self.origin, f"missing key {' or '.join(repr(k) for k in keys)}"
                                         f"{f' (needed for {what})' if what else ''}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v <= 0:
            raise DataError(self.origin, f"key {keys[0]!r} = {v!r}: expected a positive integer")
        return int(v)


def _dtype(c: _Cfg) -> tuple[str, str, str | None]:
    """(weight dtype, kv dtype, expert dtype) from torch_dtype and quantization_config."""
    torch = str(c.get("torch_dtype", "dtype", default="bfloat16")).lower()
    base = _TORCH_DTYPES.get(torch, "bf16")
    kv = "fp16" if base == "fp16" else "bf16"
    q = c.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower() if isinstance(q, Mapping) else ""
    if method == "fp8":
        return "fp8", kv, None
    if method == "mxfp4":
        # gpt-oss: only the MoE expert weights are mxfp4 (attention, router, embeddings stay bf16).
        return base, kv, "mxfp4"
    groups = q.get("config_groups") if isinstance(q, Mapping) else None
    if isinstance(groups, Mapping) and groups:
        # compressed-tensors / ModelOpt layout: one weight format per group of target modules.
        kinds = {_group_dtype(g.get("weights") if isinstance(g, Mapping) else None) for g in groups.values()}
        if len(kinds) == 1 and None not in kinds:
            # Attention left out of the quantised modules (compressed-tensors/ModelOpt 'ignore', as Kimi-K2.5
            # and NVIDIA's NVFP4 Kimi checkpoints do, with the shared experts and dense MLPs): only the routed
            # experts carry the format, the rest stays at the checkpoint dtype.
            ignore = q.get("ignore") if isinstance(q.get("ignore"), list) else []
            if any("self_attn" in str(i) for i in ignore):
                return base, kv, kinds.pop()
            return kinds.pop(), kv, None
        raise DataError(c.origin, f"quantization_config mixes weight formats {sorted(str(k) for k in kinds)}; "
                                  "pass the serving dtype explicitly (import-hf --dtype)")
    return base, kv, None


def _group_dtype(w: Any) -> str | None:
    """Weight dtype of one compressed-tensors group: 4-bit float with 16-element groups is NVFP4."""
    if not isinstance(w, Mapping):
        return None
    bits, kind, group = w.get("num_bits"), str(w.get("type", "")), w.get("group_size")
    if bits == 4 and kind == "float":
        return "nvfp4" if group == 16 else "mxfp4" if group == 32 else "fp4"
    if bits == 8 and kind == "float":
        return "fp8"
    if bits in (4, 8) and kind == "int":
        return f"int{bits}"
    return None


def _sliding(c: _Cfg, layers: int, max_ctx: int) -> tuple[int | None, int]:
    """(window tokens, number of window layers)."""
    window = c.get("sliding_window")
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        n = sum(1 for t in types if t == "sliding_attention")
        if n and not window:
            raise DataError(c.origin, "layer_types has sliding_attention layers but sliding_window is missing")
        return (int(window), n) if n else (None, 0)
    if not window:
        return None, 0
    use = c.get("use_sliding_window")
    if use is False:
        return None, 0  # Qwen2/3 ship a window value but keep it switched off
    if use is True:
        # Qwen2 convention: layers with index >= max_window_layers use the window.
        n = layers - c.int("max_window_layers", default=layers)
        return (int(window), n) if n > 0 else (None, 0)
    if int(window) >= max_ctx:
        return None, 0  # a window as long as the context never caps anything
    return int(window), layers  # Mistral-7B v0.1: every layer slides


def _moe(c: _Cfg, mtype: str, layers: int) -> dict[str, int] | None:
    experts = c.get("n_routed_experts", "num_local_experts", "num_experts")
    if not experts:
        if mtype in _MOE:
            raise DataError(c.origin, f"model_type {mtype!r} needs num_local_experts/num_experts")
        return None
    experts = c.int("n_routed_experts", "num_local_experts", "num_experts")
    active = c.int("num_experts_per_tok", "experts_per_token", what="routed experts per token")
    expert_ffn = c.int("moe_intermediate_size", "intermediate_size", what="expert FFN size")
    shared = int(c.get("n_shared_experts", default=0) or 0)
    shared_size = int(c.get("shared_expert_intermediate_size", default=0) or 0)
    if shared_size:
        # Qwen-MoE describes its shared expert by size; express it in routed-expert units.
        if shared_size % expert_ffn:
            raise DataError(c.origin, f"shared_expert_intermediate_size {shared_size} is not a multiple of "
                                      f"moe_intermediate_size {expert_ffn}")
        shared = shared_size // expert_ffn
    if c.get("first_k_dense_replace") is not None:
        dense = int(c.get("first_k_dense_replace"))
        if int(c.get("moe_layer_freq", default=1)) != 1:
            raise DataError(c.origin, "moe_layer_freq other than 1 is not supported")
    else:
        step = int(c.get("decoder_sparse_step", default=1) or 1)
        only = set(c.get("mlp_only_layers", default=[]) or [])
        moe_layers = sum(1 for i in range(layers) if (i + 1) % step == 0 and i not in only)
        dense = layers - moe_layers
    return {"num_experts": experts, "active_experts": active, "shared_experts": shared,
            "expert_ffn_size": expert_ffn, "dense_layers": dense}


def config_to_entry(config: Mapping[str, Any], name: str, *, source: str, hf_id: str | None = None,
                    origin: str = "config.json", dtype: str | None = None,
                    kv_dtype: str | None = None) -> dict[str, Any]:
    """A catalog ``[[model]]`` table (plain dict, no parameter counts) from a HF config dict.

    ``dtype``/``kv_dtype`` override what the config implies (checkpoints whose quantisation is
    described outside config.json, e.g. ModelOpt's hf_quant_config.json, look like bf16 here).
    The result is validated as a :class:`ModelSpec`; problems raise a one-line :class:`DataError`.
    """
    if not isinstance(config, Mapping):
        raise DataError(origin, "expected a JSON object (a Hugging Face config.json)")
    if isinstance(config.get("text_config"), Mapping):
        # Multimodal wrappers: the language model is the text_config; dtype and quantisation may sit outside.
        inner = dict(config["text_config"])
        for k in ("torch_dtype", "quantization_config"):
            if k not in inner and k in config:
                inner[k] = config[k]
        config = inner
    c = _Cfg(config, origin)
    mtype = str(c.get("model_type", default=""))
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise DataError(origin, f"model_type {mtype!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise DataError(origin, f"name {name!r}: use lower-case letters, digits, '.', '_' and '-'")

    layers = c.int("num_hidden_layers", "n_layer", "num_layers", what="layers")
    hidden = c.int("hidden_size", "n_embed", "n_embd", "d_model", what="hidden size")
    heads = c.int("num_attention_heads", "n_head", what="query heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    if hidden % heads and c.get("head_dim") is None:
        raise DataError(origin, f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}; give head_dim")
    head_dim = c.int("head_dim", default=hidden // heads)
    vocab = c.int("vocab_size", what="vocabulary size")
    gated = mtype not in _UNGATED
    # BLOOM has no FFN-size key: its MLP is 4 * hidden.
    ffn = c.int("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden if mtype == "bloom" else None,
                what="FFN size")
    # BLOOM uses ALiBi and publishes no position limit; it was trained at 2048 tokens.
    max_ctx = c.int("max_position_embeddings", "seq_length", "n_positions", "max_sequence_length",
                    default=2048 if mtype == "bloom" else None, what="max context")
    if dtype is not None:
        expert_dtype = None
        kv_default = "bf16"
    else:
        dtype, kv_default, expert_dtype = _dtype(c)
    kv_dtype = kv_dtype or kv_default
    tied = bool(c.get("tie_word_embeddings", default=mtype in _UNGATED))

    entry: dict[str, Any] = {"name": name}
    if hf_id:
        entry["hf_id"] = hf_id
    entry["source"] = source
    entry.update({"layers": layers, "hidden_size": hidden, "num_heads": heads, "num_kv_heads": kv_heads,
                  "head_dim": head_dim, "ffn_size": ffn, "vocab_size": vocab})
    mla = None
    if mtype in _MLA or c.get("kv_lora_rank"):
        qn = c.int("qk_nope_head_dim", what="MLA")
        qr = c.int("qk_rope_head_dim", what="MLA")
        mla = {"kv_lora_rank": c.int("kv_lora_rank", what="MLA"), "qk_rope_head_dim": qr, "qk_nope_head_dim": qn,
               "v_head_dim": c.int("v_head_dim", what="MLA")}
        if c.get("q_lora_rank"):
            mla["q_lora_rank"] = c.int("q_lora_rank")
        entry["head_dim"] = qn + qr  # the query/key head dim; the KV cache stores the latent instead
        entry["attention"] = "mla"
    else:
        entry["attention"] = "mha" if kv_heads == heads else ("mqa" if kv_heads == 1 else "gqa")
    window, window_layers = _sliding(c, layers, max_ctx)
    if window:
        entry["sliding_window_tokens"] = window
        entry["sliding_window_layers"] = window_layers
    entry["max_context_tokens"] = max_ctx
    entry["dtype"] = dtype
    entry["kv_dtype"] = kv_dtype
    if not gated:
        entry["gated_ffn"] = False
    if tied:
        entry["tie_word_embeddings"] = True
    moe = _moe(c, mtype, layers)
    if expert_dtype and moe:
        entry["expert_dtype"] = expert_dtype
    if mla:
        entry["mla"] = mla
    if moe:
        entry["moe"] = moe
    try:
        ModelSpec.model_validate(entry)
    except ValidationError as err:
        e = err.errors()[0]
        raise DataError(origin, f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}") from None
    return entry


def entry_to_toml(entry: Mapping[str, Any], table: str = "model") -> str:
    """One ``[[table]]`` with nested ``[table.sub]`` tables for dict values."""
    lines = [f"[[{table}]]"]
    subs = []
    for k, v in entry.items():
        if isinstance(v, Mapping):
            subs.append((k, v))
        elif v is not None:
            lines.append(f"{k} = {toml_value(v, k)}")
    for k, sub in subs:
        lines.append(f"[{table}.{k}]")
        lines.extend(f"{sk} = {toml_value(sv, f'{k}.{sk}')}" for sk, sv in sub.items() if sv is not None)
    return "\n".join(lines) + "\n"


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def repo_id_or_none(value: object) -> str | None:
    """``value`` when it is a Hugging Face repo id (``org/name``), else None.

    A config's ``_name_or_path`` is often the local folder the checkpoint was saved from
    (``/data/ckpt/llama``, ``./out``); recording that as an id would print a ``vllm serve`` line for a
    model that does not exist on the Hub.
    """
    if not isinstance(value, str) or not _REPO_ID.fullmatch(value) or Path(value).exists():
        return None
    return value


def import_hf_config(path: str | Path, name: str, out_dir: str | Path | None = None,
                     hf_id: str | None = None, dtype: str | None = None,
                     kv_dtype: str | None = None) -> tuple[Path, ModelSpec]:
    """Write ``<out_dir>/<name>.toml`` (default: the user catalog folder) from a config.json.

    Returns the written path and the validated spec (with computed parameter counts).
    """
    from qmodel.settings import user_catalog_dir

    cfg = read_config(path)
    hf_id = hf_id or repo_id_or_none(cfg.get("_name_or_path"))
    entry = config_to_entry(cfg, name, source=f"Hugging Face config.json imported from {Path(path).name}",
                            hf_id=hf_id, origin=str(path), dtype=dtype, kv_dtype=kv_dtype)
    out = Path(out_dir).expanduser() if out_dir else user_catalog_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{name}.toml"
        target.write_text("# written by 'qmodel catalog import-hf'\n" + entry_to_toml(entry), encoding="utf-8")
    except OSError as err:
        raise DataError(str(out), f"cannot write the catalog entry: {err.strerror or err}") from None
    return target, ModelSpec.model_validate(entry)
