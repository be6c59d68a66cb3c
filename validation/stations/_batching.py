"""Shared machinery of single-pool engines (colocated, chunked): KV reservation, dispatch and
fast-forwarded decode runs.

An instance alternates between *iterations* chosen at step boundaries by the subclass
(:meth:`_choose_work`) and *decode runs*: runs of identical-shape decode steps between two events,
simulated as one event (step-time vector ``decode_step_time_s(n, S + n*k)`` with numpy; an
arrival that would change the next iteration truncates the run at the next step boundary).

KV memory: a request reserves prompt + output tokens (worst case; the replay knows the output
length, so this is an engine reserving ``max_tokens`` exactly, which never preempts; with
``kv_reservation = max_tokens``, prompt + the workload's max output instead, ``Requests.reserve``) plus one of
``max_batch`` slots when its prefill starts, and releases them at its last token. A request whose
prompt + output exceeds the instance's KV capacity is reported as dropped by the engine.
Waiting requests are admitted strictly FCFS per instance (no skipping a head that does not fit).

Dispatch of arrivals to instances: ``least_loaded`` (fewest outstanding tokens: waiting prompts plus
reserved KV, lowest index on ties), ``jsq`` (fewest requests: waiting plus holding a slot, lowest
index on ties), ``round_robin``, ``random`` (seeded).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque

import numpy as np

from typing import TYPE_CHECKING

from .core import Meter, Requests, RunningBatch, Sim, pick_instance, step_cumsum_fn, truncate_run
from .prefill import PrefixCache

if TYPE_CHECKING:  # the engine imports the stations; only type checkers need the plan here
    from qmodel.validation.replay import ReplayPlan

__all__ = ["SingleInstance", "SinglePoolStation"]


class SingleInstance(RunningBatch):
    """One single-pool instance: its running batch, its FCFS queue of waiting prompts, the prompts
    being prefilled in chunks (chunked only), what it is doing, and its outstanding tokens."""

    __slots__ = ("waiting", "prefilling", "mode", "load", "iterations")

    def __init__(self) -> None:
        super().__init__()
        self.waiting: deque[int] = deque()
        self.prefilling: list[list[int]] = []  # [request, tokens done] (chunked only)
        self.mode = "idle"                     # idle | decode | prefill | mixed
        self.load = 0
        self.iterations = 0


class SinglePoolStation(ABC):
    """Base of :class:`ColocatedStation` and :class:`ChunkedStation` (see module docstring)."""

    name = "single"

    def __init__(self, sim: Sim, req: Requests, plan: ReplayPlan, rng: np.random.Generator,
                 window: tuple[float, float], cache: PrefixCache | None = None) -> None:
        self.sim, self.req = sim, req
        self.model = plan.decode_model
        self.c = plan.decode_instances
        self.cap = int(plan.decode_kv_capacity_tokens)
        self.max_batch = int(plan.decode_max_batch)
        self.dispatch = plan.decode_dispatch
        self.cache = cache or PrefixCache(self.c, float(plan.prefix_hit_ratio))
        self.rng = rng
        self.inst = [SingleInstance() for _ in range(self.c)]
        self.rr = 0
        self.in_sys = Meter(*window)
        self.busy_m = Meter(*window)
        self.kv_m = Meter(*window)
        self.seq_steps = 0
        self._steps = step_cumsum_fn(self.model)
        self.entry, self.start_t, self.exit = req.station(self.name)
        self.notes: list[str] = []

    # ---- admission -----------------------------------------------------------------------
    def need(self, r: int) -> int:
        return self.req.prompt[r] + self.req.reserve[r]

    def fits_ever(self, r: int) -> bool:
        return self.need(r) <= self.cap

    def new_tokens(self, i: int, r: int) -> tuple[int, int]:
        """(tokens to compute, cached tokens) for r's prompt on instance i: the workload's prefix hit
        ratio, or the instance's LRU of Mooncake prefix blocks (:class:`~.prefill.PrefixCache`)."""
        p = self.req.prompt[r]
        c = self.cache.lookup(i, r, p)
        return p - c, c

    def choose_instance(self, r: int) -> int:
        """The instance request ``r`` is dispatched to (the pool's dispatch rule, :func:`pick_instance`)."""
        i, self.rr = pick_instance(self.dispatch, self.c, self.rr, self.rng, lambda: [d.load for d in self.inst],
                                   lambda: [len(d.waiting) + d.slots for d in self.inst])
        return i

    def _admissible(self, d: SingleInstance, r: int) -> bool:
        return d.slots < self.max_batch and d.kv_used + self.need(r) <= self.cap

    def _reserve(self, d: SingleInstance, r: int) -> None:
        d.kv_used += self.need(r)
        d.load += self.need(r) - self.req.prompt[r]  # the prompt stops waiting; its KV is now reserved
        d.slots += 1
        self.kv_m.add(self.sim.now, self.need(r))
        self.start_t[r] = self.sim.now

    def arrive(self, r: int) -> None:
        t = self.sim.now
        i = self.choose_instance(r)
        d = self.inst[i]
        self.entry[r] = t
        self.in_sys.add(t, 1)
        d.load += self.req.prompt[r]  # a waiting prompt; its KV is counted once reserved (_reserve)
        head_was_empty = not d.waiting
        d.waiting.append(r)
        if d.mode == "idle":
            self._boundary(i, 0, t)
        elif d.mode == "decode" and head_was_empty and self._admissible(d, r):
            self._truncate(i, t)

    def _truncate(self, i: int, t: float) -> None:
        d = self.inst[i]
        if t == d.t0:  # arrived exactly at the boundary where the run starts: decide again now
            d.version += 1
            self._boundary(i, 0, t)
            return
        truncate_run(self.sim, d, t, self._run_end, i)

    # ---- running sequences -----------------------------------------------------------------
    def _join(self, d: SingleInstance, r: int, t: float) -> None:
        """r's first token was produced at t: it joins the decode batch (or finishes if L = 1)."""
        req = self.req
        req.t_first[r] = t
        L = req.output[r]
        if L == 1:
            self._finish(d, r, t)
            return
        d.join(r, req.prompt[r] + 1, L - 1)

    def _finish(self, d: SingleInstance, r: int, t: float) -> None:
        self.req.finish(r, t)
        self.exit[r] = t
        self.in_sys.add(t, -1)
        d.kv_used -= self.need(r)
        self.kv_m.add(t, -self.need(r))
        d.slots -= 1
        d.load -= self.need(r)

    def _advance(self, d: SingleInstance, steps: int, t: float) -> None:
        """Apply ``steps`` decode steps ending at t; retire finished sequences."""
        if steps:
            self.seq_steps += d.advance(steps)
        for r in d.retire():
            self._finish(d, r, t)

    def _run_end(self, arg: tuple[int, int]) -> None:
        i, version = arg
        d = self.inst[i]
        if version != d.version:
            return
        self._boundary(i, d.kend, self.sim.now)

    def _boundary(self, i: int, steps: int, t: float) -> None:
        d = self.inst[i]
        self._advance(d, steps, t)
        was_idle = d.mode == "idle"
        if not self._choose_work(i, t):
            if d.running:
                self._decode_run(i, t)
            else:
                d.mode = "idle"
        if was_idle and d.mode != "idle":
            self.busy_m.add(t, 1)
        elif not was_idle and d.mode == "idle":
            self.busy_m.add(t, -1)

    def _decode_run(self, i: int, t: float) -> None:
        d = self.inst[i]
        n = len(d.running)
        k = d.running[0][0] - d.K
        d.cum = self._steps(n, d.S, k)
        d.t0 = t
        d.kend = k
        d.version += 1
        d.mode = "decode"
        self.sim.at(t + float(d.cum[-1]), self._run_end, (i, d.version))

    def extra(self) -> dict[str, float]:
        """Station-specific measurements for the report (mean decode batch over plain decode steps)."""
        steps = sum(d.steps for d in self.inst)
        return {"mean_batch": self.seq_steps / steps if steps else 0.0,
                "kv_utilization": self.kv_m.mean() / (self.cap * self.c) if self.cap else 0.0}

    @abstractmethod
    def _choose_work(self, i: int, t: float) -> bool:
        """Start a non-decode iteration at boundary t if one is due; return whether one started."""
