"""Replay chunked-prefill engine: Sarathi-like mixed iterations under a per-step token budget.

Every iteration of an instance has a budget of ``chunk_tokens`` tokens. Each running decode
sequence takes one token of it; the rest goes to prefill chunks, FCFS: first the requests whose
prefill is already in progress, then newly admitted waiting requests (admission reserves KV for
prompt + output and a slot, strictly FCFS, see :mod:`._batching`). A request's prefill may span
many iterations; it gets its first token at the end of the iteration that computes its last
prompt token and then joins the decode batch.

Step-time composition (documented choice). For an iteration with decode batch n (contexts
summing to S) and prefill chunks c_j over d_j tokens already computed (cached prefix included):

    t = prefill_time_s( sum c_j + n,  sum (c_j**2 + 2 c_j d_j),  k )
        + [ decode_step_time_s(n, S) - decode_step_time_s(n, 0) ]

The decode tokens go through the same weight GEMMs as the chunk tokens, so they are counted as n
more linear-work tokens in one prefill pass (one iteration overhead, not two); the chunk's
attention re-reads the KV of its earlier chunks (the 2*c*d term); and the decode sequences' KV
reads are the context-dependent part of the decode step model. Iterations without prefill work
are plain decode steps ``decode_step_time_s(n, S)``, fast-forwarded as in the other engines.
Mixed iterations are one event each (prefill progress changes every iteration).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._batching import SinglePoolStation
from .core import Requests, Sim
from .prefill import PrefixCache

if TYPE_CHECKING:  # the engine imports the stations; only type checkers need the plan here
    from qmodel.validation.replay import ReplayPlan

__all__ = ["ChunkedStation"]


class ChunkedStation(SinglePoolStation):
    """Sarathi-like chunked prefill per instance (see module docstring)."""

    name = "chunked"

    def __init__(self, sim: Sim, req: Requests, plan: ReplayPlan, rng: np.random.Generator,
                 window: tuple[float, float], cache: PrefixCache | None = None) -> None:
        super().__init__(sim, req, plan, rng, window, cache)
        self.budget = int(plan.chunk_tokens)

    def _choose_work(self, i: int, t: float) -> bool:
        d = self.inst[i]
        w = d.waiting
        if not d.prefilling and not (w and self._admissible(d, w[0])):
            return False
        n_dec = len(d.running)
        room = self.budget - n_dec
        if room <= 0:
            return False  # the decode batch alone fills the budget: plain decode step(s)
        chunks: list[tuple[list[int], int]] = []
        for item in d.prefilling:
            if room <= 0:
                break
            r, done = item
            c = min(room, self.req.prompt[r] - done)
            chunks.append((item, c))
            room -= c
        while room > 0 and w and self._admissible(d, w[0]):
            r = w.popleft()
            self._reserve(d, r)
            n_new, cached = self.new_tokens(i, r)
            self.req.cached[r] = cached
            item = [r, cached]
            d.prefilling.append(item)
            c = min(room, n_new)
            chunks.append((item, c))
            room -= c
        s1 = sum(c for _, c in chunks)
        s2 = sum(c * c + 2 * c * item[1] for item, c in chunks)
        m = self.model
        dur = float(m.prefill_time_s(float(s1 + n_dec), float(s2), float(len(chunks))))
        if n_dec:
            dur += float(m.decode_step_time_s(float(n_dec), float(d.S))) - float(m.decode_step_time_s(float(n_dec), 0.0))
        d.mode = "mixed"
        d.iterations += 1
        d.version += 1
        self.sim.at(t + dur, self._mixed_done, (i, chunks))
        return True

    def _mixed_done(self, arg: tuple[int, list[tuple[list[int], int]]]) -> None:
        i, chunks = arg
        d = self.inst[i]
        t = self.sim.now
        n_dec = len(d.running)
        self._advance(d, 1 if n_dec else 0, t)
        finished = []
        for item, c in chunks:
            item[1] += c
            if item[1] >= self.req.prompt[item[0]]:
                finished.append(item)
        if finished:
            d.prefilling = [it for it in d.prefilling if it[1] < self.req.prompt[it[0]]]
            for item in finished:
                self.cache.insert(i, item[0])  # its blocks are cached once fully computed
                self._join(d, item[0], t)
        self._boundary(i, 0, t)
