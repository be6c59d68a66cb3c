"""One scenario's GPUs laid out as each topology: the iso-GPU variants ``qmodel compare`` and the TUI's
curves and heatmap tabs evaluate.

For the scenario's pool shape (a disaggregated scenario: its decode pool, whose GPU, TP x PP, KV
fraction, batch cap and dispatch every layout keeps) and its total GPU count N, with
n = N / (TP x PP) instances:

* colocated: n instances, prefill-priority iterations, the scenario's prefill budget;
* chunked: n instances, the scenario's chunk budget (its topology's default when it has none);
* disaggregated P:D: P prefill instances of the same shape (the scenario's prefill budget and
  dispatch) and D decode instances, over the scenario's link as stated (bandwidth override,
  sharing, transfer mode, where the first token comes from), or :data:`DEFAULT_LINK` with
  FCFS sharing and layer-wise transfer when the scenario has no link.

:func:`pd_split` is the other question the TUI's heatmap asks: the scenario itself on P prefill and
D decode instances (a disaggregated scenario keeps both its pools as stated, only the counts
change; another shape becomes the disaggregated layout above).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qmodel.scenario import ChunkedDeployment, ColocatedDeployment, DecodePool, DisaggregatedDeployment, PrefillPool, Scenario

__all__ = ["DEFAULT_LINK", "IsoGpuLayouts", "iso_gpu_layouts", "pd_split"]

#: the KV link a layout gets when its scenario names none (InfiniBand NDR 400 Gb/s)
DEFAULT_LINK = "ib-ndr-400"


@dataclass(frozen=True)
class IsoGpuLayouts:
    """The layouts of one scenario's GPUs (see the module docstring for the rules)."""

    scenario: Scenario
    #: the pool shape every layout uses, one instance
    pool: DecodePool
    #: instances of that shape the scenario's GPUs make
    instances: int
    prefill_budget_tokens: int
    chunk_tokens: int
    #: the link fields a disaggregated layout takes
    link: dict[str, Any]
    prefill_dispatch: str
    #: the deployment's context window override, if any (kept by every layout)
    window: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu(self) -> str:
        return self.pool.gpu

    @property
    def tp(self) -> int:
        return self.pool.tp

    @property
    def gpus(self) -> int:
        return self.instances * self.pool.gpus

    def _with(self, deployment: Any) -> Scenario:
        return self.scenario.model_copy(update={"deployment": deployment})

    def colocated(self) -> Scenario:
        whole = self.pool.model_copy(update={"instances": self.instances})
        return self._with(ColocatedDeployment(pool=whole, max_batch_tokens=self.prefill_budget_tokens, **self.window))

    def chunked(self) -> Scenario:
        whole = self.pool.model_copy(update={"instances": self.instances})
        return self._with(ChunkedDeployment(pool=whole, chunk_tokens=self.chunk_tokens, **self.window))

    def disaggregated(self, prefill: int, decode: int | None = None) -> Scenario:
        """``prefill`` prefill instances and ``decode`` (default: the rest of the n) decode instances."""
        d = self.instances - prefill if decode is None else decode
        pool = self.pool
        dep = DisaggregatedDeployment(
            prefill=PrefillPool(gpu=pool.gpu, tp=pool.tp, pp=pool.pp, instances=prefill,
                                max_batch_tokens=self.prefill_budget_tokens, dispatch=self.prefill_dispatch),
            decode=pool.model_copy(update={"instances": d}), **self.link, **self.window)
        return self._with(dep)


def iso_gpu_layouts(scenario: Scenario) -> IsoGpuLayouts:
    """The scenario's GPUs as colocated, chunked and every disaggregated P:D split."""
    from qmodel.topology import topology_named
    from qmodel.topology.base import deployment_settings

    dep = scenario.deployment
    topo = topology_named(dep.topology)
    pool = topo.decode_config(dep).model_copy(update={"instances": 1})
    if topo.has_link:
        link = {"link": dep.link, "link_sharing": dep.link_sharing, "transfer_mode": dep.transfer_mode,
                "link_bandwidth_bytes_per_s": dep.link_bandwidth_bytes_per_s, "first_token_from": dep.first_token_from}
        dispatch = dep.prefill.dispatch
    else:
        link = {"link": DEFAULT_LINK, "link_sharing": "fcfs", "transfer_mode": "layerwise"}
        dispatch = PrefillPool.model_fields["dispatch"].default
    return IsoGpuLayouts(scenario=scenario, pool=pool, instances=dep.gpus // pool.gpus,
                         prefill_budget_tokens=topo.prefill_token_budget(dep), chunk_tokens=topo.chunk_budget(dep),
                         link=link, prefill_dispatch=dispatch, window=deployment_settings(dep))


def pd_split(scenario: Scenario, prefill: int, decode: int) -> Scenario:
    """The scenario on ``prefill`` prefill and ``decode`` decode instances (module docstring)."""
    from qmodel.topology import topology_named

    dep = scenario.deployment
    if not topology_named(dep.topology).separate_prefill:
        return iso_gpu_layouts(scenario).disaggregated(prefill, decode)
    new = dep.model_copy(update={"prefill": dep.prefill.model_copy(update={"instances": prefill}),
                                 "decode": dep.decode.model_copy(update={"instances": decode})})
    return scenario.model_copy(update={"deployment": new})
