"""Operations on :class:`~qmodel.dist.GridDist` laws: sums of independent terms (:func:`convolve`,
and :func:`sum_cdf` for one probability of a sum), mixtures and the stochastic maximum of two
approximations of one quantity. Sums are FFT convolutions (zero-padded, negatives from round-off
clipped) that keep the terms' point masses (``atoms``) apart; see :mod:`qmodel.dist`.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from qmodel.convolution import linear_convolution
from qmodel.dist import MAX_POINTS, GridDist

__all__ = ["convolve", "sum_cdf", "stochastic_max", "mixture"]


def convolve(*dists: GridDist) -> GridDist:
    """Distribution of the sum of independent terms (:func:`linear_convolution`: direct sums or
    one zero-padded FFT pass; negatives from round-off clipped)."""
    if not dists:
        raise ValueError("convolve needs at least one distribution")
    dx = max(d.dx for d in dists)
    parts = [d.regrid(dx).trimmed() for d in dists]
    n = sum(p.n for p in parts) - len(parts) + 1
    n_out = min(n, MAX_POINTS)
    pmf = linear_convolution([p.pmf for p in parts], n)
    np.maximum(pmf, 0.0, out=pmf)  # FFT round-off leaves ~-1e-17 where the law is ~0
    spill = float(pmf[n_out:].sum()) if n > n_out else 0.0
    pmf = pmf[:n_out]
    mass_on_grid = math.prod(1.0 - p.tail for p in parts)
    s = float(pmf.sum())
    factor = 1.0
    if s > 0 and mass_on_grid > spill:
        factor = (mass_on_grid - spill) / s
        pmf *= factor
        s *= factor
    tail = 1.0 - s
    rates = [p.tail_rate for p in parts if p.tail > 0]
    atoms = None
    if any(p.atoms is not None for p in parts):
        # the point masses of a sum are the sums of point masses (scaled as the pmf)
        atoms = linear_convolution([p.point_masses for p in parts], n)[:n_out]
        np.maximum(atoms, 0.0, out=atoms)
        atoms *= factor
        np.minimum(atoms, pmf, out=atoms)
    return GridDist(dx, pmf, float(sum(p.mean_s for p in parts)), tail=max(tail, 0.0),
                    tail_rate=min(rates) if rates else (1.0 / max(dx * n_out, 1e-300) if tail > 1e-12 else math.inf),
                    exact=all(p.exact for p in parts), atoms=atoms,
                    tail_exact=len(parts) == 1 and parts[0].tail_exact and n <= n_out)


def sum_cdf(dists: Sequence[GridDist], x: float) -> float:
    """P(X_1 + … + X_n <= x) for independent terms: ``convolve(*dists).cdf(x)`` without the law.

    The last term enters by one dot product against the others' law, Σ_i p_i F_n(x − i dx)
    (all but the last are FFT-convolved first), where the whole law would cost one more
    transform pair; a goodput search needs only this probability at each rate. It agrees with
    the convolved law's cdf to round-off and its trimming (< 1e-12).
    """
    if not dists:
        raise ValueError("sum_cdf needs at least one distribution")
    if len(dists) == 1:
        return float(dists[0].cdf(x))
    head = convolve(*dists[:-1]) if len(dists) > 2 else dists[0]
    last = dists[-1]
    dx = max(head.dx, last.dx)
    a, b = head.regrid(dx), last.regrid(dx)
    n_out = min(a.n + b.n - 1, MAX_POINTS)
    k = int(math.floor(x / dx + 1e-9))
    if k < 0:
        return 0.0
    k = min(k, n_out - 1)
    m = min(k, a.n - 1)
    cb = b.cum
    # F_b at k − i for i = 0..m, its last value past b's end
    idx = np.minimum(k - np.arange(m + 1), b.n - 1)
    p = float(np.dot(np.maximum(a.pmf[: m + 1], 0.0), cb[idx]))
    theta = x / dx - k
    if theta > 1e-9 and k + 1 < n_out and (a.atoms is not None or b.atoms is not None):
        # x between grid points: the sum's bin k + 1 contributes its continuous part (its mass less
        # its point masses, as convolve() splits them) by linear interpolation, as GridDist.cdf reads
        j = k + 1
        i = np.arange(max(0, j - (b.n - 1)), min(j, a.n - 1) + 1)
        in_bin = float(np.dot(np.maximum(a.pmf[i], 0.0), b.pmf[j - i]))
        at_point = float(np.dot(np.maximum(a.point_masses[i], 0.0), b.point_masses[j - i]))
        p += theta * max(in_bin - min(at_point, in_bin), 0.0)
    # as convolve: the on-grid mass is the product of the terms' (1 − tail)
    mass = (1.0 - a.tail) * (1.0 - b.tail)
    s = float(a.pmf.sum()) * float(cb[-1])
    return min(max(p * (mass / s) if s > 0 else p, 0.0), 1.0)


def stochastic_max(a: GridDist, b: GridDist) -> GridDist:
    """The law with CDF min(F_a, F_b) on a's grid: the larger of two approximations of one quantity in
    the usual stochastic order (a minimum of CDFs is non-decreasing and right-continuous, so a law;
    it is that of max(X_a, X_b) for comonotone X_a, X_b). ``b`` is read at a's grid points by its
    :meth:`GridDist.cdf` (its continuous part interpolated, else the grid point below)."""
    n = max(a.n, int(math.ceil((b.n - 1) * b.dx / a.dx)) + 1)
    x = np.arange(n) * a.dx
    fa = np.concatenate([a.cum, np.full(n - a.n, a.cum[-1])]) if n > a.n else a.cum
    F = np.minimum(fa, np.asarray(b.cdf(x), dtype=float))
    if np.array_equal(F[: a.n], a.cum) and n == a.n:
        return a
    pmf = np.clip(np.diff(F, prepend=0.0), 0.0, None)
    tail = max(a.tail, b.tail, 0.0, 1.0 - float(F[-1]))
    # E[max] - E[X_a] = integral of F_a - F_max (the CDFs step at the grid points)
    mean = a.mean_s + float(np.sum(fa - F)) * a.dx
    return GridDist(a.dx, pmf, mean, tail=tail, tail_rate=min(a.tail_rate, b.tail_rate), exact=False)


def mixture(dists: Sequence[GridDist], weights: Sequence[float]) -> GridDist:
    """Mixture with the given (normalised) weights."""
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    dx = max(d.dx for d in dists)
    parts = [d.regrid(dx) for d in dists]
    n = max(p.n for p in parts)
    pmf = np.zeros(n)
    for wi, p in zip(w, parts):
        pmf[: p.n] += wi * p.pmf
    atoms = None
    if any(p.atoms is not None for p in parts):
        atoms = np.zeros(n)
        for wi, p in zip(w, parts):
            atoms[: p.n] += wi * p.point_masses
    tail = float(sum(wi * p.tail for wi, p in zip(w, parts)))
    rates = [p.tail_rate for p in parts if p.tail > 0]
    return GridDist(dx, pmf, float(sum(wi * p.mean_s for wi, p in zip(w, parts))), tail=tail,
                    tail_rate=min(rates) if rates else math.inf, exact=all(p.exact for p in parts), atoms=atoms)
