"""Disaggregated deployments: a prefill pool, a KV link, a decode pool.

Each term is counted once (the replay's definitions: TTFT = t_first − arrival,
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

The decode pool also loses, at rate λ, the KV that transfers in flight hold (Little: λ E[X · X/C'],
spread over its instances, in tokens), which lowers its stability limit below its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from qmodel.dist import GridDist, convolve, mixture, pow2_grid
from qmodel.errors import InputError, UnstableError
from qmodel.stations.base import StationSolution
from qmodel.topology.base import (Composition, Topology, decode_pool_settings, deployment_settings, station_dispatch,
                                  tpot_law, ttft_law, user_pool_settings)

if TYPE_CHECKING:
    from qmodel.build import Resolved
    from qmodel.result import LinkReport
    from qmodel.scenario import Scenario
    from qmodel.stations.base import Station

__all__ = ["DisaggregatedTopology"]

_HANDOFF_GROUPS = 8  # output-length groups for the handoff's share of TPOT
_KV_STEPS_PER_TTFT_STEP = 64  # the link's grid is at least this much finer than the TTFT's


class DisaggregatedTopology(Topology):
    """Prefill pool -> KV link -> decode pool (see the module doc)."""

    name = "disaggregated"
    roles = ("prefill", "kv_transfer", "decode")
    pool_roles = ("prefill", "decode")
    separate_prefill = True
    has_link = True
    # what each builder below reads of the deployment: prefill its pool and the transfer mode
    # (layer-wise transfers keep its own batch times); the link the prefill pool (paths, sender's
    # KV dtype and service), the link fields and the mode; decode its pool and first_token_from
    _LINK = ("link", "link_sharing", "link_bandwidth_bytes_per_s")
    unread_fields = {"prefill": ("decode", "first_token_from", *_LINK),
                     "kv_transfer": ("decode", "first_token_from"),
                     "decode": ("prefill", "transfer_mode", *_LINK)}
    memo_roles = ("prefill",)  # the link is solved with the prefill's release process, decode less the KV in flight
    plot_style = "bright_green"

    def __init__(self) -> None:
        self._groups: tuple[np.ndarray, np.ndarray] | None = None  # handoff groups of this solver's lengths

    # ---- stations ------------------------------------------------------------------------------
    def link_paths(self, deployment: Any) -> int:
        return int(deployment.prefill.instances)

    def families(self, space: Any, gpus: tuple[str, ...], prefill_gpus: tuple[str, ...],
                 decode_gpus: tuple[str, ...], links: tuple[str, ...]) -> Iterator[Any]:
        """One family per (prefill GPU, TP, decode GPU, TP, link, transfer mode)."""
        from qmodel.planner.space import Family

        for pg in prefill_gpus:
            for ptp in space.tps:
                for dg in decode_gpus:
                    for dtp in space.tps:
                        for link in links:
                            for mode in space.transfer_modes:
                                yield Family(self.name, dg, dtp, pg, ptp, link, mode)

    def build_station(self, role: str, scenario: Scenario, resolved: Resolved) -> Station:
        return {"prefill": self._prefill, "kv_transfer": self._transfer, "decode": self._decode}[role](scenario, resolved)

    @staticmethod
    def _prefill(scenario: Scenario, r: Resolved) -> Station:
        from qmodel.stations.prefill import PrefillStation

        dep = scenario.deployment
        cached = r.lengths.prompt - r.uncached_prompt
        return PrefillStation(
            instances=dep.prefill.instances,
            service=r.pools["prefill"].service,
            prompt_tokens=r.uncached_prompt,
            max_batch_tokens=dep.prefill.max_batch_tokens,
            dispatch=station_dispatch(dep.prefill.dispatch),
            ca2=r.ca2,
            cached_tokens=cached if np.any(cached > 0) else None,
            own_batch_times=dep.transfer_mode == "layerwise",
        )

    @staticmethod
    def _transfer(scenario: Scenario, r: Resolved) -> Station:
        from qmodel.stations.kv_transfer import KVTransferStation

        dep = scenario.deployment
        svc = r.pools["prefill"].service
        # what a layer-wise transfer hides behind: the batch's time until it leaves the instance
        own_prefill_s = np.asarray(svc.prefill_exit_s(svc.prefill_one_s(r.uncached_prompt)), dtype=float)
        # the whole prompt's KV, and a hybrid model's recurrent state once per request
        x = r.kv_bytes_per_token * r.lengths.prompt.astype(float) + r.pools["prefill"].model.state_bytes_per_sequence()
        reserved = r.reserved_output("decode")  # max_tokens: the decode side holds prompt + R from before the transfer
        return KVTransferStation(
            bytes_per_request=x,
            reserved_bytes_per_request=None if reserved is None else x + r.kv_bytes_per_token * reserved,
            bandwidth_bytes_per_s=r.link_bandwidth_bytes_per_s,
            latency_s=r.link.latency_s,
            paths=r.link_paths,
            sharing=dep.link_sharing,
            mode=dep.transfer_mode,
            layers=r.model.layers,
            prefill_time_s=own_prefill_s,
            ca2=r.ca2,
        )

    @staticmethod
    def _decode(scenario: Scenario, r: Resolved) -> Station:
        from qmodel.stations.decode import DecodeStation

        dep = scenario.deployment
        pool = r.pools["decode"]
        return DecodeStation(
            service=pool.service,
            prompt_tokens=r.lengths.prompt,
            output_tokens=r.lengths.output,
            instances=dep.decode.instances,
            kv_capacity_tokens=pool.kv_capacity_tokens,
            max_batch=dep.decode.max_batch,
            dispatch=station_dispatch(dep.decode.dispatch),
            first_step_in_ttft=dep.first_token_from == "decode",
            reserved_output_tokens=r.reserved_output("decode"),
        )

    def station_keys(self, plan: Any) -> dict[str, tuple]:
        f, d, p = plan.family, plan.decode, plan.prefill
        assert p is not None
        return {"prefill": ("prefill", p.gpu, p.tp, p.instances),
                "kv_transfer": ("kv", f.link, f.transfer_mode, p.gpu, p.tp, p.instances),
                "decode": ("decode", d.gpu, d.tp, d.instances)}

    # ---- stability -----------------------------------------------------------------------------
    def limits(self, solver: Any) -> list[tuple[float, str]]:
        """The stations' own limits, and the decode pool's with the in-flight KV reserved: the λ*
        where λ meets the limit of the pool less that reservation, below the stations' own limits."""
        limits = super().limits(solver)
        reserved = self._reserved_kv_limit(solver, min(limits)[0])
        if reserved is not None:
            limits.append((reserved, "decode"))
        return limits

    @staticmethod
    def decode_with_in_flight_kv(solver: Any, rate: float):
        """The decode station at ``rate`` less the KV transfers in flight hold (None: no room left
        for one sequence, which is past stability)."""
        decode = solver.station("decode")
        tokens = (solver.station("kv_transfer").in_flight(rate)[1] / solver.resolved.kv_bytes_per_token
                  / solver.scenario.deployment.decode.instances)
        if tokens <= 0:
            return decode
        try:
            return decode.with_reserved_kv(tokens)
        except InputError:
            return None

    def _reserved_kv_limit(self, solver: Any, upper: float) -> float | None:
        """Largest rate below ``upper`` at which the decode pool less the in-flight reservation is
        stable (the reservation grows and the pool's limit falls with the rate: bisection to 1e-9
        relative); None when that holds up to ``upper``."""
        def stable(rate: float) -> bool:
            dec = self.decode_with_in_flight_kv(solver, rate)
            return dec is not None and rate < dec.max_stable_rate_per_s()

        hi = upper * (1.0 - 1e-9)
        if stable(hi):
            return None
        lo = 0.0
        while hi - lo > 1e-9 * upper:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if stable(mid) else (lo, mid)
        return lo

    # ---- composition ---------------------------------------------------------------------------
    def compose(self, solver: Any, rate: float, laws: bool) -> Composition:
        sp, st, sd = self._solutions(solver, rate, laws, True)
        ttft, a = ttft_law(solver, self.ttft_terms(solver, sp, st, sd), laws)
        tpot, b = tpot_law(solver, self.tpot_terms(solver, sp, st, sd), laws)
        return Composition(rate, [sp, st, sd], ttft, tpot, a, b, a * b, self.attainment_bounds(a, b))

    def compose_ttft(self, solver: Any, rate: float, laws: bool) -> tuple[GridDist, float] | None:
        """(TTFT, its attainment) at ``rate`` as :meth:`compose` gives them where the prefill pool
        alone makes TTFT (first token from prefill; else None), without the stations only TPOT
        reads, nor the own-batch times per prompt only the link reads (a trace's TTFT classes)."""
        if solver.scenario.deployment.first_token_from == "decode":
            return None
        sp = solver.station("prefill").solve(rate, per_prompt=False)
        return ttft_law(solver, self.ttft_terms(solver, sp, None, None), laws)

    def compose_tpot(self, solver: Any, rate: float, laws: bool) -> tuple[list[StationSolution], GridDist, float]:
        """(the stations, TPOT, its attainment) at ``rate`` as :meth:`compose` gives them, the prefill
        pool's wait and delay left unsolved until read (a trace's TPOT rate classes, which read
        neither: :func:`qmodel.trace_law.compose_windows`)."""
        sols = self._solutions(solver, rate, laws, False)
        return [*sols], *tpot_law(solver, self.tpot_terms(solver, *sols), laws)

    def _solutions(self, solver: Any, rate: float, laws: bool, grids: bool) -> tuple[StationSolution, ...]:
        pool = solver.station("prefill")
        sp = pool.solve(rate) if grids else pool.solve(rate, grids=False)  # (the stations' common call where it can)
        # KV bytes held by transfers in flight (Little: a closed form, before any grid), spread
        # over the decode instances, in tokens: reserved on the decode side.
        dec = self.decode_with_in_flight_kv(solver, rate)
        lim = solver.max_stable_rate()[0]
        if dec is None or rate >= dec.max_stable_rate_per_s():  # only past the limit (limits)
            raise UnstableError("decode", rate / lim, rate, lim, "KV reserved for in-flight transfers")
        sd = dec.solve(rate)
        return sp, self.solve_link(solver, rate, sp, sd, wait_law=laws), sd

    def latency_terms(self, solver: Any, sp: StationSolution, st: StationSolution,
                      sd: StationSolution) -> tuple[list[GridDist], list[GridDist]]:
        """(TTFT terms, TPOT terms) from the prefill, link and decode solutions: each metric is the
        sum of its independent terms. The binding diagnosis (:mod:`qmodel.binding`) calls this with
        one station's part replaced to measure its share."""
        return self.ttft_terms(solver, sp, st, sd), self.tpot_terms(solver, sp, st, sd)

    def ttft_terms(self, solver: Any, sp: StationSolution, st: StationSolution | None,
                   sd: StationSolution | None) -> list[GridDist]:  # (st, sd: read only from decode)
        # Each term is counted once (docs/methods.md, Conventions): with the first token from
        # prefill, TTFT ends at the prefill pass, and the link and the decode admission wait fall
        # in TPOT (tpot_terms); from decode, they and the first step end TTFT instead.
        parts = [sp.delay, st.delay, sd.delay] if solver.scenario.deployment.first_token_from == "decode" else [sp.delay]
        # The exposed transfer is often far shorter than the prefill grid's step (a layer-wise
        # handoff of ~1 ms against a ~7 ms step): rounded up it would add a whole step to every
        # TTFT, so the finer terms move to the common step with their mean kept.
        step = max(p.dx for p in parts)
        return [p.regrid(step, keep_mean=True) for p in parts]

    def tpot_terms(self, solver: Any, sp: StationSolution, st: StationSolution, sd: StationSolution) -> list[GridDist]:
        if solver.scenario.deployment.first_token_from == "decode":
            return [sd.tpot]
        # Token 1 leaves with the prefill pass, token 2 only after the handoff: the exposed
        # transfer and the decode admission wait fall inside (t_last - t_first)/(L - 1).
        # Both enter TPOT divided by L - 1: on a step L - 1 times the TPOT grid's they are
        # resolved as finely as TPOT reads them (moved there with their means kept).
        # Each term goes onto the ladder h·2^k (pow2_grid; the finest step not below its own),
        # with its mean kept: the link's step grows with its wait, and were it used as it is,
        # the handoff/(L - 1), and with it the decode TPOT it is summed with, would be re-binned
        # onto a step that moves with the rate, and P(TPOT <= target) would rise and fall with it.
        h = self._handoff_step(solver, sd)
        handoff = convolve(*(x.regrid(pow2_grid(h, x.dx, 1.0), keep_mean=True) for x in (st.delay, sd.wait or sd.delay)))
        return self._tpot_terms(solver, sd.tpot, handoff)

    def solve_link(self, solver: Any, rate: float, sp: StationSolution, sd: StationSolution,
                   wait_law: bool = False, bandwidth_bytes_per_s: float | None = None) -> StationSolution:
        """The KV link at ``rate``, fed by the prefill solution ``sp``, read by the TTFT (first
        token from decode) or by the handoff in TPOT (from prefill), together with the decode
        solution ``sd`` (``wait_law``: see :meth:`KVTransferStation.solve`; ``bandwidth_bytes_per_s``:
        each path's bandwidth set to it, for the binding diagnosis's bandwidth search)."""
        tr = solver.station("kv_transfer")
        if bandwidth_bytes_per_s is not None:
            tr = tr.with_bandwidth(bandwidth_bytes_per_s)
        dep = solver.scenario.deployment
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
            floor = min(floor, max(self._handoff_step(solver, sd), (sd.wait or sd.delay).dx))
        # Layer-wise overlap hides the transfer behind the request's own *batch* time at this rate.
        return tr.solve(rate, prefill_time_s=sp.extra.get("own_batch_time_per_prompt_s"), dx_floor=floor,
                        wait_law=wait_law, **batch)

    def _handoff_groups(self, solver: Any) -> tuple[np.ndarray, np.ndarray]:
        """(1/(L-1) per output-length group, weight) over requests with L >= 2 (L = 1 has no TPOT)."""
        if self._groups is None:
            out = solver.resolved.lengths.output
            inv = 1.0 / (out[out >= 2] - 1.0)
            if inv.size == 0:
                self._groups = (np.zeros(0), np.zeros(0))
            else:
                # Equal-mass groups of 1/(L-1); each represented by its mean (the handoff enters linearly).
                order = np.sort(inv)
                groups = np.array_split(order, min(_HANDOFF_GROUPS, order.size))
                self._groups = (np.array([g.mean() for g in groups]), np.array([g.size for g in groups], dtype=float))
        return self._groups

    def _handoff_step(self, solver: Any, sd: StationSolution) -> float:
        """The step on which the handoff (exposed transfer + decode admission wait) is as fine as
        TPOT reads it: the TPOT grid's step times the smallest L - 1 (the handoff's largest share,
        1/(L - 1), puts it on exactly that grid; 0 when no request has a TPOT)."""
        scale = self._handoff_groups(solver)[0]
        return sd.tpot.dx / float(scale.max()) if scale.size else 0.0

    def _tpot_terms(self, solver: Any, decode_tpot: GridDist, handoff: GridDist) -> list[GridDist]:
        """TPOT = decode TPOT + handoff/(L-1), mixed over output-length groups (independent terms),
        as the list of terms to convolve."""
        scale, weight = self._handoff_groups(solver)
        if scale.size == 0 or handoff.mean_s <= 0:
            return [decode_tpot]
        scaled = [GridDist(handoff.dx * s, handoff.pmf, handoff.mean_s * s, handoff.tail,
                           handoff.tail_rate / s if math.isfinite(handoff.tail_rate) else math.inf,
                           handoff.exact) for s in scale]
        # Convolution is linear: Σ w_g (T ⊕ H_g) = T ⊕ Σ w_g H_g, one FFT convolution instead of
        # one per group (all on the grid max(T.dx, max_g H_g.dx) either way). Both terms are put on
        # that grid here, once, where sum_cdf and the lazy convolution would each re-bin them.
        mix = mixture(scaled, weight)
        # on decode's own step times 2^k: the discrete decode TPOT is never re-binned onto a step
        # that moves with the link's (pow2_grid)
        dx = pow2_grid(decode_tpot.dx, mix.dx, 1.0)
        return [decode_tpot.regrid(dx), mix.regrid(dx)]

    # ---- explanations --------------------------------------------------------------------------
    def binding_part(self, solver: Any, c: Composition, metric: str) -> str | None:
        from qmodel.binding import largest_part

        return largest_part(solver, c, metric)

    def link_report(self, solver: Any, c: Composition) -> LinkReport | None:
        if solver.resolved.link_bandwidth_bytes_per_s is None:
            return None
        from qmodel.binding import link_report

        return link_report(solver, c)

    # ---- the deployment's pools ----------------------------------------------------------------
    def prefill_token_budget(self, deployment: Any) -> int:
        return deployment.prefill.max_batch_tokens

    def kept_settings(self, deployment: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        dep = deployment
        pre = {"max_batch_tokens": dep.prefill.max_batch_tokens, "dispatch": dep.prefill.dispatch,
               **user_pool_settings(dep.prefill)}
        dec = {"kv_memory_fraction": dep.decode.kv_memory_fraction, "max_batch": dep.decode.max_batch,
               "dispatch": dep.decode.dispatch, **user_pool_settings(dep.decode), **decode_pool_settings(dep.decode)}
        top = {"link_sharing": dep.link_sharing, "first_token_from": dep.first_token_from,
               "max_batch_tokens": dep.prefill.max_batch_tokens, "link": dep.link,
               "link_bandwidth_bytes_per_s": dep.link_bandwidth_bytes_per_s, **deployment_settings(dep)}
        return pre, dec, top

    def plan_deployment(self, plan: Any, pre: dict[str, Any], dec: dict[str, Any], top: dict[str, Any]) -> Any:
        """The link's sharing and first-token source are kept, and so is a bandwidth override for a
        plan over the scenario's own link."""
        from qmodel.scenario_deployment import DecodePool, DisaggregatedDeployment, PrefillPool

        f = plan.family
        dpool = DecodePool(gpu=plan.decode.gpu, tp=plan.decode.tp, instances=plan.decode.instances, **dec)
        assert plan.prefill is not None
        ppool = PrefillPool(gpu=plan.prefill.gpu, tp=plan.prefill.tp, instances=plan.prefill.instances, **pre)
        extra = {k: v for k, v in top.items() if k in ("link_sharing", "first_token_from")}
        extra.update(deployment_settings(top))
        if top.get("link") == f.link and top.get("link_bandwidth_bytes_per_s") is not None:
            extra["link_bandwidth_bytes_per_s"] = top["link_bandwidth_bytes_per_s"]
        return DisaggregatedDeployment(prefill=ppool, decode=dpool, link=f.link,
                                       transfer_mode=f.transfer_mode or "layerwise", **extra)

    # ---- planner keys, names and words ---------------------------------------------------------
    @staticmethod
    def family_group_key(fam: Any) -> tuple:
        """The prefill station (the embedded-chain solve, by far the dearest) depends only on the
        prefill pool, so every decode pool and link behind it shares that station's solution."""
        return ("prefill", fam.prefill_gpu, fam.prefill_tp)

    def family_label(self, fam: Any) -> str:
        return (f"disagg {fam.prefill_gpu} TP{fam.prefill_tp} -> {fam.decode_gpu} TP{fam.decode_tp} "
                f"over {fam.link} ({fam.transfer_mode})")

    def plan_label(self, plan: Any) -> str:
        f, p = plan.family, plan.prefill
        return (f"{p.instances}x {f.prefill_gpu} TP{f.prefill_tp} prefill + {plan.decode.instances}x "
                f"{f.decode_gpu} TP{f.decode_tp} decode, {f.link} {f.transfer_mode}")

    def layout(self, deployment: Any) -> str:
        p, d = deployment.prefill, deployment.decode
        if (p.gpu, p.tp) == (d.gpu, d.tp):
            return f"{p.instances}P+{d.instances}D {d.gpu} TP{d.tp}"
        return f"{p.instances}P {p.gpu} TP{p.tp} + {d.instances}D {d.gpu} TP{d.tp}"

    def perturbations(self, deployment: Any) -> list[tuple[str, list[str], float]]:
        from qmodel.registry import get_link

        dep = deployment
        bw = dep.link_bandwidth_bytes_per_s or get_link(dep.link).bandwidth_bytes_per_s
        n_p, n_d = dep.prefill.instances, dep.decode.instances
        return [
            ("link bandwidth", [f"deployment.link_bandwidth_bytes_per_s={bw * 2}"], 1.0),
            ("prefill instances", [f"deployment.prefill.instances={n_p + 1}"], 1.0 / n_p),
            ("decode instances", [f"deployment.decode.instances={n_d + 1}"], 1.0 / n_d),
            ("prefill tp", [f"deployment.prefill.tp={dep.prefill.tp * 2}"], 1.0),
            ("decode tp", [f"deployment.decode.tp={dep.decode.tp * 2}"], 1.0),
        ]

    def explain_blocks(self, solver: Any, rate: float, model: Any) -> list[str]:
        """The prefill M/D/1 at the mean prompt, the link's bandwidth need and the exposed
        layerwise transfer, with the scenario's numbers."""
        from qmodel.symbolic import explain

        r, dep, m = solver.resolved, solver.scenario.deployment, model
        blocks: list[str] = []
        pre = r.pools["prefill"].service
        d = float(pre.prefill_one_s(r.uncached_prompt).mean())
        lam_i = rate / dep.prefill.instances
        if lam_i * d < 1:
            blocks.append(explain("distserve_ttft", lam=lam_i, d=d)
                          + "\n  (one-at-a-time M/D/1 per prefill instance at the mean prompt; the reported TTFT "
                            "uses the exact batched M/G^[1,b]/1 chain, which batching makes lower near the knee)"
                          + (f"\n  (pp = {dep.prefill.pp}: D is one pipeline stage, the engine's service time; the prompt "
                             f"leaves after {dep.prefill.pp} stages, so its TTFT adds (pp - 1) D = "
                             f"{(dep.prefill.pp - 1) * d:.6g} s: docs/methods.md, Pipeline parallelism)"
                             if dep.prefill.pp > 1 else ""))
        state = r.pools["prefill"].model.state_bytes_per_sequence()
        blocks.append(explain("link_bandwidth", kv_bytes_per_token=r.kv_bytes_per_token,
                              mean_prompt=float(r.lengths.prompt.mean()), lam=rate)
                      + (f"\n  plus the recurrent state, {state:.6g} B per request: {state * rate:.6g} B/s more"
                         if state else "")
                      + f"\n  available: {r.link_bandwidth_bytes_per_s * dep.prefill.instances:.6g} B/s aggregate = "
                        f"{dep.prefill.instances} path(s) of {r.link.name} x {r.link_bandwidth_bytes_per_s:.6g} B/s "
                        f"effective ({r.link.bandwidth_bytes_per_s:.6g} nominal x {r.link.efficiency:g})")
        if dep.transfer_mode == "layerwise":
            # the whole prompt's KV moves, with a hybrid model's recurrent state
            x = r.kv_bytes_per_token * float(r.lengths.prompt.mean()) + state
            # the transfer hides behind the prefill until the batch leaves the instance (pp stages)
            blocks.append(explain("layerwise_exposed", x=x, c=r.link_bandwidth_bytes_per_s, layers=m.layers,
                                  tp=float(pre.prefill_exit_s(d))))
        return blocks
