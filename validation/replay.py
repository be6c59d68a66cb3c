"""The replay: a deterministic event-driven simulation of a serving deployment over a trace.

It is the referee for the analytical engine, so it never calls it: it simulates per-request
batching, queues, link sharing, KV reservation and continuous batching directly, from the same
service-time model (``qmodel.perf``) and catalog entries.

Entry points: :func:`replay` (scenario -> :class:`~qmodel.validation.replay_result.ReplayResult`) and
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

import numpy as np

from qmodel.errors import InputError
from qmodel.perf.base import ServiceTimeModel
from qmodel.progress import ProgressFn
from qmodel.prefix_cache import mixture_draws
from qmodel.workload import reserved_output_tokens
from qmodel.scenario import Scenario, TraceArrivals
from qmodel.validation.replay_plan import ReplayPlan, build_plan, plan_from_resolved
from qmodel.validation.replay_run import progress_marks, wiring_for
from qmodel.validation.replay_stats import ENGINE, FCFS_NOTE  # noqa: F401  (importable from here as before)
from qmodel.validation.replay_stats import LITTLE_TOLERANCE, little_rel_error, summarize
from qmodel.validation.replay_result import ReplayResult
from qmodel.validation.stations.core import Requests, Sim, StepCache
from qmodel.validation.trace_types import Trace

#: second word of the think-time generator's seed sequence (the synthetic trace's arrivals use 1)
_THINK_STREAM = 2

__all__ = ["closed_think_times", "LITTLE_TOLERANCE", "little_rel_error", "ReplayPlan", "build_plan", "plan_from_resolved", "replay", "replay_requests", "request_table", "replay_plan", "simulate", "load_replay_trace"]


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
    offered = len(trace)
    trace, cut, rejected = _fit_context(scenario, trace, plan)
    result, req = simulate(plan, trace, seed=seed, warmup_fraction=warmup_fraction, progress=progress)
    if cut:
        note = (f"warning: {cut} of {len(trace)} requests exceed the {plan.context_tokens}-token context and were "
                "truncated to it (as the analytical engine does)")
        result = result.model_copy(update={"warnings": [*result.warnings, note]})
    if rejected:
        # the refused requests never reach a station; each one misses the SLO (as the solver counts them)
        f = rejected / offered
        note = (f"warning: {rejected} of {offered} requests exceed the {plan.context_tokens}-token context and were "
                "rejected (counted as SLO misses)")
        result = result.model_copy(update={
            "warnings": [*result.warnings, note], "rejected_fraction": f,
            **{k: getattr(result, k) * (1.0 - f) for k in ("attainment", "ttft_attainment", "tpot_attainment")}})
    return result, req


def _fit_context(scenario: Scenario, trace: Trace, plan: ReplayPlan) -> tuple[Trace, int, int]:
    """(the trace as served, requests truncated, requests rejected): outputs cut at the workload's
    ``max_output_tokens``, then the requests over the context window rejected (``context_overflow =
    reject``: removed from the trace, their arrivals thinned) or truncated, exactly as
    :func:`qmodel.build.resolve_workload` does."""
    from qmodel.workload import fit_context, over_context

    w = scenario.workload
    p0 = np.asarray(trace.prompt_tokens, dtype=np.int64)
    o0 = np.asarray(trace.output_tokens, dtype=np.int64)
    if w.max_output_tokens is not None:
        o0 = np.minimum(o0, int(w.max_output_tokens))
    rejected = 0
    if w.context_overflow == "reject":
        keep = ~over_context(p0, o0, plan.context_tokens)
        rejected = int(np.count_nonzero(~keep))
        if rejected:
            trace = trace.subset(keep)
            p0, o0 = p0[keep], o0[keep]
    p, o, cut = fit_context(p0, o0, plan.context_tokens)
    if not cut and w.max_output_tokens is None:
        return trace, 0, rejected
    return dataclasses.replace(trace, prompt_tokens=p, output_tokens=o,
                               meta={**trace.meta, "truncated_to_context": cut}), cut, rejected


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
    (:class:`~qmodel.validation.stations.core.StepCache`): same numbers, several times faster.
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
    think = closed_think_times(plan, len(trace), seed)
    if plan.closed_concurrency:
        # A closed loop's arrival times are an outcome of the run. The run is deterministic, so a
        # first pass finds them (and the measurement window they imply) and a second, identical
        # one is metered over that window.
        req = _run(run_plan, trace, arrival, prompt, output, think, seed, (0.0, math.inf), None)[0]
        arrival = np.asarray(req.arrival)
    t_end_arr = float(arrival[-1])
    window = (warmup_fraction * t_end_arr, t_end_arr)
    req, sim, stations = _run(run_plan, trace, arrival, prompt, output, think, seed, window, progress)
    return summarize(plan, trace, req, sim, stations, window, seed, warmup_fraction), req


def closed_think_times(plan: ReplayPlan, n: int, seed: int) -> list[float]:
    """A closed loop's think time after each of ``n`` requests: exponential of mean
    ``plan.think_time_s`` or that constant, from its own seeded stream (the dispatch draws keep
    theirs); empty for open arrivals."""
    if not plan.closed_concurrency:
        return []
    if plan.think_time_dist == "fixed" or plan.think_time_s == 0.0:
        return [float(plan.think_time_s)] * n
    return np.random.default_rng([seed, _THINK_STREAM]).exponential(plan.think_time_s, size=n).tolist()


def _run(plan: ReplayPlan, trace: Trace, arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
         think: list[float], seed: int, window: tuple[float, float],
         progress: ProgressFn | None) -> tuple[Requests, Sim, list]:
    """One pass of the event loop over the requests (see :func:`simulate`)."""
    req = Requests(arrival, prompt, output)
    req.think = think
    if plan.kv_reservation == "max_tokens":
        req.reserve = reserved_output_tokens(prompt, output, plan.max_output_tokens, plan.context_tokens).tolist()
    if plan.prefix_law == "mixture":
        req.prefix_hit = mixture_draws(req.n, plan.prefix_hit_fraction, seed)
    sim = Sim()
    rng = np.random.default_rng(seed)
    marks = progress_marks(sim, window[1], progress)
    stations = wiring_for(plan.topology)(plan, trace, req, sim, rng, window)
    sim.events -= marks  # the progress marks are not events of the system
    return req, sim, stations
