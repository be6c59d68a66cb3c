"""Distributions on a uniform time grid: the common currency of composition.

A :class:`GridDist` stores ``pmf[k] = P(ceil(X/dx) = k)`` for k = 0..n-1 (so ``pmf[0]`` is the atom
at zero) plus ``tail``: the mass beyond the grid, with an exponential decay rate ``tail_rate`` used
only to place quantiles that fall past the grid end. Rounding up to the grid makes every quantile
conservative by at most ``dx`` per convolved term.

Sums of independent terms are FFT convolutions (zero-padded, negatives from round-off clipped);
mixtures are weighted sums. Means are kept exactly alongside the grid (``mean_s``) so reported means
carry no discretisation error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

__all__ = ["GridDist", "LazyGridDist", "convolve", "sum_cdf", "mixture", "stochastic_max", "fast_len", "linear_convolution", "shift_sum", "MAX_POINTS"]

MAX_POINTS = 1 << 16
# Convolutions by direct sums (see _direct) where they beat one FFT pass of the result's n points,
# by a cost model measured with numpy on one core (transform pass ~12 ns per point, a sum over
# nonzero-bin products ~3 ns per product, np.convolve's dense sum ~0.1 ns per product):
# a factor of at most _SHIFT_ATOMS nonzero bins enters as shifted copies of the other; else
# products of nonzero bins up to _PRODUCTS_PER_POINT per result point (and _MAX_PRODUCTS in all:
# the index table must stay small), or dense products up to _DENSE_PER_POINT per point.
_SHIFT_ATOMS = 16
_PRODUCTS_PER_POINT = 4
_MAX_PRODUCTS = 1 << 16
_DENSE_PER_POINT = 100
# trimmed() sums this many trailing bins before it sums the whole law
_TRIM_PROBE = 64


@dataclass(frozen=True, init=False)
class GridDist:
    dx: float
    pmf: np.ndarray
    mean_s: float
    tail: float = 0.0
    tail_rate: float = math.inf
    exact: bool = True
    meta: dict = field(default_factory=dict, compare=False)

    def __init__(self, dx: float, pmf: np.ndarray, mean_s: float, tail: float = 0.0, tail_rate: float = math.inf,
                 exact: bool = True, meta: dict | None = None) -> None:
        # A frozen dataclass's generated __init__ sets each field through object.__setattr__; one
        # update of the instance dict is 2.5x faster, and a solve builds some 40 laws. (Still
        # frozen: assignment after construction raises.)
        self.__dict__.update(dx=dx, pmf=pmf, mean_s=mean_s, tail=tail, tail_rate=tail_rate, exact=exact,
                             meta={} if meta is None else meta)

    # ---- constructors --------------------------------------------------------------------
    @staticmethod
    def point(x: float, dx: float) -> "GridDist":
        k = int(math.ceil(max(x, 0.0) / dx - 1e-9))
        pmf = np.zeros(k + 1)
        pmf[k] = 1.0
        return GridDist(dx, pmf, float(max(x, 0.0)))

    @staticmethod
    def from_cdf(cdf: Callable[[np.ndarray], np.ndarray], dx: float, n: int, mean_s: float,
                 tail_rate: float = math.inf, exact: bool = True) -> "GridDist":
        """Discretise a CDF: pmf[k] = F(k dx) - F((k-1) dx), pmf[0] = F(0)."""
        # (a copy: the values are clipped in place, and a cdf may return an array it keeps)
        return GridDist.from_cdf_values(np.array(cdf(np.arange(n) * dx), dtype=float), dx, mean_s,
                                        tail_rate=tail_rate, exact=exact)

    @staticmethod
    def from_cdf_values(F: np.ndarray, dx: float, mean_s: float, tail_rate: float = math.inf,
                        exact: bool = True) -> "GridDist":
        """The law whose CDF at the grid points k·dx is ``F`` (clipped to [0, 1] and made
        non-decreasing, in place: round-off only), the mass past the last point as its tail."""
        np.minimum(F, 1.0, out=F)
        np.maximum(F, 0.0, out=F)
        np.maximum.accumulate(F, out=F)
        pmf = np.empty(F.size)  # np.diff(F, prepend=0.0), without the concatenation
        pmf[0] = F[0]
        np.subtract(F[1:], F[:-1], out=pmf[1:])
        return GridDist(dx, pmf, float(mean_s), tail=float(max(0.0, 1.0 - F[-1])), tail_rate=tail_rate, exact=exact)

    @staticmethod
    def from_samples(values: np.ndarray, dx: float, weights: np.ndarray | None = None) -> "GridDist":
        v = np.maximum(np.asarray(values, dtype=float), 0.0)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
        w = w / w.sum()
        k = np.ceil(v / dx - 1e-9).astype(np.int64)
        n = int(min(k.max() + 1, MAX_POINTS))
        tail = float(w[k >= n].sum())
        pmf = np.bincount(np.minimum(k, n - 1)[k < n], weights=w[k < n], minlength=n)
        return GridDist(dx, pmf, float(np.dot(v, w)), tail=tail, tail_rate=_tail_rate_guess(v, w) if tail else math.inf)

    # ---- queries -------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.pmf)

    @cached_property
    def _cum(self) -> np.ndarray:
        # P(X <= k dx), computed once: summary() and the engine query the same law several times
        # (a GridDist's pmf is never modified after construction)
        return self.pmf.cumsum()

    def cdf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(X <= x) on the grid (x rounded down to a grid point: conservative)."""
        c = self._cum
        if isinstance(x, (float, int)):  # one point (an SLO target): no array round trip
            if not math.isfinite(x):
                return float(c[-1]) if x > 0 else 0.0
            k = math.floor(x / self.dx + 1e-9)
            return 0.0 if k < 0 else float(c[min(k, self.n - 1)])
        # (capped before the cast: an infinite x would wrap around the integer range)
        k = np.floor(np.minimum(np.asarray(x, dtype=float) / self.dx + 1e-9, self.n)).astype(np.int64)
        out = np.where(k < 0, 0.0, c[np.clip(k, 0, self.n - 1)])
        return float(out) if np.ndim(out) == 0 else out

    def sf(self, x: float) -> float:
        return 1.0 - float(self.cdf(x))

    def quantile(self, q: float) -> float:
        """Smallest grid point x with P(X <= x) >= q; beyond the grid, the exponential tail."""
        c = self._cum
        if c[-1] >= q - 1e-12:
            k = int(c.searchsorted(q - 1e-12))
            return k * self.dx
        # q falls in the tail: P(X > end + t) = tail * exp(-rate t)
        end = (self.n - 1) * self.dx
        if not math.isfinite(self.tail_rate) or self.tail <= 0:
            return end
        return end + math.log(self.tail / max(1.0 - q, 1e-300)) / self.tail_rate

    def summary(self) -> dict[str, float]:
        return {"mean": self.mean_s, "p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99)}

    def regrid(self, dx: float, keep_mean: bool = False) -> "GridDist":
        """Re-express on a coarser grid (dx >= self.dx), rounding up; ``keep_mean`` splits each
        bin's mass between the two nearest coarse points instead (mean kept exactly; for a term
        much shorter than the coarse step, where rounding up would add most of a step to it)."""
        if abs(dx - self.dx) <= 1e-15 * max(dx, 1.0):
            return self
        if keep_mean and dx > self.dx:
            pos = np.arange(self.n) * (self.dx / dx)
            j = (pos + 1e-9).astype(np.int64)  # floor (pos >= 0)
            f = pos - j
            np.maximum(f, 0.0, out=f)
            n = int(j[-1]) + 2
            # all of a bin's mass to j, then the share f of it moved on to j + 1 (a fine law has
            # thousands of bins per coarse step: one pass fewer over them than pmf·(1 − f))
            up = np.bincount(j, weights=self.pmf * f, minlength=n)
            pmf = np.bincount(j, weights=self.pmf, minlength=n) - up
            pmf[1:] += up[:-1]
            return GridDist(dx, pmf, self.mean_s, self.tail, self.tail_rate, self.exact, self.meta)
        if dx < self.dx:
            # Finer grid: put each bin's mass at its upper edge (conservative, keeps the mean within dx).
            ratio = self.dx / dx
            k = np.ceil(np.arange(self.n) * ratio - 1e-9).astype(np.int64)
        else:
            k = np.ceil(np.arange(self.n) * self.dx / dx - 1e-9).astype(np.int64)
        n = int(k.max() + 1)
        pmf = np.bincount(k, weights=self.pmf, minlength=n)
        return GridDist(dx, pmf, self.mean_s, self.tail, self.tail_rate, self.exact, self.meta)

    def trimmed(self, eps: float = 1e-12) -> "GridDist":
        """Drop trailing bins with negligible mass (moved into the last kept bin). A law remembers
        that it is trimmed: every convolution trims its terms, and most arrive trimmed already."""
        if self.__dict__.get("_trimmed_at") == eps:
            return self
        out = self._trim(eps)
        out.__dict__["_trimmed_at"] = eps  # (its pmf is never modified after construction)
        return out

    def _trim(self, eps: float) -> "GridDist":
        cut = _trim_cut(self.pmf, eps)
        if cut is None:
            return self
        keep, rest = cut
        pmf = self.pmf[:keep].copy()
        pmf[-1] += rest
        return GridDist(self.dx, pmf, self.mean_s, self.tail, self.tail_rate, self.exact, self.meta)

    @staticmethod
    def trimmed_from(pmf: np.ndarray, dx: float, mean_s: float, exact: bool = True, eps: float = 1e-12) -> "GridDist":
        """``GridDist(dx, pmf, mean_s, exact=exact).trimmed(eps)`` for a fresh ``pmf`` the caller
        hands over: cut in place, without the untrimmed law and the copy."""
        cut = _trim_cut(pmf, eps)
        if cut is not None:
            keep, rest = cut
            pmf = pmf[:keep]
            pmf[-1] += rest
        out = GridDist(dx, pmf, mean_s, exact=exact)
        out.__dict__["_trimmed_at"] = eps
        return out


def _trim_cut(pmf: np.ndarray, eps: float) -> tuple[int, float] | None:
    """(bins kept, mass of the dropped run) when the trailing bins of ``pmf`` that carry less than
    ``eps`` together are dropped into the last kept one; None when nothing is dropped.

    The mass to drop sits in the last few bins: they are summed first. A longer negligible run is
    found on the nonzero bins alone (zeros add nothing to the sums, so the cut is the same; a law
    on a grid much finer than its spread is mostly zeros)."""
    n = pmf.size
    c = pmf[: -_TRIM_PROBE - 1 : -1].cumsum()
    if c[-1] >= eps or c.size == n:
        drop = int(c.searchsorted(eps))
        rest = float(c[drop - 1]) if 0 < drop < n else 0.0
    else:
        nz = (pmf != 0).nonzero()[0]  # (on a bool array: 3x faster than on floats)
        cz = pmf[nz[::-1]].cumsum()
        k = int(cz.searchsorted(eps))  # the k-th nonzero bin from the end is the last kept
        if k >= nz.size:
            return None
        drop = n - 1 - int(nz[-1 - k])
        rest = float(cz[k - 1]) if k > 0 else 0.0
    if drop <= 0 or drop >= n:
        return None
    return n - drop, rest


class LazyGridDist(GridDist):
    """A :class:`GridDist` built on first use: ``LazyGridDist(build)`` with ``build()`` returning the
    law. Its fields (and so every query) are the built law's; until one is read nothing is
    computed. For a law a station reports but the composition never reads (the KV link's wait
    alone, next to its wait + transfer), which a goodput search would otherwise build at every rate.
    """

    def __init__(self, build: Callable[[], GridDist] | None = None, **values) -> None:
        if build is None:  # dataclasses.replace() passes the fields: an already built law
            super().__init__(**values)
            build = lambda: self  # noqa: E731
        object.__setattr__(self, "_build", build)

    def __getattr__(self, name: str):
        # reached only for attributes not set yet: the dataclass fields before the first build
        if name.startswith("__") or name == "_build":
            raise AttributeError(name)
        law = object.__getattribute__(self, "_build")()
        for f in fields(GridDist):
            object.__setattr__(self, f.name, getattr(law, f.name))
        return object.__getattribute__(self, name)


def fast_len(n: int) -> int:
    """Smallest 5-smooth transform length >= n. A linear convolution needs only n points to avoid
    wrap-around; a 5-smooth length is as fast per point as a power of two and up to 2x shorter
    (4x on a 2-D table)."""
    from scipy.fft import next_fast_len  # (scipy.fft: light, and only once a transform is needed)

    return int(next_fast_len(max(int(n), 2), real=True))


def _tail_rate_guess(v: np.ndarray, w: np.ndarray) -> float:
    m = float(np.dot(v, w))
    return 1.0 / m if m > 0 else math.inf


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


def _direct(a: np.ndarray, b: np.ndarray, nnz_a: int, nnz_b: int) -> np.ndarray | None:
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

    Factors are folded in by direct sums while that is cheap (:func:`_direct`), sparsest first,
    and one FFT pass takes what is left: a composition mostly pairs a long law with a short or
    sparse one (a handoff of a few bins on the TPOT grid, a transfer of a few bins on the TTFT
    grid, a deterministic transfer time), where a transform pair of the long law's length costs
    several times the direct sum. Direct sums carry no FFT round-off (the two agree to ~1e-16 of
    the total mass)."""
    order = sorted((int(np.count_nonzero(p != 0)), i, p) for i, p in enumerate(pmfs))
    nnz, _, acc = order[0]
    rest = []
    for k, _, p in order[1:]:
        d = _direct(acc, p, nnz, k)
        if d is None:
            rest.append(p)
        else:
            acc, nnz = d, int(np.count_nonzero(d != 0))
    if rest:
        size = fast_len(n)
        spec = np.fft.rfft(acc, size)
        for p in rest:
            spec *= np.fft.rfft(p, size)
        acc = np.fft.irfft(spec, size)
    elif len(pmfs) == 1:
        acc = acc.copy()  # always a new array: callers clip and scale it in place
    return acc[:n]


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
    if s > 0 and mass_on_grid > spill:
        factor = (mass_on_grid - spill) / s
        pmf *= factor
        s *= factor
    tail = 1.0 - s
    rates = [p.tail_rate for p in parts if p.tail > 0]
    return GridDist(dx, pmf, float(sum(p.mean_s for p in parts)), tail=max(tail, 0.0),
                    tail_rate=min(rates) if rates else (1.0 / max(dx * n_out, 1e-300) if tail > 1e-12 else math.inf),
                    exact=all(p.exact for p in parts))


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
    cb = b._cum
    # F_b at k − i for i = 0..m, its last value past b's end
    idx = np.minimum(k - np.arange(m + 1), b.n - 1)
    p = float(np.dot(np.maximum(a.pmf[: m + 1], 0.0), cb[idx]))
    # as convolve: the on-grid mass is the product of the terms' (1 − tail)
    mass = (1.0 - a.tail) * (1.0 - b.tail)
    s = float(a.pmf.sum()) * float(cb[-1])
    return min(max(p * (mass / s) if s > 0 else p, 0.0), 1.0)


def stochastic_max(a: GridDist, b: GridDist) -> GridDist:
    """The law with CDF min(F_a, F_b) on a's grid: the larger of two approximations of one quantity in
    the usual stochastic order (a minimum of CDFs is non-decreasing and right-continuous, so a law;
    it is that of max(X_a, X_b) for comonotone X_a, X_b). ``b`` is read at a's grid points (its CDF
    rounds down there: conservative)."""
    n = max(a.n, int(math.ceil((b.n - 1) * b.dx / a.dx)) + 1)
    x = np.arange(n) * a.dx
    fa = np.concatenate([a._cum, np.full(n - a.n, a._cum[-1])]) if n > a.n else a._cum
    F = np.minimum(fa, np.asarray(b.cdf(x), dtype=float))
    if np.array_equal(F[: a.n], a._cum) and n == a.n:
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
    tail = float(sum(wi * p.tail for wi, p in zip(w, parts)))
    rates = [p.tail_rate for p in parts if p.tail > 0]
    return GridDist(dx, pmf, float(sum(wi * p.mean_s for wi, p in zip(w, parts))), tail=tail,
                    tail_rate=min(rates) if rates else math.inf, exact=all(p.exact for p in parts))
