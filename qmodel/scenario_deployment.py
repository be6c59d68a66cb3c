"""The scenario's deployment: pools of GPUs and the three deployment shapes that arrange them.

:class:`PoolConfig` (one pool of identical instances) with its prefill and decode variants, and
the deployment models :class:`ColocatedDeployment`, :class:`ChunkedDeployment` and
:class:`DisaggregatedDeployment`, discriminated by ``topology`` (:data:`Deployment`). What each
shape *does* lives in :mod:`qmodel.topology`; these are only the validated inputs.
:mod:`qmodel.scenario` re-exports every name here.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, ValidationInfo, field_validator

from qmodel.scenario_base import MAX_TOKENS, Strict
from qmodel.units import Bytes, BytesPerSecond, Count, Real

__all__ = ["ChunkedDeployment", "ColocatedDeployment", "DecodePool", "Deployment", "DisaggregatedDeployment",
           "Dispatch", "DISPATCH_HELP", "KVReservation", "PoolConfig", "PrefillPool"]

#: how a pool hands each arrival to one of its instances
Dispatch = Literal["random", "round_robin", "least_loaded", "jsq"]
DISPATCH_HELP = ("random: a seeded uniform draw; round_robin: in rotation; least_loaded: the instance with the "
                 "fewest outstanding tokens (waiting prompts plus reserved KV); jsq: join the shortest queue, the "
                 "instance with the fewest requests queued or in service (ties to the lowest index)")


class PoolConfig(Strict):
    """One pool of identical instances (``tp x pp`` GPUs each).

    ``kv_dtype`` and ``compute_dtype`` are per pool, not per scenario, because engines set them
    per process: vLLM's ``--kv-cache-dtype`` and ``--quantization`` are flags of each ``vllm serve``,
    so a disaggregated deployment may run FP8 KV on its decode pool only (where KV capacity bounds
    the batch) and keep BF16 KV on prefill, or FP8 GEMMs on prefill (compute-bound) and BF16 on
    decode. Both are applied on the one resolution path (:func:`qmodel.build.resolve_pool`): the
    pool's ModelSpec carries ``kv_dtype`` (KV capacity, roofline KV reads, link bytes, replay) and
    its roofline runs at ``compute_dtype`` (GEMM rate, weight bytes streamed and held).
    """

    OMIT_WHEN_NONE = ("memory_reserve_bytes",)  # unset: the dump (and sha256) of scenarios before it

    gpu: str
    tp: Count = Field(default=1, ge=1, le=64)
    pp: Count = Field(default=1, ge=1, le=64)
    instances: Count = Field(default=1, ge=1, le=100000)
    kv_dtype: str | None = Field(default=None, description="KV-cache dtype of this pool, e.g. 'fp8' (vLLM "
                                 "--kv-cache-dtype); default: the model's catalog kv_dtype")
    compute_dtype: str | None = Field(default=None, description="weight/activation precision of this pool, e.g. "
                                      "'fp8' (W8A8); replaces perf.compute_dtype here; default: perf.compute_dtype")
    memory_reserve_bytes: Bytes | None = Field(
        default=None, ge=0, description="memory per GPU held for neither weights nor KV (CUDA context, workspaces, "
        "activation peak, fragmentation), e.g. '8 GiB'; default 6 GiB (fitted on DistServe's capacity table, "
        "docs/methods.md, \"Service times\")")

    @field_validator("kv_dtype", "compute_dtype")
    @classmethod
    def _known_pool_dtype(cls, v: str | None, info: ValidationInfo) -> str | None:
        """An unknown dtype is one InputError naming the field (the loader prefixes the pool's path)."""
        if v is not None:
            from qmodel.units import dtype_bits

            dtype_bits(v, info.field_name)
            v = v.strip().lower()
        return v

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.instances


class PrefillPool(PoolConfig):
    max_batch_tokens: Count = Field(default=8192, ge=1, le=MAX_TOKENS, description="token budget of one prefill batch")
    dispatch: Dispatch = Field(default="round_robin", description=DISPATCH_HELP)


#: what a decoding pool's KV reservation counts per request (docs/methods.md, "KV reservation")
KVReservation = Literal["actual", "max_tokens"]


class DecodePool(PoolConfig):
    OMIT_WHEN_NONE = ("memory_reserve_bytes", "kv_reservation")

    kv_memory_fraction: Real = Field(default=0.9, ge=0.01, le=1, description="fraction of memory left after weights given to KV")
    max_batch: Count = Field(default=256, ge=1, le=1_000_000, description="max concurrent sequences per instance")
    dispatch: Dispatch = Field(default="least_loaded", description=DISPATCH_HELP)
    kv_reservation: KVReservation | None = Field(
        default=None, description="actual (default): a request's KV reservation is its prompt + its own output, as "
        "on-demand engines (vLLM, SGLang) end up holding; max_tokens: prompt + the workload's maximum output length "
        "for its whole life (TensorRT-LLM / TGI static reservation), so fewer requests are resident")


#: the deployment field that overrides the model's context window (vLLM --max-model-len)
MAX_CONTEXT_HELP = ("the serving engine's context window in tokens (vLLM --max-model-len), prompt + output; default: "
                    "the model's max_context_tokens from the catalog")


class ColocatedDeployment(Strict):
    """Each instance does prefill and decode (vLLM-like, prefill-priority iterations)."""

    OMIT_WHEN_NONE = ("max_context_tokens",)

    topology: Literal["colocated"] = "colocated"
    pool: DecodePool
    max_batch_tokens: Count = Field(default=8192, ge=1, le=MAX_TOKENS, description="token budget of a prefill iteration")
    max_context_tokens: Count | None = Field(default=None, ge=2, le=MAX_TOKENS, description=MAX_CONTEXT_HELP)

    @property
    def gpus(self) -> int:
        return self.pool.gpus


class ChunkedDeployment(Strict):
    """Sarathi-style chunked prefill: every iteration mixes decode tokens and prefill chunks under a budget."""

    OMIT_WHEN_NONE = ("max_context_tokens",)

    topology: Literal["chunked"] = "chunked"
    pool: DecodePool
    chunk_tokens: Count = Field(default=512, ge=16, le=MAX_TOKENS, description="per-iteration token budget (decode tokens + prefill chunk)")
    max_context_tokens: Count | None = Field(default=None, ge=2, le=MAX_TOKENS, description=MAX_CONTEXT_HELP)

    @property
    def gpus(self) -> int:
        return self.pool.gpus


class DisaggregatedDeployment(Strict):
    """Separate prefill and decode pools joined by a KV-transfer link (one link path per prefill instance)."""

    OMIT_WHEN_NONE = ("max_context_tokens",)

    topology: Literal["disaggregated"] = "disaggregated"
    prefill: PrefillPool
    decode: DecodePool
    link: str = Field(description="catalog link name, e.g. 'ib-ndr-400', or a bandwidth such as '400 Gbps': an "
                                  "anonymous link whose every transfer path (one per prefill instance) has that nominal "
                                  "bandwidth, efficiency 1 (achieved as written) and latency 0 s")
    link_sharing: Literal["dedicated", "fcfs", "fair"] = Field(
        default="fcfs", description="dedicated: no contention; fcfs: one transfer at a time per link; fair: concurrent transfers share it")
    transfer_mode: Literal["serialized", "layerwise"] = "layerwise"
    link_bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        default=None, ge=1e6, le=1e14,
        description="what-if: the nominal bandwidth of one transfer path (one prefill instance's share, as on the NIC "
                    "spec sheet), before the link's efficiency, replacing the link's own, e.g. '200 Gbps'")
    first_token_from: Literal["prefill", "decode"] = Field(
        default="prefill", description="whether TTFT ends at the prefill pass or at the first decode step")
    max_context_tokens: Count | None = Field(default=None, ge=2, le=MAX_TOKENS, description=MAX_CONTEXT_HELP)

    @field_validator("link")
    @classmethod
    def _link_bandwidth(cls, v: str) -> str:
        """A bandwidth string must parse and be in range now (a catalog name is checked at resolve)."""
        from qmodel.specs import anonymous_link, is_bandwidth_text

        if is_bandwidth_text(v):
            anonymous_link(v, "link")
        return v

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus


Deployment = Annotated[Union[ColocatedDeployment, ChunkedDeployment, DisaggregatedDeployment], Field(discriminator="topology")]
