"""Analytic vs replay, metric by metric (used by ``qmodel solve --check``, the planner and the harness).

Relative error is (analytic - replay) / replay, so a positive number means the analytical model is
conservative (predicts worse latency than the replay measured). Attainment is compared as an
absolute difference of probabilities, since relative errors of probabilities near 0 mean little.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from qmodel.result import Result
from qmodel.scenario import ClosedArrivals, Scenario

__all__ = ["MetricDiff", "CheckReport", "diff_metrics", "compare_with_replay", "METRICS"]

METRICS = ["ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99"]


class MetricDiff(BaseModel):
    model_config = ConfigDict(frozen=True)
    metric: str
    analytic: float
    replay: float
    rel_error: float  # (analytic - replay) / replay; for attainment: analytic - replay


class CheckReport(BaseModel):
    model_config = ConfigDict(frozen=True)
    scenario: str
    rate_per_s: float
    replay_requests: int
    seed: int
    trace_sha256: str
    metrics: list[MetricDiff]
    stations: list[MetricDiff]


def _rel(a: float, r: float) -> float:
    if r == 0.0:
        return 0.0 if a == 0.0 else 1.0
    return (a - r) / r


def diff_metrics(analytic, replay) -> tuple[list[MetricDiff], list[MetricDiff]]:
    """Field-by-field differences of two results that share the Result metric names."""
    out: list[MetricDiff] = []
    # TBT where both sides report it (the scenario sets slo.tpot_definition)
    tbt = [f"tbt_{k}" for k in ("mean", "p50", "p90", "p99")] if (
        getattr(analytic, "tbt", None) is not None and getattr(replay, "tbt", None) is not None) else []
    for m in METRICS + tbt:
        kind, stat = m.split("_")
        a = float(getattr(getattr(analytic, kind), stat))
        r = float(getattr(getattr(replay, kind), stat))
        out.append(MetricDiff(metric=m, analytic=a, replay=r, rel_error=_rel(a, r)))
    for m in ("attainment", "ttft_attainment", "tpot_attainment"):
        a, r = float(getattr(analytic, m)), float(getattr(replay, m))
        out.append(MetricDiff(metric=m, analytic=a, replay=r, rel_error=a - r))
    by_name = {s.name: s for s in replay.stations}
    st: list[MetricDiff] = []
    for s in analytic.stations:
        if s.name in by_name:
            # the replay meters the busy fraction; the analytic side's is its utilization unless it
            # reports a distinct one (decode: its utilization is the rate over its limit)
            a = s.utilization if s.busy_fraction is None else s.busy_fraction
            r = by_name[s.name].utilization
            st.append(MetricDiff(metric=f"{s.name}.utilization", analytic=a, replay=r, rel_error=_rel(a, r)))
    return out, st


def compare_with_replay(scenario: Scenario, result: Result, n_requests: int = 20000, seed: int = 0,
                        throughput_per_s: float | None = None) -> CheckReport:
    """Replay the scenario at the result's rate and report the differences. A closed loop
    (:class:`~qmodel.scenario.ClosedArrivals`) is replayed as itself; pass its analytic
    ``throughput_per_s`` (:mod:`qmodel.closed`) to compare it with the replay's completions per second."""
    from qmodel.validation.replay import replay

    closed = isinstance(scenario.workload.arrivals, ClosedArrivals)
    sc = scenario if closed or scenario.rate_per_s == result.rate_per_s else scenario.with_rate(result.rate_per_s)
    rep = replay(sc, n_requests=n_requests, seed=seed)
    metrics, stations = diff_metrics(result, rep)
    if throughput_per_s is not None:
        metrics.insert(0, MetricDiff(metric="throughput_per_s", analytic=throughput_per_s, replay=rep.throughput_rps,
                                     rel_error=_rel(throughput_per_s, rep.throughput_rps)))
    return CheckReport(scenario=scenario.name, rate_per_s=result.rate_per_s, replay_requests=rep.header.n_requests,
                       seed=seed, trace_sha256=rep.header.trace_sha256, metrics=metrics, stations=stations)
