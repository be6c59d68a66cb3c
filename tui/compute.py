"""What the TUI computes for a scenario, in stages, with no Textual in sight.

Stage ``solve`` (the live part, budget 100 ms with the debounce): the engine at the scenario's
rate: TTFT/TPOT summaries and distributions, attainment and bounds, stations, binding constraint,
link need vs availability, validity. Later stages refine the view while the user reads it:

* ``goodput``: goodput, goodput per GPU, $ per million output tokens at goodput;
* ``curves``: attainment vs rate for colocated, chunked and disaggregated on the same GPUs, with
  each one's goodput and knee (:func:`qmodel.compare.knee_rate`);
* ``heatmap``: goodput over a grid of prefill x decode instance counts (same GPU type and TP);
* ``sensitivities``: elasticities of goodput (:func:`qmodel.goodput.sensitivities`).

Each stage takes the previous :class:`Analysis` and returns a new one; ``cancelled()`` is polled
between solver calls so an edit to the form abandons stale work quickly. Errors become fields of
the analysis (the app shows them), never exceptions, except :class:`Cancelled`.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from qmodel.errors import QmodelError, UnstableError
from qmodel.layouts import iso_gpu_layouts, pd_split
from qmodel.result import Goodput, Result

from .analysis import Analysis, Cancelled, Curve, DistCurve, Heatmap, ReplayCheck, UnstableInfo
from qmodel.scenario import Scenario, scenario_sha256
from qmodel.topology import topology_named

__all__ = ["Cancelled", "DistCurve", "Curve", "Heatmap", "Analysis", "WhatIfSession", "STAGES", "usd_per_million_tokens",
           "ReplayCheck"]

Check = Callable[[], bool]


def usd_per_million_tokens(cost_per_hour_usd: float | None, goodput_rps: float, mean_output_tokens: float) -> float | None:
    """$ per million output tokens served within the SLO: :func:`qmodel.cost.usd_per_million`."""
    from qmodel.cost import usd_per_million

    return usd_per_million(cost_per_hour_usd, goodput_rps, mean_output_tokens)


def _dist_curve(dist, target_s: float, points: int = 400) -> DistCurve:
    s = dist.summary()
    hi = max(s["p99"] * 1.25, target_s * 1.15, dist.dx * 8)
    x = np.linspace(0.0, hi, points)
    cdf = np.clip(np.asarray(dist.cdf(x), dtype=float), 0.0, 1.0)
    return DistCurve(tuple(float(v) for v in x), tuple(float(v) for v in cdf), float(s["p50"]), float(s["p90"]),
                     float(s["p99"]), float(target_s))


def _grid(n: int, most: int) -> tuple[int, ...]:
    """Instance counts 1..n, thinned to at most ``most`` values (always keeping 1 and n)."""
    if n <= most:
        return tuple(range(1, n + 1))
    return tuple(sorted({int(round(v)) for v in np.linspace(1, n, most)}))


class WhatIfSession:
    """The TUI's recompute session (the real backend): qmodel's solver, goodput, compare and sensitivities, with a solver cache.

    Building a :class:`~qmodel.solver.Solver` resolves the catalog, the service-time model and the
    length mix, and its stations precompute per-request service times; caching solvers by scenario
    hash makes revisiting an earlier value instant, lets the later stages reuse the solver stage 1
    built, and (:mod:`qmodel.station_cache`) lets rate and SLO edits reuse the stations, and an
    edit to one pool the other pool's.
    """

    CURVE_POINTS = 32
    HEATMAP_SIDE = 6
    HEATMAP_BUDGET_S = 20.0  # thin the P x D grid so it takes about this long at most

    def __init__(self, cache_size: int = 32, variant_cache_size: int = 128) -> None:
        from qmodel.station_cache import StationCache

        # Two caches: the scenarios the user edits, and the variants the later stages explore
        # (curves, heatmap, sensitivities: dozens per edit). Kept apart so exploring never evicts
        # the solver the next keystroke will reuse. New solvers come from a StationCache each:
        # a rate or SLO edit shares every station, and its solutions at rates already solved.
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._variants: OrderedDict[str, Any] = OrderedDict()
        self._size = cache_size
        self._variant_size = variant_cache_size
        self._edits = StationCache(size=cache_size)
        self._shared = StationCache(size=variant_cache_size)  # the heatmap's P x D grid builds P + D stations
        self._lock = threading.Lock()  # a cancelled worker may still be finishing while the next one starts

    # ---- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _remember(table: OrderedDict, key: str, value: Any, size: int) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > size:
            table.popitem(last=False)

    def solver(self, sc: Scenario, sha: str | None = None, *, variant: bool = False):
        """The (cached) solver of ``sc``; ``variant`` marks scenarios derived by the later stages.
        A new one shares the stations (and resolution) its inputs allow with the solvers before it
        (:class:`qmodel.station_cache.StationCache`; the numbers are those of a fresh solver)."""
        key = sha or scenario_sha256(sc)
        with self._lock:
            for table in (self._cache, self._variants):
                s = table.get(key)
                if s is not None:
                    table.move_to_end(key)
                    return s
            s = (self._shared if variant else self._edits).solver(sc)
            if variant:
                self._remember(self._variants, key, s, self._variant_size)
            else:
                self._remember(self._cache, key, s, self._size)
        return s

    def _goodput(self, sc: Scenario, check: Check, variant: bool = True) -> tuple[float, float, Any]:
        from qmodel.goodput import goodput_search

        solver = self.solver(sc, variant=variant)
        lam_max, _ = solver.max_stable_rate()

        def att(rate: float) -> float:
            if check():
                raise Cancelled
            return solver.attainment(rate)

        g, _ = goodput_search(att, lam_max, sc.slo.attainment_goal)
        return g, lam_max, solver

    # ---- stages -------------------------------------------------------------------------------
    def solve(self, sc: Scenario, check: Check = lambda: False) -> Analysis:
        t0 = time.perf_counter()
        sha = scenario_sha256(sc)
        base = Analysis(scenario=sc, sha256=sha)
        try:
            solver = self.solver(sc, sha)
            lam_max = solver.max_stable_rate()
            mean_out = float(solver.resolved.lengths.mean_output)
            base = dataclasses.replace(base, max_stable=(float(lam_max[0]), lam_max[1]), mean_output_tokens=mean_out)
            # composed once for the plots and the Result, at the offered rate (c.rate_per_s is the rate the
            # stations see: less the requests a context_overflow reject refuses)
            rate = solver.resolved.base_rate_per_s or _missing_rate()
            c = solver.compose(rate)
            res = solver.solve(rate, composition=c)
        except UnstableError as err:
            info = UnstableInfo(err.station, err.rate_per_s, err.max_stable_rate_per_s, str(err))
            return dataclasses.replace(base, unstable=info, timings_s={"solve": time.perf_counter() - t0})
        except QmodelError as err:
            return dataclasses.replace(base, error=str(err), error_path=getattr(err, "field", None),
                                       timings_s={"solve": time.perf_counter() - t0})
        slo = sc.slo
        return dataclasses.replace(base, result=res, ttft=_dist_curve(c.ttft, slo.ttft_s),
                                   tpot=_dist_curve(c.tpot, slo.tpot_s), timings_s={"solve": time.perf_counter() - t0})

    def goodput(self, a: Analysis, check: Check) -> Analysis:
        from qmodel.binding import binding_at

        t0 = time.perf_counter()
        sc = a.scenario
        g, lam_max, solver = self._goodput(sc, check, variant=False)
        station = a.max_stable[1] if a.max_stable else ""
        gpus = solver.resolved.gpus
        cost = solver.resolved.cost_per_hour_usd
        gp = Goodput(scenario=sc.name, topology=sc.deployment.topology, goodput_rps=g, goodput_per_gpu=g / gpus,
                     goodput_per_usd_hour=None if not cost else g / cost,
                     attainment_at_goodput=solver.attainment(g) if g > 0 else 0.0,
                     max_stable_rate_per_s=lam_max, binding=binding_at(solver, g, station), gpus=gpus,
                     cost_per_hour_usd=cost, inputs_sha256=a.sha256)
        usd = usd_per_million_tokens(cost, g, a.mean_output_tokens or 0.0)
        return dataclasses.replace(a, goodput=gp, usd_per_mtok=usd,
                                   timings_s={**a.timings_s, "goodput": time.perf_counter() - t0})

    def curves(self, a: Analysis, check: Check) -> Analysis:
        from qmodel.compare import knee_rate

        sc = a.scenario
        lay = iso_gpu_layouts(sc)
        tp, n = lay.tp, lay.instances
        variants = {"colocated": lay.colocated(), "chunked": lay.chunked()}
        own = topology_named(sc.deployment.topology)
        picks: list[tuple[str, str, Scenario | None, str]] = []
        for topo, variant in variants.items():  # the single-pool shapes on the same GPUs
            shape = topology_named(topo)
            layout = f"{n} x TP{tp}" + (f", {shape.chunk_budget(variant.deployment)}-token chunks"
                                        if shape.chunked_prefill else "")
            picks.append((topo, layout + (" (this scenario)" if own.name == topo else ""),
                          sc if own.name == topo else variant, ""))
        if own.separate_prefill:
            dep = sc.deployment
            picks.append(("disaggregated", f"P:D = {dep.prefill.instances}:{dep.decode.instances} (this scenario)", sc, ""))
        elif n < 2:
            picks.append(("disaggregated", "needs 2+ instances", None, "disaggregation needs at least two instances"))
        else:
            best: tuple[float, int] | None = None
            for p in range(1, n):
                try:
                    g, _, _ = self._goodput(lay.disaggregated(p), check)
                except QmodelError:
                    continue
                if best is None or g > best[0]:
                    best = (g, p)
            if best is None:
                picks.append(("disaggregated", "no feasible split", None, "no P:D split could be solved"))
            else:
                p = best[1]
                picks.append(("disaggregated", f"P:D = {p}:{n - p} (best split)", lay.disaggregated(p), ""))
        solved: list[tuple[str, str, Any, float, float, float, str]] = []
        for topo, layout, variant, note in picks:
            if variant is None:
                solved.append((topo, layout, None, 0.0, 0.0, 0.0, note))
                continue
            try:
                g, lam_max, solver = self._goodput(variant, check)
                knee = knee_rate(solver, lam_max) if lam_max > 0 else 0.0
                solved.append((topo, layout, solver, g, knee, lam_max, ""))
            except QmodelError as err:
                solved.append((topo, layout, None, 0.0, 0.0, 0.0, str(err)))
        x_max = 1.05 * max([s[5] for s in solved] + [a.result.rate_per_s if a.result else 0.0, 1e-9])
        rates = tuple(float(r) for r in np.linspace(x_max / self.CURVE_POINTS, x_max, self.CURVE_POINTS))
        out: list[Curve] = []
        for topo, layout, solver, g, knee, lam_max, note in solved:
            ys: tuple[float, ...] = ()
            if solver is not None:
                vals = []
                for r in rates:
                    if check():
                        raise Cancelled
                    vals.append(solver.attainment(r) if r < lam_max else 0.0)
                ys = tuple(float(v) for v in vals)
            out.append(Curve(topo, layout, rates if ys else (), ys, g, knee, lam_max, note))
        return dataclasses.replace(a, curves=tuple(out))

    def heatmap(self, a: Analysis, check: Check, emit: Callable[[Analysis], None] | None = None) -> Analysis:
        sc = a.scenario
        dep = sc.deployment
        lay = iso_gpu_layouts(sc)
        gpu, tp, n = lay.gpu, lay.tp, lay.instances
        if topology_named(dep.topology).separate_prefill:
            current = (dep.prefill.instances, dep.decode.instances)
            n = max(n, current[0] + current[1])
        else:
            current = None
        side = max(n - 1, 1)
        # Bound the grid by time: each cell is a goodput search. The goodput stage timed one.
        per_cell = a.timings_s.get("goodput", 0.0)
        most = self.HEATMAP_SIDE
        if per_cell > 0:
            most = max(2, min(most, int(math.sqrt(self.HEATMAP_BUDGET_S / per_cell))))
        ps, ds = _grid(side, most), _grid(side, most)
        if current is not None:
            ps = tuple(sorted(set(ps) | {current[0]}))
            ds = tuple(sorted(set(ds) | {current[1]}))
        rows: list[tuple[float | None, ...]] = []
        best: tuple[int, int, float] | None = None
        for d in ds:
            row: list[float | None] = []
            for p in ps:
                try:
                    variant = pd_split(sc, p, d)
                    g, _, solver = self._goodput(variant, check)
                except QmodelError:
                    row.append(None)
                    continue
                row.append(g)
                per_gpu = g / solver.resolved.gpus
                if best is None or per_gpu > best[2]:
                    best = (p, d, per_gpu)
            rows.append(tuple(row))
            if emit is not None and len(rows) < len(ds):
                emit(dataclasses.replace(a, heatmap=Heatmap(gpu, tp, ps, ds, tuple(rows), current, best, False)))
        return dataclasses.replace(a, heatmap=Heatmap(gpu, tp, ps, ds, tuple(rows), current, best))

    def sensitivities(self, a: Analysis, check: Check) -> Analysis:
        """Elasticities d ln(goodput) / d ln(input): :func:`qmodel.goodput.sensitivities` on this
        engine's cached solvers, interrupted (:class:`Cancelled`) when an edit makes them stale."""
        from qmodel.goodput import sensitivities

        sc = a.scenario
        base = a.goodput.goodput_rps if a.goodput else self._goodput(sc, check, variant=False)[0]
        out = sensitivities(sc, base, goodput_of=lambda s: self._goodput(s, check)[0])
        return dataclasses.replace(a, sensitivities=tuple(out))

    # ---- replay -------------------------------------------------------------------------------
    def replay(self, sc: Scenario, result: Result, n_requests: int, seed: int,
               progress: Callable[[float, str], None]) -> ReplayCheck:
        """Replay the scenario at the result's rate (deterministic for the seed) and diff the metrics."""
        from qmodel.validation.replay_check import diff_metrics
        from qmodel.validation.replay import build_plan, load_replay_trace, replay_plan

        t0 = time.perf_counter()
        if sc.rate_per_s != result.rate_per_s:
            sc = sc.with_rate(result.rate_per_s)
        progress(0.05, "building the replay plan")
        plan = build_plan(sc)
        progress(0.15, f"generating {n_requests} requests (seed {seed})")
        trace = load_replay_trace(sc, n_requests, seed)
        progress(0.3, f"replaying {len(trace)} requests")
        rep = replay_plan(plan, trace, seed=seed)
        progress(0.95, "comparing with the analytic answer")
        metrics, stations = diff_metrics(result, rep)
        rows = tuple((m.metric, m.analytic, m.replay, m.rel_error) for m in metrics)
        st = tuple((m.metric, m.analytic, m.replay, m.rel_error) for m in stations)
        progress(1.0, "done")
        return ReplayCheck(result.rate_per_s, len(trace), seed, rows, st, time.perf_counter() - t0)


def _missing_rate() -> float:
    from qmodel.errors import InputError

    raise InputError("workload.arrivals.rate_per_s", None, "set a rate to solve at")


#: Later stages in the order they run (name, WhatIfSession method name).
STAGES: tuple[tuple[str, str], ...] = (("goodput", "goodput"), ("curves", "curves"),
                                       ("sensitivities", "sensitivities"), ("heatmap", "heatmap"))


def finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
