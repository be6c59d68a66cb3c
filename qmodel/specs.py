"""Catalog entries as frozen pydantic models: LLM architectures, GPUs, links, workload presets.

Files in ``catalog/`` (installed as ``qmodel.catalog``) hold the data; this module holds the
shapes and the derived quantities every other layer needs: weight bytes, KV bytes per token
(GQA, MLA latent, sliding-window caps, any KV dtype including sub-byte), FLOPs per token.

Every entry carries ``source`` so each number can be traced to a config file or datasheet.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from qmodel.units import Bytes, BytesPerSecond, FlopsPerSecond, Seconds, Watts, dtype_bits

__all__ = [
    "Frozen",
    "MLAConfig",
    "MoEConfig",
    "ModelSpec",
    "GPUSpec",
    "LinkSpec",
    "LengthPreset",
    "WorkloadPreset",
]


class Frozen(BaseModel):
    """Base for catalog values: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


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


class ModelSpec(Frozen):
    """An LLM architecture. Counts are plain integers; parameters are element counts (not bytes)."""

    name: str
    hf_id: str | None = None
    source: str = Field(description="where the numbers come from (config.json path, paper)")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0, description="query heads")
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn_size: int = Field(gt=0, description="dense FFN intermediate size")
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

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.attention == "mla" and self.mla is None:
            raise ValueError("attention 'mla' needs an [mla] table (kv_lora_rank, qk_rope_head_dim)")
        if self.attention != "mla" and self.mla is not None:
            raise ValueError("an [mla] table is only valid with attention = 'mla'")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.sliding_window_layers > self.layers:
            raise ValueError("sliding_window_layers exceeds layers")
        if self.sliding_window_layers and self.sliding_window_tokens is None:
            raise ValueError("sliding_window_layers needs sliding_window_tokens")
        if self.active_params > self.total_params * 1.0001:
            raise ValueError("active_params exceeds total_params")
        dtype_bits(self.dtype, "dtype")
        dtype_bits(self.kv_dtype, "kv_dtype")
        return self

    # ---- weights -------------------------------------------------------------------------
    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights at ``dtype`` (default: the model's)."""
        return self.total_params * dtype_bits(dtype or self.dtype) / 8.0

    def active_weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of the weights one token touches (MoE: active experts only)."""
        return self.active_params * dtype_bits(dtype or self.dtype) / 8.0

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
        """KV bytes one token adds while the context is within every window (all layers store it)."""
        bits = dtype_bits(kv_dtype or self.kv_dtype, "kv_dtype")
        return self.layers * self.kv_elements_per_token_per_layer() * bits / 8.0

    def kv_bytes(self, context_tokens: float, kv_dtype: str | None = None) -> float:
        """KV bytes held for a sequence of ``context_tokens``; sliding-window layers cap at the window."""
        bits = dtype_bits(kv_dtype or self.kv_dtype, "kv_dtype")
        per_layer = self.kv_elements_per_token_per_layer() * bits / 8.0
        full = self.layers - self.sliding_window_layers
        capped = min(context_tokens, self.sliding_window_tokens) if self.sliding_window_layers else 0.0
        return per_layer * (full * context_tokens + self.sliding_window_layers * capped)

    # ---- compute -------------------------------------------------------------------------
    def attention_flops_per_token_pair(self) -> float:
        """FLOPs of QK^T and AV for one (query, key) pair summed over layers: 4 * heads * head_dim * layers.

        For MLA, attention runs over qk_nope+rope dims for scores and v_head_dim for values.
        """
        if self.mla is not None:
            qk = self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
            return 2.0 * self.num_heads * (qk + self.mla.v_head_dim) * self.layers
        return 4.0 * self.num_heads * self.head_dim * self.layers

    def linear_flops_per_token(self) -> float:
        """FLOPs of all matrix multiplies per token excluding attention scores: 2 * active params."""
        return 2.0 * self.active_params

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


class GPUSpec(Frozen):
    """One accelerator. Compute rates are dense (datasheets often print 2:4-sparse first)."""

    name: str
    vendor: Literal["nvidia", "amd", "intel", "google", "other"]
    source: str
    memory_bytes: Bytes = Field(gt=0)
    memory_bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0)
    bf16_flops_per_s: FlopsPerSecond = Field(gt=0, description="dense BF16/FP16 tensor rate")
    fp8_flops_per_s: FlopsPerSecond | None = Field(default=None, gt=0, description="dense FP8 tensor rate")
    fp4_flops_per_s: FlopsPerSecond | None = Field(default=None, gt=0)
    intra_node_link: str | None = Field(default=None, description="catalog link name for the scale-up fabric")
    intra_node_bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0, description="per direction, per GPU")
    tdp_watts: Watts = Field(gt=0)
    price_usd_per_hour: float | None = Field(default=None, gt=0)
    price_source: str | None = None
    price_date: str | None = None
    release_year: int | None = None

    @model_validator(mode="after")
    def _check(self) -> "GPUSpec":
        if self.price_usd_per_hour is not None and not (self.price_source and self.price_date):
            raise ValueError("price_usd_per_hour needs price_source and price_date")
        return self

    def flops_per_s(self, dtype: str) -> float:
        """Dense tensor rate for a compute dtype; falls back to BF16 where the GPU lacks FP8/FP4 units."""
        bits = dtype_bits(dtype)
        if bits <= 4.5 and self.fp4_flops_per_s:
            return self.fp4_flops_per_s
        if bits <= 8 and self.fp8_flops_per_s:
            return self.fp8_flops_per_s
        return self.bf16_flops_per_s


class LinkSpec(Frozen):
    """A data path for KV transfer or tensor-parallel collectives.

    ``bandwidth_bytes_per_s`` is nominal per direction for the whole path (for a multi-NIC aggregate,
    all NICs together); ``efficiency`` is the achievable fraction (e.g. Mooncake: 87 GB/s measured
    on 4 x 200 Gbps = 100 GB/s nominal -> 0.87).
    """

    name: str
    kind: Literal["nvlink", "pcie", "infiniband", "roce", "ethernet", "wan", "other"]
    source: str
    bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0)
    latency_s: Seconds = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)
    nics: int = Field(default=1, ge=1, description="NICs aggregated in bandwidth_bytes_per_s")

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


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


