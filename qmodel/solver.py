"""The solver: a scenario's stations, its stability check, and its answer at any rate.

:class:`Solver` resolves a scenario once (:func:`qmodel.build.resolve`), asks its
:class:`~qmodel.topology.Topology` (:func:`~qmodel.topology.topology_for`) for the stations
(rate-independent, built once, or passed in prebuilt through ``stations=``), and at each rate
checks stability and lets the topology compose the stations' solutions into TTFT, TPOT and the
SLO attainment (the formulas per shape: :mod:`qmodel.topology.single_pool`,
:mod:`qmodel.topology.disaggregated`). :meth:`Solver.solve` turns that into a
:class:`~qmodel.result.Result` with the binding constraint and the validity band.

Stability is checked before anything is solved: a rate at or above any station's limit raises
:class:`~qmodel.errors.UnstableError` naming that station and the largest stable rate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from qmodel.build import Resolved, resolve
from qmodel.dist import GridDist
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.result import DistSummary, LinkReport, Result, Validity
from qmodel.scenario import Scenario, scenario_sha256
from qmodel.stations.base import Station, StationSolution
from qmodel.topology import Composition, Topology, topology_for

__all__ = ["Solver", "solve", "Composition"]

_RECENT = 4  # compositions kept by Solver.attainment (a goodput search's bracket ends)
#: below this fraction of the stability limit the system is idle to within the grids' resolution
#: (every queueing probability is of order the load, < 1e-12 against the 1e-9 tail the grids keep):
#: the stations are solved at this load instead, so a rate like 1e-320 req/s, whose reciprocals
#: overflow, gets the idle system's answer (see docs/methods.md, "Light load")
LIGHT_LOAD = 1e-12


class Solver:
    """Resolve a scenario once, then solve it at any rate (goodput calls :meth:`attainment` ~15 times).

    ``resolved``: the scenario's resolved inputs, when the caller assembled them (the planner, from
    cached pools; they must describe this scenario). ``stations``: prebuilt stations by role (see
    :attr:`Topology.roles`), shared with other solvers whose stations depend on the same inputs
    (the planner's and the TUI's caches); the roles not given are built on first use.
    """

    def __init__(self, scenario: Scenario, resolved: Resolved | None = None,
                 stations: Mapping[str, Station] | None = None) -> None:
        self.scenario = scenario
        self.resolved: Resolved = resolve(scenario) if resolved is None else resolved
        self.topology: Topology = topology_for(scenario)
        self._built: dict[str, Station] = {}
        for role, st in (stations or {}).items():
            if role not in self.topology.roles:
                raise ValueError(f"station role {role!r} is not one of {self.topology.name}'s {self.topology.roles}")
            self._built[role] = st
        self._recent: dict[float, Composition] = {}

    # ---- stations (rate-independent, built once) ----------------------------------------------
    def station(self, role: str) -> Station:
        """The station playing ``role`` (built on first use unless passed in)."""
        st = self._built.get(role)
        if st is None:
            st = self._built[role] = self.topology.build_station(role, self.scenario, self.resolved)
        return st

    @property
    def stations(self) -> dict[str, Station]:
        """Every station by role (building those not yet built)."""
        return {role: self.station(role) for role in self.topology.roles}

    @property
    def built_stations(self) -> dict[str, Station]:
        """The stations built (or passed in) so far, by role, for another solver to share."""
        return dict(self._built)

    @property
    def transfer_station(self):
        """The KV-transfer station (disaggregated deployments)."""
        return self.station("kv_transfer")

    @property
    def pool_station(self):
        """The colocated or chunked station (single-pool deployments: its role is the shape's name)."""
        return self.station(self.topology.name)

    # the roles under the attribute names tests and older callers read
    _prefill = property(lambda self: self.station("prefill"))
    _transfer = transfer_station
    _decode = property(lambda self: self.station("decode"))
    _single_pool = pool_station

    # ---- stability ---------------------------------------------------------------------------
    @cached_property
    def _limits(self) -> list[tuple[float, str]]:
        """(largest stable total rate, name) per station (:meth:`Topology.limits`): rate-independent,
        so computed once."""
        return self.topology.limits(self)

    @property
    def served_fraction(self) -> float:
        """The share of offered requests the deployment serves: 1 less those refused for exceeding the
        context window (``workload.context_overflow = reject``); the stations see the offered rate
        times this (docs/methods.md, "Context window")."""
        return 1.0 - self.resolved.rejected_fraction

    def served_limits(self) -> list[tuple[float, str]]:
        """(largest stable served rate, station name) per station: the rates the stations see."""
        return list(self._limits)

    def station_limits(self) -> list[tuple[float, str]]:
        """(largest stable total offered rate, station name) per station (computed once)."""
        s = self.served_fraction
        return list(self._limits) if s == 1.0 else [(lim / s, name) for lim, name in self._limits]

    def max_stable_rate(self) -> tuple[float, str]:
        """(largest stable total offered rate, the station that sets it)."""
        return min(self.station_limits())

    def _check_stable(self, rate: float) -> None:
        for lim, name in self.station_limits():
            if rate >= lim:
                raise UnstableError(name, rate / lim if lim > 0 else math.inf, rate, lim)

    @cached_property
    def tbt_factors(self):
        """The (L - 1)/L factor law that turns TPOT into TBT (:func:`qmodel.tbt.tbt_factors`)."""
        from qmodel.tbt import tbt_factors

        return tbt_factors(self.resolved.lengths.output)

    def tpot_attainment(self, tpot: GridDist) -> float:
        """P(the TPOT target is met) from the TPOT law: P(TPOT <= tpot_s), or with
        ``slo.tpot_definition = per_token`` P(TBT <= tpot_s) (:func:`qmodel.tbt.tbt_cdf`)."""
        slo = self.scenario.slo
        if slo.tpot_definition == "per_token":
            from qmodel.tbt import tbt_cdf

            return tbt_cdf(tpot, float(slo.tpot_s), self.tbt_factors)
        return float(tpot.cdf(slo.tpot_s))

    # ---- solving -----------------------------------------------------------------------------
    def compose(self, rate: float, laws: bool = False) -> Composition:
        """The stations solved and composed at ``rate`` (:meth:`Topology.compose`). ``laws``: build
        the TTFT and TPOT laws (and the link's wait law) now and read the attainments from them, for
        a caller that reads them all (:meth:`solve`); by default the attainments come from the terms
        (:func:`~qmodel.dist.sum_cdf`) and the laws are built on first use (a goodput search reads
        only the attainments). The two agree to round-off and trimming (< 1e-12)."""
        if not (rate > 0 and math.isfinite(rate)):
            raise InputError("rate", rate, "must be a positive finite number of requests per second")
        self._check_stable(rate)
        served = self.served_fraction
        rate = max(rate * served, LIGHT_LOAD * min(self._limits)[0])
        if self.resolved.arrival_law is not None:
            from qmodel.trace_law import compose_windows

            c = compose_windows(self, rate, laws)  # a trace: its windows' rates mixed
        else:
            c = self.topology.compose(self, rate, laws)
        if served == 1.0:
            return c
        # a refused request misses the SLO: every attainment is over the offered requests
        return dataclasses.replace(c, attainment=c.attainment * served, ttft_attainment=c.ttft_attainment * served,
                                   tpot_attainment=c.tpot_attainment * served,
                                   bounds=(c.bounds[0] * served, c.bounds[1] * served))

    def latency_terms(self, sp: StationSolution, st: StationSolution,
                      sd: StationSolution) -> tuple[list[GridDist], list[GridDist]]:
        """(TTFT terms, TPOT terms) of a disaggregated deployment from its prefill, link and decode
        solutions (:meth:`DisaggregatedTopology.latency_terms`)."""
        return self.topology.latency_terms(self, sp, st, sd)

    def solve_link(self, rate: float, sp: StationSolution, sd: StationSolution,
                   bandwidth_bytes_per_s: float) -> StationSolution:
        """The KV link at ``rate`` as :meth:`compose` solves it, with each path's bandwidth set to
        ``bandwidth_bytes_per_s`` (the binding diagnosis's bandwidth search)."""
        return self.topology.solve_link(self, rate, sp, sd, bandwidth_bytes_per_s=bandwidth_bytes_per_s)

    def attainment(self, rate: float) -> float:
        """Attainment at ``rate``; 0 where the system is unstable.

        Within 1% of the stability limit a chain may refuse to truncate (NumericalError); latency
        there is unbounded for any practical SLO, so that too counts as 0 rather than an answer.
        """
        try:
            c = self.compose(rate)
        except UnstableError:
            return 0.0
        except NumericalError:
            if rate >= 0.99 * self.max_stable_rate()[0]:
                return 0.0
            raise
        # goodput asks for the binding constraint at the rate it settles on, one of these
        self._recent[rate] = c
        if len(self._recent) > _RECENT:
            del self._recent[next(iter(self._recent))]
        return c.attainment

    def recent_composition(self, rate: float) -> Composition | None:
        """The composition :meth:`attainment` solved at exactly ``rate``, if among the last few."""
        return self._recent.get(rate)

    def solve(self, rate: float | None = None, composition: Composition | None = None,
              link: bool = True) -> Result:
        """The :class:`~qmodel.result.Result` at ``rate`` (default: the scenario's own).
        ``composition``: the :meth:`compose` of this rate, when the caller has it already (the TUI
        composes first for its plots), reused instead of composing again. ``link=False`` leaves
        the KV link's report out (None): its bandwidth search re-solves the link several times, and
        a caller that does not show it (the planner's ranked rows) need not pay for it."""
        if rate is None:
            rate = self.resolved.base_rate_per_s
            if rate is None:
                if self.scenario.workload.arrivals.kind == "closed":
                    raise InputError("workload.arrivals.kind", "closed", "a closed loop's rate is solved for: "
                                     "qmodel.closed.solve_closed (what qmodel solve calls), or pass a rate")
                raise InputError("workload.arrivals.rate_per_s", None, "set a rate (or pass --rate) to solve at")
        c = self.compose(float(rate), laws=True) if composition is None else composition
        return Result(
            scenario=self.scenario.name,
            topology=self.topology.name,
            rate_per_s=float(rate),
            ttft=DistSummary(**c.ttft.summary()),
            tpot=DistSummary(**c.tpot.summary()),
            attainment=c.attainment,
            attainment_bounds=c.bounds,
            ttft_attainment=c.ttft_attainment,
            tpot_attainment=c.tpot_attainment,
            stations=[s.report() for s in c.stations],
            binding=self.binding(c),
            link=self._link_report(c) if link else None,
            gpus=self.resolved.gpus,
            inputs_sha256=self._inputs_sha256,
            perf_sha256=self.resolved.perf_sha256,
            validity=self.validity(c.rate_per_s / self.served_fraction),
            tbt=self._tbt(c),
            rejected_fraction=self.resolved.rejected_fraction or None,
            warnings=list(self.resolved.warnings)
            + [n for s in c.stations for n in s.notes if n.startswith("warning")],
        )

    def _tbt(self, c: Composition) -> DistSummary | None:
        """TBT's summary (:mod:`qmodel.tbt`) when the scenario names a TPOT definition, else None."""
        if self.scenario.slo.tpot_definition is None:
            return None
        from qmodel.tbt import tbt_summary

        return DistSummary(**tbt_summary(c.tpot, self.tbt_factors))

    @cached_property
    def _inputs_sha256(self) -> str:
        return scenario_sha256(self.scenario)  # a JSON dump and hash: once per solver, not per rate

    # ---- explanations ------------------------------------------------------------------------
    def binding(self, c: Composition) -> str:
        """The binding constraint at ``c`` in words (:func:`qmodel.binding.diagnose`)."""
        from qmodel.binding import diagnose

        return diagnose(self, c)

    def validity(self, rate: float) -> Validity:
        """Expected agreement with the replay at ``rate``: the error bands fitted on the validation
        corpus for this topology, load and arrivals, and the envelope flag (:mod:`qmodel.validity`)."""
        from qmodel.validity import validity_of

        return validity_of(self.resolved, self.topology.name, rate / self.max_stable_rate()[0])

    def _link_report(self, c: Composition) -> LinkReport | None:
        return self.topology.link_report(self, c)


def solve(scenario: Scenario | str | Path, rate_per_s: float | None = None) -> Result:
    """Solve a scenario (or the scenario file at a path) at its own rate (or ``rate_per_s``)."""
    from qmodel.source import as_scenario

    return Solver(as_scenario(scenario)).solve(rate_per_s)
