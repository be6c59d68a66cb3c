"""How the planner asks the queueing engine about a candidate plan, with every reusable piece cached.

The search needs five answers per candidate, from cheapest to dearest:

1. ``pool_issue(role, gpu, tp)``: can this pool exist at all (TP rule, model fits in memory) and
   can it meet the SLO even when idle? Idle checks are *necessary* conditions: TTFT is at least
   the request's own prefill pass, so if fewer than ``attainment_goal`` of the prompts prefill
   within the TTFT target alone, no instance count helps; likewise a decode step at batch 1 with an
   empty context is a lower bound on every TPOT. Cached per (role, gpu, tp).
2. ``capacity(plan)``: the largest stable rate (min over stations). Each station's limit depends
   only on its own pool, so it is cached per (station, pool, instances) and a plan's capacity is a
   min over three dictionary look-ups.
3. ``attainment(plan, rate)``: one solve of the stations at one rate.
4. ``metrics(plan, rate)``: the full :class:`~qmodel.result.Result` at one rate.
5. ``knee(plan, lam_max)``: where queueing starts to dominate (:func:`qmodel.compare.knee_rate`).

:class:`EngineEvaluator` answers them with :class:`qmodel.solver.Solver`, with the expensive parts
of :func:`qmodel.build.resolve` cached: the workload half (:func:`qmodel.build.resolve_workload`)
is computed once, each pool (:func:`qmodel.build.resolve_pool`: service-time model and KV
capacity) once per (role, gpu, tp, pp, KV fraction), and the per-plan
:class:`~qmodel.build.Resolved` is assembled by ``resolve`` itself from those pieces.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from qmodel.errors import NumericalError, QmodelError
from qmodel.planner.space import PlanSpec
from qmodel.scenario import PoolConfig, PrefixTraceHashes, Scenario, scenario_sha256
from qmodel.stations.base import MemoizedStation
from qmodel.topology import topology_named

__all__ = ["Evaluator", "EngineEvaluator", "PlanMetrics", "deployment_for", "scenario_for"]


@dataclass(frozen=True)
class PlanMetrics:
    """What the ranked output shows about one plan at one rate."""

    rate_per_s: float
    attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    binding: str
    validity: str
    warnings: tuple[str, ...] = ()


class Evaluator(ABC):
    """Answers the planner's questions about candidate plans (see the module docstring).

    Implementations must be picklable (they travel to executor workers) and deterministic.
    ``key`` identifies the evaluator's inputs, so a worker can keep one warm instance per key.
    """

    scenario: Scenario

    @property
    @abstractmethod
    def key(self) -> str: ...

    @property
    def goal(self) -> float:
        return float(self.scenario.slo.attainment_goal)

    @abstractmethod
    def pool_issue(self, role: str, gpu: str, tp: int) -> str | None:
        """None if the pool is usable, else why not (role: 'prefill', 'decode' or 'pool')."""

    @abstractmethod
    def limits(self, plan: PlanSpec) -> list[tuple[float, str]]:
        """Each station's largest stable total rate in req/s, with the station's name
        ('prefill', 'kv_transfer', 'decode', or the single pool's); 0 for a station that cannot run."""

    def capacity(self, plan: PlanSpec) -> tuple[float, str]:
        """(largest stable total rate, the station that sets it)."""
        return min(self.limits(plan))

    @abstractmethod
    def attainment(self, plan: PlanSpec, rate: float) -> float:
        """SLO attainment at ``rate``; 0 when unstable or invalid."""

    @abstractmethod
    def metrics(self, plan: PlanSpec, rate: float) -> PlanMetrics: ...

    @abstractmethod
    def knee(self, plan: PlanSpec, lam_max: float) -> float: ...

    @abstractmethod
    def mean_output_tokens(self) -> float: ...

    @abstractmethod
    def mean_prompt_tokens(self) -> float:
        """Mean prompt tokens per request, counted whole (the $/M input-token price)."""


# ---- scenario re-targeting ---------------------------------------------------------------------

def _pool_defaults(scenario: Scenario) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(prefill pool extras, decode pool extras, deployment extras) kept from the user's scenario
    (:meth:`qmodel.topology.Topology.kept_settings` of its shape)."""
    dep = scenario.deployment
    return topology_named(dep.topology).kept_settings(dep)


def deployment_for(scenario: Scenario, plan: PlanSpec):
    """The scenario's deployment re-targeted at ``plan``; batch limits, dispatch and KV fraction are kept,
    and so is a ``link_bandwidth_bytes_per_s`` override for plans over the scenario's own link
    (:meth:`qmodel.topology.Topology.plan_deployment` of the plan's shape)."""
    pre, dec, top = _pool_defaults(scenario)
    return plan.family.shape.plan_deployment(plan, pre, dec, top)


def scenario_for(scenario: Scenario, plan: PlanSpec) -> Scenario:
    return scenario.model_copy(update={"deployment": deployment_for(scenario, plan),
                                       "name": f"{scenario.name} [{plan.label}]"})


# ---- the engine-backed evaluator ---------------------------------------------------------------

_MEMO_RATES = 64


class EngineEvaluator(Evaluator):
    """Answers from :class:`qmodel.solver.Solver`, with pools, stations and solvers cached (see module doc)."""

    MAX_SOLVERS = 2048  # LRU bound on solvers kept (their stations are shared, see solver())
    MAX_STATIONS = 8192

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._key = "engine:" + scenario_sha256(scenario)
        self._init_caches()

    def _init_caches(self) -> None:
        self._workload = None
        self._pools: dict[tuple, Any] = {}
        self._issues: dict[tuple, str | None] = {}
        self._caps: dict[tuple, tuple[float, str]] = {}
        self._solvers: OrderedDict[PlanSpec, Any] = OrderedDict()
        self._inputs: OrderedDict[PlanSpec, tuple[Scenario, Any]] = OrderedDict()
        self._stations: dict[tuple, Any] = {}

    # pickling: ship the inputs only; a worker rebuilds (or reuses) the caches
    def __getstate__(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "_key": self._key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.scenario, self._key = state["scenario"], state["_key"]
        self._init_caches()

    @property
    def key(self) -> str:
        return self._key

    # ---- cached pieces ------------------------------------------------------------------------
    def _model(self):
        from qmodel.registry import load_catalog

        return load_catalog().model(self.scenario.model)

    def _workload_parts(self):
        """(model, :class:`qmodel.build.WorkloadParts`): the deployment-independent half of
        :func:`qmodel.build.resolve`, computed once."""
        if self._workload is None:
            from qmodel.build import resolve_workload

            model = self._model()
            self._workload = (model, resolve_workload(self.scenario, model))
        return self._workload

    def _pool(self, role: str, gpu: str, tp: int, mem_fraction: float, pp: int = 1,
              settings: dict[str, Any] | None = None):
        """:func:`qmodel.build.resolve_pool` for (role, gpu, tp, pp, KV fraction, the user's pool settings:
        dtypes and memory reserve, :data:`qmodel.topology.base.USER_POOL_SETTINGS`), cached. Without
        ``settings``, the scenario's own for that role (what :func:`deployment_for` keeps)."""
        from qmodel.build import resolve_pool
        from qmodel.scenario import PoolConfig
        from qmodel.topology.base import USER_POOL_SETTINGS

        if settings is None:
            pre, dec, _ = _pool_defaults(self.scenario)
            settings = pre if role == "prefill" else dec
        kept = {name: settings.get(name) for name in USER_POOL_SETTINGS}
        k = (role, gpu, tp, pp, mem_fraction, *kept.values())
        if k not in self._pools:
            field = {"prefill": "deployment.prefill", "decode": "deployment.decode", "pool": "deployment.pool"}[role]
            cfg = PoolConfig(gpu=gpu, tp=tp, pp=pp, **{n: v for n, v in kept.items() if v is not None})
            self._pools[k] = resolve_pool(role, field, cfg, self.scenario, self._model(), mem_fraction)
        return self._pools[k]

    def _pool_for(self, role: str, field: str, cfg: PoolConfig, mem_fraction: float):
        """The :data:`qmodel.build.PoolFactory` the planner hands to resolve: a cached pool carrying ``cfg``."""
        from qmodel.topology.base import USER_POOL_SETTINGS

        settings = {name: getattr(cfg, name) for name in USER_POOL_SETTINGS}
        return dataclasses.replace(self._pool(role, cfg.gpu, cfg.tp, mem_fraction, cfg.pp, settings), config=cfg)

    def _resolved(self, sc: Scenario, plan: PlanSpec):
        """``qmodel.build.resolve(sc)`` assembled from the cached model, workload and pools."""
        from qmodel.build import resolve

        model, workload = self._workload_parts()
        return resolve(sc, model=model, workload=workload, pool=self._pool_for)

    def _plan_inputs(self, plan: PlanSpec) -> tuple[Scenario, Any]:
        """(the plan's scenario, its resolved inputs assembled from the cached pools), LRU-cached."""
        hit = self._inputs.get(plan)
        if hit is not None:
            self._inputs.move_to_end(plan)
            return hit
        sc = scenario_for(self.scenario, plan)
        hit = self._inputs[plan] = (sc, self._resolved(sc, plan))
        if len(self._inputs) > self.MAX_SOLVERS:
            self._inputs.popitem(last=False)
        return hit

    def _station(self, plan: PlanSpec, role: str):
        """One station of ``plan``, shared by every plan with the same inputs
        (:meth:`qmodel.topology.Topology.station_keys`; QmodelError if it cannot run)."""
        topology = topology_named(plan.family.topology)
        key = topology.station_keys(plan)[role]
        st = self._stations.get(key)
        if st is None:
            st = topology.build_station(role, *self._plan_inputs(plan))  # builds only this station
            if role in topology.memo_roles:  # solved at the rate alone: each rate once for every plan sharing it
                st = MemoizedStation(st, _MEMO_RATES)
            if len(self._stations) > self.MAX_STATIONS:
                self._stations.clear()
            self._stations[key] = st
        return st

    def solver(self, plan: PlanSpec):
        """A Solver for ``plan`` whose stations are shared with every other plan using the same pools.

        A prefill station depends on its own pool only, so the plans (n_p, 1..n_d) share one object,
        and its solution at the target rate (memoised per rate) is computed once for the whole row.
        """
        s = self._solvers.get(plan)
        if s is not None:
            self._solvers.move_to_end(plan)
            return s
        from qmodel.solver import Solver

        roles = topology_named(plan.family.topology).roles
        s = Solver(*self._plan_inputs(plan), stations={role: self._station(plan, role) for role in roles})
        self._solvers[plan] = s
        if len(self._solvers) > self.MAX_SOLVERS:
            self._solvers.popitem(last=False)
        return s

    # ---- the five questions -------------------------------------------------------------------
    def pool_issue(self, role: str, gpu: str, tp: int) -> str | None:
        k = (role, gpu, tp)
        if k in self._issues:
            return self._issues[k]
        _, dec, _ = _pool_defaults(self.scenario)
        from qmodel.build import PREFILL_MEMORY_FRACTION

        frac = PREFILL_MEMORY_FRACTION if role == "prefill" else float(dec.get("kv_memory_fraction", 0.9))
        try:
            pool = self._pool(role, gpu, tp, frac)
        except QmodelError as err:
            self._issues[k] = f"cannot run: {err}"
            return self._issues[k]
        slo = self.scenario.slo
        issue = None
        parts = self._workload_parts()[1]
        lengths, uncached = parts.lengths, parts.uncached_prompt
        if role in ("prefill", "pool") and isinstance(self.scenario.workload.prefix_cache, PrefixTraceHashes):
            # the trace's hits on one instance's cache (the pool here has one): it sees the whole
            # stream, so this filter takes the cache at its most useful and refuses no plan a
            # larger pool could serve (a multi-turn conversation's turns spread over c instances)
            from qmodel.build import trace_hash_uncached

            uncached = trace_hash_uncached(self.scenario, lengths, pool)
        if role in ("prefill", "pool"):
            own = np.asarray(pool.service.prefill_exit_s(pool.service.prefill_one_s(uncached)), dtype=float)
            ok = float(np.mean(own <= slo.ttft_s))
            if ok < self.goal:
                issue = (f"TTFT infeasible at any rate: only {ok * 100:.1f}% of prompts prefill within "
                         f"{slo.ttft_s * 1e3:.0f} ms on one idle {gpu} TP{tp} instance (goal {self.goal * 100:.0f}%)")
        if issue is None and role in ("decode", "pool"):
            t1 = float(pool.service.decode_step_time_s(1.0, 0.0))
            if t1 > slo.tpot_s:
                issue = (f"TPOT infeasible at any rate: one decode step at batch 1 takes {t1 * 1e3:.1f} ms "
                         f"on {gpu} TP{tp} > target {slo.tpot_s * 1e3:.0f} ms")
        self._issues[k] = issue
        return issue

    def _station_cap(self, key: tuple, plan: PlanSpec, station: str) -> tuple[float, str]:
        hit = self._caps.get(key)
        if hit is None:
            try:
                st = self._station(plan, station)
                hit = (float(st.max_stable_rate_per_s()), st.name)
            except QmodelError:
                hit = (0.0, station)  # e.g. KV cannot hold one sequence (the role is the station's name)
            if not math.isfinite(hit[0]):
                hit = (1e12, hit[1])  # a station with no limit (e.g. a dedicated link); keep numbers finite
            self._caps[key] = hit
        return hit

    def exact_limits(self, plan: PlanSpec) -> list[tuple[float, str]]:
        """Station limits read from stations built for ``plan`` itself (what :meth:`limits` scales)."""
        keys = topology_named(plan.family.topology).station_keys(plan)
        return [self._station_cap(key, plan, role) for role, key in keys.items()]

    def limits(self, plan: PlanSpec) -> list[tuple[float, str]]:
        """Station limits as instances x one instance's limit.

        Every station's stability limit is additive over instances: c prefill engines each with its
        own queue, c KV paths, and a decode/colocated/chunked pool whose slot-capped token rate is c
        times one engine's (tests/test_planner_engine.py checks the identity against stations built
        with c instances). Scaling avoids building a station per instance count just to read its limit.
        """
        f = plan.family
        d = plan.decode
        if f.separate_prefill:
            p = plan.prefill
            assert p is not None
            one = self.exact_limits(f.plan(1, 1))
            return [(one[0][0] * p.instances, one[0][1]), (one[1][0] * p.instances, one[1][1]),
                    (one[2][0] * d.instances, one[2][1])]
        (c, st), = self.exact_limits(f.plan(1))
        return [(c * d.instances, st)]

    def attainment(self, plan: PlanSpec, rate: float) -> float:
        try:
            # Solver.attainment: 0 when unstable, and when a chain refuses to truncate within 1% of saturation
            a = float(self.solver(plan).attainment(rate))
        except NumericalError:
            raise
        except QmodelError:
            return 0.0  # the plan cannot run at this rate (e.g. no KV room left for one sequence)
        if not (-1e-9 <= a <= 1.0 + 1e-9):  # NaN or a real excursion: a station bug must not steer the search
            raise NumericalError(f"attainment {a!r} for {plan.label} at {rate:.6g} req/s")
        return min(1.0, max(0.0, a))  # CDFs summed on a grid overshoot 1 by round-off (~1e-15)

    def metrics(self, plan: PlanSpec, rate: float) -> PlanMetrics:
        res = self.solver(plan).solve(rate, link=False)  # the plan table shows no link report
        return PlanMetrics(rate_per_s=rate, attainment=res.attainment, ttft_p90_s=res.ttft.p90, tpot_p90_s=res.tpot.p90,
                           binding=res.binding, validity=res.validity.text if res.validity else "",
                           warnings=tuple(res.warnings))

    def knee(self, plan: PlanSpec, lam_max: float) -> float:
        """The knee of :func:`qmodel.compare.knee_rate` (binding percentile at twice its near-idle
        level), found to 1% by Brent's method instead of bisection (about half the solves)."""
        from qmodel.planner.search import root_bracket

        s = self.solver(plan)
        slo = self.scenario.slo
        q = slo.percentile / 100.0

        def level(rate: float) -> float:
            c = s.compose(rate)
            return max(c.ttft.quantile(q) / slo.ttft_s, c.tpot.quantile(q) / slo.tpot_s)

        lo = lam_max * 1e-3
        target = 2.0 * level(lo)
        hi = lam_max * (1.0 - 1e-2)
        while True:
            try:
                f_hi = target - level(hi)
                break
            except QmodelError:  # the chain refuses rates this close to saturation: step back
                hi = lo + 0.5 * (hi - lo)
                if hi <= lo * 1.01:
                    return lo
        if f_hi >= 0:
            return hi
        x, *_ = root_bracket(lambda r: target - level(r), lo, target / 2.0, hi, f_hi, 1e-2)
        return float(x)

    def mean_output_tokens(self) -> float:
        return float(self._workload_parts()[1].lengths.mean_output)

    def mean_prompt_tokens(self) -> float:
        return float(self._workload_parts()[1].lengths.mean_prompt)
