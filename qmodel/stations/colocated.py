"""Colocated engine, prefill-priority iterations (vLLM-v0-like): docs/methods.md, "Stations": colocated.

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
  E[T_1]/(1 - rho_p) and E[B^2] = E[T_1^2]/(1 - rho_p)^3. (The sketch's S_0 of docs/reference_values.md §2.9 stopped at the queued
  prompts themselves, jumps T_1(P): TPOT p99 −16% at rho_p 0.36 and −30% at 0.53 against the step
  DES, −22% at 0.3 of the limit with Gamma CV 2 arrivals; with the busy periods −6/−11/−3%.);
  S_life: the prefill work that interrupts its decode life D = (L-1) t_d(n+1)/(1 - rho_p). Prefill
  runs in busy periods (a prefill iteration, then one for everyone who arrived during it, ...), so
  S_life is clustered: busy periods start at rate lam (1 - rho_p) and last B, E[B] = E[T]/(1 - rho_p),
  E[B^2] = E[T^2]/(1 - rho_p)^3 (M/G/1, Takacs; T = T_1 scaled to the batched per-prompt cost),
  B taken as the gamma law with those moments. The clustering keeps the mean (rho_p D) and
  carries the busy-period correlation; per-prompt Poisson stalls (docs/reference_values.md §2.9) gave p99 −28%
  at rho_p = 0.36, the clustered form −14% (tests/test_stations_colocated.py).
  With a max_batch slot cap a prompt is prefilled only into a free slot: for the share f of
  a resident's time spent in a full batch the stalls are lone prefills, one per departure of another
  resident, and the S_0 term is absent (:mod:`qmodel.stations.slot_stalls`; max_batch 1: TPOT = t_d(1)).
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
  with the bulk-service prefill chain (:meth:`ColocatedStation._with_overflow`; for least_loaded
  pools that chain is read as a central queue of c engines: Erlang C wait probability, conditional
  wait / c).
  Bursts (``ca2`` > 1): prefill is the high class of a non-preemptive priority M^X/G/1 over decode
  steps (below); prompts arriving during W join the request's batch: given W = w, Poisson(lam w) of
  them (16 strata of W), each adding its marginal cost.
  KV admission: a prompt first waits for memory. Where KV binds, the soft wall of
  :mod:`qmodel.stations.admission`: the resident count M the pool holds is random (length-biased
  prompt + output reservations, head-of-line blocking), normal about the saturated schedule's mean
  batch; the population chain phi_eff(n) = E[phi(min(n, M))] at decode capacity 1 - rho_p, scaled to
  the station's limit when full; P(wait) = sum pi(n) P(M <= n), then Exp(mu (1 - lam/lam_max)) scaled
  by (c_a^2 + c_L^2)/2, c_a^2 <= 1 the SCV of the arrivals the wall sees; least_loaded pools share
  one wall; where max_batch binds first, M = max_batch
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
least_loaded / jsq pools of c > 1 engines: the burst form keeps only the Erlang-C wait of whole bursts,
and the burst-mates that share the request's iteration are added to the TTFT as independent of the
wait (:func:`qmodel.stations.burst_mates.burst_members`): J_a ahead and J_b behind, each
Geometric_0(1 - 1/m), each on the request's instance with probability 1/c (the dispatch weighs
outstanding tokens, the residents' reserved KV included, so close arrivals are not dealt one per
instance in turn). On a busy instance (probability P(W > 0)) all of them wait with the request and
share its iteration, each adding its marginal prefill cost; on an idle one the first member ahead
starts alone and the request waits for that whole iteration, then shares the next with the others.
Iterations hold at most the token budget's room beside the own prompt ((B - P) // E[P] per own-length
quarter, as in the gated form): members ahead past it fill earlier full iterations the request waits
for, members behind past it go later.
Measured in the replay (llama-3.1-8b/H100 x2, Azure conv preset, Gamma cv 2 at 0.3 of the limit): a
request's iteration holds 0.42 burst-mates ahead and 0.42 behind on average (Poisson: 0.05 each)
and its wait is not longer than the model's: the TTFT p50 was low (−27..−33% at 0.3-0.9 of the
limit) because the dealing in turn (floor(J/c) ahead, none behind) left the iteration too short;
qwen2.5-32b/H200 x2 (Azure code, Gamma cv 4 at 0.3): 88% of requests wait (the model's Erlang-C
burst wait: 54%), most behind a burst-mate's lone iteration. Replay, the 2 colocated suite configs
x least_loaded/jsq, Gamma cv 2 and 4 at 0.3-0.9 of the limit (20 cells each): TTFT p50/p90/p99
median |error| cv 2 24.1/12.2/15.6 -> 6.3/7.4/17.5%, cv 4 34.0/11.4/12.1 -> 13.1/6.6/12.0%
(docs/validation.md, "Bursty arrivals at least_loaded / jsq pools").

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
from typing import Literal

import numpy as np

from qmodel.arrays import distinct
from qmodel.dist import GridDist, convolve, mixture
from qmodel.errors import InputError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import Param, StationModel, StationSolution, integer
from qmodel.stations.burst_mates import burst_members_by_cap
from qmodel.stations.colocated_limit import ColocatedLimits
from qmodel.stations.colocated_ttft import ColocatedTTFT
from qmodel.stations.decode import GPSChain, mean_context_tokens
from qmodel.stations.iteration_stalls import (L_GROUPS, OWN_BP_POINTS, busy_period_stalls, compound_poisson_pmf,
                                              decode_residual, n_nodes, stall_tpot)
from qmodel.stations.iteration_waits import add_arrivals_during, batch_wait, burst_batch_mean, burst_increment
from qmodel.stations.pool_inputs import POOL_PARAMS, float_lengths, held_prompt_tokens, reserved_output
from qmodel.stations.slot_stalls import full_batch_stalls, full_share

__all__ = ["ColocatedStation", "held_prompt_tokens", "compound_poisson_pmf", "stall_tpot", "n_nodes",
           "decode_residual"]

_OWN_CLASSES = 4
#: share of requests meeting a full iteration (token budget) above which budget overflow is modelled
_FULL_SHARE = 1e-3


@dataclass(eq=False)
class ColocatedStation(ColocatedLimits, ColocatedTTFT, StationModel):
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
    #: the arrivals are a renewal stream (Poisson, Gamma gaps); False for a trace, whose within-window
    #: SCV comes from clumped, correlated gaps: its KV-wall wait keeps the Poisson form (ca2 <= 1)
    renewal_arrivals: bool = True
    name: str = "colocated"
    #: prefix-cache hit per request (prompt_tokens are the uncached, computed ones): held in KV, not computed
    cached_tokens: np.ndarray | None = None
    #: output tokens each request's KV reservation counts (``kv_reservation = max_tokens``); None: its own output
    reserved_output_tokens: np.ndarray | None = None

    params = POOL_PARAMS + (
        Param("max_batch_tokens", integer(1, "an integer >= 1"), "colocated.max_batch_tokens"),
    )

    def prepare(self) -> None:
        p, L = float_lengths(self.prompt_tokens, self.output_tokens)
        self.p, self.L = p, L
        self.held = held = held_prompt_tokens(self.name, p, self.cached_tokens)
        self.R = R = reserved_output(self.name, L, self.reserved_output_tokens)
        self.mean_output = float(L.mean())
        self.cv2_output = float(L.var() / self.mean_output**2)
        self.t1 = np.asarray(self.service.prefill_one_s(p), dtype=float)  # one-prompt prefill times
        self.mean_t1 = float(self.t1.mean())
        C = mean_context_tokens(held, L)
        n_max = self.max_batch
        if self.kv_capacity_tokens is not None:
            by_kv = int(self.kv_capacity_tokens // float(np.mean(held + R)))
            if by_kv < 1:
                raise InputError("colocated.kv_capacity_tokens", self.kv_capacity_tokens,
                                 "room for at least one sequence of mean prompt+output length")
            n_max = by_kv if n_max is None else min(n_max, by_kv)
        #: the slot cap is max_batch's (a hard count), not the memory's (a soft wall: admission.py)
        self.slot_capped = self.max_batch is not None and n_max == self.max_batch
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
        size = held + R
        self._ll_delta = float(np.mean(size * size) / max(float(size.mean()), 1e-300))
        self.decode_cost_per_token = (1.0 / (self.chain.cap / float(self.chain.g(self.chain.cap)[self.chain.cap]))
                                      if n_max is not None else slope)
        self._lam_max = self._find_lam_max()
        # L groups (log-spaced in L-1) for the TPOT quadrature; L = 1 requests have no TPOT
        multi = L >= 2
        if not np.any(multi):
            raise InputError("output_tokens", "all 1", "some requests with at least 2 output tokens (TPOT)")
        lm1 = L[multi] - 1.0
        edges = distinct(np.geomspace(lm1.min(), lm1.max() * (1 + 1e-9), L_GROUPS + 1))
        gi = np.clip(np.searchsorted(edges, lm1, side="right") - 1, 0, len(edges) - 2)
        groups = []
        for g in distinct(gi):
            sel = gi == g
            inv = float(np.mean(1.0 / lm1[sel]))
            groups.append((float(sel.mean()), 1.0 / inv, float(np.mean(self.t1[multi][sel]))))
        self.groups = groups  # (weight, representative L-1 keeping E[1/(L-1)], mean own prefill)

    # ---- solve -----------------------------------------------------------------------------
    def solve(self, rate_per_s: float) -> StationSolution:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "a positive finite arrival rate")
        lam_max = self.max_stable_rate_per_s()
        scale = self.load_scale  # the queueing pieces at the offered load against the schedule's capacity
        rate_in = rate_per_s * scale
        lam = rate_in / self.instances
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
        bp = busy_period_stalls(work, work, rho_p, m_burst)
        # bursty arrivals: the burst members behind the request on its instance (floor(J/c),
        # J ~ Geometric_0(1 - 1/m)) are prefilled right after it and stall its decode from the start;
        # added to the own window as their mean count (seconds of arrivals at rate lam)
        qb = (1.0 - 1.0 / m_burst) ** c_ll
        behind_s = qb / (1.0 - qb) / lam
        # The prompts queued behind the request when its prefill ends (and its burst members) are
        # prefilled before its next decode step, and so is everything that arrives meanwhile: each
        # starts a prefill busy period (mean x/(1 - rho_p) for initial work x), not a lone stall.
        own_bp = busy_period_stalls(self.t1, self.t1, rho_p, points=OWN_BP_POINTS)
        # in a full batch (slot cap) prompts are admitted one per departure: lone prefills, no S_0 (slot_stalls)
        life, life_rate, own_j = full_batch_stalls(
            full_share(pi, tail, self.chain.cap) if self.slot_capped else 0.0, bp, (1.0 - rho_p) / m_burst, own_bp, self.t1, lam, rho_p,
            cap if self.chain.cap is not None else 1, self.mean_output - 1.0, float(g[min(cap, m)]))
        tpot = stall_tpot(lam, self.groups, wts, td, [rho_p] * len(td), [own_j] * len(td),
                          node_own=[behind_s] * len(td),
                          node_life_jumps=[life] * len(td), node_life_rate=[life_rate] * len(td),
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
            ttft = self._with_overflow(ttft, rate_in)
        if m_burst > 1.0:
            grid = self._ttft_grid
            dxs, marginal = grid.dx, grid.marginal
            # Bursty arrivals as geometric batches: prefill is the high class of a non-preemptive
            # priority queue over decode steps, an M^X/G/1 wait of whole bursts (the burst members ahead
            # of the request on its instance share its iteration: marginal cost), plus the decode
            # residual stretched by 1/(1 - rho_p) (the prefill work that arrives during it).
            busy_frac = busy_dec / max(1.0 - rho_p, 1e-300)  # P(decode running | no prefill running)
            dec = decode_residual(gd, wd, 1.0 - rho_p, busy_frac, dxs)

            # least_loaded pools: the burst-mates are not dealt out one per instance in turn (the dispatch
            # weighs outstanding tokens, decode residents' included); they share the request's iteration
            # as a random split does, added below as independent of the wait (burst_members)
            pooled = ll and self.instances > 1

            def burst(mb: float) -> tuple[GridDist, GridDist]:
                w_b = convolve(batch_wait(grid.own, dxs, rho_p, mb, c_ll, member=marginal,
                                          sides=0 if pooled else 1), dec)
                # Prompts arriving while the request waits join its batch (FCFS order puts the earlier
                # ones in W already): given W = w, K ~ Poisson(lam w), each adding its marginal cost.
                return w_b, convolve(add_arrivals_during(w_b, lam, marginal, grid.mean_marginal_s, dxs), grid.own_law)

            # The burst form's own Poisson limit (m = 1, the priority M/G/1 form) is not the gated form
            # (TTFT p90 -5..+5%, p99 -10..+14% apart on the examples), so switching forms at ca2 = 1 made
            # TTFT jump there. The burst form supplies only what bursts add over its Poisson limit, quantile
            # by quantile, on top of the gated law: Q(u) = Q_gated(u) + (Q_m(u) - Q_1(u))^+. m -> 1 as
            # ca2 -> 1, so every percentile is continuous there, and non-decreasing in ca2.
            w1, t1 = burst(1.0)
            wm, tm = burst(m_burst)
            ttft = burst_increment(ttft, tm, t1)
            wait = burst_increment(wait, wm, w1)
            if pooled:
                # per own-length quarter, the token budget's room beside the own prompt (as in the gated form)
                busy = 1.0 - float(wait.pmf[0])
                mem = mixture(burst_members_by_cap(marginal, dxs, m_burst, 1.0 / self.instances, join_prob=busy,
                                                   first=grid.own, caps=[cap for _, cap, _ in grid.classes]),
                              [n for n, _, _ in grid.classes])
                ttft = convolve(ttft, mem)
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
                                "wait M/M/1-like at capacity 1 - rho_p, scaled by (c_a^2 + c_L^2)/2; bursty renewal "
                                "arrivals: the Gamma GI/M/1 root)" if self._wall is not None
                                else "(M/M/1-like queue beyond the cap at capacity 1 - rho_p, scaled by (1 + c_L^2)/2)"))
        if self.instances > 1 and self.dispatch == "least_loaded":
            lam_notes.append(f"{self.instances} instances, least_loaded (outstanding tokens): idle instances first, "
                             f"prefilling ones met less and their long iterations less (load gap scale "
                             f"{self._ll_delta:.0f} tokens); TPOT as for a random split" if m_burst <= 1.0 else
                             f"{self.instances} instances, least_loaded: burst wait P(wait) = Erlang C(c, c rho_p), "
                             "conditional wait / c (M/G/c-like approximation of join-the-shortest-queue); "
                             "burst-mates share the request's iteration as under a random split")
        elif self.instances > 1:
            lam_notes.append(f"{self.instances} instances: {self.dispatch} treated as a random split (lam/c each)")
        return StationSolution(
            name=self.name,
            utilization=float(load),
            busy_fraction=float(rho_p + busy_dec),  # what the replay meters (prefilling or decoding)
            max_stable_rate_per_s=float(lam_max),
            delay=ttft,
            wait=resid,
            tpot=tpot,
            mean_in_system=(mean_n + lam * (ttft.mean_s)) * self.instances / scale,  # Little at the offered rate
            method="prefill-priority: GPS at capacity 1-rho_p + compound-Poisson stalls (FFT)",
            exact=False,
            notes=tuple(lam_notes),
            extra={"rho_p": rho_p, "mean_prefill_batch": kbar, "mean_n_decode": mean_n, "x": tok * self.chain.slope_inf,
                   "mean_tpot_s": float(mean_tpot),
                   "prefill_cost_saturated_s": self.prefill_cost_sat,
                   "mean_slot_wait_s": adm.mean_s if adm is not None else 0.0},
        )
