"""Numerical kernels of the prefill bulk queue (:mod:`qmodel.stations.prefill`): Poisson tables,
the chain's decay root, banded and Toeplitz views, count and time convolutions, balance solves.

Each is a pure function of its arrays; the chain (:mod:`~qmodel.stations.prefill.chain`) and the
wait grids (:mod:`~qmodel.stations.prefill.wait_grids`) call them. Where a fast path replaces a
plain one (shifted adds for transforms, a Toeplitz product for FFTs, bincounts for np.add.at) the
docstring states that the numbers are the same, to round-off or bit for bit; tests hold them to it.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from qmodel.dist import fast_len as plain_fast_len

__all__ = ["fast_len", "log_factorials", "poisson_matrix", "decay_root", "band_view", "log_drain_transform",
           "convolve_rows", "shift_add", "convolve_counts", "unit_vector", "balance_matrix", "balance_view",
           "solve_balance", "scale_time"]

#: log-pmf below which a Poisson table's remaining columns are dropped (see poisson_matrix)
_NEGLIGIBLE_LOG_PMF = -60.0
_DENSE_MAX = 600  # balance systems up to this size are solved dense

#: 5-smooth transform lengths (a pure function of the length), memoised: a solve asks for several
fast_len = functools.lru_cache(maxsize=4096)(plain_fast_len)


@functools.lru_cache(maxsize=64)
def log_factorials(n: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """(m, ln m!) for m = 0..n−1, read-only, and ln m! as a list (the bisection of poisson_matrix
    reads single entries: a list item is a Python float, no NumPy scalar): every Poisson table of
    a solve asks for a few n. ln m! = lgamma(m + 1) from :func:`math.lgamma` (correctly rounded to
    an ulp or so, like scipy's gammaln, without importing scipy.special: 0.1-0.2 s of a cold CLI
    solve; a cumulative sum of logs would drift by ~n ulps)."""
    lg_list = [math.lgamma(k + 1.0) for k in range(n)]
    m = np.arange(n, dtype=float)
    lg = np.array(lg_list, dtype=float)
    m.flags.writeable = lg.flags.writeable = False
    return m, lg, lg_list


def poisson_matrix(mu: np.ndarray, n: int) -> np.ndarray:
    """pmf[i, m] = P(Poisson(mu_i) = m), m < n (log-space: no overflow for large means)."""
    mu = np.asarray(mu, dtype=float).reshape(-1, 1)
    m, lg, lg_list = log_factorials(int(n))
    # Past the mode, P(Poisson(μ) = m) falls with m and, for m > μ, rises with μ: from the first
    # m > max μ where even the largest mean gives a log-pmf below −60, every row's remaining terms
    # are below e^{−60} ≈ 1e-26 each (their sum over any n here is below 1e-21, eight orders under
    # the chains' 1e-13 truncation target) and are left at 0. Only the columns before it are
    # evaluated: most of the work when n is far past the arrivals that can occur.
    # (the ufuncs' own reductions: ndarray.max/min add a Python wrapper each)
    top = float(np.maximum.reduce(mu, axis=None)) if mu.size else 0.0
    n_eval = n
    if top > 0:
        # the log-pmf m ln(top) − top − ln m! falls for every m > top: the columns left out are a
        # suffix, and bisection finds where it starts (n: none)
        log_top, lo = math.log(top), min(int(top) + 1, n)
        while lo < n_eval:
            mid = (lo + n_eval) // 2
            if mid * log_top - top - lg_list[mid] < _NEGLIGIBLE_LOG_PMF:
                n_eval = mid
            else:
                lo = mid + 1
    positive = bool(mu.size == 0 or np.minimum.reduce(mu, axis=None) > 0)
    safe = mu if positive else np.where(mu > 0, mu, 1.0)
    # the exponent built in place, in the order of m·ln μ − μ − ln m! (the same numbers), and in a
    # contiguous block so that exp runs on whole rows
    e = np.multiply(np.log(safe), m[:n_eval])
    e -= safe
    e -= lg[:n_eval]
    if n_eval < n:  # the exponentials written straight into the zero-padded table (no copy)
        out = np.zeros((mu.shape[0], n))
        np.exp(e, out=out[:, :n_eval])
    else:
        out = np.exp(e, out=e)
    if not positive:  # a zero mean: no arrivals
        zero = ~(mu[:, 0] > 0)
        out[zero] = 0.0
        out[zero, 0] = 1.0
    return out



def band_view(base: np.ndarray, start: int, shape: tuple[int, int], row_step: int,
          writeable: bool = False) -> np.ndarray:
    """View v[r, c] = base.flat[start + r·row_step + c] of a C-contiguous array: with row_step one
    less than base's row length, row r is base's row r shifted r columns left (a band of base,
    read or written in place, without the gather of a fancy index)."""
    if not (base.flags.c_contiguous and start >= 0 and start + (shape[0] - 1) * row_step + shape[1] <= base.size):
        raise ValueError("band view outside its array")
    size = base.itemsize
    out = np.ndarray(shape, base.dtype, buffer=base, offset=start * size, strides=(row_step * size, size))
    out.flags.writeable = writeable
    return out


def log_drain_transform(logw: np.ndarray, v: np.ndarray, kv: np.ndarray, z: float) -> tuple[float, float]:
    """log E[z^{−N} e^{λS(z−1)}] over the nodes (log-sum-exp) and its derivative Σ p_i (v_i − k_i/z)
    (see BulkQueue._size)."""
    e = logw + v * (z - 1.0) - kv * math.log(z)
    top = float(e.max())
    p = np.exp(e - top)
    tot = float(p.sum())
    return top + math.log(tot), float(p @ (v - kv / z)) / tot


def decay_root(drain_nodes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float], lam: float) -> float:
    """z0 > 1, the root of E[z^{−N} A_N(z)] = 1 (z^b = A_b(z) for a plain cap), A_k(z) = E[e^{λ S_k (z−1)}]
    over the cut law's nodes ``drain_nodes`` (:attr:`BatchServiceLaw.drain_nodes`): the chain's tail
    decays like z0^{−j} (:attr:`BulkQueue._size`)."""
    s_nodes, w, kv, logw, c_ = drain_nodes
    v = lam * s_nodes

    if v.size == 1:  # one node (deterministic times): the log-sum-exp is its exponent
        v0, k0, lw0 = float(v[0]), float(kv[0]), float(logw[0])

        def g(z: float) -> tuple[float, float]:
            return lw0 + v0 * (z - 1.0) - k0 * math.log(z), v0 - k0 / z
    else:
        g = functools.partial(log_drain_transform, logw, v, kv)

    # g(1) = 0, g'(1) = λE[S_N] − E[N] < 0 (ρ < 1) and g is convex in z: Newton from the right
    # of the positive root falls onto it monotonically (quadratically; bisection needed ~40
    # evaluations). The bracket [lo, hi] guards the iterates; bisection if Newton stalls.
    # A start right of the root, without probing g: by Jensen g(z) >= h(z) = a(z − 1) − c ln z
    # (a = λE[S_N], c = E[N] over the nodes), whose positive root z_J is found by scalar Newton
    # from z_s = (2c/a − 1)² (ln z <= 2(√z − 1) gives h(z_s) >= 0). g(z_J) >= 0, and g = h
    # when the batch time is deterministic: Newton on g then starts on its root.
    a_ = float(w @ v)
    hi = (2.0 * c_ / a_ - 1.0) ** 2
    for _ in range(100):
        step = (a_ * (hi - 1.0) - c_ * math.log(hi)) / (a_ - c_ / hi)
        if not step > 1e-15 * hi:
            break
        hi -= step
    lo = 1.0 + 1e-12
    gz, dg = g(hi)  # (each point is evaluated once: gz, dg always belong to z)
    while gz < 0:  # round-off only
        lo, hi = hi, 2.0 * hi
        gz, dg = g(hi)
    z = hi
    for _ in range(100):
        if gz < 0:
            lo = z
        else:
            hi = z
        if hi - lo < 1e-12 * hi or gz == 0.0:
            break
        step = z - gz / dg if dg > 0 else 0.5 * (lo + hi)
        z = step if lo < step < hi else 0.5 * (lo + hi)
        gz, dg = g(z)
    hi = z if gz >= 0 else hi
    return hi


def convolve_rows(table: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Each row of ``table`` convolved with ``w``, cut to the table's width, by transforms of length
    n (≥ both lengths together: no wrap). The row w rides along as one more row of the table: one
    transform for both (row by row the same numbers as two)."""
    rows, cols = table.shape
    both = np.zeros((rows + 1, max(cols, w.size)))
    both[:rows, :cols] = table
    both[rows, : w.size] = w
    hat = np.fft.rfft(both, n, axis=1)
    return np.fft.irfft(hat[:rows] * hat[rows], n, axis=1)[:, :cols]


def shift_add(dst: np.ndarray, src: np.ndarray, bins: Sequence[int], weights: Sequence[float],
               reach: int) -> int:
    """dst += Σ_i weights[i] · (src circularly shifted by bins[i] along the rows), where the columns
    of src from ``reach`` on are zero (their shifts are not added: they add exact zeros). Returns
    the reach of what was added (the row length when it wrapped)."""
    n = dst.shape[1]
    out = 0
    for s, w in zip(bins, weights):
        end = s + reach
        if end <= n:
            dst[:, s:end] += w * src[:, :reach]
            out = max(out, end)
        else:  # (the circular wrap of a transform of length n)
            dst[:, s:] += w * src[:, : n - s]
            dst[:, : end - n] += w * src[:, n - s : reach]
            out = n
    return out


def convolve_counts(table: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each row of ``table`` convolved with ``w``, cut to the table's width, as one product with the
    Toeplitz matrix T[i, j] = w[j − i] (a view of one padded copy of w, made contiguous for BLAS):
    for a few counts much cheaper than the transforms of :func:`convolve_rows` (same numbers to
    round-off)."""
    n = table.shape[1]
    pad = np.zeros(2 * n - 1)
    m = min(w.size, n)
    pad[n - 1 : n - 1 + m] = w[:m]
    toeplitz = np.ndarray((n, n), buffer=pad, offset=(n - 1) * pad.itemsize, strides=(-pad.itemsize, pad.itemsize))
    return table @ np.ascontiguousarray(toeplitz)


def unit_vector(n: int) -> np.ndarray:
    """(1, 0, …, 0) of length n: no count ahead left over."""
    out = np.zeros(n)
    out[0] = 1.0
    return out


def balance_matrix(P: np.ndarray) -> np.ndarray:
    """Pᵀ − I as a fresh C-ordered array (one transposing copy, the diagonal lowered in place:
    no identity matrix built and subtracted)."""
    A = np.ascontiguousarray(P.T)
    A.flat[:: A.shape[0] + 1] -= 1.0
    return A


def balance_view(P: np.ndarray) -> np.ndarray:
    """Pᵀ − I as a column-major view of P itself (P's diagonal lowered in place; P is consumed):
    no transposing copy, and the layout LAPACK factors in place."""
    P.flat[:: P.shape[0] + 1] -= 1.0
    return P.T


def solve_balance(A: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve the balance equations (A may be overwritten). Large systems (several head regimes near
    saturation) are sparse: a state reaches only ~b below and the arrival range above, and Poisson
    tails below 1e-300 are exactly zero in double precision, so a sparse LU on the nonzeros is exact
    to round-off and ~100x faster than a dense solve of thousands of states."""
    if A.shape[0] <= _DENSE_MAX:
        # numpy's LAPACK gesv (scipy.linalg's would cost a cold CLI solve a ~0.1 s import)
        return np.linalg.solve(A, rhs)
    from scipy.sparse import csc_matrix
    from scipy.sparse.linalg import spsolve

    return np.asarray(spsolve(csc_matrix(A), rhs), dtype=float)


def scale_time(g: np.ndarray, scale: float) -> np.ndarray:
    """Re-place mass at bin i onto bin ceil(i·scale) (conservative rounding). A column-major g (the
    transpose of a C-ordered table) gives a column-major result, without a transposing copy."""
    n, ncol = g.shape
    pos = np.arange(n, dtype=float)  # (i·scale − 1e-9 in place: the same numbers, fewer temporaries)
    pos *= scale
    pos -= 1e-9
    idx = np.ceil(pos, out=pos).astype(np.int64)
    m = int(idx[-1]) + 1  # idx never decreases
    if g.T.flags.c_contiguous and not g.flags.c_contiguous:
        # one bincount over the columns laid end to end: each cell's rows are added in row order,
        # np.add.at's order (the same sums, bit for bit)
        flat = np.add.outer(np.arange(0, ncol * m, m), idx).ravel()
        return np.bincount(flat, weights=g.T.ravel(), minlength=ncol * m).reshape(ncol, m).T
    if scale < 0.125 or g.size <= 4096:
        # long runs (or a small table): one bincount over the row-major flattened table adds every
        # cell's rows in row order, np.add.at's order (the same sums, bit for bit) without its
        # per-element cost
        flat = (idx[:, None] * ncol + np.arange(ncol)).ravel()
        return np.bincount(flat, weights=np.ravel(g), minlength=m * ncol).reshape(m, ncol)
    # Each target bin takes one run of consecutive rows. Adding the runs' r-th rows for r = 0, 1, ...
    # is np.add.at's own order (same sums, bit for bit) in a few vector steps when runs are short.
    out = np.zeros((m, ncol))
    starts = np.flatnonzero(np.diff(idx, prepend=-1))
    runs = np.diff(np.append(starts, n))
    rank = np.arange(n) - np.repeat(starts, runs)
    for r in range(int(runs.max())):
        sel = rank == r
        out[idx[sel]] += g[sel]
    return out
