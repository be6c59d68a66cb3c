"""Distributions on a uniform time grid: the common currency of composition.

A :class:`GridDist` stores ``pmf[k] = P(ceil(X/dx) = k)`` for k = 0..n-1 (so ``pmf[0]`` is the atom
at zero) plus ``tail``: the mass beyond the grid, with an exponential decay rate ``tail_rate`` used
only to place quantiles that fall past the grid end.

Where a bin's mass lies within it: ``atoms[k]`` is the part of ``pmf[k]`` that is a point mass at
exactly k·dx; the rest, the continuous part, is spread over ((k−1)·dx, k·dx], and a quantile
falling in it is placed by linear interpolation. ``atoms`` None (the default) means every bin's
mass is read at its upper edge: conservative by at most ``dx`` per convolved term. Laws that know
they are continuous but for an atom at 0 (a Poisson-arrival wait, ``from_cdf(continuous=True)``)
say so; sums keep the split exactly for atom ⊕ atom (an atom) and atom ⊕ continuous (continuous
in the right bin), while continuous ⊕ continuous stays rounded up by at most one more bin
(conservative). A sojourn W + D, for instance, keeps W's atom at 0 as an atom at D (docs/methods.md,
Grids). The CDF is exact at the grid points either way; between them it reads the continuous part
by the same linear interpolation, so ``cdf`` and ``quantile`` are inverses (an SLO attainment and
the percentiles of one law agree), and without ``atoms`` it reads the grid point below.

Sums of independent terms are FFT convolutions (zero-padded, negatives from round-off clipped);
mixtures are weighted sums (both in :mod:`qmodel.dist_ops`, re-exported here). Means are kept exactly alongside the grid (``mean_s``) so reported means
carry no discretisation error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Callable

import numpy as np

from qmodel.convolution import fast_len, linear_convolution, shift_sum
from qmodel.errors import NumericalError

__all__ = ["GridDist", "LazyGridDist", "convolve", "sum_cdf", "mixture", "stochastic_max", "zero_atom", "fast_len",
           "linear_convolution", "shift_sum", "pow2_grid", "MAX_POINTS"]

MAX_POINTS = 1 << 16
# trimmed() sums this many trailing bins before it sums the whole law
_TRIM_PROBE = 64


def pow2_grid(base: float, span: float, max_points: float) -> float:
    """``base``·2^k with the smallest k >= 0 that covers ``span`` in ``max_points`` steps.

    A station whose grid step must grow with the rate takes it from this ladder: steps on it nest
    (each a whole multiple of the finer ones), so a law re-binned onto a coarser one only moves mass
    up, and a CDF read at a fixed target (an SLO) cannot rise when the step changes; a step that
    grew continuously would slide ``floor(x/dx)·dx`` towards the target and the read would rise
    (docs/methods.md, Grids)."""
    base = max(base, 1e-12)
    return base * 2.0 ** max(0, math.ceil(math.log2(max(span, base) / (max_points * base)) - 1e-9))


@dataclass(frozen=True, init=False)
class GridDist:
    dx: float
    pmf: np.ndarray
    mean_s: float
    tail: float = 0.0
    tail_rate: float = math.inf
    exact: bool = True
    meta: dict = field(default_factory=dict, compare=False)
    atoms: np.ndarray | None = field(default=None, compare=False)
    #: the mass past the grid is exactly ``tail``·e^{−tail_rate·s} at s past the grid's end (a
    #: heavy-traffic wait's geometric tail): :meth:`cdf` reads it there (else 1 − tail)
    tail_exact: bool = field(default=False, compare=False)

    def __init__(self, dx: float, pmf: np.ndarray, mean_s: float, tail: float = 0.0, tail_rate: float = math.inf,
                 exact: bool = True, meta: dict | None = None, atoms: np.ndarray | None = None,
                 tail_exact: bool = False) -> None:
        # A frozen dataclass's generated __init__ sets each field through object.__setattr__; one
        # update of the instance dict is 2.5x faster, and a solve builds some 40 laws. (Still
        # frozen: assignment after construction raises.)
        self.__dict__.update(dx=dx, pmf=pmf, mean_s=mean_s, tail=tail, tail_rate=tail_rate, exact=exact,
                             meta={} if meta is None else meta, atoms=atoms,
                             tail_exact=bool(tail_exact and tail > 0 and math.isfinite(tail_rate)))

    @property
    def point_masses(self) -> np.ndarray:
        """The point mass at each grid point k·dx (all of ``pmf`` when ``atoms`` is None)."""
        return self.pmf if self.atoms is None else self.atoms

    # ---- constructors --------------------------------------------------------------------
    @staticmethod
    def point(x: float, dx: float) -> "GridDist":
        k = int(math.ceil(max(x, 0.0) / dx - 1e-9))
        pmf = np.zeros(k + 1)
        pmf[k] = 1.0
        return GridDist(dx, pmf, float(max(x, 0.0)))

    @staticmethod
    def from_cdf(cdf: Callable[[np.ndarray], np.ndarray], dx: float, n: int, mean_s: float,
                 tail_rate: float = math.inf, exact: bool = True, continuous: bool = False) -> "GridDist":
        """Discretise a CDF: pmf[k] = F(k dx) - F((k-1) dx), pmf[0] = F(0)."""
        # (a copy: the values are clipped in place, and a cdf may return an array it keeps)
        return GridDist.from_cdf_values(np.array(cdf(np.arange(n) * dx), dtype=float), dx, mean_s,
                                        tail_rate=tail_rate, exact=exact, continuous=continuous)

    @staticmethod
    def from_cdf_values(F: np.ndarray, dx: float, mean_s: float, tail_rate: float = math.inf,
                        exact: bool = True, continuous: bool = False) -> "GridDist":
        """The law whose CDF at the grid points k·dx is ``F`` (clipped to [0, 1] and made
        non-decreasing, in place: round-off only), the mass past the last point as its tail.
        ``continuous``: the law has no atom but F(0) at 0 (its bins' mass is spread over them)."""
        np.minimum(F, 1.0, out=F)
        np.maximum(F, 0.0, out=F)
        np.maximum.accumulate(F, out=F)
        pmf = np.empty(F.size)  # np.diff(F, prepend=0.0), without the concatenation
        pmf[0] = F[0]
        np.subtract(F[1:], F[:-1], out=pmf[1:])
        return GridDist(dx, pmf, float(mean_s), tail=float(max(0.0, 1.0 - F[-1])), tail_rate=tail_rate, exact=exact,
                        atoms=zero_atom(pmf) if continuous else None)

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
    def cum(self) -> np.ndarray:
        """P(X <= k·dx) at the grid points, computed once (a law's pmf never changes after
        construction, and a solve reads one law several times); capped at 1, against the round-off
        of summing a pmf of total 1 (it reached 1 + 2.2e-16)."""
        return np.minimum(self.pmf.cumsum(), 1.0)

    def cdf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(X <= x): exact at the grid points; between two, the bin's continuous part (its mass
        less ``atoms``) is read by linear interpolation, as :meth:`quantile` places it, so ``cdf``
        and ``quantile`` are inverses and the read does not jump when the grid step changes; with
        ``atoms`` None every bin's mass sits at its upper edge and x reads the grid point below
        (conservative). Past the grid's end 1 − tail, or with ``tail_exact``
        1 − tail·e^{−tail_rate (x − end)} (the exponential tail :meth:`quantile` reads)."""
        c = self.cum
        if isinstance(x, (float, int)):  # one point (an SLO target): no array round trip
            if not math.isfinite(x):
                return float(c[-1]) if x > 0 else 0.0
            u = x / self.dx
            k = math.floor(u + 1e-9)
            if k >= self.n and self.tail_exact:
                return float(c[-1]) + self.tail * -math.expm1(-self.tail_rate * (x - (self.n - 1) * self.dx))
            if k < 0:
                return 0.0
            if k >= self.n - 1:
                return float(c[-1])
            out = float(c[k])
            if self.atoms is not None and u - k > 1e-9:
                out += float(self.pmf[k + 1] - self.atoms[k + 1]) * (u - k)
            return out
        # (capped before the cast: an infinite x would wrap around the integer range)
        xa = np.asarray(x, dtype=float)
        u = np.minimum(xa / self.dx, self.n)
        k = np.floor(u + 1e-9).astype(np.int64)
        out = np.where(k < 0, 0.0, c[np.clip(k, 0, self.n - 1)])
        if self.atoms is not None:
            inside = (k >= 0) & (k < self.n - 1)
            nxt = np.clip(k + 1, 0, self.n - 1)
            frac = np.where(inside, np.maximum(u - k, 0.0), 0.0)
            out = out + (self.pmf[nxt] - self.atoms[nxt]) * np.where(frac > 1e-9, frac, 0.0)
        if self.tail_exact:
            past = (k >= self.n) & np.isfinite(xa)
            if np.any(past):
                over = np.where(past, xa - (self.n - 1) * self.dx, 0.0)
                out = np.where(past, out + self.tail * -np.expm1(-self.tail_rate * over), out)
        return float(out) if np.ndim(out) == 0 else out

    def sf(self, x: float) -> float:
        return 1.0 - float(self.cdf(x))

    def quantile(self, q: float) -> float:
        """Smallest x with P(X <= x) >= q: at a grid point where q falls on a bin's point mass (all
        of it when ``atoms`` is None), else interpolated in the bin's continuous part; beyond the
        grid, the exponential tail."""
        c = self.cum
        if c[-1] >= q - 1e-12:
            k = int(c.searchsorted(q - 1e-12))
            if self.atoms is None or k == 0:
                return k * self.dx
            need = q - float(c[k - 1])  # > 1e-12: what bin k must supply
            spread = float(self.pmf[k] - self.atoms[k])
            if need >= spread:  # on the point mass at k·dx
                return k * self.dx
            return (k - 1 + need / spread) * self.dx
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
            def split(w: np.ndarray) -> np.ndarray:
                up = np.bincount(j, weights=w * f, minlength=n)
                out = np.bincount(j, weights=w, minlength=n) - up
                out[1:] += up[:-1]
                return out

            return GridDist(dx, split(self.pmf), self.mean_s, self.tail, self.tail_rate, self.exact, self.meta,
                            None if self.atoms is None else split(self.atoms), self.tail_exact)
        if dx < self.dx:
            # Finer grid: put each bin's mass at its upper edge (conservative, keeps the mean within dx).
            ratio = self.dx / dx
            k = np.ceil(np.arange(self.n) * ratio - 1e-9).astype(np.int64)
        else:
            k = np.ceil(np.arange(self.n) * self.dx / dx - 1e-9).astype(np.int64)
        n = int(k.max() + 1)
        pmf = np.bincount(k, weights=self.pmf, minlength=n)
        # a point mass rounded up is read at the coarse point (conservative), continuous mass
        # stays spread over the coarse bin it lands in
        atoms = None if self.atoms is None else np.bincount(k, weights=self.atoms, minlength=n)
        return GridDist(dx, pmf, self.mean_s, self.tail, self.tail_rate, self.exact, self.meta, atoms, self.tail_exact)

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
        return GridDist(self.dx, pmf, self.mean_s, self.tail, self.tail_rate, self.exact, self.meta,
                        _cut_atoms(self.atoms, keep, rest), self.tail_exact)

    @staticmethod
    def trimmed_from(pmf: np.ndarray, dx: float, mean_s: float, exact: bool = True, eps: float = 1e-12,
                     atoms: np.ndarray | None = None) -> "GridDist":
        """``GridDist(dx, pmf, mean_s, exact=exact, atoms=atoms).trimmed(eps)`` for a fresh ``pmf``
        the caller hands over: cut in place, without the untrimmed law and the copy."""
        cut = _trim_cut(pmf, eps)
        if cut is not None:
            keep, rest = cut
            pmf = pmf[:keep]
            pmf[-1] += rest
            atoms = _cut_atoms(atoms, keep, rest)
        out = GridDist(dx, pmf, mean_s, exact=exact, atoms=atoms)
        out.__dict__["_trimmed_at"] = eps
        return out


def zero_atom(pmf: np.ndarray) -> np.ndarray:
    """The ``atoms`` of a law continuous but for its mass at 0 (all of ``pmf[0]``)."""
    atoms = np.zeros(pmf.size)
    atoms[0] = pmf[0]
    return atoms


def _cut_atoms(atoms: np.ndarray | None, keep: int, rest: float) -> np.ndarray | None:
    """``atoms`` of a law cut to ``keep`` bins, the dropped mass ``rest`` read at the last kept
    point (as a point mass: conservative)."""
    if atoms is None:
        return None
    out = atoms[:keep].copy()
    out[-1] += rest
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
    With ``build``, keyword fields are values known before the build (``dx=``: the grid step, which
    the built law must have too; reading them builds nothing).
    """

    def __init__(self, build: Callable[[], GridDist] | None = None, **values) -> None:
        known: dict[str, object] = {}
        if build is None:  # dataclasses.replace() passes the fields: an already built law
            super().__init__(**values)
            build = lambda: self  # noqa: E731
        else:
            known = values
            for name, value in values.items():
                object.__setattr__(self, name, value)
        object.__setattr__(self, "_build", build)
        object.__setattr__(self, "_known", known)

    def __getattr__(self, name: str):
        # reached only for attributes not set yet: the dataclass fields before the first build
        if name.startswith("__") or name in ("_build", "_known"):
            raise AttributeError(name)
        law = object.__getattribute__(self, "_build")()
        known = object.__getattribute__(self, "_known")
        if known.get("dx", law.dx) != law.dx:
            raise NumericalError(f"lazy law: step {law.dx!r} built where {known['dx']!r} was announced")
        for f in fields(GridDist):
            object.__setattr__(self, f.name, getattr(law, f.name))
        return object.__getattribute__(self, name)


def _tail_rate_guess(v: np.ndarray, w: np.ndarray) -> float:
    m = float(np.dot(v, w))
    return 1.0 / m if m > 0 else math.inf


# The operations on laws live in qmodel.dist_ops; they are part of this module's interface.
from qmodel.dist_ops import convolve, mixture, stochastic_max, sum_cdf  # noqa: E402
