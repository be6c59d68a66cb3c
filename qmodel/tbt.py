"""TBT = (e2e - TTFT)/L next to TPOT = (e2e - TTFT)/(L - 1) (docs/methods.md, "TPOT and TBT").

vLLM's ``bench serve`` reports TPOT over the L - 1 intervals after the first token; some papers and
dashboards divide the same decode time by all L tokens ("time between tokens", TBT). For a request
of L >= 2 tokens, TBT = TPOT (L - 1)/L. The stations give the TPOT law; the TBT law is read from it
with the factor f = (L - 1)/L drawn from the length law independently of TPOT:

    P(TBT <= y) = sum_k w_k P(TPOT <= y / f_k),     E[TBT] = E[TPOT] E[f],

over the requests with L >= 2 (the population TPOT is defined on; an L = 1 request has no decode
time). Exact where TPOT does not depend on L: every fixed-length law, and the disaggregated decode
pool's quasi-static TPOT (a step time set by the batch, not by the request); elsewhere TPOT's own
dependence on L (a stall spread over L - 1 tokens) is dropped, an approximation. The factor law is
compressed to at most :data:`MAX_NODES` equally weighted quantile groups (each its mean factor): the
distinct values when there are fewer. ``slo.tpot_definition = per_token`` checks the TPOT target
against this law; setting the field (either value) adds the TBT summary to the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qmodel.dist import GridDist

__all__ = ["MAX_NODES", "TBTFactors", "tbt_factors", "tbt_cdf", "tbt_summary"]

MAX_NODES = 32


@dataclass(frozen=True)
class TBTFactors:
    """f = (L - 1)/L of the requests with L >= 2, as nodes and weights (summing to 1)."""

    f: np.ndarray
    w: np.ndarray

    @property
    def mean(self) -> float:
        return float(np.dot(self.f, self.w))


def tbt_factors(output_tokens: np.ndarray) -> TBTFactors:
    """The factor law of an equally weighted output sample (module doc)."""
    L = np.asarray(output_tokens, dtype=float).ravel()
    L = L[L >= 2]
    if L.size == 0:
        return TBTFactors(np.array([1.0]), np.array([1.0]))
    vals, counts = np.unique((L - 1.0) / L, return_counts=True)
    if vals.size <= MAX_NODES:
        return TBTFactors(vals, counts / counts.sum())
    f = np.sort((L - 1.0) / L)
    groups = np.array_split(f, MAX_NODES)
    return TBTFactors(np.array([g.mean() for g in groups]), np.array([g.size for g in groups]) / f.size)


def tbt_cdf(tpot: GridDist, y: float, factors: TBTFactors) -> float:
    """P(TBT <= y) = sum_k w_k P(TPOT <= y / f_k)."""
    return float(np.dot(factors.w, np.asarray(tpot.cdf(y / factors.f), dtype=float)))


def tbt_summary(tpot: GridDist, factors: TBTFactors) -> dict[str, float]:
    """Mean and p50/p90/p99 of TBT (quantiles by bisection on :func:`tbt_cdf`, to 1e-9 relative)."""
    out = {"mean": tpot.mean_s * factors.mean}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        lo = float(tpot.quantile(q)) * float(factors.f.min())
        hi = float(tpot.quantile(q)) * float(factors.f.max())
        lo, hi = min(lo, hi), max(lo, hi)
        # P(TBT <= f_min Q_TPOT(q)) <= q <= P(TBT <= f_max Q_TPOT(q)): the quantile lies between
        for _ in range(100):
            if hi - lo <= 1e-9 * max(hi, 1e-300):
                break
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if tbt_cdf(tpot, mid, factors) >= q else (mid, hi)
        out[name] = hi
    return out
