"""Replay KV-transfer stage: per-prefill-instance link paths, decode-side reservation first.

A request enters when its KV becomes transferable (``serialized``: when its prefill batch ends;
``layerwise``: when the first layer of its batch is computed, ``t_s + T/l`` for a batch started at
``t_s`` taking ``T`` over ``l`` layers). It first **reserves KV on a decode instance**
(:meth:`DecodeStation.reserve`); while no instance can, it waits in one FCFS back-pressure queue
(strict head-of-line), retried whenever decode memory is released. Then it is sent over the link
path of the prefill instance that computed it (bandwidth ``C``, base latency ``d``):

* ``dedicated``: no contention, link time ``X/C``;
* ``fcfs``: one transfer at a time per path, FCFS;
* ``fair``: processor sharing among the concurrent transfers of a path, handled exactly with a
  virtual clock ``V`` (each active transfer receives ``C/n`` while n are active; a transfer of X
  bytes started at virtual time V0 completes when V reaches V0 + X; every arrival or departure
  reschedules the path's next completion).

Layer-wise overlap: layer j's bytes ``X/l`` can leave once layer j is computed, at
``ready_j = t_s + (j+1) T/l``. A transfer started at ``s >= ready_0`` with the whole link then ends
at f = max_j(ready_j + (l-j) X/(lC)) v (s + X/C) = max(s + X/C, t_s + T + X/(lC)) (the recursion
f_j = max(f_{j-1}, ready_j) + X/(lC) over layers; its maximum is at an end because ready_j is
linear in j). So exposed time with ``dedicated`` is max(X/(Cl), X/C - T(1-1/l)) (design §2.8), and
``fcfs`` holds the path until f, exactly (one transfer at a time, idle while it waits for layers).
Under ``fair`` the link serves a transfer's bytes as if they were all available once its first
layer is (bytes not yet computed never hold the link idle) and the end is clamped to
``t_s + T + X/(lC)``: exact when either the link or the compute is the bottleneck throughout,
a slight underestimate of link contention in between (documented approximation). The base
latency ``d`` is added after the last byte and does not hold the path.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from ._core import Meter, Requests, Sim
from .decode import DecodeStation

__all__ = ["KVTransferStation"]


class KVTransferStation:
    """KV handoff from prefill to decode (see module docstring)."""

    name = "kv_transfer"

    def __init__(self, sim: Sim, req: Requests, n_paths: int, bandwidth_bytes_per_s: float, latency_s: float,
                 sharing: str, decode: DecodeStation, on_done: Callable[[int], None],
                 window: tuple[float, float]) -> None:
        self.sim, self.req = sim, req
        self.C = float(bandwidth_bytes_per_s)
        self.lat = float(latency_s)
        self.sharing = sharing
        self.decode = decode
        self.on_done = on_done
        self.path: dict[int, int] = {}
        self.bytes: dict[int, float] = {}
        self.floor: dict[int, float] = {}
        self.backlog: deque[int] = deque()
        # fcfs
        self.fq: list[deque[int]] = [deque() for _ in range(n_paths)]
        self.fbusy = [False] * n_paths
        # fair (processor sharing with a virtual clock per path)
        self.V = [0.0] * n_paths
        self.vlast = [0.0] * n_paths
        self.active: list[list[tuple[float, int]]] = [[] for _ in range(n_paths)]
        self.pver = [0] * n_paths
        self.in_sys = Meter(*window)
        self.busy_m = Meter(*window)   # paths transmitting (dedicated: concurrent transfers)
        self.bytes_sent = 0.0
        self.entry, self.start_t, self.exit = req.station(self.name)

    def enter(self, arg: tuple[int, int, float, float]) -> None:
        """``arg`` = (request, path, bytes, earliest completion before latency)."""
        r, p, x, floor = arg
        t = self.sim.now
        self.entry[r] = t
        self.in_sys.add(t, 1)
        self.path[r] = p
        self.bytes[r] = x
        self.floor[r] = floor
        if self.backlog or not self._try_start(r):
            self.backlog.append(r)

    def retry(self) -> None:
        """Decode memory was released: start waiting transfers in FCFS order while they fit."""
        bl = self.backlog
        while bl and self._try_start(bl[0]):
            bl.popleft()

    def _try_start(self, r: int) -> bool:
        if self.decode.reserve(r) < 0:
            return False
        t = self.sim.now
        self.start_t[r] = t
        p = self.path[r]
        x = self.bytes[r]
        self.bytes_sent += x
        if self.sharing == "dedicated":
            self.busy_m.add(t, 1)
            self.sim.at(t + x / self.C, self._dedicated_done, r)
        elif self.sharing == "fcfs":
            self.fq[p].append(r)
            if not self.fbusy[p]:
                self._fcfs_next(p)
        else:
            self._ps_advance(p, t)
            act = self.active[p]
            if not act:
                self.busy_m.add(t, 1)
            heapq.heappush(act, (self.V[p] + x, r))
            self._ps_schedule(p)
        return True

    # ---- completion --------------------------------------------------------------------
    def _link_done(self, r: int) -> None:
        """The link finished sending r's bytes now; finish after the layer clamp and the latency."""
        t = self.sim.now
        end = max(t, self.floor[r]) + self.lat
        if end > t:
            self.sim.at(end, self._finish, r)
        else:
            self._finish(r)

    def _finish(self, r: int) -> None:
        t = self.sim.now
        self.exit[r] = t
        self.in_sys.add(t, -1)
        del self.path[r], self.bytes[r], self.floor[r]
        self.on_done(r)

    def _dedicated_done(self, r: int) -> None:
        self.busy_m.add(self.sim.now, -1)
        self._link_done(r)

    def _fcfs_next(self, p: int) -> None:
        q = self.fq[p]
        t = self.sim.now
        if q:
            r = q.popleft()
            if not self.fbusy[p]:
                self.busy_m.add(t, 1)
            self.fbusy[p] = True
            # The path is held until the last byte leaves: with layer-wise transfer that is
            # max(start + X/C, batch end + X/(l C)) (the per-layer recursion, exactly).
            end = t + self.bytes[r] / self.C
            if self.floor[r] > end:
                end = self.floor[r]
            self.sim.at(end, self._fcfs_done, (p, r))
        elif self.fbusy[p]:
            self.fbusy[p] = False
            self.busy_m.add(t, -1)

    def _fcfs_done(self, arg: tuple[int, int]) -> None:
        p, r = arg
        self._link_done(r)
        self._fcfs_next(p)

    def _ps_advance(self, p: int, t: float) -> None:
        n = len(self.active[p])
        if n:
            self.V[p] += (t - self.vlast[p]) * self.C / n
        self.vlast[p] = t

    def _ps_schedule(self, p: int) -> None:
        self.pver[p] += 1
        act = self.active[p]
        if act:
            dt = (act[0][0] - self.V[p]) * len(act) / self.C
            self.sim.at(self.sim.now + max(dt, 0.0), self._ps_event, (p, self.pver[p]))

    def _ps_event(self, arg: tuple[int, int]) -> None:
        p, ver = arg
        if ver != self.pver[p]:
            return
        t = self.sim.now
        self._ps_advance(p, t)
        act = self.active[p]
        done = []
        # Floating-point guard: the head is due now by construction; others tied within rounding.
        while act and act[0][0] <= self.V[p] * (1 + 1e-12) + 1e-9:
            tag, r = heapq.heappop(act)
            if tag > self.V[p]:
                self.V[p] = tag
            done.append(r)
        if not done:  # the scheduled head is due now; rounding left it a hair short
            tag, r = heapq.heappop(act)
            self.V[p] = tag
            done.append(r)
        if not act:
            self.busy_m.add(t, -1)
        self._ps_schedule(p)
        for r in done:
            self._link_done(r)
