"""Workload realisation shared by the analytical engine and the replay.

:func:`length_mix` turns a :class:`~qmodel.scenario.Workload` into a :class:`LengthMix`: an
equally weighted sample of (prompt, output) token pairs (joint, so trace correlations survive).
Parametric mixes use a fixed-seed sample, so the same scenario always gives the same numbers.

:func:`arrival_stats` gives the mean rate and the squared coefficient of variation of
inter-arrival times, the two numbers the analytical stations take from the arrival process.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from qmodel.scenario import (EmpiricalLengths, FixedLengths, GammaArrivals, LognormalLengths, PoissonArrivals,
                             PresetLengths, TraceArrivals, Workload)

__all__ = ["LengthMix", "length_mix", "arrival_stats", "lognormal_pairs", "fit_context", "DEFAULT_SAMPLE"]

DEFAULT_SAMPLE = 4096


@dataclass(frozen=True)
class LengthMix:
    """Equally weighted joint sample of prompt and output lengths (tokens)."""

    prompt: np.ndarray
    output: np.ndarray
    sha256: str

    @property
    def mean_prompt(self) -> float:
        return float(self.prompt.mean())

    @property
    def mean_output(self) -> float:
        return float(self.output.mean())

    def __len__(self) -> int:
        return len(self.prompt)


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


def lognormal_pairs(n: int, seed: int, p_median: float, p_sigma: float, p_min: float, p_max: float,
                    o_median: float, o_sigma: float, o_min: float, o_max: float, corr: float) -> tuple[np.ndarray, np.ndarray]:
    """Correlated lognormal lengths, clipped to [min, max] and rounded to whole tokens (>= 1)."""
    rng = np.random.default_rng(seed)
    z1 = rng.standard_normal(n)
    z2 = corr * z1 + math.sqrt(max(0.0, 1.0 - corr * corr)) * rng.standard_normal(n)
    p = np.clip(np.rint(p_median * np.exp(p_sigma * z1)), max(1, p_min), p_max).astype(np.int64)
    o = np.clip(np.rint(o_median * np.exp(o_sigma * z2)), max(1, o_min), o_max).astype(np.int64)
    return p, o


def fit_context(prompt: np.ndarray, output: np.ndarray, max_context_tokens: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Truncate requests to the model's context window as a serving engine would.

    The prompt keeps at most ``max_context_tokens - 1`` tokens and the output what is left (at least
    one token). Returns (prompt, output, number of requests changed). The analytical engine and the
    replay both call this, so they always see the same lengths; callers report the count.
    """
    p = np.minimum(prompt, max_context_tokens - 1)
    o = np.clip(output, 1, max_context_tokens - p)
    changed = int(np.count_nonzero((p != prompt) | (o != output)))
    return p.astype(np.int64), o.astype(np.int64), changed


def length_mix(workload: Workload, n: int = DEFAULT_SAMPLE, seed: int = 0) -> LengthMix:
    """The workload's (prompt, output) mix as a joint sample."""
    lg = workload.lengths
    if isinstance(lg, FixedLengths):
        p = np.array([lg.prompt_tokens], dtype=np.int64)
        o = np.array([lg.output_tokens], dtype=np.int64)
    elif isinstance(lg, LognormalLengths):
        p, o = lognormal_pairs(n, seed, lg.prompt_median_tokens, lg.prompt_sigma, 1, lg.prompt_max_tokens,
                               lg.output_median_tokens, lg.output_sigma, 1, lg.output_max_tokens, lg.correlation)
    elif isinstance(lg, PresetLengths):
        from qmodel.registry import get_workload

        pre = get_workload(lg.name, "workload.lengths.name").lengths
        p, o = lognormal_pairs(n, seed, pre.prompt_median_tokens, pre.prompt_sigma, pre.prompt_min_tokens,
                               pre.prompt_max_tokens, pre.output_median_tokens, pre.output_sigma,
                               pre.output_min_tokens, pre.output_max_tokens, pre.correlation)
    elif isinstance(lg, EmpiricalLengths):
        from qmodel.validation.traces import load_trace

        tr = load_trace(lg.path, lg.format)
        p = np.asarray(tr.prompt_tokens, dtype=np.int64)
        o = np.asarray(tr.output_tokens, dtype=np.int64)
    else:  # pragma: no cover - the schema admits no other kind
        raise TypeError(type(lg))
    return LengthMix(p, o, _digest(p, o))


def arrival_stats(workload: Workload) -> tuple[float | None, float]:
    """(mean rate per second or None if unset, squared CV of inter-arrival times)."""
    a = workload.arrivals
    if isinstance(a, PoissonArrivals):
        return a.rate_per_s, 1.0
    if isinstance(a, GammaArrivals):
        return a.rate_per_s, a.cv * a.cv
    if isinstance(a, TraceArrivals):
        from qmodel.validation.traces import load_trace, require_arrivals

        # Lengths-only files (Vidur/ShareGPT/DistServe) load with all-zero times; refuse them
        # here rather than return a NaN rate.
        tr = require_arrivals(load_trace(a.path, a.format, jitter_seed=a.jitter_seed))
        t = np.asarray(tr.arrival_s, dtype=float)
        gaps = np.diff(np.sort(t))
        span = float(t.max() - t.min()) if len(t) > 1 else 0.0
        native = (len(t) - 1) / span if span > 0 else float("nan")
        ca2 = float(gaps.var() / gaps.mean() ** 2) if len(gaps) > 1 and gaps.mean() > 0 else 1.0
        rate = a.rate_per_s if a.rate_per_s else native / a.time_scale
        return rate, ca2
    raise TypeError(type(a))  # pragma: no cover
