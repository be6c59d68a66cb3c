"""Linear convolution kernels on uniform grids: direct sums where they are cheaper than a
transform, else one zero-padded FFT pass (the numeric core of :func:`qmodel.dist.convolve`)."""

from __future__ import annotations

import numpy as np

__all__ = ["fast_len", "shift_sum", "direct_sum", "linear_convolution"]

# Convolutions by direct sums (see direct_sum) where they beat one FFT pass of the result's n points,
# by a cost model measured with numpy on one core (transform pass ~12 ns per point, a sum over
# nonzero-bin products ~3 ns per product, np.convolve's dense sum ~0.1 ns per product):
# a factor of at most _SHIFT_ATOMS nonzero bins enters as shifted copies of the other; else
# products of nonzero bins up to _PRODUCTS_PER_POINT per result point (and _MAX_PRODUCTS in all:
# the index table must stay small), or dense products up to _DENSE_PER_POINT per point.
_SHIFT_ATOMS = 16
_PRODUCTS_PER_POINT = 4
_MAX_PRODUCTS = 1 << 16
_DENSE_PER_POINT = 100


def fast_len(n: int) -> int:
    """Smallest 5-smooth transform length >= n. A linear convolution needs only n points to avoid
    wrap-around; a 5-smooth length is as fast per point as a power of two and up to 2x shorter
    (4x on a 2-D table). Enumerated here (what scipy.fft.next_fast_len(n, real=True) returns):
    importing scipy.fft costs a cold CLI solve ~0.1 s."""
    target = max(int(n), 2)
    best = 1 << (target - 1).bit_length()  # the power of two at or above: an upper bound
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            # the smallest p35·2^k ≥ target
            q = -(-target // p35)
            p = p35 << (q - 1).bit_length()
            if p < best:
                best = p
            p35 *= 3
        p5 *= 5
    return best


def shift_sum(law: np.ndarray, atoms: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` points of Σ_j weights_j · law shifted by atoms_j bins: ``law`` convolved with
    the law of atoms (sorted bins) and their masses, one vector add per atom."""
    out = np.zeros(n)
    for j, w in zip(atoms.tolist(), weights.tolist()):
        if j >= n:
            break
        m = min(law.size, n - j)
        out[j : j + m] += w * law[:m]
    return out


def direct_sum(a: np.ndarray, b: np.ndarray, nnz_a: int, nnz_b: int) -> np.ndarray | None:
    """a ∗ b by direct sums when they are cheaper than a transform pass, else None (``nnz_*`` their
    nonzero-bin counts). A law on a grid much finer than its spread is mostly zeros (a
    deterministic transfer time is one bin, i transfers ahead i times it, a discrete TPOT law a
    few dozen): a factor of at most _SHIFT_ATOMS nonzero bins enters as that many shifted copies
    of the other (:func:`shift_sum`), a sparser pair as one sum over the products of nonzero bins,
    and a short dense factor by the O(len(a)·len(b)) sum (see the cost model above)."""
    n = a.size + b.size - 1
    if nnz_a == 0 or nnz_b == 0:
        return np.zeros(n)
    if min(nnz_a, nnz_b) <= _SHIFT_ATOMS:
        sparse, law = (a, b) if nnz_a <= nnz_b else (b, a)
        atoms = (sparse != 0).nonzero()[0]
        return shift_sum(law, atoms, sparse[atoms], n)
    if nnz_a * nnz_b <= min(_PRODUCTS_PER_POINT * n, _MAX_PRODUCTS):
        ia, ib = (a != 0).nonzero()[0], (b != 0).nonzero()[0]
        idx = (ia[:, None] + ib[None, :]).ravel()
        return np.bincount(idx, weights=np.multiply.outer(a[ia], b[ib]).ravel(), minlength=n)
    if a.size * b.size <= _DENSE_PER_POINT * n:
        return np.convolve(a, b)
    return None


def linear_convolution(pmfs: list[np.ndarray], n: int) -> np.ndarray:
    """The first ``n`` points of the linear convolution of ``pmfs``.

    Factors are folded in by direct sums while that is cheap (:func:`direct_sum`), sparsest first,
    and one FFT pass takes what is left: a composition mostly pairs a long law with a short or
    sparse one (a handoff of a few bins on the TPOT grid, a transfer of a few bins on the TTFT
    grid, a deterministic transfer time), where a transform pair of the long law's length costs
    several times the direct sum. Direct sums carry no FFT round-off (the two agree to ~1e-16 of
    the total mass)."""
    order = sorted((int(np.count_nonzero(p != 0)), i, p) for i, p in enumerate(pmfs))
    nnz, _, acc = order[0]
    rest = []
    for k, _, p in order[1:]:
        d = direct_sum(acc, p, nnz, k)
        if d is None:
            rest.append(p)
        else:
            acc, nnz = d, int(np.count_nonzero(d != 0))
    if rest:
        # the transform spans the whole linear convolution (not just n points): a shorter one
        # would wrap the points past it onto the first n
        size = fast_len(max(n, acc.size + sum(p.size for p in rest) - len(rest)))
        spec = np.fft.rfft(acc, size)
        for p in rest:
            spec *= np.fft.rfft(p, size)
        acc = np.fft.irfft(spec, size)
    elif len(pmfs) == 1:
        acc = acc.copy()  # always a new array: callers clip and scale it in place
    return acc[:n]
