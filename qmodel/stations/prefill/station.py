"""The prefill pool station: ``instances`` engines, each its own bulk-service queue.

Per engine :class:`~qmodel.stations.prefill.chain.BulkQueue` at λ/c (random dispatch: Poisson,
exact). Round-robin (and non-Poisson arrivals) scale the queueing part by the heavy-traffic
factor (c_a² + c_e²)/(1 + c_e²), c_e² = Var(N − θS_N)/E[N], θ = E[N]/E[S_N], times KLB's g for
c_a² < 1 (:func:`instance_wait_scale`), and move P(W > 0) to QNA's GI/G/1 value with the batch
time's SCV; least_loaded without batching is the central M/G/c (least work left), with batching
the chain read as a central queue of c bulk servers (Erlang C wait probability, conditional wait
/ c: :meth:`PrefillStation._pooled_wait`). Stability: λ < c · E[N]/E[S_N]. The model, its exactness and its measured
errors: :mod:`qmodel.stations.prefill`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

import numpy as np

from qmodel.dist import GridDist
from qmodel.errors import InputError, UnstableError
from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.base import (DISPATCHES, Param, StationModel, StationSolution, integer, number, one_of, optional,
                                  sample)
from qmodel.stations.fcfs import (MDc, MGc, ServiceSample, erlang_c, klb_factor, qna_delay_probability,
                                  split_arrival_scv)
from qmodel.stations.prefill.chain import BulkQueue
from qmodel.stations.prefill.kernels import scale_time
from qmodel.stations.prefill.law import BatchServiceLaw
from qmodel.stations.prefill.sampling import DEFAULT_MAX_BATCH_SIZE, batch_cap
from qmodel.stations.prefill.wait_grids import lazy_grids

__all__ = ["Dispatch", "PrefillStation", "instance_wait_scale"]

Dispatch = Literal["random", "round_robin", "least_loaded"]

#: the busy fraction fed to Erlang C stays below 1 (QNA's P(W > 0) reaches 1 for very bursty input)
_BUSY_MAX = 1.0 - 1e-9


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


@dataclass(frozen=True, eq=False)
class PrefillStation(StationModel):
    """The prefill pool (the method: :mod:`qmodel.stations.prefill`).

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

    params = (
        Param("instances", integer(1, "must be an integer >= 1"), "prefill.instances"),
        Param("dispatch", one_of(DISPATCHES), "prefill.dispatch"),
        Param("ca2", number(0.0, expected="must be a finite number >= 0"), "arrivals.ca2"),
        Param("max_batch_tokens", optional(number(1.0, expected="must be >= 1 token")), "prefill.max_batch_tokens"),
        Param("prompt_tokens", sample(lambda p: p.size > 0 and bool(np.all(np.isfinite(p)) and np.all(p >= 0))
                                      and p.max() > 0, "prompt lengths must be finite, >= 0, not all zero"),
              "prompt_tokens", shown=lambda _: "sample"),
    )


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
        # random: Bernoulli splitting; round_robin and least_loaded (treated like it): cyclic splitting
        return split_arrival_scv(self.ca2, self.instances, cyclic=self.dispatch != "random")

    def _pooled_wait(self, q: BulkQueue) -> tuple[float, float]:
        """(conditional-wait scale, P(W > 0)) of a least_loaded pool read as a central queue of c
        bulk servers, as M/G/c is read from M/G/1: the arrival joins the engine with the least
        work left, so it waits only when all c are busy, P(W > 0) = Erlang C(c, c ρ_b) with ρ_b one
        engine's busy fraction (Poisson at λ/c), and the shared backlog drains c times as fast,
        so the chain's conditional wait is divided by c (exact for M/M/c; the heavy-traffic limit
        of a pooled queue). The same reading as the colocated overflow chain
        (:meth:`~qmodel.stations.colocated_ttft.ColocatedTTFT._pooled_bulk_delay`). Non-Poisson
        arrivals: the central queue sees the whole stream, so the conditional wait takes the
        heavy-traffic factor at the pool's SCV (:func:`instance_wait_scale`) and ρ_b in Erlang C
        becomes QNA's GI/G/1 P(W > 0) at that SCV (bursts keep engines busy together). Replay,
        suite configs at 0.8 of the limit: TTFT p99 +19/+27% (Poisson), +26/+44% (Gamma cv 2),
        against +72/+88% and +58/+82% per engine; very bursty streams at a lightly loaded pool
        run low (Erlang C misses the bursts). docs/validation.md, "least_loaded pools: the pooled
        bulk chain"."""
        c = self.instances
        busy = 1.0 - q.p_idle
        p_wait = erlang_c(c, c * busy)
        scale = 1.0 / c
        if abs(self.ca2 - 1.0) > 1e-12:
            cyc = q.cycle
            cs2b = max(cyc["batch_time_second_s2"] / cyc["batch_time_mean_s"] ** 2 - 1.0, 0.0)
            scale *= instance_wait_scale(q.rho_full, self.ca2, self._output_scv)
            p_wait = erlang_c(c, c * min(qna_delay_probability(busy, self.ca2, cs2b), _BUSY_MAX))
        return scale, p_wait

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
        # no cached tokens: the 2nc terms are 0 and x + 0.0 = x, so they are left out (same sums)
        c = None if self.cached_tokens is None else np.asarray(self.cached_tokens, dtype=float).ravel()
        # round-off leaves entries of order -1e-17 in the pmf; Generator.choice refuses any negative
        pk = np.clip(np.asarray(own_batch_pmf, dtype=float), 0.0, None)
        pk = pk / pk.sum()
        rng = np.random.default_rng(seed)
        k = rng.choice(np.arange(1, pk.size + 1), size=p.size, p=pk)
        sum_n = p.copy()
        sum_sq = p * p if c is None else p * p + 2 * p * c
        n_req = np.ones_like(p)
        budget = self.max_batch_tokens if self.token_aware else None
        open_ = np.ones(p.size, dtype=bool)
        # the batches still drawing (k > extra), compacted in index order: one draw each per round,
        # the same random stream as masks over the whole sample, on fewer entries
        live = np.arange(p.size)
        for extra in range(1, int(k.max())):
            live = live[k[live] > extra]
            pick = rng.integers(0, p.size, size=live.size)
            if budget is not None:  # FCFS prefix: once one does not fit, the batch is closed
                o = open_[live]
                grow, pick = live[o], pick[o]
                drawn = p[pick]
                fits = sum_n[grow] + drawn <= budget
                open_[grow] = fits
                grow, pick, drawn = grow[fits], pick[fits], drawn[fits]
            else:
                grow, drawn = live, p[pick]
            n_req[grow] += 1.0
            sum_n[grow] += drawn
            sum_sq[grow] += drawn ** 2 if c is None else drawn ** 2 + 2 * drawn * c[pick]
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
    def solve(self, rate_per_s: float, grids: bool = True, per_prompt: bool = True) -> StationSolution:
        """The pool at ``rate_per_s``. ``grids=False``: the wait and delay laws are solved only when
        first read (:func:`~qmodel.stations.prefill.wait_grids.lazy_grids`; their step is known at
        once), for a caller that reads only the rest (a trace's TPOT rate classes);
        ``per_prompt=False``: no ``own_batch_time_per_prompt_s`` (None), for a caller that solves no
        link from this solution (a trace's TTFT rate classes)."""
        self._check(rate_per_s)
        if self.dispatch == "least_loaded" and self.b == 1 and self.instances > 1:
            return self._solve_central(rate_per_s)
        q = BulkQueue(rate_per_s / self.instances, self.law)
        ca2_i = self._instance_ca2()
        notes: list[str] = []
        scale = 1.0
        wait_prob = None
        pooled = self.dispatch == "least_loaded" and self.instances > 1
        if pooled:
            scale, wait_prob = self._pooled_wait(q)
            notes.append(f"least_loaded with batching: central queue of {self.instances} bulk servers (P(wait) "
                         f"Erlang C {wait_prob:.3g}, conditional wait x {scale:.3g}); approximate")
        elif abs(ca2_i - 1.0) > 1e-12:
            rho = q.rho_full
            scale = instance_wait_scale(rho, ca2_i, self._output_scv)
            # Who waits: a Poisson arrival finds the engine busy with probability = its busy
            # fraction; regular (round-robin) arrivals find it busy less often, bursty ones more.
            # QNA's P(W > 0) with the batch time's SCV moves the atom at zero; those who wait keep
            # the chain's conditional wait times the heavy-traffic factor (see BulkQueue.grids).
            cyc = q.cycle
            busy = 1.0 - q.p_idle
            cs2b = max(cyc["batch_time_second_s2"] / cyc["batch_time_mean_s"] ** 2 - 1.0, 0.0)
            wait_prob = qna_delay_probability(busy, ca2_i, cs2b)
            notes.append(f"per-engine arrival SCV {ca2_i:.3g}: queueing part scaled by {scale:.3g} "
                         "(heavy-traffic (ca2+b cb2)/(1+b cb2), KLB g for ca2<1), P(wait) "
                         f"{busy:.3g} -> {wait_prob:.3g} (QNA); approximate")
        if self.token_aware:
            notes.append(f"token budget {self.max_batch_tokens:g}: FCFS-prefix batches (mean {self.law.mean_drain[0]:.3g} "
                         f"requests from a long queue, at most {self.b}); head regimes by Monte Carlo (approximate)")
        elif self.max_batch_tokens is not None and self.law_override is None:
            notes.append(f"token budget {self.max_batch_tokens:g} fits b = {self.b} equal prompts: exact cap")
        if grids or pooled:  # (pooled: the laws are re-scaled below)
            wait, delay, own = q.grids(self.dx, wait_scale=scale, wait_prob=wait_prob,
                                       own_stages=self.service.prefill_exit_stages)
        else:
            wait, delay, own = lazy_grids(q, self.dx, scale, wait_prob, self.service.prefill_exit_stages)
        # exact for the stated model: Poisson per engine and a request cap that is the engine's rule
        exact = scale == 1.0 and self.dispatch == "random" and self._budget_is_cap
        own_pmf = q.own_batch_pmf
        method = (f"M/G^[1,{self.b}]/1 embedded chain per instance, token-budget FCFS-prefix batches ({self.dispatch} dispatch)"
                  if self.token_aware else f"M/G^[1,{self.b}]/1 embedded chain per instance ({self.dispatch} dispatch)")
        if pooled:  # the grids keep the chain's mean x scale; the pooled law's own mean is lower
            busy = 1.0 - q.p_idle
            m = wait_prob / busy if busy > 0 else 0.0
            wait = replace(wait, mean_s=wait.mean_s * m)
            delay = replace(delay, mean_s=delay.mean_s - q.mean_wait_s * scale * (1.0 - m))
            scale *= m
        batch_rate = self.instances / q.cycle["cycle_s"]
        in_system = self.instances * (q.lq * scale + q.cycle["in_service"])
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
                "batch_size_second_moment": q.cycle["batch_second"],
                "batch_cap": self.b,
                "own_batch_time": own,
                "own_batch_pmf": own_pmf,
                "own_batch_time_per_prompt_s": self.own_batch_time_per_prompt(own_pmf, mean_s=q.mean_own_batch_s)
                if self.own_batch_times and per_prompt else None,
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
            pm = scale_time(wait.pmf[:, None], scale)[:, 0]
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
