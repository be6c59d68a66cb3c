"""Replay decode pool: continuous batching with KV-memory reservation, fast-forwarded step runs.

Each decode instance runs iterations ("steps"); every running sequence gains one token per step
and a step takes ``decode_step_time_s(n, sum_context)`` for n running sequences whose contexts
total ``sum_context``. New sequences join only at step boundaries.

KV memory (documented choice): a request **reserves its worst case, prompt + output tokens, on
one instance before its KV transfer starts** (together with one of ``max_batch`` slots), and
releases it when its last token is produced. The replay knows each request's output length,
so this equals an engine that reserves ``max_tokens`` exactly (``kv_reservation = max_tokens``: prompt +
the workload's max output, ``Requests.reserve``); it never has to preempt, and it is
the back-pressure path of the disaggregated pipeline (a transfer waits while no instance can
reserve). A request whose prompt + output exceeds one instance's whole KV capacity can never be
served and is reported as dropped by the engine.

Reservation dispatch over instances that can fit the request: ``least_loaded`` (fewest reserved
KV tokens, lowest index on ties), ``jsq`` (fewest requests holding a reservation, lowest index on
ties), ``round_robin`` (the next instance in rotation that fits) or
``random`` (seeded draw among those that fit). Waiting reservations are served FCFS by the
caller (strict head-of-line order).

Speed: between two events that change an instance's batch (a sequence finishing, a sequence
joining) the batch is fixed, so the instance schedules **one event for the whole run of steps**:
it evaluates the vector of step times ``decode_step_time_s(n, S + n*k)``, k = 0..K-1 (context
grows by n per step) with numpy, and jumps to the boundary where the next sequence finishes.
A sequence that becomes ready mid-run truncates the run at the next step boundary
(``searchsorted`` on the cumulative step times), where it joins.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qmodel.perf.base import ServiceTimeModel

from .core import Meter, Requests, RunningBatch, Sim, step_cumsum_fn, truncate_run

__all__ = ["DecodeInstance", "DecodeStation"]


class DecodeInstance(RunningBatch):
    """One decode instance: its running batch, the requests ready to join at the next step
    boundary, whether a run is in progress, and who joined at its start (see :class:`DecodeStation`)."""

    __slots__ = ("pending", "active", "just_joined")

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[int] = []      # ready, joining at the next boundary
        self.active = False               # a run is in progress
        self.just_joined: list[int] = []  # requests that joined at the current run's start


class DecodeStation:
    """Continuous-batching decode instances (see module docstring)."""

    name = "decode"

    def __init__(self, sim: Sim, req: Requests, model: ServiceTimeModel, n_instances: int,
                 kv_capacity_tokens: int, max_batch: int, dispatch: str, rng: np.random.Generator,
                 first_token_from_decode: bool, window: tuple[float, float]) -> None:
        self.sim, self.req, self.model = sim, req, model
        self.c = n_instances
        self.cap = int(kv_capacity_tokens)
        self.max_batch = int(max_batch)
        self.dispatch = dispatch
        self.rng = rng
        self.first_from_decode = first_token_from_decode
        self.inst = [DecodeInstance() for _ in range(n_instances)]
        self.assigned: dict[int, int] = {}
        self.rr = 0
        self.on_release: Callable[[], None] = lambda: None
        self.in_sys = Meter(*window)
        self.busy_m = Meter(*window)
        self.kv_m = Meter(*window)     # reserved KV tokens, all instances
        self.seq_steps = 0             # sum over steps of the batch size
        self._steps = step_cumsum_fn(model)
        self.entry, self.start_t, self.exit = req.station(self.name)

    # ---- reservation -------------------------------------------------------------------
    def need(self, r: int) -> int:
        return self.req.prompt[r] + self.req.reserve[r]

    def fits_ever(self, r: int) -> bool:
        return self.need(r) <= self.cap

    def reserve(self, r: int) -> int:
        """Reserve KV + a slot for ``r`` on some instance; return it, or -1 if none can fit now."""
        need = self.need(r)
        cap, mb = self.cap, self.max_batch
        inst = self.inst
        if self.dispatch in ("least_loaded", "jsq") or self.c == 1:
            by_count = self.dispatch == "jsq"  # fewest requests holding a reservation, else fewest KV tokens
            best, best_used = -1, None
            for i, d in enumerate(inst):
                used = d.slots if by_count else d.kv_used
                if d.slots < mb and d.kv_used + need <= cap and (best_used is None or used < best_used):
                    best, best_used = i, used
            i = best
        else:
            fit = [i for i, d in enumerate(inst) if d.slots < mb and d.kv_used + need <= cap]
            if not fit:
                return -1
            if self.dispatch == "random":
                i = fit[int(self.rng.integers(len(fit)))]
            else:
                k = self.rr % self.c
                i = min(fit, key=lambda j: (j - k) % self.c)
                self.rr = i + 1
        if i >= 0:
            inst[i].kv_used += need
            inst[i].slots += 1
            self.kv_m.add(self.sim.now, need)
            self.assigned[r] = i
        return i

    # ---- flow --------------------------------------------------------------------------
    def ready(self, r: int) -> None:
        """Request ``r``'s KV is on its reserved instance: it joins at the next step boundary."""
        t = self.sim.now
        i = self.assigned[r]
        d = self.inst[i]
        self.entry[r] = t
        self.in_sys.add(t, 1)
        d.pending.append(r)
        if not d.active or t == d.t0:
            # idle, or ready exactly at the boundary where the current run starts: join now
            self._boundary(i, 0, t)
            return
        # truncate the current run at the first boundary at or after t
        truncate_run(self.sim, d, t, self._run_end, i)

    def _run_end(self, arg: tuple[int, int]) -> None:
        i, version = arg
        d = self.inst[i]
        if version != d.version:
            return  # superseded by a truncation
        self._boundary(i, d.kend, self.sim.now)

    def _boundary(self, i: int, steps: int, t: float) -> None:
        d = self.inst[i]
        req = self.req
        if steps:
            self.seq_steps += d.advance(steps)
        released = False
        for r in d.retire():
            req.finish(r, t)
            self.exit[r] = t
            self.in_sys.add(t, -1)
            need = req.prompt[r] + req.reserve[r]
            d.kv_used -= need
            self.kv_m.add(t, -need)
            d.slots -= 1
            del self.assigned[r]
            released = True
        # A run rebuilt at the instant it started (a request became ready exactly then) supersedes
        # it: the requests that joined at that boundary get their first step from the new run.
        carry = d.just_joined if (d.active and steps == 0 and t == d.t0) else []
        joined = d.pending
        if joined:
            d.pending = []
            from_dec = self.first_from_decode
            for r in joined:
                p = req.prompt[r]
                d.join(r, p if from_dec else p + 1, req.output[r] if from_dec else req.output[r] - 1)
                self.start_t[r] = t
        n = len(d.running)
        if n:
            k = d.running[0][0] - d.K
            d.cum = self._steps(n, d.S, k)
            d.t0 = t
            d.kend = k
            d.version += 1
            if not d.active:
                d.active = True
                self.busy_m.add(t, 1)
            d.just_joined = carry + joined
            if d.just_joined and self.first_from_decode:
                t1 = t + float(d.cum[0])
                for r in d.just_joined:
                    req.t_first[r] = t1
            self.sim.at(t + float(d.cum[-1]), self._run_end, (i, d.version))
        elif d.active:
            d.active = False
            self.busy_m.add(t, -1)
        if released:
            self.on_release()

    def extra(self) -> dict[str, float]:
        """Station-specific measurements for the report."""
        steps = sum(d.steps for d in self.inst)
        return {"mean_batch": self.seq_steps / steps if steps else 0.0,
                "kv_utilization": self.kv_m.mean() / (self.cap * self.c) if self.cap else 0.0}
