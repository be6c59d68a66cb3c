"""The link work a batch of KV transfers released together brings: its compound law and the work
ahead of a request within its batch.

:class:`CompoundWork` is B = S_1 + … + S_K (K ~ the batch-size pmf, S iid) with exact moments and
MGF, the M^X/G/1 batch's service law. :func:`position_pmf` is the work ahead in a batch,
Σ_i d_i F^{∗i} (F the link-time law on the grid), formed by Horner in F: by shifted adds when F has
few atoms on the grid (few distinct transfer times; one with fixed prompt lengths, where i
transfers ahead take exactly i times the one), else by one FFT pass.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from qmodel.dist import fast_len, shift_sum
from qmodel.errors import InputError
from qmodel.stations.fcfs import ServiceSample
from qmodel.stations.fcfs.service import SCALAR_VALUES

__all__ = ["CompoundWork", "position_pmf", "MAX_SHIFTS"]

# The work-ahead Horner sum is built by shifted adds while it needs at most this many
# (atoms of the link-time law x batch positions; position_pmf); past that one FFT pass is cheaper.
MAX_SHIFTS = 16


def position_pmf(d: np.ndarray, s_pmf: np.ndarray, length: int) -> np.ndarray:
    """The first ``length`` points of Σ_i d_i F^{∗i} (i = 0..len(d)−1, F the pmf ``s_pmf``), by
    Horner in F.

    An F of few atoms (few distinct transfer times; one for fixed prompt lengths) is multiplied in
    by shifted copies per atom (:func:`qmodel.dist.shift_sum`): exact, where a transform leaves
    round-off noise in every bin. Otherwise one FFT pass of ``length`` points,
    whose circular wrap-around the support bound ``length`` keeps negligible."""
    atoms = np.flatnonzero(s_pmf != 0)
    if atoms.size * (d.size - 1) <= MAX_SHIFTS:
        acc, mass = d[-1:].copy(), s_pmf[atoms]
        for di in d[-2::-1]:
            acc = shift_sum(acc, atoms, mass, min(acc.size + s_pmf.size - 1, length))
            acc[0] += di
        out = np.zeros(length)
        out[: acc.size] = acc
        return out
    size = fast_len(length)
    f = np.fft.rfft(s_pmf, size)
    acc = np.full_like(f, d[-1])
    for di in d[-2::-1]:
        acc = acc * f + di
    return np.clip(np.fft.irfft(acc, size)[:length], 0.0, None)


class CompoundWork(ServiceSample):
    """Total work B = S_1 + … + S_K of a batch (K ~ batch_pmf, S iid): exact moments and MGF.

    A short batch pmf (at most SCALAR_VALUES sizes, the usual case) is evaluated in Python floats:
    the root search calls the MGF ~10 times, and on a few sizes numpy's call overhead dominates.
    """

    def __init__(self, base: ServiceSample, batch_pmf: np.ndarray) -> None:
        object.__setattr__(self, "values_s", base.values_s)
        object.__setattr__(self, "weights", base.weights)
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_pk", np.asarray(batch_pmf, dtype=float) / np.sum(batch_pmf))
        object.__setattr__(self, "_k", np.arange(1, len(batch_pmf) + 1, dtype=float))

    @cached_property
    def _pk_floats(self) -> tuple[float, ...] | None:
        return tuple(self._pk.tolist()) if self._pk.size <= SCALAR_VALUES else None

    @cached_property
    def factorial_moments(self) -> tuple[float, float, float]:
        """E[K], E[K(K−1)], E[K(K−1)(K−2)] of the batch size (every moment of B needs all three)."""
        if self._pk_floats is not None:
            f1 = f2 = f3 = 0.0
            for k, p in enumerate(self._pk_floats, start=1):
                f1 += p * k
                f2 += p * (k * (k - 1))
                f3 += p * (k * (k - 1) * (k - 2))
            return f1, f2, f3
        kk, p = self._k, self._pk
        return float(p @ kk), float(p @ (kk * (kk - 1))), float(p @ (kk * (kk - 1) * (kk - 2)))

    def moment(self, k: int) -> float:
        cache = self.__dict__.setdefault("_moment_cache", {})
        if k not in cache:
            cache[k] = self._moment(k)
        return cache[k]

    def _moment(self, k: int) -> float:
        m1, m2, m3 = (self._base.moment(i) for i in (1, 2, 3))
        f1, f2, f3 = self.factorial_moments
        if k == 1:
            return f1 * m1
        if k == 2:
            return f1 * m2 + f2 * m1 * m1
        if k == 3:
            return f1 * m3 + 3.0 * f2 * m2 * m1 + f3 * m1**3
        raise InputError("moment", k, "compound work moments are available for k = 1, 2, 3")

    # m**(k − shift) is taken in log space, capped like the base MGF, so the root finder's far
    # probes give a huge finite value instead of inf (and inf*0 = NaN for empty batch sizes).
    def _pow(self, m: float, shift: float = 0.0) -> np.ndarray:
        return np.exp(np.minimum((self._k - shift) * math.log(max(m, 1e-300)), 700.0))

    def _moments_of_pow(self, m: float, shift: float = 0.0) -> tuple[float, float]:
        """(Σ p_k m^{k−shift}, Σ p_k k m^{k−shift}), capped as in :meth:`_pow`."""
        if self._pk_floats is None:
            pows = self._pow(m, shift)
            return float(self._pk @ pows), float(self._pk @ (self._k * pows))
        lm = math.log(max(m, 1e-300))
        total = k_weighted = 0.0
        for k, p in enumerate(self._pk_floats, start=1):
            x = p * math.exp(min((k - shift) * lm, 700.0))
            total += x
            k_weighted += k * x
        return total, k_weighted

    def expm1_mgf(self, eta: float) -> float:
        return self._moments_of_pow(1.0 + self._base.expm1_mgf(eta))[0] - 1.0

    def mgf_s(self, eta: float) -> float:
        # d/dη E[e^{ηB}] = Σ p_k k M(η)^{k−1} M'(η)
        return self._moments_of_pow(1.0 + self._base.expm1_mgf(eta), 1.0)[1] * self._base.mgf_s(eta)

    def expm1_mgf_and_slope(self, eta: float) -> tuple[float, float]:
        # (E[e^{ηB}] − 1, Σ p_k k M^{k−1} M') from one base evaluation and one power table
        m1, slope = self._base.expm1_mgf_and_slope(eta)
        total, k_weighted = self._moments_of_pow(1.0 + m1)  # Σ p M^k, Σ p k M^k
        return total - 1.0, k_weighted / (1.0 + m1) * slope

    @property
    def mean_s(self) -> float:
        return self.moment(1)
