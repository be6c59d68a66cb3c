"""The planner's search space: candidate plans, grouped into families.

A *plan* is a concrete deployment: topology, GPU type and tensor parallelism of each pool, the
number of instances of each pool, and (disaggregated) the KV link and transfer mode, or (chunked)
the per-iteration token budget. A *family* is a plan without its instance counts; SLO attainment
is non-decreasing in every instance count within a family (more servers never lengthen a queue
under the dispatch rules used here), which is what lets the search walk a family's feasible region
by its boundary instead of solving every point.

Plans are plain frozen dataclasses (tens of thousands are enumerated; pydantic is used only for
what crosses a boundary, see :mod:`qmodel.planner.plan_result`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from qmodel.topology.base import Topology as TopologyShape

__all__ = ["Topology", "Pool", "Family", "PlanSpec", "SearchSpace", "DEFAULT_TPS"]

Topology = Literal["colocated", "chunked", "disaggregated"]

DEFAULT_TPS: tuple[int, ...] = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool: ``instances`` engines of ``tp`` GPUs of type ``gpu`` (pp = 1)."""

    gpu: str
    tp: int
    instances: int

    @property
    def gpus(self) -> int:
        return self.tp * self.instances


@dataclass(frozen=True, slots=True)
class Family:
    """A plan without instance counts (what the search walks as one unit of work).

    For colocated and chunked plans only the ``decode`` pool fields are used (the one pool).
    """

    topology: Topology
    decode_gpu: str
    decode_tp: int
    prefill_gpu: str | None = None
    prefill_tp: int | None = None
    link: str | None = None
    transfer_mode: str | None = None
    chunk_tokens: int | None = None

    @property
    def shape(self) -> TopologyShape:
        """The deployment shape's :class:`qmodel.topology.Topology` (its pools, names, keys)."""
        from qmodel.topology import topology_named

        return topology_named(self.topology)

    @property
    def separate_prefill(self) -> bool:
        """Whether plans of this family have a prefill pool of their own (two instance counts)."""
        from qmodel.topology import TOPOLOGIES

        return TOPOLOGIES[self.topology].separate_prefill

    def plan(self, n_decode: int, n_prefill: int = 0) -> "PlanSpec":
        pre = Pool(self.prefill_gpu, self.prefill_tp, n_prefill) if self.separate_prefill else None  # type: ignore[arg-type]
        return PlanSpec(self, Pool(self.decode_gpu, self.decode_tp, n_decode), pre)

    @property
    def label(self) -> str:
        return self.shape.family_label(self)


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """A concrete candidate: a family plus instance counts."""

    family: Family
    decode: Pool  # the decode pool, or the single pool of a colocated/chunked plan
    prefill: Pool | None = None

    @property
    def topology(self) -> Topology:
        return self.family.topology

    @property
    def gpus(self) -> int:
        return self.decode.gpus + (self.prefill.gpus if self.prefill else 0)

    def pools(self) -> list[tuple[str, Pool]]:
        return ([("prefill", self.prefill)] if self.prefill else []) + [("decode", self.decode)]

    @property
    def label(self) -> str:
        return self.family.shape.plan_label(self)


class SearchSpace(BaseModel):
    """What the planner may choose from. Empty GPU lists fall back to the scenario's own GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topologies: tuple[Topology, ...] = Field(default=("colocated", "chunked", "disaggregated"), min_length=1)
    gpus: tuple[str, ...] = Field(default=(), description="GPU types for colocated/chunked pools (and both disaggregated pools unless set)")
    prefill_gpus: tuple[str, ...] = Field(default=(), description="GPU types for disaggregated prefill pools")
    decode_gpus: tuple[str, ...] = Field(default=(), description="GPU types for disaggregated decode pools")
    tps: tuple[Annotated[int, Field(ge=1, le=64)], ...] = Field(default=DEFAULT_TPS, min_length=1)
    links: tuple[str, ...] = Field(default=(), description="KV links for disaggregated plans")
    transfer_modes: tuple[Literal["layerwise", "serialized"], ...] = Field(default=("layerwise",), min_length=1)
    chunk_tokens: tuple[Annotated[int, Field(ge=16)], ...] = Field(default=(512, 2048), min_length=1)
    max_instances: int = Field(default=16, ge=1, le=4096, description="per pool")
    max_gpus: int = Field(default=64, ge=1, description="per plan")

    def families(self, default_gpu: str, default_link: str) -> Iterator[Family]:
        gpus = self.gpus or (default_gpu,)
        pgpus = self.prefill_gpus or gpus
        dgpus = self.decode_gpus or gpus
        links = self.links or (default_link,)
        from qmodel.topology import topology_named

        for topo in self.topologies:
            yield from topology_named(topo).families(self, gpus, pgpus, dgpus, links)

    def instance_grid(self, fam: Family) -> Iterator[tuple[int, int]]:
        """(n_decode, n_prefill) pairs within max_instances and max_gpus (n_prefill = 0 for one pool)."""
        if not fam.separate_prefill:
            for n in range(1, min(self.max_instances, self.max_gpus // fam.decode_tp) + 1):
                yield n, 0
            return
        ptp = fam.prefill_tp or 1
        for npf in range(1, self.max_instances + 1):
            left = self.max_gpus - npf * ptp
            for nd in range(1, min(self.max_instances, left // fam.decode_tp) + 1):
                yield nd, npf

    def grid_size(self, fam: Family) -> int:
        if not fam.separate_prefill:
            return max(0, min(self.max_instances, self.max_gpus // fam.decode_tp))
        ptp = fam.prefill_tp or 1
        return sum(max(0, min(self.max_instances, (self.max_gpus - k * ptp) // fam.decode_tp))
                   for k in range(1, self.max_instances + 1))
