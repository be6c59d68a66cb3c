"""The prefill wait grids' last steps: the own batch, W + own_stages · S_own jointly, the distributions.

A request with m still ahead when its wait ends rides in a batch of k = min(N', m + 1 + Poisson(λW)),
N' ~ N given N' ≥ m + 1 (:func:`own_batch_rows`: one row per own-batch law over W's grid); the
joint law is Σ_k h_k ⊛ S_k (:func:`delay_law`), so W and S_own are never taken as independent.
Called by :func:`~qmodel.stations.prefill.wait_grids.solve_grids`, which holds the thresholds
(``direct_terms``, ``sparse_bins``) that choose the direct sums over the transforms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qmodel.dist import GridDist, zero_atom
from qmodel.stations.prefill.grid_tables import GridTables, grid_tables
from qmodel.stations.prefill.kernels import fast_len, poisson_matrix

if TYPE_CHECKING:
    from qmodel.stations.prefill.chain import BulkQueue

__all__ = ["own_batch_rows", "delay_law", "distributions"]


def own_batch_rows(u3: np.ndarray, lam_t: np.ndarray, b: int, m_own: int, own_weights: np.ndarray, p_zero: float,
                   direct_terms: int) -> np.ndarray:
    """h, one row per own-batch law (rows in the order of GridTables.own_rows), over W's grid.

    Own batch: k = min(N', m + 1 + Poisson(λW)), N' ~ N | N ≥ m + 1. h[f, c, i, t] for regime f,
    c = 0: a fit batch of i + 1 (P(Poisson(λW) = i − m), times P_f(N ≥ i + 1)), c = 1: a cut at
    i + 1 (P(Poisson(λW) > i − m), times P_f(N = i + 1)); ``lam_t`` = λ × the grid times t > 0. The count
    convolution is summed directly when it is at most ``direct_terms`` products, else by FFT."""
    nr, _, size = u3.shape
    # qt[t, 0] = P(Poisson(λW) = i), qt[t, 1] = P(Poisson > i), i < b, after m_own − 1 zero columns
    qt = np.zeros((size, 2, m_own - 1 + b))
    q, tail = qt[:, 0, m_own - 1 :], qt[:, 1, m_own - 1 :]
    q[0, 0] = 1.0  # W = 0: no arrivals
    q[1:] = poisson_matrix(lam_t, b)
    q.cumsum(axis=1, out=tail)
    np.subtract(1.0, tail, out=tail)
    np.maximum(tail, 0.0, out=tail)  # (at most 1 already: 1 minus a sum of probabilities)
    # h[t, i] = Σ_j u[t, j] q[t, i − j], i < b: a linear convolution of m_own and b terms along
    # the count axis, directly when that is only a few products (plain caps: a band view of the
    # zero-padded table), else by FFT
    if m_own * b <= direct_terms:
        st = qt.strides
        band = np.ndarray((size, 2, m_own, b), buffer=qt, offset=(m_own - 1) * st[2],
                          strides=(st[0], st[1], -st[2], st[2]))  # band[t, c, j, i] = qt[t, c, m_own − 1 + i − j]
        h = np.einsum("fjt,tcji->fcit", u3, band)
    else:
        lb = fast_len(m_own + b)
        qh = np.fft.rfft(qt[:, :, m_own - 1 :], lb, axis=2).transpose(1, 2, 0)  # (2, lb/2+1, size)
        h = np.empty((nr, 2, b, size))
        for f in range(nr):  # (one regime at a time: a batched product ran 2x slower, on memory)
            uh = np.fft.rfft(u3[f], lb, axis=0)
            for c in range(2):
                h[f, c] = np.fft.irfft(uh * qh[c], lb, axis=0)[:b]
        np.maximum(h, 0.0, out=h)
    h *= own_weights[..., None]  # (nr, 2, b): [P_f(N ≥ k), P_f(N = k)]
    h = h.reshape(nr * 2 * b, size)  # rows in the order of tables.own_rows
    h[0, 0] += p_zero  # an arrival to an idle engine runs alone, fresh
    return h


def delay_law(queue: BulkQueue, h: np.ndarray, tables: GridTables, dx: float, size: int, length: int,
              wait_scale: float, heavy: bool, tail_ratio: float, own_stages: int, w_tail: float,
              sparse_bins: int) -> tuple[np.ndarray, float, float | None, np.ndarray, GridTables]:
    """(W + own_stages · S_own normalised, its mass before that, the mass of its exponential tail
    (heavy; else None), the own batch's time law unnormalised, the tables of the own batch's laws).

    W's support is within `length` (past it the mass is < _WAIT_TAIL), so a transform of length +
    n_s does not wrap. Through a pipeline the own batch runs own_stages · S_k (its laws on a grid
    own_stages times finer); where every own law is at most ``sparse_bins`` bins the sum Σ_k h_k ⊛ S_k
    is shifted adds."""
    n_s = tables.n_s
    mass = h.sum(axis=1)
    if heavy:
        # the rows' mass past the grid's end (their geometric continuation at e^{−η dx/scale}
        # per bin, from the last n_s + 2 bins: robust to the gaps a stretched grid leaves)
        r_s = tail_ratio
        k_end = min(n_s + 2, size)
        span_w = float(np.sum(r_s ** -np.arange(k_end, dtype=float)))
        mass = mass + h[:, size - k_end :].sum(axis=1) / span_w * r_s / (1.0 - r_s)
    own = mass @ tables.own_rows  # (the rows without mass add exact zeros)
    if own_stages != 1:
        tables = grid_tables(queue, dx, own_stages)
        n_s = tables.n_s
    out_size = fast_len((size if wait_scale != 1.0 or heavy else length) + n_s)
    most, o_rows, o_bins, o_mass = tables.own_bins
    if most <= sparse_bins:
        # every own law is a few bins (deterministic batch times): Σ_k h_k ⊛ S_k is the rows of h
        # shifted by those bins, all added by one bincount (indices wrapped as the transform of
        # length out_size wraps; size <= out_size, so at most once)
        idx = o_bins[:, None] + np.arange(size)
        if int(o_bins.max()) + size > out_size:
            idx %= out_size
        joint = np.bincount(idx.ravel(), weights=(h[o_rows] * o_mass).ravel(),
                            minlength=out_size)[: min(size + n_s, out_size)]
    else:
        live = (mass > 0).nonzero()[0]
        if live.size == mass.size:
            laws_hat = tables.law_fft(tables.own_rows, out_size)
        else:  # the transforms of the rows that carry mass, kept as one table (no gather per solve)
            h = h[live]
            own_rows = tables.own_rows
            laws_hat = tables.kept(("own", out_size, live.tobytes()),
                                   lambda: np.fft.rfft(own_rows[live], out_size, axis=1))
        hh = np.fft.rfft(h, out_size, axis=1)
        acc = np.multiply(hh, laws_hat, out=hh).sum(axis=0)  # Σ_k ĥ_k Ŝ_k (faster than einsum)
        joint = np.fft.irfft(acc, out_size)[: min(size + n_s, out_size)]
        np.maximum(joint, 0.0, out=joint)
    d_tail = None
    if heavy:
        # W + S_own is exact up to W's grid end (what lies past it comes from W's tail); the rest
        # of the mass is its tail, at W's rate (S_own is bounded)
        total = float(joint.sum()) / max(1.0 - w_tail, 1e-300)  # all of W's grid mass, convolved
        joint = joint[:size] / total
        d_tail = max(0.0, 1.0 - float(joint.sum()))
    else:
        total = joint.sum()
        joint /= total
    return joint, total, d_tail, own, tables


def distributions(wpmf: np.ndarray, joint: np.ndarray, own: np.ndarray, s1: np.ndarray, dx: float, wq: float,
                  own_exit_mean: float, own_mean: float, p_zero: float, total: float, exact: bool, heavy: bool,
                  tail_rate: float, w_tail: float, d_tail: float | None) -> tuple[GridDist, GridDist, GridDist]:
    """(W, W + S_own, S_own) as GridDists with the chain's means, their point masses when the law is
    exact, and (heavy) their exponential tails past the grid at ``tail_rate``."""
    w_atoms = d_atoms = None
    if exact:
        # Point masses (GridDist.atoms; an exact law only, an approximate one keeps the
        # conservative reading, docs/methods.md Grids): W has a density past its atom at 0 (an
        # arrival lands at a uniform age of the batch in progress), so the only point masses
        # of W + S_own are those of an arrival to an idle engine: its own batch of one, S_1 on
        # the grid (exactly at a grid point for a batch time on it; rounded up otherwise).
        d_atoms = np.zeros(joint.size)
        m = min(s1.size, joint.size)
        d_atoms[:m] = s1[:m] * (p_zero / total)
        np.minimum(d_atoms, joint, out=d_atoms)
        w_atoms = zero_atom(wpmf)
    if heavy:  # the exponential tails past the grids' ends (GridDist reads them analytically)
        wait = GridDist(dx, wpmf, wq, tail=w_tail, tail_rate=tail_rate, exact=exact, atoms=w_atoms, tail_exact=True)
        delay = GridDist(dx, joint, wq + own_exit_mean, tail=d_tail, tail_rate=tail_rate, exact=exact, atoms=d_atoms,
                         tail_exact=True)
    else:
        wait = GridDist.trimmed_from(wpmf, dx, wq, exact, atoms=w_atoms)
        delay = GridDist.trimmed_from(joint, dx, wq + own_exit_mean, exact, atoms=d_atoms)
    own /= own.sum()
    own_d = GridDist.trimmed_from(own, dx, own_mean, exact)
    return wait, delay, own_d
