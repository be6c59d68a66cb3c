"""Colocated engine, prefill-priority iterations (vLLM-v0-like): design §2.9.

A waiting prompt triggers a prefill iteration of everything waiting (up to the token budget);
otherwise the engine runs one decode step of all running sequences.

Model, per instance at rate lam (random split over ``instances``):

* prefill time fraction rho_p = lam T(k)/k with k the mean prompts per prefill iteration: arrivals
  during a prefill all join the next one, so iterations follow each other at rate lam_b (1 - e^{-lam T})
  and start fresh at rate lam (1 - rho_p): k = e^{-lam T(k)} / (1 - rho_p), capped at the token
  budget's b = floor(B/E[P]); T(k) = prefill_time_s(k E[P], k E[P^2], k). k -> 1 at low load;
* decode occupancy: GPS with capacity (1 - rho_p): phi(n) = (1 - rho_p) n / t_d(n), i.e. the
  birth–death chain of :mod:`qmodel.stations.decode` at token rate lam E[L] / (1 - rho_p)
  (NegBin(1 + a/beta, x = lam E[L] beta / (1 - rho_p)) for affine t_d);
* TPOT of a request with output L seeing N = n on arrival:

      TPOT = t_d(n+1) + (S_life + S_0) / (L - 1),

  S_0: K_0 ~ Poisson(lam T_own) prompts queued during its own prefill, whose iteration runs before
  its second token (the inspection-paradox term); everything that arrives meanwhile is prefilled
  first too, so each of them starts a prefill busy period: jumps B(T_1(P)), gamma with E[B] =
  E[T_1]/(1 - rho_p) and E[B^2] = E[T_1^2]/(1 - rho_p)^3. (The design's S_0 stopped at the queued
  prompts themselves, jumps T_1(P): TPOT p99 −16% at rho_p 0.36 and −30% at 0.53 against the step
  DES, −22% at 0.3 of the limit with Gamma CV 2 arrivals; with the busy periods −6/−11/−3%.);
  S_life: the prefill work that interrupts its decode life D = (L-1) t_d(n+1)/(1 - rho_p). Prefill
  runs in busy periods (a prefill iteration, then one for everyone who arrived during it, ...), so
  S_life is clustered: busy periods start at rate lam (1 - rho_p) and last B, E[B] = E[T]/(1 - rho_p),
  E[B^2] = E[T^2]/(1 - rho_p)^3 (M/G/1, Takacs; T = T_1 scaled to the batched per-prompt cost),
  B taken as the gamma law with those moments. The clustering keeps the mean (rho_p D) and
  carries the busy-period correlation; the design's per-prompt Poisson stalls (§2.9) gave p99 −28%
  at rho_p = 0.36, the clustered form −14% (tests/test_stations_colocated.py).
  Evaluated deterministically: compound-Poisson pmf by FFT per (L group, N node) on a per-group
  grid, 10 log-spaced L groups, 5 quantile nodes of N;
* TTFT = W + T_1(P) + co-batched prompts. Poisson or smooth arrivals: every prefill iteration takes
  all waiting prompts (gated batch service), so W is the residual of the operation in progress on the
  request's instance (a prefill iteration of 1 + Poisson(kbar - 1) prompts, a decode step, or
  nothing), and the request's iteration holds everyone who arrived during that whole operation:
  K ~ Poisson(lam (A + W)) with A the operation's age, exact given (A, W); A given W is taken as a
  gamma law with its two conditional moments (negative binomial K). Each co-batched prompt adds its
  *marginal* cost T(p + m, p^2 + m^2, 2) - T(m, m^2, 1) (m the mean prompt; the iteration's fixed
  cost is paid once), and the token budget caps K beside an own prompt at (B - P) // E[P], per
  quarter of the own-length distribution. Budget overflow into a later iteration is not modelled.
  Against the replay (roofline llama-3.1-8b/H100, Azure conv, 1 instance, 3 seeds x 20000 requests)
  at 3.7/7.35/11 req/s the gated form measured TTFT mean −0.1/+0.6/+0.2%, p90 +3.7/+5.3/+2.9% when
  it was introduced (the priority-M/G/1 form gave mean +3.0/+11.7/+28.8%); against the step DES
  (20 ms fixed prefill cost, 40000 s, one instance) at rho_p 0.12/0.24/0.35: mean −1.3/−2.5/−3.3%,
  p50 −1.1/−1.7/−1.7%, p90 −0.4/−0.6/−1.3%, p99 −1.0/−7.5/−10.2% (the earlier Poisson(2 lam W)
  co-batching, matched in mean only: p99 −0.3/−5.2/−4.9%, but against the replay's least_loaded
  pools it put p99 +9..+16% high on llama-3.1-8b and +25..+45% on qwen2.5-32b, where this form
  gives +2..+7% and +16%).
  Pools: random / round_robin: each instance sees lam/c and the operation met is its time-average
  one (PASTA; round_robin is smoother, so conservative there: replay llama-3.1-8b x2 TTFT p50/p90/p99
  +5..+21% at 0.3-0.9 of the limit). random near saturation is optimistic (budget overflow the
  bulk-service maximum below only partly restores: p90/p99 −8/−20% at 0.9 of the limit).
  least_loaded (fewest outstanding tokens, waiting prompts + reserved KV): idle instances first,
  and the dispatch steers arrivals off prefilling instances with long iterations
  (:meth:`ColocatedStation._gated_wait`); against the replay (llama-3.1-8b/H100 x2, Azure conv, the
  validation suite) TTFT p50/p90/p99 within −7..+7% up to 0.8 of the limit, −10/−1/+7% at 0.9 and
  −12/−3/+5% at 0.95 (the M/G/c-like priority form used before: +29/+23/+34% and +39/+32/+40%).
  Where the token budget fills (a share > 1e-3 of requests meet a full iteration) batches overflow
  and a backlog builds that the gated form does not carry: the TTFT is then the stochastic maximum
  with the bulk-service prefill chain (:meth:`ColocatedStation._with_overflow`).
  Bursts (``ca2`` > 1): prefill is the high class of a non-preemptive priority M^X/G/1 over decode
  steps (below); prompts arriving during W join the request's batch: given W = w, Poisson(lam w) of
  them (16 strata of W), each adding its marginal cost.
  KV admission: a prompt first waits for memory. Where KV binds, the soft wall of
  :mod:`qmodel.stations.admission`: the resident count M the pool holds is random (length-biased
  prompt + output reservations, head-of-line blocking), normal about the saturated schedule's mean
  batch; the population chain phi_eff(n) = E[phi(min(n, M))] at decode capacity 1 - rho_p, scaled to
  the station's limit when full; P(wait) = sum pi(n) P(M <= n), then Exp(mu (1 - lam/lam_max)) scaled
  by (1 + c_L^2)/2; least_loaded pools share one wall; where max_batch binds first, M = max_batch
  (the hard cap, scaled to the limit). Without a KV capacity (a max_batch cap only), the decode
  station's slot wait (:func:`qmodel.stations.decode.admission_wait`) at capacity 1 - rho_p. Added to
  TTFT as independent. Replay (issue 15 item 8: OPT-13B, 2 x A100 TP2, DistServe vLLM fit, ShareGPT
  < 2048 tokens, ~50k KV tokens per instance, 4.5 req/s): TTFT p90 1.95 s, mean 0.615 s against the
  replay's 1.2-4.5 s and 0.51-1.32 s (six seeds; the hard-cap slot wait gave 0.92 and 0.41 s);
  docs/methods.md ("KV admission: the soft wall").

Bursty arrivals (``ca2`` > 1): the stream is replaced by a batch-Poisson one with geometric batches of
mean m = 1 + (U(t) - lam t), the excess of the Gamma renewal function with that SCV over the mean
prompt-backlog busy period t (:func:`burst_batch_mean`; m -> (1 + ca2)/2 for long windows, the batch
stream with the same index of dispersion of counts). Then the prefill wait is M^X/G/1
(:func:`batch_wait`: P-K wait of whole bursts, plus the marginal prefill cost of the burst members
ahead, which share the iteration), busy periods start at rate lam (1 - rho_p)/m with the M^X/G/1
moments, and the burst members behind the request stall its decode (own window). Against the step
DES (Gamma CV 2, 0.3 of the limit): TTFT mean/p50/p90/p99 −8.7/−16.5/−5.2/+5.9% (Poisson-only
treatment: −28/−46/−3/+74%), TPOT mean/p90/p99 −10/−13/−22% (was −24/−30/−62%); at 0.6 of the
limit TPOT mean −28%, p99 −51% (still low). Against the replay (llama-3.1-8b/H100 x2 least_loaded,
Azure conv, Gamma CV 2) TTFT p50/p90/p99 −22/−15/−6% at 0.3 of the limit, −30/−15/−3% at 0.5,
−7/+19/+35% at 0.9 (the body too light, the tail too heavy: docs/validation.md finding 2), TPOT
within ±7% up to 0.5. ca2 < 1: the TTFT is that of Poisson arrivals (smoother arrivals meet a
prefill less often: conservative). The TTFT for ca2 > 1 is the gated (Poisson) law plus, quantile by
quantile, what the burst form adds over its own m = 1 limit (:func:`burst_increment`), so it is
continuous at ca2 = 1 and non-decreasing in ca2 (the burst form alone jumped there: Gamma cv 1.000
-> 1.001 moved TTFT p90/p99 by -17..+14%). Replay, Gamma CV 2 (llama3-8b-colocated-h100 example at
10 req/s; OPT-13B colocated example at 1.5 req/s), TTFT mean/p50/p90/p99: −12/−34/−10/+19% and
−10/−22/−9/−7% (the burst form alone: −15/−35/−9/+12% and −8/−21/−8/−2%).

Joint stability (work-conserving, Li–Dai–Peng form): lam E[L] beta_inf + rho_p(lam) < 1 with the
batching above (between the unbatched lam (E[T_1] + E[L] beta) < 1 and full token-budget batches),
beta_inf the asymptotic decode slope (or t_d(N_max)/N_max with a slot cap).
Accuracy against the step-level DES (2 x 20000 s, rho_p = 0.12/0.24/0.35/0.53): TPOT mean
+0.3/−0.3/−1.7/−5.4%, p90 0.0/−1.1/−2.8/−7.0%, p99 −2.5/+0.3/−5.7/−10.9% (TTFT: see above); Gamma
CV 2 at 0.3/0.6 of the limit: mean −2.8/−13.6%, p90 −6.7/−14.4%, p99 −3.3/−23.8%. Against the replay
(roofline llama-3.1-8b/H100, Azure conv, 1 instance at 7.35/s, 3 seeds x 20000): TPOT mean 0.0%,
p90 −1.5%, p99 −3.3%. least_loaded pools: TPOT is modelled as for a random split, while the
replay's dispatch (fewest outstanding tokens, reserved KV included) steers prompts away from the
instance whose decodes are running: there TPOT runs high (qwen2.5-32b, Azure code, 2 instances:
mean +9% for the longest outputs; with random dispatch mean −7..−1%, p90 −7..+2% at every output length).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, NamedTuple

import numpy as np

from qmodel.dist import GridDist, convolve, fast_len as _fast_len, mixture, stochastic_max
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import StationSolution
from qmodel.stations.admission import KVWall, kv_wall
from qmodel.stations.decode import GPSChain, admission_wait, mean_context_tokens, wait_law

__all__ = ["ColocatedStation", "held_prompt_tokens", "compound_poisson_pmf", "stall_tpot", "n_nodes", "decode_residual"]

_N_NODES = 5
_L_GROUPS = 10
_OWN_CLASSES = 4
#: share of requests meeting a full iteration (token budget) above which budget overflow is modelled
_FULL_SHARE = 1e-3


def compound_poisson_pmf(jump_pmf: np.ndarray, mu: np.ndarray, size: int,
                         extra: list[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """pmf on a grid of sum_{j<=K} T_j, K ~ Poisson(mu) (one row per mu), by FFT of exp(mu (phi_T - 1)).

    ``extra``: further independent compound Poisson terms (jump pmf, mu per row) added to the sum.
    """
    from scipy import fft as sfft  # local: keeps `import qmodel` light

    # The callers size the grid at mean + 12 sd + one jump, so the mass that wraps around the
    # cyclic transform is far below 1e-12; a quarter of slack (not a doubling) covers it, and a
    # 5-smooth length is as fast as a power of two.
    nfft = _fast_len(size + size // 4 + 2)
    expo = np.outer(mu, sfft.rfft(jump_pmf, nfft) - 1.0)
    for jp, m in extra or []:
        expo += np.outer(m, sfft.rfft(jp, nfft) - 1.0)
    out = sfft.irfft(np.exp(expo), nfft, axis=-1)[:, :size]
    return np.clip(out, 0.0, None)


def check_pool_inputs(name: str, prompt_tokens: np.ndarray, output_tokens: np.ndarray, instances: int, ca2: float,
                      dispatch: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate the inputs every single-pool station shares; returns (prompts, outputs) as float arrays."""
    p = np.asarray(prompt_tokens, dtype=float).ravel()
    L = np.asarray(output_tokens, dtype=float).ravel()
    if (p.size == 0 or p.size != L.size or np.any(L < 1) or np.any(p < 0) or not p.mean() > 0
            or not (np.all(np.isfinite(p)) and np.all(np.isfinite(L)))):
        raise InputError("lengths", f"{p.size} prompts / {L.size} outputs",
                         "a non-empty joint sample, uncached prompts >= 0 (mean > 0) and outputs >= 1 tokens")
    if instances < 1:
        raise InputError(f"{name}.instances", instances, "an integer >= 1")
    if not (ca2 >= 0 and math.isfinite(ca2)):
        raise InputError(f"{name}.ca2", ca2, "a finite arrival SCV >= 0 (1 = Poisson)")
    if dispatch not in ("random", "round_robin", "least_loaded"):
        raise InputError(f"{name}.dispatch", dispatch, "one of random, round_robin, least_loaded")
    return p, L


def held_prompt_tokens(name: str, prompt_tokens: np.ndarray, cached_tokens: np.ndarray | None) -> np.ndarray:
    """Prompt tokens a request holds in KV memory while it decodes: the computed (uncached) ones plus
    its prefix-cache hit, which saves prefill compute but not memory (docs/methods.md, "Prefix-cache
    hits"). Slot caps, decode contexts and least-loaded sizes use these; prefill compute does not."""
    if cached_tokens is None:
        return prompt_tokens
    c = np.asarray(cached_tokens, dtype=float).ravel()
    if c.shape != prompt_tokens.shape or np.any(c < 0) or not np.all(np.isfinite(c)):
        raise InputError(f"{name}.cached_tokens", f"{c.size} values", f"{prompt_tokens.size} finite counts >= 0")
    return prompt_tokens + c


class _TTFTGrid(NamedTuple):
    """Rate-independent pieces of the colocated TTFT on its grid (:meth:`ColocatedStation._ttft_grid`)."""

    dx: float
    own: np.ndarray  #: pmf of the own prefill T_1 (mean-kept split)
    own_law: GridDist  #: the same as a law
    marginal: np.ndarray  #: pmf of a co-batched prompt's marginal cost
    mean_marginal_s: float
    classes: list[tuple[int, int, GridDist]]  #: per own-length quarter: (count, co-batch cap, own law)
    #: least_loaded pools: (own pmf weighted exp(-S/delta), its length-weighted mean weight,
    #: own pmf weighted by winning the all-prefilling comparison); None otherwise
    least_loaded: tuple[np.ndarray, float, np.ndarray] | None


@dataclass
class ColocatedStation:
    """Colocated prefill-priority engines (formulas in the module doc)."""

    service: ServiceTimeModel
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    instances: int = 1
    max_batch_tokens: int = 8192
    kv_capacity_tokens: float | None = None
    max_batch: int | None = None
    dispatch: Literal["random", "round_robin", "least_loaded"] = "random"
    ca2: float = 1.0
    name: str = "colocated"
    #: prefix-cache hit per request (prompt_tokens are the uncached, computed ones): held in KV, not computed
    cached_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        p, L = check_pool_inputs(self.name, self.prompt_tokens, self.output_tokens, self.instances, self.ca2,
                                 self.dispatch)
        if self.max_batch_tokens < 1:
            raise InputError("colocated.max_batch_tokens", self.max_batch_tokens, "an integer >= 1")
        self.p, self.L = p, L
        self.held = held = held_prompt_tokens(self.name, p, self.cached_tokens)
        self.mean_output = float(L.mean())
        self.cv2_output = float(L.var() / self.mean_output**2)
        self.t1 = np.asarray(self.service.prefill_one_s(p), dtype=float)  # one-prompt prefill times
        self.mean_t1 = float(self.t1.mean())
        C = mean_context_tokens(held, L)
        n_max = self.max_batch
        if self.kv_capacity_tokens is not None:
            by_kv = int(self.kv_capacity_tokens // float(np.mean(held + L)))
            if by_kv < 1:
                raise InputError("colocated.kv_capacity_tokens", self.kv_capacity_tokens,
                                 "room for at least one sequence of mean prompt+output length")
            n_max = by_kv if n_max is None else min(n_max, by_kv)
        self.n_max = n_max

        def step(n: np.ndarray) -> np.ndarray:
            return np.asarray(self.service.decode_step_time_s(n, n * C), dtype=float)

        n1, n2 = 1 << 15, 1 << 16
        slope = float(step(np.array([float(n2)]))[0] - step(np.array([float(n1)]))[0]) / (n2 - n1)
        self.chain = GPSChain(step, cap=n_max, slope_inf=slope)
        # saturated prefill: full token-budget batches of b = floor(B / E[P]) prompts
        b = max(1, int(self.max_batch_tokens // max(p.mean(), 1.0)))
        tb = float(self.service.prefill_time_s(b * p.mean(), b * float(np.mean(p * p)), b))
        self.prefill_cost_sat = tb / b
        self.b_max = b
        self._ep, self._ep2 = float(p.mean()), float(np.mean(p * p))
        # Marginal cost of one more prompt in a prefill iteration: T(p + m, p^2 + m^2, 2) - T(m, m^2, 1)
        # against a batch-mate of mean length m. The iteration's fixed cost (launch overhead, the weight
        # reads that bound a small batch) is paid once per iteration, not per co-batched prompt: with
        # T_1(p) instead, co-batched prompts cost 35% too much on llama-3.1-8b/H100 (replay).
        m = self._ep
        self.marginal_s = np.maximum(
            np.asarray(self.service.prefill_time_s(p + m, p * p + m * m, 2.0), dtype=float)
            - float(self.service.prefill_time_s(m, m * m, 1.0)), 0.0)
        # Co-batching under the token budget: own prompts in 4 length classes, each with the count of
        # mean-length batch-mates that still fit beside it.
        order = np.argsort(p, kind="stable")
        self._own_classes = [(cls, max(int((self.max_batch_tokens - float(p[cls].mean())) // m), 0))
                             for cls in np.array_split(order, min(_OWN_CLASSES, len(p)))]
        # least_loaded (fewest outstanding tokens: waiting prompts + reserved KV): a request adds
        # S = P + L to its instance's load. The load gap between instances, kept small by the dispatch
        # and widened by departures, has mean E[S^2]/E[S] (balance of the two; the replay's is within
        # -13..+18% of it); the instance whose iteration holds S more is chosen w.p. ~exp(-S/delta).
        size = held + L
        self._ll_delta = float(np.mean(size * size) / max(float(size.mean()), 1e-300))
        self.decode_cost_per_token = (1.0 / (self.chain.cap / float(self.chain.g(self.chain.cap)[self.chain.cap]))
                                      if n_max is not None else slope)
        self._lam_max = self._find_lam_max()
        # L groups (log-spaced in L-1) for the TPOT quadrature; L = 1 requests have no TPOT
        multi = L >= 2
        if not np.any(multi):
            raise InputError("output_tokens", "all 1", "some requests with at least 2 output tokens (TPOT)")
        lm1 = L[multi] - 1.0
        edges = np.unique(np.geomspace(lm1.min(), lm1.max() * (1 + 1e-9), _L_GROUPS + 1))
        gi = np.clip(np.searchsorted(edges, lm1, side="right") - 1, 0, len(edges) - 2)
        groups = []
        for g in np.unique(gi):
            sel = gi == g
            inv = float(np.mean(1.0 / lm1[sel]))
            groups.append((float(sel.mean()), 1.0 / inv, float(np.mean(self.t1[multi][sel]))))
        self.groups = groups  # (weight, representative L-1 keeping E[1/(L-1)], mean own prefill)

    # ---- stability -------------------------------------------------------------------------
    def batch_time_s(self, k: float) -> float:
        """Mean time of a prefill iteration of k prompts (k may be fractional: a mean batch)."""
        return float(self.service.prefill_time_s(k * self._ep, k * self._ep2, k))

    def prefill_share(self, lam: float) -> tuple[float, float]:
        """(rho_p, mean prompts per prefill iteration) at per-instance rate lam.

        Arrivals that find a prefill running (probability rho_p, PASTA) all join the next iteration,
        which exists unless no one arrived: follow-up iterations occur at rate lam_b (1 - e^{-lam T});
        the others start one alone. So lam_b = lam (1 - rho_p) e^{lam T}, k = lam/lam_b, and
        rho_p = lam T(k)/k with T(k) the mean iteration time; solved by damped iteration, k <= b.
        """
        k = 1.0
        for _ in range(200):
            t = self.batch_time_s(k)
            rho = lam * t / k
            if rho >= 1.0:
                k_new = float(self.b_max)
            else:
                k_new = min(max(math.exp(-lam * t) / (1.0 - rho), 1.0), float(self.b_max))
            if abs(k_new - k) < 1e-10:
                break
            k = 0.5 * (k + k_new)
        return lam * self.batch_time_s(k) / k, k

    def _regulated_batch(self, lam: float, rho: float, k: float) -> tuple[float, float]:
        """(rho_p, k) with :func:`qmodel.stations.capacity.heavy_traffic_batch` (slot-capped pools only)."""
        if not self._raised:
            return rho, k
        from qmodel.stations.capacity import heavy_traffic_batch

        return heavy_traffic_batch(lam, rho, k, self.mean_output * self.decode_cost_per_token, self._lam_sat,
                                   self.b_max, self.batch_time_s)

    @cached_property
    def _onset(self) -> tuple[float, float, float]:
        """(rate, rho_p, k) where the heavy-traffic batch starts (per instance)."""
        from qmodel.stations.capacity import heavy_traffic_onset

        lam = heavy_traffic_onset(self.mean_output * self.decode_cost_per_token, self._lam_sat, self.prefill_share)
        return (lam, *self.prefill_share(lam))

    @cached_property
    def _limit_parts(self) -> tuple[float, bool]:
        """(per-instance limit, regulated): where KV or slots cap the batch, the saturated schedule's
        capacity (docs/methods.md, "Colocated stability limit"), at most the full-budget bound, with
        the heavy-traffic batch of :meth:`_regulated_batch`; else the fixed point's own limit."""
        sat = self.saturated_rate_per_s
        if not math.isfinite(sat):
            return self._lam_max, False
        full = 1.0 / (self.mean_output * self.decode_cost_per_token + self.prefill_cost_sat)
        return min(sat, full * (1.0 - 1e-9)), True

    @property
    def _raised(self) -> bool:
        return self._limit_parts[1]

    @property
    def _lam_sat(self) -> float:
        return self._limit_parts[0]

    def _find_lam_max(self) -> float:
        """Largest per-instance rate with lam E[L] d + rho_p(lam) < 1 (decode at capacity 1 - rho_p)."""
        d = self.mean_output * self.decode_cost_per_token

        def ok(lam: float) -> bool:
            return lam * d + self.prefill_share(lam)[0] < 1.0

        lo = 1.0 / (d + self.mean_t1)  # unbatched: stable below this
        hi = 1.0 / (d + self.prefill_cost_sat)  # full batches: unstable above this
        if hi <= lo or ok(hi * (1 - 1e-12)):
            return hi if ok(hi * (1 - 1e-12)) else lo
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    @cached_property
    def _saturated(self) -> tuple[float, float]:
        """(requests/s, mean decode batch) of one instance under an endless backlog
        (:func:`qmodel.stations.capacity.saturated_schedule`)."""
        from qmodel.stations.capacity import saturated_schedule

        return saturated_schedule(self.service, self.p, self.L, self.kv_capacity_tokens, self.max_batch,
                                  self.max_batch_tokens, cached_tokens=self.cached_tokens)

    @property
    def saturated_rate_per_s(self) -> float:
        """Per-instance capacity under an endless backlog (:func:`qmodel.stations.capacity.saturated_rate_per_s`)."""
        return self._saturated[0]

    @cached_property
    def _wall(self) -> KVWall | None:
        """KV admission's soft wall (:mod:`qmodel.stations.admission`), centred on the saturated
        schedule's mean batch; None without a KV capacity."""
        if self.kv_capacity_tokens is None or self.n_max is None:
            return None
        return kv_wall(self.held, self.L, self.kv_capacity_tokens, self.n_max, self._saturated[1])

    def max_stable_rate_per_s(self) -> float:
        """The saturated schedule's capacity where KV or slots cap the batch, else the fixed-point limit."""
        return self.instances * self._limit_parts[0]

    # ---- TTFT parts (Poisson or smoother arrivals) -------------------------------------------
    @cached_property
    def _ttft_grid(self) -> _TTFTGrid:
        """The TTFT grid and the laws on it that do not depend on the rate (built once per station)."""
        # 1/64 of a mean prefill (<1% of any TTFT quantile, which includes that prefill);
        # rate-independent so attainment moves monotonically with the rate
        dx = max(self.mean_t1 / 64.0, float(self.t1.max()) / 4096.0)
        # own prefill split between neighbouring grid points (mean kept; rounding up would add dx/2)
        own = _split_pmf(self.t1, dx)
        own /= own.sum()
        classes = []
        for cls, cap in self._own_classes:
            t_own = self.t1[cls]
            pmf = _split_pmf(t_own, dx)
            classes.append((len(cls), cap, GridDist(dx, pmf / pmf.sum(), float(t_own.mean()), exact=False)))
        ll = None
        if self.dispatch == "least_loaded" and self.instances > 1:
            g = np.exp(-(self.held + self.L) / max(self._ll_delta, 1e-300))
            w_all = _win_against(self.held + self.L, self.t1, self._ll_delta) ** (self.instances - 1)
            ll = (_split_pmf(self.t1, dx, g), float(np.dot(self.t1, g) / max(float(self.t1.sum()), 1e-300)),
                  _split_pmf(self.t1, dx, w_all))
        return _TTFTGrid(dx, own, GridDist(dx, own, self.mean_t1, exact=False), _split_pmf(self.marginal_s, dx),
                         float(self.marginal_s.mean()), classes, ll)

    def _gated_wait(self, rho_p: float, kbar: float, busy_dec: float, gd: np.ndarray, wd: np.ndarray
                    ) -> tuple[GridDist, tuple[np.ndarray, np.ndarray]]:
        """(wait, E[age of the operation | wait]) per grid point, for gated prefill batches.

        Every prefill iteration takes all waiting prompts (gated batch service), so a request waits
        only for the operation in progress on its instance: a prefill iteration (equilibrium residual of
        one T_1 plus Poisson(kbar - 1) marginal costs), a decode step (residual uniform on the step) or
        nothing. The operation's age at the arrival comes with it: whoever arrived during the age
        shares the request's iteration (:meth:`_cobatched_ttft`).

        Random / round-robin split: the operation in progress is the instance's time-average one
        (PASTA; round-robin is smoother than that, so this is conservative). least_loaded over c
        instances, each idle / prefilling / decoding with the time-average probabilities (p_i, p_p,
        p_d): an idle instance is chosen if there is one (its load is the smallest); among busy ones,
        if some prefill and some decode, the prefilling one is chosen with probability
        E[exp(-S/delta)] (length-weighted over the iteration; S = P + L, the tokens its prompt added to
        that instance's load) and its iteration is weighted by exp(-S/delta): the instance that took
        the last arrival was the least loaded by a gap ~ Exp(delta), and stays so only if the gap
        exceeds S. If all prefill, the one met has the smaller S + D, D a Laplace difference of scale
        delta (:func:`_win_against`). delta = E[S^2]/E[S] (see ``__post_init__``). Replay
        (llama-3.1-8b/H100 x2, Azure conv, 0.9 of the limit): arrivals meet a prefill with probability
        0.565 (model 0.570; 0.58 under random dispatch, whose mean residual met is 56 against 37.5 ms
        here); the model's wait has mean / p90 / p99 22.6 / 54.1 / 134.5 ms against the replay's
        25.5 / 64.8 / 142.7 ms (taking the all-prefilling case unsteered instead: 25.0 / 64.9 / 142.7,
        but +9 / +25% on mean / p99 with the catalog's Azure conv preset at half load, where the
        Laplace comparison gives 13.5 / 31.1 / 111.8 against 13.9 / 31.9 / 114.7 ms).
        """
        grid = self._ttft_grid
        dxs, marginal = grid.dx, grid.marginal
        p_i, p_p, p_d = max(1.0 - rho_p - busy_dec, 0.0), rho_p, busy_dec
        # the running iteration: one T_1 plus Poisson(kbar - 1) marginal costs
        mj = float(np.dot(np.arange(len(marginal)), marginal))
        extra_k = max(kbar - 1.0, 0.0)
        size_it = len(grid.own) + int(extra_k * mj + 12.0 * math.sqrt(extra_k * mj * len(marginal) + 1.0)) + len(marginal)
        extra = compound_poisson_pmf(marginal, np.array([extra_k]), size_it)[0]
        iters = [(p_p, np.convolve(grid.own, extra)[:size_it])]
        if grid.least_loaded is not None:
            own_g, eg, own_all = grid.least_loaded
            c = self.instances
            busy = 1.0 - p_i
            tp, td = (p_p / busy, p_d / busy) if busy > 0 else (0.0, 0.0)
            all_p = busy**c * tp**c
            mixed = busy**c * max(1.0 - tp**c - td**c, 0.0) * eg
            iters = [(all_p, np.convolve(own_all, extra)[:size_it]), (mixed, np.convolve(own_g, extra)[:size_it])]
            p_i = 1.0 - busy**c
            p_p = all_p + mixed
            p_d = max(1.0 - p_i - p_p, 0.0)
        res_parts = [(w, *_equilibrium_residual(it / it.sum(), dxs)) for w, it in iters if w > 0]
        dres = decode_residual(gd, wd, 1.0, 1.0, dxs).pmf
        n = max([len(dres)] + [len(r) for _, r, _, _ in res_parts])
        xk = np.arange(len(dres)) * dxs
        # decode step t (weights wd): residual density 1/t on [0, t), age t - x there
        ahead = xk[:, None] < gd[None, :]
        dens = (wd / gd)[None, :] * ahead
        gap = np.where(ahead, gd[None, :] - xk[:, None], 0.0)
        den = dens.sum(axis=1)
        inv_den = np.where(den > 0, 1.0 / np.maximum(den, 1e-300), 0.0)
        age_d = (dens * gap).sum(axis=1) * inv_den
        age2_d = (dens * gap * gap).sum(axis=1) * inv_den
        pmf = np.zeros(n)
        pmf[0] = p_i
        pmf[: len(dres)] += p_d * dres
        age_mass = np.zeros(n)
        age_mass[: len(dres)] += p_d * dres * age_d
        age2_mass = np.zeros(n)
        age2_mass[: len(dres)] += p_d * dres * age2_d
        mean = p_d * float(np.dot(wd, gd)) / 2.0
        for w, res, (age_r, age2_r), mean_r in res_parts:
            pmf[: len(res)] += w * res
            age_mass[: len(res)] += w * res * age_r
            age2_mass[: len(res)] += w * res * age2_r
            mean += w * mean_r
        inv = np.where(pmf > 1e-300, 1.0 / np.maximum(pmf, 1e-300), 0.0)
        return GridDist(dxs, pmf, mean, exact=False), (age_mass * inv, age2_mass * inv)

    def _cobatched_ttft(self, wait: GridDist, age: tuple[np.ndarray, np.ndarray], lam: float
                        ) -> tuple[GridDist, float]:
        """(TTFT, share of requests whose iteration is full), TTFT = W + co-batched prompts' marginal
        costs + own T_1.

        The request's iteration holds everyone who arrived during the operation it waited for, before
        it (the age A) and after it (the wait W): K ~ Poisson(lam (A + W)) given W, A from
        :meth:`_gated_wait`. (Matching the mean by Poisson(2 lam W) put far too many into a long
        wait, whose operation is mostly already past, and too few into a short one.) The token
        budget caps K beside an own prompt of length P at (B - P) // E[P] mean-length prompts, per
        quarter of the own-length distribution; when no cap can bind, one transform serves all.
        """
        grid = self._ttft_grid
        dxs, marginal, mean_marg = grid.dx, grid.marginal, grid.mean_marginal_s
        caps = [cap for _, cap, _ in grid.classes]
        mu_hi = lam * (wait.n * dxs + float(age[0].max(initial=0.0)) + 6.0 * math.sqrt(float(age[1].max(initial=0.0))))
        if min(caps) > 0 and _poisson_sf(min(caps), mu_hi) < 1e-12:
            return convolve(_add_arrivals_during(wait, lam, marginal, mean_marg, dxs, age=age), grid.own_law), 0.0
        parts, weights, full = [], [], 0.0
        for count, cap, own in grid.classes:
            st: dict = {}
            # an own prompt that fills the budget alone takes no batch-mate: whoever arrives meanwhile
            # overflows into the next iteration, so its "full" share is P(K >= 1)
            wc = _add_arrivals_during(wait, lam, marginal, mean_marg, dxs, age=age, kmax=max(cap, 1), stats=st)
            full += count * st.get("full", 0.0)
            parts.append(convolve(wc if cap > 0 else wait, own))
            weights.append(count)
        return mixture(parts, weights), full / max(sum(weights), 1)

    @cached_property
    def _bulk(self):
        """The same engines as a prefill-only bulk-service pool (the disaggregated prefill station:
        M/G^[b]/1 chain under the token budget, same dispatch), for :meth:`_with_overflow`. Through a
        pipeline its batch leaves after one stage time, as in the gated form (qmodel/build.py
        ``pipeline_warnings``): the stage model, whose prefill times are the instance's."""
        from qmodel.perf.pipeline import stage_model
        from qmodel.stations.prefill import PrefillStation

        return PrefillStation(instances=self.instances, service=stage_model(self.service), prompt_tokens=self.p,
                              max_batch_tokens=float(self.max_batch_tokens), dispatch=self.dispatch,
                              ca2=min(self.ca2, 1.0), own_batch_times=False)

    def _with_overflow(self, ttft: GridDist, rate_per_s: float) -> GridDist:
        """The gated TTFT or the bulk-service pool's, whichever is stochastically larger at each point.

        The gated form lets every batch take all who wait; when prompts arrive faster than an
        iteration's token budget clears them (long prompts near saturation), batches overflow and a
        backlog of full iterations builds, which only the bulk-service chain of the prefill station
        carries (it has no decode steps and no load steering, which the gated form has). Each
        misses delay the other has, so the TTFT is their stochastic maximum (CDF = min of the two).
        Replay, qwen2.5-32b/H200 x2 least_loaded (Azure code, prompts 2,048 tokens on average
        against an 8,192-token budget), at 0.8 / 0.9 / 0.95 of the limit: TTFT p90/p99 −15/−25,
        −36/−49, −57/−67% with the gated form alone, +25/+35, +38/+42, +32/+32% with the maximum (the
        bulk chain's least_loaded treatment is conservative); llama-3.1-8b (Azure conv) only moves in
        the far tail (p99 at 0.9 of the limit +4 -> +11% with the catalog's length preset).
        """
        try:
            bulk = self._bulk.solve(rate_per_s).delay
        except (UnstableError, NumericalError):
            return ttft  # the prefill-only pool is stable further than the colocated one; never here
        return stochastic_max(ttft, bulk)

    def _slot_wait(self, pi: np.ndarray, tail: float, rc: float, tok: float, capacity: float, dx: float
                   ) -> GridDist | None:
        """Wait for KV or a slot before the prefill: the soft-wall population chain of
        :class:`qmodel.stations.admission.KVWall` where KV binds (the hard-cap slot wait of
        :func:`qmodel.stations.decode.admission_wait` where max_batch binds, or where the wall's chain
        is unstable at this rate)."""
        cap = self.chain.cap
        if cap is None:
            return None
        g = self.chain.g(cap)
        if self._wall is not None:
            pool = self.instances if self.dispatch == "least_loaded" else 1
            soft = self._wall.slot_wait(g, tok, capacity, self.mean_output, self.cv2_output, pool,
                                        full_rate_per_s=self._lam_sat)
            if soft is not None:
                return wait_law(*soft, dx)
        m = len(pi) - 1
        return admission_wait(pi, tail, rc, cap, float(g[min(cap, m)]), self.mean_output, self.cv2_output, dx,
                              capacity=capacity)

    def _heavy_traffic_wait(self, lam: float, extra_k: float) -> GridDist | None:
        """Wait before admission once the backlog grows the batch (kbar > the fixed point's): the slot
        wait frozen at the onset of heavy traffic, plus an exponential wait of mean extra_k / lam (the
        prompts the backlog holds to form the larger batch). Continuous in the rate at the onset."""
        lam_s, rho_s, _ = self._onset
        tok_s = lam_s * self.mean_output / (1.0 - rho_s)
        dx = self._ttft_grid.dx
        parts = []
        if tok_s > 0 and self.chain.rho_cap(tok_s) < 1.0:
            pi, tail, rc = self.chain.solve(tok_s, 64 + int(20 * math.sqrt(tok_s * 1e-2 + 1) + 4 * tok_s * self.chain.g(1)[1]))
            cap = self.chain.cap if self.chain.cap is not None else 1 << 62
            g = self.chain.g(len(pi))
            adm = self._slot_wait(pi, tail, rc, tok_s, 1.0 - rho_s, dx)
            if adm is not None:
                parts.append(adm)
        mean = extra_k / lam
        if mean > 0:
            n = int(math.ceil(30.0 * mean / dx)) + 2
            x = np.arange(n) * dx
            parts.append(GridDist.from_cdf_values(-np.expm1(-x / mean), dx, mean, tail_rate=1.0 / mean, exact=False))
        return convolve(*parts) if parts else None

    # ---- solve -----------------------------------------------------------------------------
    def solve(self, rate_per_s: float) -> StationSolution:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "a positive finite arrival rate")
        lam_max = self.max_stable_rate_per_s()
        lam = rate_per_s / self.instances
        rho_fp, k_fp = self.prefill_share(lam)
        rho_p, kbar = self._regulated_batch(lam, rho_fp, k_fp)
        load = rate_per_s / lam_max
        if load >= 1.0 or rho_p >= 1.0:
            raise UnstableError(self.name, max(load, rho_p), rate_per_s, lam_max, "prefill + decode work")
        tok = lam * self.mean_output / (1.0 - rho_p)
        if self.chain.rho_cap(tok) >= 1.0:
            raise UnstableError(self.name, self.chain.rho_cap(tok), rate_per_s, lam_max,
                                "decode at capacity 1 - rho_p")
        pi, tail, rc = self.chain.solve(tok, 64 + int(20 * math.sqrt(tok * 1e-2 + 1) + 4 * tok * self.chain.g(1)[1]))
        m = len(pi) - 1
        g = self.chain.g(m + 1)
        n = np.arange(m + 1)
        mean_n = float(np.dot(n, pi))
        nodes, wts = n_nodes(pi)
        cap = self.chain.cap if self.chain.cap is not None else 1 << 62
        td = np.array([float(np.interp(min(v + 1, cap), np.arange(len(g)), g)) for v in nodes])

        # ---- TPOT: compound Poisson stalls on a grid --------------------------------------------
        # Stalls in the decode life come as iterations of kbar prompts at rate lam/kbar; the prompts
        # queued during the request's own prefill are counted one by one (K_0 term).
        ll = self.dispatch == "least_loaded"
        c_ll = self.instances if ll else 1
        m_burst = burst_batch_mean(self.ca2, self.instances, ll, lam, rho_p / (lam * (1.0 - rho_p)))
        work = self.t1 * (rho_p / (lam * self.mean_t1))
        bp = _busy_period_stalls(work, work, rho_p, m_burst)
        # bursty arrivals: the burst members behind the request on its instance (floor(J/c),
        # J ~ Geometric_0(1 - 1/m)) are prefilled right after it and stall its decode from the start;
        # added to the own window as their mean count (seconds of arrivals at rate lam)
        qb = (1.0 - 1.0 / m_burst) ** c_ll
        behind_s = qb / (1.0 - qb) / lam
        # The prompts queued behind the request when its prefill ends (and its burst members) are
        # prefilled before its next decode step, and so is everything that arrives meanwhile: each
        # starts a prefill busy period (mean x/(1 - rho_p) for initial work x), not a lone stall.
        own_bp = _busy_period_stalls(self.t1, self.t1, rho_p, points=_OWN_BP_POINTS)
        tpot = stall_tpot(lam, self.groups, wts, td, [rho_p] * len(td), [own_bp] * len(td),
                          node_own=[behind_s] * len(td),
                          node_life_jumps=[bp] * len(td), node_life_rate=[(1.0 - rho_p) / m_burst] * len(td),
                          dx0=float(self.chain.g(1)[1]) / 200.0)
        mean_tpot = tpot.mean_s


        # ---- TTFT: wait for the operation in progress + co-batched prompts + own prefill ---------
        busy_dec = (1.0 - rho_p) * (1.0 - float(pi[0]))
        # decode residual: uniform on t_d(N) for N >= 1 (mean-field over N nodes)
        keep = pi[1: m + 1] > 1e-14 * float(pi.max())  # states with no mass add nothing but cost
        gd = g[1: m + 1][keep]
        wd = pi[1: m + 1][keep]
        wd = wd / max(float(wd.sum()), 1e-300)
        wait, age = self._gated_wait(rho_p, kbar, busy_dec, gd, wd)
        ttft, full = self._cobatched_ttft(wait, age, lam)
        if full > _FULL_SHARE:
            ttft = self._with_overflow(ttft, rate_per_s)
        if m_burst > 1.0:
            grid = self._ttft_grid
            dxs, marginal = grid.dx, grid.marginal
            # Bursty arrivals as geometric batches: prefill is the high class of a non-preemptive
            # priority queue over decode steps, an M^X/G/1 wait of whole bursts (the burst members ahead
            # of the request on its instance share its iteration: marginal cost), plus the decode
            # residual stretched by 1/(1 - rho_p) (the prefill work that arrives during it).
            busy_frac = busy_dec / max(1.0 - rho_p, 1e-300)  # P(decode running | no prefill running)
            dec = decode_residual(gd, wd, 1.0 - rho_p, busy_frac, dxs)

            def burst(mb: float) -> tuple[GridDist, GridDist]:
                w_b = convolve(batch_wait(grid.own, dxs, rho_p, mb, c_ll, member=marginal, sides=1), dec)
                # Prompts arriving while the request waits join its batch (FCFS order puts the earlier
                # ones in W already): given W = w, K ~ Poisson(lam w), each adding its marginal cost.
                return w_b, convolve(_add_arrivals_during(w_b, lam, marginal, grid.mean_marginal_s, dxs), grid.own_law)

            # The burst form's own Poisson limit (m = 1, the priority M/G/1 form) is not the gated form
            # (TTFT p90 -5..+5%, p99 -10..+14% apart on the examples), so switching forms at ca2 = 1 made
            # TTFT jump there. The burst form supplies only what bursts add over its Poisson limit, quantile
            # by quantile, on top of the gated law: Q(u) = Q_gated(u) + (Q_m(u) - Q_1(u))^+. m -> 1 as
            # ca2 -> 1, so every percentile is continuous there, and non-decreasing in ca2.
            w1, t1 = burst(1.0)
            wm, tm = burst(m_burst)
            ttft = burst_increment(ttft, tm, t1)
            wait = burst_increment(wait, wm, w1)
        # KV admission: at the slot cap (KV or max_batch) a prompt waits for a free slot before its
        # prefill; the wait of the capped chain at decode capacity 1 - rho_p, added as independent
        if kbar > k_fp:
            adm = self._heavy_traffic_wait(lam, kbar - k_fp)
        else:
            adm = self._slot_wait(pi, tail, rc, tok, 1.0 - rho_p, self._ttft_grid.dx)
        if adm is not None:
            ttft, wait = convolve(adm, ttft), convolve(adm, wait)
        resid = wait
        lam_notes = [
            "TPOT: GPS at capacity (1-rho_p) + busy-period-clustered prefill stalls + K_0 inspection term "
            "(vs DES at rho_p<=0.53: mean −5..0%, p90 −7..0%, p99 −11..0%; the tail runs low as rho_p grows)",
            "TTFT: wait for the operation in progress (gated prefill batches) + prompts co-batched over its age and "
            "the wait (token budget per own-prompt quarter) + own prefill; budget overflow into a later iteration "
            "is not modelled (optimistic near saturation with random dispatch)" if m_burst <= 1.0 else
            "TTFT: bursts as an M^X/G/1 priority wait over decode steps + prompts co-batched while waiting + own "
            "prefill (approximate)",
        ]
        if self.n_max is not None:
            lam_notes.append(f"slot cap {self.n_max}/instance in the decode chain; TTFT adds the wait for memory or a slot "
                             + (f"(KV soft wall: the pool holds {self._wall.centre:.1f} +- {self._wall.sd:.1f} residents; "
                                "wait M/M/1-like at capacity 1 - rho_p, scaled by (1 + c_L^2)/2)" if self._wall is not None
                                else "(M/M/1-like queue beyond the cap at capacity 1 - rho_p, scaled by (1 + c_L^2)/2)"))
        if self.instances > 1 and self.dispatch == "least_loaded":
            lam_notes.append(f"{self.instances} instances, least_loaded (outstanding tokens): idle instances first, "
                             f"prefilling ones met less and their long iterations less (load gap scale "
                             f"{self._ll_delta:.0f} tokens); TPOT as for a random split" if m_burst <= 1.0 else
                             f"{self.instances} instances, least_loaded: burst wait P(wait) = Erlang C(c, c rho_p), "
                             "conditional wait / c (M/G/c-like approximation of join-the-shortest-queue)")
        elif self.instances > 1:
            lam_notes.append(f"{self.instances} instances: {self.dispatch} treated as a random split (lam/c each)")
        return StationSolution(
            name=self.name,
            utilization=float(load),
            max_stable_rate_per_s=float(lam_max),
            delay=ttft,
            wait=resid,
            tpot=tpot,
            mean_in_system=(mean_n + lam * (ttft.mean_s)) * self.instances,
            method="prefill-priority: GPS at capacity 1-rho_p + compound-Poisson stalls (FFT)",
            exact=False,
            notes=tuple(lam_notes),
            extra={"rho_p": rho_p, "mean_prefill_batch": kbar, "mean_n_decode": mean_n, "x": tok * self.chain.slope_inf,
                   "mean_tpot_s": float(mean_tpot), "busy_fraction": rho_p + busy_dec,
                   "prefill_cost_saturated_s": self.prefill_cost_sat,
                   "mean_slot_wait_s": adm.mean_s if adm is not None else 0.0},
        )


_INCREMENT_POINTS = 8192


def burst_increment(base: GridDist, burst: GridDist, limit: GridDist) -> GridDist:
    """The law with quantile function Q_base(u) + (Q_burst(u) - Q_limit(u))^+ (made non-decreasing):
    ``base`` plus, comonotonically, what ``burst`` adds over its own Poisson ``limit``; exactly
    ``base`` when burst = limit, continuous and non-decreasing in ``burst`` (usual stochastic order).

    Evaluated at 8192 equal-probability midpoints u of base's grid mass, plus one midpoint in every
    grid cell of base too light to hold one of them. Each cell's mass is shared equally by the points
    that fall in it and moves with them from the cell to cell + increment (split between the two
    neighbouring grid points, so a small increment moves a little mass, not a whole step). The mass
    moved is exactly base's, point by point, so the result is a law (no negative mass to clip) and a
    larger increment at every u gives a stochastically larger result; base's tail past its grid is kept.
    """
    c = np.cumsum(base.pmf)
    u = (np.arange(_INCREMENT_POINTS) + 0.5) / _INCREMENT_POINTS * (1.0 - base.tail)
    cell = np.minimum(np.searchsorted(c, u - 1e-12), base.n - 1)
    counts = np.bincount(cell, minlength=base.n)
    lone = np.flatnonzero((counts == 0) & (base.pmf > 0))
    if lone.size:
        lo = np.concatenate(([0.0], c[:-1]))
        u = np.concatenate((u, 0.5 * (lo[lone] + c[lone])))
        cell = np.concatenate((cell, lone))
        order = np.argsort(u, kind="stable")
        u, cell = u[order], cell[order]
        counts = np.bincount(cell, minlength=base.n)
    weight = base.pmf[cell] / counts[cell]
    qb = cell * base.dx
    qm, q1 = (_quantiles(d, u) for d in (burst, limit))
    vals = np.maximum.accumulate(qb + np.maximum(qm - q1, 0.0))
    if not np.any(vals > qb):
        return base
    pmf = _split_pmf(vals, base.dx, weights=weight)
    # the mean from the exact means kept beside the grids (E[(Q_m - Q_1)^+] = E[burst] - E[limit]
    # where burst >= limit in the usual stochastic order, as a larger burst is)
    return GridDist(base.dx, pmf, base.mean_s + max(burst.mean_s - limit.mean_s, 0.0), tail=base.tail,
                    tail_rate=min(base.tail_rate, burst.tail_rate), exact=False)


def _quantiles(d: GridDist, u: np.ndarray) -> np.ndarray:
    """GridDist.quantile at every u (sorted), vectorised: grid points, then the exponential tail."""
    c = np.cumsum(d.pmf)
    k = np.searchsorted(c, u - 1e-12)
    out = k * d.dx
    past = k >= d.n
    if np.any(past):
        end = (d.n - 1) * d.dx
        if math.isfinite(d.tail_rate) and d.tail > 0:
            out[past] = end + np.log(d.tail / np.maximum(1.0 - u[past], 1e-300)) / d.tail_rate
        else:
            out[past] = end
    return out


def _grid_pmf(values: np.ndarray, dx: float) -> np.ndarray:
    """Equal-weight sample -> pmf on a grid (rounded up)."""
    pmf = np.bincount(np.ceil(values / dx - 1e-9).astype(np.int64), minlength=2).astype(float)
    return pmf / pmf.sum()


#: largest number of grid steps the Pollaczek–Khinchine transform spans (see _pk_wait)
_PK_MAX_BINS = 1 << 15


def _pk_wait(residual: GridDist, rho: float) -> GridDist:
    """M/G/1 FCFS wait: sum_k (1 - rho) rho^k R^{*k} (Pollaczek–Khinchine), by FFT on a padded grid.

    The grid reaches well past the mean (the tail is geometric-compound, decaying at least like
    rho^k), so the wrap-around mass of the cyclic FFT is below 1e-12 for rho <= 0.9; beyond
    _PK_MAX_BINS steps of the residual's grid the transform runs on a coarser step instead.
    """
    er = residual.mean_s
    mean_w = rho * er / (1.0 - rho)
    span = mean_w * 60.0 + residual.n * residual.dx * 4.0
    from scipy import fft as sfft

    if span / residual.dx > _PK_MAX_BINS:
        # A wait hundreds of residuals long (high load) does not need the residual's own step: put
        # the residual on a coarser one, each bin's mass split between the two nearest coarse
        # points (mean kept exactly; rounding up would bias W by K·dx/2 with K ~ 1/(1 - rho) terms).
        # The transform then covers the whole span in at most _PK_MAX_BINS points; before, up to
        # 2^18 points covered only part of it and the rest of the compound-geometric tail wrapped
        # around. The step is a power-of-two multiple of the residual's: constant over wide ranges
        # of the rate, so attainment moves monotonically with the rate under a goodput search.
        dxc = residual.dx * 2.0 ** math.ceil(math.log2(span / residual.dx / _PK_MAX_BINS))
        residual = residual.regrid(dxc, keep_mean=True)
    size = min(_fast_len(int(span / residual.dx) + 2), 1 << 18)
    phi = sfft.rfft(residual.pmf, size)
    pmf = np.clip(sfft.irfft((1.0 - rho) / (1.0 - rho * phi), size), 0.0, None)
    if pmf[0] > 1.0 - rho:
        # P(W = 0) is exactly 1 - rho. A residual below one coarse step keeps part of its mass at
        # 0, which inflates the atom: that excess is waits shorter than a step, moved to the first.
        pmf[1] += pmf[0] - (1.0 - rho)
        pmf[0] = 1.0 - rho
    keep = int(min(size, 1 << 16))
    pmf = pmf[:keep]
    tail = max(0.0, 1.0 - float(pmf.sum()))
    # drop the far bins that carry < 1e-12 in all (60 means of headroom is mostly empty): every later
    # convolution and the co-batching transform then run on the part that matters
    c = np.cumsum(pmf[::-1])
    drop = int(np.searchsorted(c, 1e-12))
    if 0 < drop < len(pmf):
        pmf = pmf[: len(pmf) - drop].copy()
        pmf[-1] += c[drop - 1]
    return GridDist(residual.dx, pmf, mean_w, tail=tail, tail_rate=(1.0 - rho) / max(er, 1e-300), exact=False)


def n_nodes(pi: np.ndarray, k: int = _N_NODES) -> tuple[list[float], np.ndarray]:
    """Quadrature nodes of N: conditional means within k equal-probability strata (keeps E[N] exact).

    A state straddling a stratum boundary is split between the two strata, so the nodes move
    continuously with the rate (no jumps when a boundary crosses an integer state).
    """
    p = pi / float(pi.sum())
    hi_c = np.cumsum(p)
    lo_c = hi_c - p
    q = np.linspace(0.0, 1.0, k + 1)
    share = np.clip(np.minimum(hi_c[None, :], q[1:, None]) - np.maximum(lo_c[None, :], q[:-1, None]), 0.0, None)
    w = share.sum(axis=1)
    nodes = (share @ np.arange(len(p), dtype=float)) / np.maximum(w, 1e-300)
    keep = w > 0
    return [float(v) for v in nodes[keep]], w[keep] / w[keep].sum()


def stall_tpot(lam: float, groups: list[tuple[float, float, float]], node_w: np.ndarray, node_td: np.ndarray,
               node_rho: list[float], node_jumps: list[np.ndarray],
               node_cap: list[float] | None = None, node_own: list[float] | None = None,
               node_life_jumps: list[np.ndarray] | None = None,
               node_life_rate: list[float] | None = None, dx0: float | None = None) -> GridDist:
    """TPOT = t_n + S/(L-1) with S = S_life + S_own, independent compound Poisson sums:

    S_own: K_0 ~ Poisson(lam (T_own + own_n)) jumps X (the prompts queued behind the request);
    S_life: K ~ Poisson(lam r_n D), D = (L-1) t_n/(1-rho_n), jumps Y (``node_life_jumps``, default X,
    with rate factor r_n, default 1: clustered stalls, e.g. whole prefill busy periods, use r_n < 1).

    ``groups``: (weight, representative L-1, mean own prefill time); per N node n: weight, decode step
    t_n, capacity loss rho_n and samples of the stalls (equal weights). Each L group gets its own S
    grid: S enters TPOT divided by L-1, so a step of dx (L-1) on S is a step of dx on TPOT; the grid
    reaches mean + 12 sd of S plus one jump. ``node_cap``: an upper bound on TPOT per node (chunked:
    every iteration emits a token, so TPOT <= the longest iteration); the mean is then taken from the
    capped grid. ``node_own``: per node, seconds added to the own-prefill window. ``dx0``: a
    rate-independent base grid step (the grid is dx0 2^j, j the smallest that fits 60000 points), so
    that attainment P(TPOT <= y) moves monotonically with the rate instead of with a rescaled grid.
    """
    nn = len(node_td)
    own = [0.0] * nn if node_own is None else list(node_own)
    life = node_jumps if node_life_jumps is None else node_life_jumps
    rate = [1.0] * nn if node_life_rate is None else list(node_life_rate)

    memo: dict[int, tuple[float, float, float]] = {}

    def mom(x: np.ndarray) -> tuple[float, float, float]:
        # nodes usually share one sample array: its moments once per array, not once per node
        if id(x) not in memo:
            memo[id(x)] = (float(x.mean()), float(np.dot(x, x)) / len(x), float(x.max()))
        return memo[id(x)]

    m_own = [mom(x) for x in node_jumps]
    m_life = [mom(x) for x in life]
    split_memo: dict[tuple[int, float], np.ndarray] = {}

    def split(x: np.ndarray, step: float) -> np.ndarray:
        # L groups whose grid step hits the same floor (short outputs) reuse one discretised jump law
        key = (id(x), step)
        if key not in split_memo:
            split_memo[key] = _split_pmf(x, step)
        return split_memo[key]
    mean_tpot = 0.0
    for gw, lm1, tp in groups:
        for j in range(nn):
            d_life = lm1 * node_td[j] / (1 - node_rho[j])
            s_mean = lam * rate[j] * d_life * m_life[j][0] + lam * (tp + own[j]) * m_own[j][0]
            mean_tpot += gw * node_w[j] * (node_td[j] + s_mean / lm1)
    dx = mean_tpot / 400.0 if dx0 is None else dx0
    # blocks of rows sharing one S grid: (weights, lm1, t_n per row, dx_s, pmf rows, caps per row)
    rows: list[tuple[np.ndarray, float, np.ndarray, float, np.ndarray, np.ndarray]] = []
    caps = [math.inf] * nn if node_cap is None else list(node_cap)
    hi_t = 0.0
    keyed: dict[tuple[int, int], list[int]] = {}
    for j in range(nn):
        keyed.setdefault((id(node_jumps[j]), id(life[j])), []).append(j)
    for gw, lm1, tp in groups:
        for idx in keyed.values():
            j0 = idx[0]
            (eo, eo2, xo), (el, el2, xl) = m_own[j0], m_life[j0]
            if eo <= 0 and el <= 0:
                for j in idx:
                    rows.append((np.array([gw * node_w[j]]), lm1, np.array([float(node_td[j])]), 1.0,
                                 np.ones((1, 1)), np.array([caps[j]])))
                    hi_t = max(hi_t, float(node_td[j]))
                continue
            mu_o = np.array([lam * (tp + own[j]) for j in idx])
            mu_l = np.array([lam * rate[j] * lm1 * node_td[j] / (1 - node_rho[j]) for j in idx])
            small = min(v for v in (eo, el) if v > 0)
            xmax = max(xo, xl)
            need = max(dx * lm1, small / 64.0, xmax / 1024.0)
            # power-of-two multiples of the own-jump scale keep the S grid fixed between nearby rates
            base = small / 64.0
            dxs = base * 2.0 ** math.ceil(math.log2(need / base) - 1e-12)
            comps = []
            for x, mu in ((node_jumps[j0], mu_o), (life[j0], mu_l)):
                comps.append((split(x, dxs), mu))
            mean_s = float(np.max(mu_o * eo + mu_l * el))
            var_s = float(np.max(mu_o * eo2 + mu_l * el2))
            s_hi = mean_s + 12 * math.sqrt(var_s) + xmax
            size = int(min(math.ceil(s_hi / dxs) + 2, 1 << 16))
            cp = compound_poisson_pmf(comps[0][0], comps[0][1], size, extra=[comps[1]])
            rows.append((np.array([gw * node_w[j] for j in idx]), lm1, np.array([float(node_td[j]) for j in idx]),
                         dxs, cp, np.array([caps[j] for j in idx])))
            for j in idx:
                hi_t = max(hi_t, min(float(node_td[j]) + (size - 1) * dxs / lm1, caps[j]))
    if dx0 is None:
        dx = max(dx, hi_t / 60000.0)
    else:
        dx = dx0 * 2.0 ** max(0, math.ceil(math.log2(hi_t / (60000.0 * dx0))))
    nt = int(math.ceil(hi_t / dx)) + 2
    pmf = np.zeros(nt)
    capped_mean = 0.0
    for w, lm1, tdn, dxs, block, cap in rows:
        # one binning per block of rows (TPOT = t_n + S/(L-1), capped) instead of one per row
        v = np.minimum(tdn[:, None] + np.arange(block.shape[1]) * (dxs / lm1), cap[:, None])
        fin = np.isfinite(cap)
        if np.any(fin):
            capped_mean += float(np.dot(w[fin], np.einsum("ij,ij->i", v[fin], block[fin])))
        k = np.minimum(np.ceil(v / dx - 1e-9).astype(np.int64), nt - 1)
        pmf += np.bincount(k.ravel(), weights=(w[:, None] * block).ravel(), minlength=nt)
    if node_cap is not None:
        mean_tpot = capped_mean / max(float(pmf.sum()), 1e-300)
    lost = max(0.0, 1.0 - float(pmf.sum()))
    return GridDist(dx, pmf, float(mean_tpot), tail=lost, tail_rate=1.0 / max(mean_tpot, 1e-12), exact=False)


def _split_pmf(values: np.ndarray, dx: float, weights: np.ndarray | None = None) -> np.ndarray:
    """Equal-weight sample -> pmf on a grid, each value split between its two neighbouring points so
    the mean is kept exactly (a compound sum of many jumps would otherwise inherit a rounding bias per
    jump; the split only adds at most dx^2/4 variance per jump). ``weights``: per-value weights
    (unnormalised) instead of equal ones."""
    u = np.maximum(values, 0.0) / dx
    k = np.floor(u).astype(np.int64)
    f = u - k
    w = 1.0 / len(u) if weights is None else weights
    pmf = np.bincount(k, weights=(1.0 - f) * w, minlength=int(k.max()) + 2)
    pmf += np.bincount(k + 1, weights=f * w, minlength=len(pmf))[: len(pmf)]
    return pmf


_BP_POINTS = 1024
_OWN_BP_POINTS = 256  # strata of the own-window busy period (its top one at the 0.998 quantile)


def _busy_period_stalls(work: np.ndarray, stall: np.ndarray, rho: float, batch_mean: float = 1.0,
                        points: int = _BP_POINTS) -> np.ndarray:
    """Stall added by one whole prompt-backlog busy period (deterministic quantile sample).

    Prompt backlogs form M/G/1 busy periods B that start at rate lam (1 - rho), with
    E[B] = E[S]/(1 - rho) and E[B^2] = E[S^2]/(1 - rho)^3 (Takacs). B is represented by the gamma law
    with those two moments at the mid-point quantiles of 1024 strata, and its stall is B E[X]/E[S].
    Clustering the stalls this way keeps their mean (lam D E[X]) and carries the busy-period
    correlation that independent per-prompt stalls miss.

    ``batch_mean`` m > 1 (bursty arrivals as geometric batches, :func:`burst_batch_mean`): busy periods
    of M^X/G/1 start at rate lam (1 - rho)/m (the caller's rate factor) and have the moments above
    with S replaced by the batch work S_b: E[S_b] = m E[S], E[S_b^2] = m E[S^2] + 2m(m-1) E[S]^2.
    """
    from scipy.special import gammaincinv  # local: keeps `import qmodel` light

    es, es2 = float(work.mean()), float(np.mean(work * work))
    m = max(float(batch_mean), 1.0)
    stall_per_work = float(stall.mean()) / es
    es, es2 = m * es, m * es2 + 2.0 * m * (m - 1.0) * es * es
    eb, eb2 = es / (1.0 - rho), es2 / (1.0 - rho) ** 3
    var = max(eb2 - eb * eb, 1e-30)
    shape, scale = eb * eb / var, var / eb
    q = (np.arange(points) + 0.5) / points
    b = gammaincinv(shape, q) * scale
    b *= eb / float(b.mean())  # exact mean after stratification
    return b * stall_per_work


def decode_residual(gd: np.ndarray, wd: np.ndarray, slow: float, busy: float, dx: float) -> GridDist:
    """Residual of a running decode step, stretched by 1/slow, on a fixed grid: with probability
    ``busy`` uniform on t/slow, t ~ ``gd`` with weights ``wd``; else 0 (exact CDF at the grid points)."""
    top = float(gd.max()) / slow
    xk = np.arange(int(math.ceil(top / dx)) + 2) * dx
    cdf = (1.0 - busy) + busy * (wd @ np.clip(xk[None, :] * slow / gd[:, None], 0.0, 1.0))
    return GridDist(dx, np.diff(cdf, prepend=0.0), busy * float(np.dot(wd, gd)) / (2.0 * slow), exact=False)


_W_STRATA = 16


def _equilibrium_residual(it: np.ndarray, dx: float) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], float]:
    """(residual pmf, (E[age | residual], E[age^2 | residual]) per grid point, E[residual]) of an
    operation whose duration has pmf ``it`` on the grid dx, met at a random time: P(R = k)
    proportional to P(T >= k) (k >= 1) and, given R = k, the age is T - k, so E[A | R = k] =
    E[T | T >= k] - k."""
    k = np.arange(len(it), dtype=float)
    sf_ge = np.cumsum(it[::-1])[::-1]
    res = np.concatenate([[0.0], sf_ge[1:]])
    res /= res.sum()
    first_ge = np.cumsum((k * it)[::-1])[::-1]
    second_ge = np.cumsum((k * k * it)[::-1])[::-1]
    inv = np.where(sf_ge > 1e-300, 1.0 / np.maximum(sf_ge, 1e-300), 0.0)
    age = np.maximum(first_ge * inv - k, 0.0) * dx
    # E[(T - k)^2 | T >= k] = E[T^2 | .] - 2k E[T | .] + k^2
    age2 = np.maximum(second_ge * inv - 2.0 * k * first_ge * inv + k * k, 0.0) * dx * dx
    e1, e2 = float(np.dot(k, it)) * dx, float(np.dot(k * k, it)) * dx * dx
    return res, (age, age2), e2 / (2.0 * e1) if e1 > 0 else 0.0


def _win_against(size: np.ndarray, weight: np.ndarray, delta: float) -> np.ndarray:
    """P(S + D < S') per sample S, S' drawn with ``weight`` from the same sample and D a Laplace
    difference of scale delta: F_D(d) = 1 - exp(-d/delta)/2 for d >= 0, exp(d/delta)/2 below."""
    order = np.argsort(size, kind="stable")
    s_ = size[order] / delta
    w = weight[order] / weight.sum()
    z = np.clip(s_ - s_.mean(), -700.0, 700.0)  # centred exponents: no overflow for any workload
    up = np.cumsum((w * np.exp(-z))[::-1])[::-1]  # sum over S' >= S of w' e^{-S'}
    ge = np.cumsum(w[::-1])[::-1]  # P(S' >= S)
    below = np.concatenate([[0.0], np.cumsum(w * np.exp(z))[:-1]])  # sum over S' < S of w' e^{S'}
    out_sorted = ge - 0.5 * np.exp(z) * up + 0.5 * np.exp(-z) * below
    out = np.empty_like(out_sorted)
    out[order] = np.clip(out_sorted, 0.0, 1.0)
    return out


def _count_pmf(mu_w: np.ndarray, kmax: int, ea: np.ndarray | None = None, shape: np.ndarray | None = None,
               scale: np.ndarray | None = None, lam: float = 0.0) -> np.ndarray:
    """P(K = j), j < kmax, per row: K ~ Poisson(mu_w) plus, when ``ea`` is given, an independent count
    over a gamma(shape, scale) window at rate lam (negative binomial; Poisson(lam ea) where shape = inf)."""
    out = np.exp(-mu_w)[:, None] * np.ones(kmax)
    for i in range(1, kmax):
        out[:, i] = out[:, i - 1] * mu_w / i
    if ea is None:
        return out
    nb = np.empty_like(out)
    fin = np.isfinite(shape)
    sh = np.where(fin, shape, 1.0)
    p = np.where(fin, lam * scale / (1.0 + lam * scale), 0.0)  # NB success-probability form
    nb[:, 0] = np.where(fin, (1.0 - p) ** sh, np.exp(-lam * ea))
    for i in range(1, kmax):
        nb[:, i] = np.where(fin, nb[:, i - 1] * p * (sh + i - 1) / i, nb[:, i - 1] * lam * ea / i)
    # convolve the two counts row by row (kmax is small: the token budget in mean prompts)
    return np.stack([np.convolve(out[r], nb[r])[:kmax] for r in range(len(out))]) if len(out) else out[:, :0]


def _poisson_sf(k: int, mu: float) -> float:
    """P(K >= k) for K ~ Poisson(mu)."""
    from scipy.special import pdtrc  # local: keeps `import qmodel` light

    return float(pdtrc(k - 1, mu)) if k > 0 else 1.0


def _add_arrivals_during(wait: GridDist, lam: float, jump: np.ndarray, mean_jump: float,
                         jump_dx: float | None = None, age: tuple[np.ndarray, np.ndarray] | None = None,
                         kmax: int | None = None, stats: dict | None = None) -> GridDist:
    """W + sum_{j <= K} J_j with K ~ Poisson(lam W) given W (mixed Poisson), on W's grid.

    ``age``: per grid point of W, (E[A | W], E[A^2 | W]) of a further window whose arrivals also join
    (K ~ Poisson(lam (W + A)), A given the stratum a gamma law with those moments); ``kmax``: K is
    capped there (min(K, kmax), the token budget), and ``stats["full"]`` receives P(K >= kmax).

    ``jump`` is the pmf of J on the grid ``jump_dx`` (default: W's); it is moved onto W's grid
    first when they differ (a long wait may come on a coarser step, see :func:`_pk_wait`).

    W is cut into 16 equal-probability strata (boundary bins split, so the result moves continuously
    with the rate); within stratum s the count is Poisson(lam w_s) at the stratum mean w_s. In Fourier
    space: sum_s FFT(pmf_W restricted to s) exp(lam w_s (phi_J - 1)), one inverse FFT.
    """
    wait = wait.trimmed(1e-12)
    if jump_dx is not None and abs(jump_dx - wait.dx) > 1e-12 * wait.dx:
        # mean kept: K ~ Poisson(lam W) jumps add up
        jump = GridDist(jump_dx, jump, mean_jump, exact=False).regrid(wait.dx, keep_mean=True).pmf
    p = wait.pmf
    x = np.arange(wait.n) * wait.dx
    hi_c = np.cumsum(p)
    lo_c = hi_c - p
    q = np.linspace(0.0, float(hi_c[-1]), _W_STRATA + 1)
    share = np.clip(np.minimum(hi_c[None, :], q[1:, None]) - np.maximum(lo_c[None, :], q[:-1, None]), 0.0, None)
    mass = share.sum(axis=1)
    w_s = (share @ x) / np.maximum(mass, 1e-300)
    k = np.arange(len(jump))
    ej, ej2 = float(np.dot(k, jump)), float(np.dot(k * k, jump))
    shape = scale = None
    if age is None:
        mu_s = lam * w_s
    else:
        a, a2 = np.zeros(wait.n), np.zeros(wait.n)
        a[: min(len(age[0]), wait.n)] = age[0][: wait.n]
        a2[: min(len(age[1]), wait.n)] = age[1][: wait.n]
        inv = 1.0 / np.maximum(mass, 1e-300)
        ea, ea2 = (share @ a) * inv, (share @ a2) * inv
        va = np.maximum(ea2 - ea * ea, 0.0)
        # A given the stratum as a gamma law with its two moments: the count over the age window is
        # then negative binomial (a Poisson count mixed over a dispersed window), not Poisson(lam E[A])
        shape = np.where(va > 1e-12 * np.maximum(ea * ea, 1e-300), ea * ea / np.maximum(va, 1e-300), np.inf)
        scale = np.where(np.isfinite(shape), va / np.maximum(ea, 1e-300), 0.0)
        mu_s = lam * (w_s + ea)
    mu_max = float(mu_s.max())
    # the count's variance beyond Poisson (the age window's spread) widens the grid too, or the cyclic
    # transform would wrap the negative binomial's tail onto short waits
    over = 0.0 if shape is None else float((lam * lam * va).max(initial=0.0))
    n = wait.n + int(math.ceil(mu_max * ej + 12.0 * math.sqrt(mu_max * ej2 + over * ej * ej + 1.0))) + len(jump)
    n = min(n, 1 << 16)
    from scipy import fft as sfft

    nfft = _fast_len(n)
    phi = sfft.rfft(jump, nfft) - 1.0
    # strata with no arrivals (the atom at 0 spans several when P(W = 0) is large) share one factor 1
    zero = mu_s <= 0.0
    rows, mus = share[~zero], mu_s[~zero]
    if shape is not None:
        lw, ea_s = lam * w_s[~zero], ea[~zero]
        sh, sc = shape[~zero], scale[~zero]
        finite = np.isfinite(sh)
    acc = sfft.rfft(rows, nfft, axis=1) if len(rows) else np.zeros((0, nfft // 2 + 1), complex)
    if kmax is not None and _poisson_sf(kmax, 2.0 * mu_max) > 1e-12:
        # E[z^min(K, kmax)] = sum_{j < kmax} P(K = j) z^j + P(K >= kmax) z^kmax, at z = phi_J
        pk = _count_pmf(mus, kmax) if shape is None else _count_pmf(lw, kmax, ea_s, sh, sc, lam)
        fac = np.zeros_like(acc)
        zj = np.ones_like(phi)
        for j in range(kmax):
            fac += pk[:, j: j + 1] * zj[None, :]
            zj = zj * (phi + 1.0)
        left = np.clip(1.0 - pk.sum(axis=1), 0.0, None)
        acc = np.einsum("ij,ij->j", acc, fac + left[:, None] * zj[None, :])
        count = pk @ np.arange(kmax) + kmax * left
        if stats is not None:
            stats["full"] = float(mass[~zero] @ left)
    else:
        if shape is None:
            expo = np.outer(mus, phi)
        else:
            # Poisson(lam w) over the wait, gamma-mixed Poisson over the age window
            expo = np.outer(lw, phi)
            sh_f = np.where(finite, sh, 0.0)  # rows with a fixed window (shape = inf) stay Poisson
            expo += -sh_f[:, None] * np.log1p(-np.outer(lam * sc, phi))
            expo += np.outer(np.where(finite, 0.0, lam * ea_s), phi)
        acc = np.einsum("ij,ij->j", acc, np.exp(expo))
        count = mus
    if np.any(zero):
        acc += sfft.rfft(share[zero].sum(axis=0), nfft)
    pmf = np.clip(sfft.irfft(acc, nfft)[:n], 0.0, None)
    if age is None and kmax is None:
        mean = wait.mean_s + lam * wait.mean_s * mean_jump
    else:
        mean = wait.mean_s + float(mass[~zero] @ count) * mean_jump
    return GridDist(wait.dx, pmf, mean, tail=max(0.0, 1.0 - float(pmf.sum())), tail_rate=wait.tail_rate, exact=False)


def jsq_wait(pk: GridDist, rho: float, c: int, scale: float = 1.0) -> GridDist:
    """Prefill wait with least-loaded dispatch over c instances (approximation).

    Joining the least-loaded instance waits only when every instance has prefill work: the wait
    probability becomes Erlang C(c, c rho) instead of rho and, as in M/G/c, the conditional wait
    shrinks by 1/c. ``scale`` multiplies the conditional wait (the heavy-traffic correction
    (c_a^2 + c_s^2)/(1 + c_s^2) for non-Poisson arrivals). c = 1 and scale = 1 return ``pk``.
    """
    if (c <= 1 and scale == 1.0) or rho <= 0:
        return pk
    from qmodel.stations.fcfs import erlang_c

    cq = erlang_c(c, c * rho) if c > 1 else rho
    cond = pk.pmf.copy()
    p_wait = float(cond[1:].sum())
    cond[0] = 0.0
    if p_wait <= 0:
        return pk
    pmf = cq * cond / p_wait
    pmf[0] += 1.0 - cq
    mean = cq * (pk.mean_s / max(p_wait, 1e-300)) * scale / c
    return GridDist(pk.dx * scale / c, pmf, mean, tail=0.0, tail_rate=pk.tail_rate * c / scale, exact=False)


def renewal_excess(ca2: float, x: float) -> float:
    """U(t) - lam t at lam t = x for a Gamma renewal stream with SCV ca2 (Palm view: arrivals in (0, t]
    after an arrival, minus the Poisson count). U(t) = sum_n P(Gamma(n k, lam k) <= t), k = 1/ca2; the
    excess rises from 0 (x -> 0) to (ca2 - 1)/2 (x -> inf, the renewal-function asymptote)."""
    from scipy.special import gammainc  # local: keeps `import qmodel` light

    k = 1.0 / ca2
    n_max = int(x + 12.0 * math.sqrt(ca2 * x + 1.0) + 20.0 * ca2) + 10
    n = np.arange(1, n_max + 1, dtype=float)
    return float(np.sum(gammainc(n * k, k * x))) - x


def burst_batch_mean(ca2: float, instances: int, least_loaded: bool, lam_s: float = math.inf,
                     window_s: float = math.inf) -> float:
    """Mean batch size m of the batch-Poisson stand-in for a renewal stream with arrival SCV ca2 > 1.

    A compound Poisson stream with geometric batches X (mean m) has (m - 1) extra arrivals right
    behind (and ahead of) a tagged one, where a renewal stream has the excess U(t) - lam t of its
    renewal function (:func:`renewal_excess`, Gamma stand-in with the same SCV). Matching the two over
    the window in which earlier arrivals are still present (``window_s``: the mean prompt-backlog busy
    period; the caller's choice) gives m = 1 + excess(lam window); for a long window this is
    m = (1 + ca2)/2, the batch stream with the same index of dispersion of counts 2m - 1 = ca2.
    ``lam_s``: the rate of the stream that feeds one queue. A random split over c instances thins it:
    SCV 1 + (ca2 - 1)/c per instance; least_loaded keeps the pooled stream (rate c lam; the batch is
    dealt out over the instances, :func:`batch_wait`). ca2 <= 1 gives m = 1.
    """
    if ca2 <= 1.0:
        return 1.0
    pooled = least_loaded or instances <= 1
    idx = ca2 if pooled else 1.0 + (ca2 - 1.0) / instances
    x = lam_s * (instances if (least_loaded and instances > 1) else 1) * window_s
    if not math.isfinite(x):
        return 0.5 * (1.0 + idx)
    return 1.0 + max(renewal_excess(idx, x), 0.0)


def batch_wait(service: np.ndarray, dx: float, rho: float, m: float, c: int,
               member: np.ndarray | None = None, sides: int = 1) -> GridDist:
    """FCFS wait of M^X/G/1 with geometric batches X >= 1 of mean m (bursty-arrival stand-in).

    W = W_b + A: W_b is the Pollaczek–Khinchine wait of whole batches (load rho, residual of the batch
    work S_b = S + sum_{X-1} M), A the work of the batch members served before the tagged one,
    J ~ Geometric_0(q), q = 1 - 1/m, E[J] = m - 1 (exact for M^X/G/1 with M = S). least_loaded over c
    instances: batches see the Erlang-C / c transform of :func:`jsq_wait`, and a burst is dealt out
    one per instance in turn, so the members ahead on the tagged one's instance are floor(J/c) ~
    Geometric_0(q^c). ``service``: pmf of one service S on the grid dx.

    Engines that batch (colocated prefill iterations) serve a burst in one iteration: ``member`` M is
    then the pmf of the cost one more member adds (its marginal prefill time; default M = S, serial
    service), and ``sides`` = 2 counts the members behind the tagged one as well (two independent
    Geometric_0(q^c) counts, by the symmetry of the geometric batch).
    """
    from scipy import fft as sfft

    mem = service if member is None else member
    q = 1.0 - 1.0 / m

    def moments(p: np.ndarray) -> tuple[float, float]:
        k = np.arange(len(p))
        return float(np.dot(k, p)) * dx, float(np.dot(k * k, p)) * dx * dx

    es, es2 = moments(service)
    em, em2 = moments(mem)
    # Y = sum_{X-1} M, X - 1 ~ Geometric_0(q): E[X-1] = m - 1, Var(X-1) = m (m - 1)
    ey = (m - 1.0) * em
    vy = (m - 1.0) * (em2 - em * em) + em * em * m * (m - 1.0)
    eb, eb2 = es + ey, es2 + 2.0 * es * ey + vy + ey * ey
    size = _fast_len(int((eb + 14.0 * math.sqrt(max(eb2 - eb * eb, 0.0))) / dx) + len(service) + len(mem) + 2)
    phi_s = sfft.rfft(service, size)
    phi_m = sfft.rfft(mem, size)
    sb = np.clip(sfft.irfft(phi_s * (1.0 - q) / (1.0 - q * phi_m), size), 0.0, None)
    sb /= sb.sum()
    sf = 1.0 - np.cumsum(sb)
    res = np.concatenate([[0.0], sf[:-1]])
    res = res / res.sum()
    wb = jsq_wait(_pk_wait(GridDist(dx, res, eb2 / (2.0 * eb), exact=False), rho), rho, c)
    qc = q ** max(c, 1)
    ahead = np.clip(sfft.irfft(((1.0 - qc) / (1.0 - qc * phi_m)) ** sides, size), 0.0, None)
    mean_a = sides * qc / (1.0 - qc) * em
    return convolve(wb, GridDist(dx, ahead / ahead.sum(), mean_a, exact=False))
