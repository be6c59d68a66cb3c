"""Replay KV-transfer stage: per-prefill-instance link paths, decode-side reservation first.

The requests of a prefill batch become transferable together (``serialized``: when the batch
ends; ``layerwise``: when its first layer is computed, ``t_s + T/l`` for a batch started at ``t_s``
taking ``T`` over ``l`` layers; layer j is ready at ``ready_j = t_s + (j+1) T/l``). Each first
**reserves KV on a decode instance** (:meth:`DecodeStation.reserve`); while none can, it waits in
one FCFS back-pressure queue (strict head-of-line), retried whenever decode memory is released.
Then it is sent over the link path of its prefill instance (bandwidth ``C``, base latency ``d``
added after the last byte, not holding the path). A serialized transfer is the case l = 1.

* ``dedicated``: no contention. A transfer of X bytes started at ``s`` ends at
  f = max(s + X/C, t_s + T + X/(lC)): the per-layer recursion f_j = max(f_{j-1}, ready_j) + X/(lC)
  has its maximum at an end because ready_j is linear in j. So the exposed time is
  max(X/(Cl), X/C - T(1-1/l)) (docs/methods.md, "Stations": kv_transfer).
* ``fcfs``: one chunk at a time per path, FCFS by readiness. The requests of a batch that reserved
  together form a *group* whose layer-j chunks (all ready at ready_j) leave together in batch
  order; groups are served FCFS and a group holds the path until its last chunk. With
  G = sum X/(lC) (one layer of the group) and start s, the last layer leaves at
  F = max(s + lG, t_s + T + G) (the same recursion over groups of chunks), and request r of the
  group ends at F - G + sum_{i<=r} X_i/(lC). Exact for this discipline; for l = 1 it is plain
  request-by-request FCFS. A request that had to wait for decode memory is a group of one.
* ``fair``: processor sharing among the concurrent transfers of a path, handled exactly with a
  virtual clock ``V`` (each active transfer receives ``C/n`` while n are active; a transfer of X
  bytes started at virtual time V0 completes when V reaches V0 + X; every arrival or departure
  reschedules the path's next completion). With layer-wise transfer the bytes are served as if
  all were available once the first layer is (bytes not yet computed never hold the link idle)
  and the end is clamped to ``t_s + T + X/(lC)``: exact when either the link or the compute is
  the bottleneck throughout, a slight underestimate of contention in between (documented
  approximation).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from .core import Meter, Requests, Sim
from .decode import DecodeStation

__all__ = ["KVTransferStation"]


class KVTransferStation:
    """KV handoff from prefill to decode (see module docstring)."""

    name = "kv_transfer"

    def __init__(self, sim: Sim, req: Requests, n_paths: int, bandwidth_bytes_per_s: float, latency_s: float,
                 sharing: str, layers: int, decode: DecodeStation, on_done: Callable[[int], None],
                 window: tuple[float, float]) -> None:
        self.sim, self.req = sim, req
        self.C = float(bandwidth_bytes_per_s)
        self.lat = float(latency_s)
        self.sharing = sharing
        self.layers = max(1, int(layers))  # 1 for serialized transfers (everything ready at once)
        self.decode = decode
        self.on_done = on_done
        self.path: dict[int, int] = {}
        self.bytes: dict[int, float] = {}
        self.bend: dict[int, float] = {}   # end of the request's prefill batch (last layer computed)
        self.backlog: deque[int] = deque()
        # fcfs: FCFS queue of transfer groups per path
        self.fq: list[deque[tuple[list[int], float]]] = [deque() for _ in range(n_paths)]
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

    def enter_batch(self, arg: tuple[int, float, list[tuple[int, float]]]) -> None:
        """The requests of one prefill batch become transferable now.

        ``arg`` = (path, batch end time, [(request, bytes), ...] in batch order). Each reserves decode
        KV in FCFS order; the first that cannot, and every later one, waits in the back-pressure
        queue. Under ``fcfs`` the ones that reserved form one transfer group (their layer chunks
        interleave on the path, see the module docstring).
        """
        p, t_end, items = arg
        t = self.sim.now
        group: list[int] = []
        for r, x in items:
            self.entry[r] = t
            self.in_sys.add(t, 1)
            self.path[r] = p
            self.bytes[r] = x
            self.bend[r] = t_end
            if self.backlog or not self._reserve(r):
                self.backlog.append(r)
            elif self.sharing == "fcfs":
                group.append(r)
            else:
                self._start_single(r)
        if group:
            self._fcfs_push(p, group, t_end)

    def retry(self) -> None:
        """Decode memory was released: start waiting transfers in FCFS order while they fit."""
        bl = self.backlog
        while bl and self._reserve(bl[0]):
            r = bl.popleft()
            if self.sharing == "fcfs":
                self._fcfs_push(self.path[r], [r], self.bend[r])
            else:
                self._start_single(r)

    def _reserve(self, r: int) -> bool:
        if self.decode.reserve(r) < 0:
            return False
        t = self.sim.now
        self.start_t[r] = t
        if self.in_sys.w0 <= t <= self.in_sys.w1:
            self.bytes_sent += self.bytes[r]
        return True

    def utilization(self, servers: int) -> float:
        """Transmitting fraction: bytes started in the window / (C x window x paths). Under ``fcfs``
        a layer-wise group also *holds* the path while it waits for layers (see :meth:`notes`)."""
        span = self.in_sys.w1 - self.in_sys.w0
        return self.bytes_sent / (self.C * span * servers) if span > 0 else 0.0

    @property
    def notes(self) -> list[str]:
        if self.sharing == "fcfs" and self.layers > 1:
            return [f"path held (transmitting or waiting for layers) {self.busy_m.mean() / len(self.fbusy):.3f} "
                    "of the time"]
        return []

    def _floor(self, r: int) -> float:
        """Earliest end of r's last byte: its last layer's chunk after the batch ends."""
        return self.bend[r] + self.bytes[r] / (self.layers * self.C)

    def _start_single(self, r: int) -> None:
        t = self.sim.now
        p = self.path[r]
        x = self.bytes[r]
        if self.sharing == "dedicated":
            self.busy_m.add(t, 1)
            self.sim.at(t + x / self.C, self._dedicated_done, r)
        else:
            self._ps_advance(p, t)
            act = self.active[p]
            if not act:
                self.busy_m.add(t, 1)
            heapq.heappush(act, (self.V[p] + x, r))
            self._ps_schedule(p)

    # ---- completion --------------------------------------------------------------------
    def _link_done(self, r: int) -> None:
        """The link finished sending r's bytes now; finish after the layer clamp and the latency."""
        t = self.sim.now
        end = max(t, self._floor(r)) + self.lat
        if end > t:
            self.sim.at(end, self._finish, r)
        else:
            self._finish(r)

    def _finish(self, r: int) -> None:
        t = self.sim.now
        self.exit[r] = t
        self.in_sys.add(t, -1)
        del self.path[r], self.bytes[r], self.bend[r]
        self.on_done(r)

    def _dedicated_done(self, r: int) -> None:
        self.busy_m.add(self.sim.now, -1)
        self._link_done(r)

    def _fcfs_push(self, p: int, group: list[int], t_end: float) -> None:
        self.fq[p].append((group, t_end))
        if not self.fbusy[p]:
            self._fcfs_next(p)

    def _fcfs_next(self, p: int) -> None:
        """Serve the next transfer group of path p (exact layer-chunk FCFS, module docstring)."""
        q = self.fq[p]
        t = self.sim.now
        if not q:
            if self.fbusy[p]:
                self.fbusy[p] = False
                self.busy_m.add(t, -1)
            return
        group, t_end = q.popleft()
        if not self.fbusy[p]:
            self.fbusy[p] = True
            self.busy_m.add(t, 1)
        lc = self.layers * self.C
        G = sum(self.bytes[r] for r in group) / lc        # one layer of the whole group
        last = max(t + self.layers * G, t_end + G)         # the last layer group's end
        cum = last - G
        for r in group:
            cum += self.bytes[r] / lc
            self.sim.at(cum + self.lat, self._finish, r)
        self.sim.at(last, self._fcfs_release, p)

    def _fcfs_release(self, p: int) -> None:
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
