"""The replay's event kernel: a (time, sequence)-ordered heap, per-request columns, time meters,
and one instance's running decode batch (:class:`RunningBatch`, shared by every continuous-batching
station: decode, colocated, chunked).

Determinism: events are ordered by (time, insertion sequence number), so two events at the same
time always fire in the order they were scheduled; nothing reads the wall clock; the only
randomness is a seeded numpy Generator created by the engine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

from qmodel.perf.base import ServiceTimeModel

__all__ = ["Sim", "Meter", "Requests", "RunningBatch", "StepCache", "step_cumsum", "step_cumsum_fn", "pick_instance",
           "truncate_run"]


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
        #: output tokens each request's KV reservation counts: its own output, or a ``max_tokens``
        #: reservation's (set by the run, :func:`qmodel.workload.reserved_output_tokens`)
        self.reserve = self.output
        nan = float("nan")
        self.cached = [0] * n
        self.t_first = [nan] * n
        self.t_last = [nan] * n
        self.dropped = [False] * n
        # station name -> (entry, service start, exit) lists, created on demand
        self.marks: dict[str, tuple[list[float], list[float], list[float]]] = {}
        #: told of each request's completion (last token) or drop: a closed loop's clients
        #: (``validation/replay_run._feed``); None for open arrivals
        self.on_done: Callable[[int, float], None] | None = None
        #: a closed loop's think time after each request (seconds), drawn before the run
        self.think: list[float] = []
        #: which requests hit the prefix cache under a stated mixture, drawn before the run
        #: (:func:`qmodel.prefix_cache.mixture_draws`); empty otherwise
        self.prefix_hit: list[bool] = []

    def finish(self, r: int, t: float) -> None:
        """Request ``r``'s last token at ``t``."""
        self.t_last[r] = t
        if self.on_done is not None:
            self.on_done(r, t)

    def station(self, name: str) -> tuple[list[float], list[float], list[float]]:
        if name not in self.marks:
            nan = float("nan")
            self.marks[name] = ([nan] * self.n, [nan] * self.n, [nan] * self.n)
        return self.marks[name]


class RunningBatch:
    """One instance's running sequences and its reservations under continuous batching.

    Every running sequence gains one token per decode step, so the batch is kept as a step counter
    ``K`` (steps done), the sum ``S`` of the running contexts after ``K`` steps, each sequence's
    ``offset`` (its context is offset + K) and a heap of (step at which it finishes, request): a
    run of k steps is O(1) (``K += k``, ``S += n k``) and only finishing sequences are touched.
    ``kv_used``/``slots``: reserved KV tokens and batch slots; ``t0``, ``cum``, ``kend``,
    ``version``: the run of decode steps in progress (start, cumulative step ends, its length,
    and a counter that invalidates a superseded end event, :func:`truncate_run`); ``steps``: decode
    steps done.
    """

    __slots__ = ("kv_used", "slots", "K", "S", "running", "offset", "steps", "t0", "cum", "kend", "version")

    def __init__(self) -> None:
        self.kv_used = 0
        self.slots = 0
        self.K = 0
        self.S = 0
        self.running: list[tuple[int, int]] = []  # heap of (finish step counter, request)
        self.offset: dict[int, int] = {}          # request -> context minus step counter
        self.steps = 0
        self.t0 = 0.0
        self.cum: np.ndarray = np.zeros(0)
        self.kend = 0
        self.version = 0

    def join(self, r: int, ctx: int, steps_left: int) -> None:
        """Request ``r`` joins with context ``ctx`` and finishes after ``steps_left`` more steps."""
        self.offset[r] = ctx - self.K
        self.S += ctx
        heapq.heappush(self.running, (self.K + steps_left, r))

    def advance(self, steps: int) -> int:
        """Apply ``steps`` decode steps; returns the sequence-steps done (batch size x steps)."""
        done = len(self.running) * steps
        self.K += steps
        self.S += done
        self.steps += steps
        return done

    def retire(self) -> list[int]:
        """Remove the sequences finished by now (in finishing order) and return them."""
        K = self.K
        running = self.running
        out: list[int] = []
        while running and running[0][0] <= K:
            _, r = heapq.heappop(running)
            self.S -= self.offset.pop(r) + K
            out.append(r)
        return out


def step_cumsum(model: ServiceTimeModel, n: int, S: int, k: int) -> np.ndarray:
    """Cumulative times of k decode steps of n sequences whose contexts total S before the first
    step and grow by n per step: cumsum of ``decode_step_time_s(n, S + n*j)``, j = 0..k-1.

    One vectorised model call per run of steps (the fast-forward of the decode engines), or
    table look-ups when ``model`` is a :class:`StepCache`.
    """
    if isinstance(model, StepCache):
        return np.cumsum(model.decode_steps(n, S, k))
    if k == 1:
        return np.array([float(model.decode_step_time_s(float(n), float(S)))])
    st = model.decode_step_time_s(float(n), S + n * np.arange(k, dtype=float))
    st = np.asarray(st, dtype=float)
    if st.ndim == 0:  # a model whose step time ignores the context
        st = np.full(k, float(st))
    return np.cumsum(st)


def step_cumsum_fn(model: ServiceTimeModel | StepCache) -> Callable[[int, int, int], np.ndarray]:
    """``(n, S, k) -> cumulative step times`` for ``model``, bound once per station (hot path)."""
    if isinstance(model, StepCache):
        cache = model
        cumsum = np.cumsum

        def cached(n: int, S: int, k: int) -> np.ndarray:
            return cumsum(cache.decode_steps(n, S, k))

        return cached
    return lambda n, S, k: step_cumsum(model, n, S, k)


class StepCache:
    """Exact memo of a pure :class:`~qmodel.perf.base.ServiceTimeModel` at integer arguments.

    Token counts are integers, so every argument the replay passes lies on an integer lattice.
    Decode step times are tabulated per batch size n in blocks of ``block`` consecutive context
    sums, each block filled by one vectorised call, ``decode_step_time_s(n, S0 + arange(block))``;
    later runs read the table instead of calling the model (a model call costs tens of
    microseconds of numpy overhead, a look-up a few). Prefill batch times are memoised on
    (sum tokens, sum squares, requests). The values are the model's own at the same arguments
    (element-wise IEEE arithmetic gives the same result vectorised or not; tested), so caching
    changes speed, never results. Memory is bounded: tables are dropped wholesale when full.
    """

    def __init__(self, model: ServiceTimeModel, block: int = 2048, max_blocks: int = 4096, max_prefill: int = 1 << 20) -> None:
        self.model = model
        self.block = block
        self.max_blocks = max_blocks
        self.max_prefill = max_prefill
        self.tables: dict[tuple[int, int], np.ndarray] = {}
        self.prefill: dict[tuple[int, int, int], float] = {}
        self.fingerprint = model.fingerprint
        self.prefill_exit_s = model.prefill_exit_s  # when a batch leaves the instance (pipeline: pp stage times)

    def prefill_time_s(self, s1: float, s2: float, k: float) -> float:
        key = (int(s1), int(s2), int(k))
        v = self.prefill.get(key)
        if v is None:
            if len(self.prefill) >= self.max_prefill:
                self.prefill.clear()
            v = self.prefill[key] = float(self.model.prefill_time_s(float(s1), float(s2), float(k)))
        return v

    def decode_step_time_s(self, n: float, S: float) -> float:
        return float(self.decode_steps(int(n), int(S), 1)[0])

    def _table(self, n: int, b: int) -> np.ndarray:
        key = (n, b)
        tab = self.tables.get(key)
        if tab is None:
            if len(self.tables) >= self.max_blocks:
                self.tables.clear()
            s = b * self.block + np.arange(self.block, dtype=float)
            tab = np.asarray(self.model.decode_step_time_s(float(n), s), dtype=float)
            if tab.ndim == 0:
                tab = np.full(self.block, float(tab))
            self.tables[key] = tab
        return tab

    def decode_steps(self, n: int, S: int, k: int) -> np.ndarray:
        B = self.block
        last = S + n * (k - 1)
        b0, b1 = S // B, last // B
        if b1 - b0 > 3:  # a sparse lattice (huge n): filling blocks would waste work
            st = np.asarray(self.model.decode_step_time_s(float(n), S + n * np.arange(k, dtype=float)), dtype=float)
            return np.full(k, float(st)) if st.ndim == 0 else st
        if b0 == b1:
            tab = self._table(n, b0)
            base = S - b0 * B
            return tab[base: base + n * (k - 1) + 1: n]
        idx = S + n * np.arange(k, dtype=np.int64)
        blk = idx // B
        out = np.empty(k)
        for b in range(b0, b1 + 1):
            sel = blk == b
            if sel.any():
                out[sel] = self._table(n, b)[idx[sel] - b * B]
        return out


def pick_instance(dispatch: str, c: int, rr: int, rng: np.random.Generator,
                  loads: Callable[[], list[float]], counts: Callable[[], list[int]]) -> tuple[int, int]:
    """(instance, next round-robin counter) for one arrival: round_robin, random (seeded), the
    least-loaded instance by ``loads()`` (outstanding tokens) or, for ``jsq``, the shortest queue by
    ``counts()`` (requests queued or in service); first of equals (lowest index) in both.
    ``loads``/``counts`` are called only when needed."""
    if c == 1:
        return 0, rr
    if dispatch == "round_robin":
        return rr % c, rr + 1
    if dispatch == "random":
        return int(rng.integers(c)), rr
    cur = counts() if dispatch == "jsq" else loads()
    return cur.index(min(cur)), rr


def truncate_run(sim: Sim, d: Any, t: float, run_end: Callable[[Any], None], i: int) -> None:
    """End instance ``i``'s current run of decode steps at the first step boundary at or after ``t``
    (``d`` holds the run: start ``t0``, cumulative step ends ``cum``, steps ``kend``, ``version``);
    the superseded end event is ignored by its stale version."""
    j = int(np.searchsorted(d.cum, t - d.t0, side="left")) + 1
    if j < d.kend:
        d.kend = j
        d.version += 1
        sim.at(d.t0 + float(d.cum[j - 1]), run_end, (i, d.version))
