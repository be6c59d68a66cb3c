"""The replay's statistics: per-request marks -> :class:`~qmodel.validation.replay_result.ReplayResult`.

Statistics exclude requests arriving in the first ``warmup_fraction`` of the trace's time span
(they are still simulated); time averages (utilization, number in station) use the window from
the warm-up time to the last arrival. Little's law is checked on the sample path over that window
(:func:`little_rel_error`, an identity to round-off); standard errors are by 20 batch means; the
modelling choices behind the numbers are listed in the header's assumptions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from qmodel.errors import NumericalError
from qmodel.result import DistSummary
from qmodel.validation.replay_plan import ReplayPlan
from qmodel.validation.replay_result import Conservation, Precision, ReplayHeader, ReplayResult, ReplayStation
from qmodel.validation.trace_types import Trace

if TYPE_CHECKING:  # annotations only
    from qmodel.validation.stations.core import Requests, Sim

__all__ = ["ENGINE", "LITTLE_TOLERANCE", "FCFS_NOTE", "SHAPE_NOTES", "little_rel_error", "summarize"]

ENGINE = "qmodel-replay/1"
#: the Little's-law identity's relative gap allowed for round-off (see little_rel_error), any run length
LITTLE_TOLERANCE = 1e-9


def _dist(x: np.ndarray, name: str) -> DistSummary:
    if len(x) == 0:
        return DistSummary(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    p50, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0])
    return DistSummary(mean=_f(x.mean(), f"{name}.mean"), p50=_f(p50, f"{name}.p50"), p90=_f(p90, f"{name}.p90"),
                       p99=_f(p99, f"{name}.p99"))


def _f(v: float, name: str) -> float:
    """``v`` as a float for the JSON report. A non-finite statistic is a replay bug (every mean,
    rate and percentile here is over finite event times; an empty sample is reported as 0 by its
    caller before it gets here), so it raises instead of being written as a number."""
    v = float(v)
    if not math.isfinite(v):
        raise NumericalError(f"replay: {name} is {v}; a finite number was expected (a replay bug: not written as a number)")
    return v


def _station_report(st, servers: int, arrival: np.ndarray, measured_mask: np.ndarray,
                    window: tuple[float, float]) -> ReplayStation:
    entry, start, exit_ = (np.asarray(c, dtype=float) for c in st.req.marks[st.name])
    span = window[1] - window[0]
    sel = measured_mask & np.isfinite(entry) & np.isfinite(exit_)
    wait = (start - entry)[sel]
    soj = (exit_ - entry)[sel]
    inwin = np.isfinite(entry) & (entry >= window[0]) & (entry <= window[1]) & np.isfinite(exit_)
    lam = inwin.sum() / span if span > 0 else 0.0
    L = st.in_sys.mean()
    little = little_rel_error(L, entry, exit_, window)
    wd = _dist(wait, f"{st.name}.wait")
    util = st.utilization(servers) if hasattr(st, "utilization") else st.busy_m.mean() / servers
    return ReplayStation(name=st.name, utilization=_f(util, f"{st.name}.utilization"),
                         mean_in_system=_f(L, f"{st.name}.mean_in_system"), mean_wait_s=wd.mean, p90_wait_s=wd.p90,
                         p99_wait_s=wd.p99,
                         mean_sojourn_s=_f(soj.mean() if len(soj) else 0.0, f"{st.name}.mean_sojourn_s"),
                         throughput_rps=_f(lam, f"{st.name}.throughput_rps"),
                         little_rel_error=_f(little, f"{st.name}.little_rel_error"), servers=servers,
                         notes=list(getattr(st, "notes", [])),
                         **{k: _f(v, f"{st.name}.{k}") for k, v in (st.extra() if hasattr(st, "extra") else {}).items()})


def little_rel_error(mean_in_system: float, entry: np.ndarray, exit_: np.ndarray, window: tuple[float, float]) -> float:
    """Little's law on the sample path over the measurement window [w0, w1]:
    L·(w1 − w0) = Σ_i |[entry_i, exit_i] ∩ [w0, w1]|, the time-average count ``mean_in_system``
    against the requests' marks, each sojourn clipped to the window (a request still in the
    station at the end counts to w1). Both sides exclude the warm-up and drain edges in the same
    way, so the identity is exact whatever the run length: the relative gap is round-off (below
    LITTLE_TOLERANCE) unless the time integral and the marks disagree, which is a replay bug.
    (The unclipped form L = λ·W, λ the entries in the window and W their whole sojourns, differs
    from it by the edge terms, a statistical error of the order of a sojourn over the window:
    2% on 20k requests near saturation, so it could not tell a bug from a short run.)"""
    w0, w1 = window
    span = w1 - w0
    area = mean_in_system * span
    seen = np.isfinite(entry)
    if span <= 0 or not seen.any():
        return 0.0
    lo = np.maximum(entry[seen], w0)
    hi = np.minimum(np.where(np.isfinite(exit_[seen]), exit_[seen], w1), w1)
    clipped = float(np.maximum(hi - lo, 0.0).sum())
    scale = max(area, clipped)
    return abs(area - clipped) / scale if scale > 0 else 0.0


FCFS_NOTE = " (the layer chunks of a batch interleave; batches FCFS, each holding the path to its last chunk)"


def _batch_se(x: np.ndarray, batches: int = 20) -> float:
    """Standard error of the mean of x by batch means (0 when there are too few values)."""
    m = len(x) // batches
    if m < 2:
        return 0.0
    means = x[: m * batches].reshape(batches, m).mean(axis=1)
    return _f(means.std(ddof=1) / math.sqrt(batches), "batch-means standard error")


def _disaggregated_notes(plan: ReplayPlan) -> list[str]:
    out = [f"prefill: per-instance FCFS queues, {plan.prefill_dispatch} dispatch, batches of <= "
           f"{plan.max_batch_tokens} new tokens (an oversized request runs alone)",
           f"KV transfer: {plan.link_sharing} sharing of one path per prefill instance at "
           f"{plan.path_bandwidth_bytes_per_s:.6g} B/s + {plan.link_latency_s:.3g} s, {plan.transfer_mode}"
           f"{FCFS_NOTE if plan.link_sharing == 'fcfs' else ''}; "
           "starts only once a decode instance has reserved the request's KV",
           f"decode: continuous batching, joins at step boundaries, {plan.decode_dispatch} reservation; "
           f"first token from {plan.first_token_from}"]
    if plan.transfer_mode == "layerwise" and plan.link_sharing == "fair":
        out.append("layerwise with fair sharing: bytes are served once the first layer is ready and the end is "
                   "clamped to the last layer plus its chunk (exact when link- or compute-bound throughout)")
    return out


#: deployment shape (its :data:`qmodel.topology.TOPOLOGIES` name) -> how its replay stations work, in words
SHAPE_NOTES = {
    "disaggregated": _disaggregated_notes,
    "colocated": lambda plan: [f"colocated: prefill-priority iterations of <= {plan.max_batch_tokens} tokens, "
                               "decode runs otherwise"],
    "chunked": lambda plan: [f"chunked: {plan.chunk_tokens}-token iterations = prefill_time_s(chunk + decode "
                             "tokens, chunk attention terms) + context part of decode_step_time_s"],
}


def _assumptions(plan: ReplayPlan, trace: Trace) -> list[str]:
    """The modelling choices behind the numbers, printed with every result."""
    out = ["KV memory: each request reserves prompt + output tokens and a batch slot (worst case, no preemption)",
           "statistics exclude requests arriving in the warm-up fraction; time averages use warm-up..last arrival",
           "Little's law is checked on the sample path over that window, each sojourn clipped to it: "
           f"exact at any run length, so a gap above {LITTLE_TOLERANCE:g} (round-off) is a replay bug"]
    out += SHAPE_NOTES[plan.topology](plan)
    if plan.prefix_law == "mixture":
        out.append(f"prefix cache: a seeded {plan.prefix_hit_fraction:g} of the requests skip "
                   f"floor({plan.prefix_hit_ratio} x prompt) tokens, the rest none")
    elif trace.hash_ids is not None and plan.prefix_cache_blocks > 0:
        out.append(f"prefix cache: per-instance LRU of {plan.prefix_cache_blocks} blocks of "
                   f"{trace.block_tokens} tokens keyed by the trace's hash_ids (longest cached leading run)")
    elif plan.prefix_hit_ratio > 0:
        out.append(f"prefix cache: floor({plan.prefix_hit_ratio} x prompt) tokens skipped per request")
    return out


def summarize(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, stations: list, window, seed: int,
               warmup_fraction: float) -> ReplayResult:
    arrival = np.asarray(req.arrival)
    out = np.asarray(req.output)
    t_first = np.asarray(req.t_first)
    t_last = np.asarray(req.t_last)
    dropped = np.asarray(req.dropped)
    done = np.isfinite(t_last) & ~dropped
    measured = done & (arrival >= window[0])
    ttft = (t_first - arrival)[measured]
    multi = measured & (out > 1)
    tpot = ((t_last - t_first) / np.maximum(out - 1, 1))[multi]
    e2e = (t_last - arrival)[measured]
    ok_ttft = ttft <= plan.slo_ttft_s
    # TBT = (e2e - TTFT)/L (slo.tpot_definition = per_token) next to TPOT = (e2e - TTFT)/(L - 1)
    tbt = ((t_last - t_first) / out)[multi]
    per = np.maximum(out - 1, 1) if plan.tpot_definition != "per_token" else out
    tpot_all = np.where(out > 1, (t_last - t_first) / per, 0.0)[measured]
    ok_tpot = tpot_all <= plan.slo_tpot_s
    nm = int(measured.sum())
    span = window[1] - window[0]
    fin_in = done & (t_last >= window[0]) & (t_last <= window[1])
    reports = [_station_report(st, servers, arrival, measured, window) for st, servers in stations]
    warnings = []
    unfinished = int((~done & ~dropped).sum())
    if unfinished:
        warnings.append(f"{unfinished} request(s) never finished: the event list emptied with work left")
    if dropped.any():
        warnings.append(f"{int(dropped.sum())} request(s) dropped: prompt + output exceed one instance's KV memory "
                        f"({plan.decode_kv_capacity_tokens} tokens)")
    arrivals_in = int(((arrival >= window[0]) & (arrival <= window[1]) & ~dropped).sum())
    if span > 0 and fin_in.sum() < 0.95 * arrivals_in:
        warnings.append(f"the deployment did not keep up: {int(fin_in.sum())} completions against {arrivals_in} "
                        "arrivals in the measurement window; it is likely unstable at this rate and the latencies "
                        "grow with the run length")
    little = max((s.little_rel_error for s in reports), default=0.0)
    if little > LITTLE_TOLERANCE:
        warnings.append(f"Little's law fails by {little:.3g} (tolerance {LITTLE_TOLERANCE:g}): the time-average "
                        "counts and the request marks disagree (a replay bug)")
    header = ReplayHeader(
        scenario=plan.name, scenario_sha256=plan.scenario_sha256, trace_sha256=trace.sha256, trace_source=trace.source,
        perf_sha256={k: m.fingerprint for k, m in (("prefill", plan.prefill_model), ("decode", plan.decode_model))
                     if m is not None},
        seed=seed, n_requests=req.n, warmup_fraction=warmup_fraction, engine=ENGINE, assumptions=list(plan.notes) + _assumptions(plan, trace))
    return ReplayResult(
        header=header, scenario=plan.name, topology=plan.topology,  # type: ignore[arg-type]
        rate_per_s=_f((req.n - 1) / arrival[-1], "rate_per_s") if req.n > 1 and arrival[-1] > 0 else 0.0,
        ttft=_dist(ttft, "ttft"), tpot=_dist(tpot, "tpot"), e2e=_dist(e2e, "e2e"),
        attainment=_f((ok_ttft & ok_tpot).mean(), "attainment") if nm else 0.0,
        ttft_attainment=_f(ok_ttft.mean(), "ttft_attainment") if nm else 0.0, tpot_attainment=_f(ok_tpot.mean(), "tpot_attainment") if nm else 0.0,
        throughput_rps=_f(fin_in.sum() / span, "throughput_rps") if span > 0 else 0.0,
        output_tokens_per_s=_f(out[fin_in].sum() / span, "output_tokens_per_s") if span > 0 else 0.0,
        stations=reports,
        precision=Precision(batches=20, ttft_mean_se_s=_batch_se(ttft), tpot_mean_se_s=_batch_se(tpot),
                            attainment_se=_batch_se((ok_ttft & ok_tpot).astype(float))),
        conservation=Conservation(arrived=req.n, completed=int(done.sum()), dropped=int(dropped.sum()),
                                  unfinished=unfinished, measured=nm, little_max_rel_error=_f(little, "little_max_rel_error")),
        gpus=plan.gpus, horizon_s=_f(np.nanmax(t_last) if done.any() else 0.0, "horizon_s"), events=sim.events,
        warnings=warnings, tbt=_dist(tbt, "tbt") if plan.tpot_definition else None)
