"""Synthetic request streams from a :class:`~qmodel.scenario.Workload`, for the replay.

``generate(workload, n_requests, seed, rate_per_s=None)`` returns a :class:`Trace` of
``n_requests`` requests; identical inputs give identical arrays.

Arrivals (first request at t = 0, then ``n - 1`` inter-arrival gaps):

* ``poisson``: gaps ~ Exponential(mean 1/λ).
* ``gamma``: gaps ~ Gamma(shape k = 1/cv², scale θ = cv²/λ), so E[gap] = kθ = 1/λ and
  CV = 1/√k = cv (cv = 1 is Poisson). Same parametrisation as DistServe's simulator.
* ``trace``: the trace's own arrival times, rescaled in time. The time factor is
  ``native_rate / target_rate`` where native_rate = (m − 1)/span of the *whole* trace, the same
  rate :func:`qmodel.workload.arrival_stats` gives the analytical model, and the target is
  ``rate_per_s`` (argument, then the workload's) or, if neither is set, ``native_rate /
  time_scale``. The first ``n`` requests are taken; if ``n`` exceeds the trace it is repeated,
  copy k shifted by k·(span + span/(m − 1)) (one mean gap between copies). Lengths-only traces
  (Vidur/ShareGPT/DistServe) have no arrivals: an InputError says so.

``rate_per_s`` (argument) overrides the workload's rate for every arrival kind.

Lengths:

* ``fixed``: every request the same.
* ``lognormal`` and ``preset``: :func:`qmodel.workload.lognormal_pairs` with ``seed``: i.i.d. draws
  of the law whose quadrature :func:`qmodel.workload.length_mix` gives the solver (random lengths, as
  real arrivals bring; tests/test_synth.py checks both against the closed-form mean).
* ``empirical``: (prompt, output) pairs resampled jointly (with replacement, uniform indices from
  ``default_rng(seed)``), keeping their correlation. When arrivals come from the *same* trace file,
  the trace's own pairing is kept in order instead (replaying the trace itself), with its Mooncake
  ``hash_ids``; repeated copies get fresh ids (offset per copy) so a repeat is not a free cache hit.

Random streams: lengths use ``numpy.random.default_rng(seed)``, arrivals
use ``default_rng([seed, 1])``, an independent stream, so changing the arrival process never
changes the lengths drawn for a seed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from qmodel.errors import InputError
from qmodel.scenario import (ClosedArrivals, EmpiricalLengths, FixedLengths, GammaArrivals, LognormalLengths, PoissonArrivals,
                             PresetLengths, TraceArrivals, Workload)
from qmodel.validation.trace_types import Trace
from qmodel.validation.traces import load_trace, require_arrivals
from qmodel.workload import lognormal_pairs

__all__ = ["generate", "same_trace_file"]

_ARRIVAL_STREAM = 1  # second word of the arrival generator's seed sequence


def _check(n_requests: int, seed: int, rate_per_s: float | None) -> None:
    if isinstance(n_requests, bool) or not isinstance(n_requests, (int, np.integer)) or n_requests < 1:
        raise InputError("n_requests", n_requests, "a whole number of requests >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError("seed", seed, "a whole number >= 0")
    if rate_per_s is not None and not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise InputError("rate_per_s", rate_per_s, "a finite rate > 0 requests per second")


def _renewal(n: int, gaps: np.ndarray) -> np.ndarray:
    out = np.empty(n, dtype=np.float64)
    out[0] = 0.0
    np.cumsum(gaps, out=out[1:])
    return out


def _tile_index(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(index into the trace, copy number) for n requests drawn in order from an m-request trace."""
    i = np.arange(n, dtype=np.int64)
    return i % m, i // m


def same_trace_file(a: TraceArrivals, lg: EmpiricalLengths) -> bool:
    """Whether the lengths file is the arrivals file (then the trace is replayed in its own order)."""
    if "auto" not in (a.format, lg.format) and a.format != lg.format:
        return False
    try:
        return Path(a.path).expanduser().resolve() == Path(lg.path).expanduser().resolve()
    except OSError:
        return a.path == lg.path


def _trace_arrivals(a: TraceArrivals, n: int, rate_per_s: float | None) -> tuple[np.ndarray, Trace, dict]:
    tr = require_arrivals(load_trace(a.path, a.format, jitter_seed=a.jitter_seed))
    m = len(tr)
    base = np.asarray(tr.arrival_s, dtype=np.float64)
    span = float(base[-1] - base[0]) if m > 1 else 0.0
    if span <= 0:
        raise InputError("workload.arrivals.path", a.path, "the trace's arrivals span no time; it cannot set a rate")
    native = (m - 1) / span
    target = rate_per_s or a.rate_per_s or native / a.time_scale
    idx, copy = _tile_index(n, m)
    period = span + span / (m - 1)
    t = (base[idx] - base[0] + copy * period) * (native / target)
    meta = {"trace": tr.source, "trace_sha256": tr.sha256, "native_rate_per_s": native,
            "time_scale": native / target, "copies": int(copy[-1]) + 1}
    return t, tr, meta


def _lengths(workload: Workload, n: int, seed: int, arrival_trace: Trace | None,
             ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, ...], ...] | None, dict]:
    lg = workload.lengths
    if isinstance(lg, FixedLengths):
        return (np.full(n, lg.prompt_tokens, dtype=np.int64), np.full(n, lg.output_tokens, dtype=np.int64), None, {})
    if isinstance(lg, LognormalLengths):
        p, o = lognormal_pairs(n, seed, lg.prompt_median_tokens, lg.prompt_sigma, 1, lg.prompt_max_tokens,
                               lg.output_median_tokens, lg.output_sigma, 1, lg.output_max_tokens, lg.correlation)
        return p, o, None, {}
    if isinstance(lg, PresetLengths):
        from qmodel.registry import get_workload

        pre = get_workload(lg.name).lengths
        p, o = lognormal_pairs(n, seed, pre.prompt_median_tokens, pre.prompt_sigma, pre.prompt_min_tokens,
                               pre.prompt_max_tokens, pre.output_median_tokens, pre.output_sigma,
                               pre.output_min_tokens, pre.output_max_tokens, pre.correlation)
        return p, o, None, {"preset": lg.name}
    if isinstance(lg, EmpiricalLengths):
        arr = workload.arrivals
        if arrival_trace is not None and isinstance(arr, TraceArrivals) and same_trace_file(arr, lg):
            m = len(arrival_trace)
            idx, copy = _tile_index(n, m)
            hashes = None
            if arrival_trace.hash_ids is not None:
                stride = 1 + max((max(h) for h in arrival_trace.hash_ids if h), default=0)
                hashes = tuple(arrival_trace.hash_ids[i] if c == 0 else tuple(h + int(c) * stride for h in arrival_trace.hash_ids[i])
                               for i, c in zip(idx.tolist(), copy.tolist()))
            return (np.asarray(arrival_trace.prompt_tokens)[idx].astype(np.int64),
                    np.asarray(arrival_trace.output_tokens)[idx].astype(np.int64), hashes, {"paired_with_arrivals": True})
        tr = load_trace(lg.path, lg.format)
        idx = np.random.default_rng(seed).integers(0, len(tr), size=n)
        return (np.asarray(tr.prompt_tokens)[idx].astype(np.int64), np.asarray(tr.output_tokens)[idx].astype(np.int64),
                None, {"lengths_trace": tr.source, "lengths_trace_sha256": tr.sha256})
    raise TypeError(type(lg))  # pragma: no cover - the schema admits no other kind


def generate(workload: Workload, n_requests: int, seed: int, rate_per_s: float | None = None) -> Trace:
    """``n_requests`` synthetic requests from ``workload`` (see the module docstring)."""
    _check(n_requests, seed, rate_per_s)
    n, seed = int(n_requests), int(seed)
    a = workload.arrivals
    rng = np.random.default_rng([seed, _ARRIVAL_STREAM])
    meta: dict = {"seed": seed, "n_requests": n, "arrivals": a.kind, "lengths": workload.lengths.kind,
                  "prefix_hit_ratio": workload.prefix_hit_ratio, "lengths_only": False}
    arrival_trace: Trace | None = None
    if isinstance(a, PoissonArrivals):
        rate = float(rate_per_s or a.rate_per_s)
        arrival = _renewal(n, rng.exponential(1.0 / rate, size=n - 1))
        meta["rate_per_s"], desc = rate, f"poisson {rate:.6g} req/s"
    elif isinstance(a, GammaArrivals):
        rate = float(rate_per_s or a.rate_per_s)
        shape, scale = 1.0 / (a.cv * a.cv), a.cv * a.cv / rate
        arrival = _renewal(n, rng.gamma(shape, scale, size=n - 1))
        meta.update(rate_per_s=rate, cv=a.cv)
        desc = f"gamma {rate:.6g} req/s cv {a.cv:.6g}"
    elif isinstance(a, TraceArrivals):
        arrival, arrival_trace, tmeta = _trace_arrivals(a, n, rate_per_s)
        meta.update(tmeta)
        meta["rate_per_s"] = tmeta["native_rate_per_s"] / tmeta["time_scale"]
        desc = f"trace {Path(a.path).name} at {meta['rate_per_s']:.6g} req/s"
    elif isinstance(a, ClosedArrivals):
        # the run sets a closed loop's arrival times (validation/replay_run._feed); the trace holds lengths
        arrival = np.zeros(n)
        meta.update(concurrency=a.concurrency, think_time_s=a.think_time_s, think_time_dist=a.think_time_dist)
        desc = f"closed loop of {a.concurrency} clients, think time {a.think_time_s:.6g} s ({a.think_time_dist})"
    else:  # pragma: no cover - the schema admits no other kind
        raise TypeError(type(a))
    prompt, output, hashes, lmeta = _lengths(workload, n, seed, arrival_trace)
    meta.update(lmeta)
    source = f"synthetic: {desc}, {workload.lengths.kind} lengths, {n} requests, seed {seed}"
    return Trace(arrival, prompt, output, source=source, format="synthetic",
                 sha256=Trace.digest_arrays(arrival, prompt, output), hash_ids=hashes,
                 block_tokens=arrival_trace.block_tokens if arrival_trace is not None else 512, meta=meta)
