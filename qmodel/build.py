"""Resolve a scenario into the concrete inputs of the stations (catalog -> scenario -> service times).

:func:`resolve` looks up the catalog names, checks that the model fits each pool, builds one
service-time model per pool and realises the workload (length sample, arrival rate and SCV).
It is done once per scenario; the engine then solves the stations at as many rates as it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qmodel.errors import InputError
from qmodel.perf.base import ServiceTimeModel
from qmodel.registry import load_catalog
from qmodel.scenario import (ChunkedDeployment, ColocatedDeployment, DisaggregatedDeployment, PoolConfig, Scenario,
                             TraceArrivals)
from qmodel.specs import GPUSpec, LinkSpec, ModelSpec
from qmodel.workload import LengthMix, arrival_stats, fit_context, length_mix

__all__ = ["PoolRuntime", "Resolved", "resolve", "resolve_workload"]


@dataclass(frozen=True)
class PoolRuntime:
    """One pool's resolved hardware, service-time model and KV capacity (tokens per instance)."""

    role: str  # "prefill", "decode" or "pool" (colocated/chunked)
    field: str  # dotted scenario path, for error messages
    config: PoolConfig
    gpu: GPUSpec
    service: ServiceTimeModel
    kv_capacity_tokens: float

    @property
    def gpus(self) -> int:
        return self.config.gpus

    @property
    def cost_per_hour_usd(self) -> float | None:
        return None if self.gpu.price_usd_per_hour is None else self.gpu.price_usd_per_hour * self.gpus


@dataclass(frozen=True)
class Resolved:
    scenario: Scenario
    model: ModelSpec
    lengths: LengthMix
    uncached_prompt: np.ndarray  # prompt tokens the prefill must compute (prefix-cache hits removed)
    base_rate_per_s: float | None
    ca2: float
    pools: dict[str, PoolRuntime]
    link: LinkSpec | None
    link_bandwidth_bytes_per_s: float | None  # effective (after efficiency) per path
    kv_bytes_per_token: float
    warnings: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools.values())

    @property
    def cost_per_hour_usd(self) -> float | None:
        costs = [p.cost_per_hour_usd for p in self.pools.values()]
        return None if any(c is None for c in costs) else float(sum(costs))

    @property
    def perf_sha256(self) -> dict[str, str]:
        return {role: p.service.fingerprint for role, p in self.pools.items()}


def _pool(role: str, field: str, cfg: PoolConfig, scenario: Scenario, model: ModelSpec, mem_fraction: float) -> PoolRuntime:
    from qmodel.perf.build import service_model
    from qmodel.perf.memory import kv_capacity_tokens, weight_dtype_for

    gpu = load_catalog().gpu(cfg.gpu, f"{field}.gpu")
    service = service_model(scenario.perf, model, gpu, cfg.tp, cfg.pp, field_prefix=field)
    compute_dtype = getattr(scenario.perf, "compute_dtype", None)
    cap = kv_capacity_tokens(model, gpu, cfg.tp, cfg.pp, mem_fraction, field_prefix=field,
                             dtype=weight_dtype_for(model, compute_dtype))
    return PoolRuntime(role, field, cfg, gpu, service, float(cap))


def resolve(scenario: Scenario) -> Resolved:
    cat = load_catalog()
    model = cat.model(scenario.model)
    dep = scenario.deployment
    pools: dict[str, PoolRuntime] = {}
    link = None
    link_bw = None
    if isinstance(dep, DisaggregatedDeployment):
        # Prefill holds no long-lived KV beyond the batch in flight; the memory check still applies.
        pools["prefill"] = _pool("prefill", "deployment.prefill", dep.prefill, scenario, model, 0.9)
        pools["decode"] = _pool("decode", "deployment.decode", dep.decode, scenario, model, dep.decode.kv_memory_fraction)
        link = cat.link(dep.link, "deployment.link")
        nominal = dep.link_bandwidth_bytes_per_s or link.bandwidth_bytes_per_s
        link_bw = nominal * link.efficiency
    elif isinstance(dep, (ColocatedDeployment, ChunkedDeployment)):
        pools["pool"] = _pool("pool", "deployment.pool", dep.pool, scenario, model, dep.pool.kv_memory_fraction)
    else:  # pragma: no cover - schema admits no other topology
        raise TypeError(type(dep))

    mix, uncached, rate, ca2, warnings = resolve_workload(scenario, model)
    return Resolved(scenario, model, mix, uncached, rate, ca2, pools, link, link_bw,
                    model.kv_bytes_per_token(), warnings)


def resolve_workload(scenario: Scenario, model: ModelSpec
                     ) -> tuple[LengthMix, np.ndarray, float | None, float, tuple[str, ...]]:
    """(length mix fitted to the context, uncached prompt tokens, rate, arrival SCV, warnings)."""
    mix = length_mix(scenario.workload)
    warnings: list[str] = []
    p, o, cut = fit_context(mix.prompt, mix.output, model.max_context_tokens)
    if cut and not np.any(o > 1) and np.any(mix.output > 1):
        # Truncation left every request one output token: no TPOT exists, and the prompt is the cause.
        field = "workload.lengths.prompt_tokens" if scenario.workload.lengths.kind == "fixed" else "workload.lengths"
        raise InputError(field, int(mix.prompt.max()), f"prompts that leave room for output in {model.name}'s "
                                                       f"{model.max_context_tokens}-token context")
    if cut:
        # Traces can exceed a small model's window; the engine would truncate, so do we, and say so.
        warnings.append(f"warning: {cut} of {len(mix)} requests exceed {model.name}'s "
                        f"{model.max_context_tokens}-token context and are truncated to it")
        mix = LengthMix(p, o, mix.sha256)
    h = scenario.workload.prefix_hit_ratio
    uncached = np.maximum(1, np.rint(mix.prompt * (1.0 - h))).astype(np.int64)
    rate, ca2 = arrival_stats(scenario.workload)
    if rate is not None and not np.isfinite(rate):
        raise InputError("workload.arrivals", getattr(scenario.workload.arrivals, "path", "trace"),
                         "the trace needs at least two arrivals at distinct times")
    if isinstance(scenario.workload.arrivals, TraceArrivals) and ca2 > 400:
        ca2 = 400.0  # beyond this a renewal SCV no longer describes the trace; the replay is the referee
    return mix, uncached, rate, ca2, tuple(warnings)
