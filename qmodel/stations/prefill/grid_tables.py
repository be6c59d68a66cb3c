"""The batch-time laws of the prefill wait grids on one time grid (rate-independent given dx).

:func:`grid_tables` puts every regime's fit and cut S_k on the grid (rounded up) and keeps them on
the law for the last step used, with their transforms (:class:`GridTables`): a goodput search
solves many rates on one dx, and rebuilding these tables was ~40% of a solve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import numpy as np

from qmodel.stations.prefill.regimes import Regime

if TYPE_CHECKING:
    from qmodel.stations.prefill.chain import BulkQueue
    from qmodel.stations.prefill.law import BatchServiceLaw

__all__ = ["GridTables", "grid_tables"]

#: batch-time transforms kept on a law between solves (beyond it they are recomputed per solve)
_GRID_CACHE_BYTES = 64 << 20


@dataclass(frozen=True)
class GridTables:
    """The batch-time laws of :meth:`BulkQueue.grids` on one time grid (rate-independent given dx)."""

    #: laws[f, 0] regime f's fit pmfs, laws[f, 1] its cut pmfs, k = 1..b, zero-padded to n_s bins
    laws: np.ndarray
    #: support length of each cut pmf (index of the last nonzero bin + 1), per regime
    lens: list[np.ndarray]
    #: bin mid-points (v + 1/2) dx, v < n_s: the ages at which arrivals are counted
    ages: np.ndarray
    #: transforms of these tables by (table id, length), kept with them (see BulkQueue.grids)
    fft: dict
    #: the chain's regimes, in the order of the tables
    regimes: list[Regime]
    #: per regime its (b, n_s) fit and cut tables, and every row as (regimes · 2 · b, n_s): the laws
    #: an own batch runs, in the column order of the grids' h
    ff: list[np.ndarray] = field(init=False)
    fc: list[np.ndarray] = field(init=False)
    own_rows: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ff", [x for x in self.laws[:, 0]])
        object.__setattr__(self, "fc", [x for x in self.laws[:, 1]])
        object.__setattr__(self, "own_rows", self.laws.reshape(-1, self.laws.shape[-1]))

    @property
    def n_s(self) -> int:
        return self.laws.shape[-1]

    @cached_property
    def cut_support(self) -> int:
        """The longest support among the cut laws that carry weight (what one drain step adds)."""
        return max(int(lens[reg.live_rows].max()) for lens, reg in zip(self.lens, self.regimes))

    @cached_property
    def cut_bins(self) -> tuple[int, list[list[tuple[list[int], list[float]]]]]:
        """(most nonzero bins of a cut law that carries weight; per regime, per live k, the nonzero
        bins of its cut law and P(N = k) times their mass): the drain's shifts when the laws are a
        few bins (:func:`~qmodel.stations.prefill.drain.drain_shifts`)."""
        most, out = 0, []
        for fc, reg in zip(self.fc, self.regimes):
            rows = []
            for k in reg.live_k:
                nz = fc[k - 1].nonzero()[0]
                most = max(most, nz.size)
                rows.append((nz.tolist(), (reg.p_n[k - 1] * fc[k - 1][nz]).tolist()))
            out.append(rows)
        return most, out

    @cached_property
    def own_bins(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(most nonzero bins in one row of own_rows; the row, bin and mass of each nonzero entry, row
        by row): the own batch's convolution by shifts when every law is a few bins."""
        rows, bins = self.own_rows.nonzero()
        most = int(np.bincount(rows).max()) if rows.size else 0
        return most, rows, bins, self.own_rows[rows, bins][:, None]

    def kept(self, key: tuple, build: Callable[[], np.ndarray]) -> np.ndarray:
        """A rate-independent table of these laws (transforms at one length, ...), kept across
        solves within a memory budget (transform lengths follow the rate)."""
        hit = self.fft.get(key)
        if hit is None:
            hit = build()
            if sum(v.nbytes for v in self.fft.values()) + hit.nbytes > _GRID_CACHE_BYTES:
                self.fft.clear()
            self.fft[key] = hit
        return hit

    def law_fft(self, lst: np.ndarray, n: int) -> np.ndarray:
        """rfft of every row of ``lst`` (one of these tables) at length n, batched; kept across solves."""
        return self.kept((id(lst), n), lambda: np.fft.rfft(lst, n, axis=1))



def grid_tables(q: BulkQueue, dx: float, stages: int = 1) -> GridTables:
    """Per regime, the fit and cut batch-time pmfs on the grid (:class:`GridTables`; a k with
    P(N = k) = 0 carries no cut law), and a dict for their transforms. Rate-independent given
    dx, so they are kept on the law for the last dx (a goodput search mostly keeps dx: it is set
    by the shortest batch below saturation). ``stages`` > 1: the laws of stages · S_k (an own
    batch through a pipeline, :meth:`BulkQueue.grids`), kept beside the plain ones."""
    cache = q.law.grid_cache
    if stages != 1:
        cache = cache.setdefault("stages", {})
        dx = dx / stages  # stages · S_k on dx = S_k on dx / stages, bin for bin
    key = (dx, q.b)
    if cache.get("key") == key:
        return cache["tables"]
    b, regs = q.b, q.regimes
    grid_cache: dict[tuple[int, int], np.ndarray] = {}

    def gp(lw: BatchServiceLaw, k: int) -> np.ndarray:
        if (id(lw), k) not in grid_cache:
            grid_cache[(id(lw), k)] = lw.grid_pmf(k, dx)
        return grid_cache[(id(lw), k)]

    ff_l = [[gp(reg.fit, k) for k in range(1, b + 1)] for reg in regs]
    fc_l = [[gp(reg.cut, k) if reg.p_n[k - 1] > 0 else np.zeros(1) for k in range(1, b + 1)] for reg in regs]
    n_s = max(len(x) for lst in ff_l + fc_l for x in lst)
    laws = np.zeros((len(regs), 2, b, n_s))
    for f, (fit_l, cut_l) in enumerate(zip(ff_l, fc_l)):
        for c, lst in enumerate((fit_l, cut_l)):
            for i, x in enumerate(lst):
                laws[f, c, i, : len(x)] = x
    # support length of each cut pmf (index of the last nonzero bin + 1)
    lens = [np.array([len(np.trim_zeros(x, "b")) for x in lst]) for lst in fc_l]
    tables = GridTables(laws, lens, (np.arange(n_s) + 0.5) * dx, {}, regs)
    kept = {"stages": cache["stages"]} if stages == 1 and "stages" in cache else {}
    cache.clear()
    cache.update(kept)
    if laws.nbytes <= _GRID_CACHE_BYTES:  # else too big to hold between solves
        cache.update(key=key, tables=tables)
    return tables
