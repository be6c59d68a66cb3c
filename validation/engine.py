"""The replay: a deterministic event-driven simulation of a serving deployment over a trace.

It is the referee for the analytical engine, so it never calls it: it simulates per-request
batching, queues, link sharing, KV reservation and continuous batching directly, from the same
service-time model (``qmodel.perf``) and catalog entries.

Entry points: :func:`replay` (scenario -> :class:`~qmodel.validation.report.ReplayResult`) and
:func:`replay_plan` (a fully resolved :class:`ReplayPlan`, for tests and the validation harness).

Topologies and their stations (``validation/stations/``):

* disaggregated: :class:`PrefillStation` -> :class:`KVTransferStation` -> :class:`DecodeStation`;
* colocated: :class:`ColocatedStation` (vLLM-like prefill-priority continuous batching);
* chunked: :class:`ChunkedStation` (Sarathi-like mixed iterations under a token budget).

Statistics exclude requests arriving in the first ``warmup_fraction`` of the trace's time span
(they are still simulated); time averages (utilization, number in station) use the window from
the warm-up time to the last arrival.

How it is checked (``tests/test_replay_*.py``): exact recursions (Lindley for a batch-of-one
prefill, the per-layer transfer recursion for dedicated/fcfs links, processor-sharing rate changes),
queueing anchors within 3 standard errors (M/D/1 wait 2.0 at rho 0.8; M/D^[1,4]/1 bulk service
Wq 1.3249; M/G/1 and M/G/1-PS link sojourns; decode GPS E[N] = r x/(1-x)), per-request equality
with an independent step-by-step simulator (``tests/des_micro.py``) for colocated, chunked and
slot-capped decode, byte-identical JSON across runs and processes, conservation and Little's law.
Speed: ``python benchmarks/bench_replay.py``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from qmodel.build import PoolRuntime, Resolved
from qmodel.errors import InputError, NumericalError
from qmodel.perf.base import ServiceTimeModel
from qmodel.progress import ProgressFn
from qmodel.result import DistSummary
from qmodel.scenario import (ChunkedDeployment, ColocatedDeployment, DecodePool, DisaggregatedDeployment,
                             Scenario, TraceArrivals, scenario_sha256)
from qmodel.validation.report import Conservation, Precision, ReplayHeader, ReplayResult, ReplayStation
from qmodel.validation.stations import (ChunkedStation, ColocatedStation, DecodeStation, KVTransferStation,
                                        PrefillStation)
from qmodel.validation.stations._core import Requests, Sim, StepCache
from qmodel.validation.stations.prefill import PrefixCache
from qmodel.validation.trace_types import Trace

__all__ = ["LITTLE_TOLERANCE", "little_rel_error", "ReplayPlan", "build_plan", "plan_from_resolved", "replay", "replay_requests", "request_table", "replay_plan", "simulate", "load_replay_trace"]

ENGINE = "qmodel-replay/1"
#: the Little's-law identity's relative gap allowed for round-off (see little_rel_error), any run length
LITTLE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ReplayPlan:
    """Everything the simulation needs, resolved from a scenario (catalog, perf models, memory).

    ``kv_bytes_per_token`` converts prompt tokens to transfer bytes; ``decode_kv_capacity_tokens``
    is one decode (or colocated/chunked) instance's KV memory in tokens.
    """

    topology: str
    decode_model: ServiceTimeModel
    decode_instances: int
    decode_kv_capacity_tokens: int
    decode_max_batch: int = 256
    decode_dispatch: str = "least_loaded"
    prefill_model: ServiceTimeModel | None = None
    prefill_instances: int = 1
    max_batch_tokens: int = 8192
    prefill_dispatch: str = "round_robin"
    chunk_tokens: int = 512
    kv_bytes_per_token: float = 0.0
    layers: int = 1
    path_bandwidth_bytes_per_s: float = 1.0
    link_latency_s: float = 0.0
    link_sharing: str = "fcfs"
    transfer_mode: str = "serialized"
    first_token_from: str = "prefill"
    prefix_hit_ratio: float = 0.0
    prefix_cache_blocks: int = 0
    slo_ttft_s: float = 1.0
    slo_tpot_s: float = 1.0
    gpus: int = 0
    name: str = "scenario"
    scenario_sha256: str = ""
    notes: tuple[str, ...] = field(default=())


# ---- resolving a scenario -------------------------------------------------------------------
#
# The replay takes its inputs from qmodel.build.resolve, the analytic engine's one resolution path
# (service-time models, KV capacity, link as used): only the resolved inputs are shared, never a
# station, so the replay stays an independent referee of the queueing formulas.

def _slo(scn: Scenario) -> dict:
    return {"slo_ttft_s": float(scn.slo.ttft_s), "slo_tpot_s": float(scn.slo.tpot_s), "name": scn.name,
            "scenario_sha256": scenario_sha256(scn)}


def _decode_part(pool: DecodePool, rt: PoolRuntime, model: ServiceTimeModel | None) -> dict:
    return {"decode_model": model or rt.service, "decode_instances": pool.instances, "decode_max_batch": pool.max_batch,
            "decode_dispatch": pool.dispatch, "decode_kv_capacity_tokens": int(rt.kv_capacity_tokens)}


def _cache_blocks(kv_capacity_tokens: float, override: int | None) -> int:
    """Mooncake prefix-block LRU of an instance: its KV capacity in 512-token blocks (for a
    colocated/chunked instance an upper bound: in vLLM cached blocks are the evictable part of the
    same memory; a prefill instance's is an HBM-only cache of its KV memory)."""
    return override if override is not None else int(kv_capacity_tokens) // 512


def build_plan(scn: Scenario, service_models: dict[str, ServiceTimeModel] | None = None,
               prefix_cache_blocks: int | None = None) -> ReplayPlan:
    """The :class:`ReplayPlan` of a scenario: :func:`plan_from_resolved` of :func:`qmodel.build.resolve`."""
    from qmodel.build import resolve

    return plan_from_resolved(resolve(scn), service_models, prefix_cache_blocks)


def plan_from_resolved(r: Resolved, service_models: dict[str, ServiceTimeModel] | None = None,
                       prefix_cache_blocks: int | None = None) -> ReplayPlan:
    """A :class:`ReplayPlan` carrying exactly the resolved inputs the analytic solver reads.

    ``service_models`` may override the pools' models by role ("prefill", "decode"; colocated and
    chunked use "decode"), for tests and the harness. The Mooncake prefix cache of an instance
    holds, by default, as many 512-token blocks as the instance's KV capacity (a prefill instance:
    90% of the memory weights and the reserve leave, :data:`qmodel.build.PREFILL_MEMORY_FRACTION`);
    pass ``prefix_cache_blocks`` to change it.
    """
    scn = r.scenario
    sm = dict(service_models or {})
    dep = scn.deployment
    base = _slo(scn)
    base["gpus"] = dep.gpus
    base["prefix_hit_ratio"] = float(scn.workload.prefix_hit_ratio)
    if isinstance(dep, DisaggregatedDeployment):
        pre, dec = r.pools["prefill"], r.pools["decode"]
        assert r.link is not None and r.link_bandwidth_bytes_per_s is not None
        return ReplayPlan(
            topology="disaggregated", prefill_model=sm.get("prefill") or pre.service,
            prefill_instances=dep.prefill.instances, max_batch_tokens=dep.prefill.max_batch_tokens,
            prefill_dispatch=dep.prefill.dispatch, kv_bytes_per_token=r.kv_bytes_per_token, layers=r.model.layers,
            path_bandwidth_bytes_per_s=float(r.link_bandwidth_bytes_per_s), link_latency_s=float(r.link.latency_s),
            link_sharing=dep.link_sharing, transfer_mode=dep.transfer_mode, first_token_from=dep.first_token_from,
            prefix_cache_blocks=_cache_blocks(pre.kv_capacity_tokens, prefix_cache_blocks),
            **_decode_part(dep.decode, dec, sm.get("decode")), **base)
    pool = r.pools["pool"]
    part = _decode_part(dep.pool, pool, sm.get("decode"))
    blocks = _cache_blocks(pool.kv_capacity_tokens, prefix_cache_blocks)
    if isinstance(dep, ColocatedDeployment):
        return ReplayPlan(topology="colocated", max_batch_tokens=dep.max_batch_tokens, **part, **base,
                          prefix_cache_blocks=blocks)
    if isinstance(dep, ChunkedDeployment):
        return ReplayPlan(topology="chunked", chunk_tokens=dep.chunk_tokens, **part, **base, prefix_cache_blocks=blocks)
    raise InputError("deployment.topology", getattr(dep, "topology", None),
                     "one of colocated, chunked, disaggregated")  # pragma: no cover


# ---- traces -----------------------------------------------------------------------------------

def load_replay_trace(scn: Scenario, n_requests: int = 20000, seed: int = 0) -> Trace:
    """The trace a scenario implies, from :func:`qmodel.validation.synth.generate`.

    For trace arrivals the run is capped at the trace's own length (replaying the file once, with
    its own (prompt, output) pairs and Mooncake hash_ids when the lengths come from the same file);
    ask for more requests than that only by passing a longer ``n_requests`` to ``generate``.
    """
    from qmodel.validation.synth import generate

    arr = scn.workload.arrivals
    n = n_requests
    if isinstance(arr, TraceArrivals):
        from qmodel.validation.traces import load_trace

        n = min(n_requests, len(load_trace(arr.path, arr.format)))
    return generate(scn.workload, n, seed)


# ---- running ----------------------------------------------------------------------------------

def replay(scenario: Scenario, trace: Trace | None = None, *, n_requests: int = 20000, seed: int = 0,
           warmup_fraction: float = 0.1, service_models: dict[str, ServiceTimeModel] | None = None,
           progress: ProgressFn | None = None) -> ReplayResult:
    """Replay ``scenario`` over ``trace`` (default: the scenario's own trace or a synthetic one).

    This is the function the validation harness, ``qmodel solve --check`` and the planner call.
    ``progress(done, 100, what)`` is called as simulated time passes each percent of the trace.
    """
    return replay_requests(scenario, trace, n_requests=n_requests, seed=seed, warmup_fraction=warmup_fraction,
                           service_models=service_models, progress=progress)[0]


def replay_requests(scenario: Scenario, trace: Trace | None = None, *, n_requests: int = 20000, seed: int = 0,
                    warmup_fraction: float = 0.1, service_models: dict[str, ServiceTimeModel] | None = None,
                    progress: ProgressFn | None = None) -> tuple[ReplayResult, Requests]:
    """:func:`replay` plus the per-request columns (see :func:`request_table`)."""
    if n_requests < 1:
        raise InputError("n_requests", n_requests, "a positive number of requests")
    if not 0.0 <= warmup_fraction < 1.0:
        raise InputError("warmup_fraction", warmup_fraction, "a fraction in [0, 1)")
    plan = build_plan(scenario, service_models)
    if trace is None:
        trace = load_replay_trace(scenario, n_requests, seed)
    trace, cut = _fit_context(scenario, trace)
    result, req = simulate(plan, trace, seed=seed, warmup_fraction=warmup_fraction, progress=progress)
    if cut:
        note = (f"warning: {cut} of {len(trace)} requests exceed {scenario.model}'s context and were truncated "
                "to it (as the analytical engine does)")
        result = result.model_copy(update={"warnings": [*result.warnings, note]})
    return result, req


def _fit_context(scenario: Scenario, trace: Trace) -> tuple[Trace, int]:
    """Truncate over-long requests to the model's window exactly as :func:`qmodel.build.resolve` does."""
    import dataclasses

    from qmodel.registry import get_model
    from qmodel.workload import fit_context

    p, o, cut = fit_context(trace.prompt_tokens, trace.output_tokens, get_model(scenario.model).max_context_tokens)
    if not cut:
        return trace, 0
    return dataclasses.replace(trace, prompt_tokens=p, output_tokens=o,
                               meta={**trace.meta, "truncated_to_context": cut}), cut


def request_table(req: Requests) -> dict[str, np.ndarray]:
    """Per-request columns (seconds from the first arrival; NaN where a stage did not happen):
    arrival, prompt/output/cached tokens, first and last token, TTFT, TPOT (NaN for one output
    token), and for each station its entry, service start and exit."""
    arrival = np.asarray(req.arrival)
    out = np.asarray(req.output)
    first, last = np.asarray(req.t_first), np.asarray(req.t_last)
    cols: dict[str, np.ndarray] = {
        "arrival_s": arrival, "prompt_tokens": np.asarray(req.prompt), "output_tokens": out,
        "cached_tokens": np.asarray(req.cached), "dropped": np.asarray(req.dropped, dtype=np.int64),
        "first_token_s": first, "last_token_s": last, "ttft_s": first - arrival,
        "tpot_s": np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan),
    }
    for name, (entry, start, exit_) in req.marks.items():
        cols[f"{name}_entry_s"] = np.asarray(entry)
        cols[f"{name}_start_s"] = np.asarray(start)
        cols[f"{name}_exit_s"] = np.asarray(exit_)
    return cols


def replay_plan(plan: ReplayPlan, trace: Trace, *, seed: int = 0, warmup_fraction: float = 0.1) -> ReplayResult:
    """Simulate a resolved plan over a trace; deterministic for given inputs and seed."""
    return simulate(plan, trace, seed=seed, warmup_fraction=warmup_fraction)[0]


def simulate(plan: ReplayPlan, trace: Trace, *, seed: int = 0, warmup_fraction: float = 0.1,
             cache: bool = True, progress: ProgressFn | None = None) -> tuple[ReplayResult, Requests]:
    """:func:`replay_plan` plus the per-request columns (first/last token times, station marks).

    ``cache`` memoises the service-time model at the integer arguments the replay uses
    (:class:`~qmodel.validation.stations._core.StepCache`): same numbers, several times faster.
    """
    run_plan = plan
    if cache:
        run_plan = dataclasses.replace(
            plan, decode_model=StepCache(plan.decode_model),
            prefill_model=None if plan.prefill_model is None else StepCache(plan.prefill_model))
    if len(trace) == 0:
        raise InputError("trace", trace.source, "a trace with at least one request")
    arrival = np.asarray(trace.arrival_s, dtype=float)
    arrival = arrival - arrival[0]
    prompt = np.maximum(np.asarray(trace.prompt_tokens, dtype=np.int64), 1)
    output = np.maximum(np.asarray(trace.output_tokens, dtype=np.int64), 1)
    t_end_arr = float(arrival[-1])
    window = (warmup_fraction * t_end_arr, t_end_arr)
    req = Requests(arrival, prompt, output)
    sim = Sim()
    rng = np.random.default_rng(seed)
    marks = _progress_marks(sim, t_end_arr, progress)
    if plan.topology == "disaggregated":
        stations = _run_disaggregated(run_plan, trace, req, sim, rng, window)
    elif plan.topology == "colocated":
        stations = _run_single(run_plan, trace, req, sim, rng, window, ColocatedStation)
    else:
        stations = _run_single(run_plan, trace, req, sim, rng, window, ChunkedStation)
    sim.events -= marks  # the progress marks are not events of the system
    return _summarize(plan, trace, req, sim, stations, window, seed, warmup_fraction), req


def _progress_marks(sim: Sim, t_end: float, progress: ProgressFn | None, steps: int = 100) -> int:
    """Schedule ``progress(i, steps, ...)`` at each i/steps of the arrival span; returns how many.
    Scheduled before any arrival, they shift every real event's sequence number alike, so the order
    of real events (and every output) is the same with or without them."""
    if progress is None:
        return 0
    for i in range(1, steps + 1):
        sim.at(t_end * i / steps, lambda k: progress(k, steps, "of the arrivals"), i)
    return steps


def _feed(sim: Sim, req: Requests, admit) -> None:
    """Schedule arrivals one at a time (keeps the heap small)."""
    arrival = req.arrival
    n = req.n

    def arrive(r: int) -> None:
        if r + 1 < n:
            sim.at(arrival[r + 1], arrive, r + 1)
        admit(r)

    sim.at(arrival[0], arrive, 0)


def _run_disaggregated(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, rng: np.random.Generator,
                       window: tuple[float, float]) -> list:
    from_prefill = plan.first_token_from == "prefill"
    decode = DecodeStation(sim, req, plan.decode_model, plan.decode_instances, plan.decode_kv_capacity_tokens,
                           plan.decode_max_batch, plan.decode_dispatch, rng, not from_prefill, window)
    layerwise = plan.transfer_mode == "layerwise"
    layers = max(1, plan.layers) if layerwise else 1
    kv = KVTransferStation(sim, req, plan.prefill_instances, plan.path_bandwidth_bytes_per_s, plan.link_latency_s,
                           plan.link_sharing, layers, decode, decode.ready, window)
    decode.on_release = kv.retry
    bpt = plan.kv_bytes_per_token
    output = req.output
    prompt = req.prompt

    def needs_decode(r: int) -> bool:
        return not (from_prefill and output[r] == 1)

    def batch_start(i: int, batch: list[int], t_s: float, dur: float) -> None:
        items = [(r, bpt * prompt[r]) for r in batch if needs_decode(r)]
        if items:
            sim.at(t_s + dur / layers, kv.enter_batch, (i, t_s + dur, items))

    def batch_done(i: int, batch: list[int]) -> None:
        t = sim.now
        items = []
        for r in batch:
            if from_prefill:
                req.t_first[r] = t
                if output[r] == 1:
                    req.t_last[r] = t
                    continue
            items.append((r, bpt * prompt[r]))
        if items and not layerwise:
            kv.enter_batch((i, t, items))

    cache = PrefixCache(plan.prefill_instances, plan.prefix_hit_ratio, trace.hash_ids, trace.block_tokens,
                        plan.prefix_cache_blocks if trace.hash_ids is not None else 0)
    prefill = PrefillStation(sim, req, plan.prefill_model, plan.prefill_instances, plan.max_batch_tokens,
                             plan.prefill_dispatch, rng, cache, window, batch_start if layerwise else None, batch_done)

    def admit(r: int) -> None:
        if needs_decode(r) and not decode.fits_ever(r):
            req.dropped[r] = True
            return
        prefill.arrive(r)

    _feed(sim, req, admit)
    sim.run()
    return [(prefill, plan.prefill_instances), (kv, plan.prefill_instances), (decode, plan.decode_instances)]


def _run_single(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, rng: np.random.Generator,
                window: tuple[float, float], cls: type[ColocatedStation] | type[ChunkedStation]) -> list:
    cache = PrefixCache(plan.decode_instances, plan.prefix_hit_ratio, trace.hash_ids, trace.block_tokens,
                        plan.prefix_cache_blocks if trace.hash_ids is not None else 0)
    st = cls(sim, req, plan, rng, window, cache)

    def admit(r: int) -> None:
        if not st.fits_ever(r):
            req.dropped[r] = True
            return
        st.arrive(r)

    _feed(sim, req, admit)
    sim.run()
    return [(st, plan.decode_instances)]


# ---- statistics -------------------------------------------------------------------------------

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


def _assumptions(plan: ReplayPlan, trace: Trace) -> list[str]:
    """The modelling choices behind the numbers, printed with every result."""
    out = ["KV memory: each request reserves prompt + output tokens and a batch slot (worst case, no preemption)",
           "statistics exclude requests arriving in the warm-up fraction; time averages use warm-up..last arrival",
           "Little's law is checked on the sample path over that window, each sojourn clipped to it: "
           f"exact at any run length, so a gap above {LITTLE_TOLERANCE:g} (round-off) is a replay bug"]
    if plan.topology == "disaggregated":
        out += [f"prefill: per-instance FCFS queues, {plan.prefill_dispatch} dispatch, batches of <= "
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
    elif plan.topology == "colocated":
        out.append(f"colocated: prefill-priority iterations of <= {plan.max_batch_tokens} tokens, decode runs otherwise")
    else:
        out.append(f"chunked: {plan.chunk_tokens}-token iterations = prefill_time_s(chunk + decode tokens, chunk "
                   "attention terms) + context part of decode_step_time_s")
    if trace.hash_ids is not None and plan.prefix_cache_blocks > 0:
        out.append(f"prefix cache: per-instance LRU of {plan.prefix_cache_blocks} blocks of "
                   f"{trace.block_tokens} tokens keyed by the trace's hash_ids (longest cached leading run)")
    elif plan.prefix_hit_ratio > 0:
        out.append(f"prefix cache: floor({plan.prefix_hit_ratio} x prompt) tokens skipped per request")
    return out


def _summarize(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, stations: list, window, seed: int,
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
    tpot_all = np.where(out > 1, (t_last - t_first) / np.maximum(out - 1, 1), 0.0)[measured]
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
        warnings=warnings)
