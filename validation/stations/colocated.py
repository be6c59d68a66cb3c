"""Replay colocated engine: vLLM-like continuous batching with prefill priority.

At every step boundary an instance looks at its FCFS waiting queue. If the head fits (KV for
prompt + output and a batch slot, see :mod:`._batching`), it runs a **prefill iteration**: it takes
waiting requests FCFS while their new tokens fit ``max_batch_tokens`` (the head always goes, so
an oversized prompt runs alone) and they fit KV and slots; the iteration takes

    T = prefill_time_s( sum n_i, sum (n_i**2 + 2 n_i c_i), k )

during which running sequences stall (prefill priority). Each prefilled request gets its first
token at the end of the iteration and joins the decode batch (L = 1: it finishes there).
Otherwise the instance runs decode steps ``decode_step_time_s(n, sum context)``, fast-forwarded
until the next sequence finishes or an admissible arrival ends the run at the next boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._batching import SinglePoolStation
from .core import Requests, Sim
from .prefill import PrefixCache

if TYPE_CHECKING:  # the engine imports the stations; only type checkers need the plan here
    from qmodel.validation.replay import ReplayPlan

__all__ = ["ColocatedStation"]


class ColocatedStation(SinglePoolStation):
    """Prefill-priority continuous batching per instance (see module docstring)."""

    name = "colocated"

    def __init__(self, sim: Sim, req: Requests, plan: ReplayPlan, rng: np.random.Generator,
                 window: tuple[float, float], cache: PrefixCache | None = None) -> None:
        super().__init__(sim, req, plan, rng, window, cache)
        self.budget = int(plan.max_batch_tokens)

    def _choose_work(self, i: int, t: float) -> bool:
        d = self.inst[i]
        w = d.waiting
        if not w or not self._admissible(d, w[0]):
            return False
        batch: list[int] = []
        s1 = s2 = 0
        while w:
            r = w[0]
            if not self._admissible(d, r):
                break
            n, c = self.new_tokens(i, r)
            if batch and s1 + n > self.budget:
                break
            w.popleft()
            self._reserve(d, r)
            self.req.cached[r] = c
            batch.append(r)
            s1 += n
            s2 += n * n + 2 * n * c
        for r in batch:  # blocks computed in this iteration are shared from the next one on
            self.cache.insert(i, r)
        dur = float(self.model.prefill_time_s(float(s1), float(s2), float(len(batch))))
        d.mode = "prefill"
        d.iterations += 1
        d.version += 1
        self.sim.at(t + dur, self._prefill_done, (i, batch))
        return True

    def _prefill_done(self, arg: tuple[int, list[int]]) -> None:
        i, batch = arg
        d = self.inst[i]
        t = self.sim.now
        for r in batch:
            self._join(d, r, t)
        self._boundary(i, 0, t)
