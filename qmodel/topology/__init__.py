"""Deployment shapes (:class:`Topology`): which stations, how they compose, their limits.

* :mod:`~qmodel.topology.base`  :class:`Topology` (the protocol every shape implements) and
  :class:`Composition` (the solved pieces at one rate);
* :mod:`~qmodel.topology.single_pool`  colocated and chunked (one pool, one station);
* :mod:`~qmodel.topology.disaggregated`  prefill pool -> KV link -> decode pool.

:func:`topology_for` is the one place a scenario's ``deployment.topology`` string becomes behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qmodel.errors import InputError
from qmodel.topology.base import Composition, Topology
from qmodel.topology.disaggregated import DisaggregatedTopology
from qmodel.topology.single_pool import ChunkedTopology, ColocatedTopology

if TYPE_CHECKING:
    from qmodel.scenario import Scenario

__all__ = ["ChunkedTopology", "ColocatedTopology", "Composition", "DisaggregatedTopology", "TOPOLOGIES",
           "Topology", "topology_for", "topology_named"]

#: name -> the class implementing that deployment shape
TOPOLOGIES: dict[str, type[Topology]] = {t.name: t for t in (ColocatedTopology, ChunkedTopology, DisaggregatedTopology)}


def topology_named(name: str) -> Topology:
    """A fresh :class:`Topology` for the shape called ``name``."""
    cls = TOPOLOGIES.get(name)
    if cls is None:
        raise InputError("deployment.topology", name, f"must be one of {', '.join(TOPOLOGIES)}")
    return cls()


def topology_for(scenario: Scenario) -> Topology:
    """A fresh :class:`Topology` for ``scenario``'s deployment (one per solver: it may cache)."""
    return topology_named(scenario.deployment.topology)
