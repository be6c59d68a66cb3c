"""Colocated and chunked deployments: one pool of GPUs serving both prefill and decode.

One station, named (and its role named) like the shape (``"colocated"``, ``"chunked"``, as the
replay's station is), returns TTFT and TPOT on the same GPUs. They are positively
associated (both suffer when prefill is busy), so a·b is a lower bound on A = P(TTFT <= x,
TPOT <= y) and min(a, b) an upper bound; the point estimate is the lower bound (conservative for
goodput). Colocated batches whole prompts up to ``max_batch_tokens``
(:class:`~qmodel.stations.colocated.ColocatedStation`); chunked splits them into ``chunk_tokens``
pieces mixed with decode steps (:class:`~qmodel.stations.chunked.ChunkedStation`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from qmodel.topology.base import (Composition, Topology, decode_pool_settings, deployment_settings, station_dispatch,
                                  user_pool_settings)

if TYPE_CHECKING:
    from qmodel.build import Resolved
    from qmodel.scenario import Scenario
    from qmodel.stations.base import Station

__all__ = ["ChunkedTopology", "ColocatedTopology", "SinglePoolTopology", "cached_tokens"]


def cached_tokens(resolved: Resolved) -> np.ndarray | None:
    """Prefix-cache hits per request (None when there are none): held in KV, not computed."""
    cached = resolved.lengths.prompt - resolved.uncached_prompt
    return cached if np.any(cached > 0) else None


class SinglePoolTopology(Topology):
    """What colocated and chunked share: one station, its TTFT and TPOT read directly."""

    pool_roles = ("pool",)
    #: whether the station models jsq dispatch itself (else it reads it as least_loaded)
    models_jsq = False

    def _common(self, scenario: Scenario, resolved: Resolved) -> dict[str, Any]:
        dep = scenario.deployment
        pool = resolved.pools["pool"]
        return dict(service=pool.service, prompt_tokens=resolved.uncached_prompt,
                    output_tokens=resolved.lengths.output, instances=dep.pool.instances,
                    kv_capacity_tokens=pool.kv_capacity_tokens, max_batch=dep.pool.max_batch,
                    ca2=resolved.ca2, dispatch=station_dispatch(dep.pool.dispatch, self.models_jsq),
                    cached_tokens=cached_tokens(resolved), reserved_output_tokens=resolved.reserved_output("pool"))

    def compose(self, solver: Any, rate: float, laws: bool) -> Composition:
        slo = solver.scenario.slo
        s = solver.station(self.name).solve(rate)
        a = float(s.delay.cdf(slo.ttft_s))
        b = solver.tpot_attainment(s.tpot)
        return Composition(rate, [s], s.delay, s.tpot, a, b, a * b, self.attainment_bounds(a, b))

    def attainment_bounds(self, a: float, b: float) -> tuple[float, float]:
        """TTFT and TPOT on the same GPUs are positively associated: a·b <= A <= min(a, b)."""
        return a * b, min(a, b)

    def station_keys(self, plan: Any) -> dict[str, tuple]:
        f, d = plan.family, plan.decode
        return {self.name: ("pool", f.topology, f.chunk_tokens, d.gpu, d.tp, d.instances)}

    def families(self, space: Any, gpus: tuple[str, ...], prefill_gpus: tuple[str, ...],
                 decode_gpus: tuple[str, ...], links: tuple[str, ...]) -> Iterator[Any]:
        """One family per (GPU, TP) of the one pool, and per chunk budget where prefill is chunked."""
        from qmodel.planner.space import Family

        for g in gpus:
            for tp in space.tps:
                if self.chunked_prefill:
                    for c in space.chunk_tokens:
                        yield Family(self.name, g, tp, chunk_tokens=c)
                else:
                    yield Family(self.name, g, tp)

    def kept_settings(self, deployment: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        pool = deployment.pool
        dec = {"kv_memory_fraction": pool.kv_memory_fraction, "max_batch": pool.max_batch,
               "dispatch": pool.dispatch, **user_pool_settings(pool), **decode_pool_settings(pool)}
        pre = user_pool_settings(pool)  # a disaggregated candidate of a single-pool scenario runs both pools alike
        return pre, dec, deployment_settings(deployment)

    @staticmethod
    def _pool(plan: Any, dec: dict[str, Any]) -> Any:
        from qmodel.scenario_deployment import DecodePool

        return DecodePool(gpu=plan.decode.gpu, tp=plan.decode.tp, instances=plan.decode.instances, **dec)

    @staticmethod
    def family_group_key(fam: Any) -> tuple:
        return (fam.topology, fam.decode_gpu, fam.decode_tp, fam.chunk_tokens)  # shares nothing with another family

    def family_label(self, fam: Any) -> str:
        return f"{fam.topology} {fam.decode_gpu} TP{fam.decode_tp}"

    def plan_label(self, plan: Any) -> str:
        f = plan.family
        return f"{plan.decode.instances}x {f.decode_gpu} TP{f.decode_tp} {f.topology}"

    def layout(self, deployment: Any) -> str:
        return f"{deployment.pool.instances}x {deployment.pool.gpu} TP{deployment.pool.tp}"

    def perturbations(self, deployment: Any) -> list[tuple[str, list[str], float]]:
        n = deployment.pool.instances
        return [("instances", [f"deployment.pool.instances={n + 1}"], 1.0 / n),
                ("tp", [f"deployment.pool.tp={deployment.pool.tp * 2}"], 1.0)]


class ColocatedTopology(SinglePoolTopology):
    """Prefill batches and decode steps alternate on the same GPUs (prefill first)."""

    name = "colocated"
    roles = ("colocated",)
    memo_roles = roles
    budget_field = "max_batch_tokens"
    plot_style = "bright_cyan"

    def build_station(self, role: str, scenario: Scenario, resolved: Resolved) -> Station:
        from qmodel.stations.colocated import ColocatedStation

        return ColocatedStation(max_batch_tokens=scenario.deployment.max_batch_tokens,
                                renewal_arrivals=resolved.arrival_law is None, **self._common(scenario, resolved))

    def prefill_token_budget(self, deployment: Any) -> int:
        return deployment.max_batch_tokens

    def kept_settings(self, deployment: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        pre, dec, top = super().kept_settings(deployment)
        pre = {"max_batch_tokens": deployment.max_batch_tokens, **pre}
        return pre, dec, {"max_batch_tokens": deployment.max_batch_tokens, **top}

    def plan_deployment(self, plan: Any, pre: dict[str, Any], dec: dict[str, Any], top: dict[str, Any]) -> Any:
        from qmodel.scenario_deployment import ColocatedDeployment

        return ColocatedDeployment(pool=self._pool(plan, dec), **deployment_settings(top),
                                   **({"max_batch_tokens": top["max_batch_tokens"]} if "max_batch_tokens" in top else {}))


class ChunkedTopology(SinglePoolTopology):
    """Each iteration mixes one prefill chunk with the running decode batch."""

    name = "chunked"
    roles = ("chunked",)
    memo_roles = roles
    budget_field = "chunk_tokens"
    plot_style = "bright_magenta"
    chunked_prefill = True
    models_jsq = True

    def build_station(self, role: str, scenario: Scenario, resolved: Resolved) -> Station:
        from qmodel.stations.chunked import ChunkedStation

        return ChunkedStation(chunk_tokens=scenario.deployment.chunk_tokens, **self._common(scenario, resolved))

    def chunk_budget(self, deployment: Any) -> int:
        return deployment.chunk_tokens

    def plan_deployment(self, plan: Any, pre: dict[str, Any], dec: dict[str, Any], top: dict[str, Any]) -> Any:
        from qmodel.scenario_deployment import ChunkedDeployment

        return ChunkedDeployment(pool=self._pool(plan, dec), chunk_tokens=plan.family.chunk_tokens or 512,
                                 **deployment_settings(top))

    def family_label(self, fam: Any) -> str:
        return f"{super().family_label(fam)}, {fam.chunk_tokens}-token chunks"

    def plan_label(self, plan: Any) -> str:
        return f"{super().plan_label(plan)} chunk {plan.family.chunk_tokens}"
