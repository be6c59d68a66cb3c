"""GPU memory of one instance: weights per GPU, KV bytes per token per GPU, KV capacity in tokens.

For an instance of ``tp x pp`` GPUs (layout rules in :mod:`qmodel.perf.parallel`)::

    weights_per_gpu    = weight_bytes * stage_fraction / tp
    kv_per_token_gpu   = kv_bytes_per_token * stage_fraction / kv_shards_tp
    kv_bytes_per_gpu   = memory_fraction * (gpu_memory - weights_per_gpu - reserve)
                         - state_sequences * state_bytes_per_sequence * stage_fraction / tp
    kv_capacity_tokens = floor(kv_bytes_per_gpu / kv_per_token_gpu)       (per instance)

Hybrid models (recurrent layers, :mod:`qmodel.recurrent`) hold a constant state per sequence
besides the attention KV; it is sharded by head over the TP ranks. The KV pool sets aside that
state for ``state_sequences`` sequences (the pool's ``max_batch``), as SGLang preallocates its
Mamba state pool for its maximum running requests, so capacity stays counted in attention-KV tokens
and admission needs no per-sequence term. (vLLM's hybrid allocator instead takes one state block
per running request from the shared pool: the reservation is exact when the batch is full and
conservative otherwise.) Without recurrent layers the term is 0.

``stage_fraction = ceil(layers/pp) / layers`` is the busiest pipeline stage's share of the layers
(weights and KV both split by layer); ``kv_shards_tp`` is ``min(tp, kv_heads)`` (KV heads are
replicated beyond that) and 1 for MLA (the latent is replicated on every TP rank).
``memory_fraction`` is the scenario's ``kv_memory_fraction``: the share of what is left after
weights and the reserve that the engine gives to KV blocks.

``reserve`` (a pool's ``memory_reserve_bytes``; default :data:`DEFAULT_RESERVE_BYTES` = 6 GiB per GPU) holds everything that is
neither weights nor KV: CUDA context and cuBLAS/NCCL workspaces (about 1 GiB), the activation peak
of the largest batch, allocator fragmentation and the engine's safety margin. The value is chosen
from DistServe's own capacity table (``distserve/max_num_tokens.csv``, OPT-13B/66B on A100-80GB):
the capacities rise by a constant 79.4 GB (OPT-13B) / 78.9 GB (OPT-66B) of weights + KV per added
GPU, so about 6.5-7 GB (6-6.5 GiB) of each 80 GiB GPU is neither (DistServe also leaves the
embeddings out of its weight count, which the smaller 6 GiB absorbs). With ``memory_fraction = 1`` and
6 GiB the capacity matches all 48 OPT-13B/66B (tp, pp) rows of that table within 0.8% (mean 0.4%);
5.5 or 6.5 GiB would miss the tightest fit (OPT-66B on 2 GPUs) by +4.5% / -3.4%. At the scenario's
default ``kv_memory_fraction = 0.9`` the same rows come out 9-11% below DistServe, since that
fraction holds back a tenth of the free memory (tested in ``tests/test_perf_memory.py``).

Approximation: embeddings and the LM head are counted as split like the other weights (vocab
parallel), and all GPUs of a stage hold the same share.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from qmodel.errors import InputError
from qmodel.perf.parallel import Parallelism, check_parallelism
from qmodel.specs import GPUSpec, ModelSpec

__all__ = [
    "DEFAULT_RESERVE_BYTES",
    "MemoryBudget",
    "weight_dtype_for",
    "weight_bytes_per_gpu",
    "kv_bytes_per_token_per_gpu",
    "memory_budget",
    "kv_capacity_tokens",
]

#: Non-weight, non-KV memory per GPU (see the module docstring for where 6 GiB comes from).
DEFAULT_RESERVE_BYTES: float = 6.0 * 2**30


class MemoryBudget(BaseModel):
    """Where one GPU's memory goes, and the resulting KV capacity of the instance."""

    model_config = ConfigDict(frozen=True)

    gpu_memory_bytes: float
    weights_per_gpu_bytes: float
    reserve_bytes: float
    kv_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int
    memory_fraction: float


def weight_dtype_for(model: ModelSpec, compute_dtype: str | None) -> str | None:
    """The stored weight dtype of a deployment: ``compute_dtype`` if narrower than the checkpoint's
    (an FP8 deployment of a bf16 model stores FP8 weights), else None (= the model's own dtypes,
    including a narrower ``expert_dtype``). The roofline streams weights by the same rule."""
    if compute_dtype is None:
        return None
    from qmodel.units import dtype_bits

    return compute_dtype if dtype_bits(compute_dtype, "perf.compute_dtype") < dtype_bits(model.dtype) else None


def weight_bytes_per_gpu(model: ModelSpec, layout: Parallelism, dtype: str | None = None) -> float:
    """Weight bytes held by one GPU of the busiest stage."""
    return model.weight_bytes(dtype) * layout.stage_fraction / layout.tp


def kv_bytes_per_token_per_gpu(model: ModelSpec, layout: Parallelism, kv_dtype: str | None = None) -> float:
    """KV bytes one token of context adds on one GPU (full-attention layers; see ModelSpec.kv_bytes for windows)."""
    return model.kv_bytes_per_token(kv_dtype) * layout.stage_fraction / layout.kv_shards_tp


def memory_budget(model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1, memory_fraction: float = 1.0,
                  reserve_bytes: float = DEFAULT_RESERVE_BYTES, field_prefix: str = "deployment",
                  dtype: str | None = None, kv_dtype: str | None = None, state_sequences: int = 0) -> MemoryBudget:
    """The memory budget of one instance; raises InputError naming ``<field_prefix>.tp`` if the model does not fit.

    ``state_sequences``: the sequences whose recurrent state is set aside (hybrid models; see above)."""
    if not (0.0 < memory_fraction <= 1.0):
        raise InputError(f"{field_prefix}.kv_memory_fraction", memory_fraction, "a fraction in (0, 1]")
    if not (0.0 <= reserve_bytes < gpu.memory_bytes):
        raise InputError(f"{field_prefix}.memory_reserve_bytes", reserve_bytes,
                         f"a size from 0 up to {gpu.name}'s {gpu.memory_bytes / 2**30:.1f} GiB of memory")
    layout = check_parallelism(model, tp, pp, field_prefix)
    w = weight_bytes_per_gpu(model, layout, dtype)
    kv_tok = kv_bytes_per_token_per_gpu(model, layout, kv_dtype)
    free = gpu.memory_bytes - w - reserve_bytes
    kv_bytes = memory_fraction * free
    state = state_sequences * model.state_bytes_per_sequence() * layout.stage_fraction / layout.tp
    if state:
        kv_bytes -= state
    tokens = math.floor(kv_bytes / kv_tok) if kv_bytes > 0 else 0
    if tokens < 1:
        need = w + reserve_bytes + kv_tok / memory_fraction
        # Smallest tp*pp whose weight share leaves room: weights shrink as 1/(tp*pp).
        room = gpu.memory_bytes - reserve_bytes
        hint = (f"at least {math.ceil(model.weight_bytes(dtype) / room)} GPUs per instance (tp x pp)"
                if room > 0 else "a GPU with more memory")
        if free > 0 and state and memory_fraction * free > 0:
            raise InputError(f"{field_prefix}.max_batch", state_sequences,
                             f"fewer sequences: the recurrent state of {state_sequences} sequences "
                             f"({state / 1e9:.1f} GB per GPU) leaves no room for KV on {gpu.name}")
        if free > 0:  # the weights fit: the KV share is what leaves no room for one token
            raise InputError(f"{field_prefix}.kv_memory_fraction", memory_fraction,
                             f"a fraction leaving room for KV: {memory_fraction:.3g} of the {free / 1e9:.1f} GB left "
                             f"after weights on {gpu.name} holds no token ({kv_tok:.3g} B per token)")
        raise InputError(
            f"{field_prefix}.tp", tp,
            f"{model.name} at tp={tp} x pp={pp} needs {need / 1e9:.1f} GB per GPU "
            f"({w / 1e9:.1f} GB weights + {reserve_bytes / 1e9:.1f} GB reserve + KV) but {gpu.name} has "
            f"{gpu.memory_bytes / 1e9:.1f} GB; use {hint}",
        )
    return MemoryBudget(
        gpu_memory_bytes=float(gpu.memory_bytes), weights_per_gpu_bytes=w, reserve_bytes=float(reserve_bytes),
        kv_bytes_per_gpu=kv_bytes, kv_bytes_per_token_per_gpu=kv_tok, kv_capacity_tokens=int(tokens),
        memory_fraction=float(memory_fraction),
    )


def kv_capacity_tokens(model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1, memory_fraction: float = 1.0,
                       reserve_bytes: float = DEFAULT_RESERVE_BYTES, field_prefix: str = "deployment",
                       dtype: str | None = None, kv_dtype: str | None = None, state_sequences: int = 0) -> int:
    """KV-cache capacity of one instance in tokens (see :func:`memory_budget`)."""
    return memory_budget(model, gpu, tp, pp, memory_fraction, reserve_bytes, field_prefix, dtype,
                         kv_dtype, state_sequences).kv_capacity_tokens
