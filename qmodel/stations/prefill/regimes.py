"""Batch-formation regimes of the prefill chain and their per-state tables.

A :class:`Regime` is how the next batch forms given the head of the queue (fresh, an overflow head
after a cut, or the settled head of a long queue; see :mod:`qmodel.stations.prefill`): P(N = k),
P(N ≥ k) and the fit and cut batch-time laws. :class:`MixTables` are one regime's rate-independent
tables on the states j = 0..n: P(next batch takes the whole queue of j | j) = P(N ≥ j) (fit) and
P(it is cut at k < j) = P(N = k), and the per-state moments whose π-averages are the chain's cycle
sums (:attr:`BulkQueue.cycle`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from qmodel.arrays import distinct

if TYPE_CHECKING:
    from qmodel.stations.prefill.law import BatchServiceLaw

__all__ = ["Regime", "MixTables"]


@dataclass(frozen=True)
class Regime:
    """How the next batch forms: P(N = k), P(N ≥ k), fit and cut batch-time laws."""

    p_n: np.ndarray
    s_n: np.ndarray
    fit: "BatchServiceLaw"
    cut: "BatchServiceLaw"
    #: regime of the next batch after a cut at k (index k − 1); None: the last regime
    after_cut: np.ndarray | None = None
    #: BulkQueue._mix tables by (states, a), shared by the solves at every rate
    mix_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def next_after_cut(self, k: int, last: int) -> int:
        return last if self.after_cut is None else int(self.after_cut[k - 1])

    @cached_property
    def live_k(self) -> tuple[int, ...]:
        """The batch sizes k with P(N = k) > 0 (the cut laws that carry weight)."""
        return tuple(k for k in range(1, len(self.p_n) + 1) if self.p_n[k - 1] > 0)

    @cached_property
    def live_rows(self) -> np.ndarray:
        """live_k − 1: the rows of the per-k tables."""
        return np.array(self.live_k, dtype=np.int64) - 1

    @cached_property
    def live_index(self) -> slice | np.ndarray:
        """live_rows as a slice where they are consecutive (a plain cap: the last row only): the
        per-solve reads and writes of those rows are then views, not fancy-index copies."""
        k = self.live_k
        return slice(k[0] - 1, k[-1]) if k == tuple(range(k[0], k[-1] + 1)) else self.live_rows


@dataclass(frozen=True)
class MixTables:
    """One regime's batch-formation tables on the states j = 0..n (:meth:`BulkQueue._mix`). They do
    not depend on λ: built once per state count and kept on the regime (read-only), so a solve
    only multiplies them by its π and its arrival tables."""

    #: P(next batch takes k, whole queue | j) and P(next batch takes k < j, cut by the budget | j),
    #: each (n+1, b); the cut leaves j − k waiting
    pfit: np.ndarray
    pcut: np.ndarray
    #: the nonzero entries of pfit (at most one per row: the whole queue forms one batch size):
    #: rows j, columns k − 1, probabilities as a column
    fit_rows: np.ndarray
    fit_k: np.ndarray
    fit_p: np.ndarray
    #: (g, pcut kept on the batch sizes whose overflow head starts regime g), per regime g a cut reaches
    cut_to: tuple[tuple[int, np.ndarray], ...]
    #: the positive entries of pcut in row-major order: row j, k − 1, leftover j − k, P_cut; cut_upto[j]
    #: counts those in rows < j, cut_rmax the running maximum of the leftover
    cut_j: np.ndarray
    cut_k: np.ndarray
    cut_r: np.ndarray
    cut_p: np.ndarray
    cut_upto: np.ndarray
    cut_rmax: np.ndarray
    #: per-state columns whose π-averages are the cycle sums of BulkQueue._cycle (see MOMENTS)
    moments: np.ndarray

    #: the columns of ``moments`` after the b columns pfit + pcut (P(next batch takes k | j)): E[S | j], E[S² | j],
    #: E[(j − k) S | j] over cut batches, E[k | j], E[k² | j], E[k S | j], (a − j)⁺ (λ × the idle
    #: time) and a(a − 1) − j(j − 1) for j < a (2λ × the queue's area while idle)
    MOMENTS = ("es", "es2", "r_es", "ek", "ek2", "kes", "idle", "idle_area")

    @cached_property
    def fit_span(self) -> tuple[int, int] | None:
        """(first, last + 1) of fit_rows where they are consecutive (always under a plain cap: the
        states j <= b), else None: the per-solve write of those rows of P is then into a view."""
        r = self.fit_rows
        if r.size and int(r[-1]) - int(r[0]) + 1 == r.size:
            return int(r[0]), int(r[-1]) + 1
        return None

    @cached_property
    def nbytes(self) -> int:
        """Bytes held by the tables (what a cache of them counts)."""
        arrays = (self.pfit, self.pcut, self.fit_rows, self.fit_k, self.fit_p, self.cut_j, self.cut_k, self.cut_r,
                  self.cut_p, self.cut_upto, self.cut_rmax, self.moments, *(pg for _, pg in self.cut_to))
        return sum(a.nbytes for a in arrays)

    @staticmethod
    def build(pfit: np.ndarray, pcut: np.ndarray, reg: Regime, a: int, last: int) -> "MixTables":
        n1, b = pfit.shape
        j = np.arange(n1, dtype=float)
        kk = np.arange(1, b + 1, dtype=float)
        fit, cut = reg.fit, reg.cut
        fit_rows, fit_k = np.nonzero(pfit)
        nxt = np.array([reg.next_after_cut(k, last) for k in range(1, b + 1)])
        cut_to = []
        for g in distinct(nxt):  # the overflow heads the queue: its regime
            pg = pcut * (nxt == g)[None, :]
            if pg.any():
                cut_to.append((int(g), pg))
        live = pcut > 0
        cut_j, ck = np.nonzero(live)
        cut_r = cut_j - ck - 1
        upto = np.concatenate(([0], np.cumsum(np.count_nonzero(live, axis=1))))
        cut_es = pcut @ cut.mean_s
        cols = [
            pfit @ fit.mean_s + cut_es,
            pfit @ fit.second_s2 + pcut @ cut.second_s2,
            j * cut_es - pcut @ (kk * cut.mean_s),
            pfit @ kk + pcut @ kk,
            pfit @ (kk * kk) + pcut @ (kk * kk),
            pfit @ (kk * fit.mean_s) + pcut @ (kk * cut.mean_s),
            np.where(j < a, a - j, 0.0),
            np.where(j < a, a * (a - 1) - j * (j - 1), 0.0),
        ]
        out = MixTables(pfit, pcut, fit_rows, fit_k, pfit[fit_rows, fit_k][:, None], tuple(cut_to),
                         cut_j, ck, cut_r, pcut[live], upto,
                         np.maximum.accumulate(cut_r) if cut_r.size else cut_r,
                         np.column_stack([pfit + pcut] + cols))
        for arr in (out.pfit, out.pcut, out.fit_p, out.cut_p, out.moments, *(pg for _, pg in out.cut_to)):
            arr.flags.writeable = False
        return out
