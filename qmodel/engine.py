"""Composition: stations -> TTFT/TPOT distributions, SLO attainment, binding constraint.

Disaggregated, each term counted once (the replay's definitions: TTFT = t_first − arrival,
TPOT = (t_last − t_first)/(L − 1)):
    first_token_from = prefill:  TTFT = [W_prefill ⊕ S_own]
                                 TPOT = the decode station's TPOT ⊕ (X_exposed ⊕ W_admission)/(L − 1)
    first_token_from = decode:   TTFT = [W_prefill ⊕ S_own] ⊕ X_exposed ⊕ (W_admission ⊕ D_first)
                                 TPOT = the decode station's TPOT
    A    = P(TTFT <= x) · P(TPOT <= y)
The prefill wait and the request's own batch time are kept jointly by the prefill station;
terms from different stations are convolved as independent (FFT on a common grid). The pools are
separate, so the product form of A is the model's point estimate; the Fréchet bracket
max(0, a+b-1) <= A <= min(a, b) holds whatever the dependence and is reported beside it.

Colocated / chunked: the station returns TTFT and TPOT on the same GPUs. They are positively
associated (both suffer when prefill is busy), so a·b is a lower bound and min(a, b) an upper
bound; the point estimate is the lower bound (conservative for goodput).

Stability is checked before anything is solved: a rate at or above any station's limit raises
:class:`~qmodel.errors.UnstableError` naming that station and the largest stable rate.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from pathlib import Path

import numpy as np

from qmodel.build import Resolved, resolve
from qmodel.dist import GridDist, LazyGridDist, convolve, mixture, sum_cdf
from qmodel.errors import InputError, NumericalError, UnstableError
from qmodel.result import DistSummary, LinkReport, Result
from qmodel.scenario import ChunkedDeployment, ColocatedDeployment, DisaggregatedDeployment, Scenario, scenario_sha256
from qmodel.stations.base import StationSolution

_HANDOFF_GROUPS = 8  # output-length groups for the handoff's share of TPOT
_KV_STEPS_PER_TTFT_STEP = 64  # the link's grid is at least this much finer than the TTFT's

__all__ = ["Solver", "solve", "Composition"]

_RECENT = 4  # compositions kept by Solver.attainment (a goodput search's bracket ends)
#: below this fraction of the stability limit the system is idle to within the grids' resolution
#: (every queueing probability is of order the load, < 1e-12 against the 1e-9 tail the grids keep):
#: the stations are solved at this load instead, so a rate like 1e-320 req/s, whose reciprocals
#: overflow, gets the idle system's answer (see docs/methods.md, "Light load")
LIGHT_LOAD = 1e-12


@dataclasses.dataclass(frozen=True)
class Composition:
    """The solved pieces at one rate (for the TUI, the validation harness and --explain).

    Disaggregated ``ttft`` and ``tpot`` are :class:`~qmodel.dist.LazyGridDist`: the attainments come
    from the terms directly (:func:`~qmodel.dist.sum_cdf`), and a goodput search, which reads
    nothing else at most of its rates, never pays for the composed laws there.
    """

    rate_per_s: float
    stations: list[StationSolution]
    ttft: GridDist
    tpot: GridDist
    ttft_attainment: float
    tpot_attainment: float
    attainment: float
    bounds: tuple[float, float]


class Solver:
    """Resolve a scenario once, then solve it at any rate (goodput calls :meth:`attainment` ~15 times)."""

    def __init__(self, scenario: Scenario, resolved: Resolved | None = None) -> None:
        self.scenario = scenario
        # the planner passes a Resolved assembled from cached pools (it must describe this scenario)
        self.resolved: Resolved = resolve(scenario) if resolved is None else resolved
        self._topology = scenario.deployment.topology
        self._notes: list[str] = []
        self._recent: dict[float, Composition] = {}

    # ---- stations (rate-independent parts built once) ---------------------------------------
    @cached_property
    def _prefill(self):
        from qmodel.stations.prefill import PrefillStation

        dep = self.scenario.deployment
        pool = self.resolved.pools["prefill"]
        r = self.resolved
        cached = r.lengths.prompt - r.uncached_prompt
        return PrefillStation(
            instances=dep.prefill.instances,
            service=pool.service,
            prompt_tokens=r.uncached_prompt,
            max_batch_tokens=dep.prefill.max_batch_tokens,
            dispatch=dep.prefill.dispatch,
            ca2=r.ca2,
            cached_tokens=cached if np.any(cached > 0) else None,
            own_batch_times=dep.transfer_mode == "layerwise",
        )

    @cached_property
    def _transfer(self):
        from qmodel.stations.kv_transfer import KVTransferStation

        dep = self.scenario.deployment
        r = self.resolved
        svc = r.pools["prefill"].service
        # what a layer-wise transfer hides behind: the batch's time until it leaves the instance
        own_prefill_s = np.asarray(svc.prefill_exit_s(svc.prefill_one_s(r.uncached_prompt)), dtype=float)
        return KVTransferStation(
            bytes_per_request=r.kv_bytes_per_token * r.lengths.prompt.astype(float),  # the whole prompt's KV
            bandwidth_bytes_per_s=r.link_bandwidth_bytes_per_s,
            latency_s=r.link.latency_s,
            paths=dep.prefill.instances,
            sharing=dep.link_sharing,
            mode=dep.transfer_mode,
            layers=r.model.layers,
            prefill_time_s=own_prefill_s,
            ca2=r.ca2,
        )

    @property
    def transfer_station(self):
        """The KV-transfer station (disaggregated deployments)."""
        return self._transfer

    @cached_property
    def _decode(self):
        from qmodel.stations.decode import DecodeStation

        dep = self.scenario.deployment
        pool = self.resolved.pools["decode"]
        return DecodeStation(
            service=pool.service,
            prompt_tokens=self.resolved.lengths.prompt,
            output_tokens=self.resolved.lengths.output,
            instances=dep.decode.instances,
            kv_capacity_tokens=pool.kv_capacity_tokens,
            max_batch=dep.decode.max_batch,
            dispatch=dep.decode.dispatch,
            first_step_in_ttft=dep.first_token_from == "decode",
        )

    @cached_property
    def _single_pool(self):
        dep = self.scenario.deployment
        pool = self.resolved.pools["pool"]
        common = dict(
            service=pool.service,
            prompt_tokens=self.resolved.uncached_prompt,
            output_tokens=self.resolved.lengths.output,
            instances=dep.pool.instances,
            kv_capacity_tokens=pool.kv_capacity_tokens,
            max_batch=dep.pool.max_batch,
            ca2=self.resolved.ca2,
            dispatch=dep.pool.dispatch,
            cached_tokens=self._cached_tokens(),
        )
        if isinstance(dep, ColocatedDeployment):
            from qmodel.stations.colocated import ColocatedStation as cls

            common["max_batch_tokens"] = dep.max_batch_tokens
        else:
            from qmodel.stations.chunked import ChunkedStation as cls

            common["chunk_tokens"] = dep.chunk_tokens
        accepted = {f.name for f in dataclasses.fields(cls)}
        if "ca2" not in accepted and abs(self.resolved.ca2 - 1.0) > 1e-9:
            self._notes.append(f"warning: {dep.topology} station assumes Poisson arrivals; the workload's "
                               f"arrival SCV {self.resolved.ca2:.3g} is not modelled (check with the replay)")
        return cls(**{k: v for k, v in common.items() if k in accepted})

    @property
    def pool_station(self):
        """The colocated or chunked station (single-pool deployments)."""
        return self._single_pool

    def _cached_tokens(self) -> np.ndarray | None:
        """Prefix-cache hits per request (None when there are none): held in KV, not computed."""
        r = self.resolved
        cached = r.lengths.prompt - r.uncached_prompt
        return cached if np.any(cached > 0) else None

    def _stations(self) -> list:
        if self._topology == "disaggregated":
            return [self._prefill, self._transfer, self._decode]
        return [self._single_pool]

    # ---- stability ---------------------------------------------------------------------------
    @cached_property
    def _limits(self) -> list[tuple[float, str]]:
        """(largest stable total rate, name) per station: rate-independent, so computed once. A
        disaggregated decode pool also loses, at rate λ, the KV that transfers in flight hold
        (Little: λ E[X · X/C'], spread over its instances): its limit is then the λ* where λ meets the
        limit of the pool less that reservation, below the stations' own limits."""
        limits = [(float(s.max_stable_rate_per_s()), s.name) for s in self._stations()]
        if self._topology == "disaggregated":
            reserved = self._reserved_kv_limit(min(limits)[0])
            if reserved is not None:
                limits.append((reserved, "decode"))
        return limits

    def _decode_with_in_flight_kv(self, rate: float):
        """The decode station at ``rate`` less the KV transfers in flight hold (None: no room left
        for one sequence, which is past stability)."""
        tokens = (self._transfer.in_flight(rate)[1] / self.resolved.kv_bytes_per_token
                  / self.scenario.deployment.decode.instances)
        if tokens <= 0:
            return self._decode
        try:
            return self._decode.with_reserved_kv(tokens)
        except InputError:
            return None

    def _reserved_kv_limit(self, upper: float) -> float | None:
        """Largest rate below ``upper`` at which the decode pool less the in-flight reservation is
        stable (the reservation grows and the pool's limit falls with the rate: bisection to 1e-9
        relative); None when that holds up to ``upper``."""
        def stable(rate: float) -> bool:
            dec = self._decode_with_in_flight_kv(rate)
            return dec is not None and rate < dec.max_stable_rate_per_s()

        hi = upper * (1.0 - 1e-9)
        if stable(hi):
            return None
        lo = 0.0
        while hi - lo > 1e-9 * upper:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if stable(mid) else (lo, mid)
        return lo

    def max_stable_rate(self) -> tuple[float, str]:
        """(largest stable total rate, the station that sets it)."""
        return min(self._limits)

    def _check_stable(self, rate: float) -> None:
        for lim, name in self._limits:
            if rate >= lim:
                raise UnstableError(name, rate / lim if lim > 0 else math.inf, rate, lim)

    # ---- solving -----------------------------------------------------------------------------
    def compose(self, rate: float, laws: bool = False) -> Composition:
        """The stations solved and composed at ``rate``. ``laws``: build the TTFT and TPOT laws (and
        the link's wait law) now and read the attainments from them, for a caller that reads them
        all (:meth:`solve`); by default the attainments come from the terms (:func:`sum_cdf`) and
        the laws are built on first use (a goodput search reads only the attainments). The two
        agree to round-off and trimming (< 1e-12)."""
        if not (rate > 0 and math.isfinite(rate)):
            raise InputError("rate", rate, "must be a positive finite number of requests per second")
        self._check_stable(rate)
        rate = max(rate, LIGHT_LOAD * self.max_stable_rate()[0])
        slo = self.scenario.slo
        if self._topology == "disaggregated":
            sp = self._prefill.solve(rate)
            tr = self._transfer
            dec = self._decode
            # KV bytes held by transfers in flight (Little: a closed form, before any grid), spread
            # over the decode instances, in tokens: reserved on the decode side.
            dec = self._decode_with_in_flight_kv(rate)
            lim = self.max_stable_rate()[0]
            if dec is None or rate >= dec.max_stable_rate_per_s():  # only past the limit (_limits)
                raise UnstableError("decode", rate / lim, rate, lim, "KV reserved for in-flight transfers")
            sd = dec.solve(rate)
            st = self._solve_link(rate, sp, sd, wait_law=laws)
            ttft_terms, tpot_terms = self.latency_terms(sp, st, sd)
            stations = [sp, st, sd]
            if laws:
                ttft = convolve(*ttft_terms)
                tpot = convolve(*tpot_terms) if len(tpot_terms) > 1 else tpot_terms[0]
                a, b = float(ttft.cdf(slo.ttft_s)), float(tpot.cdf(slo.tpot_s))
            else:
                a = sum_cdf(ttft_terms, slo.ttft_s)
                b = sum_cdf(tpot_terms, slo.tpot_s)
                ttft = LazyGridDist(lambda: convolve(*ttft_terms))
                tpot = LazyGridDist(lambda: convolve(*tpot_terms)) if len(tpot_terms) > 1 else tpot_terms[0]
        else:
            s = self._single_pool.solve(rate)
            ttft, tpot, stations = s.delay, s.tpot, [s]
            a = float(ttft.cdf(slo.ttft_s))
            b = float(tpot.cdf(slo.tpot_s))
        if self._topology == "disaggregated":
            point, bounds = a * b, (max(0.0, a + b - 1.0), min(a, b))
        else:
            point, bounds = a * b, (a * b, min(a, b))
        return Composition(rate, stations, ttft, tpot, a, b, point, bounds)

    def latency_terms(self, sp: StationSolution, st: StationSolution,
                      sd: StationSolution) -> tuple[list[GridDist], list[GridDist]]:
        """(TTFT terms, TPOT terms) of a disaggregated deployment from its prefill, link and decode
        solutions: each metric is the sum of its independent terms. The binding diagnosis
        (:mod:`qmodel.binding`) calls this with one station's part replaced to measure its share."""
        from_decode = self.scenario.deployment.first_token_from == "decode"
        # Each term is counted once (docs/methods.md, Conventions): with the first token from
        # prefill, TTFT ends at the prefill pass, and the link and the decode admission wait fall
        # in TPOT (below); from decode, they and the first step end TTFT instead.
        parts = [sp.delay, st.delay, sd.delay] if from_decode else [sp.delay]
        # The exposed transfer is often far shorter than the prefill grid's step (a layer-wise
        # handoff of ~1 ms against a ~7 ms step): rounded up it would add a whole step to every
        # TTFT, so the finer terms move to the common step with their mean kept.
        step = max(p.dx for p in parts)
        ttft_terms = [p.regrid(step, keep_mean=True) for p in parts]
        tpot_terms = [sd.tpot]
        if not from_decode:
            # Token 1 leaves with the prefill pass, token 2 only after the handoff: the exposed
            # transfer and the decode admission wait fall inside (t_last - t_first)/(L - 1).
            # Both enter TPOT divided by L - 1: on a step L - 1 times the TPOT grid's they are
            # resolved as finely as TPOT reads them (moved there with their means kept).
            h = self._handoff_step(sd)
            handoff = convolve(*(x.regrid(h, keep_mean=True) if h > x.dx else x for x in (st.delay, sd.wait or sd.delay)))
            tpot_terms = self._tpot_terms(sd.tpot, handoff)
        return ttft_terms, tpot_terms

    def solve_link(self, rate: float, sp: StationSolution, sd: StationSolution,
                   bandwidth_bytes_per_s: float) -> StationSolution:
        """The KV link at ``rate`` as :meth:`compose` solves it, with each path's bandwidth set to
        ``bandwidth_bytes_per_s`` (the binding diagnosis's bandwidth search)."""
        tr = dataclasses.replace(self._transfer, bandwidth_bytes_per_s=bandwidth_bytes_per_s)
        return self._solve_link(rate, sp, sd, transfer=tr)

    def _solve_link(self, rate: float, sp: StationSolution, sd: StationSolution,
                    wait_law: bool = False, transfer=None) -> StationSolution:
        """The KV link at ``rate``, fed by the prefill solution ``sp``, read by the TTFT (first
        token from decode) or by the handoff in TPOT (from prefill), together with the decode
        solution ``sd`` (``wait_law``: see :meth:`KVTransferStation.solve`)."""
        tr = self._transfer if transfer is None else transfer
        dep = self.scenario.deployment
        batch: dict = {}
        if sp.extra.get("batch_size_mean", 1.0) > 1.0 + 1e-9 and dep.link_sharing == "fcfs":
            # Prefill releases whole batches onto the link: an M^X/G/1 wait, not M/G/1.
            batch = dict(batch_rate_per_s=float(sp.extra["batch_rate_per_s"]),
                         batch_size_pmf=tr.batch_pmf_from_prefill(sp.extra["own_batch_pmf"]))
        # The link keeps its own fine grid (not the prefill's): its exposed time also enters TPOT
        # (the handoff spread over L-1 tokens), where a prefill-sized step would be coarse. It need
        # not be finer than what reads it, though: from prefill, the handoff is summed with the
        # decode wait on the coarser of that wait's step and the handoff's own
        # (:meth:`_handoff_step`); from decode, the TTFT re-bins it to its step with the mean kept
        # (a 64th of that step keeps the rounding-up bias under 2% of a TTFT step). From prefill
        # the link's own report (its wait quantiles) keeps at most a 64th of the prefill step too.
        ttft_step = max(sp.delay.dx, sd.delay.dx) if dep.first_token_from == "decode" else sp.delay.dx
        floor = ttft_step / _KV_STEPS_PER_TTFT_STEP
        if dep.first_token_from == "prefill":
            floor = min(floor, max(self._handoff_step(sd), (sd.wait or sd.delay).dx))
        # Layer-wise overlap hides the transfer behind the request's own *batch* time at this rate.
        return tr.solve(rate, prefill_time_s=sp.extra.get("own_batch_time_per_prompt_s"), dx_floor=floor,
                        wait_law=wait_law, **batch)

    @cached_property
    def _handoff_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """(1/(L-1) per output-length group, weight) over requests with L >= 2 (L = 1 has no TPOT)."""
        out = self.resolved.lengths.output
        inv = 1.0 / (out[out >= 2] - 1.0)
        if inv.size == 0:
            return np.zeros(0), np.zeros(0)
        # Equal-mass groups of 1/(L-1); each represented by its mean (the handoff enters linearly).
        order = np.sort(inv)
        groups = np.array_split(order, min(_HANDOFF_GROUPS, order.size))
        return np.array([g.mean() for g in groups]), np.array([g.size for g in groups], dtype=float)

    def _handoff_step(self, sd: StationSolution) -> float:
        """The step on which the handoff (exposed transfer + decode admission wait) is as fine as
        TPOT reads it: the TPOT grid's step times the smallest L - 1 (the handoff's largest share,
        1/(L - 1), puts it on exactly that grid; 0 when no request has a TPOT)."""
        scale = self._handoff_groups[0]
        return sd.tpot.dx / float(scale.max()) if scale.size else 0.0

    def _tpot_terms(self, decode_tpot: GridDist, handoff: GridDist) -> list[GridDist]:
        """TPOT = decode TPOT + handoff/(L-1), mixed over output-length groups (independent terms),
        as the list of terms to convolve."""
        scale, weight = self._handoff_groups
        if scale.size == 0 or handoff.mean_s <= 0:
            return [decode_tpot]
        scaled = [GridDist(handoff.dx * s, handoff.pmf, handoff.mean_s * s, handoff.tail,
                           handoff.tail_rate / s if math.isfinite(handoff.tail_rate) else math.inf,
                           handoff.exact) for s in scale]
        # Convolution is linear: Σ w_g (T ⊕ H_g) = T ⊕ Σ w_g H_g, one FFT convolution instead of
        # one per group (all on the grid max(T.dx, max_g H_g.dx) either way). Both terms are put on
        # that grid here, once, where sum_cdf and the lazy convolution would each re-bin them.
        mix = mixture(scaled, weight)
        dx = max(decode_tpot.dx, mix.dx)
        return [decode_tpot.regrid(dx), mix.regrid(dx)]

    def attainment(self, rate: float) -> float:
        """Attainment at ``rate``; 0 where the system is unstable.

        Within 1% of the stability limit a chain may refuse to truncate (NumericalError); latency
        there is unbounded for any practical SLO, so that too counts as 0 rather than an answer.
        """
        try:
            c = self.compose(rate)
        except UnstableError:
            return 0.0
        except NumericalError:
            if rate >= 0.99 * self.max_stable_rate()[0]:
                return 0.0
            raise
        # goodput asks for the binding constraint at the rate it settles on, one of these
        self._recent[rate] = c
        if len(self._recent) > _RECENT:
            del self._recent[next(iter(self._recent))]
        return c.attainment

    def recent_composition(self, rate: float) -> Composition | None:
        """The composition :meth:`attainment` solved at exactly ``rate``, if among the last few."""
        return self._recent.get(rate)

    def solve(self, rate: float | None = None) -> Result:
        if rate is None:
            rate = self.resolved.base_rate_per_s
            if rate is None:
                raise InputError("workload.arrivals.rate_per_s", None, "set a rate (or pass --rate) to solve at")
        c = self.compose(float(rate), laws=True)
        return Result(
            scenario=self.scenario.name,
            topology=self._topology,
            rate_per_s=float(rate),
            ttft=DistSummary(**c.ttft.summary()),
            tpot=DistSummary(**c.tpot.summary()),
            attainment=c.attainment,
            attainment_bounds=c.bounds,
            ttft_attainment=c.ttft_attainment,
            tpot_attainment=c.tpot_attainment,
            stations=[s.report() for s in c.stations],
            binding=self.binding(c),
            link=self._link_report(c),
            gpus=self.resolved.gpus,
            inputs_sha256=self._inputs_sha256,
            perf_sha256=self.resolved.perf_sha256,
            validity=self.validity(c),
            warnings=list(self.resolved.warnings) + self._notes
            + [n for s in c.stations for n in s.notes if n.startswith("warning")],
        )

    @cached_property
    def _inputs_sha256(self) -> str:
        return scenario_sha256(self.scenario)  # a JSON dump and hash: once per solver, not per rate

    # ---- explanations ------------------------------------------------------------------------
    def binding(self, c: Composition) -> str:
        """The binding constraint at ``c`` in words (:func:`qmodel.binding.diagnose`)."""
        from qmodel.binding import diagnose

        return diagnose(self, c)

    def validity(self, c: Composition) -> str:
        """Expected agreement with the replay: the validation suite's measured errors for this
        topology at this load (:mod:`qmodel.validity`)."""
        from qmodel.validity import validity_label

        label = validity_label(self._topology, c.rate_per_s / self.max_stable_rate()[0], self.resolved.ca2)
        if all(s.exact for s in c.stations):
            label += " (every station here is solved exactly for its stated model)"
        return label

    def _link_report(self, c: Composition) -> LinkReport | None:
        if self._topology != "disaggregated" or self.resolved.link_bandwidth_bytes_per_s is None:
            return None
        from qmodel.binding import link_report

        return link_report(self, c)


def _fmt_s(x: float) -> str:
    from qmodel.units import format_duration

    return format_duration(x)


def solve(scenario: Scenario | str | Path, rate_per_s: float | None = None) -> Result:
    """Solve a scenario (or the scenario file at a path) at its own rate (or ``rate_per_s``)."""
    from qmodel.source import as_scenario

    return Solver(as_scenario(scenario)).solve(rate_per_s)
