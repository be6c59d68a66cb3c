"""The exact waiting-time CDF of a prefill engine with deterministic batch times (plain cap, a = 1).

An arrival finds the engine idle with probability (π_0/λ)/E[cycle] (W = 0), or lands at age u of
a batch of size k_j (time s_k, r_j left waiting) and finds r_j + Poisson(λu) ahead; it waits the
residual s_k − u plus ⌊q/b⌋ full batches of s_b. So P(W ≤ x) sums, over the pieces where
⌊(x − v)/s_b⌋ = i (v = s_k − u the residual), P(r + N_u ≤ b(i + 1) − 1), and the integrals of
Poisson CDFs over u are exact: ∫_0^U P(Poisson(λu) ≤ K) du = E[min(Poisson(λU), K + 1)]/λ.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from qmodel.errors import InputError

if TYPE_CHECKING:
    from qmodel.stations.prefill.chain import BulkQueue

__all__ = ["deterministic_wait_cdf"]


def deterministic_wait_cdf(q: BulkQueue, t: float | np.ndarray) -> float | np.ndarray:
    """P(W ≤ t) of the queue ``q``, exact for deterministic S_k (a = 1)."""
    if q.law.token_aware:
        raise InputError("service", "token budget", "the closed-form CDF is for a plain request cap; use the grid")
    if not q.law.deterministic:
        raise InputError("service", "random", "the closed-form CDF needs deterministic batch times; use the grid")
    if q.a != 1:
        raise InputError("min_batch", q.a, "the waiting-time law is implemented for a = 1")
    from qmodel.special import pdtr

    tt = np.atleast_1d(np.asarray(t, dtype=float))
    pi = q.pi
    # plain cap: batch size and leftover per state j (π's states)
    j = np.arange(pi.size)
    k = np.clip(j, q.a, q.b)
    r = np.maximum(j - q.b, 0)
    s = np.array([float(v[0]) for v in q.law.values_s])
    sb = s[-1]
    lam, b = q.lam, q.b
    cyc = q.cycle["cycle_s"]

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
