"""A deterministic stand-in for the TUI's engine, for layout tests and SVG snapshots.

Its numbers are simple closed forms of the scenario (an M/M/1-like latency in the rate), so the
snapshots do not change when the real stations are re-tuned, and a field change still changes the
answer. Behaviour tests that need qmodel's real numbers use :class:`qmodel.tui.compute.WhatIfSession`.
"""

from __future__ import annotations

import dataclasses
import math

from qmodel.errors import UnstableError
from qmodel.result import DistSummary, Goodput, LinkReport, MetricBand, Result, Sensitivity, StationReport, Validity
from qmodel.scenario import scenario_sha256
from qmodel.tui.analysis import Analysis, Curve, DistCurve, Heatmap, ReplayCheck, UnstableInfo
from qmodel.tui.compute import usd_per_million_tokens

CAPACITY_PER_GPU = 1.5  # req/s one GPU sustains in the fake


def _exp_curve(mean: float, target: float) -> DistCurve:
    hi = max(mean * 4.6 * 1.25, target * 1.15)
    xs = tuple(hi * i / 399 for i in range(400))
    cdf = tuple(1 - math.exp(-x / mean) for x in xs)
    q = lambda p: -mean * math.log(1 - p)  # noqa: E731
    return DistCurve(xs, cdf, q(0.5), q(0.9), q(0.99), target)


_FAKE_VALIDITY = Validity(level=0.9, bands=[MetricBand(metric=m, percentile=p, low=-0.05, high=0.05) for m in ("ttft", "tpot")
                                            for p in (50, 90, 99)], cell="fake", cell_cases=1, corpus_cases=1,
    measured_at="fake", inside_envelope=True, text="good: fake engine; check this scenario with --check")


def _summary(mean: float) -> DistSummary:
    return DistSummary(mean=mean, p50=mean * math.log(2), p90=mean * math.log(10), p99=mean * math.log(100))


class FakeEngine:
    """Latency = base / (1 - rho), rho = rate / (capacity per GPU x GPUs); exponential shapes."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.replays = 0
        self.solves = 0

    def _cap(self, sc) -> float:
        return CAPACITY_PER_GPU * sc.deployment.gpus

    def solve(self, sc, check=lambda: False) -> Analysis:
        self.solves += 1
        sha = scenario_sha256(sc)
        cap = self._cap(sc)
        station = "decode" if sc.deployment.topology == "disaggregated" else sc.deployment.topology
        base = Analysis(scenario=sc, sha256=sha, max_stable=(cap, station), mean_output_tokens=200.0)
        rate = sc.rate_per_s or 1.0
        if rate >= cap:
            err = UnstableError(station, rate / cap, rate, cap)
            return dataclasses.replace(base, unstable=UnstableInfo(station, rate, cap, str(err)))
        rho = rate / cap
        ttft_mean, tpot_mean = 0.1 / (1 - rho), 0.02 / (1 - rho)
        a_ttft = 1 - math.exp(-sc.slo.ttft_s / ttft_mean)
        a_tpot = 1 - math.exp(-sc.slo.tpot_s / tpot_mean)
        stations = [StationReport(name=station, utilization=rho, max_stable_rate_per_s=cap, mean_wait_s=ttft_mean * rho,
                                  p90_wait_s=ttft_mean * 2.3 * rho, p99_wait_s=ttft_mean * 4.6 * rho,
                                  method="fake M/M/1", exact=True)]
        link = None
        if sc.deployment.topology == "disaggregated":
            link = LinkReport(bandwidth_needed_bytes_per_s=rate * 1e8, bandwidth_available_bytes_per_s=5e10,
                              sufficient=True, mean_transfer_bytes=1e8, mean_exposed_s=0.004, link="ib-ndr-400",
                              paths=2, bandwidth_per_path_bytes_per_s=2.5e10, nominal_per_path_bytes_per_s=2.5e10 / 0.9,
                              efficiency=0.9)
        res = Result(scenario=sc.name, topology=sc.deployment.topology, rate_per_s=rate, ttft=_summary(ttft_mean),
                     tpot=_summary(tpot_mean), attainment=a_ttft * a_tpot, attainment_bounds=(a_ttft * a_tpot,
                                                                                              min(a_ttft, a_tpot)),
                     ttft_attainment=a_ttft, tpot_attainment=a_tpot, stations=stations,
                     binding=f"TTFT binds: fake binding at utilization {rho:.2f}", link=link, gpus=sc.deployment.gpus,
                     inputs_sha256=sha, validity=_FAKE_VALIDITY)
        return dataclasses.replace(base, result=res, ttft=_exp_curve(ttft_mean, sc.slo.ttft_s),
                                   tpot=_exp_curve(tpot_mean, sc.slo.tpot_s))

    def goodput(self, a: Analysis, check) -> Analysis:
        cap = self._cap(a.scenario)
        g = 0.8 * cap
        gp = Goodput(scenario=a.scenario.name, topology=a.scenario.deployment.topology, goodput_rps=g,
                     goodput_per_gpu=g / a.scenario.deployment.gpus, attainment_at_goodput=0.9,
                     max_stable_rate_per_s=cap, binding="TTFT binds at goodput (fake)", gpus=a.scenario.deployment.gpus,
                     cost_per_hour_usd=2.0 * a.scenario.deployment.gpus, inputs_sha256=a.sha256)
        return dataclasses.replace(a, goodput=gp, usd_per_mtok=usd_per_million_tokens(gp.cost_per_hour_usd, g, 200.0))

    def curves(self, a: Analysis, check) -> Analysis:
        cap = self._cap(a.scenario)
        rates = tuple(cap * 1.05 * (i + 1) / 40 for i in range(40))
        out = []
        for topo, k in (("colocated", 0.7), ("chunked", 0.8), ("disaggregated", 0.9)):
            att = tuple(max(0.0, 1 - (r / (k * cap)) ** 6) if r < k * cap else 0.0 for r in rates)
            out.append(Curve(topo, f"fake {topo}", rates, att, 0.8 * k * cap, 0.7 * k * cap, k * cap))
        return dataclasses.replace(a, curves=tuple(out))

    def heatmap(self, a: Analysis, check, emit=None) -> Analysis:
        ps = ds = (1, 2, 3)
        grid = tuple(tuple(float(min(p * 2, d * 3)) for p in ps) for d in ds)
        return dataclasses.replace(a, heatmap=Heatmap("h100-sxm", 1, ps, ds, grid, (1, 1), (3, 2, 6 / 5)))

    def sensitivities(self, a: Analysis, check) -> Analysis:
        return dataclasses.replace(a, sensitivities=(Sensitivity(input="slo.ttft_s", elasticity=0.5),
                                                     Sensitivity(input="instances", elasticity=1.0)))

    def replay(self, sc, result, n, seed, progress) -> ReplayCheck:
        self.replays += 1
        for f in (0.1, 0.5, 1.0):
            progress(f, "fake replay")
        # The metric names and order of validation.replay_check.diff_metrics; the replay reads 5% low.
        def latency(kind: str, stat: str) -> float:
            return getattr(getattr(result, kind), stat)

        rows = tuple((f"{kind}_{stat}", latency(kind, stat), latency(kind, stat) * 0.95, 1 / 0.95 - 1)
                     for kind in ("ttft", "tpot") for stat in ("mean", "p50", "p90", "p99"))
        rows += tuple((m, getattr(result, m), getattr(result, m) - 0.01, 0.01)
                      for m in ("attainment", "ttft_attainment", "tpot_attainment"))
        stations = tuple((f"{s.name}.utilization", s.utilization, s.utilization * 0.95, 1 / 0.95 - 1)
                         for s in result.stations)
        return ReplayCheck(result.rate_per_s, n, seed, rows, stations, 0.0)


async def settle(app, pilot, rounds: int = 200) -> None:
    """Wait until the debounce timer has fired and every worker has finished (cancelled ones too)."""
    import threading

    from textual.worker import WorkerCancelled, WorkerState

    for _ in range(rounds):
        await pilot.pause(0.02)
        timer = getattr(app, "_debounce", None)
        pending_timer = timer is not None and app.build_state is not None and app.build_state.scenario is not None \
            and app.analysis is not None and app.analysis.scenario != app.build_state.scenario
        running = [w for w in app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)]
        threads = [t for t in threading.enumerate() if t.name.startswith("qmodel-")]  # replay, planner
        if not running and not pending_timer and not threads:
            break
        try:
            await app.workers.wait_for_complete(running)
        except WorkerCancelled:
            pass
    await pilot.pause()


async def fill_every_tab(app, pilot) -> None:
    """Two pins (the example, then 4 decode instances), the (fake) plans and a (fake) replay: what the
    layout and snapshot tests show on every tab."""
    app.action_pin()
    app.set_field("deployment.decode.instances", "4")
    await settle(app, pilot)
    app.action_pin()
    app.action_plan()
    await settle(app, pilot)
    app.action_replay()


def screen_text(app) -> str:
    """The screen as plain text (for assertions on what is shown)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


def fake_plans(scenario, objective, target, top_k=10):
    """Three ranked disaggregated plans with fixed numbers, in place of :func:`qmodel.tui.planning.run_planner`."""
    from qmodel.planner.plan_result import PlanRow, PoolOut
    from qmodel.tui import planning

    out = []
    for rank, (tp, inst) in enumerate([(2, 3), (4, 2), (8, 1)], start=1):
        row = PlanRow(rank=rank, topology="disaggregated", label=f"{inst}P+{2 * inst}D h100-sxm TP{tp}",
                      prefill=PoolOut(gpu="h100-sxm", tp=tp, instances=inst, gpus=tp * inst),
                      decode=PoolOut(gpu="h100-sxm", tp=tp, instances=2 * inst, gpus=2 * tp * inst), link="roce-4x200",
                      transfer_mode="layerwise", gpus=3 * tp * inst, power_w=700.0 * 3 * tp * inst,
                      cost_per_hour=4.0 * 3 * tp * inst, goodput_rps=7.5 / rank,
                      goodput_per_gpu=7.5 / rank / (3 * tp * inst),
                      rate_per_s=7.5 / rank, attainment=0.9, ttft_p90_s=0.4123 * rank, tpot_p90_s=0.05123,
                      max_stable_rate_per_s=9.0, knee_rps=6.0, headroom_to_knee=-0.1,
                      binding="TPOT binds: p90 51.2 ms vs target 60 ms at utilization 0.85; prefill ok",
                      validity="approximate")
        out.append(planning.PlanChoice(row.label, row, planning.scenario_from_row(scenario, row)))
    return out


def view_text(app, view) -> str:
    """A TableView's content as laid out at its width, all of it (also what is scrolled out of sight)."""
    console = app.console
    lines = console.render_lines(view.content, console.options.update_width(view.content_size.width), pad=False)
    return "\n".join("".join(seg.text for seg in line) for line in lines)
