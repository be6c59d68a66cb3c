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
low (mean −48%). Measured against the replay, and the variant not adopted: docs/methods.md, "Model history".
least_loaded is read as *least work left*: with b = 1 it is exactly the central FCFS queue, so
M/D/c (exact) or M/G/c (Cosmetatos/Whitt); with b > 1 the engines share one backlog and the chain
is read as a central queue of c bulk servers, as M/G/c is read from M/G/1 (approximate): one
engine's Poisson chain at λ/c, P(W > 0) = Erlang C(c, c ρ_b) with ρ_b its busy fraction, the
conditional wait divided by c (exact for M/M/c, the heavy-traffic limit of a pooled queue); for
c_a² ≠ 1 the conditional wait takes the heavy-traffic factor at the pool's SCV and ρ_b becomes
QNA's P(W > 0) at that SCV. (What it replaced: docs/methods.md, "Model history".)

**Stability.** λ < c · E[N] / E[S_N] (c · b / E[S_b] under a cap): batching raises capacity above
c / E[S_1], and a batched configuration is never rejected by its unbatched load.

**Modules** (each name is re-exported here; import from ``qmodel.stations.prefill``):
:mod:`~qmodel.stations.prefill.sampling` the prompt sample and the request cap; :mod:`~.regimes`
the head regimes and their per-state tables; :mod:`~.law` :class:`BatchServiceLaw`;
:mod:`~.kernels` the numerical kernels (Poisson tables, the decay root, convolutions);
:mod:`~.chain` :class:`BulkQueue`, the embedded chain and its cycle sums; :mod:`~.wait_exact` the
closed-form CDF; :mod:`~.grid_tables`, :mod:`~.drain`, :mod:`~.own_batch` and :mod:`~.wait_grids`
the waiting-time grids; :mod:`~.station` :class:`PrefillStation`.

References: Neuts (1967); Chaudhry & Templeton (1983); Krämer & Langenbach-Belz (1976);
DistServe (Zhong et al., OSDI 2024) for the M/D/1 special case D + λD²/(2(1−λD)).
"""

from __future__ import annotations

from qmodel.stations.prefill.chain import BulkQueue
from qmodel.stations.prefill.law import BatchServiceLaw
from qmodel.stations.prefill.sampling import DEFAULT_MAX_BATCH_SIZE, batch_cap
from qmodel.stations.prefill.station import Dispatch, PrefillStation, instance_wait_scale

__all__ = ["BatchServiceLaw", "BulkQueue", "PrefillStation", "batch_cap", "instance_wait_scale", "DEFAULT_MAX_BATCH_SIZE"]
