"""Scenario -> :class:`ReplayPlan`, everything the replay simulation needs, resolved.

The replay takes its inputs from qmodel.build.resolve, the analytic engine's one resolution path
(service-time models, KV capacity, link as used): only the resolved inputs are shared, never a
station, so the replay stays an independent referee of the queueing formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qmodel.build import PoolRuntime, Resolved
from qmodel.perf.base import ServiceTimeModel
from qmodel.prefix_cache import cache_blocks
from qmodel.scenario import ClosedArrivals, DecodePool, PrefixMixture, Scenario, scenario_sha256
from qmodel.topology import topology_named

__all__ = ["ReplayPlan", "build_plan", "plan_from_resolved"]


@dataclass(frozen=True)
class ReplayPlan:
    """Everything the simulation needs, resolved from a scenario (catalog, perf models, memory).

    ``kv_bytes_per_token`` converts prompt tokens to transfer bytes, ``state_bytes_per_request`` adds a
    hybrid model's constant recurrent state to every transfer (0 otherwise); ``decode_kv_capacity_tokens``
    is one decode (or colocated/chunked) instance's KV memory in tokens.
    """

    topology: str
    decode_model: ServiceTimeModel
    decode_instances: int
    decode_kv_capacity_tokens: int
    decode_max_batch: int = 256
    decode_dispatch: str = "least_loaded"
    prefill_model: ServiceTimeModel | None = None
    prefill_instances: int = 1
    max_batch_tokens: int = 8192
    prefill_dispatch: str = "round_robin"
    chunk_tokens: int = 512
    kv_bytes_per_token: float = 0.0
    state_bytes_per_request: float = 0.0
    layers: int = 1
    path_bandwidth_bytes_per_s: float = 1.0
    link_latency_s: float = 0.0
    link_sharing: str = "fcfs"
    transfer_mode: str = "serialized"
    first_token_from: str = "prefill"
    prefix_hit_ratio: float = 0.0
    #: the prefix-cache law (:mod:`qmodel.prefix_cache`): "ratio" (uniform, or the trace's hash LRU when the
    #: trace has hash_ids, as always), "mixture" (a fraction ``prefix_hit_fraction`` hits ``prefix_hit_ratio``)
    #: or "trace_hashes" (the hash LRU, required)
    prefix_law: str = "ratio"
    prefix_hit_fraction: float = 1.0
    prefix_cache_blocks: int = 0
    slo_ttft_s: float = 1.0
    slo_tpot_s: float = 1.0
    gpus: int = 0
    name: str = "scenario"
    scenario_sha256: str = ""
    notes: tuple[str, ...] = field(default=())
    #: a closed loop's clients (0: open arrivals from the trace's times) and think time
    closed_concurrency: int = 0
    think_time_s: float = 0.0
    think_time_dist: str = "exponential"
    #: the decoding pool's KV reservation ("actual": prompt + own output; "max_tokens": prompt +
    #: min(max_output_tokens, context_tokens - prompt), :func:`qmodel.workload.reserved_output_tokens`)
    kv_reservation: str = "actual"
    #: what the TPOT target bounds ("per_interval": /(L - 1), "per_token": TBT, /L); None: per_interval, no TBT shown
    tpot_definition: str | None = None
    max_output_tokens: int = 0
    context_tokens: int = 0


def _slo(scn: Scenario) -> dict:
    a = scn.workload.arrivals
    closed = ({"closed_concurrency": a.concurrency, "think_time_s": float(a.think_time_s),
               "think_time_dist": a.think_time_dist} if isinstance(a, ClosedArrivals) else {})
    return {"slo_ttft_s": float(scn.slo.ttft_s), "slo_tpot_s": float(scn.slo.tpot_s), "name": scn.name,
            "tpot_definition": scn.slo.tpot_definition,
            "scenario_sha256": scenario_sha256(scn), **closed}


def _decode_part(pool: DecodePool, rt: PoolRuntime, model: ServiceTimeModel | None) -> dict:
    return {"decode_model": model or rt.service, "decode_instances": pool.instances, "decode_max_batch": pool.max_batch,
            "decode_dispatch": pool.dispatch, "decode_kv_capacity_tokens": int(rt.kv_capacity_tokens),
            "kv_reservation": pool.kv_reservation or "actual"}


def _cache_blocks(kv_capacity_tokens: float, override: int | None) -> int:
    """Mooncake prefix-block LRU of an instance: :func:`qmodel.prefix_cache.cache_blocks` (the
    solver's rule for ``prefix_cache = trace_hashes``), unless overridden."""
    return override if override is not None else cache_blocks(kv_capacity_tokens)


def _prefix_part(scn: Scenario) -> dict:
    law = scn.workload.prefix_cache
    if isinstance(law, PrefixMixture):
        return {"prefix_law": "mixture", "prefix_hit_ratio": float(law.hit_ratio),
                "prefix_hit_fraction": float(law.hit_fraction)}
    if law is not None:
        return {"prefix_law": "trace_hashes"}
    return {"prefix_hit_ratio": float(scn.workload.prefix_hit_ratio)}


def build_plan(scn: Scenario, service_models: dict[str, ServiceTimeModel] | None = None,
               prefix_cache_blocks: int | None = None) -> ReplayPlan:
    """The :class:`ReplayPlan` of a scenario: :func:`plan_from_resolved` of :func:`qmodel.build.resolve`."""
    from qmodel.build import resolve

    return plan_from_resolved(resolve(scn), service_models, prefix_cache_blocks)


def plan_from_resolved(r: Resolved, service_models: dict[str, ServiceTimeModel] | None = None,
                       prefix_cache_blocks: int | None = None) -> ReplayPlan:
    """A :class:`ReplayPlan` carrying exactly the resolved inputs the analytic solver reads.

    ``service_models`` may override the pools' models by role ("prefill", "decode"; colocated and
    chunked use "decode"), for tests and the harness. The Mooncake prefix cache of an instance
    holds, by default, as many 512-token blocks as the instance's KV capacity (a prefill instance:
    90% of the memory weights and the reserve leave, :data:`qmodel.build.PREFILL_MEMORY_FRACTION`);
    pass ``prefix_cache_blocks`` to change it.
    """
    scn = r.scenario
    sm = dict(service_models or {})
    dep = scn.deployment
    base = _slo(scn)
    base["gpus"] = dep.gpus
    base.update(max_output_tokens=r.max_output_tokens, context_tokens=r.context_tokens)
    base.update(_prefix_part(scn))
    topo = topology_named(dep.topology)
    if topo.has_link:
        pre, dec = r.pools["prefill"], r.pools["decode"]
        assert r.link is not None and r.link_bandwidth_bytes_per_s is not None
        return ReplayPlan(
            topology=topo.name, prefill_model=sm.get("prefill") or pre.service,
            prefill_instances=dep.prefill.instances, max_batch_tokens=dep.prefill.max_batch_tokens,
            prefill_dispatch=dep.prefill.dispatch, kv_bytes_per_token=r.kv_bytes_per_token, layers=r.model.layers,
            state_bytes_per_request=pre.model.state_bytes_per_sequence(),
            path_bandwidth_bytes_per_s=float(r.link_bandwidth_bytes_per_s), link_latency_s=float(r.link.latency_s),
            link_sharing=dep.link_sharing, transfer_mode=dep.transfer_mode, first_token_from=dep.first_token_from,
            prefix_cache_blocks=_cache_blocks(pre.kv_capacity_tokens, prefix_cache_blocks),
            **_decode_part(dep.decode, dec, sm.get("decode")), **base)
    # one pool: its prefill token budget (colocated) or chunk budget (chunked); the other keeps its default
    (role, cfg), = topo.pool_configs(dep)
    pool = r.pools[role]
    return ReplayPlan(topology=topo.name, max_batch_tokens=topo.prefill_token_budget(dep),
                      chunk_tokens=topo.chunk_budget(dep), **_decode_part(cfg, pool, sm.get("decode")), **base,
                      prefix_cache_blocks=_cache_blocks(pool.kv_capacity_tokens, prefix_cache_blocks))
