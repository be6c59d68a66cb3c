"""TTFT side of the colocated station (Poisson or smoother arrivals): the wait for the operation in
progress under gated prefill batches, the co-batched prompts, budget overflow and the wait for KV or a
slot (formulas and measured accuracy: :mod:`qmodel.stations.colocated`'s docstring, TTFT and KV
admission; docs/methods.md, "Stations": colocated).

:class:`ColocatedTTFT` is a mixin of :class:`qmodel.stations.colocated.ColocatedStation`; it reads the
attributes ``ColocatedStation.__post_init__`` sets and the limits of
:class:`qmodel.stations.colocated_limit.ColocatedLimits`.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import NamedTuple

import numpy as np

from qmodel.dist import GridDist, convolve, mixture, stochastic_max
from qmodel.errors import NumericalError, UnstableError
from qmodel.stations.decode import admission_wait, wait_law
from qmodel.stations.fcfs import split_arrival_scv
from qmodel.stations.iteration_stalls import compound_poisson_pmf, decode_residual, split_pmf
from qmodel.stations.iteration_waits import add_arrivals_during, equilibrium_residual, poisson_sf, win_against

__all__ = ["ColocatedTTFT", "TTFTGrid"]


class TTFTGrid(NamedTuple):
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



class ColocatedTTFT:
    """TTFT parts of a colocated pool (module doc)."""

    @cached_property
    def _ttft_grid(self) -> TTFTGrid:
        """The TTFT grid and the laws on it that do not depend on the rate (built once per station)."""
        # 1/64 of a mean prefill (<1% of any TTFT quantile, which includes that prefill);
        # rate-independent so attainment moves monotonically with the rate
        dx = max(self.mean_t1 / 64.0, float(self.t1.max()) / 4096.0)
        # own prefill split between neighbouring grid points (mean kept; rounding up would add dx/2)
        own = split_pmf(self.t1, dx)
        own /= own.sum()
        classes = []
        for cls, cap in self._own_classes:
            t_own = self.t1[cls]
            pmf = split_pmf(t_own, dx)
            classes.append((len(cls), cap, GridDist(dx, pmf / pmf.sum(), float(t_own.mean()), exact=False)))
        ll = None
        if self.dispatch == "least_loaded" and self.instances > 1:
            g = np.exp(-(self.held + self.L) / max(self._ll_delta, 1e-300))
            w_all = win_against(self.held + self.L, self.t1, self._ll_delta) ** (self.instances - 1)
            ll = (split_pmf(self.t1, dx, g), float(np.dot(self.t1, g) / max(float(self.t1.sum()), 1e-300)),
                  split_pmf(self.t1, dx, w_all))
        return TTFTGrid(dx, own, GridDist(dx, own, self.mean_t1, exact=False), split_pmf(self.marginal_s, dx),
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
        delta (:func:`win_against`). delta = E[S^2]/E[S] (see ``__post_init__``). Replay
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
        res_parts = [(w, *equilibrium_residual(it / it.sum(), dxs)) for w, it in iters if w > 0]
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
        if min(caps) > 0 and poisson_sf(min(caps), mu_hi) < 1e-12:
            return convolve(add_arrivals_during(wait, lam, marginal, mean_marg, dxs, age=age), grid.own_law), 0.0
        parts, weights, full = [], [], 0.0
        for count, cap, own in grid.classes:
            st: dict = {}
            # an own prompt that fills the budget alone takes no batch-mate: whoever arrives meanwhile
            # overflows into the next iteration, so its "full" share is P(K >= 1)
            wc = add_arrivals_during(wait, lam, marginal, mean_marg, dxs, age=age, kmax=max(cap, 1), stats=st)
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
        Random dispatch near saturation stays optimistic (TTFT p99 −20% at 0.9 of the limit).

        least_loaded pools share one backlog (the arrival joins the instance with the least
        outstanding work), so the bulk chain is read as a central queue of c bulk servers, as M/G/c
        is read from M/G/1: an arrival waits only when every instance is busy, P(W > 0) = Erlang
        C(c, c rho_b) with rho_b one engine's busy fraction (Poisson at lam/c), and the backlog
        drains c times as fast, so the chain's conditional wait shrinks by 1/c (exact for M/M/c,
        and the heavy-traffic limit of a pooled queue); the own batch is the chain's, formed over
        that shorter wait. (The prefill station's per-engine chain with cyclic-split arrivals,
        used before, ignores the pooling and was conservative.) Replay, 2 seeds x 20000 requests,
        TTFT p50/p90/p99 at 0.7 / 0.8 / 0.9 of the limit: qwen2.5-32b/H200 x2 (Azure code preset,
        prompts ~2,000 tokens against an 8,192-token budget) −5/+1/+6, −12/−1/+4, −7/−12/+3% (the
        per-engine chain: +5/+25/+47, +11/+35/+51, +19/+26/+53%); llama-3.1-8b/H100 x2 (Azure conv)
        p99 +7/+9/+7% (was +12/+18/+18%). At 0.95 both run low (p90 −35 / −65%): the replay
        builds a backlog there that neither form carries (docs/validation.md, "least_loaded pools:
        the pooled bulk chain"). Smoother-than-Poisson arrivals keep the Poisson chain
        (conservative). Random / round-robin: the prefill station's own dispatch treatment.
        """
        try:
            if self.dispatch == "least_loaded" and self.instances > 1:
                return stochastic_max(ttft, self._pooled_bulk_delay(rate_per_s))
            bulk = self._bulk.solve(rate_per_s).delay
        except (UnstableError, NumericalError):
            return ttft  # the prefill-only pool is stable further than the colocated one; never here
        return stochastic_max(ttft, bulk)

    def _pooled_bulk_delay(self, rate_per_s: float) -> GridDist:
        """Delay (wait + own batch) of the bulk-service prefill pool as a central queue of c engines
        (:meth:`_with_overflow`)."""
        from qmodel.stations.fcfs import erlang_c

        c = self.instances
        q = self._bulk.queue(rate_per_s)
        p_wait = erlang_c(c, c * (1.0 - q.p_idle))
        return q.grids(wait_scale=1.0 / c, wait_prob=p_wait, own_stages=self._bulk.service.prefill_exit_stages)[1]

    def _slot_wait(self, pi: np.ndarray, tail: float, rc: float, tok: float, capacity: float, dx: float
                   ) -> GridDist | None:
        """Wait for KV or a slot before the prefill: the soft-wall population chain of
        :class:`qmodel.stations.admission.KVWall` where KV binds, at the arrival SCV c_a^2 the wall
        sees (the instance's share of the stream, the whole stream for a least_loaded pool; a
        trace's at most 1, its gaps not a renewal stream) (the hard-cap slot wait of
        :func:`qmodel.stations.decode.admission_wait` where max_batch binds, or where the wall's chain
        is unstable at this rate)."""
        cap = self.chain.cap
        if cap is None:
            return None
        g = self.chain.g(cap)
        if self._wall is not None:
            pooled = self.dispatch == "least_loaded"  # one wall for the pool: it sees the whole stream
            pool = self.instances if pooled else 1
            ca2 = (self.ca2 if pooled else
                   split_arrival_scv(self.ca2, self.instances, cyclic=self.dispatch == "round_robin"))
            if not self.renewal_arrivals:
                ca2 = min(ca2, 1.0)  # a trace's clumped gaps: not a renewal stream (module doc of admission)
            # the wall's own cap (max_batch, or where its count has no mass left): may pass the chain's
            soft = self._wall.slot_wait(self.chain.g(self._wall.cap), tok, capacity, self.mean_output,
                                        self.cv2_output, pool,
                                        full_rate_per_s=self._lam_sat, arrival_scv=ca2)
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
