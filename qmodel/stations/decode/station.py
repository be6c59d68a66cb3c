"""Decode pool with continuous batching: a generalized processor-sharing (GPS) queue.

Model (docs/methods.md, "Stations": decode). One decode instance advances every active sequence by one token per step; a
step with n sequences whose contexts total n*C̄ takes t(n) = service.decode_step_time_s(n, n*C̄),
with C̄ = E[L (P + (L+1)/2)] / E[L] the time-average context of an active slot (§1). Each active
request therefore receives 1/t(n) tokens/s and the instance is a GPS queue with total token rate
phi(n) = n / t(n). By Cohen's GPS insensitivity the stationary occupancy is the birth-death law

    pi(n) ∝ prod_{k=1..n} lam E[L] t(k) / k,

which depends on the output lengths only through E[L]. For affine t(n) = a + beta n it is

    N ~ NegBin(r = 1 + a/beta, x = lam E[L] beta):  E[N] = r x/(1-x),  Var N = r x/(1-x)^2,
    mean TPOT = (a + beta)/(1 - x),  stable iff x < 1.

This station evaluates t(n) from the service model on the integer grid (no linearity assumed) and
solves the chain in log space; the fitted a, beta are reported in ``extra``.

Slot cap N_max = min(max_batch, floor((KV capacity - reserved in-flight KV) / C̄_peak)) with
C̄_peak = E[P + L] (reserve by current length; mean-field, an approximation) or E[P + R] under a
``max_tokens`` reservation (R per request: :func:`qmodel.workload.reserved_output_tokens`).
Above N_max the token rate is N_max/t(N_max): the tail is geometric with ratio
rho_cap = lam E[L] t(N_max)/N_max, stable iff rho_cap < 1. The chain is exact for geometric L; for
other L the slot wait is scaled by (1 + c_L^2)/2 (Allen–Cunneen style; ±15% against DES).

Per-request TPOT: quasi-static rule TPOT ≈ t(min(N + 1, N_max)) with N seen on arrival (PASTA);
accurate to ~1% at E[L] ~ 200 where the occupancy relaxes no faster than a sojourn.
Admission wait: residual of the running step (uniform on the step, zero when idle) plus the slot
wait when all slots are busy: P(wait) = P(N >= N_max), exponential with rate
mu_full (1 - rho_cap), mu_full = N_max/(E[L] t(N_max)) (exact for geometric L).

``mean_in_system`` counts the chain's N plus the requests waiting for the next step boundary
(lam E[residual], Little), which is what a step-level engine holds.

Pools of c instances: random (and round_robin, conservatively) split: per-instance chain at lam/c,
exact for random. least_loaded: pooled GPS with phi(n) = n / t(n/c) (balanced split), i.e. a
NegBin with r = 1 + c a/beta and the same x; derived, an approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from qmodel.dist import GridDist
from qmodel.errors import InputError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import DISPATCHES, Param, StationModel, StationSolution, integer, one_of, sample
from qmodel.stations.decode.chain import MAX_STATES, GPSChain, fit_affine, mean_context_tokens
from qmodel.stations.decode.laws import discrete_dist, occupancy_quantiles, occupancy_variance, uniform_mixture_cdf
from qmodel.dist import pow2_grid
from qmodel.stations.decode.slot_wait import (fewest_residents, loop_chain, slot_wait, slot_wait_mean, slot_wait_span_s,
                                              slot_wait_survival)
from qmodel.stations.pool_inputs import reserved_output

__all__ = ["DecodeStation", "Dispatch"]


Dispatch = Literal["random", "round_robin", "least_loaded"]

_ADMISSION_STEPS = 400.0  # admission-wait grid: the one-sequence step t(1) over this (before power-of-two coarsening)
_TPOT_STEPS = 2000.0  # TPOT grid: t(1) over this


@dataclass(eq=False)
class DecodeStation(StationModel):
    """Decode pool of ``instances`` engines with continuous batching (GPS; formulas in the module doc).

    Parameters: ``service`` (one instance's step times), ``prompt_tokens``/``output_tokens`` (a joint,
    equally weighted sample), ``kv_capacity_tokens`` (per instance, None = unlimited),
    ``max_batch`` (per instance, None = unlimited), ``dispatch``, ``kv_reserved_tokens`` (mean KV
    tokens per instance held by in-flight transfers; reduces capacity), ``reserved_output_tokens`` (per
    request, the output tokens a ``max_tokens`` KV reservation holds; None: its own output),
    ``first_step_in_ttft``.
    """

    service: ServiceTimeModel
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    instances: int = 1
    kv_capacity_tokens: float | None = None
    max_batch: int | None = None
    dispatch: Dispatch = "least_loaded"
    kv_reserved_tokens: float = 0.0
    reserved_output_tokens: np.ndarray | None = None
    first_step_in_ttft: bool = False
    name: str = "decode"
    #: a closed loop's N (:mod:`qmodel.closed`): an arrival sees at most N - 1 other requests, which bounds
    #: its slot wait (:func:`qmodel.stations.decode.bounded_slot_wait`); None: open arrivals
    clients: int | None = None
    #: the loop's clients think between requests (Z > 0); with Z = 0 the loop is always full and only
    #: its "never fills the slots" bound applies (:func:`qmodel.stations.decode.bounded_slot_wait`)
    loop_thinks: bool = True

    params = (
        Param(("prompt_tokens", "output_tokens"),
              sample(lambda p, L: p.size > 0 and p.size == L.size, "a non-empty joint sample of equal sizes"),
              "lengths", shown=lambda v: "{} prompts / {} outputs".format(*(np.size(x) for x in v))),
        Param(("prompt_tokens", "output_tokens"),
              sample(lambda p, L: not (np.any(L < 1) or np.any(p < 0))
                     and bool(np.all(np.isfinite(L)) and np.all(np.isfinite(p))),
                     "output lengths >= 1, prompt lengths >= 0"),
              "output_tokens", shown=lambda _: "values < 1 or prompts < 0"),
        Param("instances", integer(1, "an integer >= 1"), "decode.instances"),
        Param("dispatch", one_of(DISPATCHES), "decode.dispatch"),
    )

    def prepare(self) -> None:
        p = np.asarray(self.prompt_tokens, dtype=float).ravel()
        L = np.asarray(self.output_tokens, dtype=float).ravel()
        self.mean_output = float(L.mean())
        self.cv2_output = float(L.var() / self.mean_output**2)
        self.mean_context = mean_context_tokens(p, L)
        self.R = R = reserved_output(self.name, L, self.reserved_output_tokens)
        peak = float(p.mean() + R.mean())
        self.context_peak = peak
        self.n_max = n_max = self._n_max(self.kv_reserved_tokens)
        c = self.instances
        self.pooled = self.dispatch == "least_loaded" and c > 1
        scale = 1.0 / c if self.pooled else 1.0
        C = self.mean_context

        def step(n: np.ndarray) -> np.ndarray:
            m = n * scale
            return np.asarray(self.service.decode_step_time_s(m, m * C), dtype=float)

        self._step = step
        # Asymptotic slope for the uncapped stability limit: secant far out on the step-time curve.
        n1, n2 = 1 << 15, 1 << 16
        t1, t2 = (float(self.service.decode_step_time_s(float(v), float(v) * C)) for v in (n1, n2))
        slope = (t2 - t1) / (n2 - n1)
        self._slope_per_instance = slope
        self.chain = GPSChain(step, cap=self._cap(n_max), slope_inf=slope * scale)
        # prefix sums of t(n) and n t(n) over the fit range: the fit for any smaller slot cap (the
        # reserved in-flight KV lowers it at every rate) is then two lookups, not a re-evaluation
        fit_n, t_fit = self._fit_table(_fit_points(n_max))
        self._fit_sums = (np.concatenate([[0.0], np.cumsum(t_fit)]), np.concatenate([[0.0], np.cumsum(fit_n * t_fit)]))
        self.a_s, self.beta_s = self._affine(n_max)

    def _affine(self, n_max: int | None) -> tuple[float, float]:
        """(a, beta) of t(n) ~ a + beta n fitted by least squares over n = 1..N, the reachable batch
        sizes (the NegBin guess): beta = (Σ n t − n̄ Σ t) / (N (N² − 1)/12), a = t̄ − beta n̄."""
        N = _fit_points(n_max)
        cum_t, cum_nt = self._fit_sums
        if N >= cum_t.size:  # a cap above the one the sums were built for (reserved KV released)
            return fit_affine(*self._fit_table(N))
        n_bar = (N + 1) / 2.0
        st, snt = float(cum_t[N]), float(cum_nt[N])
        beta = (snt - n_bar * st) / (N * (N * N - 1) / 12.0)
        return st / N - beta * n_bar, beta

    def _fit_table(self, N: int) -> tuple[np.ndarray, np.ndarray]:
        """(n, t(n)) for n = 1..N, one instance's step time at the mean context."""
        n = np.arange(1, N + 1, dtype=float)
        return n, np.asarray(self.service.decode_step_time_s(n, n * self.mean_context), dtype=float)

    def _n_max(self, reserved_tokens: float) -> int | None:
        """Sequences per instance: the slot cap, and what the KV memory less ``reserved_tokens``
        holds at the mean peak context."""
        n_max: int | None = self.max_batch
        if self.kv_capacity_tokens is not None:
            peak = self.context_peak
            usable = float(self.kv_capacity_tokens) - float(reserved_tokens)
            by_kv = int(math.floor(usable / peak)) if peak > 0 else None
            if by_kv is not None and by_kv < 1:
                raise InputError("decode.kv_capacity_tokens",
                                 f"{self.kv_capacity_tokens:g} (minus {reserved_tokens:g} reserved)",
                                 f"room for at least one sequence of {peak:.0f} tokens")
            if by_kv is not None:
                n_max = by_kv if n_max is None else min(n_max, by_kv)
        return n_max

    def _cap(self, n_max: int | None) -> int | None:
        """The chain's state cap: per instance, or the pool's when pooled."""
        return None if n_max is None else (n_max * self.instances if self.pooled else n_max)

    def with_reserved_kv(self, tokens: float) -> "DecodeStation":
        """This station with ``tokens`` of KV per instance held for transfers in flight; what does not
        depend on them (lengths, fit, slope, and the chain itself while the cap is unchanged) is
        shared rather than rebuilt (the engine asks for this at every rate)."""
        tokens = float(tokens)
        if tokens == self.kv_reserved_tokens:
            return self
        n_max = self._n_max(tokens)
        changes: dict[str, Any] = {"kv_reserved_tokens": tokens}
        if n_max != self.n_max:
            a_s, beta_s = self._affine(n_max)
            changes.update(n_max=n_max, chain=self.chain.with_cap(self._step, self._cap(n_max)), a_s=a_s, beta_s=beta_s)
        return self.evolved(changes)

    # ---- stability -------------------------------------------------------------------------
    def max_stable_rate_per_s(self) -> float:
        """Pool rate at which the tail load reaches 1 (x = 1 uncapped, rho_cap = 1 capped), at most
        the saturated schedule's capacity (:func:`qmodel.stations.capacity.saturated_rate_per_s`: the
        KV reserved for prompt + output of the residents actually held, length-biased, not E[P + L])."""
        per_chain = self._chain_max_token_rate() / self.mean_output
        return min(per_chain * (1 if self.pooled else self.instances), self._saturated_rate_per_s)

    @cached_property
    def _saturated_rate_per_s(self) -> float:
        from qmodel.stations.capacity import saturated_rate_per_s

        steps = self.output_tokens + (1.0 if self.first_step_in_ttft else 0.0)  # decode steps + 1 per request
        return self.instances * saturated_rate_per_s(self.service, self.prompt_tokens, steps,
                                                     self.kv_capacity_tokens, self.max_batch, None,
                                                     reserved_output=None if self.reserved_output_tokens is None
                                                     else self.R + (steps - self.output_tokens))

    def _chain_max_token_rate(self) -> float:
        if self.chain.cap is None:
            if self.chain.slope_inf <= 0:
                raise InputError("service.decode_step_time_s", "flat in n", "a step time that grows with batch size, or a slot cap")
            return 1.0 / self.chain.slope_inf
        cap = self.chain.cap
        return cap / float(self.chain.g(cap)[cap])

    def _chain_rate(self, rate_per_s: float) -> float:
        return rate_per_s if self.pooled else rate_per_s / self.instances

    # ---- solve -----------------------------------------------------------------------------
    def occupancy(self, rate_per_s: float) -> tuple[np.ndarray, float, float]:
        """pi over one chain (one instance, or the pooled pool), tail mass beyond the array, tail ratio."""
        lam = self._chain_rate(rate_per_s)
        tok = lam * self.mean_output
        load = tok / self._chain_max_token_rate()
        if load >= 1.0:
            raise UnstableError(self.name, load, rate_per_s, self.max_stable_rate_per_s(),
                                "slot cap" if self.chain.cap is not None else "lam E[L] beta")
        # truncation guess from the fitted NegBin: mean + 12 sd (+ a margin); the chain doubles if short
        beta = max(self.beta_s * (1.0 / self.instances if self.pooled else 1.0), 1e-300)
        x = min(tok * beta, 0.999999)
        r = 1.0 + max(self.a_s, 0.0) / beta if beta > 0 else 1.0
        guess = r * x / (1 - x) + 12 * math.sqrt(r * x) / (1 - x) + 64
        return self.chain.solve(tok, int(min(guess, MAX_STATES)))

    def solve(self, rate_per_s: float) -> StationSolution:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "a positive finite arrival rate")
        pi, tail, rc = self.occupancy(rate_per_s)
        lam = self._chain_rate(rate_per_s)
        m = len(pi) - 1
        g = self.chain.g(m)
        cap = self.chain.cap
        capped = cap is not None and m == cap
        n = np.arange(m + 1, dtype=float)

        # E[N] (in service + waiting for a slot), per chain
        mean_n = float(np.dot(n, pi))
        if capped:
            # sum_{n>cap} n pi(cap) rc^(n-cap)
            mean_n += float(pi[-1]) * (cap * rc / (1 - rc) + rc / (1 - rc) ** 2)
        chains = 1 if self.pooled else self.instances
        busy = 1.0 - float(pi[0])

        # quasi-static TPOT: arrival sees n, runs at g(min(n+1, cap))
        tp_val = np.empty(m + 1)
        tp_val[:-1] = g[1:]
        tp_val[-1] = g[m] if capped else self.chain.g(m + 1)[m + 1]
        if self.pooled:
            # least_loaded: the arrival joins an instance holding floor(n/c) others (balanced split)
            c = self.instances
            k = np.minimum(np.floor(np.arange(m + 1) / c) + 1.0, (cap // c) if capped else np.inf)
            tp_val = np.asarray(self.service.decode_step_time_s(k, k * self.mean_context), dtype=float)
        tp_w = pi.copy()
        tp_w[-1] += tail
        mean_tpot = float(np.dot(tp_val, tp_w))

        # admission: residual step (uniform on g(min(n, cap)), 0 when idle) + slot wait
        if capped:
            p_wait, slot_rate = slot_wait(pi, tail, rc, cap, float(g[cap]), self.mean_output, self.cv2_output)
        else:
            p_wait, slot_rate = 0.0, math.inf
        ac = (1.0 + self.cv2_output) / 2.0
        a_pi, a_tail, a_capped, p_wait, phases = self._seen_by_loop(pi, tail, rc, capped, p_wait)
        mean_slot = p_wait * slot_wait_mean(slot_rate, rc, phases) if a_capped and p_wait > 0 else 0.0
        resid_w = a_pi.copy()
        resid_w[0] = 0.0
        if a_capped:
            resid_w[-1] = 0.0  # a queued request's residual is part of its slot wait
        mean_resid = float(np.dot(resid_w, g[: len(a_pi)])) / 2.0
        mean_first = mean_tpot if self.first_step_in_ttft else 0.0

        delay, wait = self._admission_dists(g, a_pi, a_tail, a_capped, p_wait, slot_rate, mean_resid + mean_slot,
                                            mean_first, rc, phases)
        tpot = discrete_dist(tp_val, tp_w, mean_tpot, float(g[1]) / _TPOT_STEPS)
        notes = ["quasi-static TPOT rule t(N+1) (±~1% vs step DES at E[L]~200; conservative for very long outputs)"]
        exact = True
        if capped:
            notes.append(f"slot cap N_max={self.n_max}/instance: birth–death chain exact for geometric L; "
                         f"slot wait scaled by (1+c_L^2)/2={ac:.3f} (±15% vs DES)")
            exact = self.cv2_output == 1.0
        if self.pooled:
            notes.append("least_loaded: pooled GPS phi(n)=n/t(n/c) (derived, approximate)")
            exact = False
        if self.dispatch == "round_robin" and self.instances > 1:
            notes.append("round_robin treated as random split (conservative: RR arrivals are smoother)")
            exact = False
        if self.kv_capacity_tokens is not None:
            notes.append(f"KV slots from mean peak context {self.context_peak:.0f} tokens (mean-field)")
        lam_max = self.max_stable_rate_per_s()
        quant = dict(zip(("p50", "p90", "p99"), self._tpot_quantiles(tp_val, tp_w, (0.5, 0.9, 0.99))))
        return StationSolution(
            name=self.name,
            utilization=float(rate_per_s / lam_max),
            busy_fraction=busy,
            max_stable_rate_per_s=lam_max,
            delay=delay,
            wait=wait,
            tpot=tpot,
            # requests waiting for the next step boundary are in the system too (Little: lam E[residual])
            mean_in_system=(mean_n + lam * mean_resid) * chains,
            method="GPS birth–death chain (NegBin for affine step time), quasi-static TPOT",
            exact=exact,
            notes=tuple(notes),
            extra={
                "a_s": self.a_s, "beta_s": self.beta_s, "mean_context_tokens": self.mean_context,
                "n_max": self.n_max, "x": lam * self.mean_output * self._slope_per_instance * (
                    1.0 if not self.pooled else 1.0 / self.instances),
                "rho_cap": rc if capped else None,
                "mean_n_per_chain": mean_n, "var_n_per_chain": occupancy_variance(n, pi, mean_n, capped, cap, rc, tail),
                "p_slot_wait": p_wait, "mean_slot_wait_s": mean_slot, "mean_residual_s": mean_resid,
                "mean_tpot_s": mean_tpot, "tpot_quantiles_s": quant,
                "n_quantiles": dict(zip(("p50", "p90", "p99"), occupancy_quantiles(pi, (0.5, 0.9, 0.99)))),
            },
        )

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _tpot_quantiles(vals: np.ndarray, w: np.ndarray, qs: tuple[float, ...]) -> list[float]:
        """Quantiles of the discrete TPOT law (values ``vals``, weights ``w``): one sort for all."""
        order = np.argsort(vals, kind="stable")
        c = np.cumsum(w[order])
        k = np.minimum(np.searchsorted(c, np.asarray(qs) - 1e-12), len(c) - 1)
        return [float(v) for v in vals[order][k]]

    def _seen_by_loop(self, pi: np.ndarray, tail: float, rc: float, capped: bool, p_wait: float
                      ) -> tuple[np.ndarray, float, bool, float, int | None]:
        """The chain as the admission reads it (:func:`loop_chain`): the open one, or a closed loop's."""
        if self.clients is None:
            return pi, tail, capped, p_wait, None
        # the fewest residents that fill the chain: KV-bound slots are filled by fewer long requests
        kv_bound = self.kv_capacity_tokens is not None and (self.max_batch is None or self.n_max < self.max_batch)
        fill = None if self.n_max is None else fewest_residents(
            self.n_max, kv_bound, np.asarray(self.prompt_tokens, dtype=float).ravel() + self.R)
        fill = fill * self.instances if fill is not None and self.pooled else fill
        return loop_chain(pi, tail, rc, capped, p_wait, self.clients, fill, self.loop_thinks)

    def _admission_dists(self, g: np.ndarray, pi: np.ndarray, tail: float, capped: bool, p_wait: float,
                         slot_rate: float, mean_wait: float, mean_first: float, ratio: float = 0.0,
                         phases: int | None = None) -> tuple[GridDist, GridDist]:
        """Wait = residual (+ slot wait); delay = wait (+ first step), built jointly on one grid.

        Arrival seeing n < cap: residual U(0, g(n)) (0 if n = 0), first step g(n+1).
        Arrival seeing n >= cap: slot wait Exp(slot_rate) (its residual folded in; a closed loop's
        bounded one, :func:`slot_wait_survival`, for ``phases``), first step g(cap).
        """
        m = len(pi) - 1
        nfree = m if capped else m + 1  # states where a slot is free on arrival
        widths = g[:nfree].copy()
        widths[0] = 0.0
        first = g[1: nfree + 1] if nfree + 1 <= len(g) else self.chain.g(nfree)[1: nfree + 1]
        w_free = pi[:nfree].copy()
        if not capped:
            w_free[-1] += tail
        hi = float(g[min(m, len(g) - 1)])
        # The slot wait's exponential tail is covered while its mass matters (slot_wait_span_s).
        span_wait = hi + (slot_wait_span_s(p_wait, slot_rate) if capped else 0.0)
        span = span_wait + (hi if self.first_step_in_ttft else 0.0)
        mean_tot = mean_wait + mean_first
        # rate-independent base step (power-of-two coarsening past 16000 points), so P(delay <= x)
        # moves monotonically with the rate under goodput bisection
        dx = pow2_grid(float(g[1]) / _ADMISSION_STEPS, span, 16000)
        size = int(math.ceil(span / dx)) + 3

        def build(shift: np.ndarray | None) -> np.ndarray:
            # Mixture of uniforms U(s, s+w) (atoms when w = 0) sampled exactly at the grid points,
            # plus the slot wait. The wait (s = 0) is searched on the few hundred widths
            # (uniform_mixture_cdf), the delay (s = the first step) by ramps.
            xk = np.arange(size) * dx
            pos = widths > 0
            if shift is None:
                cdf = uniform_mixture_cdf(xk, widths[pos], w_free[pos]) + float(w_free[~pos].sum())
            else:
                cdf = ramps(shift, xk, pos)
            if capped and p_wait > 0:
                base = 0.0 if shift is None else float(g[m])
                xx = xk - base
                cdf = cdf + np.where(xx >= 0, p_wait * (1.0 - slot_wait_survival(xx, slot_rate, ratio, phases)), 0.0)
            return cdf

        def ramps(s: np.ndarray, xk: np.ndarray, pos: np.ndarray) -> np.ndarray:
            # sum_i p_i [ramp(x - s_i) - ramp(x - s_i - w_i)] / w_i with ramp(y) = max(y, 0), and
            # sum_j c_j ramp(x_k - e_j) = x_k C(k) - D(k) over the points e_j < x_k (prefix sums)
            ka = np.minimum(np.ceil(s[~pos] / dx - 1e-9).astype(np.int64), size - 1)
            cdf = np.cumsum(np.bincount(ka, weights=w_free[~pos], minlength=size))
            if np.any(pos):
                slope = w_free[pos] / widths[pos]
                e = np.concatenate([s[pos], s[pos] + widths[pos]])
                c = np.concatenate([slope, -slope])
                k = np.minimum(np.floor(e / dx).astype(np.int64) + 1, size - 1)
                C = np.cumsum(np.bincount(k, weights=c, minlength=size))
                D = np.cumsum(np.bincount(k, weights=c * e, minlength=size))
                cdf = cdf + xk * C - D
            return cdf

        def to_dist(cdf: np.ndarray, mean: float) -> GridDist:
            rate = slot_rate if capped and p_wait > 0 else 1.0 / max(dx, 1e-300)
            return GridDist.from_cdf_values(cdf, dx, mean, tail_rate=rate, exact=False)

        wait = to_dist(build(None), mean_wait)
        if not self.first_step_in_ttft:
            return wait, wait
        delay = to_dist(build(first.astype(float)), mean_wait + mean_first)
        return delay, wait


def _fit_points(n_max: int | None) -> int:
    """Batch sizes 1..N the affine fit spans: the reachable ones (512 uncapped), 2 to 4096."""
    return max(2, min(n_max or 512, 4096))
