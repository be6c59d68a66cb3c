"""The drain of the q ahead in the prefill wait grids: P(W = t, m still ahead) per head regime.

With p still ahead the next batch is ours when N ≥ p + 1, else it takes N and leaves p − N. In
transforms over time, with Ŷ_p^g the (residual, q = p) law when the next batch forms in regime g,
V_p^g = Ŷ_p^g + Σ_{h → g} Σ_k P_h(N = k) Ŝ_{h,k}^cut V_{p+k}^h, run top down in blocks of the
smallest N (:func:`drain_transforms`); when every cut law is a few grid bins (deterministic batch
times) the same circular convolutions are shifted adds (:func:`drain_shifts`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from qmodel.stations.prefill.grid_tables import GridTables
from qmodel.stations.prefill.kernels import shift_add

if TYPE_CHECKING:
    from qmodel.stations.prefill.chain import BulkQueue

__all__ = ["drain_transforms", "drain_shifts"]


def drain_transforms(q: BulkQueue, ys: list[np.ndarray], ext: list[int], tables: GridTables, size: int,
                     m_own: int) -> np.ndarray:
    """P(W = t, m ahead), one row per (regime g, m), m < m_own, from the (residual, q) laws ``ys``
    (rows up to ext per regime), by transforms of length ``size`` over time: V_p^g = Ŷ_p^g +
    Σ_{h → g} Σ_k P_h(N = k) Ŝ_{h,k}^cut V_{p+k}^h (see :func:`~qmodel.stations.prefill.wait_grids.solve_grids`), then inverted."""
    b, regs = q.b, q.regimes
    nr, last = len(regs), len(regs) - 1
    ks, flow, fc, n_s = [reg.live_k for reg in regs], q.law.cut_flow, tables.fc, tables.n_s
    n_q, nfreq = ys[0].shape[1], size // 2 + 1

    def vhat(y: np.ndarray, e: int) -> np.ndarray:
        ypad = np.empty((e, n_s + 1))  # one row per count: the transforms run along rows
        ypad[:, 0] = 0.0
        ypad[:, 1:] = y[:, :e].T
        out = np.empty((max(e, m_own) + b, nfreq), dtype=complex)
        out[e:] = 0.0
        np.fft.rfft(ypad, size, axis=1, out=out[:e])
        return out

    def cut_coef(f: int) -> np.ndarray:
        ki = regs[f].live_rows
        return regs[f].p_n[ki, None] * tables.law_fft(fc[f], size)[ki]

    V = [vhat(y, e) for y, e in zip(ys, ext)]
    coef = [tables.kept(("coef", f, size), functools.partial(cut_coef, f)) for f in range(nr)]
    buf = np.empty((max(ext[:-1], default=0), nfreq), dtype=complex)  # (no allocation per step)
    for f in range(nr - 1):  # a cut at k in regime f leaves the queue to a later regime
        e = ext[f]
        for c_k, k, g in zip(coef[f], ks[f], flow[f]):
            if k < e:
                V[g][: e - k] += np.multiply(c_k, V[f][k:e], out=buf[: e - k])
    # Drain, top down in blocks of the smallest N (all of a plain cap's b at once)
    drain, cl, kmin = ks[last], coef[last], q.law.min_cut
    karr = np.array(drain)
    # batch sizes N = k0..k0+K−1 without gaps (the usual case): the rows V_{p+k} are a slice,
    # read in place instead of gathered into a copy on every step of this sequential recurrence
    k0, nk = drain[0], len(drain)
    contiguous = drain == tuple(range(k0, k0 + nk))
    # Σ_k c_k V_{p+k} as a product into one buffer and a sum over its rows (2x faster than
    # einsum here; the rows are added in order)
    prod = np.empty(cl.shape, dtype=complex)
    hi = n_q - 1
    Vl = V[last]
    while hi >= 0:
        lo = max(0, hi - kmin + 1)
        if len(drain) == 1:
            Vl[lo : hi + 1] += cl[0] * Vl[lo + drain[0] : hi + 1 + drain[0]]
        elif contiguous:
            for p in range(hi, lo - 1, -1):
                Vl[p] += np.multiply(cl, Vl[p + k0 : p + k0 + nk], out=prod).sum(axis=0)
        else:
            for p in range(hi, lo - 1, -1):
                Vl[p] += np.multiply(cl, Vl[p + karr], out=prod).sum(axis=0)
        hi = lo - 1
    v_own = V[0][:m_own] if nr == 1 else np.concatenate([v[:m_own] for v in V])
    return np.fft.irfft(v_own, size, axis=1)

def drain_shifts(q: BulkQueue, ys: list[np.ndarray], ext: list[int], tables: GridTables, size: int,
                 m_own: int) -> np.ndarray:
    """:func:`drain_transforms` when every cut law is a few grid bins (deterministic batch times,
    :attr:`GridTables.cut_bins`): each product with a law's transform is that many circular
    shifted adds along time (the same circular convolutions of length ``size``, to round-off), so
    nothing is transformed and no complex table is built."""
    b, regs = q.b, q.regimes
    nr, last = len(regs), len(regs) - 1
    ks, flow, n_s = [reg.live_k for reg in regs], q.law.cut_flow, tables.n_s
    bins = tables.cut_bins[1]
    n_q = ys[0].shape[1]
    V, reach = [], []
    for y, e in zip(ys, ext):
        v = np.zeros((max(e, m_own) + b, size))
        v[:e, 1 : n_s + 1] = y[:, :e].T  # (the transforms' zero column: a wait ends on a bin edge)
        V.append(v)
        reach.append(n_s + 1)  # every column from here on is zero, in every row of v
    for f in range(nr - 1):  # a cut at k in regime f leaves the queue to a later regime
        e = ext[f]
        for (sb, sw), k, g in zip(bins[f], ks[f], flow[f]):
            if k < e:
                reach[g] = max(reach[g], shift_add(V[g][: e - k], V[f][k:e], sb, sw, reach[f]))
    # Drain, top down in blocks of the smallest N: a block reads only rows above it (k >= kmin),
    # final by then; the rows from n_q on are zero and stay so (no block adds to them)
    kmin, Vl, hi = q.law.min_cut, V[last], n_q - 1
    while hi >= 0:
        lo = max(0, hi - kmin + 1)
        src_reach, new_reach = reach[last], reach[last]
        for (sb, sw), k in zip(bins[last], ks[last]):
            top = min(hi, n_q - 1 - k)  # rows p whose V_{p+k} can be nonzero
            if top >= lo:
                new_reach = max(new_reach, shift_add(Vl[lo : top + 1], Vl[lo + k : top + 1 + k], sb, sw,
                                                      src_reach))
        reach[last] = new_reach
        hi = lo - 1
    return V[0][:m_own] if nr == 1 else np.concatenate([v[:m_own] for v in V])
