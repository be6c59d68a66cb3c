r"""Layers whose per-sequence state is constant in the context: Gated DeltaNet linear attention
(Qwen3-Next, Qwen3.5) and Mamba-2 state-space mixers (Nemotron-H).

Both keep, per sequence and layer, a recurrent state of ``H`` heads x ``p`` x ``n`` elements and a
short causal-convolution state of ``(conv_kernel - 1)`` past inputs of ``conv_dim = H p + 2 G n``
channels, where (Hugging Face config.json names)::

                  Gated DeltaNet (qwen3_next, qwen3_5)     Mamba-2 (nemotron_h)
    H  heads      linear_num_value_heads                   mamba_num_heads
    p  head dim   linear_value_head_dim                    mamba_head_dim
    n  state dim  linear_key_head_dim                      ssm_state_size
    G  groups     linear_num_key_heads (q, k heads)        n_groups (B, C groups)
    k  conv       linear_conv_kernel_dim                   conv_kernel

The state is read and written once per decoded token and does not grow with the context, so
these layers hold no per-token KV cache (docs/step_times.md, "Hybrid linear-attention models").
The recurrent state is held at ``state_dtype`` (the config's ``mamba_ssm_dtype`` /
``mamba_ssm_cache_dtype``, float32 in the Qwen3.5 and Nemotron-3 configs), the convolution state
at the model's weight dtype (vLLM's MambaStateDtypeCalculator does the same).

Weights per layer (``h`` hidden size; biases as in the Hugging Face modelling code)::

    Gated DeltaNet  h (2 G n + 2 H p + 2 H)   in_proj_qkvz + in_proj_ba (q, k, v, output gate z; beta, alpha)
                    + conv_dim k              depthwise conv1d, no bias
                    + 2 H + p                 dt_bias, A_log; gated RMSNorm over p
                    + H p h                   out_proj
    Mamba-2         h (2 H p + 2 G n + H)     in_proj (z, x, B, C, dt)
                    + conv_dim (k + 1)        depthwise conv1d with bias
                    + 3 H + H p               dt_bias, A_log, D; gated RMSNorm over H p
                    + H p h                   out_proj

FLOPs per token per layer beyond those weight GEMMs (the recurrent form that decoding runs; one
multiply-add = 2 FLOPs), with ``S`` the H x p x n state::

    Gated DeltaNet  7 H p n + 2 k conv_dim    S k (2), decay S (1), rank-1 delta update (2), S q (2)
    Mamba-2         5 H p n + 2 k conv_dim    decay S (1), rank-1 update dt x B^T (2), S C (2)

Prefill runs the same work per token (chunked kernels reorder it; their extra intra-chunk
products are not counted), so it is linear in the prompt, with no quadratic attention term.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from qmodel.frozen import Frozen
from qmodel.units import dtype_bits

__all__ = ["RecurrentConfig"]

#: FLOPs per state element per token of the recurrent update (see the module docstring)
_UPDATE_FLOPS_PER_STATE_ELEMENT = {"gated_deltanet": 7.0, "mamba2": 5.0}


class RecurrentConfig(Frozen):
    """The constant-state layers of a hybrid model (the remaining ``layers`` hold attention)."""

    kind: Literal["gated_deltanet", "mamba2"]
    layers: int = Field(gt=0, description="layers with a recurrent mixer instead of attention")
    num_heads: int = Field(gt=0, description="H: linear_num_value_heads / mamba_num_heads")
    head_dim: int = Field(gt=0, description="p: linear_value_head_dim / mamba_head_dim")
    state_dim: int = Field(gt=0, description="n: linear_key_head_dim / ssm_state_size")
    num_groups: int = Field(gt=0, description="G: linear_num_key_heads / n_groups")
    conv_kernel: int = Field(ge=1, description="linear_conv_kernel_dim / conv_kernel")
    state_dtype: str = Field(default="fp32", description="dtype of the recurrent state (mamba_ssm_dtype)")

    @model_validator(mode="after")
    def _check(self) -> "RecurrentConfig":
        if self.num_heads % self.num_groups:
            raise ValueError(f"recurrent num_heads {self.num_heads} is not a multiple of num_groups {self.num_groups}")
        dtype_bits(self.state_dtype, "recurrent.state_dtype")
        return self

    @property
    def conv_dim(self) -> int:
        """Channels of the short convolution: H p + 2 G n (x/v plus B, C / q, k)."""
        return self.num_heads * self.head_dim + 2 * self.num_groups * self.state_dim

    def state_elements_per_layer(self) -> int:
        """Recurrent-state elements one sequence holds in one layer: H p n."""
        return self.num_heads * self.head_dim * self.state_dim

    def conv_elements_per_layer(self) -> int:
        """Convolution-state elements one sequence holds in one layer: (k - 1) conv_dim."""
        return (self.conv_kernel - 1) * self.conv_dim

    def state_bytes_per_sequence(self, conv_dtype: str) -> float:
        """Bytes one sequence's state occupies over all these layers (recurrent + convolution state)."""
        per_layer = (self.state_elements_per_layer() * dtype_bits(self.state_dtype) / 8.0
                     + self.conv_elements_per_layer() * dtype_bits(conv_dtype) / 8.0)
        return self.layers * per_layer

    def params_per_layer(self, hidden_size: int) -> int:
        """Weights of one recurrent mixer (module docstring)."""
        h, hp, gn, heads, k = hidden_size, self.num_heads * self.head_dim, self.num_groups * self.state_dim, \
            self.num_heads, self.conv_kernel
        if self.kind == "gated_deltanet":
            return h * (2 * gn + 2 * hp + 2 * heads) + self.conv_dim * k + 2 * heads + self.head_dim + hp * h
        return h * (2 * hp + 2 * gn + heads) + self.conv_dim * (k + 1) + 3 * heads + hp + hp * h

    def update_flops_per_token(self) -> float:
        """FLOPs of the recurrent update and convolution per token over all these layers (no weight GEMMs)."""
        per_layer = (_UPDATE_FLOPS_PER_STATE_ELEMENT[self.kind] * self.state_elements_per_layer()
                     + 2.0 * self.conv_kernel * self.conv_dim)
        return self.layers * per_layer
