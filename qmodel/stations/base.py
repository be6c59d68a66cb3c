"""What every analytical station returns, so composition can treat them alike.

A station is a small declared model (parameters with domains, formula in its docstring) with:

* ``max_stable_rate_per_s()``: the largest total arrival rate it can sustain (rho -> 1);
* ``solve(rate_per_s)``: a :class:`StationSolution` at that rate, raising
  :class:`~qmodel.errors.UnstableError` (station name, load, largest stable rate) when rho >= 1.

Distributions are :class:`~qmodel.dist.GridDist` in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qmodel.dist import GridDist
from qmodel.result import StationReport

__all__ = ["StationSolution"]


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
