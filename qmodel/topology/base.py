"""A deployment shape: which stations it builds and how their solutions make TTFT and TPOT.

A :class:`Topology` owns, for one shape (colocated, chunked, disaggregated, and room for more):

* ``roles``: the stations it is made of, by role (``"pool"``, or ``"prefill"``, ``"kv_transfer"``,
  ``"decode"``); the replay wires stations under the same names;
* :meth:`build_station`: one station from the scenario and its resolved inputs
  (:class:`qmodel.build.Resolved`), rate-independent, built once per solver;
* :meth:`limits`: the largest stable total rate per station (the solver's stability check);
* :meth:`compose`: the stations solved at one rate, composed into TTFT and TPOT laws and the SLO
  attainment with its bracket (a :class:`Composition`);
* :meth:`binding_part`, :meth:`link_report`: what the binding explanation adds for this shape;
* :meth:`station_keys`: what each station depends on in a planner's plan (its cache keys).

A topology instance belongs to one :class:`~qmodel.engine.Solver` (it may cache values that depend
on that solver's resolved inputs); the solver passes itself as the context, from which the topology
reads ``scenario``, ``resolved`` and ``station(role)``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from qmodel.dist import GridDist
from qmodel.stations.base import Station, StationSolution

if TYPE_CHECKING:
    from qmodel.build import Resolved
    from qmodel.result import LinkReport
    from qmodel.scenario import Scenario

__all__ = ["Composition", "Topology"]


@dataclasses.dataclass(frozen=True)
class Composition:
    """The solved pieces at one rate (for the TUI, the validation harness and --explain).

    Disaggregated ``ttft`` and ``tpot`` are :class:`~qmodel.dist.LazyGridDist`: the attainments come
    from the terms directly (:func:`~qmodel.dist.sum_cdf`), and a goodput search, which reads
    nothing else at most of its rates, never pays for the composed laws there.
    """

    rate_per_s: float
    stations: list[StationSolution]
    ttft: GridDist
    tpot: GridDist
    ttft_attainment: float
    tpot_attainment: float
    attainment: float
    bounds: tuple[float, float]


class Topology(ABC):
    """One deployment shape (see the module doc)."""

    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]

    @abstractmethod
    def build_station(self, role: str, scenario: Scenario, resolved: Resolved) -> Station:
        """The station playing ``role``, built from the scenario and its resolved inputs."""

    def limits(self, solver: Any) -> list[tuple[float, str]]:
        """(largest stable total rate, station name) per station."""
        return [(float(s.max_stable_rate_per_s()), s.name) for s in (solver.station(r) for r in self.roles)]

    @abstractmethod
    def compose(self, solver: Any, rate: float, laws: bool) -> Composition:
        """The stations solved at ``rate`` (already checked stable) and composed (see
        :meth:`qmodel.engine.Solver.compose` for ``laws``)."""

    def binding_part(self, solver: Any, c: Composition, metric: str) -> str | None:
        """The largest part of ``metric`` ("TTFT" or "TPOT") at ``c`` in words, where this shape
        can split the metric into parts (None: the station's own account stands)."""
        return None

    def link_report(self, solver: Any, c: Composition) -> LinkReport | None:
        """The KV link's report at ``c`` (None: no link)."""
        return None

    @staticmethod
    @abstractmethod
    def station_keys(plan: Any) -> dict[str, tuple]:
        """Role -> what that station depends on in a planner ``plan`` (beyond the scenario)."""
