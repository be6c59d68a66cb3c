"""Summary statistics of a :class:`Trace`, as ``qmodel trace stats`` prints them.

Definitions (the same as the data README's, so the numbers can be checked against it):

* duration = last arrival − first arrival; mean rate = (n − 1) / duration (arrivals per second
  between the first and last request; README rates agree with n / duration to 3 digits);
* inter-arrival CV = population std / mean of the gaps (numpy ``std``, ddof = 0);
* percentiles use numpy's default linear interpolation;
* prefix block hit ratio (infinite cache): over all prefix blocks of all requests, the fraction
  whose block is a hit, where request i's leading blocks hit while each has been seen in an
  earlier request (prefix caching reuses a prefix, so the first miss ends the run); every block
  of request i then enters the cache.

Lengths-only traces have no arrival statistics (they are reported as None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qmodel.validation.trace_types import Trace

__all__ = ["block_hit_ratio", "length_summary", "trace_stats"]

_PCTS = (50, 90, 99)


def block_hit_ratio(hash_ids: Sequence[Sequence[int]]) -> float:
    """Fraction of prefix blocks already cached, with an unbounded cache (see module docstring)."""
    seen: set[int] = set()
    hits = total = 0
    for blocks in hash_ids:
        k = 0
        while k < len(blocks) and blocks[k] in seen:
            k += 1
        hits += k
        total += len(blocks)
        seen.update(blocks)
    return hits / total if total else 0.0


def length_summary(x: np.ndarray) -> dict[str, float]:
    a = np.asarray(x, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, _PCTS)
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "min": float(a.min()), "max": float(a.max())}


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Count, arrival statistics, prompt/output length summaries and the prefix block hit ratio."""
    n = len(trace)
    lengths_only = bool(trace.meta.get("lengths_only"))
    out: dict[str, Any] = {
        "source": trace.source,
        "format": trace.format,
        "sha256": trace.sha256,
        "count": n,
        "lengths_only": lengths_only,
        "duration_s": None,
        "mean_rate_per_s": None,
        "interarrival_cv": None,
        "zero_gap_fraction": None,
    }
    if not lengths_only and n > 1:
        gaps = np.diff(np.asarray(trace.arrival_s, dtype=np.float64))
        out["duration_s"] = trace.duration_s
        out["mean_rate_per_s"] = trace.rate_per_s if trace.duration_s > 0 else None
        mean_gap = float(gaps.mean())
        out["interarrival_cv"] = float(gaps.std() / mean_gap) if mean_gap > 0 else None
        # Quantised traces (Mooncake's ~3 s slots) show up here; their raw CV is an artefact.
        out["zero_gap_fraction"] = float(np.mean(gaps == 0))
    out["prompt_tokens"] = length_summary(trace.prompt_tokens)
    out["output_tokens"] = length_summary(trace.output_tokens)
    out["prefix_block_hit_ratio"] = block_hit_ratio(trace.hash_ids) if trace.hash_ids is not None else None
    out["block_tokens"] = trace.block_tokens if trace.hash_ids is not None else None
    if trace.meta.get("skipped_lines"):
        out["skipped_lines"] = list(trace.meta["skipped_lines"])
    return out
