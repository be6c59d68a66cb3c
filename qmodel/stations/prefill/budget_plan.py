"""The service-independent bookkeeping of the token-budget batch law, kept across laws.

:meth:`~qmodel.stations.prefill.law.BatchServiceLaw.from_prompts_budget` builds its laws by Monte
Carlo over 4096 queue sequences: which requests form each FCFS prefix that fits the budget, the
token sums Σn and Σ(n² + 2nc) of every prefix, where each batch is cut and which request heads the
next batch. None of that depends on the step-time model: the prompt sample, the budget, the
request cap and the seed fix it. Only the batch times S = service.prefill_time_s(Σn, Σ(n² + 2nc), k)
of those prefixes do. :func:`budget_plan` records the bookkeeping once per (prompt sample, cached
sample, budget, cap, seed), and the law evaluates the service model on the recorded sums, so a
planner sweep over GPUs, parallelism and step-time models that share a pool's prompts and budget,
and a goodput or sweep that resolves the same scenario again, pay the bookkeeping once
(docs/startup.md "Round 4"). The random stream is consumed exactly as before the split, so the
laws are bit-identical to building them in one pass (tests/test_prefill_budget_plan.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from qmodel.arrays import quantiles
from qmodel.stations.prefill.sampling import base_indices

__all__ = ["HEAD_BIN_QUANTILES", "HEAD_ROUNDS", "BudgetPlan", "RoundPlan", "budget_plan"]

HEAD_ROUNDS = 8  # next-fit rounds of the size-biased head law of a long queue
#: quantiles of the fresh cut size N that split the overflow-head regimes
HEAD_BIN_QUANTILES = (1.0 / 3.0, 2.0 / 3.0)
#: plans kept (oldest dropped first); one is a few MB at most (4096 sequences x rounds x E[N])
_KEEP = 8


@dataclass(frozen=True)
class RoundPlan:
    """One round of prefixes: the sums of the sequences still growing at k = 1, 2, ... (the batch
    time of ``sums[j]`` is service.prefill_time_s(Σn, Σq, k = j + 1)), the cut samples as (index into
    ``sums``, mask of the sequences cut there, None for all of them), the count of N = k per k, each
    sequence's overflow request and its cut size."""

    sums: tuple[tuple[np.ndarray, np.ndarray], ...]
    cuts: tuple[tuple[int, np.ndarray | None], ...]
    counts: tuple[int, ...]
    overflow: np.ndarray
    n_of: np.ndarray


@dataclass(frozen=True)
class BudgetPlan:
    """The rounds of :func:`budget_plan`: the fresh-headed round, one round per bin of its cut size
    (None for an empty bin), and the :data:`HEAD_ROUNDS` repeated overflow-headed rounds."""

    m: int  # sequences per round
    first: RoundPlan
    bins: tuple[tuple[int, int], ...]
    binned: tuple[RoundPlan | None, ...]
    later: tuple[RoundPlan, ...]


def _round(p: np.ndarray, q: np.ndarray, idx: np.ndarray, head: np.ndarray, budget: float, cap: int,
           rng: np.random.Generator) -> RoundPlan:
    """Prefixes of the sequences starting at ``head``. Only the sequences still growing (the first k
    fit) are carried, compacted in index order; each k draws a whole permutation (the same random
    stream whatever the survivors)."""
    m = idx.size
    live = np.arange(m)
    sum_n, sum_sq = p[head], q[head]
    sums = [(sum_n, sum_sq)]
    cuts: list[tuple[int, np.ndarray | None]] = []
    counts: list[int] = []
    nxt = head.copy()
    n_of = np.zeros(m, dtype=np.int64)
    k = 1
    while True:
        pick = idx[rng.permutation(m)][live]
        if k == cap:  # capped: N = cap, the next request heads the next batch
            cuts.append((k - 1, None))
            counts.append(int(live.size))
            nxt[live] = pick
            n_of[live] = k
            break
        n2, q2 = sum_n + p[pick], sum_sq + q[pick]
        stays = n2 <= budget
        stop = ~stays
        cuts.append((k - 1, stop))
        counts.append(int(stop.sum()))
        nxt[live[stop]] = pick[stop]
        n_of[live[stop]] = k
        if not stays.any():
            break
        k += 1
        live, sum_n, sum_sq = live[stays], n2[stays], q2[stays]
        sums.append((sum_n, sum_sq))
    return RoundPlan(tuple(sums), tuple(cuts), tuple(counts), nxt, n_of)


def _plan(p: np.ndarray, c: np.ndarray, budget: float, cap: int, seed: int) -> BudgetPlan:
    idx = base_indices(p)
    rng = np.random.default_rng(seed)
    m = idx.size
    q = p * p + 2 * p * c
    first = _round(p, q, idx, idx[rng.permutation(m)], budget, cap, rng)
    # heads after a fresh-headed cut, binned by the cut size k (the law's docstring says why)
    over0, n0 = first.overflow, first.n_of
    n_max0 = int(n0.max())
    edges = sorted({int(x) for x in quantiles(n0, HEAD_BIN_QUANTILES)} | {n_max0})
    bins, lo = [], 1
    for e in edges:
        if e >= lo:
            bins.append((lo, e))
            lo = e + 1
    binned: list[RoundPlan | None] = []
    for lo, hi in bins:
        sel = over0[(n0 >= lo) & (n0 <= hi)]
        binned.append(_round(p, q, idx, sel[rng.integers(0, sel.size, m)], budget, cap, rng) if sel.size else None)
    later = [first]
    for _ in range(HEAD_ROUNDS):
        later.append(_round(p, q, idx, later[-1].overflow, budget, cap, rng))
    return BudgetPlan(m, first, tuple(bins), tuple(binned), tuple(later[1:]))


#: plans by (digest of the prompt and cached samples, budget, cap, seed)
_PLANS: dict[tuple[str, float, int, int], BudgetPlan] = {}


def budget_plan(p: np.ndarray, c: np.ndarray, budget: float, cap: int, seed: int) -> BudgetPlan:
    """The bookkeeping of the token-budget law for the checked prompt sample ``p`` and cached
    sample ``c`` (:func:`~qmodel.stations.prefill.sampling.prompt_sample`), kept by their content.
    The plan's arrays are shared by every law built from it: read-only."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(p, dtype=float).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(c, dtype=float).tobytes())
    key = (h.hexdigest(), float(budget), int(cap), int(seed))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(p, c, float(budget), int(cap), int(seed))
        for r in (plan.first, *plan.later, *(b for b in plan.binned if b is not None)):
            for a in (r.overflow, r.n_of, *(x for pair in r.sums for x in pair),
                      *(mask for _, mask in r.cuts if mask is not None)):
                a.flags.writeable = False
        while len(_PLANS) > _KEEP:
            _PLANS.pop(next(iter(_PLANS)))
    return plan
