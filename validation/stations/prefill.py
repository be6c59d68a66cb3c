"""Replay prefill pool: per-instance FCFS queues, token-budget batching, optional prefix cache.

Each prefill instance has its own waiting queue (as production routers do). Dispatch on arrival:

* ``round_robin``: instance ``k mod c`` for the k-th request;
* ``least_loaded``: the instance with the fewest outstanding prompt tokens (queued plus in the
  running batch), lowest index on ties;
* ``jsq``: the instance with the fewest requests (queued plus in the running batch), lowest index
  on ties;
* ``random``: a seeded uniform draw per request.

When an instance is idle and its queue non-empty it starts a batch: requests are taken FCFS while
the sum of *new* (uncached) tokens stays within ``max_batch_tokens``; the head of the queue is
always taken, so a request larger than the budget runs alone. The batch takes

    T = prefill_time_s( sum_i n_i, sum_i (n_i**2 + 2 n_i c_i), k )

for k requests with n_i new tokens over c_i cached ones (the attention term of the interface).
The instance is busy for T; the batch leaves it (first tokens stamped, KV handed to the link)
``model.prefill_exit_s(T)`` after it started: T itself, or pp·T for a pp-stage pipeline instance
(:mod:`qmodel.perf.pipeline`), which takes its next batch after one stage time T.

Prefix cache (:class:`PrefixCache`): either a fixed fraction ``prefix_hit_ratio`` of each prompt
(``c = floor(ratio * P)``; under a stated mixture only for the requests drawn to hit), or, for traces with Mooncake ``hash_ids``, a per-instance LRU of
prefix blocks: the cached prefix is the longest run of leading blocks present in the instance's
LRU when the batch starts (blocks computed in the same batch are not shared within it, as in
vLLM), and every block of the prompt is then inserted/refreshed. At least one token is always
computed (the last prompt token must run to produce logits).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from qmodel.perf.base import ServiceTimeModel
from qmodel.prefix_cache import BlockLRU, cached_prefix_tokens

from .core import Meter, Requests, Sim, pick_instance

__all__ = ["PrefixCache", "PrefillStation"]


class PrefixCache:
    """Cached prefix tokens per request: a fixed hit ratio (of the requests ``hits`` marks, every
    request when None: a stated mixture, :func:`qmodel.prefix_cache.mixture_draws`), or an LRU of
    hash blocks per instance (:class:`qmodel.prefix_cache.BlockLRU`, the solver's LRU too)."""

    def __init__(self, n_instances: int, hit_ratio: float = 0.0,
                 hash_ids: Sequence[Sequence[int]] | None = None, block_tokens: int = 512,
                 capacity_blocks: int = 0, hits: Sequence[bool] | None = None) -> None:
        self.hit_ratio = float(hit_ratio)
        self.hash_ids = hash_ids
        self.block_tokens = int(block_tokens)
        self.capacity_blocks = int(capacity_blocks)
        self.hits = hits
        self.lru = [BlockLRU(self.capacity_blocks) for _ in range(n_instances)]
        self.enabled = hash_ids is not None and capacity_blocks > 0

    def lookup(self, inst: int, r: int, prompt: int) -> int:
        """Cached tokens for request ``r`` on instance ``inst`` (no state change)."""
        if self.enabled:
            return cached_prefix_tokens(self.lru[inst].lookup(self.hash_ids[r]), self.block_tokens, prompt)  # type: ignore[index]
        if self.hits is not None and not self.hits[r]:
            return 0
        return min(int(self.hit_ratio * prompt), prompt - 1)

    def insert(self, inst: int, r: int) -> None:
        if self.enabled:
            self.lru[inst].insert(self.hash_ids[r])  # type: ignore[index]


class PrefillStation:
    """Prefill instances with their own FCFS queues and token-budget batches (see module docstring)."""

    name = "prefill"

    def __init__(self, sim: Sim, req: Requests, model: ServiceTimeModel, n_instances: int,
                 max_batch_tokens: int, dispatch: str, rng: np.random.Generator, cache: PrefixCache,
                 window: tuple[float, float],
                 on_batch_start: Callable[[int, list[int], float, float], None] | None,
                 on_batch_done: Callable[[int, list[int]], None]) -> None:
        self.sim, self.req, self.model = sim, req, model
        self.c = n_instances
        self.budget = max_batch_tokens
        self.dispatch = dispatch
        self.rng = rng
        self.cache = cache
        self.on_batch_start = on_batch_start
        self.on_batch_done = on_batch_done
        self.queues: list[deque[int]] = [deque() for _ in range(n_instances)]
        self.outstanding = [0] * n_instances
        self.requests = [0] * n_instances  # queued plus in the running batch (jsq)
        self.busy = [False] * n_instances
        self.rr = 0
        self.in_sys = Meter(*window)
        self.busy_m = Meter(*window)
        self.batches = 0
        self.batched_requests = 0
        self.entry, self.start_t, self.exit = req.station(self.name)

    def _choose(self) -> int:
        i, self.rr = pick_instance(self.dispatch, self.c, self.rr, self.rng, lambda: self.outstanding,
                                   lambda: self.requests)
        return i

    def arrive(self, r: int) -> None:
        t = self.sim.now
        i = self._choose()
        self.entry[r] = t
        self.in_sys.add(t, 1)
        self.queues[i].append(r)
        self.outstanding[i] += self.req.prompt[r]
        self.requests[i] += 1
        if not self.busy[i]:
            self._start(i)

    def _start(self, i: int) -> None:
        t = self.sim.now
        q = self.queues[i]
        prompt = self.req.prompt
        cached_col = self.req.cached
        cache = self.cache
        batch: list[int] = []
        s1 = 0
        s2 = 0
        while q:
            r = q[0]
            p = prompt[r]
            c = cache.lookup(i, r, p)
            n = p - c
            if batch and s1 + n > self.budget:
                break
            q.popleft()
            batch.append(r)
            cached_col[r] = c
            s1 += n
            s2 += n * n + 2 * n * c
            self.start_t[r] = t
        for r in batch:
            cache.insert(i, r)
        dur = float(self.model.prefill_time_s(float(s1), float(s2), float(len(batch))))
        if not self.busy[i]:
            self.busy[i] = True
            self.busy_m.add(t, 1)
        self.batches += 1
        self.batched_requests += len(batch)
        # a pipeline instance is free after one stage time; the batch leaves pp of them later
        leave = float(self.model.prefill_exit_s(dur))
        if self.on_batch_start is not None:
            self.on_batch_start(i, batch, t, leave)
        if leave == dur:
            self.sim.at(t + dur, self._done, (i, batch))
        else:
            self.sim.at(t + dur, self._free, i)
            self.sim.at(t + leave, self._exit, (i, batch))

    def extra(self) -> dict[str, float]:
        """Station-specific measurements for the report."""
        return {"mean_batch": self.batched_requests / self.batches if self.batches else 0.0}

    def _done(self, arg: tuple[int, list[int]]) -> None:
        self._exit(arg)
        self._free(arg[0])

    def _exit(self, arg: tuple[int, list[int]]) -> None:
        """The batch leaves the instance (its first tokens, its KV onto the link)."""
        i, batch = arg
        t = self.sim.now
        prompt = self.req.prompt
        for r in batch:
            self.exit[r] = t
            self.outstanding[i] -= prompt[r]
        self.requests[i] -= len(batch)
        self.in_sys.add(t, -len(batch))
        self.on_batch_done(i, batch)

    def _free(self, i: int) -> None:
        """The instance can take its next batch."""
        if self.queues[i]:
            self._start(i)
        else:
            self.busy[i] = False
            self.busy_m.add(self.sim.now, -1)
