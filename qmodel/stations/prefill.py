"""The prefill pool: per-instance bulk-service queues M/G^[a,b]/1 with batch-size-dependent service.

Model (docs/methods.md, "Stations": prefill). Each of the ``instances`` engines keeps its own FCFS queue.
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

**Token budget (token-aware batch law).** A real batcher takes the longest FCFS prefix of the
queue whose (uncached) token sum fits the budget B (the head always runs, alone if larger), at most
``max_batch_size`` (default 256). With j waiting the batch is therefore k = j with probability
P(N ≥ j) (*fit*: S_k given the first k fit) or k = N < j with probability P(N = k) (*cut*: S_k given
N = k), leaving j − k, where N is the prefix count that fits a long queue. The request that did
not fit heads the next batch and is size-biased, strongly so after a cut at small k (it had to
overflow an almost empty batch). So the chain carries a head *regime*: fresh (after a fit batch),
one regime per bin of the cut size k after a fresh-headed cut, and the settled overflow head of
a long queue (next-fit packing in steady state); each regime has its own P(N = k) and fit/cut
laws (Monte Carlo over 4096 stratified queue sequences, :meth:`BatchServiceLaw.from_prompts_budget`).
Stability is E[N]/E[S_N] of the settled regime (within 0.3% of a saturated token-budget DES).
Measured against the token-budget DES, E[W]: lognormal prompts (median 1000, σ 0.8, B = 8192)
−1.5% / −1.9% / +4.4% at 50/80/90% load; splitwise A100 table over the azure-code mix (mean 1619
uncached tokens) +0.7% / +3.3% / +5.6%, where the former cap b = ⌊B/E[P]⌋ was −8% / −24% / −37%. A plain cap (no budget, a fixed
``law_override``, or equal prompts) is the single-regime special case N ≡ b and stays exact.

**Dispatch.** random: each engine sees Poisson(λ/c), exact. round_robin: Erlang-c arrivals
(c_a² = c_a²(total)/c): the queueing part is scaled by the heavy-traffic factor
(c_a² + c_e²)/(1 + c_e²), c_e² = Var(N − θS_N)/E[N] with θ = E[N]/E[S_N] the per-request
variability of the batch server's output (b·c_b² under a cap), times the Krämer–Langenbach-Belz
g when c_a² < 1: approximate (see :func:`instance_wait_scale` for the measured errors). Who waits
moves too: regular arrivals find the engine busy less often than its busy fraction (bursty ones
more often), so P(W > 0) is QNA's GI/G/1 value (:func:`~qmodel.stations.fcfs.qna_delay_probability`
with the batch time's SCV), and those who wait keep the chain's conditional wait times the factor.
Against the token-budget DES (4 engines, 50% load), wait + own batch: P(W > 0) 0.341 vs 0.335
(0.561 without), p50 / p90 / p99 +6 / −4 / −11% (+25 / +16 / −5% without); the wait alone runs
low (mean −48%). Against the replay (validation suite, disaggregated, 24 cases) the TTFT median
|error| went from 15.3 / 8.7 / 8.5% (p50 / p90 / p99) to 5.7 / 3.5 / 8.7%, and the four
disaggregated goodputs from −0.7 / +1.6 / −5.6 / +13.8% to −0.6 / +1.1 / −0.4 / −0.2%. Keeping the
scaled mean instead (stretching the conditional wait by busy/P(W > 0)) gave 9.1 / 9.4 / 14.1% and
goodput errors up to +18.5%, so it was not adopted.
least_loaded is read as *least work left*: with b = 1 it is exactly the central FCFS queue, so
M/D/c (exact) or M/G/c (Cosmetatos/Whitt); with b > 1 no validated central bulk formula exists
(docs/methods.md, "Stations": prefill) and it is treated like round_robin (approximate; the per-engine chain ignores the
pooling, so it is conservative). Non-Poisson arrivals (c_a² ≠ 1) use the same scaling, approximate.

**Stability.** λ < c · E[N] / E[S_N] (c · b / E[S_b] under a cap): batching raises capacity above
c / E[S_1], and a batched configuration is never rejected by its unbatched load.

References: Neuts (1967); Chaudhry & Templeton (1983); Krämer & Langenbach-Belz (1976);
DistServe (Zhong et al., OSDI 2024) for the M/D/1 special case D + λD²/(2(1−λD)).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Literal, Sequence

import numpy as np

from qmodel.dist import MAX_POINTS, GridDist, fast_len, zero_atom
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import StationSolution
from qmodel.stations.fcfs import MDc, MGc, ServiceSample, klb_factor, qna_delay_probability

__all__ = ["BatchServiceLaw", "BulkQueue", "PrefillStation", "batch_cap", "instance_wait_scale", "DEFAULT_MAX_BATCH_SIZE"]

Dispatch = Literal["random", "round_robin", "least_loaded"]

_NODES = 44  # strata kept per batch size for the Poisson mixtures (see BatchServiceLaw._nodes)
_DRAWS = 4096  # k-tuples drawn per batch size (each column is an exact permutation of the mix)
_TAIL = 1e-13  # truncation target for the chain
#: the longest window the chain is solved on (states j = 0..n; past it the tail is geometric)
#: explicit chain states at most: past them π is the exact geometric tail of the settled regime,
#: summed in closed form (see BulkQueue._size); the wait grids' count axis stops at _COUNT_MAX
#: and carries the rest of the wait law as its exact exponential tail (see BulkQueue.grids)
_STATES_MAX = 16384
_COUNT_MAX = 4096
#: the default wait grid's step is set by at most this many mean batch times of horizon (see grids)
_DX_HORIZON_BATCHES = 1024.0
_HEAD_ROUNDS = 8  # next-fit rounds of the size-biased head law of a long queue
_SETTLED_ROUNDS = 5  # the last rounds, pooled for the settled head regime
#: above this mean batch (settled E[N]) the head regimes collapse to one (see from_prompts_budget)
_REGIME_MAX_N = 48.0
_DENSE_MAX = 600  # balance systems up to this size are solved dense
#: quantiles of the fresh cut size N that split the overflow-head regimes (see from_prompts_budget)
_HEAD_BIN_QUANTILES = (1.0 / 3.0, 2.0 / 3.0)
#: log-pmf below which a Poisson table's remaining columns are dropped (see _poisson_matrix)
_NEGLIGIBLE_LOG_PMF = -60.0
_STEPS_PER_SHORTEST = 16.0  # default time grid: at least this many steps in the shortest mean batch time
#: the wait grids drop the chain states (and counts ahead) whose total mass is below these: three
#: orders under the 1e-9 the time grid resolves (_WAIT_TAIL); the chain itself is solved to 1e-13
_STATE_MASS = 1e-12
_COUNT_MASS = 1e-12
#: the prefill wait's time grid reaches where at most this much mass is left (folded into its last bin)
_WAIT_TAIL = 1e-9
_GRID_POINTS = 8192.0  # default time grid: the waiting-time horizon in at most this many bins
#: batch-time transforms kept on a law between solves (beyond it they are recomputed per solve)
_GRID_CACHE_BYTES = 64 << 20
#: batch-time grid laws with at most this many nonzero bins are correlated (with the ages) and
#: convolved (the drain, the own batch) by shifted adds, not FFTs
_SPARSE_LAW_BINS = 8
#: count-axis convolutions of at most this many products (m_own x b) are summed directly, not by FFT
_DIRECT_COUNT_TERMS = 64
#: the leftover-count convolution of the age table over at most this many counts is one product
#: with its (counts x counts) Toeplitz matrix, not FFTs (measured 1.2-6x faster up to 128 counts)
_TOEPLITZ_COUNTS = 128

#: 5-smooth transform lengths (a pure function of the length), memoised: a solve asks for several
_fast_len = functools.lru_cache(maxsize=4096)(fast_len)


@functools.lru_cache(maxsize=64)
def _log_factorials(n: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """(m, ln m!) for m = 0..n−1, read-only, and ln m! as a list (the bisection of _poisson_matrix
    reads single entries: a list item is a Python float, no NumPy scalar): every Poisson table of
    a solve asks for a few n. ln m! = lgamma(m + 1) from :func:`math.lgamma` (correctly rounded to
    an ulp or so, like scipy's gammaln, without importing scipy.special: 0.1-0.2 s of a cold CLI
    solve; a cumulative sum of logs would drift by ~n ulps)."""
    lg_list = [math.lgamma(k + 1.0) for k in range(n)]
    m = np.arange(n, dtype=float)
    lg = np.array(lg_list, dtype=float)
    m.flags.writeable = lg.flags.writeable = False
    return m, lg, lg_list


def _poisson_matrix(mu: np.ndarray, n: int) -> np.ndarray:
    """pmf[i, m] = P(Poisson(mu_i) = m), m < n (log-space: no overflow for large means)."""
    mu = np.asarray(mu, dtype=float).reshape(-1, 1)
    m, lg, lg_list = _log_factorials(int(n))
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

def _prompt_sample(prompt_tokens: np.ndarray, cached_tokens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(uncached prompt, cached prefix) as float arrays, checked once for every law builder."""
    p = np.asarray(prompt_tokens, dtype=float).ravel()
    c = np.zeros_like(p) if cached_tokens is None else np.asarray(cached_tokens, dtype=float).ravel()
    if p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.max() <= 0:
        raise InputError("prompt_tokens", "sample", "prompt lengths must be finite, >= 0, not all zero")
    if c.shape != p.shape or np.any(c < 0):
        raise InputError("cached_tokens", "sample", "one non-negative cached length per prompt")
    return p, c


def _base_indices(p: np.ndarray) -> np.ndarray:
    """The base sample of the Monte Carlo laws: ``_DRAWS`` equally spaced order statistics of a large
    sample (pairs kept), or the whole small sample tiled up to at least ``_DRAWS``."""
    if p.size >= _DRAWS:
        order = np.argsort(p, kind="stable")
        return order[((np.arange(_DRAWS) + 0.5) * p.size / _DRAWS).astype(np.int64)]
    return np.tile(np.arange(p.size), int(math.ceil(_DRAWS / p.size)))

@functools.lru_cache(maxsize=256)
def _strata(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first index, count, weight) of each stratum of :meth:`BatchServiceLaw._nodes` for a sorted
    sample of ``size``: they depend on the size alone, and the laws ask for the same few sizes."""
    u = list(np.linspace(0.0, 0.9, 28)[:-1])
    tail = 0.1
    while tail * size >= 1.0 and len(u) < _NODES:
        u.append(1.0 - tail)
        tail /= 2.0
    cuts = np.unique(np.round(np.array(u + [1.0]) * size).astype(np.int64))
    counts = np.diff(cuts).astype(float)
    out = cuts[:-1], counts, counts / counts.sum()
    for a in out:  # shared between laws: read-only
        a.flags.writeable = False
    return out


@dataclass(frozen=True)
class _Regime:
    """How the next batch forms: P(N = k), P(N ≥ k), fit and cut batch-time laws."""

    p_n: np.ndarray
    s_n: np.ndarray
    fit: "BatchServiceLaw"
    cut: "BatchServiceLaw"
    #: regime of the next batch after a cut at k (index k − 1); None: the last regime
    after_cut: np.ndarray | None = None
    #: BulkQueue._mix tables by (states, a), shared by the solves at every rate
    mix_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def next_after_cut(self, k: int, last: int) -> int:
        return last if self.after_cut is None else int(self.after_cut[k - 1])

    @cached_property
    def live_k(self) -> tuple[int, ...]:
        """The batch sizes k with P(N = k) > 0 (the cut laws that carry weight)."""
        return tuple(k for k in range(1, len(self.p_n) + 1) if self.p_n[k - 1] > 0)

    @cached_property
    def live_rows(self) -> np.ndarray:
        """live_k − 1: the rows of the per-k tables."""
        return np.array(self.live_k, dtype=np.int64) - 1

    @cached_property
    def live_index(self) -> slice | np.ndarray:
        """live_rows as a slice where they are consecutive (a plain cap: the last row only): the
        per-solve reads and writes of those rows are then views, not fancy-index copies."""
        k = self.live_k
        return slice(k[0] - 1, k[-1]) if k == tuple(range(k[0], k[-1] + 1)) else self.live_rows


@dataclass(frozen=True)
class _MixTables:
    """One regime's batch-formation tables on the states j = 0..n (:meth:`BulkQueue._mix`). They do
    not depend on λ: built once per state count and kept on the regime (read-only), so a solve
    only multiplies them by its π and its arrival tables."""

    #: P(next batch takes k, whole queue | j) and P(next batch takes k < j, cut by the budget | j),
    #: each (n+1, b); the cut leaves j − k waiting
    pfit: np.ndarray
    pcut: np.ndarray
    #: the nonzero entries of pfit (at most one per row: the whole queue forms one batch size):
    #: rows j, columns k − 1, probabilities as a column
    fit_rows: np.ndarray
    fit_k: np.ndarray
    fit_p: np.ndarray
    #: (g, pcut kept on the batch sizes whose overflow head starts regime g), per regime g a cut reaches
    cut_to: tuple[tuple[int, np.ndarray], ...]
    #: the positive entries of pcut in row-major order: row j, k − 1, leftover j − k, P_cut; cut_upto[j]
    #: counts those in rows < j, cut_rmax the running maximum of the leftover
    cut_j: np.ndarray
    cut_k: np.ndarray
    cut_r: np.ndarray
    cut_p: np.ndarray
    cut_upto: np.ndarray
    cut_rmax: np.ndarray
    #: per-state columns whose π-averages are the cycle sums of BulkQueue._cycle (see MOMENTS)
    moments: np.ndarray

    #: the columns of ``moments`` after the b columns pfit + pcut (P(next batch takes k | j)): E[S | j], E[S² | j],
    #: E[(j − k) S | j] over cut batches, E[k | j], E[k² | j], E[k S | j], (a − j)⁺ (λ × the idle
    #: time) and a(a − 1) − j(j − 1) for j < a (2λ × the queue's area while idle)
    MOMENTS = ("es", "es2", "r_es", "ek", "ek2", "kes", "idle", "idle_area")

    @cached_property
    def fit_span(self) -> tuple[int, int] | None:
        """(first, last + 1) of fit_rows where they are consecutive (always under a plain cap: the
        states j <= b), else None: the per-solve write of those rows of P is then into a view."""
        r = self.fit_rows
        if r.size and int(r[-1]) - int(r[0]) + 1 == r.size:
            return int(r[0]), int(r[-1]) + 1
        return None

    @staticmethod
    def build(pfit: np.ndarray, pcut: np.ndarray, reg: _Regime, a: int, last: int) -> "_MixTables":
        n1, b = pfit.shape
        j = np.arange(n1, dtype=float)
        kk = np.arange(1, b + 1, dtype=float)
        fit, cut = reg.fit, reg.cut
        fit_rows, fit_k = np.nonzero(pfit)
        nxt = np.array([reg.next_after_cut(k, last) for k in range(1, b + 1)])
        cut_to = []
        for g in np.unique(nxt):  # the overflow heads the queue: its regime
            pg = pcut * (nxt == g)[None, :]
            if pg.any():
                cut_to.append((int(g), pg))
        live = pcut > 0
        cut_j, ck = np.nonzero(live)
        cut_r = cut_j - ck - 1
        upto = np.concatenate(([0], np.cumsum(np.count_nonzero(live, axis=1))))
        cut_es = pcut @ cut.mean_s
        cols = [
            pfit @ fit.mean_s + cut_es,
            pfit @ fit.second_s2 + pcut @ cut.second_s2,
            j * cut_es - pcut @ (kk * cut.mean_s),
            pfit @ kk + pcut @ kk,
            pfit @ (kk * kk) + pcut @ (kk * kk),
            pfit @ (kk * fit.mean_s) + pcut @ (kk * cut.mean_s),
            np.where(j < a, a - j, 0.0),
            np.where(j < a, a * (a - 1) - j * (j - 1), 0.0),
        ]
        out = _MixTables(pfit, pcut, fit_rows, fit_k, pfit[fit_rows, fit_k][:, None], tuple(cut_to),
                         cut_j, ck, cut_r, pcut[live], upto,
                         np.maximum.accumulate(cut_r) if cut_r.size else cut_r,
                         np.column_stack([pfit + pcut] + cols))
        for arr in (out.pfit, out.pcut, out.fit_p, out.cut_p, out.moments, *(pg for _, pg in out.cut_to)):
            arr.flags.writeable = False
        return out


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
    #: token budget: P(N = k), k = 1..b, N the FCFS-prefix count that fits the budget when the queue
    #: is long (None: a plain request cap, N ≡ b)
    n_pmf: np.ndarray | None = None
    #: token budget: S_k given the batch was *cut* at k by the budget (N = k; None: same as self),
    #: for a long queue whose head is the size-biased request that did not fit the last batch
    cut: "BatchServiceLaw | None" = None
    #: token budget: the batch-formation regimes by the head of the queue, [fresh (after a batch
    #: that took the whole queue), head = the overflow of a fresh-headed batch, ..., settled]
    head_regimes: "tuple[_Regime, ...] | None" = None
    #: rate-independent grid tables of :meth:`BulkQueue.grids` for the last grid step used (the
    #: per-k pmfs and their transforms do not depend on λ; rebuilding them was ~40% of a solve)
    _grid_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    #: node tables of :meth:`arrivals_pmfs` by the tuple of batch sizes asked for
    _node_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def b(self) -> int:
        return len(self.values_s)

    @property
    def token_aware(self) -> bool:
        return self.n_pmf is not None

    # The law is immutable and the chain reads these at every rate (several times per solve):
    # computed once per law.
    @cached_property
    def p_n(self) -> np.ndarray:
        """P(N = k), k = 1..b."""
        if self.n_pmf is None:
            out = np.zeros(self.b)
            out[-1] = 1.0
            return out
        return self.n_pmf

    @cached_property
    def s_n(self) -> np.ndarray:
        """P(N ≥ k), k = 1..b."""
        return np.cumsum(self.p_n[::-1])[::-1]

    @property
    def cut_law(self) -> "BatchServiceLaw":
        return self if self.cut is None else self.cut

    def regimes(self) -> list["_Regime"]:
        """Batch-formation regimes of the chain: under a token budget, by the head of the queue
        (a batch after a cut starts with the size-biased request that did not fit): fresh, then
        successive overflow heads up to the settled one; a single regime under a plain cap."""
        return list(self._regimes)

    @cached_property
    def _regimes(self) -> tuple["_Regime", ...]:
        if self.head_regimes is not None:
            return tuple(self.head_regimes)
        return (_Regime(self.p_n, self.s_n, self, self.cut_law),)

    @cached_property
    def grid_extent(self) -> tuple[float, float]:
        """(largest batch time of any regime's fit or live cut law, smallest mean fit batch time):
        what sizes the wait grids' horizon and step (rate-independent)."""
        def vmax(lw: BatchServiceLaw, k: int) -> float:
            return float((lw.full_values_s or lw.values_s)[k - 1].max())

        regs = self._regimes
        max_s = max(vmax(reg.fit, k) for reg in regs for k in range(1, self.b + 1))
        max_s = max(max_s, max(vmax(reg.cut, k) for reg in regs for k in reg.live_k))
        return max_s, float(min(reg.fit.mean_s.min() for reg in regs))

    @cached_property
    def drain_nodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """The cut law's nodes over the live batch sizes of a long queue, as the chain's decay root
        reads them (rate-independent): (S values, weights P(N = k)·w, k, ln weight, E[N] over the
        nodes)."""
        pn, cut = self.p_n, self.cut_law
        ks = [k for k in range(1, self.b + 1) if pn[k - 1] > 0]
        v = np.concatenate([cut.values_s[k - 1] for k in ks])
        w = np.concatenate([pn[k - 1] * cut.weights[k - 1] for k in ks])
        kv = np.concatenate([np.full(cut.values_s[k - 1].size, float(k)) for k in ks])
        for arr in (v, w, kv):
            arr.flags.writeable = False
        return v, w, kv, np.log(w), float(w @ kv)

    @cached_property
    def cut_flow(self) -> tuple[tuple[int, ...], ...]:
        """Per regime, the regime the next batch forms in after a cut at each of its live k."""
        regs = self._regimes
        return tuple(tuple(reg.next_after_cut(k, len(regs) - 1) for k in reg.live_k) for reg in regs)

    @cached_property
    def min_cut(self) -> int:
        """The smallest batch a long queue forms in any regime (min over the live k)."""
        return min(min(reg.live_k) for reg in self._regimes)

    @cached_property
    def own_weights(self) -> np.ndarray:
        """(regimes, 2, b): P_f(N ≥ k) and P_f(N = k), the weights of a fit and of a cut own batch of k."""
        out = np.array([[reg.s_n, reg.p_n] for reg in self._regimes], dtype=float)
        out.flags.writeable = False
        return out

    @cached_property
    def mean_drain(self) -> tuple[float, float]:
        """(E[N], E[S_N]) of a batch formed from a long queue: capacity is E[N]/E[S_N]."""
        pn = self.p_n
        return float(pn @ np.arange(1, self.b + 1)), float(pn @ self.cut_law.mean_s)

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
        starts, counts, w = _strata(s.size)
        # strictly increasing cuts ending at s.size: one reduceat gives every stratum's sum
        return np.add.reduceat(s, starts) / counts, w

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
        p, c = _prompt_sample(prompt_tokens, cached_tokens)
        if np.ptp(p) == 0 and np.ptp(c) == 0:
            # one prompt shape (fixed lengths): S_k is deterministic, no sample to permute
            k = np.arange(1, b + 1, dtype=float)
            p0, c0 = float(p[0]), float(c[0])
            times = np.asarray(service.prefill_time_s(k * p0, k * (p0 * p0 + 2 * p0 * c0), k), dtype=float)
            return BatchServiceLaw.deterministic_times(times)
        samples = [np.asarray(service.prefill_time_s(p, p * p + 2 * p * c, np.ones_like(p)), dtype=float)]
        if b > 1:
            idx = _base_indices(p)
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

    @staticmethod
    def from_prompts_budget(service: ServiceTimeModel, prompt_tokens: np.ndarray, budget_tokens: float,
                            cap: int, cached_tokens: np.ndarray | None = None,
                            seed: int = 20240601) -> "BatchServiceLaw":
        """Token-aware law: a batch is the longest FCFS prefix whose token sum fits ``budget_tokens``
        (the head always runs, alone if it is larger), at most ``cap`` requests.

        Monte Carlo over ``_DRAWS`` queue sequences (position i of every sequence is an independent
        permutation of one stratified base sample, so each position has the exact base marginal).
        *fit* laws: S_k given the first k fit (the batch took a whole queue of k), from fresh
        sequences; k = 1 is every prompt alone. *cut* laws and N (the prefix count that fits a
        long queue): the request that did not fit heads the next batch, so under a long queue
        the head is size-biased; the sequences are re-headed by the previous round's overflow
        requests until that head law settles (next-fit packing of the stream in steady state).
        """
        p, c = _prompt_sample(prompt_tokens, cached_tokens)
        idx = _base_indices(p)
        rng = np.random.default_rng(seed)
        m = idx.size
        q = p * p + 2 * p * c

        def one_round(head: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], list[int], np.ndarray]:
            """Prefixes of sequences starting at ``head``: fit samples per k, cut samples per k,
            counts of N = k, and each sequence's overflow request (the next batch's head)."""
            # Only the sequences still growing (first k fit) are carried, compacted in index
            # order: the batch-time model is evaluated on them alone (most stop within a few k).
            live = np.arange(m)
            sum_n, sum_sq = p[head], q[head]
            t_prev = np.asarray(service.prefill_time_s(sum_n, sum_sq, np.ones(m)), dtype=float)
            fit, cut, counts = [t_prev], [], []
            nxt = head.copy()
            n_of = np.zeros(m, dtype=np.int64)
            k = 1
            while True:
                pick = idx[rng.permutation(m)][live]  # a whole permutation per k: the same random stream
                if k == cap:  # capped: N = cap, the next request heads the next batch
                    cut.append(t_prev)
                    counts.append(int(live.size))
                    nxt[live] = pick
                    n_of[live] = k
                    break
                n2, q2 = sum_n + p[pick], sum_sq + q[pick]
                stays = n2 <= budget_tokens
                stop = ~stays
                cut.append(t_prev[stop])
                counts.append(int(stop.sum()))
                nxt[live[stop]] = pick[stop]
                n_of[live[stop]] = k
                if not stays.any():
                    break
                k += 1
                live, sum_n, sum_sq = live[stays], n2[stays], q2[stays]
                t_prev = np.asarray(service.prefill_time_s(sum_n, sum_sq, np.full(live.size, float(k))), dtype=float)
                fit.append(t_prev)
            return fit, cut, counts, nxt, n_of

        rounds = [one_round(idx[rng.permutation(m)])]
        rounds[0][0][0] = np.asarray(service.prefill_time_s(p, q, np.ones_like(p)), dtype=float)
        # The request that did not fit heads the next batch; how size-biased it is depends strongly
        # on where the cut fell (after 1 request it must nearly fill the budget alone, after many
        # it need not). Heads after a fresh-headed cut are split by the cut size k into bins; their
        # batches then lead to the settled overflow head, reached by repeated rounds (each round is
        # one more batch of a long queue).
        over0, n0 = rounds[0][3], rounds[0][4]
        n_max0 = int(n0.max())
        edges = sorted({int(x) for x in np.quantile(n0, _HEAD_BIN_QUANTILES)} | {n_max0})
        bins, lo = [], 1
        for e in edges:
            if e >= lo:
                bins.append((lo, e))
                lo = e + 1
        binned = []
        for lo, hi in bins:
            sel = over0[(n0 >= lo) & (n0 <= hi)]
            binned.append(one_round(sel[rng.integers(0, sel.size, m)]) if sel.size else None)
        for _ in range(_HEAD_ROUNDS):
            rounds.append(one_round(rounds[-1][3]))
        # the settled regime pools the rounds after the head law has settled: its E[N]/E[S_N] is
        # the capacity, and one round of 4096 sequences leaves ~1% Monte Carlo noise on it
        late = rounds[-_SETTLED_ROUNDS:]
        depth = max(len(r[0]) for r in late), max(len(r[1]) for r in late)

        def pool(i: int, n: int) -> list[np.ndarray]:
            return [np.concatenate([r[i][k] for r in late if k < len(r[i])]) for k in range(n)]

        counts_late = [sum(r[2][k] for r in late if k < len(r[2])) for k in range(depth[1])]
        settled_round = (pool(0, depth[0]), pool(1, depth[1]), counts_late, None, None)
        keep = [rounds[0]] + [r for r in binned if r is not None] + [settled_round]
        sizes = [m] * (len(keep) - 1) + [m * len(late)]
        b = max(max(len(r[0]), len(r[1])) for r in keep)

        def law(samples: list[np.ndarray], filler: list[np.ndarray]) -> BatchServiceLaw:
            # a k that never occurs carries no weight; its law only needs to be well formed
            out = [s if s.size else filler[min(i, len(filler) - 1)] for i, s in
                   enumerate(samples + [np.zeros(0)] * (b - len(samples)))]
            return BatchServiceLaw.from_samples(out)

        last = len(keep) - 1
        after0 = np.full(b, last)
        reg_of_bin = [i for i, r in enumerate(binned) if r is not None]
        for pos, i in enumerate(reg_of_bin):
            lo, hi = bins[i]
            after0[lo - 1 : hi] = 1 + pos
        regs = []
        for f, ((fit, cut, counts, _, _), size) in enumerate(zip(keep, sizes)):
            pn = np.array(counts + [0] * (b - len(counts)), dtype=float) / size
            after = after0 if f == 0 else np.full(b, last)
            regs.append(_Regime(pn, np.cumsum(pn[::-1])[::-1], law(fit, keep[0][0]), law(cut, fit), after))
        settled = regs[-1]
        if float(settled.p_n @ np.arange(1, b + 1)) > _REGIME_MAX_N:
            # Many requests per batch: one head among them hardly matters and the regimes cost
            # (states x regimes, transforms x regimes); keep one regime with the settled N law.
            # Measured (linear model, B 8192, lognormal σ 0.8): median 100 (E[N] ~ 80) one regime
            # +1.1/+2.8/+5.9% on E[W] at 50/80/90% vs five +1.1/+2.8/+5.3%, 2-4x faster; median
            # 300 (E[N] ~ 30) one regime +2.3/+11/+20% vs five +1.1/+3.3/+7.5%: keep them there.
            regs = [_Regime(settled.p_n, settled.s_n, regs[0].fit, settled.cut)]
        return dataclasses.replace(regs[0].fit, n_pmf=settled.p_n, cut=settled.cut, head_regimes=tuple(regs))

    def arrivals_pmf(self, k: int, lam: float, n: int) -> np.ndarray:
        """P(A_k = m), m < n, arrivals at rate λ during S_k."""
        return self.weights[k - 1] @ _poisson_matrix(lam * self.values_s[k - 1], n)

    def arrivals_pmfs(self, ks: Sequence[int], lam: float, n: int) -> np.ndarray:
        """Rows P(A_k = m), m < n, for each k in ``ks`` (as :meth:`arrivals_pmf`, row for row
        the same numbers): one Poisson table over all their nodes instead of one per k."""
        if not ks:
            return np.zeros((0, n))
        nodes, mix = self._node_mix(tuple(ks))
        table = _poisson_matrix(lam * nodes, n)
        return table if mix is None else mix @ table

    def _node_mix(self, ks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
        """(all nodes of the S_k in ``ks``, block matrix of their weights (len(ks), nodes), None for
        the identity): the rows P(A_k = ·) are then one product with one Poisson table.
        Rate-independent: kept."""
        hit = self._node_cache.get(ks)
        if hit is None:
            vals = [self.values_s[k - 1] for k in ks]
            ends = np.cumsum([v.size for v in vals])
            mix = np.zeros((len(ks), int(ends[-1])))
            for row, (k, v, e) in enumerate(zip(ks, vals, ends)):
                mix[row, e - v.size : e] = self.weights[k - 1]
            # one node of weight 1 per k (deterministic times): the table's rows are the pmfs
            identity = mix.shape[0] == mix.shape[1] and bool(np.all(mix == np.eye(mix.shape[0])))
            hit = self._node_cache[ks] = (np.concatenate(vals), None if identity else mix)
        return hit

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
class _GridTables:
    """The batch-time laws of :meth:`BulkQueue.grids` on one time grid (rate-independent given dx)."""

    #: laws[f, 0] regime f's fit pmfs, laws[f, 1] its cut pmfs, k = 1..b, zero-padded to n_s bins
    laws: np.ndarray
    #: support length of each cut pmf (index of the last nonzero bin + 1), per regime
    lens: list[np.ndarray]
    #: bin mid-points (v + 1/2) dx, v < n_s: the ages at which arrivals are counted
    ages: np.ndarray
    #: transforms of these tables by (table id, length), kept with them (see BulkQueue.grids)
    fft: dict
    #: the chain's regimes, in the order of the tables
    regimes: list[_Regime]
    #: per regime its (b, n_s) fit and cut tables, and every row as (regimes · 2 · b, n_s): the laws
    #: an own batch runs, in the column order of the grids' h
    ff: list[np.ndarray] = field(init=False)
    fc: list[np.ndarray] = field(init=False)
    own_rows: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ff", [x for x in self.laws[:, 0]])
        object.__setattr__(self, "fc", [x for x in self.laws[:, 1]])
        object.__setattr__(self, "own_rows", self.laws.reshape(-1, self.laws.shape[-1]))

    @property
    def n_s(self) -> int:
        return self.laws.shape[-1]

    @cached_property
    def cut_support(self) -> int:
        """The longest support among the cut laws that carry weight (what one drain step adds)."""
        return max(int(lens[reg.live_rows].max()) for lens, reg in zip(self.lens, self.regimes))

    @cached_property
    def cut_bins(self) -> tuple[int, list[list[tuple[list[int], list[float]]]]]:
        """(most nonzero bins of a cut law that carries weight; per regime, per live k, the nonzero
        bins of its cut law and P(N = k) times their mass): the drain's shifts when the laws are a
        few bins (:meth:`BulkQueue._drain_shifts`)."""
        most, out = 0, []
        for fc, reg in zip(self.fc, self.regimes):
            rows = []
            for k in reg.live_k:
                nz = fc[k - 1].nonzero()[0]
                most = max(most, nz.size)
                rows.append((nz.tolist(), (reg.p_n[k - 1] * fc[k - 1][nz]).tolist()))
            out.append(rows)
        return most, out

    @cached_property
    def own_bins(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(most nonzero bins in one row of own_rows; the row, bin and mass of each nonzero entry, row
        by row): the own batch's convolution by shifts when every law is a few bins."""
        rows, bins = self.own_rows.nonzero()
        most = int(np.bincount(rows).max()) if rows.size else 0
        return most, rows, bins, self.own_rows[rows, bins][:, None]

    def kept(self, key: tuple, build: Callable[[], np.ndarray]) -> np.ndarray:
        """A rate-independent table of these laws (transforms at one length, ...), kept across
        solves within a memory budget (transform lengths follow the rate)."""
        hit = self.fft.get(key)
        if hit is None:
            hit = build()
            if sum(v.nbytes for v in self.fft.values()) + hit.nbytes > _GRID_CACHE_BYTES:
                self.fft.clear()
            self.fft[key] = hit
        return hit

    def law_fft(self, lst: np.ndarray, n: int) -> np.ndarray:
        """rfft of every row of ``lst`` (one of these tables) at length n, batched; kept across solves."""
        return self.kept((id(lst), n), lambda: np.fft.rfft(lst, n, axis=1))


@dataclass(frozen=True)
class BulkQueue:
    """M/G^[a,b]/1 with batch-size-dependent service, solved at one arrival rate.

    With a token-aware law (``law.n_pmf`` set, a = 1) the batch formed from j waiting requests is
    the FCFS prefix that fits the budget: k = j with probability P(N ≥ j) (the whole queue fits,
    *fit* time law), else k = N < j with probability P(N = k) (*cut* time law), leaving j − k.
    The state carries the head regime of the queue (fresh, or the size-biased request that did
    not fit the last batch; see the module docstring). A plain cap is the special case N ≡ b.
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
        s_nodes, w, kv, logw, c_ = self.law.drain_nodes
        v = self.lam * s_nodes

        if v.size == 1:  # one node (deterministic times): the log-sum-exp is its exponent
            v0, k0, lw0 = float(v[0]), float(kv[0]), float(logw[0])

            def g(z: float) -> tuple[float, float]:
                return lw0 + v0 * (z - 1.0) - k0 * math.log(z), v0 - k0 / z
        else:
            g = functools.partial(_log_drain_transform, logw, v, kv)

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
        logz = math.log(hi)
        object.__setattr__(self, "_z0", hi)
        n = int(math.ceil(2 * self.b + 40 + math.log(1.0 / _TAIL) / max(logz, 1e-12)))
        # Past _STATES_MAX the states are not kept: π_{N+m} = π_N z0^{-m} in the settled regime,
        # whose batch-formation rows are affine in j there (the cut leaves j − k), so the tail's
        # share of every cycle sum is a geometric series in closed form (_pi_moments)
        object.__setattr__(self, "_far", n > _STATES_MAX)
        return min(n, _STATES_MAX)

    @cached_property
    def _kr(self) -> tuple[np.ndarray, np.ndarray]:
        """Plain cap: batch size and leftover per state."""
        j = np.arange(self._size + 1)
        k = np.clip(j, self.a, self.b)
        r = np.maximum(j - self.b, 0)
        return k, r

    def _mix(self, n: int, reg: _Regime) -> _MixTables:
        """The regime's tables on j = 0..n (:class:`_MixTables`: P_fit, P_cut, each (n+1, b), and what
        the chain and the grids read from them). Rate-independent given n: kept on the regime
        (read-only) for the next solves."""
        key = (n, self.a)
        hit = reg.mix_cache.get(key)
        if hit is None:
            if len(reg.mix_cache) >= 8:  # a goodput search visits a few state counts
                reg.mix_cache.clear()
            pfit, pcut = self._mix_tables(n, reg)
            hit = reg.mix_cache[key] = _MixTables.build(pfit, pcut, reg, self.a, len(self._regimes) - 1)
        return hit

    def _mix_tables(self, n: int, reg: _Regime) -> tuple[np.ndarray, np.ndarray]:
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
    def _regimes(self) -> list[_Regime]:
        return self.law.regimes()

    @cached_property
    def _mix_pi(self) -> list[_MixTables]:
        return [self._mix(self._pi_flags.shape[1] - 1, reg) for reg in self._regimes]

    def _transitions(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(P on the states (regime, j), j = 0..n, without the overflow; the homogeneous kernel).

        A fit batch leads to regime 0 (fresh head), a cut at k from regime f to the regime its
        overflow head belongs to (``_Regime.after_cut``; always later, the last leads to itself).
        kernel[e] = P(j → j + e − b) for j ≥ b in the last regime."""
        b = self.b
        regs = self._regimes
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
            _band(acs, b - 1, (b, length), width - 1, writeable=True)[reg.live_index] = a_cut
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
                P[f * n1 : (f + 1) * n1, g * n1 : (g + 1) * n1] += _band(cut_rows, b, (n1, n1), width - 1)
        return P, kern

    def _arrival_tables(self, reg: _Regime, n1: int, length: int) -> tuple[np.ndarray, np.ndarray]:
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
        nr = len(self._regimes)
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
        A = _balance_view(Pc)  # A[i, j] = P[j, i] − δ_ij for the balance equation of state i
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
        head = _solve_balance(A, rhs)
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
        nr = len(self._regimes)
        P, _ = self._transitions(n)
        P[:, -1] += np.clip(1.0 - P.sum(axis=1), 0.0, None)  # overflow lumped into the last state
        A = _balance_matrix(P)
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
        """Σ_regimes π @ moments (see :class:`_MixTables`): [Σ_j π_j P(next batch takes k | j), k = 1..b |
        the cycle sums named by _MixTables.MOMENTS], one product per regime."""
        pis, mix = self._pi_flags, self._mix_pi
        out = pis[0] @ mix[0].moments if len(mix) == 1 else sum(pi @ mx.moments for pi, mx in zip(pis, mix))
        if self.__dict__.get("_far_mass", 0.0) > 0.0:
            # the implicit states N + m, m ≥ 1 (settled regime, rows affine in j past b):
            # Σ π_N z^{−m} (row_N + m Δ) = π_N (S0 row_N + S1 Δ), S0 = Σ z^{−m}, S1 = Σ m z^{−m}
            rows, n_out, zinv = mix[-1].moments, pis.shape[1] - 1, 1.0 / self._z0
            s0, s1 = zinv / (1.0 - zinv), zinv / (1.0 - zinv) ** 2
            out = out + float(pis[-1, n_out]) * (s0 * rows[n_out] + s1 * (rows[n_out] - rows[n_out - 1]))
        return out

    @cached_property
    def _cycle(self) -> dict[str, float]:
        lam = self.lam
        t = dict(zip(_MixTables.MOMENTS, self._pi_moments[self.b :].tolist()))
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

    # ---- exact waiting-time CDF for deterministic S_k ------------------------------------
    def wait_cdf(self, t: float | np.ndarray) -> float | np.ndarray:
        """P(W ≤ t), exact for deterministic S_k (a = 1)."""
        if self.law.token_aware:
            raise InputError("service", "token budget", "the closed-form CDF is for a plain request cap; use the grid")
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
    def _grid_tables(self, dx: float, stages: int = 1) -> "_GridTables":
        """Per regime, the fit and cut batch-time pmfs on the grid (:class:`_GridTables`; a k with
        P(N = k) = 0 carries no cut law), and a dict for their transforms. Rate-independent given
        dx, so they are kept on the law for the last dx (a goodput search mostly keeps dx: it is set
        by the shortest batch below saturation). ``stages`` > 1: the laws of stages · S_k (an own
        batch through a pipeline, :meth:`grids`), kept beside the plain ones."""
        cache = self.law._grid_cache
        if stages != 1:
            cache = cache.setdefault("stages", {})
            dx = dx / stages  # stages · S_k on dx = S_k on dx / stages, bin for bin
        key = (dx, self.b)
        if cache.get("key") == key:
            return cache["tables"]
        b, regs = self.b, self._regimes
        grid_cache: dict[tuple[int, int], np.ndarray] = {}

        def gp(lw: BatchServiceLaw, k: int) -> np.ndarray:
            if (id(lw), k) not in grid_cache:
                grid_cache[(id(lw), k)] = lw.grid_pmf(k, dx)
            return grid_cache[(id(lw), k)]

        ff_l = [[gp(reg.fit, k) for k in range(1, b + 1)] for reg in regs]
        fc_l = [[gp(reg.cut, k) if reg.p_n[k - 1] > 0 else np.zeros(1) for k in range(1, b + 1)] for reg in regs]
        n_s = max(len(x) for lst in ff_l + fc_l for x in lst)
        laws = np.zeros((len(regs), 2, b, n_s))
        for f, (fit_l, cut_l) in enumerate(zip(ff_l, fc_l)):
            for c, lst in enumerate((fit_l, cut_l)):
                for i, x in enumerate(lst):
                    laws[f, c, i, : len(x)] = x
        # support length of each cut pmf (index of the last nonzero bin + 1)
        lens = [np.array([len(np.trim_zeros(x, "b")) for x in lst]) for lst in fc_l]
        tables = _GridTables(laws, lens, (np.arange(n_s) + 0.5) * dx, {}, regs)
        kept = {"stages": cache["stages"]} if stages == 1 and "stages" in cache else {}
        cache.clear()
        cache.update(kept)
        if laws.nbytes <= _GRID_CACHE_BYTES:  # else too big to hold between solves
            cache.update(key=key, tables=tables)
        return tables

    def _drain_transforms(self, ys: list[np.ndarray], ext: list[int], tables: _GridTables, size: int,
                          m_own: int) -> np.ndarray:
        """P(W = t, m ahead), one row per (regime g, m), m < m_own, from the (residual, q) laws ``ys``
        (rows up to ext per regime), by transforms of length ``size`` over time: V_p^g = Ŷ_p^g +
        Σ_{h → g} Σ_k P_h(N = k) Ŝ_{h,k}^cut V_{p+k}^h (see :meth:`grids`), then inverted."""
        b, regs = self.b, self._regimes
        nr, last = len(regs), len(regs) - 1
        ks, flow, fc, n_s = [reg.live_k for reg in regs], self.law.cut_flow, tables.fc, tables.n_s
        n_q, nfreq = ys[0].shape[1], size // 2 + 1

        def vhat(y: np.ndarray, e: int) -> np.ndarray:
            ypad = np.empty((e, n_s + 1))  # one row per count: the transforms run along rows
            ypad[:, 0] = 0.0
            ypad[:, 1:] = y[:, :e].T
            out = np.empty((max(e, m_own) + b, nfreq), dtype=complex)
            out[e:] = 0.0
            np.fft.rfft(ypad, size, axis=1, out=out[:e])
            return out

        def cut_coef(f: int) -> np.ndarray:
            ki = regs[f].live_rows
            return regs[f].p_n[ki, None] * tables.law_fft(fc[f], size)[ki]

        V = [vhat(y, e) for y, e in zip(ys, ext)]
        coef = [tables.kept(("coef", f, size), functools.partial(cut_coef, f)) for f in range(nr)]
        buf = np.empty((max(ext[:-1], default=0), nfreq), dtype=complex)  # (no allocation per step)
        for f in range(nr - 1):  # a cut at k in regime f leaves the queue to a later regime
            e = ext[f]
            for c_k, k, g in zip(coef[f], ks[f], flow[f]):
                if k < e:
                    V[g][: e - k] += np.multiply(c_k, V[f][k:e], out=buf[: e - k])
        # Drain, top down in blocks of the smallest N (all of a plain cap's b at once)
        drain, cl, kmin = ks[last], coef[last], self.law.min_cut
        karr = np.array(drain)
        # batch sizes N = k0..k0+K−1 without gaps (the usual case): the rows V_{p+k} are a slice,
        # read in place instead of gathered into a copy on every step of this sequential recurrence
        k0, nk = drain[0], len(drain)
        contiguous = drain == tuple(range(k0, k0 + nk))
        # Σ_k c_k V_{p+k} as a product into one buffer and a sum over its rows (2x faster than
        # einsum here; the rows are added in order)
        prod = np.empty(cl.shape, dtype=complex)
        hi = n_q - 1
        Vl = V[last]
        while hi >= 0:
            lo = max(0, hi - kmin + 1)
            if len(drain) == 1:
                Vl[lo : hi + 1] += cl[0] * Vl[lo + drain[0] : hi + 1 + drain[0]]
            elif contiguous:
                for p in range(hi, lo - 1, -1):
                    Vl[p] += np.multiply(cl, Vl[p + k0 : p + k0 + nk], out=prod).sum(axis=0)
            else:
                for p in range(hi, lo - 1, -1):
                    Vl[p] += np.multiply(cl, Vl[p + karr], out=prod).sum(axis=0)
            hi = lo - 1
        v_own = V[0][:m_own] if nr == 1 else np.concatenate([v[:m_own] for v in V])
        return np.fft.irfft(v_own, size, axis=1)

    def _drain_shifts(self, ys: list[np.ndarray], ext: list[int], tables: _GridTables, size: int,
                      m_own: int) -> np.ndarray:
        """:meth:`_drain_transforms` when every cut law is a few grid bins (deterministic batch times,
        :attr:`_GridTables.cut_bins`): each product with a law's transform is that many circular
        shifted adds along time (the same circular convolutions of length ``size``, to round-off), so
        nothing is transformed and no complex table is built."""
        b, regs = self.b, self._regimes
        nr, last = len(regs), len(regs) - 1
        ks, flow, n_s = [reg.live_k for reg in regs], self.law.cut_flow, tables.n_s
        bins = tables.cut_bins[1]
        n_q = ys[0].shape[1]
        V, reach = [], []
        for y, e in zip(ys, ext):
            v = np.zeros((max(e, m_own) + b, size))
            v[:e, 1 : n_s + 1] = y[:, :e].T  # (the transforms' zero column: a wait ends on a bin edge)
            V.append(v)
            reach.append(n_s + 1)  # every column from here on is zero, in every row of v
        for f in range(nr - 1):  # a cut at k in regime f leaves the queue to a later regime
            e = ext[f]
            for (sb, sw), k, g in zip(bins[f], ks[f], flow[f]):
                if k < e:
                    reach[g] = max(reach[g], _shift_add(V[g][: e - k], V[f][k:e], sb, sw, reach[f]))
        # Drain, top down in blocks of the smallest N: a block reads only rows above it (k >= kmin),
        # final by then; the rows from n_q on are zero and stay so (no block adds to them)
        kmin, Vl, hi = self.law.min_cut, V[last], n_q - 1
        while hi >= 0:
            lo = max(0, hi - kmin + 1)
            src_reach, new_reach = reach[last], reach[last]
            for (sb, sw), k in zip(bins[last], ks[last]):
                top = min(hi, n_q - 1 - k)  # rows p whose V_{p+k} can be nonzero
                if top >= lo:
                    new_reach = max(new_reach, _shift_add(Vl[lo : top + 1], Vl[lo + k : top + 1 + k], sb, sw,
                                                          src_reach))
            reach[last] = new_reach
            hi = lo - 1
        return V[0][:m_own] if nr == 1 else np.concatenate([v[:m_own] for v in V])

    def grids(self, dx: float | None = None, wait_scale: float = 1.0, wait_prob: float | None = None,
              own_stages: int = 1) -> tuple[GridDist, GridDist, GridDist]:
        """(W, W + own_stages · S_own jointly, S_own) on a common grid (a = 1).

        An arrival finds the engine idle (W = 0, own batch of one), or lands at age u of a batch
        (size k, fit or cut, r left waiting) and finds q = r + Poisson(λu) ahead. The q ahead drain
        in batches of N_i: with p still ahead the next batch is ours when N ≥ p + 1, else it takes
        N and leaves p − N. In transforms over time, with Ŷ_p^g the (residual, q = p) law when the
        next batch forms in regime g (fresh head after a fit batch, overflow heads after cuts),
        V_p^g = Ŷ_p^g + Σ_{h → g} Σ_k P_h(N = k) Ŝ_{h,k}^cut V_{p+k}^h (h → g: a cut in h leads to g) and
        P(W, m ahead, regime g) = V_m^g P_g(N ≥ m+1). Our batch then holds
        k = min(N', m + 1 + Poisson(λW)), N' ~ N_g given N' ≥ m + 1.
        ``wait_scale`` multiplies the queueing part (non-Poisson corrections); 1 is exact.
        ``wait_prob`` (non-Poisson arrivals) replaces P(W > 0) = 1 − P(idle) of the Poisson chain:
        who waits moves, and the wait of those who wait stays the chain's conditional law times
        ``wait_scale``. The distributions' ``mean_s`` stay ``wait_scale`` × the chain's mean.
        ``own_stages``: the own batch leaves that many of its batch times after it starts (a pp-stage
        pipeline instance, :mod:`qmodel.perf.pipeline`): the joint law is W + own_stages · S_own,
        the same rows h convolved with S_k on a grid own_stages times finer.
        """
        if self.a != 1:
            raise InputError("min_batch", self.a, "the waiting-time law is implemented for a = 1")
        lam, b = self.lam, self.b
        regs = self._regimes
        nr = len(regs)
        pis = self._pi_flags
        # The chain keeps states out to a 1e-13 tail for its moments; the grids need only the
        # states carrying mass the grid can resolve. Dropping those whose total is below _STATE_MASS
        # (renormalised below) shrinks the count axis of every transform, often 3x.
        # mass in the states j and above, from the top j down (non-decreasing: a search finds the cut)
        # (method forms: np.cumsum and np.searchsorted add a Python dispatch layer each)
        above = (pis[0] if nr == 1 else pis.sum(axis=0))[::-1].cumsum()
        above += self.__dict__.get("_far_mass", 0.0)  # the implicit states past the explicit ones
        n_st = max(above.size - int(above.searchsorted(_STATE_MASS)), 1)
        # Heavy traffic: past _COUNT_MAX states (and so counts ahead) the wait grid is cut, and the
        # wait law continues as its exact exponential tail (below, after the drain)
        heavy = n_st > _COUNT_MAX
        if heavy:
            n_st = _COUNT_MAX
        pis = pis[:, :n_st]
        mix = self._mix_pi
        cyc = self._cycle["cycle_s"]
        p_idle = self.p_idle
        ks = [reg.live_k for reg in regs]
        max_s, min_mean = self.law.grid_extent
        # (heavy: an arrival with n_st or more ahead is left to the tail)
        n_q = n_st if heavy else pis.shape[1] + int(math.ceil(lam * max_s + 10.0 * math.sqrt(lam * max_s) + 10.0))
        # Horizon: W's tail decays at least like e^{−ηt} with η = min(λ(z0 − 1), ln z0 E[N]/E[S_N])
        # (z0 the chain's decay root); the time grid reaches where it is below _WAIT_TAIL (the mass
        # past it, at most that, is folded into the last bin; the KV link's grids stop at the same
        # 1 − 1e-9). The default step is set from the 1e-12 horizon, as it always was: where the
        # horizon sets the step, a shorter one would move every quantile by a grid step.
        z0 = self._z0 if self._size else 1.0
        en, esn = self.law.mean_drain
        eta = min(lam * (z0 - 1.0), en * math.log(z0) / esn)
        own_mean = self.mean_own_batch_s
        # (the chain's own W: ``wait_scale`` stretches the result afterwards, not the drain grid)
        def reach(log_tail: float) -> float:  # time by which the tail bound is below e^{-log_tail}
            return max_s + log_tail / max(eta, 1e-300) + own_mean

        horizon = reach(math.log(1.0 / _WAIT_TAIL))
        if dx is None:
            # ≥ 16 bins for the shortest batch, and the 1e-12 horizon within _GRID_POINTS points
            # (time and memory grow with it; quantiles are conservative by at most dx per term)
            # Near saturation the horizon grows like 1/(1 − ρ) and with it the step: each drained
            # batch time, rounded up to the grid, then adds up to a step (at 0.999 of
            # llama3-70b-disagg-h100's limit the step reached 0.44 s, 0.7 of a batch time, and the
            # grid's mean wait ran 46% above the chain's). Past _DX_HORIZON_BATCHES mean batch
            # times the step stops growing: the grid then ends short of the 1e-9 horizon and the
            # rest of the law is its exponential tail (below).
            horizon_dx = min(reach(math.log(1e12)), reach(0.0) + _DX_HORIZON_BATCHES * esn)
            dx = max(min_mean / _STEPS_PER_SHORTEST, horizon_dx / _GRID_POINTS)
        tables = self._grid_tables(dx)
        ff, fc, n_s = tables.ff, tables.fc, tables.n_s

        # Time weights of "in a batch with this time law and r left waiting", per unit service time,
        # grouped by the regime the *next* batch forms in (fit -> 0, cut -> last).
        groups: list[tuple[list[np.ndarray], list[np.ndarray]]] = [([], []) for _ in range(nr)]
        # the cut entries of the states kept (rows j < n_st: the first cut_upto[n_st], row-major)
        n_cut = [int(mx.cut_upto[n_st]) for mx in mix]
        r_max = max([1] + [int(mx.cut_rmax[m - 1]) + 1 for mx, m in zip(mix, n_cut) if m])
        unit = _unit(r_max)
        for f, (pi, mx, m) in enumerate(zip(pis, mix, n_cut)):
            w_fit = (pi @ mx.pfit[:n_st]) / cyc  # leftover 0, next batch fresh
            groups[0][0].append(w_fit @ ff[f])
            groups[0][1].append(unit)
            if m:
                # ω[k−1, r] = Σ_j π_j P_cut(k | j) [j − k = r] / cycle (bincount adds in np.add.at's order)
                flat = mx.cut_k[:m] * r_max + mx.cut_r[:m]
                omega = np.bincount(flat, weights=pi[mx.cut_j[:m]] * mx.cut_p[:m] / cyc,
                                    minlength=b * r_max).reshape(b, r_max)
                for k in (omega.any(axis=1).nonzero()[0] + 1).tolist():
                    g = regs[f].next_after_cut(k, nr - 1)
                    groups[g][0].append(fc[f][k - 1])
                    groups[g][1].append(omega[k - 1])
        # Y[v, n] = Σ Σ_r ω(r) Σ_a f[v + a] P(Poisson(λa) = n − r) dx: a linear convolution in the
        # count axis and a cross-correlation in time, both by one 2-D FFT of the age table.
        p_age = _poisson_matrix(lam * tables.ages, n_q)
        lt = _fast_len(2 * n_s + 1)
        lq_ = _fast_len(n_q + r_max)
        pa = None
        ys = []
        for lf, lw in groups:
            if not lf:
                ys.append(np.zeros((n_s, n_q)))
                continue
            if len(lf) <= 2:
                # few laws (a plain cap): count-axis convolution only where r > 0, then one
                # time cross-correlation per law (cheaper than the 2-D transform)
                y = np.zeros((n_s, n_q))
                for fk, wk in zip(lf, lw):
                    moved = wk is not unit and bool(wk[1:].any())
                    if not moved:
                        cols = p_age
                    elif n_q <= _TOEPLITZ_COUNTS:
                        cols = _convolve_counts(p_age, wk)
                    else:
                        cols = _convolve_rows(p_age, wk, lq_)
                    w0 = 1.0 if moved else wk[0]
                    nz = np.nonzero(fk)[0]
                    if nz.size and nz[0] == 0:  # (bin 0 adds nothing: v < 0)
                        nz = nz[1:]
                    if nz.size <= _SPARSE_LAW_BINS:
                        # a (near-)deterministic batch time is a few grid bins: the correlation
                        # y[v−1] = Σ_s f[s] cols[s − v], v = 1..s, is that many shifted row blocks
                        for s in nz.tolist():
                            y[:s] += (fk[s] * w0) * cols[s - 1 :: -1]
                        continue
                    c = np.fft.irfft(np.fft.rfft(fk, lt)[:, None] * np.conj(np.fft.rfft(cols, lt, axis=0)), lt, axis=0)
                    y += c[1 : n_s + 1] * w0
                y *= dx
                ys.append(np.maximum(y, 0.0, out=y))
                continue
            if pa is None:  # reversed in age: the correlation becomes a convolution
                pa = np.fft.rfft2(p_age[::-1], s=(lt, lq_))
            fh = np.fft.fft(np.array(lf), lt, axis=1)  # (L, lt)
            wh = np.fft.rfft(np.array(lw), lq_, axis=1)  # (L, lq_/2+1)
            # the 2-D inverse as its two passes (what irfft2 does), the count-axis pass only on the
            # rows kept: lags v = 1..n_s
            lag = np.fft.ifft(pa * (fh.T @ wh), lt, axis=0)[n_s : 2 * n_s]
            y = np.fft.irfft(lag, lq_, axis=1)[:, :n_q] * dx
            ys.append(np.maximum(y, 0.0, out=y))
        busy_mass = 1.0 - p_idle
        ysum = float(ys[0].sum()) if nr == 1 else sum(float(y.sum()) for y in ys)
        if ysum > 0:
            for y in ys:
                y *= busy_mass / ysum
        col = ys[0].sum(axis=0) if nr == 1 else sum(y.sum(axis=0) for y in ys)
        nz = np.nonzero(col > _COUNT_MASS * busy_mass)[0]
        n_q = int(nz[-1]) + 1 if nz.size else 1
        ys = [y[:, :n_q] for y in ys]

        # The drain runs top down in blocks of the smallest N (all of a plain cap's b at once): at
        # most ⌈n_q/kmin⌉ batches drain the queue ahead; past the horizon the mass is < _WAIT_TAIL
        kmin, nsb = self.law.min_cut, tables.cut_support
        length = min(n_s + 1 + int(math.ceil(n_q / kmin)) * nsb + 1, int(math.ceil(horizon / dx)) + n_s + 2)
        valid = length
        if heavy:
            # Draining n_st ahead takes m = n_st/E[N] batches, mean m·E[S_N]; the waits of those with
            # n_st or more ahead (left out) lie below (1 − 5/√m) of that only with a relative
            # deviation of 5/√m, ≥ 10 standard deviations of a mean over m batch times per request
            # (their coefficient of variation is below 0.5): the grid is exact below `valid` bins.
            # The drain of up to n_st ahead takes at most twice its mean (the same bound, the other
            # way), which bounds the transform length instead of the 1e-9 horizon.
            m_batches = n_st / en
            valid = max(n_s + 2, int(m_batches * esn * max(0.25, 1.0 - 5.0 / math.sqrt(m_batches)) / dx))
            drain = 2.0 * n_st / en * esn + max_s + own_mean
            length = max(min(length, int(math.ceil(drain / dx)) + n_s + 2), valid + 1)
        size = _fast_len(max(length, 2 * n_s + 2))
        if size > 4 * MAX_POINTS:
            raise NumericalError("prefill waiting-time grid too large; the load is too close to 1")

        last = nr - 1
        flow = self.law.cut_flow
        # rows that can carry mass, per regime: its own residual law, and what cuts bring down
        # (fit batches leave nothing waiting, so the fresh regime's rows stop at ~λ max S)
        ext = []
        for f in range(nr):
            if f == last:
                ext.append(n_q)
                continue
            nzf = np.nonzero(ys[f].sum(axis=0) > _STATE_MASS * busy_mass)[0]
            e = int(nzf[-1]) + 1 if nzf.size else 0
            for h in range(f):
                if f in flow[h]:
                    e = max(e, ext[h] - min(ks[h]))
            ext.append(max(e, 1))
        m_own = min(b, n_q)

        if tables.cut_bins[0] <= _SPARSE_LAW_BINS:
            u = self._drain_shifts(ys, ext, tables, size, m_own)
        else:
            u = self._drain_transforms(ys, ext, tables, size, m_own)
        np.maximum(u, 0.0, out=u)
        s_own = self.law.own_weights[:, 0, :m_own].ravel()  # P_g(N ≥ m + 1): ours is the next batch
        ratio = 0.0  # heavy: the tail's ratio of successive bins, e^{−η dx}
        if heavy:
            # past `valid` bins each row (m ahead, regime) decays at the chain's exact rate η: it is
            # continued geometrically from its last exact bin for n_s + 2 bins (so that W + S_own is
            # exact up to the grid's end), and the rest is the law's exponential tail
            ratio = math.exp(-eta * dx)
            ext = n_s + 2
            last_col = u[:, valid - 1 : valid]
            u = np.concatenate([u[:, :valid], last_col * ratio ** np.arange(1, ext + 1)], axis=1)
        g_mass = float((s_own @ u).sum())
        if heavy:
            g_mass += float(s_own @ u[:, -1]) * ratio / (1.0 - ratio)
        factor = busy_mass / g_mass if g_mass > 0 else 1.0
        p_zero = p_idle
        if wait_prob is not None and busy_mass > 0:
            wait_prob = min(max(float(wait_prob), 1e-12), 1.0)
            factor *= wait_prob / busy_mass
            p_zero = 1.0 - wait_prob
        u *= factor
        w_tail = float(s_own @ u[:, -1]) * ratio / (1.0 - ratio) if heavy else 0.0
        if wait_scale != 1.0:  # (u.T is column-major: rescaled without a transposing copy)
            u = _scale_time(u.T, wait_scale).T
        size = u.shape[1]
        wpmf = s_own @ u
        u3 = u.reshape(nr, m_own, size)

        # own batch: k = min(N', m + 1 + Poisson(λW)), N' ~ N | N ≥ m + 1. h[f, c, i, t] for regime f,
        # c = 0: a fit batch of i + 1 (P(Poisson(λW) = i − m), times P_f(N ≥ i + 1)), c = 1: a cut
        # at i + 1 (P(Poisson(λW) > i − m), times P_f(N = i + 1))
        t = np.arange(1, size) * dx
        # qt[t, 0] = P(Poisson(λW) = i), qt[t, 1] = P(Poisson > i), i < b, after m_own − 1 zero columns
        qt = np.zeros((size, 2, m_own - 1 + b))
        q, tail = qt[:, 0, m_own - 1 :], qt[:, 1, m_own - 1 :]
        q[0, 0] = 1.0  # W = 0: no arrivals
        q[1:] = _poisson_matrix(lam * t, b)
        q.cumsum(axis=1, out=tail)
        np.subtract(1.0, tail, out=tail)
        np.maximum(tail, 0.0, out=tail)  # (at most 1 already: 1 minus a sum of probabilities)
        # h[t, i] = Σ_j u[t, j] q[t, i − j], i < b: a linear convolution of m_own and b terms along
        # the count axis, directly when that is only a few products (plain caps: a band view of the
        # zero-padded table), else by FFT
        if m_own * b <= _DIRECT_COUNT_TERMS:
            st = qt.strides
            band = np.ndarray((size, 2, m_own, b), buffer=qt, offset=(m_own - 1) * st[2],
                              strides=(st[0], st[1], -st[2], st[2]))  # band[t, c, j, i] = qt[t, c, m_own − 1 + i − j]
            h = np.einsum("fjt,tcji->fcit", u3, band)
        else:
            lb = _fast_len(m_own + b)
            qh = np.fft.rfft(qt[:, :, m_own - 1 :], lb, axis=2).transpose(1, 2, 0)  # (2, lb/2+1, size)
            h = np.empty((nr, 2, b, size))
            for f in range(nr):  # (one regime at a time: a batched product ran 2x slower, on memory)
                uh = np.fft.rfft(u3[f], lb, axis=0)
                for c in range(2):
                    h[f, c] = np.fft.irfft(uh * qh[c], lb, axis=0)[:b]
            np.maximum(h, 0.0, out=h)
        h *= self.law.own_weights[..., None]  # (nr, 2, b): [P_f(N ≥ k), P_f(N = k)]
        h = h.reshape(nr * 2 * b, size)  # rows in the order of tables.own_rows
        h[0, 0] += p_zero  # an arrival to an idle engine runs alone, fresh
        # W + S_own: W's support is within `length` (past it the mass is < _WAIT_TAIL), so a transform of
        # length + n_s does not wrap. Through a pipeline the own batch runs own_stages · S_k.
        mass = h.sum(axis=1)
        if heavy:
            # the rows' mass past the grid's end (their geometric continuation at e^{−η dx/scale}
            # per bin, from the last n_s + 2 bins: robust to the gaps a stretched grid leaves)
            r_s = math.exp(-eta * dx / wait_scale)
            k_end = min(n_s + 2, size)
            span_w = float(np.sum(r_s ** -np.arange(k_end, dtype=float)))
            mass = mass + h[:, size - k_end :].sum(axis=1) / span_w * r_s / (1.0 - r_s)
        own = mass @ tables.own_rows  # (the rows without mass add exact zeros)
        if own_stages != 1:
            tables = self._grid_tables(dx, own_stages)
            n_s = tables.n_s
        out_size = _fast_len((size if wait_scale != 1.0 or heavy else length) + n_s)
        most, o_rows, o_bins, o_mass = tables.own_bins
        if most <= _SPARSE_LAW_BINS:
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
                laws_hat = tables.kept(("own", out_size, live.tobytes()),
                                       lambda: np.fft.rfft(tables.own_rows[live], out_size, axis=1))
            hh = np.fft.rfft(h, out_size, axis=1)
            acc = np.multiply(hh, laws_hat, out=hh).sum(axis=0)  # Σ_k ĥ_k Ŝ_k (faster than einsum)
            joint = np.fft.irfft(acc, out_size)[: min(size + n_s, out_size)]
            np.maximum(joint, 0.0, out=joint)
        if heavy:
            # W + S_own is exact up to W's grid end (what lies past it comes from W's tail); the rest
            # of the mass is its tail, at W's rate (S_own is bounded)
            total = float(joint.sum()) / max(1.0 - w_tail, 1e-300)  # all of W's grid mass, convolved
            joint = joint[:size] / total
            d_tail = max(0.0, 1.0 - float(joint.sum()))
        else:
            total = joint.sum()
            joint /= total
        wpmf[0] += p_zero
        wpmf /= wpmf.sum() / (1.0 - w_tail) if heavy else wpmf.sum()
        exact = wait_scale == 1.0 and wait_prob is None
        w_atoms = d_atoms = None
        if exact:
            # Point masses (GridDist.atoms; an exact law only, an approximate one keeps the
            # conservative reading, docs/methods.md Grids): W has a density past its atom at 0 (an
            # arrival lands at a uniform age of the batch in progress), so the only point masses
            # of W + S_own are those of an arrival to an idle engine: its own batch of one, S_1 on
            # the grid (exactly at a grid point for a batch time on it; rounded up otherwise).
            s1 = tables.own_rows[0]
            d_atoms = np.zeros(joint.size)
            m = min(s1.size, joint.size)
            d_atoms[:m] = s1[:m] * (p_zero / total)
            np.minimum(d_atoms, joint, out=d_atoms)
            w_atoms = zero_atom(wpmf)
        # The reported mean stays the heavy-traffic-scaled chain mean (validated on its own: within
        # 10% of the DES at 80% load); the law's own mean is lower by wait_prob/(1 − P(idle)).
        wq = self.mean_wait_s * wait_scale
        own_exit_mean = own_mean if own_stages == 1 else own_stages * own_mean
        if heavy:  # the exponential tails past the grids' ends (GridDist reads them analytically)
            rate = eta / wait_scale
            wait = GridDist(dx, wpmf, wq, tail=w_tail, tail_rate=rate, exact=exact, atoms=w_atoms, tail_exact=True)
            delay = GridDist(dx, joint, wq + own_exit_mean, tail=d_tail, tail_rate=rate, exact=exact, atoms=d_atoms,
                             tail_exact=True)
        else:
            wait = GridDist.trimmed_from(wpmf, dx, wq, exact, atoms=w_atoms)
            delay = GridDist.trimmed_from(joint, dx, wq + own_exit_mean, exact, atoms=d_atoms)
        own /= own.sum()
        own_d = GridDist.trimmed_from(own, dx, own_mean, exact)
        return wait, delay, own_d


def _band(base: np.ndarray, start: int, shape: tuple[int, int], row_step: int,
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


def _log_drain_transform(logw: np.ndarray, v: np.ndarray, kv: np.ndarray, z: float) -> tuple[float, float]:
    """log E[z^{−N} e^{λS(z−1)}] over the nodes (log-sum-exp) and its derivative Σ p_i (v_i − k_i/z)
    (see BulkQueue._size)."""
    e = logw + v * (z - 1.0) - kv * math.log(z)
    top = float(e.max())
    p = np.exp(e - top)
    tot = float(p.sum())
    return top + math.log(tot), float(p @ (v - kv / z)) / tot


def _convolve_rows(table: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Each row of ``table`` convolved with ``w``, cut to the table's width, by transforms of length
    n (≥ both lengths together: no wrap). The row w rides along as one more row of the table: one
    transform for both (row by row the same numbers as two)."""
    rows, cols = table.shape
    both = np.zeros((rows + 1, max(cols, w.size)))
    both[:rows, :cols] = table
    both[rows, : w.size] = w
    hat = np.fft.rfft(both, n, axis=1)
    return np.fft.irfft(hat[:rows] * hat[rows], n, axis=1)[:, :cols]


def _shift_add(dst: np.ndarray, src: np.ndarray, bins: Sequence[int], weights: Sequence[float],
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


def _convolve_counts(table: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each row of ``table`` convolved with ``w``, cut to the table's width, as one product with the
    Toeplitz matrix T[i, j] = w[j − i] (a view of one padded copy of w, made contiguous for BLAS):
    for a few counts much cheaper than the transforms of :func:`_convolve_rows` (same numbers to
    round-off)."""
    n = table.shape[1]
    pad = np.zeros(2 * n - 1)
    m = min(w.size, n)
    pad[n - 1 : n - 1 + m] = w[:m]
    toeplitz = np.ndarray((n, n), buffer=pad, offset=(n - 1) * pad.itemsize, strides=(-pad.itemsize, pad.itemsize))
    return table @ np.ascontiguousarray(toeplitz)


def _unit(n: int) -> np.ndarray:
    """(1, 0, …, 0) of length n: no count ahead left over."""
    out = np.zeros(n)
    out[0] = 1.0
    return out


def _balance_matrix(P: np.ndarray) -> np.ndarray:
    """Pᵀ − I as a fresh C-ordered array (one transposing copy, the diagonal lowered in place:
    no identity matrix built and subtracted)."""
    A = np.ascontiguousarray(P.T)
    A.flat[:: A.shape[0] + 1] -= 1.0
    return A


def _balance_view(P: np.ndarray) -> np.ndarray:
    """Pᵀ − I as a column-major view of P itself (P's diagonal lowered in place; P is consumed):
    no transposing copy, and the layout LAPACK factors in place."""
    P.flat[:: P.shape[0] + 1] -= 1.0
    return P.T


def _solve_balance(A: np.ndarray, rhs: np.ndarray) -> np.ndarray:
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


def instance_wait_scale(rho: float, ca2: float, cs2e: float) -> float:
    """Factor on the Poisson chain's queueing part for per-engine arrival SCV ``ca2``.

    Heavy traffic: the queue length is driven by the variance rate λ(c_a² + b c_b²) of arrivals
    minus departures (b requests leave per batch, batch-time SCV c_b²), against λ(1 + b c_b²) for
    Poisson input, so the ratio (c_a² + b c_b²)/(1 + b c_b²) is exact as ρ → 1. For c_a² < 1 the
    Krämer–Langenbach-Belz g corrects Kingman's overestimate at moderate load. For c_a² > 1 KLB's
    factor is not applied: against the DES it moved the estimate the wrong way (it lowers an
    estimate that is already low). Measured against the token-budget DES (B = 8192, lognormal
    prompts, median 1000, σ 0.8): Gamma CV 2 arrivals −15% on E[W] at 50% load, −22% at 80%, −13%
    at 90%; round robin over 4 engines −14% at 50%, −8% at 80%, +1% at 90%.
    """
    if ca2 + cs2e <= 0:
        return 0.0
    ratio = (ca2 + cs2e) / (1.0 + cs2e)
    return ratio * klb_factor(rho, ca2, cs2e) if ca2 < 1.0 else ratio


def _scale_time(g: np.ndarray, scale: float) -> np.ndarray:
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
    #: report each prompt's own batch time at the solved rate (``extra["own_batch_time_per_prompt_s"]``,
    #: what a layer-wise KV transfer hides behind); a serialized transfer never reads it
    own_batch_times: bool = True

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
    def token_aware(self) -> bool:
        """A token budget over varied prompts: batches are FCFS prefixes that fit (not a cap)."""
        p = np.asarray(self.prompt_tokens, dtype=float)
        return self.law_override is None and self.max_batch_tokens is not None and bool(np.ptp(p) > 0)

    @cached_property
    def b(self) -> int:
        """Largest batch the law can form (the request cap, or the largest FCFS prefix that fits)."""
        if self.law_override is not None:
            return self.law_override.b
        if self.token_aware:
            return self.law.b
        return batch_cap(self.max_batch_tokens, float(np.mean(self.prompt_tokens)), self.max_batch_size)

    @cached_property
    def law(self) -> BatchServiceLaw:
        if self.law_override is not None:
            return self.law_override
        p = np.asarray(self.prompt_tokens, dtype=float)
        if self.token_aware:
            cap = int(self.max_batch_size) if self.max_batch_size is not None else DEFAULT_MAX_BATCH_SIZE
            batch_cap(self.max_batch_tokens, float(np.mean(p)), self.max_batch_size)  # validates the cap
            return BatchServiceLaw.from_prompts_budget(self.service, p, float(self.max_batch_tokens), cap,
                                                       self.cached_tokens)
        return BatchServiceLaw.from_prompts(self.service, p, self.b, self.cached_tokens)

    @cached_property
    def _output_scv(self) -> float:
        """Per-request variability of the batch server's output from a long queue: N requests in
        S_N per batch, θ = E[N]/E[S_N]; the departure count's variance rate gives Var(N − θS_N)/E[N]
        (= b c_b² under a plain cap, N ≡ b). A property of the law: computed once."""
        cut, pn = self.law.cut_law, self.law.p_n
        en, es = self.law.mean_drain
        kk = np.arange(1, self.law.b + 1)
        theta = en / es
        return max(float(pn @ (kk * kk - 2 * theta * kk * cut.mean_s + theta**2 * cut.second_s2)) / en, 0.0)

    @cached_property
    def _budget_is_cap(self) -> bool:
        """Exact for the stated model needs a request cap that *is* the engine's rule (no token
        budget, or every prompt the same length so floor(B/P) is what fits)."""
        p = np.asarray(self.prompt_tokens, dtype=float)
        return self.max_batch_tokens is None or self.law_override is not None or bool(np.ptp(p) == 0)

    def max_stable_rate_per_s(self) -> float:
        """c · E[N] / E[S_N] (c · b / E[S_b] for a plain cap; exact for the model)."""
        en, es = self.law.mean_drain
        return self.instances * en / es

    def _instance_ca2(self) -> float:
        c = self.instances
        if self.dispatch == "random":
            return self.ca2 / c + 1.0 - 1.0 / c  # Bernoulli splitting
        return self.ca2 / c  # cyclic splitting: sum of c inter-arrival times

    def own_batch_time_per_prompt(self, own_batch_pmf: np.ndarray, seed: int = 7,
                                  mean_s: float | None = None) -> np.ndarray:
        """Each sampled request's own batch time until its batch leaves the instance (``prefill_exit_s``:
        pp stage times through a pipeline), aligned with ``prompt_tokens``.

        Request i's batch holds its own prompt and k − 1 others drawn from the mix, with k from the
        customer-weighted ``own_batch_pmf`` (under a request cap the batch size does not depend on
        the request's own prompt, so this is the model's joint law of (prompt, T_p)). Under a token
        budget the others join only while the batch still fits (a long prompt leaves less room), and
        the times are then scaled to the chain's exact own-batch mean ``mean_s``: the sample gives
        the pairing, the chain the level. The KV station's layer-wise overlap needs exactly this
        pairing (seeded: reproducible).
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
        n_req = np.ones_like(p)
        budget = self.max_batch_tokens if self.token_aware else None
        open_ = np.ones(p.size, dtype=bool)
        for extra in range(1, int(k.max())):
            live = k > extra
            pick = rng.integers(0, p.size, size=int(live.sum()))
            add_n, add_sq = p[pick], p[pick] ** 2 + 2 * p[pick] * c[pick]
            if budget is not None:  # FCFS prefix: once one does not fit, the batch is closed
                fits = open_[live] & (sum_n[live] + add_n <= budget)
                open_[live] = fits
                add_n, add_sq = add_n * fits, add_sq * fits
                n_req[live] += fits
            else:
                n_req[live] += 1.0
            sum_n[live] += add_n
            sum_sq[live] += add_sq
        t = np.asarray(self.service.prefill_time_s(sum_n, sum_sq, n_req), dtype=float)
        if budget is not None and mean_s is not None and t.mean() > 0:
            t = t * (mean_s / float(t.mean()))
        return np.asarray(self.service.prefill_exit_s(t), dtype=float)  # through a pipeline: pp stage times

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
                                detail=f"{self.instances} instance(s) x E[batch] {self.law.mean_drain[0]:.4g} / "
                                       f"E[batch time] {self.law.mean_drain[1]:.4g} s")

    # ---- solve ---------------------------------------------------------------------------
    def solve(self, rate_per_s: float) -> StationSolution:
        self._check(rate_per_s)
        if self.dispatch == "least_loaded" and self.b == 1 and self.instances > 1:
            return self._solve_central(rate_per_s)
        q = BulkQueue(rate_per_s / self.instances, self.law)
        ca2_i = self._instance_ca2()
        notes: list[str] = []
        scale = 1.0
        wait_prob = None
        if abs(ca2_i - 1.0) > 1e-12:
            rho = q.rho_full
            scale = instance_wait_scale(rho, ca2_i, self._output_scv)
            # Who waits: a Poisson arrival finds the engine busy with probability = its busy
            # fraction; regular (round-robin) arrivals find it busy less often, bursty ones more.
            # QNA's P(W > 0) with the batch time's SCV moves the atom at zero; those who wait keep
            # the chain's conditional wait times the heavy-traffic factor (see BulkQueue.grids).
            cyc = q._cycle
            busy = 1.0 - q.p_idle
            cs2b = max(cyc["batch_time_second_s2"] / cyc["batch_time_mean_s"] ** 2 - 1.0, 0.0)
            wait_prob = qna_delay_probability(busy, ca2_i, cs2b)
            notes.append(f"per-engine arrival SCV {ca2_i:.3g}: queueing part scaled by {scale:.3g} "
                         "(heavy-traffic (ca2+b cb2)/(1+b cb2), KLB g for ca2<1), P(wait) "
                         f"{busy:.3g} -> {wait_prob:.3g} (QNA); approximate")
        if self.dispatch == "least_loaded" and self.b > 1:
            notes.append("least_loaded with batching: per-engine chain with cyclic-split arrivals (approximate, conservative)")
        if self.token_aware:
            notes.append(f"token budget {self.max_batch_tokens:g}: FCFS-prefix batches (mean {self.law.mean_drain[0]:.3g} "
                         f"requests from a long queue, at most {self.b}); head regimes by Monte Carlo (approximate)")
        elif self.max_batch_tokens is not None and self.law_override is None:
            notes.append(f"token budget {self.max_batch_tokens:g} fits b = {self.b} equal prompts: exact cap")
        wait, delay, own = q.grids(self.dx, wait_scale=scale, wait_prob=wait_prob,
                                   own_stages=self.service.prefill_exit_stages)
        # exact for the stated model: Poisson per engine and a request cap that is the engine's rule
        exact = scale == 1.0 and self.dispatch == "random" and self._budget_is_cap
        own_pmf = q.own_batch_pmf
        method = (f"M/G^[1,{self.b}]/1 embedded chain per instance, token-budget FCFS-prefix batches ({self.dispatch} dispatch)"
                  if self.token_aware else f"M/G^[1,{self.b}]/1 embedded chain per instance ({self.dispatch} dispatch)")
        batch_rate = self.instances / q._cycle["cycle_s"]
        in_system = self.instances * (q.lq * scale + q._cycle["in_service"])
        stages = self.service.prefill_exit_stages
        if stages != 1:  # Little: each request also spends (stages − 1) own batch times in the later stages
            in_system += rate_per_s * (stages - 1) * q.mean_own_batch_s
        return StationSolution(
            name="prefill",
            utilization=q.utilization,
            max_stable_rate_per_s=self.max_stable_rate_per_s(),
            delay=delay,
            wait=wait,
            method=method,
            exact=exact,
            mean_in_system=in_system,
            notes=tuple(notes),
            extra={
                "batch_rate_per_s": batch_rate,
                "batch_size_mean": q.mean_batch,
                "batch_size_second_moment": q._cycle["batch_second"],
                "batch_cap": self.b,
                "own_batch_time": own,
                "own_batch_pmf": own_pmf,
                "own_batch_time_per_prompt_s": self.own_batch_time_per_prompt(own_pmf, mean_s=q.mean_own_batch_s)
                if self.own_batch_times else None,
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
        if det:
            # the fixed service on a grid point: W + D keeps W's atom at 0 as a point mass at D
            # exactly (rounded up to the next point it would move the sojourn's quantiles up)
            k = math.ceil(float(s[0]) / wait.dx - 1e-9)
            if abs(k * wait.dx - float(s[0])) > 1e-12 * float(s[0]):
                wait = model.grid(dx=float(s[0]) / k)
        if scale != 1.0:
            pm = _scale_time(wait.pmf[:, None], scale)[:, 0]
            wait = GridDist(wait.dx, pm, model.mean_s * scale, exact=False)
        dx = wait.dx
        own = GridDist.from_samples(s, dx, w_nodes)
        own = GridDist(dx, own.pmf, es)
        from qmodel.dist import convolve

        stages = self.service.prefill_exit_stages  # the own batch leaves after this many service times
        own_exit = own if stages == 1 else GridDist(dx, GridDist.from_samples(stages * s, dx, w_nodes).pmf, stages * es)
        delay = convolve(wait, own_exit)  # b = 1: the own service is independent of the wait
        rho = rate_per_s * es / c
        return StationSolution(
            name="prefill",
            utilization=rho,
            max_stable_rate_per_s=self.max_stable_rate_per_s(),
            delay=delay,
            wait=wait,
            method=model.method,
            exact=model.exact and scale == 1.0,
            mean_in_system=rate_per_s * (model.mean_s * scale + es * stages),
            notes=tuple(notes),
            extra={
                "batch_rate_per_s": rate_per_s,
                "batch_size_mean": 1.0,
                "batch_size_second_moment": 1.0,
                "batch_cap": 1,
                "own_batch_time": own,
                "own_batch_pmf": np.array([1.0]),
                "own_batch_time_per_prompt_s": self.own_batch_time_per_prompt(np.array([1.0]))
                if self.own_batch_times else None,
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
