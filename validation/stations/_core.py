"""The replay's event kernel: a (time, sequence)-ordered heap, per-request columns, time meters.

Determinism: events are ordered by (time, insertion sequence number), so two events at the same
time always fire in the order they were scheduled; nothing reads the wall clock; the only
randomness is a seeded numpy Generator created by the engine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Sim", "Meter", "Requests"]


class Sim:
    """A minimal discrete-event loop. ``at(t, fn, arg)`` schedules ``fn(arg)`` at time ``t``."""

    __slots__ = ("heap", "seq", "now", "events")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self.seq = 0
        self.now = 0.0
        self.events = 0

    def at(self, t: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))

    def run(self) -> None:
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap:
            t, _, fn, arg = pop(heap)
            self.now = t
            fn(arg)
            n += 1
        self.events += n


class Meter:
    """Time integral of an integer count (customers in a station, busy servers), clipped to a window.

    ``area / (w1 - w0)`` is the time-average count over the measurement window [w0, w1]; the
    window excludes warm-up so Little's-law checks and utilizations are steady-state estimates.
    """

    __slots__ = ("n", "last", "area", "w0", "w1")

    def __init__(self, w0: float, w1: float) -> None:
        self.n = 0
        self.last = 0.0
        self.area = 0.0
        self.w0 = w0
        self.w1 = w1

    def add(self, t: float, delta: int) -> None:
        if self.n:
            a = self.last if self.last > self.w0 else self.w0
            b = t if t < self.w1 else self.w1
            if b > a:
                self.area += self.n * (b - a)
        self.last = t
        self.n += delta

    def mean(self) -> float:
        span = self.w1 - self.w0
        return self.area / span if span > 0 else 0.0


class Requests:
    """Per-request columns (Python lists: scalar access from the event loop is faster than numpy).

    Times are seconds; NaN marks "did not happen". ``station_in``/``station_out`` hold each
    station's entry and exit times, from which sojourns and queueing delays are computed.
    """

    def __init__(self, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
        n = len(arrival_s)
        self.n = n
        self.arrival = [float(x) for x in arrival_s]
        self.prompt = [int(x) for x in prompt]
        self.output = [int(x) for x in output]
        nan = float("nan")
        self.cached = [0] * n
        self.t_first = [nan] * n
        self.t_last = [nan] * n
        self.dropped = [False] * n
        # station name -> (entry, service start, exit) lists, created on demand
        self.marks: dict[str, tuple[list[float], list[float], list[float]]] = {}

    def station(self, name: str) -> tuple[list[float], list[float], list[float]]:
        if name not in self.marks:
            nan = float("nan")
            self.marks[name] = ([nan] * self.n, [nan] * self.n, [nan] * self.n)
        return self.marks[name]
