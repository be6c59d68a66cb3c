"""The prefill pool: per-instance bulk-service queues M/G^[a,b]/1 with batch-size-dependent service.

Model (design/queueing-methods.md §2.4). Each of the ``instances`` engines keeps its own FCFS queue.
When an engine frees up and at least ``a`` (= 1 for prefill) requests wait, it takes min(Q, b) of
them; a batch of k takes S_k seconds (random: the prompts in it are a random draw from the mix).

**Embedded chain at batch completions** (exact: solved on a short state space whose boundary is
the chain's exact geometric tail z0^{−j}, z0 the dominant root of z^b = A_b(z)). With
j = number waiting just after a completion, the next batch has k_j = max(a, min(j, b)) requests
(after an idle time (a − j)/λ when j < a) and leaves r_j = max(j − b, 0) waiting:

    j' = r_j + A_{k_j},   P(A_k = n) = E[e^{−λS_k}(λS_k)^n / n!].

Semi-regenerative time averages over a cycle (idle part + one batch):

    E[cycle | j] = I_j + E[S_k],   E[∫Q dt | j] = Σ_{i=j}^{a−1} i/λ + r_j E[S_k] + λE[S_k²]/2,
    Lq = Σπ_j E[∫Q|j] / Σπ_j E[cycle|j],  Wq = Lq/λ,  busy = Σπ_j E[S_k]/E[cycle].

**Waiting time (a = 1), by PASTA.** An arrival finds the engine idle with probability
(π_0/λ)/E[cycle] (then W = 0 and its own batch has k = 1); otherwise it lands at age u of a batch
of size k with S_k = s and r waiting, finds q = r + Poisson(λu) ahead, and waits

    W = (s − u) + Σ_{i=1}^{⌊q/b⌋} S_b^{(i)}     (full batches drain the q ahead, FCFS).

Its **own** batch then holds the q mod b still ahead, itself, and those who arrived during its
wait, capped at b: k_own = min(b, (q mod b) + 1 + Poisson(λW)). So the prefill part of TTFT,
W + S_{k_own}, is computed jointly, never as if W and S_own were independent. For deterministic
S_k the CDF of W has the closed form used by :meth:`BulkQueue.wait_cdf` (exact: the integrals of
Poisson CDFs over u are E[min(Poisson(λU), K+1)]/λ); for random S_k it is computed on a time grid
(an FFT cross-correlation gives the (residual, q) law, FFT powers of S_b the full batches).

**Token budget.** A budget of B tokens is mapped to a request cap b = max(1, ⌊B/E[P]⌋) (design:
−1…−8% on E[W] against a token-budget DES, growing with load; measured here −3% at 50% load and
−6…−10% at 80–90%); ``max_batch_size`` caps it further (default 256, vLLM's max_num_seqs).

**Dispatch.** random: each engine sees Poisson(λ/c), exact. round_robin: Erlang-c arrivals
(c_a² = c_a²(total)/c): the queueing part is scaled by the heavy-traffic factor
(c_a² + b·c_b²)/(1 + b·c_b²) (c_b² the SCV of the full-batch time; b·c_b² is the per-request
variability of the batch server's output) times the Krämer–Langenbach-Belz g when c_a² < 1:
approximate (see :func:`instance_wait_scale` for the measured errors).
least_loaded is read as *least work left*: with b = 1 it is exactly the central FCFS queue, so
M/D/c (exact) or M/G/c (Cosmetatos/Whitt); with b > 1 no validated central bulk formula exists
(design §2.4) and it is treated like round_robin (approximate; the per-engine chain ignores the
pooling, so it is conservative). Non-Poisson arrivals (c_a² ≠ 1) use the same scaling, approximate.

**Stability.** λ < c · b / E[S_b]: batching raises capacity above c / E[S_1], and a batched
configuration is never rejected by its unbatched load.

References: Neuts (1967); Chaudhry & Templeton (1983); Krämer & Langenbach-Belz (1976);
DistServe (Zhong et al., OSDI 2024) for the M/D/1 special case D + λD²/(2(1−λD)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from qmodel.dist import MAX_POINTS, GridDist
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import StationSolution
from qmodel.stations.fcfs import MDc, MGc, ServiceSample, klb_factor

__all__ = ["BatchServiceLaw", "BulkQueue", "PrefillStation", "batch_cap", "instance_wait_scale", "DEFAULT_MAX_BATCH_SIZE"]

Dispatch = Literal["random", "round_robin", "least_loaded"]

_NODES = 44  # strata kept per batch size for the Poisson mixtures (see BatchServiceLaw._nodes)
_DRAWS = 4096  # k-tuples drawn per batch size (each column is an exact permutation of the mix)
_TAIL = 1e-13  # truncation target for the chain


def _poisson_matrix(mu: np.ndarray, n: int) -> np.ndarray:
    """pmf[i, m] = P(Poisson(mu_i) = m), m < n (log-space: no overflow for large means)."""
    from scipy.special import gammaln

    mu = np.asarray(mu, dtype=float)[:, None]
    m = np.arange(n, dtype=float)
    safe = np.where(mu > 0, mu, 1.0)
    out = np.exp(m[None, :] * np.log(safe) - safe - gammaln(m + 1.0)[None, :])
    return np.where(mu > 0, out, (m[None, :] == 0).astype(float))


#: Request cap used when only a token budget is given: vLLM's long-standing max_num_seqs default.
#: Without it a huge budget over short prompts would ask for batches of thousands of requests.
DEFAULT_MAX_BATCH_SIZE = 256


def batch_cap(max_batch_tokens: float | None, mean_prompt_tokens: float, max_batch_size: int | None = None) -> int:
    """Request cap b standing in for a token budget: max(1, ⌊B/E[P]⌋), capped by max_batch_size
    (default :data:`DEFAULT_MAX_BATCH_SIZE`)."""
    if max_batch_tokens is None and max_batch_size is None:
        raise InputError("max_batch_tokens", None, "give a token budget or a max_batch_size")
    if max_batch_size is not None and (int(max_batch_size) != max_batch_size or max_batch_size < 1):
        raise InputError("max_batch_size", max_batch_size, "must be an integer >= 1")
    b = 1 << 30 if max_batch_tokens is None else max(1, int(math.floor(max_batch_tokens / mean_prompt_tokens + 1e-9)))
    return max(1, min(b, int(max_batch_size) if max_batch_size is not None else DEFAULT_MAX_BATCH_SIZE))


# ---------------------------------------------------------------------------------------------
# batch service law
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchServiceLaw:
    """S_k for k = 1..b: discrete nodes (values_s[k−1], weights[k−1]) plus exact first two moments.

    The nodes drive the Poisson mixtures and the time grid; the moments (from the full draw) drive
    the means, so compressing to nodes costs no accuracy in Wq.
    """

    values_s: tuple[np.ndarray, ...]
    weights: tuple[np.ndarray, ...]
    mean_s: np.ndarray
    second_s2: np.ndarray
    #: the full sample of each S_k (equal weights unless ``full_weights``), used for the time grid
    full_values_s: tuple[np.ndarray, ...] | None = None
    full_weights: tuple[np.ndarray, ...] | None = None

    @property
    def b(self) -> int:
        return len(self.values_s)

    @property
    def deterministic(self) -> bool:
        return all(v.size == 1 for v in self.values_s)

    @staticmethod
    def _nodes(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Strata means: 32 equal-probability strata, then the top 10% halved repeatedly, because
        the upper tail of the batch time drives the tail of the wait at low load."""
        s = np.sort(np.asarray(samples, dtype=float).ravel())
        if s[-1] - s[0] <= 1e-12 * max(s[-1], 1e-300):
            return np.array([float(s.mean())]), np.array([1.0])
        u = list(np.linspace(0.0, 0.9, 28)[:-1])
        tail = 0.1
        while tail * s.size >= 1.0 and len(u) < _NODES:
            u.append(1.0 - tail)
            tail /= 2.0
        cuts = np.unique(np.round(np.array(u + [1.0]) * s.size).astype(np.int64))
        vals, w = [], []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if hi > lo:
                vals.append(float(s[lo:hi].mean()))
                w.append(float(hi - lo))
        w_arr = np.array(w)
        return np.array(vals), w_arr / w_arr.sum()

    @staticmethod
    def from_samples(samples: list[np.ndarray]) -> "BatchServiceLaw":
        """One sample of S_k per k (equal weights)."""
        vals, wts, m1, m2, full = [], [], [], [], []
        for s in samples:
            s = np.asarray(s, dtype=float).ravel()
            if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
                raise InputError("batch_time_s", "sample", "batch times must be finite and > 0")
            v, w = BatchServiceLaw._nodes(s)
            vals.append(v)
            wts.append(w)
            m1.append(float(s.mean()))
            m2.append(float(np.mean(s * s)))
            full.append(s)
        return BatchServiceLaw(tuple(vals), tuple(wts), np.array(m1), np.array(m2), tuple(full),
                               tuple(np.full(x.size, 1.0 / x.size) for x in full))

    @staticmethod
    def deterministic_times(times_s: list[float] | np.ndarray) -> "BatchServiceLaw":
        """S_k = times_s[k−1] exactly."""
        return BatchServiceLaw.from_samples([np.array([t]) for t in times_s])

    @staticmethod
    def exponential(mean_s: float, b: int, nodes: int = 64) -> "BatchServiceLaw":
        """S_k ~ Exp(mean) for every k, by Gauss–Laguerre nodes: P(A_k = n) is then exact for
        n < 2·nodes (the integrand is a polynomial of degree n times e^{−x})."""
        x, w = np.polynomial.laguerre.laggauss(nodes)
        vals = x * mean_s
        w = w / w.sum()
        return BatchServiceLaw(tuple(vals for _ in range(b)), tuple(w for _ in range(b)),
                               np.full(b, mean_s), np.full(b, 2.0 * mean_s * mean_s))

    @staticmethod
    def from_prompts(service: ServiceTimeModel, prompt_tokens: np.ndarray, b: int,
                     cached_tokens: np.ndarray | None = None, seed: int = 20240601) -> "BatchServiceLaw":
        """S_k = service.prefill_time_s(Σn, Σ(n² + 2nc), k) for k prompts drawn from the mix.

        k = 1 uses every prompt; k > 1 uses k independent permutations of one stratified base
        sample, so each position has exactly the base marginal and the means of every term that is
        linear in the per-request token sums are exact for the base sample.
        """
        p = np.asarray(prompt_tokens, dtype=float).ravel()
        c = np.zeros_like(p) if cached_tokens is None else np.asarray(cached_tokens, dtype=float).ravel()
        if p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.max() <= 0:
            raise InputError("prompt_tokens", "sample", "prompt lengths must be finite, >= 0, not all zero")
        if c.shape != p.shape or np.any(c < 0):
            raise InputError("cached_tokens", "sample", "one non-negative cached length per prompt")
        samples = [np.asarray(service.prefill_time_s(p, p * p + 2 * p * c, np.ones_like(p)), dtype=float)]
        if b > 1:
            if p.size >= _DRAWS:  # stratified subsample: equally spaced order statistics, pairs kept
                order = np.argsort(p, kind="stable")
                idx = order[((np.arange(_DRAWS) + 0.5) * p.size / _DRAWS).astype(np.int64)]
            else:
                idx = np.tile(np.arange(p.size), int(math.ceil(_DRAWS / p.size)))
            rng = np.random.default_rng(seed)
            m = idx.size
            sum_n = np.zeros(m)
            sum_sq = np.zeros(m)
            for k in range(1, b + 1):
                pick = idx[rng.permutation(m)]
                sum_n = sum_n + p[pick]
                sum_sq = sum_sq + p[pick] ** 2 + 2 * p[pick] * c[pick]
                if k >= 2:
                    samples.append(np.asarray(service.prefill_time_s(sum_n, sum_sq, np.full(m, float(k))), dtype=float))
        return BatchServiceLaw.from_samples(samples)

    def arrivals_pmf(self, k: int, lam: float, n: int) -> np.ndarray:
        """P(A_k = m), m < n, arrivals at rate λ during S_k."""
        return self.weights[k - 1] @ _poisson_matrix(lam * self.values_s[k - 1], n)

    def grid_pmf(self, k: int, dx: float) -> np.ndarray:
        """S_k on the grid, rounded up (from the full sample when there is one)."""
        if self.full_values_s is not None and self.full_weights is not None:
            v, w = self.full_values_s[k - 1], self.full_weights[k - 1]
        else:
            v, w = self.values_s[k - 1], self.weights[k - 1]
        i = np.ceil(v / dx - 1e-9).astype(np.int64)
        return np.bincount(i, weights=w, minlength=int(i.max()) + 1)


# ---------------------------------------------------------------------------------------------
# one engine: the embedded chain
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BulkQueue:
    """M/G^[a,b]/1 with batch-size-dependent service, solved at one arrival rate."""

    lam: float
    law: BatchServiceLaw
    a: int = 1

    def __post_init__(self) -> None:
        if not (self.lam > 0 and math.isfinite(self.lam)):
            raise InputError("arrival_rate_per_s", self.lam, "must be a finite number > 0")
        if not 1 <= self.a <= self.law.b:
            raise InputError("min_batch", self.a, f"must lie in [1, {self.law.b}]")
        if self.rho_full >= 1.0:
            raise UnstableError("prefill", self.rho_full, self.lam, self.max_rate)

    @property
    def b(self) -> int:
        return self.law.b

    @property
    def max_rate(self) -> float:
        """Exact stability limit of the chain: b / E[S_b]."""
        return self.b / float(self.law.mean_s[-1])

    @property
    def rho_full(self) -> float:
        return self.lam / self.max_rate

    @cached_property
    def _size(self) -> int:
        """States kept: the tail of the chain decays like z0^{−j}, z0 > 1 the root of z^b = A_b(z)."""
        b, lam = self.b, self.lam
        v, w = self.law.values_s[-1], self.law.weights[-1]

        def g(z: float) -> float:  # log A_b(z) − b log z, A_b(z) = E[e^{λS_b(z−1)}] (log-sum-exp)
            e = lam * v * (z - 1.0)
            top = float(e.max())
            return top + math.log(float(np.dot(w, np.exp(e - top)))) - b * math.log(z)

        lo, hi = 1.0, 2.0
        while g(hi) < 0:
            lo, hi = hi, 2.0 * hi
        # g < 0 just right of 1 (ρ < 1) and convex: bisect the positive root.
        lo = 1.0 + 1e-12
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if g(mid) < 0:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-12 * hi:
                break
        logz = math.log(hi)
        object.__setattr__(self, "_z0", hi)
        n = int(math.ceil(2 * b + 40 + math.log(1.0 / _TAIL) / max(logz, 1e-12)))
        if n > 60000:
            raise NumericalError(f"prefill chain needs {n} states at load {self.rho_full:.4f}; too close to 1")
        return n

    @cached_property
    def _kr(self) -> tuple[np.ndarray, np.ndarray]:
        j = np.arange(self._size + 1)
        k = np.clip(j, self.a, self.b)
        r = np.maximum(j - self.b, 0)
        return k, r

    @cached_property
    def pi(self) -> np.ndarray:
        """Stationary law of the number waiting just after a batch completion (length _size + 1).

        Solved on states 0..N with the exact geometric tail π_{N+m} = π_N z0^{−m} as the boundary
        (the dominant root z0 of z^b = A_b(z) governs the tail), N a few decay lengths past 2b;
        then extended geometrically to where the tail is below 1e-13. Solving the full truncated
        chain instead (``_pi_dense``) agrees to ~1e-12 and costs (30/8)³ ≈ 50x more.
        """
        n_out = self._size
        z0 = self._z0
        n = int(math.ceil(2 * self.b + 40 + 8.0 / max(math.log(z0), 1e-12)))
        if n >= n_out:
            return self._pi_dense(n_out)
        if n > 6000:
            raise NumericalError(f"prefill chain needs {n} solved states at load {self.rho_full:.4f}; too close to 1")
        b = self.b
        jj = np.arange(n + 1)
        k = np.clip(jj, self.a, b)
        r = np.maximum(jj - b, 0)
        amat = np.vstack([self.law.arrivals_pmf(kk, self.lam, n + b + 1) for kk in range(1, b + 1)])
        A = np.zeros((n + 1, n + 1))  # A[i, j] = P[j, i] for the balance equation of state i
        for j in range(n + 1):
            A[r[j] : n + 1, j] = amat[k[j] - 1, : n + 1 - r[j]]
        A -= np.eye(n + 1)
        # states N+m (m >= 1, all full batches) jump to i >= N + m − b with a_b(i − N − m + b)
        zinv = 1.0 / z0
        ab = amat[b - 1]
        for i in range(max(n - b + 1, 0), n + 1):
            m = np.arange(1, i - n + b + 1)
            A[i, n] += float(np.dot(zinv**m, ab[i - n - m + b]))
        A[-1, :] = 1.0
        A[-1, n] += zinv / (1.0 - zinv)
        rhs = np.zeros(n + 1)
        rhs[-1] = 1.0
        head = np.linalg.solve(A, rhs)
        if np.any(head < -1e-12):
            return self._pi_dense(n_out)
        pi = np.empty(n_out + 1)
        pi[: n + 1] = np.clip(head, 0.0, None)  # round-off can leave ~-1e-17 where π is ~0
        pi[n + 1 :] = pi[n] * zinv ** np.arange(1, n_out - n + 1)
        return pi / pi.sum()

    def _pi_dense(self, n: int) -> np.ndarray:
        """π of the chain truncated at n with the overflow lumped into state n (the plain method)."""
        k, r = self._kr
        amat = np.vstack([self.law.arrivals_pmf(kk, self.lam, n + 1) for kk in range(1, self.b + 1)])
        P = np.zeros((n + 1, n + 1))
        for j in range(n + 1):
            row = amat[k[j] - 1, : n + 1 - r[j]]
            P[j, r[j]:] = row
            P[j, n] += max(0.0, 1.0 - row.sum())
        A = P.T - np.eye(n + 1)
        A[-1, :] = 1.0
        rhs = np.zeros(n + 1)
        rhs[-1] = 1.0
        pi = np.clip(np.linalg.solve(A, rhs), 0.0, None)
        pi /= pi.sum()
        if pi[-20:].sum() > 1e-9:
            raise NumericalError(f"prefill chain truncation too small at load {self.rho_full:.4f}")
        return pi

    # ---- semi-regenerative averages ------------------------------------------------------
    @cached_property
    def _cycle(self) -> dict[str, float]:
        pi = self.pi
        k, r = self._kr
        j = np.arange(pi.size)
        es, es2 = self.law.mean_s[k - 1], self.law.second_s2[k - 1]
        idle = np.where(j < self.a, (self.a - j) / self.lam, 0.0)
        # Σ_{i=j}^{a−1} i/λ : area of the queue while waiting for the a-th request
        idle_area = np.where(j < self.a, (self.a * (self.a - 1) - j * (j - 1)) / (2.0 * self.lam), 0.0)
        area = idle_area + r * es + self.lam * es2 / 2.0
        cycle = float(pi @ (idle + es))
        return {
            "cycle_s": cycle,
            "lq": float(pi @ area) / cycle,
            "busy": float(pi @ es) / cycle,
            "p_idle_time": float(pi @ idle) / cycle,
            "batch_mean": float(pi @ k),
            "batch_second": float(pi @ (k * k)),
            "in_service": float(pi @ (k * es)) / cycle,
            "throughput": float(pi @ k) / cycle,
        }

    @property
    def lq(self) -> float:
        return self._cycle["lq"]

    @property
    def mean_wait_s(self) -> float:
        return self.lq / self.lam

    @property
    def utilization(self) -> float:
        return self._cycle["busy"]

    @property
    def mean_batch(self) -> float:
        return self._cycle["batch_mean"]

    @property
    def p_idle(self) -> float:
        """Time fraction idle = P(an arrival starts service at once) (a = 1)."""
        return self._cycle["p_idle_time"]

    @property
    def own_batch_pmf(self) -> np.ndarray:
        """P(a request's own batch has k requests), k = 1..b: customer-weighted batch sizes."""
        k, _ = self._kr
        f = np.bincount(k - 1, weights=self.pi * k, minlength=self.b)
        return f / f.sum()

    @property
    def mean_own_batch_s(self) -> float:
        return float(self.own_batch_pmf @ self.law.mean_s)

    @property
    def mean_in_system(self) -> float:
        return self.lq + self._cycle["in_service"]

    # ---- exact waiting-time CDF for deterministic S_k ------------------------------------
    def wait_cdf(self, t: float | np.ndarray) -> float | np.ndarray:
        """P(W ≤ t), exact for deterministic S_k (a = 1)."""
        if not self.law.deterministic:
            raise InputError("service", "random", "the closed-form CDF needs deterministic batch times; use the grid")
        if self.a != 1:
            raise InputError("min_batch", self.a, "the waiting-time law is implemented for a = 1")
        from scipy.special import pdtr

        tt = np.atleast_1d(np.asarray(t, dtype=float))
        pi = self.pi
        k, r = self._kr
        s = np.array([float(v[0]) for v in self.law.values_s])
        sb = s[-1]
        lam, b = self.lam, self.b
        cyc = self._cycle["cycle_s"]

        def G(U: np.ndarray, K: np.ndarray) -> np.ndarray:
            # ∫_0^U P(Poisson(λu) ≤ K) du = E[min(Poisson(λU), K+1)]/λ = Σ_{n=0}^{K} P(Poisson(λU) > n)/λ
            out = np.zeros(np.broadcast(U, K).shape)
            U, K = np.broadcast_arrays(U, K)
            kmax = int(K.max()) if K.size else -1
            for n_ in range(kmax + 1):
                live = K >= n_
                out = out + np.where(live, 1.0 - pdtr(n_, lam * U), 0.0)
            return out / lam

        res = np.empty_like(tt)
        for idx, x in enumerate(tt):
            if x < 0:
                res[idx] = 0.0
                continue
            total = pi[0] / lam  # arrivals in the idle part of a cycle wait zero
            # batch of size k_j with r_j left waiting, elapsed u in (0, s_k), residual v = s_k − u:
            # need ⌊(r + N_u)/b⌋ ≤ ⌊(x − v)/s_b⌋  ⇔  r + N_u ≤ b(⌊(x − v)/s_b⌋ + 1) − 1 (needs v ≤ x)
            sk = s[k - 1]
            for i in range(int(math.floor(x / sb)) + 1):
                # pieces where ⌊(x − v)/s_b⌋ = i : v ∈ (x − (i+1)s_b, x − i s_b], intersected with (0, s_k)
                v_lo = np.clip(x - (i + 1) * sb, 0.0, sk)
                v_hi = np.clip(x - i * sb, 0.0, sk)
                K = b * (i + 1) - 1 - r
                ok = (v_hi > v_lo) & (K >= 0)
                if not ok.any():
                    continue
                # u = s_k − v: u ∈ [s_k − v_hi, s_k − v_lo)
                u_hi, u_lo = sk - v_lo, sk - v_hi
                Kc = np.where(ok, K, -1)
                total += float(pi[ok] @ (G(u_hi[ok], Kc[ok]) - G(u_lo[ok], Kc[ok])))
            res[idx] = min(1.0, total / cyc)
        return float(res[0]) if np.ndim(t) == 0 else res

    # ---- waiting time and (wait + own batch) on a grid -----------------------------------
    def grids(self, dx: float | None = None, wait_scale: float = 1.0) -> tuple[GridDist, GridDist, GridDist]:
        """(W, W + S_own jointly, S_own) on a common grid (a = 1).

        ``wait_scale`` multiplies the queueing part (non-Poisson corrections); 1 is exact.
        """
        if self.a != 1:
            raise InputError("min_batch", self.a, "the waiting-time law is implemented for a = 1")
        lam, b = self.lam, self.b
        pi = self.pi
        k, r = self._kr
        cyc = self._cycle["cycle_s"]
        p_idle = self.p_idle
        full = self.law.full_values_s or self.law.values_s
        max_s = max(float(v.max()) for v in full)
        min_mean = float(self.law.mean_s.min())
        n_q = pi.size + int(math.ceil(lam * max_s + 10.0 * math.sqrt(lam * max_s) + 10.0))
        # Horizon: W's tail decays at least like e^{−ηt} with η = min(λ(z0 − 1), b ln z0 / E[S_b])
        # (z0 the chain's decay root); keep t up to where it is below ~1e-12. Mass past the horizon
        # is at most that and is folded into the last bin.
        z0 = self._z0 if self._size else 1.0
        eta = min(lam * (z0 - 1.0), b * math.log(z0) / float(self.law.mean_s[-1]))
        horizon = (max_s + math.log(1e12) / max(eta, 1e-300) + self.mean_own_batch_s) * max(wait_scale, 1.0)
        if dx is None:
            # ≥ 16 bins for the shortest batch, and the horizon within 8192 points (time and memory
            # grow with it; quantiles are conservative by at most dx per term)
            dx = max(min_mean / 16.0, horizon / 8192.0)
        f = [self.law.grid_pmf(kk, dx) for kk in range(1, b + 1)]
        n_s = max(len(x) for x in f)
        f = [np.pad(x, (0, n_s - len(x))) for x in f]

        # ω_k(r): time weight of "in a size-k batch with r left waiting", per unit of service time
        omega = np.zeros((b, pi.size))
        np.add.at(omega, (k - 1, r), pi / cyc)
        ages = (np.arange(n_s) + 0.5) * dx
        p_age = _poisson_matrix(lam * ages, n_q)  # (n_s, n_q)
        # Y[v−1, n] = Σ_a f_k[v + a] · P(count n | age a) dx: a cross-correlation in time (residual v
        # = batch length − age), done by FFT along the time axis for every count column at once.
        lt = 1 << int(math.ceil(math.log2(2 * n_s + 2)))
        pa_hat = np.conj(np.fft.rfft(p_age, lt, axis=0))  # (lt/2+1, n_q)

        def corr(fk: np.ndarray, cols_hat: np.ndarray) -> np.ndarray:
            c = np.fft.irfft(np.fft.rfft(fk, lt)[:, None] * cols_hat, lt, axis=0)
            return c[1 : n_s + 1]  # lags v = 1..n_s

        y_hat_r0 = np.zeros(n_s)
        y = np.zeros((n_s, n_q))
        for kk in range(1, b + 1):
            w = omega[kk - 1]
            if not w.any():
                continue
            if w[1:].any():
                size_q = 1 << int(math.ceil(math.log2(n_q + w.size)))
                conv = np.fft.irfft(np.fft.rfft(p_age, size_q, axis=1) * np.fft.rfft(w, size_q)[None, :], size_q,
                                    axis=1)[:, :n_q]
                y += corr(f[kk - 1], np.conj(np.fft.rfft(np.clip(conv, 0.0, None), lt, axis=0)))
            else:
                y_hat_r0 = y_hat_r0 + w[0] * f[kk - 1]
        if y_hat_r0.any():
            y += corr(y_hat_r0, pa_hat)
        y = np.clip(y * dx, 0.0, None)
        busy_mass = 1.0 - p_idle
        if y.sum() > 0:
            y *= busy_mass / y.sum()
        # drop count columns that carry no mass (the chain's tail): fewer full-batch levels
        col = y.sum(axis=0)
        live = np.nonzero(col > 1e-14 * busy_mass)[0]
        n_q = int(live[-1]) + 1 if live.size else 1
        y = y[:, :n_q]
        n_full = int(math.ceil(n_q / b))

        # W = residual + Σ_{⌊q/b⌋} S_b : FFT along time, Horner over full batches
        nsb = len(np.trim_zeros(f[-1], "b"))
        length = min(n_s + 1 + n_full * nsb + 1, int(math.ceil(horizon / dx)) + n_s + 2)
        size = 1 << int(math.ceil(math.log2(length)))
        if size > 4 * MAX_POINTS:
            raise NumericalError("prefill waiting-time grid too large; the load is too close to 1")
        ypad = np.zeros((n_s + 1, n_full * b))
        ypad[1:, :n_q] = y
        ypad = ypad.reshape(n_s + 1, n_full, b)
        phi = np.fft.rfft(f[-1], size)
        # Horner over the number of full batches ahead, one transform per level (memory ~ size x b)
        gh = np.fft.rfft(ypad[:, n_full - 1, :], size, axis=0)
        for ff in range(n_full - 2, -1, -1):
            gh = gh * phi[:, None] + np.fft.rfft(ypad[:, ff, :], size, axis=0)
        g = np.clip(np.fft.irfft(gh, size, axis=0), 0.0, None)  # (size, b): P(W = t, q mod b = m)
        g_mass = g.sum()
        if g_mass > 0:
            g *= busy_mass / g_mass
        if wait_scale != 1.0:
            g = _scale_time(g, wait_scale)
            size = g.shape[0]
        t = np.arange(size) * dx

        # own batch: k_own = min(b, m + 1 + Poisson(λW))
        h = np.zeros((size, b))
        h[0, 0] += p_idle
        if b == 1:
            h[:, 0] += g[:, 0]
        else:
            qm = _poisson_matrix(lam * t, b)  # (size, b): P(N = i | W = t), i < b
            cq = np.cumsum(qm, axis=1)
            # k_own − 1 = m + i < b − 1: a convolution over the count axis, row by row (FFT)
            lb = 1 << int(math.ceil(math.log2(2 * b)))
            conv = np.fft.irfft(np.fft.rfft(g, lb, axis=1) * np.fft.rfft(qm, lb, axis=1), lb, axis=1)
            h[:, : b - 1] += np.clip(conv[:, : b - 1], 0.0, None)
            # k_own = b: at least b − 1 − m arrivals during the wait (always for m = b − 1)
            tail = np.ones((size, b))
            tail[:, : b - 1] = np.clip(1.0 - cq[:, b - 2 :: -1], 0.0, 1.0)
            h[:, b - 1] += np.sum(g * tail, axis=1)
        out_size = 1 << int(math.ceil(math.log2(size + n_s)))
        acc = np.zeros(out_size // 2 + 1, dtype=complex)
        own = np.zeros(n_s)
        hk_mass = h.sum(axis=0)
        for kk in range(1, b + 1):
            if hk_mass[kk - 1] <= 0:
                continue
            acc += np.fft.rfft(h[:, kk - 1], out_size) * np.fft.rfft(f[kk - 1], out_size)
            own += hk_mass[kk - 1] * f[kk - 1]
        joint = np.clip(np.fft.irfft(acc, out_size), 0.0, None)[: size + n_s]
        joint /= joint.sum()

        wpmf = g.sum(axis=1)
        wpmf[0] += p_idle
        wpmf /= wpmf.sum()
        exact = wait_scale == 1.0
        wq = self.mean_wait_s * wait_scale
        own_mean = self.mean_own_batch_s
        wait = GridDist(dx, wpmf, wq, exact=exact).trimmed()
        delay = GridDist(dx, joint, wq + own_mean, exact=exact).trimmed()
        own_d = GridDist(dx, own / own.sum(), own_mean, exact=exact).trimmed()
        return wait, delay, own_d


def instance_wait_scale(rho: float, ca2: float, cs2e: float) -> float:
    """Factor on the Poisson chain's queueing part for per-engine arrival SCV ``ca2``.

    Heavy traffic: the queue length is driven by the variance rate λ(c_a² + b c_b²) of arrivals
    minus departures (b requests leave per batch, batch-time SCV c_b²), against λ(1 + b c_b²) for
    Poisson input, so the ratio (c_a² + b c_b²)/(1 + b c_b²) is exact as ρ → 1. For c_a² < 1 the
    Krämer–Langenbach-Belz g corrects Kingman's overestimate at moderate load. For c_a² > 1 KLB's
    factor is not applied: against the DES it moved the estimate the wrong way (it lowers an
    estimate that is already low). Measured, b = 8, lognormal prompts: Gamma CV 2 arrivals −9% on
    E[W] at 50% load and −20% at 80%; round robin over 4 engines −17% at 50% and −5% at 80%.
    """
    if ca2 + cs2e <= 0:
        return 0.0
    ratio = (ca2 + cs2e) / (1.0 + cs2e)
    return ratio * klb_factor(rho, ca2, cs2e) if ca2 < 1.0 else ratio


def _scale_time(g: np.ndarray, scale: float) -> np.ndarray:
    """Re-place mass at bin i onto bin ceil(i·scale) (conservative rounding)."""
    n = g.shape[0]
    idx = np.ceil(np.arange(n) * scale - 1e-9).astype(np.int64)
    out = np.zeros((int(idx.max()) + 1, g.shape[1]))
    np.add.at(out, idx, g)
    return out


# ---------------------------------------------------------------------------------------------
# the pool station
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PrefillStation:
    """The prefill pool (see the module docstring for the method).

    Parameters: ``instances`` engines; ``service`` the batch step-time model; ``prompt_tokens`` an
    equally weighted sample of *uncached* prompt lengths (``cached_tokens`` the matching cached
    prefix lengths, for the attention term); ``max_batch_tokens`` the token budget B and/or
    ``max_batch_size``; ``dispatch``; ``ca2`` the SCV of the pool's inter-arrival times (1 = Poisson).
    """

    instances: int
    service: ServiceTimeModel
    prompt_tokens: np.ndarray
    max_batch_tokens: float | None = 8192
    dispatch: Dispatch = "random"
    ca2: float = 1.0
    cached_tokens: np.ndarray | None = None
    max_batch_size: int | None = None
    dx: float | None = None
    law_override: BatchServiceLaw | None = field(default=None, repr=False)

    name: str = field(default="prefill", init=False)

    def __post_init__(self) -> None:
        if int(self.instances) != self.instances or self.instances < 1:
            raise InputError("prefill.instances", self.instances, "must be an integer >= 1")
        if self.dispatch not in ("random", "round_robin", "least_loaded"):
            raise InputError("prefill.dispatch", self.dispatch, "one of random, round_robin, least_loaded")
        if not (self.ca2 >= 0 and math.isfinite(self.ca2)):
            raise InputError("arrivals.ca2", self.ca2, "must be a finite number >= 0")
        if self.max_batch_tokens is not None and not self.max_batch_tokens >= 1:
            raise InputError("prefill.max_batch_tokens", self.max_batch_tokens, "must be >= 1 token")
        p = np.asarray(self.prompt_tokens, dtype=float)
        if p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.max() <= 0:
            raise InputError("prompt_tokens", "sample", "prompt lengths must be finite, >= 0, not all zero")

    # ---- the law of one engine -----------------------------------------------------------
    @cached_property
    def b(self) -> int:
        if self.law_override is not None:
            return self.law_override.b
        return batch_cap(self.max_batch_tokens, float(np.mean(self.prompt_tokens)), self.max_batch_size)

    @cached_property
    def law(self) -> BatchServiceLaw:
        if self.law_override is not None:
            return self.law_override
        return BatchServiceLaw.from_prompts(self.service, np.asarray(self.prompt_tokens, dtype=float), self.b,
                                            self.cached_tokens)

    def max_stable_rate_per_s(self) -> float:
        """c · b / E[S_b] (exact for the model; c / E[S_1] when b = 1)."""
        return self.instances * self.b / float(self.law.mean_s[-1])

    def _instance_ca2(self) -> float:
        c = self.instances
        if self.dispatch == "random":
            return self.ca2 / c + 1.0 - 1.0 / c  # Bernoulli splitting
        return self.ca2 / c  # cyclic splitting: sum of c inter-arrival times

    def own_batch_time_per_prompt(self, own_batch_pmf: np.ndarray, seed: int = 7) -> np.ndarray:
        """Each sampled request's own batch time, aligned with ``prompt_tokens``.

        Request i's batch holds its own prompt and k − 1 others drawn from the mix, with k from the
        customer-weighted ``own_batch_pmf`` (under a request cap the batch size does not depend on
        the request's own prompt, so this is the model's joint law of (prompt, T_p)). The KV
        station's layer-wise overlap needs exactly this pairing (seeded: reproducible).
        """
        p = np.asarray(self.prompt_tokens, dtype=float).ravel()
        c = np.zeros_like(p) if self.cached_tokens is None else np.asarray(self.cached_tokens, dtype=float).ravel()
        # round-off leaves entries of order -1e-17 in the pmf; Generator.choice refuses any negative
        pk = np.clip(np.asarray(own_batch_pmf, dtype=float), 0.0, None)
        pk = pk / pk.sum()
        rng = np.random.default_rng(seed)
        k = rng.choice(np.arange(1, pk.size + 1), size=p.size, p=pk)
        sum_n = p.copy()
        sum_sq = p * p + 2 * p * c
        for extra in range(1, int(k.max())):
            live = k > extra
            pick = rng.integers(0, p.size, size=int(live.sum()))
            sum_n[live] += p[pick]
            sum_sq[live] += p[pick] ** 2 + 2 * p[pick] * c[pick]
        return np.asarray(self.service.prefill_time_s(sum_n, sum_sq, k.astype(float)), dtype=float)

    def queue(self, rate_per_s: float) -> BulkQueue:
        """One engine's chain at the pool rate ``rate_per_s`` (exact for random dispatch)."""
        self._check(rate_per_s)
        return BulkQueue(rate_per_s / self.instances, self.law)

    def _check(self, rate_per_s: float) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "must be a finite number > 0")
        lim = self.max_stable_rate_per_s()
        if rate_per_s >= lim:
            raise UnstableError("prefill", rate_per_s / lim, rate_per_s, lim,
                                detail=f"{self.instances} instance(s) x batch {self.b} / E[S_b] {self.law.mean_s[-1]:.4g} s")

    # ---- solve ---------------------------------------------------------------------------
    def solve(self, rate_per_s: float) -> StationSolution:
        self._check(rate_per_s)
        if self.dispatch == "least_loaded" and self.b == 1 and self.instances > 1:
            return self._solve_central(rate_per_s)
        q = BulkQueue(rate_per_s / self.instances, self.law)
        ca2_i = self._instance_ca2()
        notes: list[str] = []
        scale = 1.0
        if abs(ca2_i - 1.0) > 1e-12:
            cb2 = max(float(self.law.second_s2[-1] / self.law.mean_s[-1] ** 2 - 1.0), 0.0)
            cs2e = self.b * cb2
            rho = q.rho_full
            scale = instance_wait_scale(rho, ca2_i, cs2e)
            notes.append(f"per-engine arrival SCV {ca2_i:.3g}: queueing part scaled by {scale:.3g} "
                         "(heavy-traffic (ca2+b cb2)/(1+b cb2), KLB g for ca2<1; approximate)")
        if self.dispatch == "least_loaded" and self.b > 1:
            notes.append("least_loaded with batching: per-engine chain with cyclic-split arrivals (approximate, conservative)")
        if self.max_batch_tokens is not None and self.law_override is None:
            notes.append(f"token budget {self.max_batch_tokens:g} mapped to batch cap b = {self.b} "
                         "(design: -1..-8% on E[W] vs a token-budget engine)")
        wait, delay, own = q.grids(self.dx, wait_scale=scale)
        # Exact for the stated model: Poisson per engine and a request cap that *is* the engine's
        # rule (no token budget, or every prompt the same length so floor(B/P) is what fits).
        p = np.asarray(self.prompt_tokens, dtype=float)
        budget_is_cap = self.max_batch_tokens is None or self.law_override is not None or bool(np.ptp(p) == 0)
        exact = scale == 1.0 and self.dispatch == "random" and budget_is_cap
        method = f"M/G^[1,{self.b}]/1 embedded chain per instance ({self.dispatch} dispatch)"
        batch_rate = self.instances / q._cycle["cycle_s"]
        return StationSolution(
            name="prefill",
            utilization=q.utilization,
            max_stable_rate_per_s=self.max_stable_rate_per_s(),
            delay=delay,
            wait=wait,
            method=method,
            exact=exact,
            mean_in_system=self.instances * (q.lq * scale + q._cycle["in_service"]),
            notes=tuple(notes),
            extra={
                "batch_rate_per_s": batch_rate,
                "batch_size_mean": q.mean_batch,
                "batch_size_second_moment": q._cycle["batch_second"],
                "batch_cap": self.b,
                "own_batch_time": own,
                "own_batch_pmf": q.own_batch_pmf,
                "own_batch_time_per_prompt_s": self.own_batch_time_per_prompt(q.own_batch_pmf),
                "mean_wait_s": q.mean_wait_s * scale,
                "per_instance_rate_per_s": q.lam,
                "instance_arrival_scv": ca2_i,
                "departure_batches_poisson_thinned": self.dispatch == "random",
            },
        )

    def _solve_central(self, rate_per_s: float) -> StationSolution:
        """least_loaded (least work left) without batching = the central FCFS queue M/G/c."""
        c = self.instances
        law = self.law
        s = law.full_values_s[0] if law.full_values_s is not None else law.values_s[0]
        w_nodes = law.full_weights[0] if law.full_weights is not None else law.weights[0]
        det = law.values_s[0].size == 1
        svc = ServiceSample(np.asarray(s, dtype=float), np.asarray(w_nodes, dtype=float))
        es, es2 = float(self.law.mean_s[0]), float(self.law.second_s2[0])
        svc_exact_moments = _Moments(svc.values_s, svc.weights, es, es2)
        model = MDc(rate_per_s, float(s[0]), c) if det else MGc(rate_per_s, svc_exact_moments, c)
        scale = 1.0
        notes: list[str] = ["least_loaded without batching is least-work-left = central FCFS M/G/c"]
        if abs(self.ca2 - 1.0) > 1e-12:
            cs2 = max(es2 / es**2 - 1.0, 0.0)
            scale = (self.ca2 + cs2) / (1.0 + cs2) if self.ca2 + cs2 > 0 else 0.0
            notes.append(f"arrival SCV {self.ca2:.3g}: wait scaled by Allen-Cunneen (ca2+cs2)/(1+cs2) = {scale:.3g}")
        own_dx = self.dx
        wait = model.grid(dx=own_dx)
        if scale != 1.0:
            pm = _scale_time(wait.pmf[:, None], scale)[:, 0]
            wait = GridDist(wait.dx, pm, model.mean_s * scale, exact=False)
        dx = wait.dx
        own = GridDist.from_samples(s, dx, w_nodes)
        own = GridDist(dx, own.pmf, es)
        from qmodel.dist import convolve

        delay = convolve(wait, own)  # b = 1: the own service is independent of the wait
        rho = rate_per_s * es / c
        return StationSolution(
            name="prefill",
            utilization=rho,
            max_stable_rate_per_s=self.max_stable_rate_per_s(),
            delay=delay,
            wait=wait,
            method=model.method,
            exact=model.exact and scale == 1.0,
            mean_in_system=rate_per_s * (model.mean_s * scale + es),
            notes=tuple(notes),
            extra={
                "batch_rate_per_s": rate_per_s,
                "batch_size_mean": 1.0,
                "batch_size_second_moment": 1.0,
                "batch_cap": 1,
                "own_batch_time": own,
                "own_batch_pmf": np.array([1.0]),
                "own_batch_time_per_prompt_s": self.own_batch_time_per_prompt(np.array([1.0])),
                "mean_wait_s": model.mean_s * scale,
                "per_instance_rate_per_s": rate_per_s / c,
                "instance_arrival_scv": self.ca2,
                "departure_batches_poisson_thinned": False,
            },
        )


@dataclass(frozen=True)
class _Moments(ServiceSample):
    """A service sample whose first two moments are known exactly (nodes only shape the tail)."""

    m1: float = 0.0
    m2: float = 0.0

    def moment(self, k: int) -> float:
        if k == 1:
            return self.m1
        if k == 2:
            return self.m2
        return super().moment(k)
