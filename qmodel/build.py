"""Resolve a scenario into the concrete inputs of the stations (catalog -> scenario -> service times).

:func:`resolve` looks up the catalog names, checks that the model fits each pool, builds one
service-time model per pool and realises the workload (length sample, arrival rate and SCV).
It is done once per scenario; the engine then solves the stations at as many rates as it needs.

It is the one path from a scenario to inputs: the analytic solver, the planner (which caches the
pieces :func:`resolve_pool` and :func:`resolve_workload` return, and assembles them with
:func:`resolve`), the TUI and the replay (``qmodel.validation.replay.plan_from_resolved``) all read
a :class:`Resolved`. The pieces are public so a caller can cache them, never re-derive them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from qmodel.errors import InputError
from qmodel.perf.base import ServiceTimeModel
from qmodel.registry import load_catalog
from qmodel.scenario import (DecodePool, Deployment, DisaggregatedDeployment, EmpiricalLengths, PerfModel, PoolConfig,
                             PrefixTraceHashes, RooflinePerf, Scenario, TraceArrivals)
from qmodel.specs import GPUSpec, LinkSpec, ModelSpec
from qmodel.trace_law import TraceLaw, trace_law_of
from qmodel.workload import (LengthMix, arrival_stats, fit_context, length_mix, max_output_support, over_context,
                             reserved_output_tokens)

if TYPE_CHECKING:  # the replay's trace type; build imports the validation package only when a trace is read
    from qmodel.validation.trace_types import Trace

__all__ = ["PREFILL_MEMORY_FRACTION", "PoolRuntime", "PoolFactory", "Resolved", "WorkloadParts", "pool_memory_fraction",
           "context_tokens", "pipeline_warnings", "pool_compute_dtype", "pool_model", "pool_perf", "pool_reserve_bytes", "prefix_law",
           "resolve", "resolve_link", "resolve_pool", "resolve_workload", "trace_hash_uncached", "trace_with_hashes"]

#: share of a prefill instance's memory after weights counted as its KV (it holds no long-lived KV
#: beyond the batch in flight, but the memory check and the replay's prefix cache read it)
PREFILL_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class PoolRuntime:
    """One pool's resolved hardware, model as this pool runs it (its KV dtype applied), service-time
    model and KV capacity (tokens per instance)."""

    role: str  # "prefill", "decode" or "pool" (colocated/chunked)
    field: str  # dotted scenario path, for error messages
    config: PoolConfig
    gpu: GPUSpec
    service: ServiceTimeModel
    kv_capacity_tokens: float
    model: ModelSpec

    @property
    def gpus(self) -> int:
        return self.config.gpus


@dataclass(frozen=True)
class WorkloadParts:
    """The deployment-independent half of :func:`resolve` (see :func:`resolve_workload`)."""

    lengths: LengthMix
    uncached_prompt: np.ndarray
    base_rate_per_s: float | None
    ca2: float
    warnings: tuple[str, ...]
    #: a trace's windows and rate classes (:mod:`qmodel.trace_law`); None for other arrivals
    arrival_law: TraceLaw | None = None
    #: the share of requests refused for exceeding the context window (``context_overflow = reject``)
    rejected_fraction: float = 0.0
    #: the serving engine's context window (tokens) and the requests' maximum output (max_tokens)
    context_tokens: int = 0
    max_output_tokens: int = 0


@dataclass(frozen=True)
class Resolved:
    """A scenario's concrete inputs. ``lengths.prompt`` is what a request holds in KV memory and
    sends over the link (the whole prompt, prefix-cache hits included); ``uncached_prompt`` is
    what its prefill computes (docs/methods.md, "Prefix-cache hits")."""

    scenario: Scenario
    model: ModelSpec
    lengths: LengthMix
    uncached_prompt: np.ndarray  # prompt tokens the prefill must compute (prefix-cache hits removed)
    base_rate_per_s: float | None
    ca2: float
    pools: dict[str, PoolRuntime]
    #: the link as used: the catalog (or anonymous) entry with any override applied as its
    #: nominal per-path bandwidth; None unless disaggregated
    link: LinkSpec | None
    link_bandwidth_bytes_per_s: float | None  # effective (after efficiency) per path
    kv_bytes_per_token: float  # on the link: the prefill pool's KV dtype (colocated/chunked: the pool's)
    warnings: tuple[str, ...] = ()
    #: trace arrivals' windows and rate classes (:mod:`qmodel.trace_law`): the solver mixes its
    #: answer over them; None for renewal arrivals
    arrival_law: TraceLaw | None = None
    #: the share of offered requests refused for exceeding the context window (``workload.context_overflow =
    #: reject``): the stations see the rest, at (1 - rejected_fraction) of the offered rate
    rejected_fraction: float = 0.0
    #: the context window (tokens) and the requests' maximum output (:func:`qmodel.workload.max_output_support`)
    context_tokens: int = 0
    max_output_tokens: int = 0

    def reserved_output(self, role: str) -> np.ndarray | None:
        """Output tokens per request that the KV reservation of pool ``role`` counts: None (each its own
        output) unless the pool's ``kv_reservation`` is ``max_tokens``, then
        :func:`qmodel.workload.reserved_output_tokens` (docs/methods.md, "KV reservation")."""
        cfg = self.pools[role].config
        if getattr(cfg, "kv_reservation", None) != "max_tokens":
            return None
        return reserved_output_tokens(self.lengths.prompt, self.lengths.output, self.max_output_tokens,
                                      self.context_tokens)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools.values())

    @property
    def prefix_hit_fraction(self) -> float:
        """The share of prompt tokens served from the prefix cache, whatever law states it (a uniform
        ratio, a hit/miss mixture or the trace's block hashes): 1 - sum(uncached) / sum(prompt)."""
        total = float(np.sum(self.lengths.prompt))
        return 1.0 - float(np.sum(self.uncached_prompt)) / total if total > 0 else 0.0

    @property
    def cost_per_hour_usd(self) -> float | None:
        """:func:`qmodel.cost.cost_per_hour_usd` of the pools at the scenario's prices (None if a GPU has none)."""
        from qmodel.cost import cost_per_hour_usd, price_table

        pools = [(p.gpu.name, p.gpus) for p in self.pools.values()]
        return cost_per_hour_usd(pools, price_table([g for g, _ in pools], self.scenario.prices))

    @property
    def mean_prompt_tokens(self) -> float:
        return float(self.lengths.prompt.mean())

    @property
    def mean_output_tokens(self) -> float:
        return float(self.lengths.output.mean())

    @property
    def perf_sha256(self) -> dict[str, str]:
        return {role: p.service.fingerprint for role, p in self.pools.items()}

    @property
    def link_paths(self) -> int:
        """Transfer paths (:meth:`qmodel.topology.Topology.link_paths`: one per prefill instance
        where KV crosses a link, else 0)."""
        from qmodel.topology import topology_named

        return topology_named(self.scenario.deployment.topology).link_paths(self.scenario.deployment)


#: builds one pool: (role, dotted field, pool config, KV memory fraction) -> PoolRuntime
PoolFactory = Callable[[str, str, PoolConfig, float], PoolRuntime]


def pool_memory_fraction(role: str, cfg: PoolConfig) -> float:
    """The fraction of memory after weights that a pool's KV capacity counts."""
    return PREFILL_MEMORY_FRACTION if role == "prefill" else float(getattr(cfg, "kv_memory_fraction"))


def pool_reserve_bytes(cfg: PoolConfig) -> float:
    """Memory per GPU of a pool that holds neither weights nor KV: the pool's ``memory_reserve_bytes``,
    else :data:`qmodel.perf.memory.DEFAULT_RESERVE_BYTES` (6 GiB, fitted on DistServe's capacities)."""
    from qmodel.perf.memory import DEFAULT_RESERVE_BYTES

    return DEFAULT_RESERVE_BYTES if cfg.memory_reserve_bytes is None else float(cfg.memory_reserve_bytes)


def pool_model(model: ModelSpec, cfg: PoolConfig) -> ModelSpec:
    """The model as a pool runs it: the catalog entry with the pool's ``kv_dtype`` (if set) in place
    of the catalog's, so every consumer of the ModelSpec (KV capacity, roofline KV reads, link
    bytes, replay) sees the same KV width without a parameter of its own."""
    if cfg.kv_dtype is None or cfg.kv_dtype == model.kv_dtype:
        return model
    return model.model_copy(update={"kv_dtype": cfg.kv_dtype})


def pool_perf(perf: PerfModel, cfg: PoolConfig) -> PerfModel:
    """The perf model of one pool: ``scenario.perf`` with the pool's ``compute_dtype`` (if set)
    replacing ``perf.compute_dtype`` (roofline only; measured tables and fixed times carry theirs)."""
    if cfg.compute_dtype is None or not isinstance(perf, RooflinePerf):
        return perf
    return perf.model_copy(update={"compute_dtype": cfg.compute_dtype})


def pool_compute_dtype(perf: PerfModel, cfg: PoolConfig) -> str | None:
    """The precision a pool's weights are held at: the pool's ``compute_dtype``, else ``perf.compute_dtype``."""
    return cfg.compute_dtype if cfg.compute_dtype is not None else getattr(perf, "compute_dtype", None)


def resolve_pool(role: str, field: str, cfg: PoolConfig, scenario: Scenario, model: ModelSpec,
                 mem_fraction: float) -> PoolRuntime:
    """One pool: its GPU, its model (:func:`pool_model`), its service-time model (:func:`pool_perf`
    on gpu/tp/pp, as a pipeline instance when pp > 1: :mod:`qmodel.perf.pipeline`) and the KV tokens
    one instance holds (:func:`qmodel.perf.memory.kv_capacity_tokens` at the pool's weight precision,
    KV dtype and memory reserve, :func:`pool_reserve_bytes`; a decoding pool sets aside the recurrent
    state of ``max_batch`` sequences)."""
    from qmodel.perf.service_time import service_model
    from qmodel.perf.memory import kv_capacity_tokens, weight_dtype_for
    from qmodel.perf.pipeline import pipeline_instance

    gpu = load_catalog().gpu(cfg.gpu, f"{field}.gpu")
    m = pool_model(model, cfg)
    # the stage model, as the instance every station and the replay read (qmodel/perf/pipeline.py:
    # the one definition of what pp does; the stage model itself at pp = 1)
    service = pipeline_instance(service_model(pool_perf(scenario.perf, cfg), m, gpu, cfg.tp, cfg.pp,
                                              field_prefix=field), cfg.pp)
    cap = kv_capacity_tokens(m, gpu, cfg.tp, cfg.pp, mem_fraction, pool_reserve_bytes(cfg), field_prefix=field,
                             dtype=weight_dtype_for(m, pool_compute_dtype(scenario.perf, cfg)),
                             state_sequences=cfg.max_batch if isinstance(cfg, DecodePool) else 0)
    return PoolRuntime(role, field, cfg, gpu, service, float(cap), m)


def resolve_link(dep: DisaggregatedDeployment) -> tuple[LinkSpec, float]:
    """(the link as used, its effective bandwidth per transfer path in B/s).

    ``dep.link`` names a catalog link or is a bandwidth string (an anonymous link,
    :meth:`qmodel.registry.Catalog.link`); ``dep.link_bandwidth_bytes_per_s`` replaces its nominal
    per-path bandwidth. Effective = nominal x the link's efficiency; there is one path per prefill
    instance, so the aggregate is that times ``dep.prefill.instances``.
    """
    link = load_catalog().link(dep.link, "deployment.link")
    if dep.link_bandwidth_bytes_per_s is not None:
        link = link.model_copy(update={"bandwidth_bytes_per_s": float(dep.link_bandwidth_bytes_per_s)})
    return link, float(link.effective_bandwidth_bytes_per_s)


def resolve(scenario: Scenario, *, model: ModelSpec | None = None, workload: WorkloadParts | None = None,
            pool: PoolFactory | None = None) -> Resolved:
    """The scenario's :class:`Resolved`. A caller that caches pieces (the planner) passes the
    ``model``, the ``workload`` from :func:`resolve_workload` and a ``pool`` factory returning what
    :func:`resolve_pool` returns; the assembly is this function's either way."""
    from qmodel.topology import topology_named

    model = load_catalog().model(scenario.model) if model is None else model
    if scenario.prices:
        from qmodel.cost import check_prices

        check_prices(scenario.prices)  # an unknown GPU name fails here, not only where a cost is asked for
    if pool is None:
        def pool(role: str, field: str, cfg: PoolConfig, frac: float) -> PoolRuntime:
            return resolve_pool(role, field, cfg, scenario, model, frac)
    dep = scenario.deployment
    pools: dict[str, PoolRuntime] = {}
    link = None
    link_bw = None
    topo = topology_named(dep.topology)
    for role, cfg in topo.pool_configs(dep):
        pools[role] = pool(role, f"deployment.{role}", cfg, pool_memory_fraction(role, cfg))
    if topo.has_link:
        link, link_bw = resolve_link(dep)
    w = resolve_workload(scenario, model) if workload is None else workload
    # KV moves as the sender stores it: the prefill pool's KV dtype (the blocks are copied by RDMA
    # as they are; a decode pool with another dtype converts on arrival, outside the link).
    sender = pools[topo.pool_roles[0]]
    uncached = w.uncached_prompt
    if isinstance(scenario.workload.prefix_cache, PrefixTraceHashes):
        uncached = trace_hash_uncached(scenario, w.lengths, sender)
    return Resolved(scenario, model, w.lengths, uncached, w.base_rate_per_s, w.ca2, pools, link, link_bw,
                    sender.model.kv_bytes_per_token(), w.warnings + pipeline_warnings(dep, pools), w.arrival_law,
                    w.rejected_fraction, w.context_tokens, w.max_output_tokens)


def pipeline_warnings(dep: Deployment, pools: dict[str, PoolRuntime]) -> tuple[str, ...]:
    """One warning for a colocated or chunked pool with pp > 1. Its decode steps are the pipeline
    instance's (pp stage times of a micro-batch, :mod:`qmodel.perf.pipeline`) in the solver and the
    replay alike, but both take a prefill iteration (the prefill part of a mixed chunked iteration)
    as one stage time for the engine *and* for the first token, so TTFT leaves out the pp - 1
    further stage times of the request's last prefill iteration (docs/methods.md, "Pipeline
    parallelism"). Disaggregated pools carry the whole pipeline latency and add none."""
    from qmodel.topology import topology_named

    if topology_named(dep.topology).separate_prefill:
        return ()
    return tuple(f"warning: {p.field}.pp = {p.config.pp} ({dep.topology}): decode steps are pipelined "
                 f"({p.config.pp} stage times of a micro-batch), but a prefill iteration counts one stage time "
                 f"for the engine and the first token, so TTFT leaves out {p.config.pp - 1} further stage time(s) "
                 f"of the request's last prefill iteration (optimistic; approximate pipeline model)"
                 for p in pools.values() if p.config.pp > 1)


def resolve_workload(scenario: Scenario, model: ModelSpec) -> WorkloadParts:
    """The length mix fitted to the context, uncached prompt tokens, rate, arrival SCV, warnings and,
    for trace arrivals, the trace's windows (:func:`qmodel.trace_law.trace_law_of`)."""
    mix = length_mix(scenario.workload)
    warnings: list[str] = []
    ctx = context_tokens(scenario, model)
    w = scenario.workload
    max_out = max_output_support(w, mix.output)
    if w.max_output_tokens is not None and np.any(mix.output > max_out):
        # the client's max_tokens stops longer generations there
        mix = LengthMix(mix.prompt, np.minimum(mix.output, max_out), hashlib.sha256(f"{mix.sha256}<={max_out}".encode()).hexdigest())
    rejected = 0.0
    if w.context_overflow == "reject":
        over = over_context(mix.prompt, mix.output, ctx)
        if np.all(over):
            raise InputError("workload.context_overflow", "reject", f"some requests within the {ctx}-token context "
                             "(every one exceeds it)")
        if w.arrivals.kind == "closed" and np.any(over):
            raise InputError("workload.context_overflow", "reject", "truncate with closed-loop arrivals (a refused "
                             "request's client would send again at once: not modelled)")
        if isinstance(w.prefix_cache, PrefixTraceHashes) and np.any(over):
            raise InputError("workload.context_overflow", "reject", "truncate with prefix_cache trace_hashes (the block "
                             "LRU replays every trace request in order)")
        if np.any(over):
            rejected = float(np.mean(over))
            warnings.append(f"warning: {int(over.sum())} of {len(mix)} requests exceed the {ctx}-token context and "
                            f"are rejected ({rejected:.2%} of requests, counted as SLO misses)")
            keep = ~over
            mix = LengthMix(mix.prompt[keep], mix.output[keep], hashlib.sha256(f"{mix.sha256}|{ctx}".encode()).hexdigest())
    p, o, cut = fit_context(mix.prompt, mix.output, ctx)
    if cut and not np.any(o > 1) and np.any(mix.output > 1):
        # Truncation left every request one output token: no TPOT exists, and the prompt is the cause.
        field = "workload.lengths.prompt_tokens" if scenario.workload.lengths.kind == "fixed" else "workload.lengths"
        raise InputError(field, int(mix.prompt.max()), f"prompts that leave room for output in {model.name}'s "
                                                       f"{ctx}-token context")
    if cut:
        # Traces can exceed a small model's window; the engine would truncate, so do we, and say so.
        warnings.append(f"warning: {cut} of {len(mix)} requests exceed {model.name}'s "
                        f"{ctx}-token context and are truncated to it")
        mix = LengthMix(p, o, mix.sha256)
    mix, uncached = prefix_law(scenario, mix)
    rate, ca2 = arrival_stats(scenario.workload)
    if rate is not None and not np.isfinite(rate):
        raise InputError("workload.arrivals", getattr(scenario.workload.arrivals, "path", "trace"),
                         "the trace needs at least two arrivals at distinct times")
    law = None
    a = scenario.workload.arrivals
    if isinstance(a, TraceArrivals):
        # a trace is read as windows of its own rate (qmodel.trace_law); the stations take the
        # gap SCV within a window, not the whole trace's (whose drift and bursts the windows hold)
        from qmodel.validation.synth import same_trace_file

        lg = scenario.workload.lengths
        law = trace_law_of(a.path, a.format, a.jitter_seed,
                           paired=isinstance(lg, EmpiricalLengths) and same_trace_file(a, lg))
        ca2 = law.ca2
    return WorkloadParts(mix, uncached, rate, ca2, tuple(warnings), law, rejected, ctx, max_out)


def context_tokens(scenario: Scenario, model: ModelSpec) -> int:
    """The serving engine's context window: ``deployment.max_context_tokens`` (vLLM --max-model-len) when
    set, else the model's; a window beyond the model's is one InputError (vLLM refuses it too)."""
    own = scenario.deployment.max_context_tokens
    if own is None:
        return int(model.max_context_tokens)
    if own > model.max_context_tokens:
        raise InputError("deployment.max_context_tokens", own, f"at most {model.name}'s {model.max_context_tokens}-token "
                         "context")
    return int(own)


def prefix_law(scenario: Scenario, mix: LengthMix) -> tuple[LengthMix, np.ndarray]:
    """(the length mix, its uncached prompt tokens) under the scenario's prefix-cache law
    (:mod:`qmodel.prefix_cache`): the uniform ratio; a stated mixture on the nodes (a mix of fewer
    than 4096 nodes is repeated to at least 4096 so the hit fraction is resolved to 1/4096); for
    ``trace_hashes`` the whole prompt, which :func:`resolve` replaces by the LRU's once the cache
    instances and their capacity are known."""
    from qmodel.prefix_cache import mixture_nodes, uncached_tokens
    from qmodel.scenario import PrefixMixture

    law = scenario.workload.prefix_cache
    if law is None:
        return mix, uncached_tokens(mix.prompt, float(scenario.workload.prefix_hit_ratio))
    if isinstance(law, PrefixMixture):
        k = -(-4096 // len(mix))
        if k > 1:
            mix = LengthMix(np.tile(mix.prompt, k), np.tile(mix.output, k),
                            hashlib.sha256(f"{mix.sha256}x{k}".encode()).hexdigest())
        return mix, uncached_tokens(mix.prompt, float(law.hit_ratio), mixture_nodes(mix.prompt, float(law.hit_fraction)))
    trace_with_hashes(scenario)
    return mix, mix.prompt.astype(np.int64)


def trace_with_hashes(scenario: Scenario) -> Trace:
    """The trace whose block hashes ``prefix_cache = trace_hashes`` reads: the workload's lengths
    file, which must also be its arrivals (the replay then carries the hashes in the file's order)
    and must have hash_ids; otherwise one InputError."""
    from qmodel.validation.synth import same_trace_file
    from qmodel.validation.traces import load_trace

    w = scenario.workload
    lg, arr = w.lengths, w.arrivals
    if not (isinstance(lg, EmpiricalLengths) and isinstance(arr, TraceArrivals) and same_trace_file(arr, lg)):
        raise InputError("workload.prefix_cache", "trace_hashes", "trace arrivals and empirical lengths from the same "
                         "trace file (the request order its cache sees)")
    tr = load_trace(lg.path, lg.format)
    if tr.hash_ids is None:
        raise InputError("workload.prefix_cache", "trace_hashes", f"a trace with block hashes (hash_ids); {lg.path} has none")
    return tr


def trace_hash_uncached(scenario: Scenario, lengths: LengthMix, pool: PoolRuntime) -> np.ndarray:
    """Uncached prompt tokens per trace request: the block LRU of :mod:`qmodel.prefix_cache` over
    ``pool``'s instances (the prefill pool, or the single pool), each holding
    :func:`~qmodel.prefix_cache.cache_blocks` of its KV capacity, run once per scenario."""
    from qmodel.prefix_cache import cache_blocks, lru_cached_tokens_once

    tr = trace_with_hashes(scenario)
    cached = lru_cached_tokens_once(tr.sha256, tr.hash_ids, lengths.prompt, pool.config.instances,
                                    cache_blocks(pool.kv_capacity_tokens), tr.block_tokens)
    return (lengths.prompt - cached).astype(np.int64)
