"""Interpolation and median helpers shared by the measured-table models.

* :func:`interp_piecewise` / :func:`interp_piecewise_scalar`: piecewise-linear interpolation
  (optionally in log-log space) through measured points, continued linearly from the end segment
  outside them (never clamped), with a flag saying the query was extrapolated. The array and the
  scalar versions evaluate the same expressions (the replay calls one point at a time).
* :func:`median_groups`: repeated measurements of one setting reduced to their median.
* :func:`drop_non_monotone`: medians that are physically impossible (a larger batch of the same
  lengths finishing >10% faster than a smaller one) split off so they can be reported.
* :class:`TablePoint` / :func:`medians_as_points`: medians as ServiceTimeModel queries
  (calibration fits a roofline to them).
* :class:`MeasuredTableModel`: what the two table models (sweep, grid) share: their identity
  (kind, source, keys, SHA-256), the medians they reproduce (:meth:`~MeasuredTableModel.points`),
  the count of extrapolated queries and the ``describe()`` that reports them with their ranges.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from qmodel.arrays import median
from qmodel.perf.base import SCALAR_TYPES, ServiceTimeModel

__all__ = [
    "MeasuredTableModel",
    "SCALAR_TYPES",
    "TablePoint",
    "medians_as_points",
    "interp_piecewise",
    "interp_piecewise_scalar",
    "median_groups",
    "drop_non_monotone",
]


@dataclass(frozen=True)
class TablePoint:
    """One measured median in the ServiceTimeModel's coordinates (used by calibration)."""

    phase: str  # "prefill" or "decode"
    n: float  # requests in the prefill batch / sequences in the decode batch
    sum_tokens: float  # prefill: prompt tokens of the batch; decode: 0
    sum_sq_tokens: float  # prefill: sum of squared prompt lengths; decode: 0
    sum_context_tokens: float  # decode: context summed over sequences; prefill: 0
    time_s: float


class MeasuredTableModel(ServiceTimeModel):
    """The identity and reporting every measured-table model shares; a subclass calls
    :meth:`_identify` first in its constructor, sets ``prefill_medians`` and ``decode_medians``
    (batch, length, median seconds) and reports its axes' ranges in :meth:`ranges`."""

    prefill_medians: list[tuple[float, float, float]]
    decode_medians: list[tuple[float, float, float]]

    def _identify(self, *, sha256: str, source: str, kind: str, keys: dict[str, object] | None) -> None:
        self.kind = kind
        self.source = source
        self.keys = dict(keys or {})
        self._sha = sha256
        #: number of queries answered by extrapolation, per phase (reported by describe())
        self.extrapolated: dict[str, int] = {"prefill": 0, "decode": 0}

    def points(self) -> list[TablePoint]:
        """The medians the model reproduces, as ServiceTimeModel queries (for calibration and tests)."""
        return medians_as_points(self.prefill_medians, self.decode_medians)

    @property
    def fingerprint(self) -> str:
        return self._sha

    def ranges(self) -> dict[str, object]:
        """The measured axes' ranges (and what else the table reports) for :meth:`describe`."""
        return {}

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "source": self.source, **self.keys, "sha256": self._sha, **self.ranges(),
                "extrapolated_queries": dict(self.extrapolated)}


def medians_as_points(prefill_medians: Iterable[tuple[float, float, float]],
                      decode_medians: Iterable[tuple[float, float, float]]) -> list[TablePoint]:
    """Table medians as ServiceTimeModel queries: prefill (batch n, prompt p, time) as n equal
    prompts of p tokens; decode (batch n, mean context, time) as n sequences of that context."""
    out = [TablePoint("prefill", n, n * p, n * p * p, 0.0, t) for n, p, t in prefill_medians]
    out += [TablePoint("decode", n, 0.0, 0.0, n * ctx, t) for n, ctx, t in decode_medians]
    return out



def interp_piecewise(x: np.ndarray, xs: np.ndarray, ys: np.ndarray, loglog: bool) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-linear interpolation (optionally in log-log space) with linear end-segment extrapolation.

    Returns (values, outside-mask). ``xs`` is strictly increasing with at least two points.
    """
    lo, hi = xs[0], xs[-1]
    inside = (x >= lo) & (x <= hi)
    xc = np.clip(x, lo, hi)
    if loglog:
        val = np.exp(np.interp(np.log(xc), np.log(xs), np.log(ys)))
    else:
        val = np.interp(xc, xs, ys)
    # Outside: continue the end segment's secant in linear space.
    s_lo = (ys[1] - ys[0]) / (xs[1] - xs[0])
    s_hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    val = np.where(x < lo, ys[0] + s_lo * (x - lo), val)
    val = np.where(x > hi, ys[-1] + s_hi * (x - hi), val)
    return val, ~inside


def interp_piecewise_scalar(x: float, xs: list[float], ys: list[float], loglog: bool) -> tuple[float, bool]:
    """Scalar twin of :func:`interp_piecewise` (pure Python, for the replay's one-at-a-time calls)."""
    lo, hi = xs[0], xs[-1]
    if x < lo:
        return ys[0] + (ys[1] - ys[0]) / (xs[1] - xs[0]) * (x - lo), True
    if x > hi:
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - hi), True
    j = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
    if loglog:
        lx0, lx1, ly0, ly1 = math.log(xs[j]), math.log(xs[j + 1]), math.log(ys[j]), math.log(ys[j + 1])
        return math.exp(ly0 + (ly1 - ly0) / (lx1 - lx0) * (math.log(x) - lx0)), False
    return ys[j] + (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]), False


def median_groups(rows: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """(n, x, t) rows -> one (n, x, median t) per distinct (n, x)."""
    groups: dict[tuple[float, float], list[float]] = defaultdict(list)
    for n, x, t in rows:
        groups[(n, x)].append(t)
    return [(n, x, median(ts)) for (n, x), ts in sorted(groups.items())]


#: A median more than this fraction below a smaller batch's median at the same length is impossible.
_MONOTONE_TOLERANCE = 0.10


def drop_non_monotone(meds: list[tuple[float, float, float]]) -> tuple[list[tuple[float, float, float]],
                                                                       list[dict[str, float]]]:
    """Split (n, x, t) medians into kept ones and physically impossible ones.

    At a fixed per-request length ``x``, a batch of more requests does strictly more work, so its
    step cannot be faster than a smaller batch's. A median more than 10% (run-to-run noise is a
    few percent) below the slowest smaller batch at the same ``x`` is a failed or mislabelled
    run and is left out of the model and the calibration points, and reported. splitwise-sim has
    one: Llama2-70B TP2 on A100, 64 x 512 tokens in 0.79 s against 6.6 s for 32 x 512.
    """
    keep, bad = [], []
    by_x: dict[float, list[tuple[float, float, float]]] = defaultdict(list)
    for row in meds:
        by_x[row[1]].append(row)
    dropped = set()
    for rows in by_x.values():
        slowest = 0.0
        for n, x, t in sorted(rows):
            if t < (1.0 - _MONOTONE_TOLERANCE) * slowest:
                dropped.add((n, x))
                bad.append({"batch_size": n, "length": x, "time_s": t, "slower_smaller_batch_s": slowest})
            else:
                slowest = max(slowest, t)
    keep = [r for r in meds if (r[0], r[1]) not in dropped]
    return keep, bad

