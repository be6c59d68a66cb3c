"""The :class:`Station` protocol and what every analytical station returns, so a topology can
treat them alike.

A station is a small declared model (parameters with domains, formula in its docstring) with:

* ``name``: how reports, limits and the replay call it;
* ``max_stable_rate_per_s()``: the largest total arrival rate it can sustain (rho -> 1);
* ``solve(rate_per_s, **context)``: a :class:`StationSolution` at that rate, raising
  :class:`~qmodel.errors.UnstableError` (station name, load, largest stable rate) when rho >= 1;
  ``context`` is what another station's solution feeds it at that rate (the KV link: the prefill
  batches' release process and the grid floor its readers need), none for most stations.

A station is a pure function of the rate once built; :class:`MemoizedStation` wraps one to solve
each rate once when many solvers share it (the planner's rows of plans).

Distributions are :class:`~qmodel.dist.GridDist` in seconds.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from qmodel.dist import GridDist
from qmodel.result import StationReport

__all__ = ["MemoizedStation", "Station", "StationSolution"]


@dataclass(frozen=True)
class StationSolution:
    """One station solved at one rate.

    ``delay``: the station's contribution to TTFT (prefill: queueing wait and the request's own
    batch time, kept jointly; kv_transfer: the exposed transfer time; decode: admission wait plus
    the first step, used only when the first token comes from decode; colocated/chunked: the
    whole TTFT). ``wait``: the queueing part of it alone. ``tpot``: per-request TPOT across
    requests (decode, colocated, chunked).
    """

    name: str
    utilization: float
    max_stable_rate_per_s: float
    delay: GridDist
    method: str
    exact: bool
    wait: GridDist | None = None
    tpot: GridDist | None = None
    mean_in_system: float | None = None
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    #: fraction of time the instances serve, where it is not ``utilization`` (decode: 1 - P(N = 0))
    busy_fraction: float | None = None

    def report(self) -> StationReport:
        w = self.wait or self.delay
        return StationReport(
            name=self.name,
            utilization=float(self.utilization),
            busy_fraction=None if self.busy_fraction is None else float(self.busy_fraction),
            max_stable_rate_per_s=float(self.max_stable_rate_per_s),
            mean_wait_s=float(w.mean_s),
            p90_wait_s=float(w.quantile(0.9)),
            p99_wait_s=float(w.quantile(0.99)),
            mean_in_system=None if self.mean_in_system is None else float(self.mean_in_system),
            method=self.method,
            exact=self.exact,
            notes=list(self.notes),
        )


@runtime_checkable
class Station(Protocol):
    """What a topology needs of a station (see the module doc)."""

    name: str

    def max_stable_rate_per_s(self) -> float: ...

    def solve(self, rate_per_s: float, **context: Any) -> StationSolution: ...


class MemoizedStation:
    """``station`` with ``solve(rate)`` remembered for the last ``size`` rates (a station is a pure
    function of the rate). Calls with context go straight through; every other attribute is the
    wrapped station's. Immutable: the memo is its only state."""

    __slots__ = ("station", "_memo", "_size")

    def __init__(self, station: Station, size: int = 64) -> None:
        object.__setattr__(self, "station", station)
        object.__setattr__(self, "_memo", OrderedDict())
        object.__setattr__(self, "_size", size)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.station, name)

    def solve(self, rate_per_s: float, **context: Any) -> StationSolution:
        if context:
            return self.station.solve(rate_per_s, **context)
        key = float(rate_per_s)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self.station.solve(key)
            if len(self._memo) > self._size:
                self._memo.popitem(last=False)
        return hit
