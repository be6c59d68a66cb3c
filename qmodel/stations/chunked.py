"""Chunked prefill (Sarathi-style): every iteration mixes decode tokens and prompt chunks under a budget.

Engine (same step-time composition as the replay, ``validation/stations/chunked.py``): each
iteration has a budget of B_c tokens; every running sequence takes one (it emits a token), the
rest c = B_c - n goes to prompt chunks FCFS. A mixed iteration with n decodes (contexts S) and
chunks c_j over d_j computed tokens takes

    prefill_time_s(sum c_j + n, sum (c_j^2 + 2 c_j d_j), k) + [t_d(n, S) - t_d(n, 0)],

a decode-only iteration t_d(n, S) = decode_step_time_s(n, S). A prompt's chunks re-read the KV of
its earlier chunks (the 2 c d term); over a whole prompt the attention terms sum to exactly P^2.

Model (derived here from a prefill-priority sketch (docs/reference_values.md §2.9) and checked against a step-level DES, tests/des_micro.py):

* per-prompt mixed-mode time with n decodes, c = B_c - n, contexts at the mean C̄:
      S_n(P) = (P/c) [T_p(B_c, 0, k) + Delta(n)] + (P/c) [T_p(c, c P, 1) - T_p(c, 0, 1)],
  (the attention of a chunk over an evenly chunked prompt averages c P), k = 1 + c/E[P], plus
  (1 - rho_c) extra_n(P) when the prompt is alone and its last iteration carries only r = P mod c of
  its tokens (extra_n = T_p(n + r) + Delta - (r/c)(T_p(B_c) + Delta); rho_c solved in closed form);
  the stall it adds to decoding sequences is X_n(P) = S_n(P) - [P/c + (1 - rho_c)(1 - r/c)] t_d(n):
  every iteration, the partial one included, gives each running sequence a token (counting only the
  fluid P/c iterations overstated TPOT; docs/methods.md, "Model history");
* decode occupancy: GPS chain with per-state step time g(n) = t_d(n) / (1 - rho_x(n)),
  rho_x(n) = lam E[X_n(P)] (every iteration gives each sequence one token; a fraction of them
  is stretched by chunks); when the prefill share rho_c(n) = lam E[S_n] reaches 1 every iteration
  is mixed and g(n) = c E[S_n]/E[P];
* TPOT: t_d(N+1) + S/(L-1), capped at one full mixed iteration (every iteration emits a token).
  S = S_life + S_0 as in the colocated quadrature (:func:`qmodel.stations.iteration_stalls.stall_tpot`):
  S_life clusters the chunk stalls of whole prompt-backlog busy periods (they start at rate
  lam (1 - rho_c); gamma law with the M/G/1 busy-period moments) over the decode life
  (L-1) t_d/(1 - rho_x); S_0 counts the prompts that arrived during the request's whole TTFT (FCFS:
  all of them are still queued behind it when it starts decoding), each adding its stall X. The
  stream the request meets (:mod:`qmodel.stations.stall_stream`): least_loaded/jsq busy periods
  grow only by the arrivals that meet a backlog (P(W > 0) of the steered wait, not rho_c);
  round_robin/least_loaded/jsq deal prompts out smoother than Poisson (both sums keep their mean,
  variance x I = 1 - (1 - V) E[X]^2/E[X^2], V the count's variance ratio over the window; round_robin
  also takes the Palm excess off S_0's count); a KV/max_batch slot cap gates the starts (rate x
  1 - P(cap)/E[n]);
* TTFT: the prompt backlog is an M/G/1 FCFS queue of works S_N̄(P) (Pollaczek–Khinchine, load
  rho_c) whose server also owes the residual of a decode-only iteration in progress (stretched by
  1/(1 - rho_c)); TTFT = wait + S_N̄(P_own) + the chunks of later prompts in the iteration holding
  its last chunk (the first token comes at that iteration's end): those that arrived during its
  wait and its earlier iterations, at most the room its last chunk and the free slots leave
  (:mod:`qmodel.stations.chunked_behind`); at the slot cap (KV, max_batch, the budget) plus the
  wait for a free slot (:func:`qmodel.stations.decode.admission_wait`), as independent, its
  conditional wait scaled by the Allen–Cunneen factor (c_a^2 + c_L^2)/2 of the arrivals.
  least_loaded pools: the single-instance backlog wait is steered by outstanding tokens
  (:func:`qmodel.stations.steer.steered_wait`: the dispatch compares waiting prompts plus reserved
  KV, so it is not join-the-shortest-queue on prefill work). jsq pools (fewest requests, waiting
  plus holding a slot): the backlog as least_loaded's, but the slot wait of the c instances' slots
  as one pool (:mod:`qmodel.stations.chunked_slots`): an arrival waits for a slot only when every
  instance is full. Measured errors of each piece: docs/validation.md ("JSQ by count", "Chunked
  TTFT p50: the first-token iteration").

Bursty arrivals (``ca2`` > 1): geometric bursts of mean m (:func:`iteration_waits.burst_batch_mean`):
TTFT wait M^X/G/1 (:func:`iteration_waits.batch_wait`), busy-period stalls with the M^X/G/1 moments at
rate lam (1 - rho_c)/m, the members behind added to S_0 (docs/validation.md, "Chunked bursty
arrivals"). ca2 < 1: Kingman-scaled wait only.

Stability (fluid, GPU time per request): with n decodes a request costs its chunks' stall
X_n = E[S_n] - (E[P]/c) t_d(n) plus E[L-1] decode slots of t_d(n)/n while decode-only iterations
remain (E[L-1]/n >= E[P]/c); otherwise every iteration is a full mixed one and it costs E[S_n].
lam_max = max_n 1/cost_n, bounded also by the decode chain's tail at the slot cap (docs/methods.md,
"Single-pool stability limits"; the KV slot cap is the decode-only saturated schedule's mean
batch). Where KV or ``max_batch`` caps the slots, lam_max is also at most the engine's saturated
schedule under those caps (:func:`qmodel.stations.chunked_capacity.chunked_saturated_rate_per_s`):
a request holds its slot from its prefill's start, so a saturated mixed iteration carries only the
prompts the last departures made room for, not the budget's worth cost_n assumes
(docs/validation.md, "Chunked limit with a binding slot cap").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from qmodel.arrays import distinct
from qmodel.dist import GridDist, convolve
from qmodel.errors import InputError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import DISPATCHES, Param, StationModel, StationSolution, integer, one_of
from qmodel.stations.pool_inputs import POOL_PARAMS, float_lengths, held_prompt_tokens, reserved_output
from qmodel.stations.iteration_stalls import (L_GROUPS, busy_period_stalls, grid_pmf, decode_residual, n_nodes,
                                               stall_tpot, state_at, strata_nodes)
from qmodel.stations.iteration_waits import pk_wait, batch_wait, burst_batch_mean, jsq_wait
from qmodel.stations.stall_stream import instance_count_scv, palm_shift_s, slot_gate, stall_dispersion
from qmodel.stations.decode import GPSChain, fewest_residents, mean_context_tokens
from qmodel.stations.steer import steered_wait
from qmodel.stations.chunked_slots import pooled_slot_chain, slot_admission
from qmodel.stations.chunked_behind import first_iteration

__all__ = ["ChunkedStation"]


_W_NODES = 1


@dataclass(eq=False)
class ChunkedStation(StationModel):
    """Sarathi-style chunked-prefill engines (formulas in the module doc)."""

    service: ServiceTimeModel
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    instances: int = 1
    chunk_tokens: int = 512
    kv_capacity_tokens: float | None = None
    max_batch: int | None = None
    dispatch: Literal["random", "round_robin", "least_loaded", "jsq"] = "random"
    ca2: float = 1.0
    name: str = "chunked"
    #: prefix-cache hit per request (prompt_tokens are the uncached, computed ones): held in KV, not computed
    cached_tokens: np.ndarray | None = None
    #: output tokens each request's KV reservation counts (``kv_reservation = max_tokens``); None: its own output
    reserved_output_tokens: np.ndarray | None = None
    #: a closed loop's N and whether its clients think (Z > 0), which bound the slot wait (qmodel.closed)
    clients: int | None = None
    loop_thinks: bool = True

    # the pool parameters, jsq (join the shortest queue by request count) among the dispatches: this
    # station models it apart from least_loaded (module doc)
    params = tuple(Param("dispatch", one_of(DISPATCHES + ("jsq",)), "{name}.dispatch") if p.names == "dispatch" else p
                   for p in POOL_PARAMS) + (
        Param("chunk_tokens", integer(2, "an integer >= 2 (decode + chunk tokens)"), "chunked.chunk_tokens"),
    )

    def prepare(self) -> None:
        p, L = float_lengths(self.prompt_tokens, self.output_tokens)
        self.p, self.L = p, L
        self.mean_p = float(p.mean())
        self.mean_output = float(L.mean())
        self.cv2_output = float(L.var() / self.mean_output**2)
        held = held_prompt_tokens(self.name, p, self.cached_tokens)
        R = reserved_output(self.name, L, self.reserved_output_tokens)
        self.C = mean_context_tokens(held, L)
        size = held + R  # tokens a request adds to its instance's least_loaded load (stations/steer.py)
        self._ll_delta = float(np.mean(size * size) / float(size.mean()))
        cap = self.chunk_tokens - 1  # at least one prompt token per iteration
        kv_bound = False
        if self.max_batch is not None:
            cap = min(cap, int(self.max_batch))
        if self.kv_capacity_tokens is not None:
            by_kv = int(self.kv_capacity_tokens // float(np.mean(held + R)))
            if by_kv < 1:
                raise InputError("chunked.kv_capacity_tokens", self.kv_capacity_tokens,
                                 "room for at least one sequence of mean prompt+output length")
            # the residents the memory holds: their reserved prompt + output is length-biased (longer
            # outputs stay longer), so the saturated decode schedule's mean batch, not kv / E[P + L]
            from qmodel.stations.capacity import saturated_schedule

            resident = saturated_schedule(self.service, held, L, self.kv_capacity_tokens, None, None,
                                          reserved_output=self.reserved_output_tokens)[1]
            if math.isfinite(resident):
                by_kv = min(by_kv, max(1, int(resident)))
            kv_bound = by_kv < cap
            cap = min(cap, by_kv)
        self.cap = max(1, cap)
        self.loop_cap = fewest_residents(self.cap, kv_bound, held + R)  # a closed loop's bound (qmodel.closed)
        # a slot cap (KV or max_batch) below the budget's: a prompt starts only into a free slot
        self._slot_capped = self.cap < self.chunk_tokens - 1
        # per-state tables n = 0..cap (decode part, mixed-iteration parts per prompt token)
        n = np.arange(self.cap + 1, dtype=float)
        sv = self.service
        B = float(self.chunk_tokens)
        c = B - n
        self.td = np.asarray(sv.decode_step_time_s(np.maximum(n, 1.0), np.maximum(n, 1.0) * self.C), dtype=float)
        delta = self.td - np.asarray(sv.decode_step_time_s(np.maximum(n, 1.0), 0.0), dtype=float)
        delta[0] = 0.0
        k = 1.0 + c / self.mean_p
        base = np.asarray(sv.prefill_time_s(B, 0.0, k), dtype=float) + delta  # one full iteration, no attention
        self.lin_per_token = base / c  # seconds of mixed iteration per prompt token (linear part)
        # attention part per prompt: (P/c)[T_p(c, cP, 1) - T_p(c, 0, 1)] for each state (cap+1) x sample
        cc = c[:, None]
        # The per-prompt tables depend on P only: evaluate them on the distinct prompt lengths (token
        # counts repeat a lot in a sample) and weight by multiplicity; rows expand on demand.
        pu, self._inv, cnt = np.unique(p, return_inverse=True, return_counts=True)
        wu = self._wu = cnt / float(cnt.sum())
        self._pu = pu
        quad = (pu[None, :] / cc) * (np.asarray(sv.prefill_time_s(cc, cc * pu[None, :], 1.0), dtype=float)
                                     - np.asarray(sv.prefill_time_s(cc, 0.0, 1.0), dtype=float))
        self.mean_quad = quad @ wu
        self._quad = quad
        # A prompt alone in the backlog ends with a partial iteration of r = P mod c tokens that still pays
        # the iteration's fixed part: extra_n(P) = T_p(n + r) + Delta(n) - (r/c) [T_p(B_c) + Delta(n)].
        # It is paid only when no other prompt fills the rest of that iteration (probability 1 - rho_c).
        r = pu[None, :] - cc * np.floor(pu[None, :] / cc)
        part = (np.asarray(sv.prefill_time_s(n[:, None] + r, 0.0, 1.0), dtype=float) + delta[:, None]
                - r / cc * base[:, None])
        self._extra = np.where(r > 0, np.maximum(part, 0.0), 0.0)
        self.mean_extra = self._extra @ wu
        # That partial iteration is still one iteration: every running sequence gets a token from it,
        # (1 - r/c) of an iteration more than the fluid P/c counts. Paid with the same 1 - rho_c.
        self._extra_iters = np.where(r > 0, 1.0 - r / cc, 0.0)
        self.mean_extra_iters = self._extra_iters @ wu
        # mean mixed work per prompt S_n and stall X_n (means over the sample), per state, full packing
        self.mean_S = self.mean_p * self.lin_per_token + self.mean_quad
        self.mean_X = self.mean_S - self.mean_p / c * self.td
        self.mean_X[0] = self.mean_S[0]
        self.lam_fluid = self._fluid_limit(n, c)
        if self.kv_capacity_tokens is not None or self.max_batch is not None:
            from qmodel.stations.chunked_capacity import chunked_saturated_rate_per_s

            self.lam_fluid = min(self.lam_fluid, chunked_saturated_rate_per_s(
                sv, p, L, self.kv_capacity_tokens, self.max_batch, self.chunk_tokens, cached_tokens=self.cached_tokens,
                reserved_output=self.reserved_output_tokens))
        self.multi = L >= 2
        if not np.any(self.multi):
            raise InputError("output_tokens", "all 1", "some requests with at least 2 output tokens (TPOT)")
        lm1 = L[self.multi] - 1.0
        edges = distinct(np.geomspace(lm1.min(), lm1.max() * (1 + 1e-9), L_GROUPS + 1))
        self.gi = np.clip(np.searchsorted(edges, lm1, side="right") - 1, 0, len(edges) - 2)
        self._lam_max = self._find_lam_max()
        w0 = self.p * self.lin_per_token[0] + self._quad[0][self._inv]  # prompt work with no decodes
        self._ttft_dx = max(float(w0.mean()) / 200.0, float(w0.max()) / 8192.0)

    def _fluid_limit(self, n: np.ndarray, c: np.ndarray) -> float:
        """Largest per-instance rate the GPU time per request allows, over decode batches n = 1..cap.

        A request costs its prompt's chunks, X_n (mixed-iteration time beyond the decode step, the
        re-read attention included), plus E[L-1] decode slots of t_d(n)/n. While decode-only
        iterations remain (E[L-1]/n >= E[P]/c: the prompt tokens fill fewer iterations than the
        decodes need) the GPU is full at lam = 1/(E[X_n] + E[L-1] t_d(n)/n); otherwise every
        iteration is a full mixed one and lam = 1/E[S_n] = c/(E[P] tau_n). Both agree at the
        crossover n* = B E[L-1]/(E[P] + E[L-1]).
        """
        if self.cap < 1:
            return 0.0
        dec = float(np.mean(self.L - 1.0))
        nn, cc = n[1:], c[1:]
        spare = dec / nn >= self.mean_p / cc
        per_req = np.where(spare, self.mean_X[1:] + dec * self.td[1:] / nn, self.mean_S[1:])
        return float(np.max(1.0 / per_req))

    # ---- per-rate chain -------------------------------------------------------------------
    def _rho_c(self, lam: float) -> np.ndarray:
        """Prefill share per state: rho = lam (S_packed + (1 - rho) extra) solved for rho."""
        return lam * (self.mean_S + self.mean_extra) / (1.0 + lam * self.mean_extra)

    def _work(self, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """Per state: mean mixed work per prompt and mean stall per prompt at rate lam."""
        share = 1.0 - np.minimum(self._rho_c(lam), 1.0)
        s_mean = self.mean_S + share * self.mean_extra
        return s_mean, s_mean - (self.mean_S - self.mean_X) - share * self.mean_extra_iters * self.td

    def _step(self, lam: float):
        n_all = np.arange(self.cap + 1, dtype=float)
        mean_s, mean_x = self._work(lam)
        rho_c = lam * mean_s
        rho_x = lam * mean_x
        g_tab = np.where(rho_c < 1.0, self.td / np.maximum(1.0 - rho_x, 1e-12),
                         mean_s * (self.chunk_tokens - n_all) / self.mean_p)

        def step(nv: np.ndarray) -> np.ndarray:
            idx = np.minimum(nv.astype(np.int64), self.cap)
            return g_tab[idx]

        return step, g_tab

    def _chain_tail(self, lam: float) -> float:
        _, g = self._step(lam)
        return lam * self.mean_output * float(g[self.cap]) / self.cap

    def _find_lam_max(self) -> float:
        hi = self.lam_fluid
        if self._chain_tail(hi * (1 - 1e-9)) < 1.0:
            return hi
        lo = 0.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._chain_tail(mid) < 1.0 else (lo, mid)
        return lo

    def max_stable_rate_per_s(self) -> float:
        return self._lam_max * self.instances

    def _decode_chain(self, lam: float) -> tuple[np.ndarray, float, float]:
        """(pi[0..m], tail beyond the cap, tail ratio) of one instance's decode chain at rate lam."""
        step, _ = self._step(lam)
        return GPSChain(step, cap=self.cap, slope_inf=0.0).solve(lam * self.mean_output, self.cap)

    def occupancy(self, rate_per_s: float) -> dict[str, np.ndarray | int]:
        """One instance's modelled occupancy law at pool rate ``rate_per_s``: ``decode`` pi[0..cap]
        (sequences decoding, the mass beyond the cap folded into it) and the slot ``cap``; read by
        ``benchmarks/chunked_occupancy.py`` against the replay's time-average histograms."""
        lam = rate_per_s / self.instances
        pi, tail, _ = self._decode_chain(lam)
        out: dict[str, np.ndarray | int] = {"decode": np.append(pi[:-1], pi[-1] + tail), "cap": self.cap}
        if self.dispatch == "jsq" and self.instances > 1:
            pi_p, tail_p, _ = pooled_slot_chain(self._step(lam)[1], self.instances, lam * self.mean_output)
            out["pooled"] = np.append(pi_p[:-1], pi_p[-1] + tail_p)
        return out

    # ---- solve -----------------------------------------------------------------------------
    def solve(self, rate_per_s: float) -> StationSolution:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "a positive finite arrival rate")
        lam_max = self.max_stable_rate_per_s()
        lam = rate_per_s / self.instances
        load = rate_per_s / lam_max
        if load >= 1.0:
            raise UnstableError(self.name, load, rate_per_s, lam_max, "prompt + decode tokens per iteration budget")
        g_tab = self._step(lam)[1]
        pi, tail, rc = self._decode_chain(lam)
        # KV admission: at the slot cap (KV, max_batch or the budget) a prompt waits for a free slot
        # before its first chunk; independent of the backlog wait, added to TTFT below
        adm = slot_admission(pi, tail, rc, g_tab, self.instances, self.dispatch, lam * self.mean_output,
                             self.mean_output, self.cv2_output, self.ca2, self._ttft_dx, self.clients,
                             self.loop_cap, self.loop_thinks)
        if tail > 0:
            pi = pi.copy()
            pi[-1] += tail  # states beyond the cap wait for a slot; folded into the cap state
        m = len(pi) - 1
        nn = np.arange(m + 1)
        mean_n = float(np.dot(nn, pi))
        # The per-state tables are read at fractional states (linear between the two neighbours):
        # rounding the mean decode batch to an integer made attainment jump where it flipped, which
        # cost the goodput search many solves around such a step.
        nbar = min(mean_n, float(self.cap))
        rho_all = self._rho_c(lam)
        rho_c = state_at(rho_all, nbar)
        if rho_c >= 1.0:
            raise UnstableError(self.name, rho_c, rate_per_s, lam_max, "prompt backlog at the mean decode batch")

        def share(v: float) -> float:
            return 1.0 - min(state_at(rho_all, v), 1.0)

        def work(v: float) -> np.ndarray:
            return (self.p * state_at(self.lin_per_token, v)
                    + (state_at(self._quad, v) + share(v) * state_at(self._extra, v))[self._inv])

        # ---- TTFT: M/G/1 prompt backlog + decode residual + own chunks -------------------------
        s_own = work(nbar)
        mean_s = float(s_own.mean())
        dxs = self._ttft_dx  # rate-independent grid: attainment then moves monotonically with the rate
        own_pmf = grid_pmf(s_own, dxs)
        sf = 1.0 - np.cumsum(own_pmf)
        res = np.concatenate([[0.0], sf[:-1]])
        res = res / res.sum()
        resid = GridDist(dxs, res, float(np.mean(s_own**2)) / (2 * mean_s), exact=False)
        cs2 = float(np.mean(s_own**2)) / mean_s**2 - 1.0
        ll = self.dispatch in ("least_loaded", "jsq")  # both steer the pooled stream to a lightly loaded instance
        m_burst = burst_batch_mean(self.ca2, self.instances, ll, lam, mean_s / (1.0 - rho_c))
        if m_burst > 1.0:  # bursty arrivals: batch-Poisson stand-in (M^X/G/1 wait)
            # least_loaded: the pooled stream's bursts queue on one instance's backlog, then the load
            # steering (stations/steer.py) picks the instance met
            pk = batch_wait(own_pmf, dxs, rho_c, m_burst, 1)
        else:
            pk = jsq_wait(pk_wait(resid, rho_c), rho_c, 1, (self.ca2 + cs2) / (1.0 + cs2))
        if ll:  # jsq's backlog read as least_loaded's: steering by count instead moved no case (docs/methods.md)
            pk = steered_wait(pk, self.instances, mean_s / self.mean_p, self._ll_delta)
        busy_dec = 1.0 - float(pi[0])  # P(decoding | no prompt backlog)
        keep = pi[1:] > 1e-14 * float(pi.max())
        gd = self.td[1: m + 1][keep]
        wd = pi[1:][keep]
        wd = wd / max(float(wd.sum()), 1e-300)
        dec_part = decode_residual(gd, wd, 1.0 - rho_c, busy_dec, dxs)
        wait = convolve(pk, dec_part)
        c_bar = self.chunk_tokens - nbar  # the token comes after the last chunk's iteration, later prompts' too
        tau = float(state_at(self.lin_per_token, nbar) * c_bar + state_at(self.mean_quad, nbar) * c_bar / self.mean_p)
        t_pre, wait_b = first_iteration(self.service, self._pu, self._wu, nbar, self.chunk_tokens, lam * self.mean_p,
                                        tau, rho_c, self.mean_p, max(self.cap - nbar - 1.0, 0.0), wait)
        first = s_own + t_pre[self._inv]
        # TPOT's own window keeps TTFT's former term, as calibrated (docs/validation.md, "Chunked TTFT p50")
        half_iter = 0.5 * rho_c * tau
        ttft = convolve(wait_b, GridDist(dxs, grid_pmf(first, dxs), float(first.mean()), exact=False))

        # ---- TPOT: stalls from prompts chunked into the request's decode life ------------------
        # The prompts behind the request when it starts decoding arrived during its whole TTFT (FCFS:
        # nobody overtakes it), so the own term is lam (W + S_own), not lam S_own as in colocated.
        nodes, wts = n_nodes(pi)
        # strata of the wait: a request that waited long has a long backlog behind it (its stalls)
        w_nodes, w_wts = strata_nodes(wait, _W_NODES)
        jumps, rhos, tds, caps, owns, node_w, life, rates = [], [], [], [], [], [], [], []
        # stall samples at the mean state (they vary little across N nodes; one FFT per L group)
        j1 = min(nbar + 1.0, float(self.cap))
        w_1 = work(j1)
        iters_1 = self.p / (self.chunk_tokens - j1) + share(j1) * state_at(self._extra_iters, j1)[self._inv]
        x = np.maximum(w_1 - iters_1 * state_at(self.td, j1), 0.0)
        rc_1 = min(state_at(rho_all, j1), 0.99)
        if ll and m_burst <= 1.0:
            # a busy period grows by the arrivals that meet a backlog: under the load steering that is
            # P(W > 0) of the steered wait, not rho_c (PASTA); it starts at rate lam (1 - that)
            rc_1 = min(rc_1, 1.0 - float(pk.pmf[0]) / max(float(pk.pmf.sum()) + float(pk.tail), 1e-300))
        y = busy_period_stalls(w_1, x, rc_1, m_burst)
        # bursty arrivals: the members of the tagged request's batch behind it on its instance
        # (floor(J/c), J ~ Geometric_0(1 - 1/m)) are queued behind it too; added to the own window as
        # their mean count (seconds of arrivals at rate lam)
        qb = (1.0 - 1.0 / m_burst) ** (self.instances if ll else 1)
        behind_s = qb / (1.0 - qb) / lam
        # the stream the request meets (qmodel.stations.stall_stream): dealt out smoothly (variance
        # factor per L group over its window), Palm-started (round_robin) and slot-gated
        ci2 = 1.0 if m_burst > 1.0 else instance_count_scv(self.ca2, self.instances, self.dispatch)
        f_slot = slot_gate(pi, mean_n, self._slot_capped)
        groups, disp = [], []
        lm1 = self.L[self.multi] - 1.0
        so = s_own[self.multi] + half_iter
        life_1 = state_at(self.td, j1) / (1.0 - min(lam * float(x.mean()), 0.999))  # seconds per token
        for g in distinct(self.gi):
            sel = self.gi == g
            g1, tp = 1.0 / float(np.mean(1.0 / lm1[sel])), float(np.mean(so[sel]))
            groups.append((float(sel.mean()), g1, f_slot * tp))
            disp.append(stall_dispersion(x, ci2, lam * (wait.mean_s + tp + g1 * life_1)))
        so_bar, so_min = float(np.mean(s_own)) + half_iter, min(g[2] for g in groups) / max(f_slot, 1e-300)
        for v, wv in zip(nodes, wts):
            j = min(v + 1.0, float(self.cap))
            c = self.chunk_tokens - j
            w_j = work(j)
            rc_j = rc_1
            for wn, ww in zip(w_nodes, w_wts):
                life.append(y)
                rates.append(f_slot * (1.0 - rc_j) / m_burst)
                jumps.append(x)
                rhos.append(min(lam * float(x.mean()), 0.999))
                tds.append(state_at(self.td, j))
                # every iteration emits a token: a gap is at most one full mixed iteration
                caps.append(float(np.mean(w_j)) * c / self.mean_p)
                palm = 0.0 if ll else palm_shift_s(ci2, lam, wn + so_bar)  # (never below the own prefill)
                owns.append(f_slot * max(wn + behind_s + palm, -so_min))
                node_w.append(wv * ww)
        tpot = stall_tpot(lam, groups, np.asarray(node_w), np.asarray(tds), rhos, jumps, caps, owns, life, rates,
                          dx0=float(self.td[1]) / 200.0, group_dispersion=disp)

        if adm is not None:
            ttft, wait = convolve(adm, ttft), convolve(adm, wait)
        notes = (
            "chunked model derived here (prefill-priority sketch, docs/reference_values.md §2.9), checked against a step-level DES at 0.2-0.8 of "
            "the limit: TPOT/TTFT mean and p90 within ~±8%, p99 within ~±8%, TPOT p50 ~−11% at 0.8 "
            "(tests/test_stations_chunked.py)",
            f"step time: mixed iteration = prefill_time_s(chunk + n, sum c^2+2cd, k) + decode context part "
            f"(one iteration overhead), budget {self.chunk_tokens} tokens",
        )
        return StationSolution(
            name=self.name,
            utilization=float(load),
            busy_fraction=float(rho_c + (1 - rho_c) * busy_dec),  # what the replay meters
            max_stable_rate_per_s=float(lam_max),
            delay=ttft,
            wait=wait,
            tpot=tpot,
            mean_in_system=(mean_n + lam * ttft.mean_s) * self.instances,
            method="chunked: M/G/1 prompt backlog + GPS decode with compound-Poisson chunk stalls",
            exact=False,
            notes=notes,
            extra={"rho_c": rho_c, "mean_n_decode": mean_n, "mean_tpot_s": tpot.mean_s,
                   "lam_fluid_per_instance": self.lam_fluid,
                   "mean_slot_wait_s": adm.mean_s if adm is not None else 0.0},
        )
