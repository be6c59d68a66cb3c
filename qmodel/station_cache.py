"""Solvers of related scenarios sharing the stations they have in common (goodput's sensitivities).

A station is built from part of a scenario and is then a pure function of the rate. Two scenarios
that differ only where a station does not read get the *same* station, and with it every rate-
independent precomputation (the prefill chain's batch law, the decode pool's saturated schedule)
and, where the topology solves it at the rate alone (:attr:`qmodel.topology.Topology.memo_roles`:
the prefill station, a single pool), through :class:`~qmodel.stations.base.MemoizedStation`,
every solution already computed at a rate. The elasticities perturb one input at a time (an SLO target, one pool's instances or TP, the
link), so most perturbed scenarios share most stations with the base: an SLO change shares all of
them, a decode change shares the prefill station, and searches whose stability limit did not move
probe the same rates (half load, 0.75, ...) the base search solved.

What a station reads (:func:`station_key`): the whole scenario except its name, its SLO, the
arrival rate (which enters ``solve(rate)`` only) and the deployment fields its topology declares
unread for that role (:attr:`qmodel.topology.Topology.unread_fields`); anything not declared
unread is taken as read, so an undeclared dependence can only cost a rebuild, never share a
station wrongly. Answers are bit-identical to fresh solvers (tests/test_station_cache.py).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from qmodel.scenario import Scenario
from qmodel.stations.base import MemoizedStation, Station

if TYPE_CHECKING:
    from qmodel.build import Resolved, WorkloadParts
    from qmodel.solver import Solver

__all__ = ["StationCache", "station_key"]


def _digest(d: Any) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _stations_part(dump: dict[str, Any]) -> dict[str, Any]:
    """The scenario's JSON less its name, its SLO and its arrival rate (what no station reads)."""
    d = {k: v for k, v in dump.items() if k not in ("name", "slo")}
    workload = dict(d["workload"])
    workload["arrivals"] = {k: v for k, v in workload["arrivals"].items() if k != "rate_per_s"}
    d["workload"] = workload
    return d


def station_key(scenario: Scenario, role: str, dump: dict[str, Any] | None = None) -> str:
    """Hash of what the station playing ``role`` is built from (see the module doc).
    ``dump``: ``scenario.model_dump(mode="json")`` when the caller has it (it is not modified)."""
    from qmodel.topology import topology_for

    d = _stations_part(scenario.model_dump(mode="json") if dump is None else dump)
    unread = set(topology_for(scenario).unread_fields.get(role, ()))
    d["deployment"] = {k: v for k, v in d["deployment"].items() if k not in unread}
    return f"{role}:{_digest(d)}"


def _remember(table: OrderedDict, key: str, value: Any, size: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > size:
        table.popitem(last=False)


class StationCache:
    """Builds :class:`~qmodel.solver.Solver` s whose stations are shared by :func:`station_key`
    (memoised per rate in the topology's ``memo_roles``). Resolution is shared too: a scenario
    that differs from an earlier one only in its name, SLO or arrival rate reuses that one's
    :class:`~qmodel.build.Resolved` (its rate replaced, as :func:`qmodel.build.resolve_workload`
    computes it), and one with the same model, workload and context window reuses the workload half. ``size``:
    stations kept (least recently used dropped first); ``memo_rates``: solutions each memoised
    station keeps (a goodput search probes 5-15 rates; a prefill solution is up to a few hundred kB)."""

    def __init__(self, size: int = 64, memo_rates: int = 16) -> None:
        self._memo_rates = memo_rates
        self._stations: OrderedDict[str, Station] = OrderedDict()
        self._workloads: OrderedDict[str, tuple[Any, WorkloadParts]] = OrderedDict()
        self._resolved: OrderedDict[str, Resolved] = OrderedDict()
        self._size = size

    def _workload(self, scenario: Scenario, dump: dict[str, Any]) -> tuple[Any, WorkloadParts]:
        from qmodel.build import resolve_workload
        from qmodel.registry import load_catalog

        # the length mix is fitted to the context window, the one deployment field the workload reads
        key = _digest([dump["model"], dump["workload"], dump["deployment"].get("max_context_tokens")])
        hit = self._workloads.get(key)
        if hit is None:
            model = load_catalog().model(scenario.model)
            hit = (model, resolve_workload(scenario, model))
        _remember(self._workloads, key, hit, 8)
        return hit

    def resolved(self, scenario: Scenario, dump: dict[str, Any] | None = None) -> Resolved:
        """``qmodel.build.resolve(scenario)``, from the pieces already resolved where they agree."""
        import dataclasses

        from qmodel.build import resolve
        from qmodel.workload import arrival_stats

        dump = scenario.model_dump(mode="json") if dump is None else dump
        key = _digest(_stations_part(dump))
        hit = self._resolved.get(key)
        if hit is not None:
            # the key holds every arrival field but the rate, so the SCV and a trace's windows agree
            rate, _ = arrival_stats(scenario.workload)
            self._resolved.move_to_end(key)
            return dataclasses.replace(hit, scenario=scenario, base_rate_per_s=rate)
        model, workload = self._workload(scenario, dump)
        r = resolve(scenario, model=model, workload=workload)
        _remember(self._resolved, key, r, 8)
        return r

    def solver(self, scenario: Scenario) -> Solver:
        """A solver of ``scenario`` with every station it shares with an earlier one reused."""
        from qmodel.solver import Solver
        from qmodel.topology import topology_for

        dump = scenario.model_dump(mode="json")
        resolved = self.resolved(scenario, dump)
        topology = topology_for(scenario)
        stations: dict[str, Station] = {}
        for role in topology.roles:
            key = station_key(scenario, role, dump)
            st = self._stations.get(key)
            if st is None:
                st = topology.build_station(role, scenario, resolved)
                if role in topology.memo_roles:
                    st = MemoizedStation(st, self._memo_rates)
            _remember(self._stations, key, st, self._size)
            stations[role] = st
        return Solver(scenario, resolved, stations=stations)

    def goodput_rps(self, scenario: Scenario) -> float:
        """:func:`qmodel.goodput.goodput`'s figure for ``scenario`` by :meth:`solver` (the search alone:
        no binding explanation or prices)."""
        from qmodel.goodput import goodput_search

        solver = self.solver(scenario)
        lam_max, _ = solver.max_stable_rate()
        return goodput_search(solver.attainment, lam_max, scenario.slo.attainment_goal)[0]
