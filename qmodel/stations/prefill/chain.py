"""One prefill engine's embedded chain: M/G^[a,b]/1 with batch-size-dependent service.

:class:`BulkQueue` solves the chain of the number waiting (and the head regime) just after a batch
completion, j' = r_j + A_{k_j}, on a short window whose boundary is the exact geometric tail
z0^{−j} (:func:`~qmodel.stations.prefill.kernels.decay_root`), and its semi-regenerative cycle
sums (Lq, busy fraction, batch sizes; formulas in :mod:`qmodel.stations.prefill`). The waiting-time
laws built on π live beside it: the closed-form CDF for deterministic batch times
(:mod:`~qmodel.stations.prefill.wait_exact`) and the time grids
(:mod:`~qmodel.stations.prefill.wait_grids`), reached through :meth:`BulkQueue.wait_cdf` and
:meth:`BulkQueue.grids`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qmodel.dist import GridDist
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.stations.prefill.kernels import balance_matrix, balance_view, band_view, decay_root, solve_balance
from qmodel.stations.prefill.law import BatchServiceLaw
from qmodel.stations.prefill.regimes import MixTables, Regime
from qmodel.stations.prefill.wait_exact import deterministic_wait_cdf
from qmodel.stations.prefill.wait_grids import solve_grids

__all__ = ["BulkQueue"]

_TAIL = 1e-13  # truncation target for the chain
#: explicit chain states at most: past them π is the exact geometric tail of the settled regime,
#: summed in closed form (see BulkQueue._size); the wait grids' count axis stops at _COUNT_MAX
#: (:mod:`~qmodel.stations.prefill.wait_grids`) and carries the rest of the wait law as its exact
#: exponential tail
_STATES_MAX = 16384
#: bytes of MixTables kept per regime (oldest dropped first): 64 MB holds a trace's classes at
#: every rate a goodput search visits for the bundled examples (~0.14 MB a table there)
_MIX_BYTES = 64 << 20


@dataclass(frozen=True)
class BulkQueue:
    """M/G^[a,b]/1 with batch-size-dependent service, solved at one arrival rate.

    With a token-aware law (``law.n_pmf`` set, a = 1) the batch formed from j waiting requests is
    the FCFS prefix that fits the budget: k = j with probability P(N ≥ j) (the whole queue fits,
    *fit* time law), else k = N < j with probability P(N = k) (*cut* time law), leaving j − k.
    The state carries the head regime of the queue (fresh, or the size-biased request that did
    not fit the last batch; see :mod:`qmodel.stations.prefill`). A plain cap is the special case N ≡ b.
    """

    lam: float
    law: BatchServiceLaw
    a: int = 1

    def __post_init__(self) -> None:
        if not (self.lam > 0 and math.isfinite(self.lam)):
            raise InputError("arrival_rate_per_s", self.lam, "must be a finite number > 0")
        if not 1 <= self.a <= self.law.b:
            raise InputError("min_batch", self.a, f"must lie in [1, {self.law.b}]")
        if self.law.token_aware and self.a != 1:
            raise InputError("min_batch", self.a, "a token-budget batcher starts on one request (a = 1)")
        if self.rho_full >= 1.0:
            raise UnstableError("prefill", self.rho_full, self.lam, self.max_rate)

    @cached_property
    def b(self) -> int:
        return self.law.b

    @property
    def max_rate(self) -> float:
        """Exact stability limit of the chain: E[N] / E[S_N] (b / E[S_b] for a plain cap)."""
        en, es = self.law.mean_drain
        return en / es

    @property
    def rho_full(self) -> float:
        return self.lam / self.max_rate

    @cached_property
    def _size(self) -> int:
        """States kept: the tail decays like z0^{−j}, z0 > 1 the root of E[z^{−N} A_N(z)] = 1
        (z^b = A_b(z) for a plain cap), A_k(z) = E[e^{λ S_k (z−1)}] over the cut law."""
        hi = decay_root(self.law.drain_nodes, self.lam)
        logz = math.log(hi)
        object.__setattr__(self, "_z0", hi)
        n = int(math.ceil(2 * self.b + 40 + math.log(1.0 / _TAIL) / max(logz, 1e-12)))
        # Past _STATES_MAX the states are not kept: π_{N+m} = π_N z0^{-m} in the settled regime,
        # whose batch-formation rows are affine in j there (the cut leaves j − k), so the tail's
        # share of every cycle sum is a geometric series in closed form (_pi_moments)
        object.__setattr__(self, "_far", n > _STATES_MAX)
        return min(n, _STATES_MAX)

    def _mix(self, n: int, reg: Regime) -> MixTables:
        """The regime's tables on j = 0..n (:class:`MixTables`: P_fit, P_cut, each (n+1, b), and what
        the chain and the grids read from them). Rate-independent given n: kept on the regime
        (read-only) for the next solves."""
        key = (n, self.a)
        cache = reg.mix_cache
        hit = cache.get(key)
        if hit is None:
            pfit, pcut = self._mix_tables(n, reg)
            hit = MixTables.build(pfit, pcut, reg, self.a, len(self.regimes) - 1)
            # a goodput search visits a few state counts per rate, a trace's rate classes one each
            # (up to 9 a rate): keep the most recent tables up to _MIX_BYTES per regime
            while cache and sum(t.nbytes for t in cache.values()) + hit.nbytes > _MIX_BYTES:
                del cache[next(iter(cache))]
            cache[key] = hit
        return hit

    def _mix_tables(self, n: int, reg: Regime) -> tuple[np.ndarray, np.ndarray]:
        b, a = self.b, self.a
        j = np.arange(n + 1)
        pfit = np.zeros((n + 1, b))
        pcut = np.zeros((n + 1, b))
        if self.law.token_aware:
            pfit[0, 0] = 1.0  # idle: the next arrival starts alone
            kk = np.arange(1, b + 1)
            pcut[1:] = np.where(kk[None, :] < j[1:, None], reg.p_n[None, :], 0.0)
            jj = j[1 : min(n, b) + 1]
            pfit[jj, jj - 1] = reg.s_n[jj - 1]
        else:
            k = np.clip(j, a, b)
            full = j > b
            pfit[j[~full], k[~full] - 1] = 1.0
            pcut[j[full], b - 1] = 1.0
        return pfit, pcut

    @cached_property
    def regimes(self) -> list[Regime]:
        """The law's batch-formation regimes (:meth:`BatchServiceLaw.regimes`)."""
        return self.law.regimes()

    @cached_property
    def mix_pi(self) -> list[MixTables]:
        """Each regime's :class:`MixTables` on the states of π (:attr:`_pi_flags`)."""
        return [self._mix(self._pi_flags.shape[1] - 1, reg) for reg in self.regimes]

    def _transitions(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(P on the states (regime, j), j = 0..n, without the overflow; the homogeneous kernel).

        A fit batch leads to regime 0 (fresh head), a cut at k from regime f to the regime its
        overflow head belongs to (``Regime.after_cut``; always later, the last leads to itself).
        kernel[e] = P(j → j + e − b) for j ≥ b in the last regime."""
        b = self.b
        regs = self.regimes
        nr = len(regs)
        n1 = n + 1
        length = n + b + 1
        # the cut tables over e = (j' − j) + b: wide enough that the band view below reads zeros
        # wherever j' falls outside 0..n
        width = max(2 * n + 1, length + b)
        P = np.zeros((nr * n1, nr * n1))
        last = nr - 1
        kern = np.zeros(0)  # (set by the last regime)
        for f, reg in enumerate(regs):
            mx = self._mix(n, reg)
            a_fit, a_cut = self._arrival_tables(reg, n1, length)
            # shifted cut tables: acs[k−1, e] = a_cut[k−1][e − b + k] (row k−1 starts at column b − k)
            acs = np.zeros((b, width))
            band_view(acs, b - 1, (b, length), width - 1, writeable=True)[reg.live_index] = a_cut
            if f == last:
                kern = reg.p_n @ acs[:, : length + b]
            acs[:, n1 + b :] = 0.0  # past state n: the overflow, not in P
            # a fit batch empties the queue: it lands on j' = arrivals (columns past n never used);
            # pfit's one nonzero per row picks the row of a_fit (no dense (n+1, b) @ (b, n+1) product)
            # (rows not written before; consecutive rows: the product straight into P's view)
            span = mx.fit_span
            if span is not None:
                np.multiply(mx.fit_p, a_fit[mx.fit_k], out=P[f * n1 + span[0] : f * n1 + span[1], :n1])
            else:
                P[f * n1 + mx.fit_rows, :n1] = mx.fit_p * a_fit[mx.fit_k]
            for g, pcut_g in mx.cut_to:
                cut_rows = pcut_g @ acs  # [j, e]: to state j + e − b
                # P[j, j'] += cut_rows[j, j' − j + b]: a band view of cut_rows (rows step one column
                # back), zero where j' − j + b is outside 0..n + b
                P[f * n1 : (f + 1) * n1, g * n1 : (g + 1) * n1] += band_view(cut_rows, b, (n1, n1), width - 1)
        return P, kern

    def _arrival_tables(self, reg: Regime, n1: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(P(A_k = m) of the fit laws, k = 1..b, m < n1; the same of the cut laws for the k in
        reg.live_k, m < length)."""
        lam, ks = self.lam, tuple(range(1, self.b + 1))
        if reg.fit is reg.cut:  # one law (a plain cap): one table serves both
            rows = reg.fit.arrivals_pmfs(ks, lam, length)
            return rows[:, :n1], rows[reg.live_index]
        return reg.fit.arrivals_pmfs(ks, lam, n1), reg.cut.arrivals_pmfs(reg.live_k, lam, length)

    @cached_property
    def _pi_flags(self) -> np.ndarray:
        """Stationary law of (regime, number waiting) just after a batch completion, (regimes, _size + 1).

        Solved on j = 0..N with the exact geometric tail π_{N+m} = π_N z0^{−m} of the last regime as
        the boundary (the dominant root z0 governs the tail; the fresh regime is reached only from
        j ≤ b and has no tail there), N a few decay lengths past 2b; then extended geometrically to
        where the tail is below 1e-13. Solving the full truncated chain instead (``_pi_dense``)
        agrees to ~1e-12 and costs (30/8)³ ≈ 50x more.
        """
        n_out = self._size
        n = int(math.ceil(2 * self.b + 40 + 8.0 / max(math.log(self._z0), 1e-12)))
        if n >= n_out and not self._far:
            return self._pi_dense_flags(n_out)
        # the subdominant roots have decayed within a few b whatever the load, so with the exact
        # geometric boundary a window of 4b + 200 states gives the same π as a longer one (5e-13 at
        # load 0.998; every solve of the examples at 0.5/0.9/0.99 of their limits within 6.2e-12 of
        # the 8-decay-length window; docs/methods.md "Heavy traffic"): the window is the shorter
        return self.pi_window(min(n, 4 * self.b + 200))

    def pi_window(self, n: int) -> np.ndarray:
        """π (regimes, _size + 1) solved on j = 0..n with the geometric tail of the last regime as the
        boundary (see :attr:`_pi_flags`), extended geometrically past n; the dense chain where n
        reaches _size."""
        n_out = self._size
        if n >= n_out and not self._far:
            return self._pi_dense_flags(n_out)
        n = min(n, n_out - 1)
        z0 = self._z0
        nr = len(self.regimes)
        b = self.b
        P, kern = self._transitions(n)
        n1 = n + 1
        # Censoring: the middle regimes (overflow heads after a fresh-headed cut) are entered only
        # from the fresh regime and left after one batch, to the fresh or the settled regime. On the
        # chain watched only in {fresh, settled} the transitions are P_SS + P_SM P_MS, exactly; the
        # middle states follow as π_M = π_S P_SM. The dense system shrinks from nr to 2 regimes
        # ((nr/2)³ less work: 15x with five regimes).
        censor = nr > 2
        if censor:
            mid, settled = slice(n1, (nr - 1) * n1), slice((nr - 1) * n1, nr * n1)
            censor = not P[mid, mid].any() and not P[settled, mid].any()
        if censor:
            # P_SM is zero on the settled rows (checked above): only the fresh rows gain the detour
            # P_FM P_MS, and each S state feeds at most the middle states its fresh part reaches
            p_fm = P[:n1, mid]
            Pc, kept = np.empty((2 * n1, 2 * n1)), 2
            Pc[:n1, :n1] = P[:n1, :n1]
            Pc[:n1, n1:] = P[:n1, settled]
            Pc[n1:, :n1] = P[settled, :n1]
            Pc[n1:, n1:] = P[settled, settled]
            Pc[:n1, :n1] += p_fm @ P[mid, :n1]
            Pc[:n1, n1:] += p_fm @ P[mid, settled]
            visits = np.ones(2 * n1)  # each S state's own mass plus the middle state it feeds
            visits[:n1] += p_fm.sum(axis=1)
        else:
            Pc, kept, visits = P, nr, 1.0
        A = balance_view(Pc)  # A[i, j] = P[j, i] − δ_ij for the balance equation of state i
        # states N+m (m >= 1, homogeneous, last regime) jump to i >= N + m − b with kernel[i − N − m + b]:
        # row N − b + 1 + t gains Σ_{m=1}^{t+1} z0^{−m} kernel[t + 1 − m], a convolution (t < b)
        zinv = 1.0 / z0
        top = kept * n1 - 1
        off = (kept - 1) * n1
        zpow = zinv ** np.arange(1, max(b, n_out - n) + 1)  # z0^{−m}, m ≥ 1
        A[off + n - b + 1 : off + n1, top] += np.convolve(zpow[:b], kern[:b])[:b]
        A[-1, :] = visits
        A[-1, top] += zinv / (1.0 - zinv)
        rhs = np.zeros(kept * n1)
        rhs[-1] = 1.0
        head = solve_balance(A, rhs)
        if np.minimum.reduce(head) < -1e-12:
            return self._pi_dense_flags(n_out)
        np.maximum(head, 0.0, out=head)  # round-off: ~-1e-17 where π is ~0
        pi = np.zeros((nr, n_out + 1))
        if censor:
            pi[0, :n1] = head[:n1]
            pi[1:-1, :n1] = (head[:n1] @ p_fm).reshape(nr - 2, n1)
            pi[-1, :n1] = head[n1:]
        else:
            pi[:, :n1] = head.reshape(nr, n1)
        pi[-1, n1:] = pi[-1, n] * zpow[: n_out - n]
        # the states past n_out (kept implicit): Σ_{m ≥ 1} π_{n_out} z0^{−m}
        far = float(pi[-1, n_out]) * zinv / (1.0 - zinv) if self._far else 0.0
        total = float(pi.sum()) + far
        pi /= total
        object.__setattr__(self, "_far_mass", far / total)
        return pi

    @property
    def pi(self) -> np.ndarray:
        """Stationary law of the number waiting just after a batch completion (length _size + 1)."""
        return self._pi_flags.sum(axis=0)

    def _pi_dense_flags(self, n: int) -> np.ndarray:
        nr = len(self.regimes)
        P, _ = self._transitions(n)
        P[:, -1] += np.clip(1.0 - P.sum(axis=1), 0.0, None)  # overflow lumped into the last state
        A = balance_matrix(P)
        A[-1, :] = 1.0
        rhs = np.zeros(nr * (n + 1))
        rhs[-1] = 1.0
        pi = np.clip(np.linalg.solve(A, rhs), 0.0, None).reshape(nr, n + 1)
        pi /= pi.sum()
        if pi[:, -20:].sum() > 1e-9:
            raise NumericalError(f"prefill chain truncation too small at load {self.rho_full:.4f}")
        return pi

    def _pi_dense(self, n: int) -> np.ndarray:
        """π of the chain truncated at n with the overflow lumped into state n (the plain method)."""
        return self._pi_dense_flags(n).sum(axis=0)

    # ---- semi-regenerative averages ------------------------------------------------------
    @cached_property
    def _pi_moments(self) -> np.ndarray:
        """Σ_regimes π @ moments (see :class:`MixTables`): [Σ_j π_j P(next batch takes k | j), k = 1..b |
        the cycle sums named by MixTables.MOMENTS], one product per regime."""
        pis, mix = self._pi_flags, self.mix_pi
        out = pis[0] @ mix[0].moments if len(mix) == 1 else sum(pi @ mx.moments for pi, mx in zip(pis, mix))
        if self.far_mass > 0.0:
            # the implicit states N + m, m ≥ 1 (settled regime, rows affine in j past b):
            # Σ π_N z^{−m} (row_N + m Δ) = π_N (S0 row_N + S1 Δ), S0 = Σ z^{−m}, S1 = Σ m z^{−m}
            rows, n_out, zinv = mix[-1].moments, pis.shape[1] - 1, 1.0 / self._z0
            s0, s1 = zinv / (1.0 - zinv), zinv / (1.0 - zinv) ** 2
            out = out + float(pis[-1, n_out]) * (s0 * rows[n_out] + s1 * (rows[n_out] - rows[n_out - 1]))
        return out

    @cached_property
    def _cycle(self) -> dict[str, float]:
        lam = self.lam
        t = dict(zip(MixTables.MOMENTS, self._pi_moments[self.b :].tolist()))
        idle = t["idle"] / lam
        # idle part: Σ_{i=j}^{a−1} i/λ, the area of the queue while waiting for the a-th request
        area = t["idle_area"] / (2.0 * lam) + t["r_es"] + lam * t["es2"] / 2.0
        cycle = idle + t["es"]
        return {
            "cycle_s": cycle,
            "lq": area / cycle,
            "busy": t["es"] / cycle,
            "p_idle_time": idle / cycle,
            "batch_mean": t["ek"],
            "batch_second": t["ek2"],
            "in_service": t["kes"] / cycle,
            "throughput": t["ek"] / cycle,
            "own_mean_s": t["kes"] / t["ek"],
            # per batch (π sums to 1 over the completions): E[S] and E[S²] of a batch's time
            "batch_time_mean_s": t["es"],
            "batch_time_second_s2": t["es2"],
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
        b = self.b
        f = self._pi_moments[:b] * np.arange(1, b + 1)
        return f / f.sum()

    @property
    def mean_own_batch_s(self) -> float:
        return self._cycle["own_mean_s"]

    @property
    def mean_in_system(self) -> float:
        return self.lq + self._cycle["in_service"]


    # ---- what the waiting-time laws read ------------------------------------------------------
    @property
    def pi_flags(self) -> np.ndarray:
        """π by (regime, number waiting) just after a batch completion, (regimes, _size + 1)."""
        return self._pi_flags

    @property
    def far_mass(self) -> float:
        """π's mass in the implicit states past the explicit _STATES_MAX (0 when all are explicit)."""
        return self.__dict__.get("_far_mass", 0.0)

    @property
    def decay_root(self) -> float:
        """z0 > 1: π_j decays like z0^{−j} (:func:`~qmodel.stations.prefill.kernels.decay_root`)."""
        return self._z0 if self._size else 1.0

    @property
    def cycle(self) -> dict[str, float]:
        """The semi-regenerative cycle sums: cycle_s, lq, busy, p_idle_time, batch_mean,
        batch_second, in_service, throughput, own_mean_s, batch_time_mean_s, batch_time_second_s2."""
        return self._cycle

    def wait_cdf(self, t: float | np.ndarray) -> float | np.ndarray:
        """P(W ≤ t), exact for deterministic S_k (a = 1; :func:`~qmodel.stations.prefill.wait_exact.deterministic_wait_cdf`)."""
        return deterministic_wait_cdf(self, t)

    def grids(self, dx: float | None = None, wait_scale: float = 1.0, wait_prob: float | None = None,
              own_stages: int = 1) -> tuple[GridDist, GridDist, GridDist]:
        """(W, W + own_stages · S_own jointly, S_own) on a common grid (a = 1): the drain of the q
        ahead in batches, then the own batch (method and arguments:
        :func:`~qmodel.stations.prefill.wait_grids.solve_grids`)."""
        return solve_grids(self, dx, wait_scale, wait_prob, own_stages)
