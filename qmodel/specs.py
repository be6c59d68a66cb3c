"""Catalog entries as frozen pydantic models: LLM architectures, GPUs, links, workload presets.

Files in ``catalog/`` (installed as ``qmodel.catalog``) hold the data; this module holds the
shapes and the derived quantities every other layer needs: weight bytes, KV bytes per token
(GQA, MLA latent, sliding-window caps, any KV dtype including sub-byte), the constant per-sequence
state of hybrid models' recurrent layers (:mod:`qmodel.recurrent`), FLOPs per token. Links live in
:mod:`qmodel.link_spec` (re-exported here).

Every entry carries ``source`` so each number can be traced to a config file or datasheet.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer, model_validator

from qmodel.frozen import Frozen
from qmodel.link_spec import (ANONYMOUS_LINK_EFFICIENCY, ANONYMOUS_LINK_LATENCY_S, LINK_BANDWIDTH_RANGE_BYTES_PER_S,
                               LinkSpec, anonymous_link, is_bandwidth_text)
from qmodel.recurrent import RecurrentConfig
from qmodel.units import Bytes, BytesPerSecond, FlopsPerSecond, Watts, dtype_bits

__all__ = [
    "Frozen",
    "MLAConfig",
    "MoEConfig",
    "RecurrentConfig",
    "ModelSpec",
    "GPUSpec",
    "LinkSpec",
    "ANONYMOUS_LINK_EFFICIENCY",
    "ANONYMOUS_LINK_LATENCY_S",
    "LINK_BANDWIDTH_RANGE_BYTES_PER_S",
    "anonymous_link",
    "is_bandwidth_text",
    "LengthPreset",
    "WorkloadPreset",
    "ParamCounts",
    "count_params",
]


class MLAConfig(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token per layer."""

    kv_lora_rank: int = Field(gt=0, description="latent (compressed KV) rank, e.g. 512")
    qk_rope_head_dim: int = Field(ge=0, description="decoupled RoPE key dim stored beside the latent, e.g. 64")
    qk_nope_head_dim: int = Field(ge=0, default=128)
    v_head_dim: int = Field(gt=0, default=128)
    q_lora_rank: int | None = Field(default=None, gt=0)


class MoEConfig(Frozen):
    """Mixture of experts. ``dense_layers`` are leading layers with a dense FFN (DeepSeek's first_k_dense_replace)."""

    num_experts: int = Field(gt=0)
    active_experts: int = Field(gt=0, description="routed experts per token (top-k)")
    shared_experts: int = Field(ge=0, default=0)
    expert_ffn_size: int = Field(gt=0, description="intermediate size of one expert")
    dense_layers: int = Field(ge=0, default=0)

    @model_validator(mode="after")
    def _check(self) -> "MoEConfig":
        if self.active_experts > self.num_experts:
            raise ValueError(f"active_experts {self.active_experts} exceeds num_experts {self.num_experts}")
        return self


class ParamCounts(NamedTuple):
    """Parameter (element) counts of a decoder-only transformer, from :func:`count_params`."""

    total: float
    active: float
    embedding: float  # the input token-embedding table (vocab * hidden)
    routed_experts: float  # all routed-expert weights (0 for dense models)
    active_routed_experts: float  # top-k routed-expert weights one token uses


def count_params(*, layers: int, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 ffn_size: int, vocab_size: int, mla: MLAConfig | None = None, moe: MoEConfig | None = None,
                 gated_ffn: bool = True, tie_word_embeddings: bool = False,
                 recurrent: RecurrentConfig | None = None, ffn_layers: int | None = None,
                 attn_output_gate: bool = False) -> ParamCounts:
    """Total and per-token active parameters of a decoder-only transformer from its architecture.

    With h = hidden, H = query heads, K = KV heads, d = head dim, F = FFN size, V = vocab, L = layers,
    m = 3 for a gated (SwiGLU) FFN and 2 otherwise::

        attention (GQA/MHA/MQA)  = h*H*d (Q) + 2*h*K*d (K, V) + H*d*h (O)
        attention (MLA)          = [h*r_q + r_q + r_q*H*(d_nope+d_rope)]  (or h*H*(d_nope+d_rope) without q-LoRA)
                                   + h*(r_kv + d_rope) + r_kv + r_kv*H*(d_nope + d_v) + H*d_v*h
        dense FFN                = m*h*F
        MoE FFN                  = (E + S)*m*h*F_e + h*E          (E routed, S shared experts, router)
        total = V*h*(1 if tied else 2) + h + L_att*attention + L_rec*recurrent + 2h*L
                + L_dense*dense + L_moe*MoE
        active = total - L_moe*(E - k)*m*h*F_e                    (k routed experts per token)

    Hybrid models: ``L_rec`` = ``recurrent.layers`` of the L layers hold a Gated DeltaNet or Mamba-2
    mixer (:meth:`RecurrentConfig.params_per_layer`), the other ``L_att`` attention; an output gate
    on attention (Qwen3-Next's ``attn_output_gate``) adds h*H*d to it. FFNs sit in ``ffn_layers``
    of the layers (default all; Nemotron-H has mixer blocks without one), of which the first
    ``dense_layers`` are dense and the rest MoE (``L_moe``).

    Norm weights (2h per layer plus the final h) are counted; bias vectors, learned position
    embeddings (OPT) and multi-token-prediction heads (DeepSeek-V3's extra layer) are not: each is
    below 0.2% of the total for every catalog model. ``active`` follows model cards (Mixtral 12.9e9,
    DeepSeek-V3 37e9, Qwen3 A3B/A22B): both embedding tables are included.
    """
    m = 3 if gated_ffn else 2
    if mla is not None:
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = hidden_size * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * num_heads * qk
        else:
            q = hidden_size * num_heads * qk
        kv = (hidden_size * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
              + mla.kv_lora_rank * num_heads * (mla.qk_nope_head_dim + mla.v_head_dim))
        attn = q + kv + num_heads * mla.v_head_dim * hidden_size
    else:
        attn = 2 * hidden_size * num_heads * head_dim + 2 * hidden_size * num_kv_heads * head_dim
    if attn_output_gate:
        attn += hidden_size * num_heads * head_dim
    rec_layers = recurrent.layers if recurrent is not None else 0
    mixers = (layers - rec_layers) * attn + (rec_layers * recurrent.params_per_layer(hidden_size) if recurrent else 0)
    embedding = float(vocab_size * hidden_size)
    total = embedding * (1 if tie_word_embeddings else 2) + hidden_size + layers * 2 * hidden_size + mixers
    ffns = layers if ffn_layers is None else ffn_layers
    routed = active_routed = 0.0
    if moe is None:
        total += ffns * m * hidden_size * ffn_size
    else:
        expert = m * hidden_size * moe.expert_ffn_size
        moe_layers = ffns - moe.dense_layers
        total += moe.dense_layers * m * hidden_size * ffn_size
        total += moe_layers * ((moe.num_experts + moe.shared_experts) * expert + hidden_size * moe.num_experts)
        routed = float(moe_layers * moe.num_experts * expert)
        active_routed = float(moe_layers * moe.active_experts * expert)
    active = total - routed + active_routed
    return ParamCounts(float(total), float(active), embedding, routed, active_routed)


_HYBRID_KEYS = ("recurrent", "ffn_layers", "attn_output_gate")
_ARCH_KEYS = ("layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size", "vocab_size")


class ModelSpec(Frozen):
    """An LLM architecture. Counts are plain integers; parameters are element counts (not bytes).

    ``total_params`` and ``active_params`` may be omitted in catalog files: they are then computed
    from the architecture by :func:`count_params` (the catalog relies on this, so every count is
    traceable to the config values beside it).
    """

    name: str
    hf_id: str | None = None
    source: str = Field(description="where the numbers come from (config.json path, paper)")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0, description="query heads")
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn_size: int = Field(gt=0, description="dense FFN intermediate size (MoE models: the dense layers' FFN)")
    vocab_size: int = Field(gt=0)
    attention: Literal["mha", "gqa", "mqa", "mla"]
    mla: MLAConfig | None = None
    moe: MoEConfig | None = None
    total_params: float = Field(gt=0)
    active_params: float = Field(gt=0, description="parameters touched per token (MoE: shared + top-k experts)")
    sliding_window_tokens: int | None = Field(default=None, gt=0)
    sliding_window_layers: int = Field(default=0, ge=0, description="layers that attend only within the window")
    max_context_tokens: int = Field(gt=0)
    dtype: str = Field(default="bf16", description="default weight dtype")
    kv_dtype: str = Field(default="bf16", description="default KV-cache dtype")
    gated_ffn: bool = Field(default=True, description="SwiGLU-style FFN with 3 matrices (False: 2, e.g. OPT/BLOOM)")
    tie_word_embeddings: bool = Field(default=False, description="LM head shares the input embedding table")
    expert_dtype: str | None = Field(default=None, description="routed-expert weight dtype when it differs from dtype "
                                     "(gpt-oss ships experts in mxfp4, the rest in bf16)")
    recurrent: RecurrentConfig | None = Field(default=None, description="hybrid models: the layers with a constant "
                                              "per-sequence state (Gated DeltaNet, Mamba-2) instead of attention")
    ffn_layers: int | None = Field(default=None, gt=0, description="layers with an FFN (default all)")
    attn_output_gate: bool = Field(default=False, description="attention output gate (Qwen3-Next): q_proj doubled")

    @model_validator(mode="before")
    @classmethod
    def _fill_param_counts(cls, data: Any) -> Any:
        # Compute missing counts from the architecture; leave validation of the fields themselves to pydantic.
        if not isinstance(data, dict) or ("total_params" in data and "active_params" in data):
            return data
        if not all(isinstance(data.get(k), int) and data[k] > 0 for k in _ARCH_KEYS):
            return data
        try:
            mla = MLAConfig.model_validate(data["mla"]) if data.get("mla") is not None else None
            moe = MoEConfig.model_validate(data["moe"]) if data.get("moe") is not None else None
            rec = RecurrentConfig.model_validate(data["recurrent"]) if data.get("recurrent") is not None else None
        except (ValueError, TypeError):
            return data  # the field validators report the problem with its location
        ffn_layers = data.get("ffn_layers")
        if ffn_layers is not None and not (isinstance(ffn_layers, int) and ffn_layers > 0):
            return data
        counts = count_params(**{k: data[k] for k in _ARCH_KEYS}, mla=mla, moe=moe,
                              gated_ffn=bool(data.get("gated_ffn", True)),
                              tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
                              recurrent=rec, ffn_layers=ffn_layers,
                              attn_output_gate=bool(data.get("attn_output_gate", False)))
        out = dict(data)
        out.setdefault("total_params", counts.total)
        out.setdefault("active_params", counts.active)
        return out

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.attention == "mla" and self.mla is None:
            raise ValueError("attention 'mla' needs an [mla] table (kv_lora_rank, qk_rope_head_dim)")
        if self.attention != "mla" and self.mla is not None:
            raise ValueError("an [mla] table is only valid with attention = 'mla'")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.recurrent is not None and self.recurrent.layers >= self.layers:
            raise ValueError(f"recurrent.layers {self.recurrent.layers} leaves no attention layer of {self.layers} "
                             "(KV capacity is counted in tokens of attention KV; a pure state-space model is not modelled)")
        if self.sliding_window_layers > self.attention_layers:
            raise ValueError("sliding_window_layers exceeds the attention layers (layers - recurrent.layers)")
        if self.ffn_layers is not None and self.ffn_layers > self.layers:
            raise ValueError(f"ffn_layers {self.ffn_layers} exceeds layers {self.layers}")
        if self.moe is not None and self.moe.dense_layers > self.ffn_layer_count:
            raise ValueError(f"moe.dense_layers {self.moe.dense_layers} exceeds the {self.ffn_layer_count} FFN layers")
        if self.sliding_window_layers and self.sliding_window_tokens is None:
            raise ValueError("sliding_window_layers needs sliding_window_tokens")
        if self.active_params > self.total_params * 1.0001:
            raise ValueError("active_params exceeds total_params")
        if self.expert_dtype is not None and self.moe is None:
            raise ValueError("expert_dtype is only valid with a [moe] table")
        dtype_bits(self.dtype, "dtype")
        dtype_bits(self.kv_dtype, "kv_dtype")
        if self.expert_dtype is not None:
            dtype_bits(self.expert_dtype, "expert_dtype")
        return self

    @model_serializer(mode="wrap")
    def _omit_hybrid_defaults(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        # The hybrid-model fields are left out at their defaults, so every other entry dumps (and
        # fingerprints, e.g. RooflineModel.fingerprint) exactly as before they existed.
        out = handler(self)
        if isinstance(out, dict):
            for key in _HYBRID_KEYS:
                if key in out and out[key] in (None, False):
                    del out[key]
        return out

    # ---- weights -------------------------------------------------------------------------
    def param_counts(self) -> ParamCounts:
        """The architecture's counts (:func:`count_params`), independent of any stored totals."""
        return count_params(layers=self.layers, hidden_size=self.hidden_size, num_heads=self.num_heads,
                            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, ffn_size=self.ffn_size,
                            vocab_size=self.vocab_size, mla=self.mla, moe=self.moe, gated_ffn=self.gated_ffn,
                            tie_word_embeddings=self.tie_word_embeddings, recurrent=self.recurrent,
                            ffn_layers=self.ffn_layers, attn_output_gate=self.attn_output_gate)

    @property
    def attention_layers(self) -> int:
        """Layers holding attention (and a per-token KV cache): all but the recurrent ones."""
        return self.layers - (self.recurrent.layers if self.recurrent is not None else 0)

    @property
    def ffn_layer_count(self) -> int:
        """Layers with an FFN (dense or MoE): ``ffn_layers``, by default every layer."""
        return self.layers if self.ffn_layers is None else self.ffn_layers

    def _bytes(self, params: float, routed: float, dtype: str | None) -> float:
        if dtype is not None or self.expert_dtype is None:
            return params * dtype_bits(dtype or self.dtype) / 8.0
        return ((params - routed) * dtype_bits(self.dtype) + routed * dtype_bits(self.expert_dtype)) / 8.0

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights at ``dtype``; by default the model's dtype (and ``expert_dtype`` for routed experts)."""
        return self._bytes(self.total_params, self.param_counts().routed_experts, dtype)

    @property
    def matmul_params_per_token(self) -> float:
        """Weights one token multiplies: active params less the input-embedding table (a row lookup, not a GEMM).

        With tied embeddings the table is also the LM head, so nothing is subtracted.
        """
        if self.tie_word_embeddings:
            return self.active_params
        return self.active_params - self.param_counts().embedding

    def active_weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of the weights one token's matrix multiplies read (MoE: shared + top-k experts).

        The input-embedding table is excluded: a token reads one row of it, not the table.
        """
        return self._bytes(self.matmul_params_per_token, self.param_counts().active_routed_experts, dtype)

    # ---- KV cache ------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """Stored KV elements per token in one layer.

        MHA/GQA/MQA: K and V for each KV head -> 2 * kv_heads * head_dim.
        MLA: one latent plus the decoupled RoPE key, shared by all heads -> kv_lora_rank + rope dim
        (no factor 2: K and V are both reconstructed from the latent).
        """
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """KV bytes one token adds while the context is within every window (all attention layers store it)."""
        bits = dtype_bits(kv_dtype or self.kv_dtype, "kv_dtype")
        return self.attention_layers * self.kv_elements_per_token_per_layer() * bits / 8.0

    def state_bytes_per_sequence(self) -> float:
        """Constant bytes one sequence holds in the recurrent layers, whatever its context (0 without)."""
        return self.recurrent.state_bytes_per_sequence(self.dtype) if self.recurrent is not None else 0.0

    def kv_bytes(self, context_tokens: float, kv_dtype: str | None = None) -> float:
        """KV and state bytes held for a sequence of ``context_tokens``: full-attention layers x per token x
        context, sliding-window layers capped at the window, plus the recurrent layers' constant state."""
        bits = dtype_bits(kv_dtype or self.kv_dtype, "kv_dtype")
        per_layer = self.kv_elements_per_token_per_layer() * bits / 8.0
        full = self.attention_layers - self.sliding_window_layers
        capped = min(context_tokens, self.sliding_window_tokens) if self.sliding_window_layers else 0.0
        kv = per_layer * (full * context_tokens + self.sliding_window_layers * capped)
        return kv + self.state_bytes_per_sequence() if self.recurrent is not None else kv

    # ---- compute -------------------------------------------------------------------------
    def attention_flops_per_token_pair(self) -> float:
        """FLOPs of QK^T and AV for one (query, key) pair summed over layers: 4 * heads * head_dim * layers.

        For MLA, attention runs over qk_nope+rope dims for scores and v_head_dim for values. Only
        attention layers count: recurrent layers have no (query, key) pairs.
        """
        if self.mla is not None:
            qk = self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
            return 2.0 * self.num_heads * (qk + self.mla.v_head_dim) * self.attention_layers
        return 4.0 * self.num_heads * self.head_dim * self.attention_layers

    def recurrent_flops_per_token(self) -> float:
        """FLOPs of the recurrent layers' state update and convolution per token (their projections are
        weight GEMMs, in :meth:`linear_flops_per_token`); 0 without recurrent layers."""
        return self.recurrent.update_flops_per_token() if self.recurrent is not None else 0.0

    def linear_flops_per_token(self) -> float:
        """FLOPs of all weight matrix multiplies per token (attention scores excluded): 2 * matmul params.

        The input-embedding lookup does no multiply-adds, so it is not counted (see
        :attr:`matmul_params_per_token`).
        """
        return 2.0 * self.matmul_params_per_token

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


class GPUSpec(Frozen):
    """One accelerator. Compute rates are dense (datasheets often print 2:4-sparse first)."""

    name: str
    vendor: Literal["nvidia", "amd", "intel", "google", "other"]
    architecture: Literal["ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4", "xe2", "other"] = Field(
        default="other", description="chip generation: step-time efficiency curves are shared per architecture")
    source: str
    memory_bytes: Bytes = Field(gt=0)
    memory_bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0)
    bf16_flops_per_s: FlopsPerSecond = Field(gt=0, description="dense BF16/FP16 tensor rate")
    fp8_flops_per_s: FlopsPerSecond | None = Field(default=None, gt=0, description="dense FP8 tensor rate")
    fp4_flops_per_s: FlopsPerSecond | None = Field(default=None, gt=0)
    intra_node_link: str | None = Field(default=None, description="catalog link name for the scale-up fabric")
    intra_node_bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0, description="per direction, per GPU")
    intra_node_p2p_gpus: int | None = Field(default=None, ge=1, description=(
        "PCIe servers: GPUs that reach each other peer-to-peer over their own links (one PCIe switch); a "
        "collective over more GPUs crosses the host fabric (intra_node_host_bandwidth_bytes_per_s)"))
    intra_node_host_bandwidth_bytes_per_s: BytesPerSecond | None = Field(default=None, gt=0, description=(
        "PCIe servers: the host fabric (CPU root complex, inter-socket link) that every GPU's all-reduce "
        "traffic shares once a collective spans more than intra_node_p2p_gpus GPUs; measured, see source"))
    tdp_watts: Watts = Field(gt=0)
    price_usd_per_hour: float | None = Field(default=None, gt=0)
    price_source: str | None = None
    price_date: str | None = None
    release_year: int | None = None

    @model_validator(mode="after")
    def _check(self) -> "GPUSpec":
        if self.price_usd_per_hour is not None and not (self.price_source and self.price_date):
            raise ValueError("price_usd_per_hour needs price_source and price_date")
        if (self.intra_node_p2p_gpus is None) != (self.intra_node_host_bandwidth_bytes_per_s is None):
            raise ValueError("intra_node_p2p_gpus and intra_node_host_bandwidth_bytes_per_s go together")
        return self

    def flops_per_s(self, dtype: str) -> float:
        """Dense tensor rate for a compute dtype; falls back to BF16 where the GPU lacks FP8/FP4 units."""
        bits = dtype_bits(dtype)
        if bits <= 4.5 and self.fp4_flops_per_s:
            return self.fp4_flops_per_s
        if bits <= 8 and self.fp8_flops_per_s:
            return self.fp8_flops_per_s
        return self.bf16_flops_per_s


class LengthPreset(Frozen):
    """A parametric length mix: lognormal prompt/output fitted to a public trace, truncated at the cap."""

    prompt_median_tokens: float = Field(gt=0)
    prompt_sigma: float = Field(ge=0)
    prompt_max_tokens: float = Field(gt=0)
    prompt_min_tokens: float = Field(default=1, ge=1)
    output_median_tokens: float = Field(gt=0)
    output_sigma: float = Field(ge=0)
    output_max_tokens: float = Field(gt=0)
    output_min_tokens: float = Field(default=1, ge=1)
    correlation: float = Field(default=0.0, ge=-1, le=1, description="correlation of log-lengths")

    @model_validator(mode="after")
    def _check(self) -> "LengthPreset":
        for side in ("prompt", "output"):
            lo, hi = getattr(self, f"{side}_min_tokens"), getattr(self, f"{side}_max_tokens")
            if lo > hi:
                raise ValueError(f"{side}_min_tokens {lo:g} exceeds {side}_max_tokens {hi:g}")
        return self


class WorkloadPreset(Frozen):
    """A named workload: length mix, typical rate and burstiness, with its source trace."""

    name: str
    source: str
    description: str = ""
    lengths: LengthPreset
    rate_per_s: float | None = Field(default=None, gt=0)
    arrival_cv: float = Field(default=1.0, gt=0)
    prefix_hit_ratio: float = Field(default=0.0, ge=0, lt=1)
    trace_file: str | None = Field(default=None, description="path under QMODEL_DATA_DIR of the source trace")


