"""The :class:`Station` protocol, the :class:`StationModel` base that validates a station's declared
parameters and freezes it, and what every analytical station returns, so a topology can treat them
alike.

A station is a small declared model (parameters with domains, formula in its docstring) with:

* ``name``: how reports, limits and the replay call it (the topology's role for it, and the
  replay's station of the same name);
* ``params``: its parameters with their domains (:class:`Param`, :class:`Domain`); the base checks
  them before the station derives anything (like scipy.stats' declared distribution parameters:
  the base validates, the station implements only its formulas), so a bad value is one
  :class:`~qmodel.errors.InputError` naming the scenario path, never a NaN further on;
* ``max_stable_rate_per_s()``: the largest total arrival rate it can sustain (rho -> 1), in
  requests per second like every rate in the codebase (``rate_per_s``, the report's
  ``max_stable_rate_per_s``), hence the unit suffix;
* ``solve(rate_per_s, **context)``: a :class:`StationSolution` at that rate, raising
  :class:`~qmodel.errors.UnstableError` (station name, load, largest stable rate) when rho >= 1;
  ``context`` is what another station's solution feeds it at that rate (the KV link: the prefill
  batches' release process and the grid floor its readers need), none for most stations.

A station is a pure function of the rate once built, and immutable: :class:`StationModel` seals it
when its construction ends (a frozen dataclass, or a plain one whose derived tables are set while it
is built), and a variant is a new station (:meth:`StationModel.evolved`). :class:`MemoizedStation`
wraps one to solve each rate once when many solvers share it (the planner's rows of plans).

Distributions are :class:`~qmodel.dist.GridDist` in seconds.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from qmodel.dist import GridDist
from qmodel.errors import InputError
from qmodel.result import StationReport

__all__ = ["DISPATCHES", "Domain", "MemoizedStation", "Param", "Station", "StationModel", "StationSolution",
           "integer", "number", "one_of", "optional", "sample"]

_S = TypeVar("_S", bound="StationModel")
#: the pool dispatch policies every pool station knows
DISPATCHES = ("random", "round_robin", "least_loaded")


@dataclass(frozen=True)
class Domain:
    """The values a parameter may take: ``test(value)`` is true inside it; ``expected`` says what
    it is in an error message."""

    test: Callable[[Any], bool]
    expected: str


def number(low: float, *, above: bool = False, integer: bool = False, expected: str) -> Domain:
    """A finite number >= ``low`` (> ``low`` if ``above``), a whole one if ``integer``. NaN,
    infinities, strings and None are outside every such domain."""

    def test(v: Any) -> bool:
        if isinstance(v, (str, bytes)):
            return False
        try:
            x = float(v)
        except (TypeError, ValueError):
            return False
        return math.isfinite(x) and (x > low if above else x >= low) and (not integer or x.is_integer())

    return Domain(test, expected)


def integer(low: int, expected: str) -> Domain:
    """A whole number >= ``low``."""
    return number(low, integer=True, expected=expected)


def one_of(values: tuple[Any, ...], expected: str | None = None) -> Domain:
    """One of ``values`` (a ``Literal``'s values)."""
    return Domain(lambda v: v in values, expected or "one of " + ", ".join(map(str, values)))


def optional(domain: Domain) -> Domain:
    """None (the parameter not set), or a value in ``domain``."""
    return Domain(lambda v: v is None or domain.test(v), domain.expected)


def sample(test: Callable[[np.ndarray], bool], expected: str) -> Domain:
    """An equally weighted sample (any array-like, read flat as floats) that ``test`` accepts; a
    tuple of samples (a joint sample) is passed on as a tuple of arrays."""

    def flat(v: Any) -> np.ndarray:
        return np.asarray(v, dtype=float).ravel()

    def check(v: Any) -> bool:
        return bool(test(*map(flat, v)) if isinstance(v, tuple) else test(flat(v)))

    return Domain(check, expected)


@dataclass(frozen=True)
class Param:
    """A declared parameter: the field(s) ``names`` (a tuple for a joint condition, the values then
    passed as a tuple), their ``domain``, the scenario path an error names (``where``, ``{name}``
    being the station's name) and what the error shows of a bad value (``shown``, default the value)."""

    names: str | tuple[str, ...]
    domain: Domain
    where: str
    shown: Callable[[Any], Any] | None = None

    def check(self, station: Any) -> None:
        names = self.names
        value = getattr(station, names) if isinstance(names, str) else tuple(getattr(station, n) for n in names)
        if not self.domain.test(value):
            raise InputError(self.where.format(name=station.name), value if self.shown is None else self.shown(value),
                             self.domain.expected)


class StationModel:
    """The base of the analytical stations (a dataclass each): on construction it checks the
    declared ``params`` in order, lets the station derive its rate-independent tables
    (:meth:`prepare`), and then seals it, so the station is immutable from then on (setting an
    attribute raises :class:`dataclasses.FrozenInstanceError`; ``functools.cached_property`` still
    fills its cache). A station built as a variant of another goes through :meth:`evolved`."""

    params: ClassVar[tuple[Param, ...]] = ()

    def __post_init__(self) -> None:
        for p in type(self).params:
            p.check(self)
        self.prepare()
        object.__setattr__(self, "_sealed", True)

    def prepare(self) -> None:
        """Derive what does not depend on the rate (called once, after the parameters are checked)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_sealed", False):
            raise FrozenInstanceError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if getattr(self, "_sealed", False):
            raise FrozenInstanceError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")
        object.__delattr__(self, name)

    def evolved(self: _S, changes: Mapping[str, Any], keep: Iterable[str] | None = None) -> _S:
        """A variant of this station with the fields or derived attributes in ``changes`` replaced,
        sealed like it, for a variant that shares the tables which do not depend on ``changes``
        where rebuilding them would cost (the decode station's reserved in-flight KV, the KV link's
        per-rate releases). ``keep``: the derived attributes it shares (None: all of them); the
        caller keeps them consistent with ``changes``. The declared parameters among ``changes`` are
        checked again."""
        if keep is None:
            out = copy.copy(self)
        else:
            out = object.__new__(type(self))
            for name in [f.name for f in fields(self)] + list(keep):
                object.__setattr__(out, name, getattr(self, name))
        for name, value in changes.items():
            object.__setattr__(out, name, value)
        for p in type(self).params:
            if not changes.keys().isdisjoint((p.names,) if isinstance(p.names, str) else p.names):
                p.check(out)
        object.__setattr__(out, "_sealed", True)
        return out


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
    #: the declared parameters (:class:`StationModel` checks them)
    params: tuple[Param, ...]

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
